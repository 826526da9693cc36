"""The inference node's side of central inference (actor.inference='central'):
a server that batches every actor's requests into one forward pass.

The inference node runs in the learner's process (so it is on the learner's
host, and reads the learner's newest parameters in-process, without a network
pull) and gathers concurrent requests into one batch (`BatchingServer`):

  - a batch goes when it holds `inference.max_batch` observations, or when
    every actor has a request in it (each actor has at most one in flight, so
    no more can come), or `inference.max_wait_ms` after its first request;
  - a request is never split; one that would overflow the batch opens the next.

R2D2's recurrent state travels with each request rather than living on the
server: the actor must store that state in its sequences anyway (stored-state
R2D2), a stateless server needs no per-slot bookkeeping, and an actor that
restarts or moves to another host needs no server-side cleanup. The cost is
2 x E x lstm_size floats each way per step (64 KiB for E=16, lstm 512).

What the server measures (reset at each `stats()`): observations and requests
per forward pass, queue wait (arrival -> its batch starts) and latency
(arrival -> result ready), requests per second, forward time.
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from apex.model_store import NoParameters  # one "no parameters yet" error for every source

State = tuple[np.ndarray, np.ndarray]


class ServerStopped(RuntimeError):
    """The inference server stopped (the program is stopping, or it failed)."""


@dataclasses.dataclass
class _Request:
    obs: np.ndarray
    state: State | None
    arrival: float
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    result: tuple | None = None
    error: BaseException | None = None

    @property
    def rows(self) -> int:
        return int(self.obs.shape[0])


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q)) if len(values) else 0.0


def bucket_size(rows: int, max_batch: int) -> int:
    """The padded batch size for a TF forward pass: the next power of two (at most
    max_batch), so a traced function sees at most log2(max_batch) shapes."""
    size = 1
    while size < rows:
        size *= 2
    return max(rows, min(size, max_batch))


class BatchingServer:
    """Gathers concurrent `infer` calls into batched forward passes (one thread).

    Args:
      policy: an object with `set_weights(weights)` and `__call__(obs, state)
        -> (q, state)` (apex.agents.policy.ActingPolicy); only the batching
        thread calls it.
      max_batch: the most observations in one forward pass.
      max_wait_seconds: the longest a batch waits for more requests after its first.
      expected_clients: the number of clients with at most one request in flight
        each (the actors); a batch holding that many requests goes at once (0: no
        such shortcut).
      pad: pad each batch to a power of two (for traced TF networks).
      clock: time source (tests).
      obs_shape: one observation's shape; a request of another shape fails
        alone (ValueError to its caller), it never reaches a batch.
    """

    def __init__(
        self,
        policy: Any,
        max_batch: int,
        max_wait_seconds: float,
        expected_clients: int = 0,
        pad: bool = False,
        clock: Callable[[], float] = time.monotonic,
        obs_shape: tuple[int, ...] | None = None,
    ):
        self._policy = policy
        self._obs_shape = None if obs_shape is None else tuple(obs_shape)
        self.max_batch = int(max_batch)
        self.max_wait = float(max_wait_seconds)
        self.expected_clients = int(expected_clients)
        self._pad = pad
        self._clock = clock
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._carry: _Request | None = None
        self._lock = threading.Lock()
        self._pending: tuple[int, list[np.ndarray], dict] | None = None
        self.version = -1
        self.info: dict[str, float] = {}
        self._stopped = threading.Event()
        # Admission: a request enters the queue only before the batching thread
        # drained it at its end (_fail_waiting); one that comes later gets
        # ServerStopped at once. Without it a caller that saw the server running
        # just before close() could queue its request after the drain and wait
        # out its whole timeout (seen once with the machine under load).
        self._admit = threading.Lock()
        self._drained = False
        self.error: BaseException | None = None
        # Figures since the last stats() (and totals).
        self._batch_rows: list[int] = []
        self._batch_requests: list[int] = []
        self._waits: list[float] = []
        self._latencies: list[float] = []
        self._forward_seconds: list[float] = []
        self.requests_total = 0
        self.batches_total = 0
        self.batch_sizes_seen: collections.Counter[int] = collections.Counter()
        self._since = clock()
        self._thread = threading.Thread(target=self._loop, name="inference-batcher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ parameters
    def set_weights(
        self, version: int, weights: list[np.ndarray], info: dict | None = None
    ) -> None:
        """New parameters, applied before the next forward pass (never during one)."""
        with self._lock:
            self._pending = (int(version), weights, dict(info or {}))

    def _apply_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            version, weights, info = pending
            self._policy.set_weights(weights)
            self.version, self.info = version, info

    def newest_version(self) -> int:
        """The newest parameter version set (served from the next batch on); -1 before any."""
        with self._lock:
            return self._pending[0] if self._pending is not None else self.version

    # -------------------------------------------------------------- requests
    def infer(
        self, obs: np.ndarray, state: State | None = None, timeout: float | None = None
    ) -> tuple[np.ndarray, State | None, int, dict]:
        """(q, new state, version, info) for a request of observations [E, ...];
        blocks the calling thread until its batch has run."""
        if self._stopped.is_set():
            raise ServerStopped(self._stopped_reason())
        if self.newest_version() < 0:
            raise NoParameters("the inference server has no parameters yet")
        obs = np.asarray(obs)
        if obs.ndim < 1 or (self._obs_shape is not None and obs.shape[1:] != self._obs_shape):
            raise ValueError(
                f"observations of shape [N, {', '.join(map(str, self._obs_shape or ()))}] "
                f"expected, got {list(obs.shape)}"
            )
        request = _Request(obs, state, self._clock())
        with self._admit:
            if self._drained:
                raise ServerStopped(self._stopped_reason())
            self._queue.put(request)
        if not request.done.wait(timeout):
            raise TimeoutError(f"no answer from the inference server within {timeout} s")
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _stopped_reason(self) -> str:
        if self.error is not None:
            return f"the inference server failed: {type(self.error).__name__}: {self.error}"
        return "the inference server stopped"

    def _next(self, timeout: float | None) -> _Request | None:
        if self._carry is not None:
            request, self._carry = self._carry, None
            return request
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _gather(self) -> list[_Request]:
        first = None
        while first is None and not self._stopped.is_set():
            first = self._next(0.1)
        if first is None:
            return []
        batch, rows = [first], first.rows
        deadline = first.arrival + self.max_wait
        while rows < self.max_batch:
            if self.expected_clients and len(batch) >= self.expected_clients:
                break
            remaining = deadline - self._clock()
            if remaining <= 0:
                # Whatever already waits still joins (no wait for it).
                try:
                    request = self._queue.get_nowait()
                except queue.Empty:
                    break
            else:
                request = self._next(remaining)
                if request is None:
                    break
            if rows + request.rows > self.max_batch:
                self._carry = request
                break
            batch.append(request)
            rows += request.rows
        return batch

    def _loop(self) -> None:
        while not self._stopped.is_set():
            batch = self._gather()
            if not batch:
                continue
            try:
                self._run_batch(batch)
            except BaseException as err:  # noqa: BLE001 - every waiting caller gets the error
                self.error = err
                for request in batch:
                    request.error = ServerStopped(self._stopped_reason())
                    request.done.set()
                self._stopped.set()
        self._fail_waiting()

    def _run_batch(self, batch: list[_Request]) -> None:
        self._apply_pending()
        start = self._clock()
        obs = np.concatenate([r.obs for r in batch])
        rows = obs.shape[0]
        recurrent = batch[0].state is not None
        state = None
        if recurrent:
            state = (
                np.concatenate([r.state[0] for r in batch]),
                np.concatenate([r.state[1] for r in batch]),
            )
        padded = bucket_size(rows, self.max_batch) if self._pad else rows
        if padded > rows:
            obs = np.concatenate([obs, np.repeat(obs[-1:], padded - rows, axis=0)])
            if state is not None:
                state = tuple(
                    np.concatenate([s, np.repeat(s[-1:], padded - rows, 0)]) for s in state
                )
        q, new_state = self._policy(obs, state)
        q = np.asarray(q)
        done = self._clock()
        version, info = self.version, self.info
        offset = 0
        for r in batch:
            n = r.rows
            s = None
            if new_state is not None:
                s = (
                    np.asarray(new_state[0][offset : offset + n]),
                    np.asarray(new_state[1][offset : offset + n]),
                )
            r.result = (q[offset : offset + n], s, version, info)
            offset += n
            r.done.set()
        with self._lock:
            self._batch_rows.append(rows)
            self._batch_requests.append(len(batch))
            self._forward_seconds.append(done - start)
            for r in batch:
                self._waits.append(start - r.arrival)
                self._latencies.append(done - r.arrival)
            self.requests_total += len(batch)
            self.batches_total += 1
            self.batch_sizes_seen[len(batch)] += 1

    def _fail_waiting(self) -> None:
        """After the stop: every request still queued gets ServerStopped (no caller hangs)."""
        pending = [self._carry] if self._carry is not None else []
        self._carry = None
        with self._admit:  # from here on, infer() refuses instead of queueing
            self._drained = True
            while True:
                try:
                    request = self._queue.get_nowait()
                except queue.Empty:
                    break
                if request is not None:
                    pending.append(request)
        for request in pending:
            request.error = ServerStopped(self._stopped_reason())
            request.done.set()

    # ---------------------------------------------------------------- figures
    def stats(self) -> dict[str, float]:
        """The figures since the previous call (see docs/metrics.md, inference/...)."""
        now = self._clock()
        with self._lock:
            rows, requests = self._batch_rows, self._batch_requests
            waits, latencies, forwards = self._waits, self._latencies, self._forward_seconds
            self._batch_rows, self._batch_requests = [], []
            self._waits, self._latencies, self._forward_seconds = [], [], []
            since, self._since = self._since, now
        elapsed = max(now - since, 1e-9)
        row = {
            "inference/param_version": float(self.version),
            "inference/requests": float(self.requests_total),
            "inference/forward_passes": float(self.batches_total),
            "inference/requests_per_second": len(latencies) / elapsed,
            "inference/forward_passes_per_second": len(rows) / elapsed,
        }
        if rows:
            row.update(
                {
                    "inference/batch_observations_p50": _percentile(rows, 50),
                    "inference/batch_observations_p90": _percentile(rows, 90),
                    "inference/batch_requests_p50": _percentile(requests, 50),
                    "inference/batch_requests_p90": _percentile(requests, 90),
                    "inference/queue_wait_ms_p50": 1e3 * _percentile(waits, 50),
                    "inference/queue_wait_ms_p99": 1e3 * _percentile(waits, 99),
                    "inference/latency_ms_p50": 1e3 * _percentile(latencies, 50),
                    "inference/latency_ms_p99": 1e3 * _percentile(latencies, 99),
                    "inference/forward_ms_p50": 1e3 * _percentile(forwards, 50),
                }
            )
        return row

    def close(self) -> None:
        """Stops the batching thread; callers still waiting get ServerStopped."""
        self._stopped.set()
        self._queue.put(None)
        self._thread.join(timeout=10)
        self._fail_waiting()


def follow_learner(
    server: BatchingServer,
    learner: Any,
    should_stop: Callable[[], bool],
    wait: Callable[[float], Any],
    params_period: float,
    metrics_period: float,
    write_row: Callable[[dict], None] | None = None,
) -> None:
    """The inference node's loop: every `params_period` seconds, hands the
    learner's newest parameters (in-process: `learner.get_variables()`, when its
    step count moved) to `server`; every `metrics_period` seconds, writes the
    server's figures (with the policy lag) through `write_row`. Returns at the
    stop; raises the server's error if its forward pass failed."""
    version = None
    last_row = time.time()
    while not should_stop():
        if version is None or learner.steps != version:
            version, weights, info = learner.get_variables()
            server.set_weights(version, weights, info)
        if server.error is not None:
            raise server.error
        now = time.time()
        if write_row is not None and now - last_row >= metrics_period:
            row = server.stats()
            row["inference/policy_lag_steps"] = float(max(0, learner.steps - server.version))
            write_row(row)
            last_row = now
        wait(params_period)
    if server.error is not None:
        raise server.error


class InferenceService:
    """The inference node's RPCs over a BatchingServer: what an actor's handle
    calls (`infer`, `version`) and the node's figures (`stats`). The node
    (launch.nodes.InferenceNode) is one; tests and bench/inference.py serve
    it in-process or over a Courier server of their own.

    Args:
      server: the BatchingServer.
      timeout: seconds a request may wait for its answer (inference.call_timeout_seconds).
    """

    def __init__(self, server: BatchingServer, timeout: float | None = None):
        self._server = server
        self._timeout = timeout

    def infer(
        self, obs: np.ndarray, h: np.ndarray | None = None, c: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int, float]:
        """(q, h, c, version, max_priority) for an actor's observations (and state),
        as plain values a courier call carries; h and c are None for a feed-forward net."""
        state = None if h is None else (h, c)
        q, new_state, version, info = self._server.infer(obs, state, timeout=self._timeout)
        h2, c2 = (None, None) if new_state is None else new_state
        return q, h2, c2, version, float(info.get("max_priority", 0.0) or 0.0)

    def version(self) -> int:
        """The parameter version served (-1 before the first parameters)."""
        return self._server.newest_version()

    def stats(self) -> dict:
        """The figures since the last call (docs/metrics.md, inference/...)."""
        return self._server.stats()
