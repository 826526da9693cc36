"""Frames compressed on the actor: blocks of observations as bytes.

Reverb 0.7 compresses every chunk with Snappy: on real Pong frames ~374 B per
84x84 frame (a chunk of 16 consecutive frames of one env). zstd (level 1) on
each frame alone gets ~155 B, on a block of 8 consecutive frames ~55 B per
frame (bench/atari_replay.py, docs/performance.md). With
replay.frame_compression (default 'zstd') an actor that stores each frame once
writes each block of G consecutive observations of a slot as one bytes value
(a scalar tf.string step of its stream); the learner's input transform
decodes them back, bit for bit.

A block is self-describing, so the tools (tools.replay items, the checkpoint
reader) decode any block without the config that wrote it:

    byte 0      MAGIC (format version)
    byte 1      codec: b"z" zstd, b"4" lz4 (block format, size in the header)
    byte 2      the numpy dtype's character code (e.g. b"B": uint8)
    byte 3      ndim of the block's array: [G, *observation]
    then        ndim little-endian uint16 dimensions, then the payload.

zstd through the maintained `zstandard` package, with one compression and one
decompression context per thread (a context is not thread-safe; reusing one
decodes a Pong frame in ~4 us where a one-shot call, which makes a context
each time, takes ~17 us: the learner decodes 8 frames per sampled Ape-X item);
lz4 through `cramjam` (pinned; Reverb's Snappy decoding in tools.replay_inspect.snappy
uses it too).
"""

from __future__ import annotations

import math
import struct
import threading

import cramjam
import numpy as np
import zstandard

MAGIC = 0xA5
CODECS = ("zstd", "lz4", "none")
_IDS = {"zstd": b"z", "lz4": b"4"}
_NAMES = {v[0]: k for k, v in _IDS.items()}
ZSTD_LEVEL = 1  # level 3 saves 2% more on Pong frames for 1.0x the time; 1 is zstd's fastest
MAX_BLOCK = 8  # frames per R2D2 block; 16 saves 8 B more per frame (bench)


_CONTEXTS = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    c = getattr(_CONTEXTS, "compressor", None)
    if c is None:
        c = _CONTEXTS.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_CONTEXTS, "decompressor", None)
    if d is None:
        d = _CONTEXTS.decompressor = zstandard.ZstdDecompressor()
    return d


class FrameCodecError(ValueError):
    """A value that is not a block of compressed frames (or a damaged one)."""


def compresses(compression: str) -> bool:
    """True if replay.frame_compression = `compression` compresses frames."""
    return compression != "none"


def sequence_block(length: int, period: int, compression: str) -> int:
    """Observations per compressed block of an R2D2 stream: the largest
    divisor of gcd(L, P) up to MAX_BLOCK (every sequence then starts on a
    block boundary and covers L / G whole blocks: nothing decoded is thrown
    away); 1 if frames are not compressed."""
    if not compresses(compression):
        return 1
    g = math.gcd(int(length), int(period))
    return max(d for d in range(1, MAX_BLOCK + 1) if g % d == 0)


def encode(block: np.ndarray, compression: str) -> bytes:
    """`block` [G, *observation] as one self-describing compressed value."""
    block = np.ascontiguousarray(block)
    if compression == "zstd":
        payload = _zstd_compressor().compress(block.data)
    elif compression == "lz4":
        payload = cramjam.lz4.compress_block(block.data, store_size=False)
    else:
        raise ValueError(f"frame compression {compression!r}: one of {CODECS[:2]} encodes")
    header = struct.pack(
        f"<BccB{block.ndim}H",
        MAGIC,
        _IDS[compression],
        block.dtype.char.encode(),
        block.ndim,
        *block.shape,
    )
    return header + bytes(payload)


def _header(value: bytes) -> tuple[str, np.dtype, tuple[int, ...], int]:
    if len(value) < 4 or value[0] != MAGIC or value[1] not in _NAMES:
        raise FrameCodecError(
            f"not a block of compressed frames (starts {bytes(value[:4])!r}; "
            f"expected byte {MAGIC:#x}, then b'z' or b'4')"
        )
    ndim = value[3]
    end = 4 + 2 * ndim
    shape = struct.unpack_from(f"<{ndim}H", value, 4)
    return _NAMES[value[1]], np.dtype(chr(value[2])), tuple(shape), end


def decode(value: bytes) -> np.ndarray:
    """One block back as its array [G, *observation] (bit for bit)."""
    codec, dtype, shape, start = _header(value)
    out = np.empty(shape, dtype)
    _decode_into(codec, memoryview(value)[start:], out)
    return out


def _decode_into(codec: str, payload: memoryview, out: np.ndarray) -> None:
    """Decodes `payload` into `out` (a contiguous array of the block's shape)."""
    flat = out.reshape(-1).view(np.uint8)
    try:
        if codec == "zstd":  # the thread's context: no context made per call
            raw = _zstd_decompressor().decompress(payload, max_output_size=flat.nbytes)
            n = len(raw)
            if n == flat.nbytes:
                flat[:] = np.frombuffer(raw, np.uint8)
        else:
            n = cramjam.lz4.decompress_block_into(payload, flat, output_len=flat.nbytes)
    except Exception as err:  # zstandard.ZstdError, cramjam's DecompressionError
        raise FrameCodecError(f"a damaged block of {codec} frames: {err}") from err
    if n != flat.nbytes:
        raise FrameCodecError(
            f"a {codec} block decoded to {n} bytes, its header says {flat.nbytes}"
        )


def decode_blocks(values: np.ndarray) -> np.ndarray:
    """values [..., M] of blocks, each [G, *obs] -> [..., M * G, *obs]: the
    blocks of each row one after another (a window or sequence of frames)."""
    values = np.asarray(values, dtype=object)
    if values.ndim == 0 or values.size == 0:
        raise FrameCodecError(f"expected [..., M] blocks, got shape {values.shape}")
    flat = values.reshape(-1)
    codec, dtype, shape, start = _header(flat[0])
    lead, m = values.shape[:-1], values.shape[-1]
    out = np.empty((*lead, m * shape[0], *shape[1:]), dtype)
    rows = out.reshape(len(flat), *shape)  # a view: one row per block
    first = bytes(flat[0][:start])
    for i, value in enumerate(flat):
        # The learner decodes every sampled block: a header equal to the first
        # one's costs one comparison; another (e.g. another codec) is parsed.
        c, begin = codec, start
        if value[:start] != first:
            c, dt, sh, begin = _header(value)
            if (dt, sh) != (dtype, shape):
                raise FrameCodecError(
                    f"blocks of one column differ: {sh} {dt} after {shape} {dtype}"
                )
        _decode_into(c, memoryview(value)[begin:], rows[i])
    return out


def is_blocks(value: object) -> bool:
    """True if `value` (a numpy array or a tf.Tensor) holds bytes: blocks."""
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype.kind in "OS"
    return getattr(dtype, "name", "") == "string"  # a tf.DType


def tf_decode(values, shape: tuple[int, ...], dtype) -> object:
    """The learner's input: values [B, M] tf.string blocks -> [B, *shape]
    (shape = (M * G, *obs)) of `dtype`, decoded on the dataset's threads."""
    import tensorflow as tf  # the learner's only: the tools decode without TF

    out = tf.numpy_function(decode_blocks, [values], tf.as_dtype(dtype))
    return tf.ensure_shape(out, [values.shape[0], *shape])
