"""An actor's envs in two halves stepped in turn (actor.overlap=True).

While one half's envs step (ALE's C++ threads, or gymnasium_async's
subprocesses: outside Python and its lock), the actor computes the other
half's Q-values, picks their next actions and sends them: acting overlaps
stepping (EnvPool's send/recv, the Sebulba pattern). Every slot still sees its
own steps in order, with the same seeds as in one piece; what it stores is the
same as without the overlap (tests/test_vector_actor.py).

The Ape-X DQN actor uses it (apex.agents.dqn.acting); `check_overlap` refuses
what it cannot run, before anything launches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from apex.config import ApexConfig
from apex.errors import ConfigError
from apex.vector_envs import SlotEnvs, SlotStep, check_vectorization, make_slots

OVERLAP_MODES = ("ale", "gymnasium_async")


def check_overlap(config: ApexConfig) -> None:
    """ConfigError naming actor.overlap where the overlapped loop cannot run."""
    if not config.actor.overlap:
        return
    field = "actor.overlap"
    if config.agent != "apex_dqn":
        raise ConfigError(
            field, True, f"False for agent {config.agent!r} (the overlapped loop is Ape-X DQN's)"
        )
    if config.actor.envs_per_actor < 2:
        raise ConfigError(
            field,
            True,
            f"False with actor.envs_per_actor={config.actor.envs_per_actor} (two halves)",
        )
    mode = check_vectorization(config.env)
    if mode not in OVERLAP_MODES:
        raise ConfigError(
            field,
            True,
            f"False with env.vectorization's {mode!r}: only {list(OVERLAP_MODES)} step outside "
            "Python, which the overlap needs",
        )


class SplitSlots(SlotEnvs):
    """E slots as two vector envs of E // 2 and E - E // 2 slots (`halves`, over
    `slices` of the E slots); `step` steps both (sent together), `send_half` and
    `recv_half` one."""

    def __init__(self, config: ApexConfig, num_envs: int, faults: bool = False):
        h = num_envs // 2
        self.halves = (
            make_slots(config.env, h, faults),
            make_slots(config.env, num_envs - h, faults),
        )
        self.slices = (slice(0, h), slice(h, num_envs))
        self.num_envs = num_envs
        self.mode = self.halves[0].mode
        self.spec = self.halves[0].spec
        self.num_actions = self.halves[0].num_actions

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        seeds = [int(s) for s in seeds]
        return np.concatenate([h.reset(seeds[sl]) for h, sl in zip(self.halves, self.slices)])

    def send_half(self, i: int, actions: np.ndarray) -> None:
        self.halves[i].send(actions)

    def recv_half(self, i: int) -> SlotStep:
        return self.halves[i].recv()

    def step(self, actions: np.ndarray) -> SlotStep:
        for i, sl in enumerate(self.slices):
            self.send_half(i, np.asarray(actions)[sl])
        return merge([self.recv_half(i) for i in range(2)], self.slices)

    def close(self) -> None:
        for h in self.halves:
            h.close()


def merge(outs: Sequence[SlotStep], slices: Sequence[slice]) -> SlotStep:
    """The SlotStep of all slots from one per half (reset_obs keyed by slot)."""
    reset_obs = {}
    for out, sl in zip(outs, slices):
        reset_obs.update({sl.start + j: o for j, o in out.reset_obs.items()})
    return SlotStep(
        np.concatenate([o.next_obs for o in outs]),
        np.concatenate([o.rewards for o in outs]),
        np.concatenate([o.terminated for o in outs]),
        np.concatenate([o.truncated for o in outs]),
        reset_obs,
    )
