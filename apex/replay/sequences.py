"""Overlapping fixed-length sequences for a vector of envs (R2D2).

Per env slot, a sequence starts at every episode step that is a multiple of
the period P and covers L steps: consecutive items of one episode overlap by
L - P steps. A sequence never crosses an episode boundary: when an episode
ends, every sequence still open is emitted with its tail zero-padded (mask 0).
Each item carries the recurrent state the actor had before its first step, so
the learner can start its unroll where the actor was.

An open sequence at an episode's end is only emitted if at least one of its
steps is trained: steps from the burn-in on, or from the first step for a
sequence starting at the episode's first step when `skip_burn_in_at_start`
(that state is exact, the zero state). Edges are tested case by case in
tests/test_sequences.py.
"""

from __future__ import annotations

import numpy as np

SEQUENCE_FIELDS = (
    "obs",
    "action",
    "reward",
    "discount",
    "mask",
    "q",
    "state_h",
    "state_c",
    "start_step",
    "version",
    "slot",
)


class _Slot:
    def __init__(self) -> None:
        self.step = 0  # index in the episode of the next step
        self.base = 0  # episode index of buffer[0]
        self.buffer: list[tuple] = []  # (obs, action, reward, discount, q)
        self.starts: list[tuple[int, np.ndarray, np.ndarray, int]] = []  # (step, h, c, version)


class SequenceAccumulator:
    """Turns per-step vector-env data into padded, overlapping sequences.

    Args:
      num_envs: env slots of the actor.
      length: L, steps per sequence.
      period: P, steps between two starts (1 <= P <= L).
      burn_in: steps at the front of a sequence that only warm up the state.
      skip_burn_in_at_start: a sequence starting at an episode's step 0 is
        trained on all its steps (see the module docstring).
    """

    def __init__(
        self,
        num_envs: int,
        length: int,
        period: int,
        burn_in: int = 0,
        skip_burn_in_at_start: bool = True,
    ):
        if not 1 <= period <= length:
            raise ValueError(f"period={period} must be in [1, length={length}]")
        self._length = int(length)
        self._period = int(period)
        self._burn_in = int(burn_in)
        self._skip = bool(skip_burn_in_at_start)
        self._slots = [_Slot() for _ in range(num_envs)]

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        discount: np.ndarray,
        q: np.ndarray,
        state: tuple[np.ndarray, np.ndarray],
        version: np.ndarray,
        done: np.ndarray,
    ) -> dict[str, np.ndarray] | None:
        """Adds one vector step; returns the sequences it completed, stacked, or None.

        Args:
          obs: [E, ...] observations the actions were chosen on.
          action, reward: [E] the action taken and the reward received.
          discount: [E] gamma, or 0 where the episode terminated at this step.
          q: [E, A] the actor's Q-values at obs (for initial priorities).
          state: (h, c), each [E, H]: the actor's state BEFORE this step.
          version: [E] parameter version that chose the action.
          done: [E] the episode ended at this step (terminated or truncated).
        """
        out: list[tuple] = []
        for j, slot in enumerate(self._slots):
            if slot.step % self._period == 0:
                if not slot.starts:
                    slot.base, slot.buffer = slot.step, []
                slot.starts.append((slot.step, state[0][j].copy(), state[1][j].copy(), version[j]))
            slot.buffer.append((obs[j], action[j], reward[j], discount[j], q[j]))
            slot.step += 1
            if slot.step - slot.starts[0][0] == self._length:
                out.append(self._emit(j, slot, slot.starts.pop(0)))
                if slot.starts:  # drop the steps no open sequence needs any more
                    del slot.buffer[: slot.starts[0][0] - slot.base]
                    slot.base = slot.starts[0][0]
                else:
                    slot.buffer, slot.base = [], slot.step
            if done[j]:
                for start in slot.starts:
                    first_trained = 0 if (self._skip and start[0] == 0) else self._burn_in
                    if slot.step - start[0] > first_trained:
                        out.append(self._emit(j, slot, start))
                self._slots[j] = _Slot()
        if not out:
            return None
        return {name: np.stack([row[i] for row in out]) for i, name in enumerate(SEQUENCE_FIELDS)}

    def _emit(self, j: int, slot: _Slot, start: tuple) -> tuple:
        s, h, c, version = start
        rows = slot.buffer[s - slot.base : s - slot.base + self._length]
        n = len(rows)
        pad = self._length - n
        obs = np.stack([r[0] for r in rows])
        q = np.stack([r[4] for r in rows])
        if pad:
            obs = np.concatenate([obs, np.zeros((pad, *obs.shape[1:]), obs.dtype)])
            q = np.concatenate([q, np.zeros((pad, *q.shape[1:]), q.dtype)])

        def col(i: int, dtype) -> np.ndarray:
            a = np.zeros(self._length, dtype)
            a[:n] = [r[i] for r in rows]
            return a

        mask = np.zeros(self._length, np.float32)
        mask[:n] = 1.0
        return (
            obs,
            col(1, np.int32),
            col(2, np.float32),
            col(3, np.float32),
            mask,
            q,
            h,
            c,
            np.int32(s),
            np.int64(version),
            np.int32(j),
        )
