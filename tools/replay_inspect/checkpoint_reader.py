"""Reading a Reverb 0.7 checkpoint offline: every item of a table, without sampling.

Reverb has no API that lists items, and sampling moves both the items'
times_sampled and the rate limiter. A live server can however write a
checkpoint (`reverb.Client(address).checkpoint()` returns its directory, when
the server was built with a checkpointer), and this module parses that
directory itself: no server, no sampling, nothing on the server changes.

The format (reverb/cc/platform/tfrecord_checkpointer.cc, tensor_compression.cc,
writer.cc and chunker.cc of the 0.7 era, checked against files written by
dm-reverb 0.7.0):

* `<root>/<absl::FormatTime(now)>/` per checkpoint, e.g.
  `2026-11-30T12:08:20.592679932+00:00`. Reverb sorts the names as strings;
  the newest one holding a `DONE` file is the latest. `DONE` (empty) is written
  last, so a directory without it is half-written. Every Checkpoint call then
  keeps only the entry of the root that sorts last (keep_latest=1) and deletes
  every other file and directory there, so the root must be Reverb's alone, and
  a reader opens its files up front (see CheckpointReader).
* `tables.tfrecord`: one record per table, a serialized PriorityTableCheckpoint
  (name, max_size, sampler/remover options, rate-limiter counters, signature,
  and every PrioritizedItem, sorted by insertion time).
* `chunks.tfrecord`: one record per chunk, a serialized ChunkData, in no
  particular order. Both are plain (uncompressed) TFRecord files: u64 length,
  u32 masked CRC32C of the length, the bytes, u32 masked CRC32C of the bytes.
* A chunk holds `data.tensors` (older files: `deprecated_data`), each a
  TensorProto of shape [T, ...] for T timesteps, whose `tensor_content` is the
  raw tensor bytes compressed with raw Snappy (DT_STRING tensors: uncompressed
  TF string encoding). If `delta_encoded`, integer tensors of rank >= 2 hold
  differences along axis 0 (wrapping, on the unsigned type): decode with a
  cumulative sum.
* An item's `flat_trajectory` has one column per flattened signature leaf
  (tf.nest order, i.e. sorted dict keys); a column is a list of chunk slices
  (chunk_key, tensor index in the chunk, offset, length) to concatenate along
  the time axis, and `squeeze` drops that axis (TrajectoryWriter items).

This module reads; the framing and checksums are tools.replay_inspect.tfrecord, the
Snappy decompression tools.replay_inspect.snappy (maintained packages, pure-Python
fallbacks). The errors are apex.errors' CheckpointError family.

Example:
    >>> path = reverb.Client("localhost:1234").checkpoint()
    >>> for name, table in read_tables(path).items():
    ...     print(name, table.num_items, table.rate_limiter.samples)
    >>> for item in iter_items(path, "transitions"):
    ...     print(item.key, item.priority, item.times_sampled, item.data["action"])
"""

from __future__ import annotations

import collections
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from apex import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    IncompleteCheckpointError,
    UnknownTableError,
)
from tools.replay_inspect.snappy import uncompress_into
from tools.replay_inspect.tfrecord import RecordFile, first_field

TABLES_FILE = "tables.tfrecord"
CHUNKS_FILE = "chunks.tfrecord"
DONE_FILE = "DONE"

__all__ = [
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointReader",
    "CorruptCheckpointError",
    "IncompleteCheckpointError",
    "Item",
    "RateLimiterState",
    "TableState",
    "UnknownTableError",
    "iter_items",
    "latest_checkpoint",
    "read_tables",
]


# ---------------------------------------------------------------------- types


@dataclass(frozen=True)
class RateLimiterState:
    """The rate limiter as checkpointed: its settings and its call counters."""

    samples_per_insert: float
    min_diff: float
    max_diff: float
    min_size_to_sample: int
    inserts: int
    samples: int
    deletes: int


