"""The Reverb tables: n-step transitions (Ape-X DQN) or sequences (R2D2);
signatures, selectors, rate limiter."""

from __future__ import annotations

import reverb
import tensorflow as tf

from apex.config import ApexConfig, effective_error_buffer
from apex.envs import EnvSpec

TRANSITIONS_TABLE = "transitions"
SEQUENCES_TABLE = "sequences"


def table_name(config: ApexConfig) -> str:
    """The table a program of `config` writes and samples."""
    return SEQUENCES_TABLE if config.agent == "r2d2" else TRANSITIONS_TABLE


def _provenance() -> dict[str, tf.TensorSpec]:
    # Which actor and global env slot, its epsilon, the parameter version the
    # (first) action was chosen with and the insertion time (unix s).
    return {
        "actor": tf.TensorSpec([], tf.int32),
        "slot": tf.TensorSpec([], tf.int32),
        "epsilon": tf.TensorSpec([], tf.float32),
        "version": tf.TensorSpec([], tf.int64),
        "insert_time": tf.TensorSpec([], tf.float64),
    }


def transition_signature(spec: EnvSpec) -> dict[str, tf.TensorSpec]:
    """Per-item signature of a stored transition (payload + provenance)."""
    obs = tf.TensorSpec(spec.observation_shape, tf.as_dtype(spec.observation_dtype))
    return {
        "obs": obs,
        "action": tf.TensorSpec([], tf.int32),
        "reward": tf.TensorSpec([], tf.float32),
        "discount": tf.TensorSpec([], tf.float32),
        "next_obs": obs,
        **_provenance(),
    }


def sequence_signature(spec: EnvSpec, length: int, lstm_size: int) -> dict[str, tf.TensorSpec]:
    """Per-item signature of a stored R2D2 sequence of `length` steps.

    Step t holds obs_t, the action taken, the reward r_t, the discount (gamma,
    or 0 where the episode terminated at t) and mask_t (1 for a real step, 0 for
    padding after the episode's end). state_h/state_c are the LSTM state the
    actor had before step 0; start_step is step 0's index in its episode.
    """
    obs = tf.TensorSpec((length, *spec.observation_shape), tf.as_dtype(spec.observation_dtype))
    return {
        "obs": obs,
        "action": tf.TensorSpec([length], tf.int32),
        "reward": tf.TensorSpec([length], tf.float32),
        "discount": tf.TensorSpec([length], tf.float32),
        "mask": tf.TensorSpec([length], tf.float32),
        "state_h": tf.TensorSpec([lstm_size], tf.float32),
        "state_c": tf.TensorSpec([lstm_size], tf.float32),
        "start_step": tf.TensorSpec([], tf.int32),
        **_provenance(),
    }


def item_signature(config: ApexConfig, spec: EnvSpec) -> dict[str, tf.TensorSpec]:
    """The signature of the items of `config`'s table."""
    if config.agent == "r2d2":
        return sequence_signature(spec, config.r2d2.sequence_length, config.r2d2.lstm_size)
    return transition_signature(spec)


def make_rate_limiter(config: ApexConfig) -> reverb.rate_limiters.RateLimiter:
    r = config.replay
    return reverb.rate_limiters.SampleToInsertRatio(
        samples_per_insert=float(r.samples_per_insert),
        min_size_to_sample=int(r.min_size),
        error_buffer=effective_error_buffer(r, config.learner.batch_size),
    )


def make_tables(config: ApexConfig, spec: EnvSpec) -> list[reverb.Table]:
    """The program's tables: one prioritized FIFO table of transitions or sequences."""
    return [
        reverb.Table(
            name=table_name(config),
            sampler=reverb.selectors.Prioritized(config.replay.priority_exponent),
            remover=reverb.selectors.Fifo(),
            max_size=int(config.replay.capacity),
            rate_limiter=make_rate_limiter(config),
            signature=item_signature(config, spec),
        )
    ]
