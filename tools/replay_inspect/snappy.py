"""Raw Snappy decompression of the tensors in a Reverb checkpoint's chunks.

Uses the maintained `cramjam` package (a pinned dependency, wheels for every
platform apex supports); without it, a pure-Python decoder does the same far
more slowly, and says so once. `BACKEND` names the one in use.
"""

from __future__ import annotations

import logging

import numpy as np

from apex import CorruptCheckpointError

try:
    import cramjam
except ImportError:  # pragma: no cover - cramjam is pinned; the fallback is tested directly
    cramjam = None

BACKEND = "cramjam" if cramjam is not None else "python"


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it) of the protobuf/Snappy varint at `pos`."""
    value = shift = 0
    while True:
        try:
            byte = buf[pos]
        except IndexError:
            raise CorruptCheckpointError("truncated varint") from None
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise CorruptCheckpointError("malformed varint")


def uncompress_py(data: bytes) -> bytes:
    """Pure-Python raw Snappy decoder: the fallback, far slower than cramjam."""
    n, pos = read_varint(data, 0)
    out = bytearray()
    end = len(data)
    while pos < end:
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                length = int.from_bytes(data[pos : pos + extra], "little")
                pos += extra
            length += 1
            out += data[pos : pos + length]
            pos += length
            continue
        if kind == 1:  # copy, 1-byte offset
            length = ((tag >> 2) & 7) + 4
            offset = ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:  # copy, 2-byte offset
            length = (tag >> 2) + 1
            offset = int.from_bytes(data[pos : pos + 2], "little")
            pos += 2
        else:  # copy, 4-byte offset
            length = (tag >> 2) + 1
            offset = int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
        if offset == 0 or offset > len(out):
            raise CorruptCheckpointError("snappy: copy before the start of the output")
        start = len(out) - offset
        if offset >= length:
            out += out[start : start + length]
        else:  # overlapping copy repeats the last `offset` bytes
            pattern = bytes(out[start:])
            out += (pattern * (length // offset + 1))[:length]
    if len(out) != n:
        raise CorruptCheckpointError(f"snappy: {len(out)} bytes decoded, header says {n}")
    return bytes(out)


def uncompress_into(data: bytes, out: np.ndarray, backend: str | None = None) -> None:
    """Decompresses raw Snappy `data` into the contiguous array `out`, which must
    be exactly the decompressed size; CorruptCheckpointError otherwise."""
    backend = backend or BACKEND
    n, _ = read_varint(data, 0)  # the uncompressed length leads the stream
    if n != out.nbytes:
        raise CorruptCheckpointError(f"tensor has {n} bytes, expected {out.nbytes}")
    if not n:
        return
    view = out.reshape(-1).view(np.uint8)
    if backend == "cramjam":
        try:
            written = cramjam.snappy.decompress_raw_into(data, view)
        except Exception as err:  # noqa: BLE001 - cramjam raises its own DecompressionError
            raise CorruptCheckpointError(
                f"tensor content is not valid Snappy data: {err}"
            ) from None
        if written != n:
            raise CorruptCheckpointError(f"snappy: {written} bytes decoded, header says {n}")
        return
    warn_fallback("cramjam", "Reverb checkpoint chunks are decompressed")
    view[:] = np.frombuffer(uncompress_py(data), np.uint8)


_warned: set[str] = set()


def warn_fallback(package: str, what: str) -> None:
    """Says once per process that `package` is missing and a pure-Python `what` is used."""
    if package not in _warned:
        _warned.add(package)
        logging.getLogger("apex").warning(
            f"{package} is not installed: {what} in pure Python (correct, much slower); "
            f"`pip install {package}` to speed it up"
        )