@dataclass(frozen=True)
class TableState:
    """A table's settings and counters as stored in the checkpoint.

    `sampler`/`remover` read like the Python constructors, e.g.
    "Prioritized(priority_exponent=0.6)", "Fifo", "Uniform", "MinHeap".
    `signature` is the decoded tf.TensorSpec structure, or None if the table has none.
    """

    name: str
    max_size: int
    max_times_sampled: int
    num_items: int
    sampler: str
    remover: str
    rate_limiter: RateLimiterState
    signature: Any | None
    num_deleted_episodes: int
    num_unique_samples: int


@dataclass(frozen=True)
class Item:
    """One item of a table.

    `inserted_at` is unix seconds. `data` is None unless decoded; decoded, it
    is nested like the table's signature (a dict for apex's tables), or a flat
    list of arrays when the table has no signature. The arrays are read-only
    views into the decoded chunk: `.copy()` what you keep for long.
    """

    key: int
    priority: float
    times_sampled: int
    inserted_at: float
    data: Any | None = None


# --------------------------------------------------------- directory helpers


def _is_complete(path: str) -> bool:
    return os.path.isfile(os.path.join(path, DONE_FILE))


def latest_checkpoint(root: str) -> str | None:
    """The newest complete checkpoint directory under a checkpointer root, or None.

    Picks like Reverb's LoadLatest: the entries of `root` sorted by name, the
    last one that holds a DONE file.

    Raises:
        CheckpointNotFoundError: `root` is not a directory.
    """
    if not os.path.isdir(root):
        raise CheckpointNotFoundError(f"checkpointer root {root!r} is not a directory")
    for name in sorted(os.listdir(root), reverse=True):
        path = os.path.join(root, name)
        if os.path.isdir(path) and _is_complete(path):
            return path
    return None


# ------------------------------------------------------------------- decoding

_NP_DTYPES: dict[int, np.dtype] = {}


def _np_dtype(dtype_enum: int) -> np.dtype:
    dt = _NP_DTYPES.get(dtype_enum)
    if dt is None:
        import tensorflow as tf

        dt = _NP_DTYPES[dtype_enum] = np.dtype(tf.dtypes.as_dtype(dtype_enum).as_numpy_dtype)
    return dt


_DT_STRING = 7


def _decode_tensor(proto: Any, delta_encoded: bool) -> np.ndarray:
    """A chunk's TensorProto as a read-only array of shape [T, ...]."""
    shape = tuple(d.size for d in proto.tensor_shape.dim)
    if proto.dtype == _DT_STRING:  # AsProtoTensorContent, not compressed
        import tensorflow as tf

        arr = tf.io.parse_tensor(proto.SerializeToString(), tf.string).numpy()
    else:
        arr = np.empty(shape, _np_dtype(proto.dtype))
        uncompress_into(proto.tensor_content, arr)
        if delta_encoded and arr.ndim >= 2 and arr.dtype.kind in "iu":
            unsigned = arr.view(arr.dtype.str.replace("i", "u"))
            np.cumsum(unsigned, axis=0, dtype=unsigned.dtype, out=unsigned)
    arr.flags.writeable = False
    return arr


def _describe_selector(options: Any) -> str:
    kind = options.WhichOneof("distribution")
    if kind == "prioritized":
        return f"Prioritized(priority_exponent={options.prioritized.priority_exponent:g})"
    if kind == "heap":
        return "MinHeap" if options.heap.min_heap else "MaxHeap"
    if kind is None:
        return "unset"
    return kind.capitalize()


def _decode_signature(checkpoint: Any) -> Any | None:
    if not checkpoint.HasField("signature"):
        return None
    from tensorflow.python.saved_model import nested_structure_coder

    return nested_structure_coder.decode_proto(checkpoint.signature)


