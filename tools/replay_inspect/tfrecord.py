"""TFRecord framing of a Reverb checkpoint's files, with their CRC32C checksums.

A record is: u64 length, u32 masked CRC32C of the length bytes, the data, u32
masked CRC32C of the data. Checksums come from the maintained `crc32c` package
(pinned), or from a pure-Python table when it is missing; verification is never
skipped silently.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator

from apex import CheckpointNotFoundError, CorruptCheckpointError
from tools.replay_inspect.snappy import read_varint, warn_fallback

try:
    import crc32c as _crc32c_pkg
except ImportError:  # pragma: no cover - crc32c is pinned; the fallback is tested directly
    _crc32c_pkg = None

BACKEND = "crc32c" if _crc32c_pkg is not None else "python"


def _table() -> list[int]:
    poly, table = 0x82F63B78, []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c_py(data: bytes) -> int:
    """CRC32C (Castagnoli) in pure Python: the fallback."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes, backend: str | None = None) -> int:
    """The TFRecord checksum of `data`: CRC32C, rotated and offset ("masked")."""
    if (backend or BACKEND) == "crc32c":
        crc = _crc32c_pkg.crc32c(data)
    else:
        warn_fallback("crc32c", "checkpoint checksums are computed")
        crc = crc32c_py(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


_HEADER = struct.Struct("<QI")


class RecordFile:
    """A TFRecord file, memory-mapped: its records' offsets, and each record on demand.

    The mapping keeps the file readable after the server deletes the
    checkpoint (POSIX), which the next Checkpoint call does.

    Args:
      path: the file.
      verify: check every record's checksums as it is read.
      crc_backend: 'crc32c' or 'python' (default: the best available).
    """

    def __init__(self, path: str, verify: bool = True, crc_backend: str | None = None):
        self.path = path
        self._verify = verify
        self._crc_backend = crc_backend
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self._buf: mmap.mmap | bytes = (
                    mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
                )
        except FileNotFoundError as e:
            if not os.path.isdir(os.path.dirname(path)):
                raise CheckpointNotFoundError(
                    f"{os.path.dirname(path)!r} was deleted (a newer checkpoint replaces it)"
                ) from e
            raise CorruptCheckpointError(f"{path} is missing") from e
        self.size = size

    def _crc(self, data: bytes) -> int:
        return masked_crc(data, self._crc_backend)

    def spans(self) -> Iterator[tuple[int, int]]:
        """(start, length) of every record's data, in file order."""
        buf, pos, size = self._buf, 0, self.size
        while pos < size:
            if pos + 12 > size:
                raise CorruptCheckpointError(f"{self.path}: truncated record header at {pos}")
            length, length_crc = _HEADER.unpack_from(buf, pos)
            if self._verify and self._crc(buf[pos : pos + 8]) != length_crc:
                raise CorruptCheckpointError(f"{self.path}: bad length checksum at {pos}")
            start = pos + 12
            pos = start + length + 4
            if pos > size:
                raise CorruptCheckpointError(f"{self.path}: truncated record at {start - 12}")
            yield start, length

    def read(self, start: int, length: int) -> bytes:
        """The record whose data is at `start` (its checksum verified if enabled)."""
        data = self._buf[start : start + length]
        if self._verify:
            (crc,) = struct.unpack_from("<I", self._buf, start + length)
            if self._crc(data) != crc:
                raise CorruptCheckpointError(f"{self.path}: bad data checksum at {start - 12}")
        return data

    def head(self, start: int, length: int, n: int = 64) -> bytes:
        """The first bytes of a record, unverified (enough to find its first field)."""
        return self._buf[start : start + min(length, n)]

    def close(self) -> None:
        if isinstance(self._buf, mmap.mmap):
            self._buf.close()


def first_field(head: bytes, tag: int) -> tuple[int, int] | None:
    """(value or length, data position) of the first field if it has `tag`, else None.

    Protobuf's C++ serializer writes fields in field-number order, so field 1
    (ChunkData.chunk_key, PriorityTableCheckpoint.table_name) comes first
    unless it has its default value.
    """
    if not head or head[0] != tag:
        return None
    try:
        return read_varint(head, 1)
    except CorruptCheckpointError:
        return None
