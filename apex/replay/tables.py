"""The Reverb table of n-step transitions: signature, selectors, rate limiter."""

from __future__ import annotations

import reverb
import tensorflow as tf

from apex.config import ApexConfig, effective_error_buffer
from apex.envs import EnvSpec

TRANSITIONS_TABLE = "transitions"


def transition_signature(spec: EnvSpec) -> dict[str, tf.TensorSpec]:
    """Per-item signature of a stored transition (payload + provenance)."""
    obs = tf.TensorSpec(spec.observation_shape, tf.float32)
    return {
        "obs": obs,
        "action": tf.TensorSpec([], tf.int32),
        "reward": tf.TensorSpec([], tf.float32),
        "discount": tf.TensorSpec([], tf.float32),
        "next_obs": obs,
        # Provenance: which actor and global env slot, its epsilon, the parameter
        # version the action was chosen with and the insertion time (unix s).
        "actor": tf.TensorSpec([], tf.int32),
        "slot": tf.TensorSpec([], tf.int32),
        "epsilon": tf.TensorSpec([], tf.float32),
        "version": tf.TensorSpec([], tf.int64),
        "insert_time": tf.TensorSpec([], tf.float64),
    }


def make_rate_limiter(config: ApexConfig) -> reverb.rate_limiters.RateLimiter:
    r = config.replay
    return reverb.rate_limiters.SampleToInsertRatio(
        samples_per_insert=float(r.samples_per_insert),
        min_size_to_sample=int(r.min_size),
        error_buffer=effective_error_buffer(r, config.learner.batch_size),
    )


def make_tables(config: ApexConfig, spec: EnvSpec) -> list[reverb.Table]:
    """The program's tables: one prioritized FIFO table of transitions."""
    return [
        reverb.Table(
            name=TRANSITIONS_TABLE,
            sampler=reverb.selectors.Prioritized(config.replay.priority_exponent),
            remover=reverb.selectors.Fifo(),
            max_size=int(config.replay.capacity),
            rate_limiter=make_rate_limiter(config),
            signature=transition_signature(spec),
        )
    ]
