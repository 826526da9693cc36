"""Frames compressed on the actor (apex.replay.frame_codec): blocks decode back
bit for bit, say their own layout, and damaged or foreign values are refused
by name rather than decoded into garbage."""

from __future__ import annotations

import numpy as np
import pytest

from apex.replay import frame_codec as fc


def frames(g: int = 8, shape: tuple = (84, 84), dtype=np.uint8, seed: int = 0) -> np.ndarray:
    """g consecutive 'frames': a mostly static picture with a moving block."""
    rng = np.random.default_rng(seed)
    base = (rng.random(shape) < 0.05).astype(dtype) * 100
    out = np.repeat(base[None], g, axis=0)
    for t in range(g):
        out[t, t : t + 4, t : t + 4] = 255 if dtype == np.uint8 else 1.5
    return out


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((84, 84), np.uint8), ((4, 84, 84), np.uint8), ((10, 12, 3), np.float32)],
)
def test_a_block_decodes_bit_for_bit_with_its_shape_and_dtype(codec, shape, dtype):
    block = frames(3, shape, dtype)
    value = fc.encode(block, codec)
    assert isinstance(value, bytes) and value[0] == fc.MAGIC
    back = fc.decode(value)
    assert back.dtype == block.dtype and back.shape == block.shape
    np.testing.assert_array_equal(back, block)


def test_consecutive_frames_compress_far_below_their_raw_size():
    block = frames(8)
    assert len(fc.encode(block, "zstd")) < block.nbytes / 10
    assert len(fc.encode(block[:1], "zstd")) < block[:1].nbytes / 4


def test_rows_of_blocks_decode_into_windows_in_order():
    blocks = [frames(4, seed=s) for s in range(6)]
    values = np.empty((2, 3), dtype=object)
    for i in range(6):
        values[i // 3, i % 3] = fc.encode(blocks[i], "zstd" if i % 2 else "lz4")
    out = fc.decode_blocks(values)
    assert out.shape == (2, 12, 84, 84)
    np.testing.assert_array_equal(out[1], np.concatenate(blocks[3:]))
    np.testing.assert_array_equal(out[0, 4:8], blocks[1])


def test_foreign_damaged_and_mixed_values_are_refused_by_name():
    with pytest.raises(fc.FrameCodecError, match="not a block of compressed frames"):
        fc.decode(b"\x89PNG\r\n")
    value = fc.encode(frames(2), "zstd")
    with pytest.raises(fc.FrameCodecError, match="damaged block of zstd frames"):
        fc.decode(value[:-7])
    mixed = np.array([[value, fc.encode(frames(2, (8, 8)), "zstd")]], dtype=object)
    with pytest.raises(fc.FrameCodecError, match="blocks of one column differ"):
        fc.decode_blocks(mixed)
    with pytest.raises(ValueError, match="one of"):
        fc.encode(frames(1), "none")


def test_an_r2d2_block_divides_the_sequence_length_and_period():
    assert fc.sequence_block(80, 40, "zstd") == 8  # every sequence: 10 whole blocks
    assert fc.sequence_block(80, 30, "zstd") == 5
    assert fc.sequence_block(80, 39, "lz4") == 1
    assert fc.sequence_block(64, 64, "zstd") == fc.MAX_BLOCK
    assert fc.sequence_block(80, 40, "none") == 1
