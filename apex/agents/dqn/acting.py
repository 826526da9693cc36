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
from apex.vector_halves import merge


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
        if self._config.actor.overlap:
            return self._step_overlapped()
        if self._sync_weights() or self._q is None:
            self._q, _, self._q_version = self._forward(self._obs)
        q, version = self._q, self._q_version
        actions = self._pick(q)
        q_taken = q[np.arange(self._num_envs), actions]
        out = self._envs.step(actions)
        acting_obs, q_next, next_value, next_version = self._bootstrap(out)
        written = self._record(
            actions, q_taken, np.full(self._num_envs, version), out, acting_obs, next_value
        )
        self._q, self._q_version = q_next, next_version
        return written

    def _pick(self, q: np.ndarray) -> np.ndarray:
        """Epsilon-greedy actions of every slot from its Q-values."""
        e = self._num_envs
        explore = self._rng.random(e) < self._epsilons
        return np.where(explore, self._rng.integers(0, self._num_actions, size=e), q.argmax(axis=1))

    def _bootstrap(self, out) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(acting obs, their Q-values, each transition's bootstrap value, version).

        One forward pass serves both the next action and the bootstrap value:
        rows of ended episodes get their reset observation; truncated ones also
        need Q(final obs), computed for those rows only."""
        acting_obs = out.next_obs.copy()
        for j, o in out.reset_obs.items():
            acting_obs[j] = o
        q_next, _, version = self._forward(acting_obs)
        next_value = q_next.max(axis=1)
        trunc_rows = [j for j in out.reset_obs if out.truncated[j] and not out.terminated[j]]
        if trunc_rows:
            next_value[trunc_rows] = self._forward(out.next_obs[trunc_rows])[0].max(axis=1)
        return acting_obs, q_next, next_value, version

    # actor.overlap: the actions each half was sent with (actions, q_taken, versions)
    _sent: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _step_overlapped(self) -> int:
        """One step of every env, in two halves (apex.vector_halves): each half's
        next Q-values and actions are computed while the other half steps. The
        random draws are those of the one-piece step, in the same order."""
        envs, e = self._envs, self._num_envs
        self._sync_weights()
        if self._sent is None:  # the first step: every slot's first actions, both halves off
            q, _, version = self._forward(self._obs)
            first = self._pick(q)
            self._sent = (first, q[np.arange(e), first], np.full(e, version))
            for i, sl in enumerate(envs.slices):
                envs.send_half(i, first[sl])
        actions, q_taken, versions = self._sent
        explore = self._rng.random(e) < self._epsilons
        randoms = self._rng.integers(0, self._num_actions, size=e)
        # The dtypes of the one-piece step's arrays (Q-values as the network gives them).
        acting_obs, next_value = np.empty_like(self._obs), np.empty_like(q_taken)
        next_actions, next_q = np.empty_like(actions), np.empty_like(q_taken)
        next_versions = np.empty_like(versions)
        outs = []
        for i, sl in enumerate(envs.slices):
            out = envs.recv_half(i)
            acting_obs[sl], q_next, next_value[sl], next_versions[sl] = self._bootstrap(out)
            chosen = np.where(explore[sl], randoms[sl], q_next.argmax(axis=1))
            envs.send_half(i, chosen)  # it steps while the other half's Q-values are computed
            next_actions[sl], next_q[sl] = chosen, q_next[np.arange(len(chosen)), chosen]
            outs.append(out)
        self._sent = (next_actions, next_q, next_versions)
        out = merge(outs, envs.slices)
        return self._record(actions, q_taken, versions, out, acting_obs, next_value)

    def _record(self, actions, q_taken, versions, out, acting_obs, next_value) -> int:
        """Adds one step of every slot to the n-step accumulator and writes the
        transitions it completes; the acting obs become the current ones."""
        e = self._num_envs
        next_obs, rewards, reset_obs = out.next_obs, out.rewards, out.reset_obs
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
            versions,
            rewards,
            out.terminated,
            out.truncated,
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
        self.env_steps += e
        self.items_written += written
        return written

    def priority_td(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return nstep_td(batch)


def nstep_td(batch: dict[str, np.ndarray]) -> np.ndarray:
    """The n-step TD of each transition of `batch` (NStepAccumulator.add's output)
    with the acting Q-values: reward + discount * max_a Q(next_obs, a) - Q(obs, action)."""
    return batch["reward"] + batch["discount"] * batch["next_value"] - batch["q_taken"]
