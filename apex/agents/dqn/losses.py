"""Double DQN n-step loss with importance weights."""

from __future__ import annotations

import tensorflow as tf


def huber(x: tf.Tensor, delta: float) -> tf.Tensor:
    """Huber loss of `x` with threshold `delta` (elementwise)."""
    a = tf.abs(x)
    quad = tf.minimum(a, delta)
    return 0.5 * quad**2 + delta * (a - quad)


def double_q_td(
    q_tm1: tf.Tensor,
    action: tf.Tensor,
    reward: tf.Tensor,
    discount: tf.Tensor,
    q_t_online: tf.Tensor,
    q_t_target: tf.Tensor,
) -> tf.Tensor:
    """n-step double-Q TD error: r + d * Q_target(s', argmax_a Q_online(s', a)) - Q(s, a).

    `reward` is the n-step return and `discount` is gamma ** k, or 0 where the
    episode terminated; the target is not differentiated.
    """
    q_sa = tf.gather(q_tm1, action, batch_dims=1)
    best = tf.argmax(q_t_online, axis=1, output_type=tf.int32)
    bootstrap = tf.gather(q_t_target, best, batch_dims=1)
    target = tf.stop_gradient(reward + discount * bootstrap)
    return target - q_sa


def dqn_loss(
    online: tf.Module, target: tf.Module, data: dict, weights: tf.Tensor, huber_delta: float
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(loss, new priorities [B], mean Q) of a batch of n-step transitions.

    The importance-weighted (`weights` [B]) mean Huber loss of the n-step
    double-Q TD errors; the new priorities are |TD|.
    """
    q_tm1 = online(data["obs"])
    q_t_online = online(data["next_obs"])
    q_t_target = target(data["next_obs"])
    td = double_q_td(
        q_tm1, data["action"], data["reward"], data["discount"], q_t_online, q_t_target
    )
    loss = tf.reduce_mean(weights * huber(td, huber_delta))
    return loss, tf.abs(td), tf.reduce_mean(q_tm1)
