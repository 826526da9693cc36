"""The learner's priority updates: each batch's new priorities back to the
shard it came from (apex.replay.sharded.ShardedPriorityUpdater: merged, off
the SGD path), the largest priority so far, and their metrics, with one
warning line when a shard leaves updates unacknowledged.

Words: keys are *sent* when handed to a mutate_priorities call and *acked*
when that call returned (the shard acknowledged them); sent - acked are keys
of calls that raised or are still in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import reverb

from apex.replay.sharded import ShardedPriorityUpdater
from apex.replay.shards import shard_name


class PriorityFeedback:
    """One priority sender per shard, and the counts the learner reports.

    Metrics (written into a learner row): learner/priority_updates (keys
    acked, every shard), learner/priority_update_calls, learner/priority_update_ms;
    with S > 1 per shard learner/priority_updates_sent_shard_<s> and
    learner/priority_updates_acked_shard_<s>, and learner/priority_updates_unacked.
    """

    def __init__(self, clients: Sequence[reverb.Client], merge: int, table: str):
        self.num_shards = len(clients)
        self._updater = ShardedPriorityUpdater(clients, merge=merge, table=table)
        # Updates not acknowledged that a warning line named already, and the
        # keys each shard had been sent as of the previous row.
        self._unacked_warned = 0
        self._sent_at_last_row = [0] * self.num_shards

    def start(self) -> None:
        """Starts the background senders (Learner.run does it; tests call it)."""
        self._updater.start()

    def put(self, keys: np.ndarray, priorities: np.ndarray, shard: int = 0) -> None:
        """Queues a batch's new priorities for the shard it came from."""
        self._updater.put(keys, priorities, shard)

    def move(self, shard: int, client: reverb.Client) -> None:
        """Shard `shard` listens elsewhere now: its updates go through `client`."""
        self._updater.replace(shard, client)

    def flush(self) -> None:
        """Blocks until every update so far reached Reverb (every shard)."""
        self._updater.flush()

    def close(self) -> None:
        """Sends what is pending and stops the senders."""
        self._updater.close()

    @property
    def max_priority(self) -> float:
        """The largest priority put so far, over every shard (checkpointed)."""
        return self._updater.max_priority

    @max_priority.setter
    def max_priority(self, value: float) -> None:
        self._updater.max_priority = value

    def write_counts(self, row: dict[str, Any]) -> None:
        """learner/priority_updates (keys acked) and learner/priority_update_calls."""
        row["learner/priority_updates"] = self._updater.updates_acked
        row["learner/priority_update_calls"] = self._updater.calls

    def write_timing(self, row: dict[str, Any]) -> None:
        """learner/priority_update_ms: the mean duration of one call (once there is one)."""
        if self._updater.calls:
            row["learner/priority_update_ms"] = (
                1000.0 * self._updater.seconds_in_calls / self._updater.calls
            )

    def write_shards(self, row: dict[str, Any], batches: Sequence[int]) -> None:
        """Per-shard counters (S > 1; `batches`: the batches each shard served),
        and one warning line when more priority updates went unacknowledged
        since the last row: counted, never dropped silently. Unacknowledged: a
        call that raised, or one that has not returned since the previous row
        (a call to a vanished server can hang)."""
        updater = self._updater
        sent, acked, failed = updater.sent(), updater.acked(), updater.failed()
        for s in range(self.num_shards):
            row[f"learner/batches_shard_{s}"] = batches[s]
            row[f"learner/priority_updates_sent_shard_{s}"] = sent[s]
            row[f"learner/priority_updates_acked_shard_{s}"] = acked[s]
        row["learner/priority_updates_unacked"] = sum(sent) - sum(acked)
        stale = [
            max(failed[s], self._sent_at_last_row[s] - acked[s]) for s in range(self.num_shards)
        ]
        self._sent_at_last_row = sent
        if sum(stale) > self._unacked_warned:
            errors = updater.last_errors()
            where = ", ".join(
                f"{shard_name(s, self.num_shards)}: {stale[s]} keys "
                f"({errors[s] or 'no answer since the previous metrics row'})"
                for s in range(self.num_shards)
                if stale[s]
            )
            print(
                f"[apex] learner: priority updates not acknowledged by their shard: {where}",
                flush=True,
            )
        self._unacked_warned = sum(stale)
