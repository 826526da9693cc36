"""n-step transitions for a vector of envs, with Ape-X initial priorities.

Edges (checked against an independent reference in tests/test_nstep.py):
  * a terminated episode does not bootstrap: its last transitions carry discount 0;
  * a truncated episode bootstraps from its final observation with gamma ** k,
    k being the number of rewards summed (k <= n);
  * no transition crosses an episode boundary; an episode shorter than n emits
    one transition per step, each with fewer than n rewards;
  * slots end and restart independently.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

TRANSITION_FIELDS = ("obs", "action", "reward", "discount", "next_obs", "slot", "version", "td")


@dataclasses.dataclass
class _Pending:
    obs: np.ndarray
    action: int
    reward: float
    q_taken: float
    version: int


class NStepAccumulator:
    """Turns per-step vector-env data into n-step transitions.

    Call `add` once per vector step, after the envs stepped. It returns the
    transitions completed by that step as a dict of stacked arrays (see
    TRANSITION_FIELDS), or None when none completed:

      obs, action       the first step of the transition
      reward            sum_{k<K} gamma^k r_k over K <= n rewards
      discount          gamma^K, or 0 if the episode terminated within the K steps
      next_obs          the observation to bootstrap from (the final one at an end)
      slot, version     which env slot produced it and the parameter version acted with
      td                reward + discount * next_value - q_taken (the actor's n-step TD)

    Example:
        >>> acc = NStepAccumulator(num_envs=1, n=2, discount=0.5)
        >>> o = np.zeros((1, 1), np.float32)
        >>> acc.add(o, [0], [0.0], [0], [1.0], [False], [False], o + 1, [0.0])  # 1 step: none yet
        >>> out = acc.add(o + 1, [1], [0.0], [0], [1.0], [True], [False], o + 2, [0.0])
        >>> out['reward'].tolist(), out['discount'].tolist()
        ([1.5, 1.0], [0.0, 0.0])
    """

    def __init__(self, num_envs: int, n: int, discount: float):
        if n < 1:
            raise ValueError(f"n={n} is invalid: expected an integer >= 1")
        self.num_envs = num_envs
        self.n = n
        self.discount = float(discount)
        self._pending: list[collections.deque[_Pending]] = [
            collections.deque() for _ in range(num_envs)
        ]
        self._powers = self.discount ** np.arange(n + 1)

    def pending(self, slot: int) -> int:
        """Steps of `slot` not yet emitted."""
        return len(self._pending[slot])

    def _emit(
        self,
        out: dict[str, list],
        slot: int,
        entries: collections.deque[_Pending],
        start: int,
        next_obs: np.ndarray,
        bootstrap: bool,
        next_value: float,
    ) -> None:
        first = entries[start]
        k = len(entries) - start
        ret = 0.0
        for j in range(k):
            ret += self._powers[j] * entries[start + j].reward
        disc = float(self._powers[k]) if bootstrap else 0.0
        out["obs"].append(first.obs)
        out["action"].append(first.action)
        out["reward"].append(ret)
        out["discount"].append(disc)
        out["next_obs"].append(next_obs)
        out["slot"].append(slot)
        out["version"].append(first.version)
        out["td"].append(ret + disc * next_value - first.q_taken)

    def add(
        self, obs, actions, q_taken, versions, rewards, terminated, truncated, next_obs, next_value
    ):
        """Adds one vector step; returns the completed transitions or None.

        Args:
          obs: [E, ...] observations the actions were taken in.
          actions: [E] actions taken.
          q_taken: [E] Q(obs, action) of the acting network (for the initial priority).
          versions: [E] parameter version the action was chosen with.
          rewards: [E] rewards received.
          terminated, truncated: [E] episode-end flags of this step.
          next_obs: [E, ...] the observation after the step; for a slot whose
            episode ended, the FINAL observation (not the reset one).
          next_value: [E] max_a Q(next_obs, a) of the acting network.
        """
        out: dict[str, list] = {k: [] for k in TRANSITION_FIELDS}
        for i in range(self.num_envs):
            q = self._pending[i]
            q.append(
                _Pending(
                    obs[i], int(actions[i]), float(rewards[i]), float(q_taken[i]), int(versions[i])
                )
            )
            if terminated[i] or truncated[i]:
                entries = list(q)
                boot = not bool(terminated[i])
                for start in range(len(entries)):
                    self._emit(out, i, entries, start, next_obs[i], boot, float(next_value[i]))
                q.clear()
            elif len(q) == self.n:
                self._emit(out, i, q, 0, next_obs[i], True, float(next_value[i]))
                q.popleft()
        if not out["obs"]:
            return None
        return {
            "obs": np.stack(out["obs"]),  # the env's dtype: uint8 images stay uint8
            "action": np.asarray(out["action"], np.int32),
            "reward": np.asarray(out["reward"], np.float32),
            "discount": np.asarray(out["discount"], np.float32),
            "next_obs": np.stack(out["next_obs"]),
            "slot": np.asarray(out["slot"], np.int32),
            "version": np.asarray(out["version"], np.int64),
            "td": np.asarray(out["td"], np.float32),
        }

    def reset_slot(self, slot: int) -> None:
        """Drops the pending steps of `slot` (e.g. after its env was rebuilt)."""
        self._pending[slot].clear()
