"""The learner's prefetching dataset of prioritized transitions."""

from __future__ import annotations

from collections.abc import Callable

import reverb
import tensorflow as tf

from apex.replay.tables import TRANSITIONS_TABLE


def make_dataset(
    server_address: str,
    signature: dict[str, tf.TensorSpec],
    batch_size: int,
    num_workers: int = 1,
    prefetch: int = 8,
    in_flight_batches: int = 8,
    rate_limiter_timeout_ms: int = 1000,
    table: str = TRANSITIONS_TABLE,
    transform: Callable[[dict], dict] | None = None,
) -> tf.data.Dataset:
    """Batches of ReplaySample(info, data); data leaves have shape [B, ...].

    `num_workers` sampling streams are interleaved, each keeping
    `in_flight_batches` batches requested ahead. With the server in the
    learner's process, one stream with 8 batches in flight and 8 prefetched
    measured 530 learner steps/s against 430 for two streams with 2 in flight
    (batch 64, this 2-core machine). The items are
    one-step items of the legacy reverb Writer, so TimestepDataset (not
    TrajectoryDataset, which expects squeezed TrajectoryWriter columns) reads
    them: one timestep per sampled item. When the rate limiter blocks sampling for
    `rate_limiter_timeout_ms`, the dataset ends, so a learner can check for a
    stop request and make a new iterator. `transform` maps each batch's data
    (e.g. unpack_transitions) on the dataset's threads.
    """
    dtypes = tf.nest.map_structure(lambda s: s.dtype, signature)
    shapes = tf.nest.map_structure(lambda s: s.shape, signature)

    def one(_):
        return reverb.TimestepDataset(
            server_address=server_address,
            table=table,
            dtypes=dtypes,
            shapes=shapes,
            max_in_flight_samples_per_worker=in_flight_batches * batch_size,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
        )

    ds = tf.data.Dataset.range(num_workers).interleave(
        one, cycle_length=num_workers, num_parallel_calls=num_workers, deterministic=False
    )
    ds = ds.batch(batch_size, drop_remainder=True)
    if transform is not None:
        ds = ds.map(lambda s: s._replace(data=transform(s.data)))
    if prefetch:
        ds = ds.prefetch(prefetch)
    return ds
