"""The Ape-X actor: n-step transitions with initial priorities from the actor's
own Q-values (the bootstrap value comes from the same forward pass that picks
the next action). Each transition records the parameter version of the
Q-values its action was picked with: the actor's own, or the inference
server's (actor.inference='central')."""

from __future__ import annotations

import numpy as np

from apex.agents.acting import Actor
from apex.agents.dqn.networks import ACTING
from apex.replay.nstep import NStepAccumulator
from apex.replay.tables import stores_frames


class VectorActor(Actor):
    """Steps `envs_per_actor` envs, writes n-step transitions (apex.agents.acting.Actor).

    With stacked image frames (apex.replay.tables.stores_frames) the writer
    stores each frame once: the accumulator then carries each observation's
    position in its slot's frame stream instead of the stack itself, and the
    writer turns positions into references to frame windows.
    """

    network = ACTING

    def _stores_frames(self, spec) -> bool:
        return stores_frames(self._config, spec)

    def _make_accumulator(self) -> NStepAccumulator:
        return NStepAccumulator(
            self._num_envs, self._config.replay.n_step, self._config.replay.discount
        )

    def step(self) -> int:
        """One vector step of every env; returns the number of transitions written."""
        if self._sync_weights() or self._q is None:
            self._q, _, self._q_version = self._forward(self._obs)
        q, version = self._q, self._q_version
        e = self._num_envs
        greedy = q.argmax(axis=1)
        explore = self._rng.random(e) < self._epsilons
        actions = np.where(explore, self._rng.integers(0, self._num_actions, size=e), greedy)
        q_taken = q[np.arange(e), actions]
        out = self._envs.step(actions)
        next_obs, rewards = out.next_obs, out.rewards
        terminated, truncated, reset_obs = out.terminated, out.truncated, out.reset_obs
        # One forward pass serves both the next action and the bootstrap value:
        # rows of ended episodes get their reset observation; truncated ones
        # also need Q(final obs), computed for those rows only.
        acting_obs = next_obs.copy()
        for j, o in reset_obs.items():
            acting_obs[j] = o
        q_next, _, next_version = self._forward(acting_obs)
        next_value = q_next.max(axis=1)
        trunc_rows = [j for j in reset_obs if truncated[j] and not terminated[j]]
        if trunc_rows:
            next_value[trunc_rows] = self._forward(next_obs[trunc_rows])[0].max(axis=1)
        frames = self._frame_writer()
        if frames is None:
            obs_in, next_in = self._obs, next_obs
        else:  # positions in each slot's frame stream stand for the stacks
            if self._positions is None:
                r = self._config.replay
                self._positions = frames.start_frames(self._obs, r.n_step, r.frame_compression)
            obs_in, next_in = self._positions, frames.append_frames(next_obs, self._obs)
        batch = self._acc.add(
            obs_in,
            actions,
            q_taken,
            np.full(e, version),
            rewards,
            terminated,
            truncated,
            next_in,
            next_value,
        )
        written = 0 if batch is None else self._write(batch)
        if frames is not None:  # after the ended episodes' items: their frames go first
            for j, o in reset_obs.items():
                next_in[j] = frames.restart_frames(j, o)
            self._positions = next_in
        self._end_episodes(rewards, reset_obs)
        self._obs = acting_obs
        self._q, self._q_version = q_next, next_version
        self.env_steps += e
        self.items_written += written
        return written

    def priority_td(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return nstep_td(batch)


def nstep_td(batch: dict[str, np.ndarray]) -> np.ndarray:
    """The n-step TD of each transition of `batch` (NStepAccumulator.add's output)
    with the acting Q-values: reward + discount * max_a Q(next_obs, a) - Q(obs, action)."""
    return batch["reward"] + batch["discount"] * batch["next_value"] - batch["q_taken"]
