"""Writes n-step transitions or sequences, with per-item priorities, into Reverb."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import reverb
import tree

from apex import compat
from apex.replay.tables import SEQUENCES_TABLE, TRANSITIONS_TABLE, pack_transitions

# How items are written: one Reverb item per transition (or R2D2 sequence),
# each with its own priority, each referencing one step of every column,
# squeezed (the item's columns have the table signature's shapes; the learner
# reads them with TrajectoryDataset, the tools with the checkpoint reader). The
# n-step logic stays in numpy (apex.replay.nstep).
#
# Why Reverb's C++ TrajectoryWriter called through reverb.pybind (private API
# of the pinned dm-reverb 0.7.0, reached in apex.compat; tests/test_compat.py
# and tests/test_replay.py cover it) and not one of Reverb's Python writers: acme's adders and the
# StructuredWriter insert every item at one fixed priority; the legacy Writer
# writes each item to the gRPC stream on the caller's thread, one synchronous
# write per item (28 us of an actor's 75 us per env step); the Python
# TrajectoryWriter keeps a Python history per column (7.8 k items/s). The C++
# TrajectoryWriter streams from its own thread without the GIL, so a write is
# two calls per item (Append, CreateItem) on the actor's thread. Bench
# (VectorActor + writer, server in another process, same run): 13.0 k -> 16.3 k
# env steps/s.


class TransitionWriter:
    """Inserts batches of transitions, one Reverb item each, with their priorities.

    At most `max_in_flight_items` of this writer's items are ever unconfirmed
    by the server (48: Reverb logs a warning from 50): `write` waits for
    confirmations first. While the rate limiter holds inserts an actor waits
    there, checking `should_stop()` every second (after a stop it
    returns with its items still pending, for close() to try; Reverb's writer
    would otherwise wait, and retry a vanished server, forever). Use as a
    context manager so buffered items are flushed on exit.

    Example:
        >>> with TransitionWriter(client, actor_id=0, epsilons=eps) as w:
        ...     w.write(batch, priorities)
    """

    TABLE = TRANSITIONS_TABLE

    def __init__(
        self,
        client: reverb.Client,
        actor_id: int,
        epsilons: np.ndarray,
        slot_offset: int = 0,
        chunk_length: int = 16,
        table: str | None = None,
        max_in_flight_items: int = 48,
        should_stop: Callable[[], bool] | None = None,
    ):
        self._client = client
        self._table = table or self.TABLE
        self._actor = np.int32(actor_id)
        self._epsilons = np.asarray(epsilons, np.float32)
        self._slot_offset = int(slot_offset)
        self._max_in_flight = int(max_in_flight_items)
        self._should_stop = should_stop or (lambda: False)
        # The server's table signatures are fetched once (3 s at most) and every
        # item is checked against them before it is sent.
        self._writer = compat.reverb_trajectory_writer(client, chunk_length, 3000)
        self.items_written = 0
        self.seconds_writing = 0.0

    def write(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        """Writes every row of `batch` (see NStepAccumulator.add) with its priority,
        packed into the table's three columns (apex.replay.tables)."""
        t0 = time.perf_counter()
        local = np.asarray(batch["slot"], np.int64)
        packed = pack_transitions(
            batch, int(self._actor), self._slot_offset + local, self._epsilons[local], time.time()
        )
        self._insert(packed, priorities)
        self.seconds_writing += time.perf_counter() - t0

    def _insert(self, columns: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        """One item per row of `columns` ({name: [N, ...]}, the table's signature
        names); never more than max_in_flight_items unconfirmed (it waits first)."""
        flat = tree.flatten(columns)  # the signature's order (sorted names)
        squeeze = [True] * len(flat)
        w, table = self._writer, self._table
        n, step = len(priorities), max(1, self._max_in_flight // 2)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            self._wait(self._max_in_flight - (hi - lo), None)
            for j in range(lo, hi):
                refs = w.Append([c[j] for c in flat])
                w.CreateItem(table, float(priorities[j]), [[r] for r in refs], squeeze)
        self.items_written += n

    def _wait(self, pending: int, timeout: float | None, stoppable: bool = True) -> bool:
        """Waits (the GIL released) until at most `pending` items are unconfirmed;
        False if `timeout` s passed, or (`stoppable`) should_stop() became true, first."""
        if stoppable and self._should_stop():
            timeout = 0.001  # stopping: one look, no wait
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            step = 1.0 if end is None else min(1.0, max(end - time.monotonic(), 0.001))
            try:
                self._writer.Flush(pending, max(1, int(1000 * step)))
                return True
            except RuntimeError as err:
                if "Timeout exceeded" not in str(err):
                    raise
            if (stoppable and self._should_stop()) or (end is not None and time.monotonic() >= end):
                return False

    def flush(self, timeout: float | None = None) -> bool:
        """Blocks until the server confirmed every item written so far (or
        `timeout` s, or a stop); True if it did."""
        return self._wait(0, timeout)

    def close(self, timeout: float = 3.0) -> bool:
        """Waits (at most `timeout` s) until the server confirmed every item, then closes.

        Returns False if that did not finish in time (e.g. the rate limiter
        holds inserts while nothing samples); the stream is then left to the
        process's exit rather than blocking a shutdown.
        """
        confirmed = self._wait(0, timeout, stoppable=False)
        # Close cancels what is still pending; on a thread, in case the stream hangs.
        closer = threading.Thread(target=self._writer.Close, name="writer-close", daemon=True)
        closer.start()
        closer.join(1.0)
        return confirmed

    def __enter__(self) -> TransitionWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SequenceWriter(TransitionWriter):
    """Inserts R2D2 sequences (see SequenceAccumulator.add), one Reverb item each.

    Sequences are large items: they go out in chunks of 2 (not 16) so that an
    item reaches the server soon after the actor finished it.
    """

    FIELDS = (
        "obs",
        "action",
        "reward",
        "discount",
        "mask",
        "state_h",
        "state_c",
        "start_step",
    )
    TABLE = SEQUENCES_TABLE

    def __init__(self, *args, chunk_length: int = 2, **kwargs):
        super().__init__(*args, chunk_length=chunk_length, **kwargs)

    def write(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        """Writes every sequence of `batch` (SequenceAccumulator.add) with its priority,
        one column per field plus the provenance fields."""
        t0 = time.perf_counter()
        n = len(priorities)
        local = np.asarray(batch["slot"], np.int64)
        columns = {name: batch[name] for name in self.FIELDS}
        columns["actor"] = np.full(n, self._actor, np.int32)
        columns["slot"] = (self._slot_offset + local).astype(np.int32)
        columns["epsilon"] = self._epsilons[local]
        columns["version"] = np.asarray(batch["version"], np.int64)
        columns["insert_time"] = np.full(n, time.time(), np.float64)
        self._insert(columns, priorities)
        self.seconds_writing += time.perf_counter() - t0
