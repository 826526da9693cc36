"""Replay inspection reads a real Reverb server without moving its counters."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import reverb

from apex.replay.stats import format_stats, table_stats
from tools import replay_inspect as inspect

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def limited():
    """SampleToInsertRatio(2, min_size 10, error_buffer 20): min_diff 0, max_diff 40."""
    table = reverb.Table(
        "t",
        reverb.selectors.Prioritized(0.6),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.SampleToInsertRatio(2.0, 10, 20.0),
    )
    server = reverb.Server([table])
    client = reverb.Client(f"localhost:{server.port}")
    yield server, client
    server.stop()


def insert_in_thread(client, seconds=1.5):
    done = threading.Event()
    threading.Thread(
        target=lambda: (client.insert(np.float32(0), {"t": 1.0}), done.set()), daemon=True
    ).start()
    return done.wait(seconds)


def test_stats_report_counts_ratio_and_limiter_state(limited):
    _, client = limited
    for i in range(15):
        client.insert(np.float32(i), priorities={"t": 1.0})
    list(client.sample("t", num_samples=4))
    (s,) = table_stats(client)
    assert (s["size"], s["capacity"], s["inserts"], s["samples"]) == (15, 100, 15, 4)
    assert s["samples_per_insert"] == pytest.approx(4 / 15)
    rl = s["rate_limiter"]
    assert (rl["min_diff"], rl["max_diff"], rl["diff"]) == (0.0, 40.0, 26.0)
    assert rl["can_insert"] and rl["can_sample"]
    assert "table t: 15/100 items" in format_stats([s])


def test_stats_leave_the_table_untouched(limited):
    _, client = limited
    for i in range(12):
        client.insert(np.float32(i), priorities={"t": 1.0})
    before = table_stats(client)
    for _ in range(5):
        table_stats(client)
    after = table_stats(client)
    assert after[0]["samples"] == before[0]["samples"] == 0
    assert after[0]["unique_samples"] == 0


def test_can_insert_matches_what_the_server_does(limited):
    _, client = limited
    for i in range(15):
        client.insert(np.float32(i), priorities={"t": 1.0})
    list(client.sample("t", num_samples=4))
    for _ in range(7):  # up to 22 inserts: diff = 22 * 2 - 4 = 40 = max_diff
        assert table_stats(client)[0]["rate_limiter"]["can_insert"]
        assert insert_in_thread(client)
    assert not table_stats(client)[0]["rate_limiter"]["can_insert"]
    assert not insert_in_thread(client)  # the server holds the next insert, as reported


@pytest.mark.cli
@pytest.mark.timeout(120)
def test_cli_prints_stats_as_json_and_refuses_a_dead_server(limited):
    server, client = limited
    for i in range(11):
        client.insert(np.float32(i), priorities={"t": 1.0})
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.replay",
            "stats",
            f"--server=localhost:{server.port}",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    stats = json.loads(out.stdout)
    assert stats[0]["size"] == 11 and stats[0]["rate_limiter"]["can_sample"]
    dead = subprocess.run(
        [sys.executable, "-m", "tools.replay", "stats", "--server=localhost:1", "--timeout=2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert dead.returncode == 1 and "cannot reach the Reverb server localhost:1" in dead.stderr


def test_items_npz_keeps_every_key_exact(tmp_path):
    # Reverb keys are uint64; most are above 2**53, where float64 is no longer exact.
    keys = [2**64 - 1, 2**63 + 12345, 2**53 + 1, 7]
    items = [
        {
            "key": k,
            "priority": 0.5,
            "times_sampled": i,
            "inserted_at": 1.0,
            "age_seconds": 2.0,
            "data": {"obs": np.full(4, i, np.float32)},
        }
        for i, k in enumerate(keys)
    ]
    path = inspect.save_items_npz(items, str(tmp_path / "items.npz"))
    with np.load(path) as z:
        assert z["key"].dtype == np.uint64
        assert [int(k) for k in z["key"]] == keys
        assert z["times_sampled"].dtype == np.int64
        assert z["data/obs"].shape == (4, 4)
