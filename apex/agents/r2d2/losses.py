"""R2D2's targets: value rescaling, n-step double-Q TD errors over sequences
and eta-mixed sequence priorities. Each has a numpy form (the actors' initial
priorities) and a TF form (the learner); tests check they agree.

Sequence conventions (see apex.replay.tables.sequence_signature): step t has
reward r_t, discount d_t (gamma, or 0 where the episode terminated at t) and
mask m_t (1 real step, 0 padding). Transition t (s_t, a_t, r_t, s_t+1) is
complete when m_t = 1 and either s_t+1 is in the sequence (m_t+1 = 1) or the
episode terminated at t. The target of step t sums the k_t <= n complete
transitions that follow in a row and bootstraps from s_t+k (double Q):

    G_t = sum_{i<k} (prod_{j<i} d_t+j) r_t+i
    y_t = h(G_t + (prod_{j<k} d_t+j) h^-1(Q_target(s_t+k, argmax_a Q(s_t+k, a))))

A step is a target (valid) when k_t >= 1: the last step of a sequence, or of a
truncated episode, has no next observation and is not trained in that item.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def rescale_np(x: np.ndarray, eps: float) -> np.ndarray:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018)."""
    return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + eps * x


def unrescale_np(x: np.ndarray, eps: float) -> np.ndarray:
    """The exact inverse of h."""
    if eps == 0:
        return np.sign(x) * ((np.abs(x) + 1.0) ** 2 - 1.0)
    root = (np.sqrt(1.0 + 4.0 * eps * (np.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return np.sign(x) * (root**2 - 1.0)


def rescale_tf(x: tf.Tensor, eps: float) -> tf.Tensor:
    return tf.sign(x) * (tf.sqrt(tf.abs(x) + 1.0) - 1.0) + eps * x


def unrescale_tf(x: tf.Tensor, eps: float) -> tf.Tensor:
    if eps == 0:
        return tf.sign(x) * (tf.square(tf.abs(x) + 1.0) - 1.0)
    root = (tf.sqrt(1.0 + 4.0 * eps * (tf.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return tf.sign(x) * (tf.square(root) - 1.0)


def _shift_np(x: np.ndarray, i: int) -> np.ndarray:
    """x[:, t + i] at position t, zero past the end."""
    if i == 0:
        return x
    out = np.zeros_like(x)
    out[:, :-i] = x[:, i:]
    return out


def _shift_tf(x: tf.Tensor, i: int) -> tf.Tensor:
    if i == 0:
        return x
    if i >= x.shape[1]:
        return tf.zeros_like(x)
    return tf.pad(x[:, i:], [[0, 0], [0, i]])


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


def sequence_td_tf(
    q: tf.Tensor,
    q_target: tf.Tensor,
    action: tf.Tensor,
    reward: tf.Tensor,
    discount: tf.Tensor,
    mask: tf.Tensor,
    n: int,
    rescaling: bool,
    eps: float,
) -> tuple[tf.Tensor, tf.Tensor]:
    """The TF form of sequence_td_np; the target is not differentiated."""
    t_len = mask.shape[1]
    complete = mask * tf.maximum(_shift_tf(mask, 1), tf.cast(tf.equal(discount, 0.0), tf.float32))
    alive = tf.ones_like(mask)
    dprod = tf.ones_like(mask)
    ret = tf.zeros_like(mask)
    k = tf.zeros_like(mask, tf.int32)
    boot_disc = tf.zeros_like(mask)
    for i in range(n):
        alive = alive * _shift_tf(complete, i)
        ret += alive * dprod * _shift_tf(reward, i)
        dprod = dprod * tf.where(alive > 0, _shift_tf(discount, i), 1.0)
        k += tf.cast(alive, tf.int32)
        boot_disc = tf.where(alive > 0, dprod, boot_disc)
    idx = tf.minimum(tf.range(t_len)[None, :] + k, t_len - 1)
    q_next_online = tf.gather(q, idx, batch_dims=1)  # [B, T, A]
    q_next_target = tf.gather(q_target, idx, batch_dims=1)
    best = tf.argmax(q_next_online, axis=-1, output_type=tf.int32)
    boot = tf.gather(q_next_target, best, batch_dims=2)
    if rescaling:
        target = rescale_tf(ret + boot_disc * unrescale_tf(boot, eps), eps)
    else:
        target = ret + boot_disc * boot
    q_taken = tf.gather(q, action, batch_dims=2)
    valid = tf.cast(k >= 1, tf.float32)
    return (tf.stop_gradient(target) - q_taken) * valid, valid


def train_mask_np(valid: np.ndarray, start_step: np.ndarray, burn_in: int, skip_at_start: bool):
    """Steps that are trained: valid targets after the burn-in (or all, at episode start)."""
    t = np.arange(valid.shape[1])[None, :]
    trained = (t >= burn_in) | (skip_at_start & (np.asarray(start_step)[:, None] == 0))
    return valid * trained


def train_mask_tf(valid: tf.Tensor, start_step: tf.Tensor, burn_in: int, skip_at_start: bool):
    t = tf.range(valid.shape[1])[None, :]
    trained = t >= burn_in
    if skip_at_start:
        trained = trained | tf.equal(start_step, 0)[:, None]
    return valid * tf.cast(trained, tf.float32)


def sequence_priorities_np(td: np.ndarray, weight: np.ndarray, eta: float) -> np.ndarray:
    """eta * max_t |td| + (1 - eta) * mean_t |td| over the steps where weight is 1."""
    a = np.abs(td) * weight
    count = np.maximum(weight.sum(axis=1), 1.0)
    return eta * a.max(axis=1) + (1.0 - eta) * a.sum(axis=1) / count


def sequence_priorities_tf(td: tf.Tensor, weight: tf.Tensor, eta: float) -> tf.Tensor:
    a = tf.abs(td) * weight
    count = tf.maximum(tf.reduce_sum(weight, axis=1), 1.0)
    return eta * tf.reduce_max(a, axis=1) + (1.0 - eta) * tf.reduce_sum(a, axis=1) / count
