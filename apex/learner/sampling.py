"""The learner's batches: one prefetching Reverb dataset per replay shard, with
the agent's input transform applied there (the one place it is applied), the
sharded sampler over them (S > 1), the wait for replay.min_size and the
shutdown drain."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import reverb

from apex.config import ApexConfig
from apex.replay.dataset import make_dataset
from apex.replay.sharded import ShardedSampler, drain_datasets
from apex.replay.shards import shard_config


class LearnerBatches:
    """Where the learner's batches come from.

    Every shard has its own dataset (apex.replay.dataset.make_dataset) whose
    elements are ReplaySample(info, data) with data already as the loss reads
    it (`transform`, the builder's input transform, maps each batch on the
    dataset's threads). With one shard the SGD step reads `dataset` through an
    iterator it captures (apex.learner.sgd); with S > 1 `sampler` picks each
    batch's shard (apex.replay.sharded.ShardedSampler).

    Args:
      config: the program config (learner.* sampling settings, replay.*).
      addresses: HOST:PORT of each shard's server (shard s at index s).
      signature: the table's item signature (the builder's).
      table: the table's name on every shard.
      transform: the builder's input transform (None: data as stored).
    """

    def __init__(
        self,
        config: ApexConfig,
        addresses: Sequence[str],
        signature: Any,
        table: str,
        transform: Callable[[dict], dict] | None,
    ):
        lc = config.learner
        self._config = config
        self._table = table
        self.num_shards = len(addresses)
        self._signature, self._transform = signature, transform
        self.clients = [reverb.Client(a) for a in addresses]
        self.datasets = [self._dataset(a) for a in addresses]
        self.dataset = self.datasets[0]
        self.sampler: ShardedSampler | None = None
        if self.num_shards > 1:
            self.sampler = ShardedSampler(self.datasets, self.clients, table, seed=lc.seed)

    def _dataset(self, address: str) -> Any:
        lc = self._config.learner
        return make_dataset(
            address,
            self._signature,
            lc.batch_size,
            num_workers=lc.num_sample_workers,
            prefetch=lc.prefetch_batches,
            in_flight_batches=lc.in_flight_batches,
            table=self._table,
            transform=self._transform,
        )

    def move(self, shard: int, address: str) -> reverb.Client:
        """Shard `shard` (S > 1) listens at `address` now: sampled, sized and
        drained there. Returns its new client (the lists `clients` and
        `datasets` are updated in place)."""
        if self.sampler is None or not 0 <= shard < self.num_shards:
            raise ValueError(f"shard {shard} of {self.num_shards} cannot move")
        client = reverb.Client(address)
        dataset = self._dataset(address)
        self.clients[shard] = client
        self.datasets[shard] = dataset
        self.sampler.replace(shard, dataset, client)
        return client

    @property
    def element_spec(self) -> Any:
        """ReplaySample(info, data) of one batch, as every shard's dataset yields it."""
        return self.dataset.element_spec

    def wait_for_min_size(self, should_stop: Callable[[], bool]) -> None:
        """Polls the table until it holds replay.min_size items (or a stop).

        Until then the rate limiter holds every sample; waiting here instead
        of in a sample spares one new iterator, and one new trace of the SGD
        step (apex.learner.sgd), per rate-limiter timeout while actors fill
        the table. With S > 1 any shard that can serve will do: its own min_size.
        """
        table, min_size = self._table, shard_config(self._config).replay.min_size
        while not should_stop():
            for client in self.clients:
                try:
                    if client.server_info(timeout=2)[table].current_size >= min_size:
                        return
                except Exception:  # noqa: BLE001 - the first sample reports a missing server
                    return
            time.sleep(0.05)

    def drain(self, seconds: float, until: Callable[[], bool] | None = None) -> int:
        """Samples every shard (without training) for at most `seconds`, or
        until `until()`; returns the batches drawn (Learner.drain)."""
        return drain_datasets(self.datasets, seconds, until or (lambda: False))

    def close(self) -> None:
        """Stops the sampler's threads (S > 1; idempotent)."""
        if self.sampler is not None:
            self.sampler.close()
