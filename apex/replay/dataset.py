"""The learner's prefetching dataset of prioritized transitions."""

from __future__ import annotations

import reverb
import tensorflow as tf

from apex.replay.tables import TRANSITIONS_TABLE


def make_dataset(
    server_address: str,
    signature: dict[str, tf.TensorSpec],
    batch_size: int,
    num_workers: int = 2,
    prefetch: int = 4,
    rate_limiter_timeout_ms: int = 1000,
    table: str = TRANSITIONS_TABLE,
) -> tf.data.Dataset:
    """Batches of ReplaySample(info, data); data leaves have shape [B, ...].

    `num_workers` TrajectoryDatasets are interleaved (on this 2-core machine two
    streams reach most of the throughput of acme's default of 12). The items are
    one-step items of the legacy reverb Writer, so TimestepDataset (not
    TrajectoryDataset, which expects squeezed TrajectoryWriter columns) reads
    them: one timestep per sampled item. When the rate limiter blocks sampling for
    `rate_limiter_timeout_ms`, the dataset ends, so a learner can check for a
    stop request and make a new iterator.
    """
    dtypes = tf.nest.map_structure(lambda s: s.dtype, signature)
    shapes = tf.nest.map_structure(lambda s: s.shape, signature)

    def one(_):
        return reverb.TimestepDataset(
            server_address=server_address,
            table=table,
            dtypes=dtypes,
            shapes=shapes,
            max_in_flight_samples_per_worker=2 * batch_size,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
        )

    ds = tf.data.Dataset.range(num_workers).interleave(
        one, cycle_length=num_workers, num_parallel_calls=num_workers, deterministic=False
    )
    ds = ds.batch(batch_size, drop_remainder=True)
    if prefetch:
        ds = ds.prefetch(prefetch)
    return ds
