"""The Ape-X epsilon ladder."""

from __future__ import annotations

import numpy as np


def apex_epsilons(num_slots: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Epsilon of every env slot: eps_i = base ** (1 + alpha * i / (M - 1)).

    Slots are numbered across all actors (slot = actor * envs_per_actor + env).
    With a single slot (M = 1) the formula is undefined; that slot gets `base`.

    Example:
        >>> apex_epsilons(3).round(4).tolist()
        [0.4, 0.0162, 0.0007]
    """
    if num_slots < 1:
        raise ValueError(f"num_slots={num_slots} is invalid: expected an integer >= 1")
    if num_slots == 1:
        return np.array([base], dtype=np.float64)
    i = np.arange(num_slots, dtype=np.float64)
    return base ** (1.0 + alpha * i / (num_slots - 1))


def slot_epsilons(
    actor_id: int, envs_per_actor: int, num_actors: int, base: float, alpha: float
) -> np.ndarray:
    """The epsilons of one actor's env slots."""
    ladder = apex_epsilons(num_actors * envs_per_actor, base, alpha)
    return ladder[actor_id * envs_per_actor : (actor_id + 1) * envs_per_actor]
