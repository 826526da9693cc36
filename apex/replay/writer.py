"""Writes n-step transitions or sequences, with per-item priorities, into Reverb."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import numpy as np
import reverb
import tree

from apex import compat
from apex.replay.frame_codec import compresses, encode, sequence_block
from apex.replay.stats import stats_from_server_info
from apex.replay.tables import (
    ROW_PREFIX,
    SEQUENCE_META,
    SEQUENCE_STEP_FIELDS,
    TRANSITION_PROVENANCE,
    TRANSITION_SCALARS,
    row_column,
)

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


# A write that waits for room watches its stream (TransitionWriter._wait): after
# stall_seconds without a confirmation it asks the server every
# STALL_PROBE_SECONDS, each call bounded by STALL_PROBE_TIMEOUT seconds.
STALL_PROBE_SECONDS = 1.0
STALL_PROBE_TIMEOUT = 2
# A working stream held by the rate limiter gets its fair share of the inserts
# the table takes (TransitionWriter._others_before_broken): STALL_OTHERS_FACTOR
# shares of max_in_flight_items with none of its own is a broken stream.
STALL_OTHERS_FACTOR = 4


class ReplayStalled(RuntimeError):
    """A writer's stream to the replay stopped moving while the server answers and
    its rate limiter would take an insert: the stream is broken (a network
    partition leaves it so: Reverb's writer does not recover). The actor goes on
    with a new client and writer (launch.nodes.actor); `pending` items were
    never confirmed (lost in flight), after `seconds` without a confirmation.
    `moved`: the server does not answer, and its shard was started again
    elsewhere (apex.coordination.moves): the new writer dials its new address."""

    def __init__(
        self, address: str, seconds: float, pending: int, error: str = "", moved: bool = False
    ):
        self.address, self.seconds, self.pending = address, float(seconds), int(pending)
        self.moved = bool(moved)
        why = f"; last stream error {error}" if error else ""
        if moved:
            text = (
                f"the replay at {address} has not answered for {seconds:.0f} s and its shard "
                f"was started again elsewhere ({pending} items unconfirmed)"
            )
        else:
            text = (
                f"the stream to the replay at {address} took no item for {seconds:.0f} s while "
                f"the server answers and would take inserts ({pending} items unconfirmed{why})"
            )
        super().__init__(text)


# Items as the table's columns (the layouts: apex.replay.tables; unpacked there).


def _stores_rows(client: reverb.Client, table: str) -> bool:
    """True if `table` stores transitions as one row each (its signature says so:
    the builder chose the layout, apex.replay.tables.stores_rows)."""
    return row_column(client.server_info(timeout=30)[table].signature) is not None


def pack_transitions(
    batch: dict,
    actor: int,
    slots: np.ndarray,
    epsilons: np.ndarray,
    now: float,
    rows: bool = False,
) -> dict[str, np.ndarray]:
    """Rows of `batch` (NStepAccumulator.add's output) as the stored columns: the
    three columns, or with `rows` one float64 row per item (row_signature)."""
    fields = {**batch, "epsilon": epsilons, "actor": actor, "slot": slots, "insert_time": now}
    n = len(batch["action"])
    if rows:
        d = int(np.prod(np.shape(batch["obs"])[1:], dtype=np.int64))
        names = TRANSITION_SCALARS + TRANSITION_PROVENANCE
        row = np.empty((n, 2 * d + len(names)), np.float64)
        row[:, :d] = np.reshape(batch["obs"], (n, d))
        row[:, d : 2 * d] = np.reshape(batch["next_obs"], (n, d))
        for i, name in enumerate(names):
            row[:, 2 * d + i] = fields[name]
        return {ROW_PREFIX + np.asarray(batch["obs"]).dtype.name: row}
    out = {"obs_pair": np.stack([batch["obs"], batch["next_obs"]], axis=1)}
    for column, names, dtype in (
        ("scalars", TRANSITION_SCALARS, np.float32),
        ("provenance", TRANSITION_PROVENANCE, np.float64),
    ):
        out[column] = np.empty((n, len(names)), dtype)
        for i, name in enumerate(names):
            out[column][:, i] = fields[name]
    return out


def pack_sequences(
    batch: dict, actor: int, slots: np.ndarray, epsilons: np.ndarray, now: float
) -> tuple[np.ndarray, np.ndarray]:
    """(floats [N, 4L + 2H] float32, meta [N, 6] float64) of the sequences of
    `batch` (SequenceAccumulator.add's output)."""
    floats = np.concatenate(
        [np.asarray(batch[k], np.float32) for k in SEQUENCE_STEP_FIELDS]
        + [np.asarray(batch["state_h"], np.float32), np.asarray(batch["state_c"], np.float32)],
        axis=1,
    )
    fields = {
        "start_step": batch["start_step"],
        "actor": actor,
        "slot": slots,
        "epsilon": epsilons,
        "version": batch["version"],
        "insert_time": now,
    }
    meta = np.empty((len(floats), len(SEQUENCE_META)), np.float64)
    for i, name in enumerate(SEQUENCE_META):
        meta[:, i] = fields[name]
    return floats, meta


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
        >>> with TransitionWriter(client, "transitions", actor_id=0, epsilons=eps) as w:
        ...     w.write(batch, priorities)

    Args:
      client: the replay's reverb.Client.
      table: the table the items go to (the agent's: its builder's `table`).
      actor_id, epsilons, slot_offset: the provenance of the actor's items
        (its env slot j is global slot slot_offset + j, with epsilons[j]).
    """

    def __init__(
        self,
        client: reverb.Client,
        table: str,
        actor_id: int,
        epsilons: np.ndarray,
        slot_offset: int = 0,
        chunk_length: int = 16,
        max_in_flight_items: int = 48,
        should_stop: Callable[[], bool] | None = None,
    ):
        self._client = client
        self._table = table
        self._actor = np.int32(actor_id)
        self._epsilons = np.asarray(epsilons, np.float32)
        self._slot_offset = int(slot_offset)
        self._max_in_flight = int(max_in_flight_items)
        self._should_stop = should_stop or (lambda: False)
        # The server's table signatures are fetched once (3 s at most) and every
        # item is checked against them before it is sent.
        self._chunk_length = int(chunk_length)
        self._writer = compat.reverb_trajectory_writer(client, chunk_length, 3000)
        self._rows: bool | None = None  # the table's layout, asked at the first write
        self.items_written = 0
        self.seconds_writing = 0.0
        self._frames: _FrameStreams | None = None  # set by start_frames

    # ------------------------------------------------ frames stored once (issue 16)
    can_store_frames = True  # ItemWriter (apex.roles): start_frames is offered

    @property
    def stores_frames(self) -> bool:
        """True once start_frames was called: `write` then takes frame positions."""
        return self._frames is not None

    @property
    def frames_written(self) -> int:
        """Frames (observations) appended to the slots' streams so far (0: not stored once)."""
        return 0 if self._frames is None else int(self._frames.count.sum())

    @property
    def frame_bytes(self) -> int:
        """Bytes of compressed frames written so far (0: not compressed)."""
        return 0 if self._frames is None else int(self._frames.stored_bytes)

    def start_frames(self, obs: np.ndarray, n_step: int, compression: str = "none") -> np.ndarray:
        """Switches this writer to storing each frame once; returns the positions of obs.

        obs: [E, K, *frame], every slot's first stacked observation (K frames,
        oldest first). Column j (< E) of the Reverb writer becomes slot j's
        stream of single frames (each compressed alone with `compression`,
        replay.frame_compression); an item's `obs_frames` column references the K
        frames ending at obs's newest frame, `next_obs_frames` the K ending at next_obs's
        (frame_transition_signature). From now on the actor passes, in place
        of obs and next_obs, the positions `start_frames`, `append_frames` and
        `restart_frames` return (NStepAccumulator carries them like any obs).
        Call before the first write.
        """
        obs = np.asarray(obs)
        e, k = obs.shape[0], obs.shape[1]
        # Oldest frame an item may still reference, counted back from a slot's
        # newest: the n-step start's window (n + K) after at most n full
        # restacks (K each, see append_frames) and the episode's first K.
        keep = max(self._chunk_length, (n_step + 2) * k + 1)
        self._writer.Close()  # nothing was written through it yet
        self._writer = compat.reverb_trajectory_writer(self._client, self._chunk_length, 3000, keep)
        # An item is sent once its frames' chunks are complete: up to
        # chunk_length steps of every slot's items wait for them (a Flush
        # would cut chunks short: worse compression, more slices per item).
        self._max_in_flight = max(self._max_in_flight, e * (self._chunk_length + n_step + 2))
        self._frames = _FrameStreams(e, k, keep, compression=compression)
        return self._frames.append(self._writer, [list(o) for o in obs])

    def append_frames(self, next_obs: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Stores the newest frame of every slot's next_obs [E, K, *frame]; returns
        next_obs's positions. obs is the observation each slot acted in: a slot
        whose next_obs is not obs shifted by one frame gets its whole stack
        stored again (never for gymnasium's FrameStackObservation), so a
        position's window always equals the stack, bit for bit."""
        assert self._frames is not None, "start_frames first"
        t0 = time.perf_counter()
        next_obs = np.asarray(next_obs)
        e = len(next_obs)
        shifted = (next_obs[:, :-1] == np.asarray(obs)[:, 1:]).reshape(e, -1).all(axis=1)
        frames = [[next_obs[j, -1]] if shifted[j] else list(next_obs[j]) for j in range(e)]
        out = self._frames.append(self._writer, frames)
        self.seconds_writing += time.perf_counter() - t0
        return out

    def restart_frames(self, slot: int, obs: np.ndarray) -> int:
        """Stores slot's whole new stack obs [K, *frame] (an episode's first
        observation: the frame stack's padding included); returns its position."""
        assert self._frames is not None, "start_frames first"
        frames: list[list[np.ndarray]] = [[] for _ in range(self._frames.num_slots)]
        frames[slot] = list(np.asarray(obs))
        return int(self._frames.append(self._writer, frames)[slot])

    def write(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        """Writes every row of `batch` (see NStepAccumulator.add) with its priority,
        packed into the table's columns (one row or three: apex.replay.tables)."""
        t0 = time.perf_counter()
        local = np.asarray(batch["slot"], np.int64)
        if self._rows is None:
            self._rows = self._frames is None and _stores_rows(self._client, self._table)
        packed = pack_transitions(
            batch,
            int(self._actor),
            self._slot_offset + local,
            self._epsilons[local],
            time.time(),
            rows=self._rows,
        )
        if self._frames is None:
            self._insert(packed, priorities)
        else:  # obs/next_obs are frame positions
            self._insert_frames(packed, local, batch["obs"], batch["next_obs"], priorities)
        self.seconds_writing += time.perf_counter() - t0

    def _insert_frames(self, packed, slots, obs_pos, next_pos, priorities) -> None:
        """One item per row: `obs_frames` and `next_obs_frames` reference two
        windows of the row's slot's frame stream; its scalars and provenance
        are written as one step of one column, `meta`."""
        frames = self._frames
        e = frames.num_slots
        meta = np.concatenate([packed["scalars"], packed["provenance"]], axis=1, dtype=np.float64)
        # Columns in the signature's order (sorted names): meta,
        # next_obs_frames, obs_frames.
        squeeze = [True, False, False]
        w, table = self._writer, self._table
        blank: list = [None] * e
        n = len(priorities)
        for j in self._confirmed_window(n):
            s = int(slots[j])
            columns = [
                [w.Append(blank + [meta[j]])[e]],
                frames.window(s, int(next_pos[j])),
                frames.window(s, int(obs_pos[j])),
            ]
            w.CreateItem(table, float(priorities[j]), columns, squeeze)
        self.items_written += n

    def _insert(self, columns: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        """One item per row of `columns` ({name: [N, ...]}, the table's signature
        names); never more than max_in_flight_items unconfirmed (it waits first)."""
        flat = tree.flatten(columns)  # the signature's order (sorted names)
        squeeze = [True] * len(flat)
        w, table = self._writer, self._table
        n = len(priorities)
        for j in self._confirmed_window(n):
            refs = w.Append([c[j] for c in flat])
            w.CreateItem(table, float(priorities[j]), [[r] for r in refs], squeeze)
        self.items_written += n

    def _confirmed_window(self, n: int):
        """Yields 0..n-1 (the rows to insert), waiting before each window of
        max_in_flight_items // 2 rows until the server has confirmed enough of
        this writer's items that at most max_in_flight_items stay unconfirmed."""
        step = max(1, self._max_in_flight // 2)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            self._wait(self._max_in_flight - (hi - lo), None)
            yield from range(lo, hi)

    def _wait(self, pending: int, timeout: float | None, stoppable: bool = True) -> bool:
        """Waits (the GIL released) until at most `pending` items are unconfirmed;
        False if `timeout` s passed, or (`stoppable`) should_stop() became true, first.

        Without a timeout (a write waiting for room) it watches the stream: after
        `stall_seconds` without a confirmation it asks the server (server_info) every
        STALL_PROBE_SECONDS. No answer: the link is down (`unreachable_since`), it
        waits on. The server answers and the stream is broken (what a partition
        leaves behind; Reverb's writer does not recover from it): ReplayStalled is
        raised for a new writer. Broken means one of
          - the stream reported an error of its own (not a timeout);
          - the table's rate limiter would take an insert, twice in a row;
          - the table took STALL_OTHERS_FACTOR fair shares of inserts from other
            writers while none of this writer's pending items was confirmed (a
            limiter that other actors keep full is not why this one waits)."""
        if stoppable and self._should_stop():
            timeout = 0.001  # stopping: one look, no wait
        began = time.monotonic()
        end = None if timeout is None else began + timeout
        watch = end is None and self.stall_seconds is not None
        next_probe = began + (self.stall_seconds or 0.0)
        open_probes = 0
        stream_error = ""
        baseline: tuple[int, int] | None = None  # (table inserts, our unconfirmed) at a probe
        while True:
            step = 1.0 if end is None else min(1.0, max(end - time.monotonic(), 0.001))
            try:
                self._writer.Flush(pending, max(1, int(1000 * step)))
                self.unreachable_since = None
                return True
            except RuntimeError as err:
                if "Timeout exceeded" not in str(err):
                    if not watch:
                        raise
                    stream_error = f"{type(err).__name__}: {str(err)[:200]}"
                    time.sleep(0.2)  # a broken stream answers at once: no busy loop
            if (stoppable and self._should_stop()) or (end is not None and time.monotonic() >= end):
                return False
            now = time.monotonic()
            if watch and now >= next_probe:
                next_probe = now + STALL_PROBE_SECONDS
                verdict, inserts = self._probe()
                if verdict == "unreachable":
                    open_probes, baseline = 0, None
                    if self.unreachable_since is None:
                        self.unreachable_since = time.time()
                    if self.address_moved is not None and self.address_moved():
                        raise ReplayStalled(
                            self._client_address(), now - began, self._pending_items(), moved=True
                        )
                    continue
                self.unreachable_since = None
                open_probes = open_probes + 1 if verdict == "open" else 0
                broken = bool(stream_error) or open_probes >= 2
                if not broken and inserts is not None:
                    mine = self._pending_items()
                    if baseline is None or mine < baseline[1]:
                        baseline = (inserts, mine)  # ours moved: the stream works
                    elif inserts - baseline[0] >= self._others_before_broken():
                        broken = True
                if broken:
                    raise ReplayStalled(
                        self._client_address(), now - began, self._pending_items(), stream_error
                    )

    # Seconds a write waits for room without any confirmation before the writer
    # asks the server whether its stream is broken (None: never ask, wait on).
    stall_seconds: float | None = 5.0
    # How many writers share the table (the actors; set by launch.nodes.actor).
    fellow_writers: int = 1
    unreachable_since: float | None = None  # time.time() the server stopped answering
    # Whether the server's shard now listens at another address (set by
    # launch.nodes.actor from the coordinator's replies; None: never asked).
    address_moved: Callable[[], bool] | None = None

    def _others_before_broken(self) -> int:
        """Items the table may take from other writers while none of this one's
        pending items is confirmed before its stream counts as broken: each
        writer's fair share (Reverb lets held writers in in turn: measured even
        across 8 writers) is STALL_OTHERS_FACTOR times max_in_flight_items."""
        return STALL_OTHERS_FACTOR * self._max_in_flight * max(1, int(self.fellow_writers))

    def _client_address(self) -> str:
        return str(getattr(self._client, "server_address", "?"))

    def _probe(self) -> tuple[str, int | None]:
        """('unreachable', None) when no answer came within STALL_PROBE_TIMEOUT s;
        else ('open' if this writer's table would take an insert now, or 'held'
        if its rate limiter holds inserts, waiting being right) and how many
        inserts the table has completed (None if the answer lacks our table)."""
        try:
            info = self._client.server_info(timeout=STALL_PROBE_TIMEOUT)
        except Exception:  # noqa: BLE001 - no answer: the link or the server is down
            return "unreachable", None
        try:
            stats = {t["table"]: t for t in stats_from_server_info(info)}[self._table]
            return ("open" if stats["rate_limiter"]["can_insert"] else "held"), int(
                stats["inserts"]
            )
        except Exception:  # noqa: BLE001 - an answer without our table: not our stream's fault
            return "held", None

    def _pending_items(self) -> int:
        """How many of this writer's items the server has not confirmed (a
        bisection of Flush with 1 ms timeouts; max_in_flight_items if it errs)."""
        lo, hi = 0, self._max_in_flight
        try:
            while lo < hi:
                mid = (lo + hi) // 2
                try:
                    self._writer.Flush(mid, 1)
                    hi = mid
                except RuntimeError as err:
                    if "Timeout exceeded" not in str(err):
                        return self._max_in_flight
                    lo = mid + 1
        except Exception:  # noqa: BLE001 - a count, not worth a failure
            return self._max_in_flight
        return lo

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


class _FrameStreams:
    """Each slot's stream of frames in the Reverb writer: column j is slot j's
    stream; the newest `keep` refs of each are held for items.

    Positions count frames (observations). Uncompressed, each frame is one
    writer step. Compressed (apex.replay.frame_codec), each block of `block`
    consecutive frames of a slot is one writer step holding its bytes: a slot's
    frames wait in `pending` until its block is full, and a window must cover
    whole blocks that are written (block 1: every frame at once).
    """

    def __init__(
        self,
        num_slots: int,
        stack: int,
        keep: int,
        item_columns: int = 1,
        compression: str = "none",
        block: int = 1,
    ):
        self.num_slots = num_slots
        self.stack = stack
        self.item_columns = item_columns  # the writer's columns after the streams
        self.compression = compression
        self.block = int(block) if compresses(compression) else 1
        self.count = np.zeros(num_slots, np.int64)  # frames appended per slot
        self.refs = [collections.deque(maxlen=keep) for _ in range(num_slots)]  # one per step
        self.pending: list[list[np.ndarray]] = [[] for _ in range(num_slots)]
        self.stored_bytes = 0  # compressed bytes written (0 uncompressed)

    def append(self, writer, frames: list[list[np.ndarray]]) -> np.ndarray:
        """Appends slot j's frames[j] (oldest first; may be empty) to its stream,
        as few writer steps as the longest list; returns every slot's newest position."""
        steps: list[list] = []
        for j, f in enumerate(frames):
            self.count[j] += len(f)
            if not compresses(self.compression):
                steps.append(list(f))
                continue
            self.pending[j].extend(f)
            out = []
            while len(self.pending[j]) >= self.block:
                block, self.pending[j] = (
                    self.pending[j][: self.block],
                    self.pending[j][self.block :],
                )
                value = encode(np.stack(block), self.compression)
                self.stored_bytes += len(value)
                out.append(np.array(value, dtype=object))
            steps.append(out)
        for r in range(max(len(f) for f in steps)):
            step = [f[r] if r < len(f) else None for f in steps]
            refs = writer.Append(step + [None] * self.item_columns)  # then the items' columns
            for j, value in enumerate(step):
                if value is not None:
                    self.refs[j].append(refs[j])
        return self.count - 1  # a copy

    def align(self, writer, slot: int, fill: np.ndarray) -> None:
        """Starts slot's next frame on a block boundary: `fill` frames (never
        referenced) complete its open block, if any."""
        gap = -int(self.count[slot]) % self.block
        if gap:
            frames: list[list[np.ndarray]] = [[] for _ in range(self.num_slots)]
            frames[slot] = [fill] * gap
            self.append(writer, frames)

    def window(self, slot: int, position: int, length: int | None = None) -> list:
        """The refs of the `length` (default `stack`) frames ending at `position`
        of slot's stream: one per frame, or one per block (compressed blocks:
        the window starts and ends on block boundaries)."""
        length = self.stack if length is None else length
        first, g = position - length + 1, self.block
        refs = self.refs[slot]
        written = (int(self.count[slot]) - len(self.pending[slot])) // g  # steps written
        if first % g or length % g:
            raise RuntimeError(
                f"frame window {first}..{position} of slot {slot} is not on blocks of {g}"
            )
        lo = first // g - (written - len(refs))
        hi = (position + 1) // g - (written - len(refs))
        if lo < 0 or hi > len(refs):
            raise RuntimeError(
                f"frame window ending at {position} of slot {slot} is no longer held or not "
                f"yet written ({len(refs)} of {written} steps kept)"
            )
        return [refs[i] for i in range(lo, hi)]


# Chunk length of R2D2's frame layout (bench/atari_replay.py, docs/benchmarks.md).
FRAME_CHUNK_LENGTH = 8


class SequenceWriter(TransitionWriter):
    """Inserts R2D2 sequences (see SequenceAccumulator.add), one Reverb item each.

    Packed layout (sequence_signature): one column per field, chunks of 2 (not
    16) so that an item reaches the server soon after the actor finished it.
    Frame layout (start_frames; frame_sequence_signature): each slot's
    observations are written once, as a stream, and an item references the L
    consecutive steps it covers, so overlapping sequences share chunks.
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

    def __init__(
        self,
        *args,
        chunk_length: int = 2,
        frame_chunk_length: int = FRAME_CHUNK_LENGTH,
        **kwargs,
    ):
        super().__init__(*args, chunk_length=chunk_length, **kwargs)
        self._frame_chunk_length = int(frame_chunk_length)  # the frame layout's
        self._length = 0  # L, set by start_frames
        self._last_real: np.ndarray | None = None  # each slot's newest real observation
        self._zero: np.ndarray | None = None

    def start_frames(
        self, obs: np.ndarray, length: int, period: int, compression: str = "none"
    ) -> np.ndarray:
        """Switches this writer to the frame layout; returns the positions of obs.

        obs: [E, *obs], every slot's first observation; length, period: the
        sequences' L and P. Column j (< E) of the
        Reverb writer becomes slot j's stream of observations, one per env
        step (compressed with `compression` in blocks of G =
        frame_codec.sequence_block(L, P) steps; each episode starts a block,
        so each sequence covers L / G whole blocks); from now on the actor
        passes, in place of each step's obs, the
        position `start_frames` or `append_frames` returned for it
        (SequenceAccumulator carries them like any obs), and appends each
        step's next observations after writing that step's sequences (the
        padding of an ended episode's sequences goes between). Chunks of
        `frame_chunk_length` steps from now on. Call before the first write.
        """
        obs = np.asarray(obs)
        e = obs.shape[0]
        self._length = int(length)
        self._chunk_length = self._frame_chunk_length
        g = sequence_block(length, period, compression)
        # Oldest step an item may still reference, counted back from a slot's
        # newest: an open sequence's start (< L back) and its padding (< L)
        # (in writer steps: blocks of g observations).
        keep = (2 * self._length + g - 1) // g + self._chunk_length + 1
        self._writer.Close()  # nothing was written through it yet
        self._writer = compat.reverb_trajectory_writer(self._client, self._chunk_length, 3000, keep)
        # An item is sent once its chunks are complete: the sequences of up to
        # chunk_length steps of every slot (those an episode's end emits at
        # once included) and chunk_length items wait for them (a Flush would
        # cut chunks short).
        c = self._chunk_length
        per_slot = (self._length + c) // max(1, int(period)) + 2
        self._max_in_flight = max(self._max_in_flight, 2 * c + e * per_slot)
        self._frames = _FrameStreams(
            e, self._length, keep, item_columns=2, compression=compression, block=g
        )
        self._zero = np.zeros_like(obs[0])
        positions = self._frames.append(self._writer, [[o] for o in obs])
        self._last_real = positions.copy()
        return positions

    def append_frames(self, obs: np.ndarray, episode_starts=()) -> np.ndarray:
        """Appends every slot's next observation obs [E, *obs] to its stream;
        returns their positions. `episode_starts`: the slots whose obs is an
        episode's first (its sequences start there: on a block boundary)."""
        assert self._frames is not None, "start_frames first"
        t0 = time.perf_counter()
        for j in episode_starts:
            self._frames.align(self._writer, int(j), self._zero)
        positions = self._frames.append(self._writer, [[o] for o in np.asarray(obs)])
        self._last_real = positions.copy()
        self.seconds_writing += time.perf_counter() - t0
        return positions

    def write(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        """Writes every sequence of `batch` (SequenceAccumulator.add) with its priority:
        packed, one column per field plus the provenance fields; or (after
        start_frames) as a window of its slot's stream and two packed columns."""
        t0 = time.perf_counter()
        n = len(priorities)
        local = np.asarray(batch["slot"], np.int64)
        if self._frames is not None:
            self._insert_sequences(batch, local, priorities)
            self.seconds_writing += time.perf_counter() - t0
            return
        columns = {name: batch[name] for name in self.FIELDS}
        columns["actor"] = np.full(n, self._actor, np.int32)
        columns["slot"] = (self._slot_offset + local).astype(np.int32)
        columns["epsilon"] = self._epsilons[local]
        columns["version"] = np.asarray(batch["version"], np.int64)
        columns["insert_time"] = np.full(n, time.time(), np.float64)
        self._insert(columns, priorities)
        self.seconds_writing += time.perf_counter() - t0

    def _insert_sequences(self, batch, slots, priorities) -> None:
        """One item per sequence: `obs_frames` references the L steps of its
        slot's stream from its first position on (the steps after an episode's
        end are zero observations, appended here once per slot as needed);
        `floats` and `meta` are one step each of the writer's last two columns."""
        frames, length = self._frames, self._length
        e = frames.num_slots
        floats, meta = pack_sequences(
            batch,
            int(self._actor),
            self._slot_offset + slots,
            self._epsilons[slots],
            time.time(),
        )
        positions = np.asarray(batch["obs"], np.int64)
        real = np.asarray(batch["mask"]).sum(axis=1).astype(np.int64)
        # Columns in the signature's order (sorted names): floats, meta, obs_frames.
        squeeze = [True, True, False]
        w, table = self._writer, self._table
        blank: list = [None] * e
        n = len(priorities)
        for j in self._confirmed_window(n):
            s, first, k = int(slots[j]), int(positions[j, 0]), int(real[j])
            if not np.array_equal(positions[j, :k], first + np.arange(k)):
                raise RuntimeError(f"sequence {j}: its steps are not consecutive in its stream")
            last = first + length - 1
            if k < length:  # padded: zero observations after the episode's last one
                if first + k - 1 != self._last_real[s]:
                    raise RuntimeError(f"sequence {j}: padding after a step not the newest")
                pad = last + 1 - int(frames.count[s])
                if pad > 0:
                    zeros = [[] for _ in range(e)]
                    zeros[s] = [self._zero] * pad
                    frames.append(w, zeros)
            refs = w.Append(blank + [floats[j], meta[j]])[e:]
            columns = [[refs[0]], [refs[1]], frames.window(s, last, length)]
            w.CreateItem(table, float(priorities[j]), columns, squeeze)
        self.items_written += n
