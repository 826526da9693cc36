"""The TFRecord checksums and Snappy decoding of the checkpoint reader: the pinned
packages and the pure-Python fallbacks agree, and bad data is a loud error."""

import struct

import cramjam
import numpy as np
import pytest

from apex.errors import CorruptCheckpointError
from tools.replay_inspect import snappy, tfrecord

BACKENDS = ["crc32c", "python"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_crc32c_known_answer_and_agreement(backend):
    # The CRC-32C check value (RFC 3720 appendix B.4) and TFRecord's masking.
    assert tfrecord.crc32c_py(b"123456789") == 0xE3069283
    data = np.random.default_rng(0).bytes(4096)
    assert tfrecord.masked_crc(data, backend) == tfrecord.masked_crc(data, "crc32c")
    crc = 0xE3069283
    masked = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert tfrecord.masked_crc(b"123456789", backend) == masked


def _record(data: bytes, corrupt: bool = False) -> bytes:
    length = struct.pack("<Q", len(data))
    crc = tfrecord.masked_crc(data) ^ (1 if corrupt else 0)
    return length + struct.pack("<I", tfrecord.masked_crc(length)) + data + struct.pack("<I", crc)


@pytest.mark.parametrize("backend", BACKENDS)
def test_records_are_framed_and_a_bad_checksum_is_an_error(tmp_path, backend):
    path = tmp_path / "f.tfrecord"
    path.write_bytes(_record(b"first") + _record(b"second", corrupt=True))
    f = tfrecord.RecordFile(str(path), verify=True, crc_backend=backend)
    spans = list(f.spans())
    assert [f.read(*spans[0])] == [b"first"]
    with pytest.raises(CorruptCheckpointError, match="bad data checksum"):
        f.read(*spans[1])
    f.close()
    unverified = tfrecord.RecordFile(str(path), verify=False, crc_backend=backend)
    assert unverified.read(*spans[1]) == b"second"  # only when asked not to verify
    unverified.close()
    path.write_bytes(_record(b"first")[:-3])
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        list(tfrecord.RecordFile(str(path)).spans())


@pytest.mark.parametrize("backend", ["cramjam", "python"])
def test_snappy_decodes_what_snappy_wrote(backend):
    rng = np.random.default_rng(1)
    # Repetitive (copies, overlapping ones too) and random (literals) content.
    raw = np.concatenate([np.tile(np.arange(7, dtype=np.uint8), 3000), rng.integers(0, 256, 5000)])
    raw = raw.astype(np.uint8)
    data = bytes(cramjam.snappy.compress_raw(raw.tobytes()))
    out = np.empty(raw.shape, np.uint8)
    snappy.uncompress_into(data, out, backend)
    np.testing.assert_array_equal(out, raw)
    with pytest.raises(CorruptCheckpointError, match="expected"):
        snappy.uncompress_into(data, np.empty(raw.size - 1, np.uint8), backend)
    bad = data[:5] + bytes([0xFF] * 16)
    with pytest.raises(CorruptCheckpointError):
        snappy.uncompress_into(bad, out, backend)
