"""The learner's side of sharded replay (apex.replay.shards): sampling whole
batches from S Reverb servers and sending priority updates back to the shard
each key came from.

The distribution (as apex.replay.shards states it): every SGD batch comes
whole from one shard, picked uniformly at random among the shards that have a
batch ready at that draw. An item i of shard s is drawn with probability

    P(i) = q_s * p_i^alpha / M_s,    q_s = 1 / (shards ready at that draw),
                                     M_s = sum of p^alpha over shard s,

and its importance weight is (N * P(i)) ** -beta, normalised by the batch's
maximum, with N the total size over all shards. With every shard ready and
equal priority mass (M_s = M / S) this is p_i^alpha / M: one table's
prioritized sampling, exactly.

Reverb's SampleInfo.probability of an item is p_i^alpha / M_s (its own
table's); the sampler supplies q_s and N for each batch (`ShardBatch`).

How "ready" is decided: each shard has its own prefetching dataset
(apex.replay.dataset.make_dataset), drained by one thread into a small bounded
queue; a shard is ready when its queue holds a batch. A shard whose rate
limiter holds sampling, or whose server is slow, has an empty queue and is
skipped while another shard can serve; when no queue holds a batch the
learner waits on whichever fills first.

Note: a batch is one shard's, so q_s, N and M_s are the same for every item of
it and cancel in the normalisation by the batch's maximum: the weights are
(min_j p_j / p_i)^(alpha * beta) over the batch, whatever the readiness was
(and equal to one table's for the same items). They are computed by the rule
all the same (another normalisation would need them): the learner passes
q_s * probability and N to apex.replay.priorities.importance_weights, the
one owner of the formula.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import reverb
import tensorflow as tf

from apex.replay.priorities import PriorityUpdater
from apex.replay.shards import shard_name


class ShardBatch(NamedTuple):
    """One batch drawn by ShardedSampler.next()."""

    shard: int
    """The shard every item of the batch came from."""
    sample: Any
    """The shard dataset's element: a reverb.ReplaySample (info, data) of [B, ...]
    (data as the dataset's transform, if any, left it)."""
    q: float
    """1 / (shards ready at this draw): the probability this shard was picked."""
    ready: tuple[int, ...]
    """The shards that had a batch ready at this draw (this one among them)."""
    total_size: int
    """N: the latest known sizes of every shard, summed."""


class ShardedSampler:
    """Whole batches from S shards: one drainer thread per shard's dataset,
    each into a queue of at most `queue_batches` batches; `next()` picks a
    shard uniformly at random among those whose queue holds a batch.

    The table sizes that make N: each shard's is the `table_size` of the latest
    batch its drainer took (Reverb's SampleInfo: the size when the items were
    sampled), or, for a shard that has not served since its rate limiter last
    held sampling (the dataset then ends: see make_dataset), its server's
    `server_info` current_size read at that moment (and by start()).

    A shard whose sampling fails (e.g. its server is gone) is reported once
    (`log`) and retried every `retry_seconds`; `next()` raises that error only
    when every shard has failed since it last served (one server down must not
    stop the learner; all of them down is the single server's failure). A shard
    started again elsewhere is sampled at its new address once `replace` is
    called (apex.coordination.moves).

    Args:
      datasets: one per shard (shard s at index s), elements ReplaySample(info, data).
      clients: one reverb.Client per shard (sizes from server_info).
      table: the table's name on every shard.
      queue_batches: batches held per shard beyond the dataset's own prefetch.
      seed: seed of the shard picks.
      log: where the one-line warnings go (default: print).
    """

    def __init__(
        self,
        datasets: Sequence[tf.data.Dataset],
        clients: Sequence[reverb.Client],
        table: str,
        queue_batches: int = 2,
        seed: int | None = None,
        retry_seconds: float = 1.0,
        log: Callable[[str], None] | None = None,
    ):
        if len(datasets) != len(clients) or not datasets:
            raise ValueError("ShardedSampler: one dataset and one client per shard expected")
        self.num_shards = len(datasets)
        self._datasets = list(datasets)
        self._clients = list(clients)
        self._table = table
        self._capacity = max(1, int(queue_batches))
        self._rng = random.Random(seed)
        self._retry = float(retry_seconds)
        self._log = log or (lambda line: print(line, flush=True))
        self._cv = threading.Condition()
        self._queues: list[deque] = [deque() for _ in datasets]
        self._sizes = [0] * self.num_shards
        self._errors: list[Exception | None] = [None] * self.num_shards
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        # Each shard's drainer generation: a drainer of an older one (a shard
        # that moved, its sample perhaps still waiting on the old address) ends.
        self._generation = [0] * self.num_shards
        self.batches = [0] * self.num_shards  # batches handed out by next(), per shard

    @property
    def sizes(self) -> list[int]:
        """The latest known table size of each shard."""
        return list(self._sizes)

    def start(self) -> None:
        """Starts the drainers (each starts sampling, and counting samples in its
        shard's rate limiter, at once); next() calls it."""
        if self._threads:
            return
        for s in range(self.num_shards):  # N counts every shard from the first draw
            self._refresh_size(s)
        for s in range(self.num_shards):
            self._start_drainer(s)

    def _start_drainer(self, shard: int) -> None:
        t = threading.Thread(
            target=self._drain,
            args=(shard, self._generation[shard]),
            name=f"learner-sample-{shard}",
            daemon=True,
        )
        self._threads.append(t)
        t.start()

    def replace(self, shard: int, dataset: tf.data.Dataset, client: reverb.Client) -> None:
        """Shard `shard` listens elsewhere now (a new copy: apex.coordination.moves):
        sampled through `dataset` and sized through `client` from now on. The
        batches still queued from its old copy are dropped; the old drainer
        ends when its sample returns (a daemon thread, whatever that takes)."""
        with self._cv:
            self._generation[shard] += 1
            self._datasets[shard] = dataset
            self._clients[shard] = client
            self._queues[shard].clear()
            self._errors[shard] = None
            self._sizes[shard] = 0
            self._cv.notify_all()
        if self._threads and not self._closed.is_set():
            self._refresh_size(shard)
            self._start_drainer(shard)

    def next(self, should_stop: Callable[[], bool] | None = None) -> ShardBatch | None:
        """The next batch; waits while no shard has one ready, checking
        `should_stop()` about every 0.2 s (None when it became true)."""
        self.start()
        with self._cv:
            while True:
                ready = tuple(s for s in range(self.num_shards) if self._queues[s])
                if ready:
                    shard = ready[0] if len(ready) == 1 else self._rng.choice(ready)
                    sample = self._queues[shard].popleft()
                    self._cv.notify_all()  # room in that queue
                    self.batches[shard] += 1
                    return ShardBatch(shard, sample, 1.0 / len(ready), ready, sum(self._sizes))
                if all(e is not None for e in self._errors):
                    raise self._errors[0]  # type: ignore[misc]
                if self._closed.is_set():
                    raise RuntimeError("ShardedSampler is closed")
                self._cv.wait(0.2)
                if should_stop is not None and should_stop():
                    return None

    def _refresh_size(self, shard: int) -> None:
        try:
            info = self._clients[shard].server_info(timeout=2)
            self._sizes[shard] = int(info[self._table].current_size)
        except Exception:  # noqa: BLE001 - the server is not up (yet): sampling says so
            pass

    def _drain(self, shard: int, generation: int = 0) -> None:
        iterator = None
        while not self._closed.is_set() and generation == self._generation[shard]:
            try:
                if iterator is None:
                    iterator = iter(self._datasets[shard])
                sample = next(iterator)
            except (tf.errors.OutOfRangeError, StopIteration):
                # The rate limiter held sampling past its timeout: new stream.
                iterator = None
                self._refresh_size(shard)
                continue
            except Exception as err:  # noqa: BLE001 - kept; raised by next() if all shards fail
                iterator = None
                with self._cv:
                    if generation != self._generation[shard]:
                        return  # the shard moved while this sample failed
                    first = self._errors[shard] is None
                    self._errors[shard] = err
                    self._cv.notify_all()
                if first and not self._closed.is_set():
                    first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
                    self._log(
                        f"[apex] learner: sampling {shard_name(shard, self.num_shards)} failed "
                        f"({type(err).__name__}: {first_line}); sampling the other shards, "
                        f"retrying it every {self._retry:g} s"
                    )
                self._closed.wait(self._retry)
                continue
            with self._cv:
                if generation != self._generation[shard]:
                    return  # the shard moved: this batch is its old copy's
                self._sizes[shard] = int(sample.info.table_size.numpy()[-1])
                self._errors[shard] = None
                while len(self._queues[shard]) >= self._capacity and not self._closed.is_set():
                    self._cv.wait(0.2)
                if self._closed.is_set() or generation != self._generation[shard]:
                    return
                self._queues[shard].append(sample)
                self._cv.notify_all()

    def close(self, timeout: float = 1.5) -> None:
        """Stops the drainers (idempotent), waiting at most `timeout` s for them:
        a drainer inside a sample returns when that sample does (within the rate
        limiter's timeout, 1 s, on a live server; a vanished server's sample may
        never return, and a daemon thread is left to it)."""
        self._closed.set()
        with self._cv:
            self._cv.notify_all()
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))


