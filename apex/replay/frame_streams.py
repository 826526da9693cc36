"""Frames stored once: each env slot's observations as a stream of
the Reverb writer, and the items that reference windows of it.

Column j (< E) of an actor's C++ TrajectoryWriter is slot j's stream; an item
references the frames it covers instead of holding copies, so overlapping
items (Ape-X's obs and next_obs stacks, R2D2's overlapping sequences) share
chunks. Two layouts over the streams (apex.replay.tables has their signatures):

    StackedFrames    Ape-X: stacked observations [K, *frame], each frame written
                     once; a transition's `obs_frames` and `next_obs_frames` are
                     K-frame windows (frame_transition_signature)
    SequenceFrames   R2D2: one observation per env step; a sequence's
                     `obs_frames` is its L steps (frame_sequence_signature)

Compressed frames (apex.replay.frame_codec) are written in blocks of G
consecutive frames of a slot, one writer step each. The writers
(apex.replay.writer) choose the layout and own the stream; these classes know
where each frame went.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import numpy as np

from apex.replay.frame_codec import compresses, encode, sequence_block


class FrameStreams:
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
        self.keep = keep  # the newest refs of each stream held for items
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


class StackedFrames(FrameStreams):
    """Ape-X's layout: every slot's stacked observations [K, *frame] (K frames,
    oldest first) as one stream of single frames, each written once (and, with
    compression, compressed alone); a stack's position is its newest frame's.

    An item's `obs_frames` references the K frames ending at obs's position,
    `next_obs_frames` the K ending at next_obs's (frame_transition_signature);
    its scalars and provenance are one step of one more column, `meta`.
    """

    def __init__(
        self, num_slots: int, stack: int, n_step: int, chunk_length: int, compression: str
    ):
        # Oldest frame an item may still reference, counted back from a slot's
        # newest: the n-step start's window (n + K) after at most n full
        # restacks (K each, see append_stacks) and the episode's first K.
        keep = max(chunk_length, (n_step + 2) * stack + 1)
        super().__init__(num_slots, stack, keep, compression=compression)

    def start(self, writer: Any, obs: np.ndarray) -> np.ndarray:
        """Writes every slot's first stack, obs [E, K, *frame]; returns their positions."""
        return self.append(writer, [list(o) for o in obs])

    def append_stacks(self, writer: Any, next_obs: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Writes the newest frame of every slot's next_obs [E, K, *frame]; returns
        next_obs's positions. A slot whose next_obs is not obs (the stack it acted
        in) shifted by one frame gets its whole stack written again (never for
        gymnasium's FrameStackObservation), so a position's window always equals
        the stack, bit for bit."""
        next_obs = np.asarray(next_obs)
        e = len(next_obs)
        shifted = (next_obs[:, :-1] == np.asarray(obs)[:, 1:]).reshape(e, -1).all(axis=1)
        frames = [[next_obs[j, -1]] if shifted[j] else list(next_obs[j]) for j in range(e)]
        return self.append(writer, frames)

    def restart(self, writer: Any, slot: int, obs: np.ndarray) -> int:
        """Writes slot's whole new stack obs [K, *frame] (an episode's first
        observation: the frame stack's padding included); returns its position."""
        frames: list[list[np.ndarray]] = [[] for _ in range(self.num_slots)]
        frames[slot] = list(np.asarray(obs))
        return int(self.append(writer, frames)[slot])

    def insert_transitions(
        self,
        writer: Any,
        table: str,
        meta: np.ndarray,
        slots: np.ndarray,
        obs_pos: np.ndarray,
        next_pos: np.ndarray,
        priorities: np.ndarray,
        rows: Iterable[int],
    ) -> None:
        """One item in `table` per row j of `rows` (the writer lets them in as the
        server confirms): two windows of slot[j]'s stream and meta[j] [M]."""
        e = self.num_slots
        # Columns in the signature's order (sorted names): meta,
        # next_obs_frames, obs_frames.
        squeeze = [True, False, False]
        blank: list = [None] * e
        for j in rows:
            s = int(slots[j])
            columns = [
                [writer.Append(blank + [meta[j]])[e]],
                self.window(s, int(next_pos[j])),
                self.window(s, int(obs_pos[j])),
            ]
            writer.CreateItem(table, float(priorities[j]), columns, squeeze)


class SequenceFrames(FrameStreams):
    """R2D2's layout: every slot's observations, one per env step, as one stream
    (compressed in blocks of G = frame_codec.sequence_block(L, P) steps; each
    episode starts a block, so each sequence covers L / G whole blocks).

    An item's `obs_frames` references the L steps of its slot's stream from its
    first position on (the steps after an episode's end are zero observations);
    `floats` and `meta` are one step each of two more columns
    (frame_sequence_signature).
    """

    def __init__(
        self,
        num_slots: int,
        zero: np.ndarray,
        length: int,
        period: int,
        chunk_length: int,
        compression: str,
    ):
        length = int(length)
        g = sequence_block(length, period, compression)
        # Oldest step an item may still reference, counted back from a slot's
        # newest: an open sequence's start (< L back) and its padding (< L)
        # (in writer steps: blocks of g observations).
        keep = (2 * length + g - 1) // g + chunk_length + 1
        super().__init__(num_slots, length, keep, item_columns=2, compression=compression, block=g)
        self.length = length
        self.zero = zero  # an observation of zeros: the padding after an episode's end
        self.last_real = np.full(num_slots, -1, np.int64)  # each slot's newest real observation

    def append_steps(
        self, writer: Any, obs: np.ndarray, episode_starts: Iterable[int] = ()
    ) -> np.ndarray:
        """Writes every slot's next observation obs [E, *obs]; returns their
        positions. `episode_starts`: the slots whose obs is an episode's first
        (its sequences start there: on a block boundary)."""
        for j in episode_starts:
            self.align(writer, int(j), self.zero)
        positions = self.append(writer, [[o] for o in np.asarray(obs)])
        self.last_real = positions.copy()
        return positions

    def insert_sequences(
        self,
        writer: Any,
        table: str,
        floats: np.ndarray,
        meta: np.ndarray,
        slots: np.ndarray,
        positions: np.ndarray,
        mask: np.ndarray,
        priorities: np.ndarray,
        rows: Iterable[int],
    ) -> None:
        """One item in `table` per sequence j of `rows` (the writer lets them in as
        the server confirms): the window of slot[j]'s stream its positions[j]
        [L] cover (zero observations appended once per slot where its mask[j]
        ends early), floats[j] and meta[j]."""
        e, length = self.num_slots, self.length
        positions = np.asarray(positions, np.int64)
        real = np.asarray(mask).sum(axis=1).astype(np.int64)
        # Columns in the signature's order (sorted names): floats, meta, obs_frames.
        squeeze = [True, True, False]
        blank: list = [None] * e
        for j in rows:
            s, first, k = int(slots[j]), int(positions[j, 0]), int(real[j])
            if not np.array_equal(positions[j, :k], first + np.arange(k)):
                raise RuntimeError(f"sequence {j}: its steps are not consecutive in its stream")
            last = first + length - 1
            if k < length:  # padded: zero observations after the episode's last one
                if first + k - 1 != self.last_real[s]:
                    raise RuntimeError(f"sequence {j}: padding after a step not the newest")
                pad = last + 1 - int(self.count[s])
                if pad > 0:
                    zeros: list[list[np.ndarray]] = [[] for _ in range(e)]
                    zeros[s] = [self.zero] * pad
                    self.append(writer, zeros)
            refs = writer.Append(blank + [floats[j], meta[j]])[e:]
            columns = [[refs[0]], [refs[1]], self.window(s, last, length)]
            writer.CreateItem(table, float(priorities[j]), columns, squeeze)
