"""Writes n-step transitions or sequences, with per-item priorities, into Reverb.

Each writer owns one stream to the replay (Reverb's C++ TrajectoryWriter, at
most max_in_flight_items unconfirmed; a broken stream told from a held one:
apex.replay.stalls). Packed items are written here; items over frames stored
once, through the layouts of apex.replay.frame_streams."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import reverb
import tree

from apex import compat
from apex.replay.frame_streams import SequenceFrames, StackedFrames
from apex.replay.stalls import ReplayStalled, others_before_broken, pending_items, probe
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
# STALL_PROBE_SECONDS whether the stream is broken (apex.replay.stalls).
STALL_PROBE_SECONDS = 1.0


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
        self._frames: StackedFrames | SequenceFrames | None = None  # set by start_frames

    # ------------------------------------------------ frames stored once
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
        frames = StackedFrames(e, k, n_step, self._chunk_length, compression)
        # An item is sent once its frames' chunks are complete: up to
        # chunk_length steps of every slot's items wait for them (a Flush
        # would cut chunks short: worse compression, more slices per item).
        self._use_frames(frames, e * (self._chunk_length + n_step + 2))
        return frames.start(self._writer, obs)

    def _use_frames(self, frames: StackedFrames | SequenceFrames, in_flight: int) -> None:
        """Writes through a new Reverb writer that keeps `frames.keep` refs of each
        column, with room for at least `in_flight` unconfirmed items."""
        self._writer.Close()  # nothing was written through it yet
        self._writer = compat.reverb_trajectory_writer(
            self._client, self._chunk_length, 3000, frames.keep
        )
        self._max_in_flight = max(self._max_in_flight, in_flight)
        self._frames = frames

    def append_frames(self, next_obs: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Stores the newest frame of every slot's next_obs [E, K, *frame]; returns
        next_obs's positions. obs is the observation each slot acted in: a slot
        whose next_obs is not obs shifted by one frame gets its whole stack
        stored again (never for gymnasium's FrameStackObservation), so a
        position's window always equals the stack, bit for bit."""
        assert self._frames is not None, "start_frames first"
        t0 = time.perf_counter()
        out = self._frames.append_stacks(self._writer, next_obs, obs)
        self.seconds_writing += time.perf_counter() - t0
        return out

    def restart_frames(self, slot: int, obs: np.ndarray) -> int:
        """Stores slot's whole new stack obs [K, *frame] (an episode's first
        observation: the frame stack's padding included); returns its position."""
        assert self._frames is not None, "start_frames first"
        return self._frames.restart(self._writer, slot, obs)

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
        else:  # obs/next_obs are frame positions; scalars and provenance one column
            meta = np.concatenate(
                [packed["scalars"], packed["provenance"]], axis=1, dtype=np.float64
            )
            n = len(priorities)
            rows = self._confirmed_window(n)
            self._frames.insert_transitions(
                self._writer,
                self._table,
                meta,
                local,
                batch["obs"],
                batch["next_obs"],
                priorities,
                rows,
            )
            self.items_written += n
        self.seconds_writing += time.perf_counter() - t0

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

    def _confirmed_window(self, n: int) -> Iterator[int]:
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
            limiter that other actors keep full is not why this one waits).
        The probes and the fair share: apex.replay.stalls."""
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
                verdict, inserts = probe(self._client, self._table)
                if verdict == "unreachable":
                    open_probes, baseline = 0, None
                    if self.unreachable_since is None:
                        self.unreachable_since = time.time()
                    if self.address_moved is not None and self.address_moved():
                        raise ReplayStalled(
                            self._client_address(), now - began, self._pending(), moved=True
                        )
                    continue
                self.unreachable_since = None
                open_probes = open_probes + 1 if verdict == "open" else 0
                broken = bool(stream_error) or open_probes >= 2
                if not broken and inserts is not None:
                    mine = self._pending()
                    if baseline is None or mine < baseline[1]:
                        baseline = (inserts, mine)  # ours moved: the stream works
                    elif inserts - baseline[0] >= others_before_broken(
                        self._max_in_flight, self.fellow_writers
                    ):
                        broken = True
                if broken:
                    raise ReplayStalled(
                        self._client_address(), now - began, self._pending(), stream_error
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

    def _client_address(self) -> str:
        return str(getattr(self._client, "server_address", "?"))

    def _pending(self) -> int:
        """How many of this writer's items the server has not confirmed."""
        return pending_items(self._writer, self._max_in_flight)

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


# Chunk length of R2D2's frame layout (bench/atari_replay.py, docs/performance.md).
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
        self._chunk_length = c = self._frame_chunk_length
        frames = SequenceFrames(e, np.zeros_like(obs[0]), length, period, c, compression)
        # An item is sent once its chunks are complete: the sequences of up to
        # chunk_length steps of every slot (those an episode's end emits at
        # once included) and chunk_length items wait for them (a Flush would
        # cut chunks short).
        per_slot = (frames.length + c) // max(1, int(period)) + 2
        self._use_frames(frames, 2 * c + e * per_slot)
        return frames.append_steps(self._writer, obs)

    def append_frames(self, obs: np.ndarray, episode_starts: Iterable[int] = ()) -> np.ndarray:
        """Appends every slot's next observation obs [E, *obs] to its stream;
        returns their positions. `episode_starts`: the slots whose obs is an
        episode's first (its sequences start there: on a block boundary)."""
        assert self._frames is not None, "start_frames first"
        t0 = time.perf_counter()
        positions = self._frames.append_steps(self._writer, obs, episode_starts)
        self.seconds_writing += time.perf_counter() - t0
        return positions

    def write(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        """Writes every sequence of `batch` (SequenceAccumulator.add) with its priority:
        packed, one column per field plus the provenance fields; or (after
        start_frames) as a window of its slot's stream and two packed columns."""
        t0 = time.perf_counter()
        n = len(priorities)
        local = np.asarray(batch["slot"], np.int64)
        if self._frames is not None:  # obs are frame positions
            slots = self._slot_offset + local
            floats, meta = pack_sequences(
                batch, int(self._actor), slots, self._epsilons[local], time.time()
            )
            rows = self._confirmed_window(n)
            self._frames.insert_sequences(
                self._writer,
                self._table,
                floats,
                meta,
                local,
                batch["obs"],
                batch["mask"],
                priorities,
                rows,
            )
            self.items_written += n
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
