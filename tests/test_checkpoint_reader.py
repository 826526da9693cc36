"""The checkpoint reader against checkpoints written by a real (in-process) Reverb server."""

import collections
import os
import shutil
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from apex.errors import ApexError
from tools.replay_inspect import checkpoint_reader as cr

N = 50  # legacy one-step items in chunks of 16: three full chunks and a partial one
SIGNATURE = {
    "obs": tf.TensorSpec([4], tf.float32),
    "action": tf.TensorSpec([], tf.int32),
    "img": tf.TensorSpec([3, 5], tf.uint8),
    "t": tf.TensorSpec([], tf.float64),
}
SEQ_SIGNATURE = {"a": tf.TensorSpec([2, 3], tf.int16), "b": tf.TensorSpec([4], tf.uint8)}
TRAJ_SIGNATURE = {"xs": tf.TensorSpec([3, 2], tf.float32), "y_last": tf.TensorSpec([], tf.int32)}


def _table(name, signature, sampler=None):
    return reverb.Table(
        name=name,
        sampler=sampler or reverb.selectors.Prioritized(0.6),
        remover=reverb.selectors.Fifo(),
        max_size=1000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """A server with three tables, filled, sampled and checkpointed once."""
    root = str(tmp_path_factory.mktemp("ckpt"))
    server = reverb.Server(
        tables=[
            _table("t", SIGNATURE),
            _table("seq", SEQ_SIGNATURE, reverb.selectors.Uniform()),
            _table("traj", TRAJ_SIGNATURE, reverb.selectors.MaxHeap()),
        ],
        checkpointer=reverb.checkpointers.DefaultCheckpointer(path=root),
    )
    client = reverb.Client(f"localhost:{server.port}")
    rng = np.random.default_rng(0)
    t0 = time.time()
    rows = []
    with client.writer(max_sequence_length=16, chunk_length=16) as w:
        for i in range(N):
            row = {
                "obs": rng.standard_normal(4).astype(np.float32),
                "action": np.int32(7 * i - 100),
                "img": rng.integers(0, 256, (3, 5)).astype(np.uint8),
                "t": np.float64(i) + 0.5,
            }
            rows.append(row)
            w.append(row)
            w.create_item("t", 1, float(i + 1))
    # Delta-encoded chunks of 2 steps; items of 3 steps span two chunks.
    seq_rows = [
        {
            "a": rng.integers(-30000, 30000, (2, 3)).astype(np.int16),
            "b": rng.integers(0, 256, 4).astype(np.uint8),
        }
        for _ in range(7)
    ]
    with client.writer(max_sequence_length=3, chunk_length=2, delta_encoded=True) as w:
        for i, row in enumerate(seq_rows):
            w.append(row)
            if i >= 2:
                w.create_item("seq", 3, float(i))
    with client.trajectory_writer(num_keep_alive_refs=4) as tw:
        for i in range(6):
            tw.append({"x": np.full(2, i, np.float32), "y": np.int32(i)})
            if i >= 2:
                item = {"xs": tw.history["x"][-3:], "y_last": tw.history["y"][-1]}
                tw.create_item("traj", float(i), item)
        tw.flush()
    tw.close()  # __exit__ only flushes; an open stream holds server.stop() for 5 s
    t1 = time.time()
    sampled = collections.Counter(s[0].info.key for s in client.sample("t", num_samples=8))
    path = client.checkpoint()
    yield {
        "server": server,
        "client": client,
        "root": root,
        "path": path,
        "rows": rows,
        "seq_rows": seq_rows,
        "sampled": sampled,
        "written": (t0, t1),
    }
    server.stop()


def test_latest_checkpoint_is_the_returned_complete_directory(replay, tmp_path):
    assert replay["path"].startswith(replay["root"])
    assert cr.latest_checkpoint(replay["root"]) == replay["path"]
    assert sorted(os.listdir(replay["path"])) == ["DONE", "chunks.tfrecord", "tables.tfrecord"]
    # A newer-named directory without DONE (being written) is skipped.
    half = tmp_path / "root"
    shutil.copytree(replay["path"], half / "2000-01-01T00:00:00+00:00")
    shutil.copytree(replay["path"], half / "2999-01-01T00:00:00+00:00")
    os.remove(half / "2999-01-01T00:00:00+00:00" / "DONE")
    assert cr.latest_checkpoint(str(half)) == str(half / "2000-01-01T00:00:00+00:00")
    assert cr.latest_checkpoint(str(tmp_path / "root" / "2999-01-01T00:00:00+00:00")) is None
    with pytest.raises(cr.CheckpointNotFoundError):
        cr.latest_checkpoint(str(tmp_path / "nowhere"))


def test_tables_hold_settings_counters_and_signature(replay):
    tables = cr.read_tables(replay["path"])
    assert set(tables) == {"t", "seq", "traj"}
    t = tables["t"]
    assert (t.name, t.max_size, t.num_items) == ("t", 1000, N)
    assert (t.sampler, t.remover) == ("Prioritized(priority_exponent=0.6)", "Fifo")
    assert (tables["seq"].sampler, tables["traj"].sampler) == ("Uniform", "MaxHeap")
    rl = t.rate_limiter
    assert (rl.inserts, rl.samples, rl.deletes, rl.min_size_to_sample) == (N, 8, 0, 1)
    assert rl.samples_per_insert == 1.0 and rl.min_diff < -1e300 and rl.max_diff > 1e300
    assert t.signature == SIGNATURE
    assert t.num_unique_samples == len(replay["sampled"])
    assert (tables["seq"].num_items, tables["traj"].num_items) == (5, 4)


def test_items_round_trip_keys_priorities_times_sampled_and_payloads(replay):
    items = list(cr.iter_items(replay["path"], "t"))
    assert [it.priority for it in items] == [float(i + 1) for i in range(N)]  # insertion order
    assert len({it.key for it in items}) == N
    assert {it.key: it.times_sampled for it in items if it.times_sampled} == replay["sampled"]
    t0, t1 = replay["written"]
    stamps = [it.inserted_at for it in items]
    assert stamps == sorted(stamps) and t0 - 1 <= stamps[0] and stamps[-1] <= t1 + 1
    for item, row in zip(items, replay["rows"]):
        assert list(item.data) == sorted(SIGNATURE)
        for name, value in row.items():
            got = item.data[name]
            assert got.dtype == value.dtype and got.shape == SIGNATURE[name].shape
            np.testing.assert_array_equal(got, value)
            assert not got.flags.writeable
    bare = list(cr.iter_items(replay["path"], "t", decode=False))
    assert [(b.key, b.priority, b.data) for b in bare] == [
        (it.key, it.priority, None) for it in items
    ]
    timed = next(iter(cr.iter_items(replay["path"], "t", squeeze_single_step=False)))
    assert timed.data["obs"].shape == (1, 4) and timed.data["t"].shape == (1,)


def test_delta_encoded_items_spanning_chunks(replay):
    rows = replay["seq_rows"]
    items = list(cr.iter_items(replay["path"], "seq"))
    assert [it.priority for it in items] == [2.0, 3.0, 4.0, 5.0, 6.0]
    for i, item in enumerate(items, start=2):
        for name in ("a", "b"):
            want = np.stack([r[name] for r in rows[i - 2 : i + 1]])
            np.testing.assert_array_equal(item.data[name], want)
            assert item.data[name].dtype == want.dtype
    # The chunks really are delta encoded (so the cumulative sum was exercised).
    with cr.CheckpointReader(replay["path"]) as reader:
        chunks = [reader._parse_chunk(*span) for span in reader._index_chunks().values()]
    assert {c.delta_encoded for c in chunks if len(c.data.tensors) == 2} == {True}


def test_trajectory_writer_items_keep_their_squeeze_and_time_axis(replay):
    items = list(cr.iter_items(replay["path"], "traj"))
    assert [it.priority for it in items] == [2.0, 3.0, 4.0, 5.0]
    for i, item in enumerate(items, start=2):
        np.testing.assert_array_equal(
            item.data["xs"], np.repeat(np.arange(i - 2, i + 1), 2).reshape(3, 2)
        )
        assert item.data["y_last"].shape == () and int(item.data["y_last"]) == i


def test_reading_leaves_the_server_untouched(replay):
    client = replay["client"]

    def counts():
        info = client.server_info()
        return {
            name: (
                int(i.rate_limiter_info.sample_stats.completed),
                int(i.rate_limiter_info.insert_stats.completed),
                int(i.current_size),
                int(i.num_unique_samples),
            )
            for name, i in info.items()
        }

    before = counts()
    assert before["t"] == (8, N, N, len(replay["sampled"]))
    for name in ("t", "seq", "traj"):
        list(cr.iter_items(replay["path"], name))
    cr.read_tables(replay["path"])
    assert counts() == before


def test_pure_python_fallbacks_decode_and_verify_the_same(replay, monkeypatch):
    from tools.replay_inspect import snappy, tfrecord

    assert (snappy.BACKEND, tfrecord.BACKEND) == ("cramjam", "crc32c")  # the pinned packages
    native = list(cr.iter_items(replay["path"], "t"))
    monkeypatch.setattr(snappy, "BACKEND", "python")
    monkeypatch.setattr(tfrecord, "BACKEND", "python")
    fallback = list(cr.iter_items(replay["path"], "t"))
    assert [a.key for a in native] == [b.key for b in fallback]
    for a, b in zip(native, fallback):
        for name in SIGNATURE:
            np.testing.assert_array_equal(a.data[name], b.data[name])


def test_one_checkpoint_error_for_run_and_replay_checkpoints():
    from apex import checkpointing

    assert cr.CheckpointError is checkpointing.CheckpointError
    for cls in (cr.CorruptCheckpointError, cr.IncompleteCheckpointError, cr.UnknownTableError):
        assert issubclass(cls, checkpointing.CheckpointError)


def test_clear_errors(replay, tmp_path):
    path = replay["path"]
    with pytest.raises(cr.CheckpointNotFoundError, match="does not exist") as e:
        cr.read_tables(str(tmp_path / "missing"))
    assert isinstance(e.value, ApexError) and isinstance(e.value, FileNotFoundError)
    half = tmp_path / "half"
    shutil.copytree(path, half)
    os.remove(half / "DONE")
    with pytest.raises(cr.IncompleteCheckpointError, match="half-written"):
        cr.iter_items(str(half), "t")
    with pytest.raises(cr.IncompleteCheckpointError, match="checkpointer root"):
        cr.read_tables(replay["root"])
    with pytest.raises(cr.UnknownTableError, match="'nope'.*'t'"):
        cr.iter_items(path, "nope")  # raised at the call, not at the first next()
    for name in ("tables.tfrecord", "chunks.tfrecord"):
        bad = tmp_path / name
        shutil.copytree(path, bad)
        with open(bad / name, "r+b") as f:
            f.seek(30)  # the first record's data, past its header, table name or chunk key
            byte = f.read(1)
            f.seek(30)
            f.write(bytes([byte[0] ^ 0xFF]))
        with pytest.raises(cr.CorruptCheckpointError, match="checksum"):
            for table in cr.read_tables(str(bad)):
                list(cr.iter_items(str(bad), table))


def test_an_open_reader_survives_the_next_checkpoint_deleting_its_directory(tmp_path):
    server = reverb.Server(
        tables=[_table("x", None)],
        checkpointer=reverb.checkpointers.DefaultCheckpointer(path=str(tmp_path)),
    )
    try:
        client = reverb.Client(f"localhost:{server.port}")
        for i in range(3):
            client.insert(np.arange(2, dtype=np.int64) + i, priorities={"x": 1.0 + i})
        old = client.checkpoint()
        with cr.CheckpointReader(old) as reader:
            time.sleep(0.01)  # directory names have ns resolution, but be sure they differ
            new = client.checkpoint()  # Reverb keeps only the newest checkpoint
            assert new != old and not os.path.exists(old)
            items = list(reader.iter_items("x"))
        assert [it.priority for it in items] == [1.0, 2.0, 3.0]
        assert [it.data[0].tolist() for it in items] == [[0, 1], [1, 2], [2, 3]]  # no signature
        assert cr.latest_checkpoint(str(tmp_path)) == new
    finally:
        server.stop()
