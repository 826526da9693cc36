"""n-step transitions for a vector of envs, with what an initial priority needs.

Edges (checked against an independent reference in tests/test_nstep.py):
  * a terminated episode does not bootstrap: its last transitions carry discount 0;
  * a truncated episode bootstraps from its final observation with gamma ** k,
    k being the number of rewards summed (k <= n);
  * no transition crosses an episode boundary; an episode shorter than n emits
    one transition per step, each with fewer than n rewards;
  * slots end and restart independently.
"""

from __future__ import annotations

import numpy as np

TRANSITION_FIELDS = (
    "obs",
    "action",
    "reward",
    "discount",
    "next_obs",
    "slot",
    "version",
    "q_taken",
    "next_value",
)


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
          q_taken           the acting network's Q(obs, action) (float64)
          next_value        the acting network's max_a Q(next_obs, a) (float64)

    The agent turns the last two into its initial priority (the n-step TD:
    apex.agents.dqn.acting.VectorActor.priority_td).

        Rows come slot by slot (ascending); an ended slot gives all its pending
        transitions, oldest first. The pending steps live in numpy ring buffers
        indexed [step % n, slot], so a step costs a few array operations whatever
        the number of envs; only slots whose episode ended are handled one by one.

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
        self._powers = self.discount ** np.arange(n + 1)
        self._count = np.zeros(num_envs, np.int64)  # pending steps per slot (<= n)
        self._t = -1  # index of the newest step
        self._obs: np.ndarray | None = None  # [n, E, *obs], made on the first add
        self._action = np.zeros((n, num_envs), np.int32)
        self._reward = np.zeros((n, num_envs), np.float64)
        self._q = np.zeros((n, num_envs), np.float64)
        self._version = np.zeros((n, num_envs), np.int64)

    def pending(self, slot: int) -> int:
        """Steps of `slot` not yet emitted."""
        return int(self._count[slot])

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
        n = self.n
        obs = np.asarray(obs)
        if self._obs is None:
            self._obs = np.zeros((n, *obs.shape), obs.dtype)
        self._t += 1
        now = self._t % n
        self._obs[now] = obs
        self._action[now] = actions
        self._reward[now] = rewards
        self._q[now] = q_taken
        self._version[now] = versions
        self._count += 1
        terminated = np.asarray(terminated, bool)
        ended = terminated | np.asarray(truncated, bool)
        next_value = np.asarray(next_value, np.float64)
        full = np.flatnonzero((self._count == n) & ~ended)
        ended_slots = np.flatnonzero(ended)
        if len(full) == 0 and len(ended_slots) == 0:
            return None
        parts = []
        if len(full):
            # Slots with n pending steps and no end: one transition each, from
            # the oldest step, summed oldest first (as a scalar loop would).
            rows = (self._t - n + 1 + np.arange(n)) % n
            ret = np.zeros(len(full))
            for j in range(n):
                ret += self._powers[j] * self._reward[rows[j], full]
            disc = np.full(len(full), self._powers[n])
            parts.append((full, np.full(len(full), rows[0]), ret, disc))
            self._count[full] = n - 1
        for i in ended_slots:
            c = int(self._count[i])
            rows = (self._t - c + 1 + np.arange(c)) % n
            r = self._reward[rows, i]
            ret = np.zeros(c)
            for start in range(c):
                for j in range(c - start):
                    ret[start] += self._powers[j] * r[start + j]
            k = c - np.arange(c)
            disc = np.zeros(c) if terminated[i] else self._powers[k]
            parts.append((np.full(c, i), rows, ret, disc))
            self._count[i] = 0
        if len(parts) == 1:
            slot, row, ret, disc = parts[0]
        else:
            slot, row, ret, disc = (np.concatenate(x) for x in zip(*parts))
            order = np.argsort(slot, kind="stable")
            slot, row, ret, disc = slot[order], row[order], ret[order], disc[order]
        return {
            "obs": self._obs[row, slot],  # the env's dtype: uint8 images stay uint8
            "action": self._action[row, slot],
            "reward": ret.astype(np.float32),
            "discount": disc.astype(np.float32),
            "next_obs": np.asarray(next_obs)[slot],
            "slot": slot.astype(np.int32),
            "version": self._version[row, slot],
            "q_taken": self._q[row, slot],
            "next_value": next_value[slot],
        }

    def reset_slot(self, slot: int) -> None:
        """Drops the pending steps of `slot` (e.g. after its env was rebuilt)."""
        self._count[slot] = 0
