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
