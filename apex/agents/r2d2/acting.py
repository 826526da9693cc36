"""The R2D2 actor: a vector of epsilon-greedy envs with one recurrent state
per slot, one batched forward pass per step, overlapping sequences out, with
initial priorities from R2D2's targets on the actor's own Q-values, in numpy
(the learner's TF form: apex.agents.r2d2.losses)."""

from __future__ import annotations

import numpy as np

from apex.agents.acting import Actor
from apex.agents.r2d2.networks import ACTING
from apex.replay.sequences import SequenceAccumulator
from apex.replay.tables import sequence_stores_frames


class RecurrentActor(Actor):
    """Steps `envs_per_actor` envs with an LSTM policy; writes prioritized sequences.

    Same arguments as apex.agents.acting.Actor; `writer` is a SequenceWriter. Initial
    priorities are computed here from the actor's own Q-values with R2D2's
    eta mixture (replay.insert_priority='actor_td'). With image observations
    (apex.replay.tables.sequence_stores_frames) the writer stores each
    observation once: the accumulator then carries each observation's
    position in its slot's stream instead of the observation itself.
    """

    network = ACTING

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._state = self._qs.initial_state(self._num_envs)
        self._discount = float(self._config.replay.discount)

    def _stores_frames(self, spec) -> bool:
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

    def priority_td(self, batch: dict[str, np.ndarray]) -> np.ndarray:
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
        out = self._envs.step(actions)
        rewards = out.rewards
        discounts = np.where(out.terminated, 0.0, self._discount).astype(np.float32)
        done = out.terminated | out.truncated
        ended = sorted(out.reset_obs)
        next_obs = out.next_obs  # the stored type already (apex.vector_envs)
        for j in ended:
            next_obs[j] = out.reset_obs[j]
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
        written = 0 if batch is None else self._write(batch)
        if frames is not None:  # after the ended episodes' padding
            self._positions = frames.append_frames(next_obs, episode_starts=ended)
        self._end_episodes(rewards, ended)
        self._obs = next_obs
        self.env_steps += e
        self.items_written += written
        return written


# The actor's initial priorities: R2D2's targets in numpy, as the learner's loss
# computes them in TF (apex.agents.r2d2.losses: the sequence conventions; tests
# check the two forms agree).


def rescale_np(x: np.ndarray, eps: float) -> np.ndarray:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018)."""
    return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + eps * x


def unrescale_np(x: np.ndarray, eps: float) -> np.ndarray:
    """The exact inverse of h."""
    if eps == 0:
        return np.sign(x) * ((np.abs(x) + 1.0) ** 2 - 1.0)
    root = (np.sqrt(1.0 + 4.0 * eps * (np.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return np.sign(x) * (root**2 - 1.0)


def _shift_np(x: np.ndarray, i: int) -> np.ndarray:
    """x[:, t + i] at position t, zero past the end."""
    if i == 0:
        return x
    out = np.zeros_like(x)
    out[:, :-i] = x[:, i:]
    return out


def sequence_td_np(
    q: np.ndarray,
    action: np.ndarray,
    reward: np.ndarray,
    discount: np.ndarray,
    mask: np.ndarray,
    n: int,
    rescaling: bool,
    eps: float,
    q_target: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(td [B, T], valid [B, T]) from Q-values [B, T, A] (q_target defaults to q)."""
    q = np.asarray(q, np.float64)
    q_target = q if q_target is None else np.asarray(q_target, np.float64)
    b, t_len = mask.shape
    mask = mask.astype(np.float64)
    disc = discount.astype(np.float64)
    complete = mask * np.maximum(_shift_np(mask, 1), (disc == 0).astype(np.float64))
    alive = np.ones((b, t_len))
    dprod = np.ones((b, t_len))
    ret = np.zeros((b, t_len))
    k = np.zeros((b, t_len), np.int64)
    boot_disc = np.zeros((b, t_len))
    for i in range(n):
        alive = alive * _shift_np(complete, i)
        ret += alive * dprod * _shift_np(reward.astype(np.float64), i)
        dprod = dprod * np.where(alive > 0, _shift_np(disc, i), 1.0)
        k += alive.astype(np.int64)
        boot_disc = np.where(alive > 0, dprod, boot_disc)
    idx = np.minimum(np.arange(t_len)[None, :] + k, t_len - 1)
    rows = np.arange(b)[:, None]
    best = q[rows, idx].argmax(axis=-1)
    boot = q_target[rows, idx, best]
    if rescaling:
        target = rescale_np(ret + boot_disc * unrescale_np(boot, eps), eps)
    else:
        target = ret + boot_disc * boot
    q_taken = np.take_along_axis(q, action[..., None].astype(np.int64), axis=-1)[..., 0]
    valid = (k >= 1).astype(np.float64)
    return (target - q_taken) * valid, valid


def train_mask_np(valid: np.ndarray, start_step: np.ndarray, burn_in: int, skip_at_start: bool):
    """Steps that are trained: valid targets after the burn-in (or all, at episode start)."""
    t = np.arange(valid.shape[1])[None, :]
    trained = (t >= burn_in) | (skip_at_start & (np.asarray(start_step)[:, None] == 0))
    return valid * trained


def sequence_priorities_np(td: np.ndarray, weight: np.ndarray, eta: float) -> np.ndarray:
    """eta * max_t |td| + (1 - eta) * mean_t |td| over the steps where weight is 1."""
    a = np.abs(td) * weight
    count = np.maximum(weight.sum(axis=1), 1.0)
    return eta * a.max(axis=1) + (1.0 - eta) * a.sum(axis=1) / count