def drain_datasets(
    datasets: Sequence[tf.data.Dataset], seconds: float, until: Callable[[], bool]
) -> int:
    """Samples every dataset (one fresh iterator and daemon thread each, no
    training) for at most `seconds` or until `until()`; the batches drawn.
    The shutdown drain of Learner.drain, on every shard."""
    end = time.time() + seconds
    counts = [0] * len(datasets)

    def loop(i: int) -> None:
        iterator = None  # made inside the try: a shard cut off at the stop fails it
        while time.time() < end and not until():
            try:
                if iterator is None:
                    iterator = iter(datasets[i])
                next(iterator)
                counts[i] += 1
            except (tf.errors.OutOfRangeError, StopIteration):
                iterator = None
            except Exception:  # noqa: BLE001 - the server is going down: nothing left to release
                return

    threads = [
        threading.Thread(target=loop, args=(i,), name=f"learner-drain-{i}", daemon=True)
        for i in range(len(datasets))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, end - time.time()) + 0.2)
    return sum(counts)


class ShardedPriorityUpdater:
    """One PriorityUpdater (its own sender thread, merging, off the SGD path)
    per shard; `put(keys, priorities, shard)` goes to the shard the batch came
    from. With one shard it is that shard's updater and nothing else.

    Per shard, `sent` counts keys handed to mutate_priorities calls and `acked`
    keys of calls that returned (the shard acknowledged them); `unacked` =
    sent - acked (failed calls, and a call still in flight). The same words as
    PriorityUpdater's updates_sent / updates_acked.
    """

    def __init__(self, clients: Sequence[reverb.Client], merge: int, table: str):
        self._merge, self._table = merge, table
        self.updaters = [self._updater(c, s, len(clients)) for s, c in enumerate(clients)]
        # Per shard: the updaters of its earlier copies (closed; their counts count).
        self._retired: list[list[PriorityUpdater]] = [[] for _ in clients]
        self._started = False

    def _updater(self, client: reverb.Client, shard: int, n: int) -> PriorityUpdater:
        name = "priority-updater" + (f"-{shard}" if n > 1 else "")
        return PriorityUpdater(client, merge=self._merge, table=self._table, name=name)

    def start(self) -> None:
        self._started = True
        for u in self.updaters:
            u.start()

    def replace(self, shard: int, client: reverb.Client) -> None:
        """Shard `shard` listens elsewhere now: its updates go to `client` from now
        on. What the old sender still holds is dropped (its keys are the old
        copy's: unacknowledged, counted as such); its counts carry on."""
        old = self.updaters[shard]
        new = self._updater(client, shard, len(self.updaters))
        new.max_priority = old.max_priority
        self._retired[shard].append(old)
        self.updaters[shard] = new
        old.close(timeout=0.0)
        if self._started:
            new.start()

    def put(self, keys: np.ndarray, priorities: np.ndarray, shard: int = 0) -> None:
        self.updaters[shard].put(keys, priorities)

    def flush(self, timeout: float = 10.0) -> None:
        """Blocks until every update put so far was sent, on every shard (the
        shards' senders work at the same time; `timeout` is for all of them)."""
        end = time.monotonic() + timeout
        events = [u.request_flush() for u in self.updaters]
        for e in events:
            if e is not None:
                e.wait(max(0.0, end - time.monotonic()))

    def close(self, timeout: float = 5.0) -> None:
        """Sends what is pending and stops every sender; `timeout` is for all of them."""
        end = time.monotonic() + timeout
        for u in self.updaters:
            u.close(timeout=0.0)
        for u in self.updaters:
            u.join(max(0.0, end - time.monotonic()))

    @property
    def max_priority(self) -> float:
        """The largest priority sent so far, over every shard."""
        return max(u.max_priority for u in self.updaters)

    @max_priority.setter
    def max_priority(self, value: float) -> None:
        for u in self.updaters:
            u.max_priority = float(value)

    @property
    def updates_acked(self) -> int:
        """Keys whose update a shard acknowledged, over every shard
        (learner/priority_updates)."""
        return sum(self.acked())

    @property
    def calls(self) -> int:
        return sum(u.calls for u in self.updaters)

    @property
    def seconds_in_calls(self) -> float:
        return sum(u.seconds_in_calls for u in self.updaters)

    def sent(self) -> list[int]:
        """Per shard: keys handed to mutate_priorities calls (every copy of it)."""
        return [u.updates_sent + sum(r.updates_sent for r in old) for u, old in self._copies()]

    def acked(self) -> list[int]:
        """Per shard: keys of mutate_priorities calls that returned."""
        return [u.updates_acked + sum(r.updates_acked for r in old) for u, old in self._copies()]

    def failed(self) -> list[int]:
        """Per shard: keys of mutate_priorities calls that raised."""
        return [u.updates_failed + sum(r.updates_failed for r in old) for u, old in self._copies()]

    def _copies(self) -> list[tuple[PriorityUpdater, list[PriorityUpdater]]]:
        return list(zip(self.updaters, self._retired))

    @property
    def unacked(self) -> int:
        """Keys sent but not acknowledged, over every shard."""
        return sum(self.sent()) - sum(self.acked())

    def last_errors(self) -> list[str | None]:
        return [u.last_error for u in self.updaters]
