"""R2D2's loss and targets in TF: value rescaling, n-step double-Q TD errors
over sequences, eta-mixed sequence priorities and the loss the generic learner
(apex.learner) minimises (`r2d2_loss`: burn-in from the stored state,
importance weights). The actors compute the same targets in numpy for their
initial priorities (apex.agents.r2d2.acting: rescale_np, sequence_td_np,
train_mask_np, sequence_priorities_np); tests check the two forms agree.

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

import tensorflow as tf

from apex.config import ApexConfig


def rescale_tf(x: tf.Tensor, eps: float) -> tf.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018)."""
    return tf.sign(x) * (tf.sqrt(tf.abs(x) + 1.0) - 1.0) + eps * x


def unrescale_tf(x: tf.Tensor, eps: float) -> tf.Tensor:
    """The exact inverse of h."""
    if eps == 0:
        return tf.sign(x) * (tf.square(tf.abs(x) + 1.0) - 1.0)
    root = (tf.sqrt(1.0 + 4.0 * eps * (tf.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return tf.sign(x) * (tf.square(root) - 1.0)


def _shift_tf(x: tf.Tensor, i: int) -> tf.Tensor:
    if i == 0:
        return x
    if i >= x.shape[1]:
        return tf.zeros_like(x)
    return tf.pad(x[:, i:], [[0, 0], [0, i]])


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
    """(td [B, T], valid [B, T]) from Q-values [B, T, A] of the online and the
    target network (the numpy form: apex.agents.r2d2.acting.sequence_td_np); the
    target is not differentiated."""
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


def train_mask_tf(valid: tf.Tensor, start_step: tf.Tensor, burn_in: int, skip_at_start: bool):
    t = tf.range(valid.shape[1])[None, :]
    trained = t >= burn_in
    if skip_at_start:
        trained = trained | tf.equal(start_step, 0)[:, None]
    return valid * tf.cast(trained, tf.float32)


def sequence_priorities_tf(td: tf.Tensor, weight: tf.Tensor, eta: float) -> tf.Tensor:
    a = tf.abs(td) * weight
    count = tf.maximum(tf.reduce_sum(weight, axis=1), 1.0)
    return eta * tf.reduce_max(a, axis=1) + (1.0 - eta) * tf.reduce_sum(a, axis=1) / count


def sequence_loss(online, target, data, weights: tf.Tensor, config: ApexConfig):
    """(loss, td [B, T], train mask [B, T], q [B, T, A]) of a batch of sequences.

    `online` and `target` are RecurrentQNetworks unrolled from the stored
    (h, c); the state is cut from the gradient after r2d2.burn_in steps
    (except in sequences that start at their episode's first step when
    r2d2.skip_burn_in_at_episode_start); the loss is the importance-weighted
    (`weights` [B]) mean over trained steps of 0.5 * td^2, td in the rescaled
    value space.
    """
    q_cfg = config.r2d2
    state = (data["state_h"], data["state_c"])
    at_start = tf.equal(data["start_step"], 0)
    keep = at_start if q_cfg.skip_burn_in_at_episode_start else tf.zeros_like(at_start)
    q = online.unroll(data["obs"], state, q_cfg.burn_in, keep)
    q_target = tf.stop_gradient(target.unroll(data["obs"], state))
    td, valid = sequence_td_tf(
        q,
        q_target,
        data["action"],
        data["reward"],
        data["discount"],
        data["mask"],
        config.replay.n_step,
        q_cfg.value_rescaling,
        q_cfg.value_rescaling_epsilon,
    )
    train = train_mask_tf(
        valid, data["start_step"], q_cfg.burn_in, q_cfg.skip_burn_in_at_episode_start
    )
    per_seq = tf.reduce_sum(0.5 * tf.square(td) * train, axis=1) / tf.maximum(
        tf.reduce_sum(train, axis=1), 1.0
    )
    return tf.reduce_mean(weights * per_seq), td, train, q


def r2d2_loss(online, target, data, weights: tf.Tensor, config: ApexConfig):
    """(loss, eta-mixed sequence priorities [B], mean Q over trained steps) of a batch."""
    loss, td, train, q = sequence_loss(online, target, data, weights, config)
    priorities = sequence_priorities_tf(td, train, config.r2d2.priority_eta)
    q_mean = tf.reduce_sum(tf.reduce_mean(q, axis=-1) * train) / tf.maximum(
        tf.reduce_sum(train), 1.0
    )
    return loss, priorities, q_mean