def _table_state(cp: Any) -> TableState:
    rl = cp.rate_limiter
    return TableState(
        name=cp.table_name,
        max_size=int(cp.max_size),
        max_times_sampled=int(cp.max_times_sampled),
        num_items=len(cp.items),
        sampler=_describe_selector(cp.sampler),
        remover=_describe_selector(cp.remover),
        rate_limiter=RateLimiterState(
            samples_per_insert=float(rl.samples_per_insert),
            min_diff=float(rl.min_diff),
            max_diff=float(rl.max_diff),
            min_size_to_sample=int(rl.min_size_to_sample),
            inserts=int(rl.insert_count),
            samples=int(rl.sample_count),
            deletes=int(rl.delete_count),
        ),
        signature=_decode_signature(cp),
        num_deleted_episodes=int(cp.num_deleted_episodes),
        num_unique_samples=int(cp.num_unique_samples),
    )


def _packer(signature: Any | None, num_columns: int) -> Any:
    """A function from the list of decoded columns to the item's data structure."""
    if signature is None:
        return list
    import tensorflow as tf

    leaves = tf.nest.flatten(signature)
    if len(leaves) != num_columns:
        raise CorruptCheckpointError(
            f"items have {num_columns} columns but the signature has {len(leaves)} leaves"
        )
    if isinstance(signature, dict) and all(
        isinstance(v, tf.TensorSpec) for v in signature.values()
    ):  # a flat dict (apex's tables): the fast path, same order as tf.nest
        keys = sorted(signature)
        # squeeze_single_step drops a leading axis of 1 that the signature has
        # (e.g. an R2D2 sequence of one block of compressed frames): put it back.
        ones = [i for i, k in enumerate(keys) if signature[k].shape[:1] == [1]]
        if not ones:
            return lambda columns: dict(zip(keys, columns))

        def pack(columns: list) -> dict:
            for i in ones:
                if np.ndim(columns[i]) == signature[keys[i]].shape.rank - 1:
                    columns[i] = np.asarray(columns[i])[None]
            return dict(zip(keys, columns))

        return pack
    return lambda columns: tf.nest.pack_sequence_as(signature, columns)


# --------------------------------------------------------------------- reader


