"""Priorities: importance weights and the asynchronous priority updater of the
learner (an actor's initial priorities are its own: apex.agents.acting)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np
import reverb


def importance_weights(probabilities: Any, table_size: Any, beta: float, xp: Any = np) -> Any:
    """w_i = (N * P(i)) ** -beta over the batch's maximum (Schaul et al. 2016), float64.

    The one rule of the importance weights: the learner's SGD step calls it
    traced with `xp=tf` (tensors in, a float64 tensor out), tools and tests
    with numpy (the default). `probabilities` are P(i) of the batch's items,
    `table_size` N (a scalar or one per item). With sharded replay
    (apex.replay.sharded) the learner passes P(i) = q_s * p_i^alpha / M_s and
    N the total size over every shard.

    Example:
        >>> importance_weights(np.array([0.5, 0.125]), 8, beta=0.5).tolist()
        [0.5, 1.0]
    """
    if xp is np:
        p, n = np.asarray(probabilities, np.float64), np.asarray(table_size, np.float64)
        reduce_max = np.max
    else:
        p, n = xp.cast(probabilities, xp.float64), xp.cast(table_size, xp.float64)
        reduce_max = xp.reduce_max
    w = (n * p) ** (-float(beta))
    return w / reduce_max(w)


class PriorityUpdater:
    """Sends priority updates to Reverb from a background thread.

    `put(keys, priorities)` never blocks on Reverb: updates are merged in a dict
    (the newest priority of a key wins) and flushed in one mutate_priorities call
    per `merge` puts, off the SGD critical path.
    """

    def __init__(
        self,
        client: reverb.Client,
        table: str,
        merge: int = 4,
        name: str = "priority-updater",
    ):
        self._client = client
        self._table = table
        self._merge = max(1, int(merge))
        self._queue: queue.Queue = queue.Queue(maxsize=64)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        # Keys of mutate_priorities calls: made (sent), returned (acked: the
        # server acknowledged them), raised (failed); sent - acked are failed or in flight.
        self.updates_sent = 0
        self.updates_acked = 0
        self.updates_failed = 0
        self.last_error: str | None = None  # the latest failed call's error, one line
        self.calls = 0
        self.seconds_in_calls = 0.0
        self.errors = 0
        self.max_priority = 0.0
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._thread.start()
            self._started = True

    def put(self, keys: np.ndarray, priorities: np.ndarray) -> None:
        self.max_priority = max(
            self.max_priority, float(np.max(priorities)) if len(priorities) else 0.0
        )
        self._queue.put((keys, priorities))

    def flush(self, timeout: float = 10.0) -> None:
        """Blocks until every update put so far has been sent."""
        done = self.request_flush()
        if done is not None:
            done.wait(timeout)

    def request_flush(self) -> threading.Event | None:
        """Asks the sender thread to send every update put so far; returns the
        event it sets then, or None when they were sent now on this thread
        (the sender is not started, or closed)."""
        done = threading.Event()
        self._queue.put(done)
        if self._started and self._thread.is_alive():
            return done
        self._drain_now()
        return None

    def _drain_now(self) -> None:
        pending: dict[int, float] = {}
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, threading.Event):
                item.set()
                continue
            if item is None:
                break
            for k, p in zip(item[0].tolist(), item[1].tolist()):
                pending[k] = p
        self._send(pending)

    def _send(self, pending: dict[int, float]) -> None:
        if not pending:
            return
        t0 = time.perf_counter()
        self.updates_sent += len(pending)
        try:
            self._client.mutate_priorities(self._table, updates=pending)
            self.updates_acked += len(pending)
        except Exception as err:  # noqa: BLE001 - a dead server must not kill the learner's thread
            self.errors += 1
            self.updates_failed += len(pending)
            lines = str(err).strip().splitlines()
            self.last_error = f"{type(err).__name__}: {lines[0] if lines else ''}"
        self.calls += 1
        self.seconds_in_calls += time.perf_counter() - t0

    def _loop(self) -> None:
        pending: dict[int, float] = {}
        merged = 0
        while True:
            item = self._queue.get()
            if item is None:
                self._send(pending)
                return
            if isinstance(item, threading.Event):
                self._send(pending)
                pending, merged = {}, 0
                item.set()
                continue
            for k, p in zip(item[0].tolist(), item[1].tolist()):
                pending[k] = p
            merged += 1
            if merged >= self._merge:
                self._send(pending)
                pending, merged = {}, 0

    def close(self, timeout: float = 5.0) -> None:
        """Sends what is pending and stops the sender, waiting at most `timeout` s."""
        if self._started and self._thread.is_alive():
            try:  # a full queue: the sender is stuck in a call (a vanished server)
                self._queue.put(None, timeout=1.0)
            except queue.Full:
                return
            self.join(timeout)

    def join(self, timeout: float) -> None:
        """Waits at most `timeout` s for a closed sender to finish."""
        if self._started:
            self._thread.join(timeout=timeout)
