"""The R2D2 learner: burn-in from the stored state, n-step double-Q targets
with value rescaling over sequences, importance weights, target network,
eta-mixed sequence priorities sent back asynchronously.

Everything else (sampling, priority updates, the variable source, metrics,
stopping, the SGD step itself) is the generic learner's (apex.learner): the
R2D2 builder supplies `r2d2_loss`.
"""

from __future__ import annotations

import tensorflow as tf

from apex.agents.r2d2.losses import sequence_priorities_tf, sequence_td_tf, train_mask_tf
from apex.config import ApexConfig


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
