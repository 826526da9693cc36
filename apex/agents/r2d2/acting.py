"""The R2D2 actor: a vector of epsilon-greedy envs with one recurrent state
per slot, one batched forward pass per step, overlapping sequences out."""

from __future__ import annotations

import numpy as np

from apex.agents.acting import Actor
from apex.agents.r2d2.losses import sequence_priorities_np, sequence_td_np, train_mask_np
from apex.envs import to_observation
from apex.replay.sequences import SequenceAccumulator


class RecurrentActor(Actor):
    """Steps `envs_per_actor` envs with an LSTM policy; writes prioritized sequences.

    Same arguments as apex.agents.acting.Actor; `writer` is a SequenceWriter. Initial
    priorities are computed here from the actor's own Q-values with R2D2's
    eta mixture (replay.insert_priority='actor_td'). With image observations
    (apex.replay.tables.sequence_stores_frames) the writer stores each
    observation once: the accumulator then carries each observation's
    position in its slot's stream instead of the observation itself.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._state = self._qs.initial_state(self._num_envs)
        self._discount = float(self._config.replay.discount)

    def _stores_frames(self, spec) -> bool:
        from apex.replay.tables import sequence_stores_frames

        return sequence_stores_frames(self._config, spec)

    def _make_accumulator(self) -> SequenceAccumulator:
        q = self._config.r2d2
        return SequenceAccumulator(
            self._num_envs,
            q.sequence_length,
            q.sequence_period,
            q.burn_in,
            q.skip_burn_in_at_episode_start,
        )

    def sequence_td(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """The eta-mixed |TD| of each sequence of `batch`, from the actor's Q-values."""
        q = self._config.r2d2
        td, valid = sequence_td_np(
            batch["q"],
            batch["action"],
            batch["reward"],
            batch["discount"],
            batch["mask"],
            self._config.replay.n_step,
            q.value_rescaling,
            q.value_rescaling_epsilon,
        )
        weight = train_mask_np(
            valid, batch["start_step"], q.burn_in, q.skip_burn_in_at_episode_start
        )
        return sequence_priorities_np(td, weight, q.priority_eta)

    def step(self) -> int:
        """One vector step of every env; returns the number of sequences written."""
        self._sync_weights()
        e = self._num_envs
        state = self._state
        q, next_state, version = self._forward(self._obs, state)
        greedy = q.argmax(axis=1)
        explore = self._rng.random(e) < self._epsilons
        actions = np.where(explore, self._rng.integers(0, self._num_actions, size=e), greedy)
        rewards = np.empty(e, np.float32)
        discounts = np.full(e, self._discount, np.float32)
        done = np.zeros(e, bool)
        next_obs = np.empty_like(self._obs)
        ended = []
        for j, env in enumerate(self._envs):
            o, r, term, trunc, _ = env.step(int(actions[j]))
            rewards[j] = r
            if term:
                discounts[j] = 0.0
            if term or trunc:
                done[j] = True
                ended.append(j)
                o, _ = env.reset()
            next_obs[j] = to_observation(o)
        frames = self._frame_writer()
        obs_in = self._obs
        if frames is not None:  # positions in each slot's stream stand for the obs
            if self._positions is None:
                r = self._config.r2d2
                self._positions = frames.start_frames(
                    self._obs,
                    r.sequence_length,
                    r.sequence_period,
                    self._config.replay.frame_compression,
                )
            obs_in = self._positions
        batch = self._acc.add(
            obs_in,
            actions,
            rewards,
            discounts,
            q,
            state,
            np.full(e, version),
            done,
        )
        h, c = next_state
        if ended:  # a new episode starts from the zero state
            h, c = h.copy(), c.copy()
            h[ended] = 0.0
            c[ended] = 0.0
        self._state = (h, c)
        written = 0 if batch is None else self._write(batch, self.sequence_td(batch))
        if frames is not None:  # after the ended episodes' padding
            self._positions = frames.append_frames(next_obs, episode_starts=ended)
        self._end_episodes(rewards, ended)
        self._obs = next_obs
        self.env_steps += e
        self.items_written += written
        return written
