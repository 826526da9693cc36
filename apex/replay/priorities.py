"""Priorities: the actor's initial priorities, importance weights and the
asynchronous priority updater of the learner."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import reverb

from apex.replay.tables import TRANSITIONS_TABLE


def initial_priorities(
    td: np.ndarray,
    policy: str,
    *,
    epsilon: float = 1e-3,
    constant: float = 1.0,
    max_seen: float | None = None,
) -> np.ndarray:
    """Priorities of new transitions under an insert policy.

    actor_td: |td| + epsilon (Ape-X: the actor's own n-step TD error);
    max_seen: the largest priority the learner has set so far (constant before any);
    constant: `constant` for every item.

    Example:
        >>> initial_priorities(np.array([-2.0, 0.5]), 'actor_td', epsilon=0.0).tolist()
        [2.0, 0.5]
    """
    td = np.asarray(td, np.float64)
    if policy == "actor_td":
        return np.abs(td) + epsilon
    if policy == "max_seen":
        return np.full(td.shape, max_seen if max_seen else constant)
    if policy == "constant":
        return np.full(td.shape, constant)
    raise ValueError(
        f"insert_priority={policy!r} is invalid: expected one of ['actor_td', 'max_seen', 'constant']"
    )


def importance_weights(
    probabilities: np.ndarray, table_size: np.ndarray | int, beta: float
) -> np.ndarray:
    """w_i = (N * P(i)) ** -beta, normalised by the batch maximum (Schaul et al. 2016)."""
    p = np.asarray(probabilities, np.float64)
    n = np.asarray(table_size, np.float64)
    w = (n * p) ** (-beta)
    return w / w.max()


class PriorityUpdater:
    """Sends priority updates to Reverb from a background thread.

    `put(keys, priorities)` never blocks on Reverb: updates are merged in a dict
    (the newest priority of a key wins) and flushed in one mutate_priorities call
    per `merge` puts, off the SGD critical path.
    """

    def __init__(
        self,
        client: reverb.Client,
        merge: int = 4,
        table: str = TRANSITIONS_TABLE,
        name: str = "priority-updater",
    ):
        self._client = client
        self._table = table
        self._merge = max(1, int(merge))
        self._queue: queue.Queue = queue.Queue(maxsize=64)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        # Keys of mutate_priorities calls: made (attempted), returned (sent,
        # i.e. acknowledged), raised (failed); attempted - sent are failed or in flight.
        self.updates_sent = 0
        self.updates_attempted = 0
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
        self.updates_attempted += len(pending)
        try:
            self._client.mutate_priorities(self._table, updates=pending)
            self.updates_sent += len(pending)
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