class CheckpointReader:
    """An open Reverb checkpoint directory. Not thread-safe; use as a context manager.

    Opening maps both files and finds each table's record (cheap); a table's
    items are parsed when asked for, and chunks are decoded on first use and
    kept in an LRU cache of `chunk_cache_bytes` decoded bytes. Items come in
    the checkpoint's order, which is insertion order, so consecutive items
    share chunks; the cache only needs to hold the chunks that concurrent
    writers had open at the same time.

    Args:
        path: a checkpoint directory (what `reverb.Client.checkpoint()` returns,
            or `latest_checkpoint(root)`).
        verify_checksums: check the TFRecord CRC32C of every record read.
        chunk_cache_bytes: the budget of the decoded-chunk cache.

    Raises:
        CheckpointNotFoundError: `path` is not a directory.
        IncompleteCheckpointError: `path` has no DONE file.
        CorruptCheckpointError: a file is missing or not a TFRecord file.
    """

    def __init__(
        self, path: str, *, verify_checksums: bool = True, chunk_cache_bytes: int = 256 << 20
    ):
        if not os.path.isdir(path):
            raise CheckpointNotFoundError(f"checkpoint directory {path!r} does not exist")
        if not _is_complete(path):
            hint = ""
            if os.path.exists(os.path.join(path, TABLES_FILE)):
                hint = " (half-written, or still being written)"
            elif latest_checkpoint(path) is not None:
                hint = f" (a checkpointer root? its latest checkpoint is {latest_checkpoint(path)})"
            raise IncompleteCheckpointError(f"{path!r} has no {DONE_FILE} file{hint}")
        self.path = path
        self._cache_budget = int(chunk_cache_bytes)
        self._cache: collections.OrderedDict[int, tuple[list[np.ndarray], int]] = (
            collections.OrderedDict()
        )
        self._cache_bytes = 0
        self._chunk_spans: dict[int, tuple[int, int]] | None = None
        self._table_spans: dict[str, tuple[int, int]] = {}
        self._tables = RecordFile(os.path.join(path, TABLES_FILE), verify_checksums)
        try:
            self._chunks = RecordFile(os.path.join(path, CHUNKS_FILE), verify_checksums)
        except CheckpointError:
            self._tables.close()
            raise
        try:
            self._index_tables()
        except BaseException:
            self.close()
            raise

    def _index_tables(self) -> None:
        for start, length in self._tables.spans():
            head = self._tables.head(start, length)
            field = first_field(head, 0x0A)  # table_name, tag (1, length-delimited)
            if field is not None and field[1] + field[0] <= len(head):
                name = head[field[1] : field[1] + field[0]].decode()
            else:
                name = self._parse_table(start, length).table_name
            self._table_spans[name] = (start, length)

    # ------------------------------------------------------------- tables

    @property
    def table_names(self) -> list[str]:
        """The names of the checkpointed tables, in file order."""
        return list(self._table_spans)

    def _parse_table(self, start: int, length: int) -> Any:
        from reverb.cc.checkpointing import checkpoint_pb2

        data = self._tables.read(start, length)
        cp = checkpoint_pb2.PriorityTableCheckpoint()
        try:
            cp.ParseFromString(data)
        except Exception as e:  # protobuf raises DecodeError (C++) or others
            raise CorruptCheckpointError(f"{self._tables.path}: bad table record: {e}") from e
        return cp

    def _checkpoint_of(self, table: str) -> Any:
        span = self._table_spans.get(table)
        if span is None:
            raise UnknownTableError(
                f"no table {table!r} in checkpoint {self.path!r}; it has {self.table_names}"
            )
        return self._parse_table(*span)

    def table(self, name: str) -> TableState:
        """The settings and counters of table `name` (parses its items to count them)."""
        return _table_state(self._checkpoint_of(name))

    def tables(self) -> dict[str, TableState]:
        """TableState of every table, by name."""
        return {name: self.table(name) for name in self._table_spans}

    # -------------------------------------------------------------- items

    def iter_items(
        self,
        table: str,
        decode: bool = True,
        squeeze_single_step: bool = True,
        only_keys: Collection[int] | None = None,
    ) -> Iterator[Item]:
        """Every item of `table`, in insertion order.

        Args:
            table: the table's name.
            decode: decode each item's payload into `Item.data` (else None,
                and no chunk is read).
            squeeze_single_step: drop the time axis of a column that holds
                exactly one timestep, so the one-step items of the legacy
                `client.writer` come back shaped like the signature (as
                TimestepDataset returns them). Columns the TrajectoryWriter
                marked `squeeze` always lose it; with False every other
                column is [T, ...] (as TrajectoryDataset returns it).

        Raises:
            UnknownTableError: no such table.
            CorruptCheckpointError: a record, chunk or tensor does not decode,
                or an item refers to a chunk the checkpoint lacks.
        """
        cp = self._checkpoint_of(table)  # raises here, not at the first next()
        return self._iter_items(cp, decode, squeeze_single_step, only_keys)

    def _iter_items(
        self,
        cp: Any,
        decode: bool,
        squeeze_single_step: bool,
        only_keys: Collection[int] | None = None,
    ) -> Iterator[Item]:
        pack = None
        signature = _decode_signature(cp) if decode else None
        for item in cp.items:
            if only_keys is not None and item.key not in only_keys:
                continue
            ts = item.inserted_at
            data = None
            if decode:
                columns = self._decode_columns(item, squeeze_single_step)
                if pack is None:
                    pack = _packer(signature, len(columns))
                data = pack(columns)
            yield Item(
                key=item.key,
                priority=item.priority,
                times_sampled=item.times_sampled,
                inserted_at=ts.seconds + ts.nanos * 1e-9,
                data=data,
            )

    def _decode_columns(self, item: Any, squeeze_single_step: bool) -> list[np.ndarray]:
        if item.HasField("deprecated_sequence_range"):
            raise CheckpointError(
                f"item {item.key} uses the pre-FlatTrajectory format, which this reader "
                "does not decode"
            )
        columns = []
        last_key, tensors = None, []
        for column in item.flat_trajectory.columns:
            slices = column.chunk_slices
            if len(slices) == 1:  # the common case, kept tight: ~2 us a column
                s = slices[0]
                key = s.chunk_key
                if key != last_key:
                    tensors, last_key = self._chunk(key), key
                offset, length = s.offset, s.length
                if length == 1 and (squeeze_single_step or column.squeeze):
                    columns.append(tensors[s.index][offset, ...])
                    continue
                x = tensors[s.index][offset : offset + length]
            elif slices:
                x = np.concatenate(
                    [
                        self._chunk(s.chunk_key)[s.index][s.offset : s.offset + s.length]
                        for s in slices
                    ]
                )
                x.flags.writeable = False
            else:
                raise CorruptCheckpointError(f"item {item.key} has an empty column")
            if column.squeeze or (squeeze_single_step and x.shape[0] == 1):
                if x.shape[0] != 1:
                    raise CorruptCheckpointError(
                        f"item {item.key}: a squeezed column has {x.shape[0]} timesteps"
                    )
                x = x[0, ...]
            columns.append(x)
        return columns

    def _index_chunks(self) -> dict[int, tuple[int, int]]:
        spans = {}
        for start, length in self._chunks.spans():
            field = first_field(self._chunks.head(start, length, 11), 0x08)  # chunk_key, varint
            key = field[0] if field is not None else self._parse_chunk(start, length).chunk_key
            spans[key] = (start, length)
        return spans

    def _parse_chunk(self, start: int, length: int) -> Any:
        from reverb.cc import schema_pb2

        data = self._chunks.read(start, length)
        chunk = schema_pb2.ChunkData()
        try:
            chunk.ParseFromString(data)
        except Exception as e:
            raise CorruptCheckpointError(f"{self._chunks.path}: bad chunk record: {e}") from e
        return chunk

    def _chunk(self, key: int) -> list[np.ndarray]:
        """The decoded tensors ([T, ...] each) of chunk `key`, through the LRU cache."""
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit[0]
        if self._chunk_spans is None:
            self._chunk_spans = self._index_chunks()
        span = self._chunk_spans.get(key)
        if span is None:
            raise CorruptCheckpointError(f"chunk {key} is referenced but not in the checkpoint")
        chunk = self._parse_chunk(*span)
        if chunk.chunk_key != key:
            raise CorruptCheckpointError(f"chunk {key} is indexed at a chunk {chunk.chunk_key}")
        protos = chunk.data.tensors if len(chunk.data.tensors) else chunk.deprecated_data
        try:
            tensors = [_decode_tensor(t, chunk.delta_encoded) for t in protos]
        except CorruptCheckpointError as e:
            raise CorruptCheckpointError(f"chunk {key}: {e}") from e
        size = sum(t.nbytes for t in tensors)
        self._cache[key] = (tensors, size)
        self._cache_bytes += size
        while self._cache_bytes > self._cache_budget and len(self._cache) > 1:
            _, (_, evicted) = self._cache.popitem(last=False)
            self._cache_bytes -= evicted
        return tensors

    # ---------------------------------------------------------- lifetime

    def close(self) -> None:
        """Unmaps the files and drops the chunk cache (arrays already returned stay valid)."""
        self._cache.clear()
        self._cache_bytes = 0
        self._tables.close()
        self._chunks.close()

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------ functional API


def read_tables(path: str) -> dict[str, TableState]:
    """Every table of the checkpoint at `path`: settings, counters, signature, size."""
    with CheckpointReader(path) as reader:
        return reader.tables()


def iter_items(
    path: str,
    table: str,
    decode: bool = True,
    squeeze_single_step: bool = True,
    only_keys: Collection[int] | None = None,
) -> Iterator[Item]:
    """Every item of `table` in the checkpoint at `path`; see CheckpointReader.iter_items.

    The checks (missing directory, no DONE file, unknown table) run at the
    call; the files stay open until the iterator is exhausted or collected.
    """
    reader = CheckpointReader(path)
    try:
        items = reader.iter_items(
            table, decode=decode, squeeze_single_step=squeeze_single_step, only_keys=only_keys
        )
    except BaseException:
        reader.close()
        raise

    def generate() -> Iterator[Item]:
        with reader:
            yield from items

    return generate()
