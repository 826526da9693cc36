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


def epsilon_bands(epsilons: np.ndarray, edges: tuple[float, ...] | list[float]) -> np.ndarray:
    """Band index of each epsilon: 0 below edges[0], i for edges[i-1] <= eps < edges[i].

    Example:
        >>> epsilon_bands(np.array([0.001, 0.05, 0.4]), (0.01, 0.1)).tolist()
        [0, 1, 2]
    """
    return np.searchsorted(np.asarray(edges, np.float64), np.asarray(epsilons), side="right")


def band_labels(edges: tuple[float, ...] | list[float]) -> list[str]:
    """Human-readable bands: ['eps<0.01', '0.01<=eps<0.1', 'eps>=0.1'] for (0.01, 0.1)."""
    if not edges:
        return ["all"]
    labels = [f"eps<{edges[0]:g}"]
    labels += [f"{a:g}<=eps<{b:g}" for a, b in zip(edges[:-1], edges[1:])]
    return labels + [f"eps>={edges[-1]:g}"]
