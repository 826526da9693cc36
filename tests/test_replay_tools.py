"""tools.replay's item-level commands on a real Reverb server filled with known
items, live (a snapshot the server writes) and offline (its checkpoint), and
proof that inspecting does not move what the learner sees."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import reverb

from apex.agents import TRANSITIONS_TABLE, make_tables
from apex.envs import env_spec
from apex.replay.writer import TransitionWriter
from tests.procs import run_tool_lines
from tools import replay_inspect as inspect

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# actor -> (items, epsilon of its only slot, first parameter version)
ACTORS = {0: (20, 0.4, 0), 1: (15, 0.05, 100), 2: (10, 0.001, 200)}


def known_priority(actor: int, i: int) -> float:
    return 1.0 + actor + i / 100.0


@pytest.fixture
def filled(small_config, tmp_path):
    ckpt_root = str(tmp_path / "ckpt")
    small_config.replay.min_size = 1
    server = reverb.Server(
        make_tables(small_config, env_spec(small_config.env)),
        checkpointer=reverb.checkpointers.DefaultCheckpointer(path=ckpt_root),
    )
    client = reverb.Client(f"localhost:{server.port}")
    for actor, (n, eps, v0) in ACTORS.items():
        w = TransitionWriter(client, TRANSITIONS_TABLE, actor, np.array([eps]))
        batch = {
            "obs": np.tile(np.arange(4, dtype=np.float32), (n, 1)) + actor,
            "action": np.full(n, actor % 2, np.int32),
            "reward": np.arange(n, dtype=np.float32),
            "discount": np.full(n, 0.99, np.float32),
            "next_obs": np.zeros((n, 4), np.float32),
            "slot": np.zeros(n, np.int32),
            "version": v0 + np.arange(n),
        }
        w.write(batch, np.array([known_priority(actor, i) for i in range(n)]))
        assert w.close()
    sampled = [
        s.info.key for s in client.sample(TRANSITIONS_TABLE, num_samples=7, emit_timesteps=False)
    ]
    yield server, client, ckpt_root, sampled
    server.stop()


def sample_count(client) -> int:
    return client.server_info()[TRANSITIONS_TABLE].rate_limiter_info.sample_stats.completed


def cli_lines(*commands: list[str]) -> list[str]:
    """Each tools.replay command line's stdout, all run in one process (exit 0 each)."""
    results = run_tool_lines("tools.replay", list(commands), timeout=120)
    for r in results:
        assert r["rc"] == 0, (r["argv"], r["stderr"][-3000:])
    return [r["stdout"] for r in results]


def test_library_views_of_a_live_snapshot(filled):
    _, client, _, sampled = filled
    before = sample_count(client)
    path = inspect.snapshot(client)
    cols = inspect.item_table(path, TRANSITIONS_TABLE)
    assert len(cols["key"]) == 45
    expected = sorted(known_priority(a, i) for a, (n, _, _) in ACTORS.items() for i in range(n))
    np.testing.assert_allclose(np.sort(cols["priority"]), expected)
    # times_sampled: exactly the 7 draws made by the fixture.
    assert cols["times_sampled"].sum() == 7
    assert set(cols["key"][cols["times_sampled"] > 0].tolist()) == set(sampled)
    s = inspect.priority_summary(cols, k=3, bins=5)
    assert sum(s["histogram"]["counts"]) == 45
    assert [r["priority"] for r in s["top"]] == pytest.approx([3.09, 3.08, 3.07])
    assert [r["priority"] for r in s["bottom"]] == pytest.approx([1.0, 1.01, 1.02])
    b = inspect.breakdown(cols, (0.01, 0.1), version_bins=3)
    by_actor = {r["group"]: r for r in b["actor"]}
    assert by_actor["actor 1"]["count"] == 15
    assert by_actor["actor 1"]["mean_priority"] == pytest.approx(2.0 + 0.07)
    bands = {r["group"]: r["count"] for r in b["epsilon_band"]}
    assert bands == {"eps<0.01": 10, "0.01<=eps<0.1": 15, "eps>=0.1": 20}
    assert sum(r["count"] for r in b["version"]) == 45
    items = inspect.select_items(path, TRANSITIONS_TABLE, 2, "top")
    assert [round(it["priority"], 2) for it in items] == [3.09, 3.08]
    top = items[0]["data"]
    assert int(top["actor"]) == 2 and int(top["version"]) == 209
    assert float(top["epsilon"]) == pytest.approx(0.001)
    np.testing.assert_array_equal(top["obs"], np.arange(4) + 2)
    assert float(top["reward"]) == 9.0
    # Nothing the learner sees moved.
    assert sample_count(client) == before


@pytest.mark.integration  # two CLI processes against a live server, then its checkpoint
def test_cli_live_and_offline_give_the_same_numbers(filled, tmp_path):
    server, client, ckpt_root, _ = filled
    before = sample_count(client)
    live = f"--server=localhost:{server.port}"
    png = str(tmp_path / "prio.png")
    out_json = str(tmp_path / "items.json")
    out_npz = str(tmp_path / "items.npz")
    text, _, _, breakdown, watch = cli_lines(  # one process, one TF import
        ["priorities", live, "--k=2", "--bins=4", f"--png={png}"],
        ["items", live, "--n=3", "--order=bottom", f"--out={out_json}"],
        ["items", live, "--n=5", "--order=oldest", f"--out={out_npz}"],
        ["breakdown", live, "--json"],
        ["watch", live, "--count=2", "--interval=0.1"],
    )
    assert "45 items; priority min 1, mean" in text and "max 3.09" in text
    assert os.path.getsize(png) > 1000 and open(png, "rb").read(4) == b"\x89PNG"
    items = json.load(open(out_json))
    assert [round(it["priority"], 2) for it in items] == [1.0, 1.01, 1.02]
    assert items[0]["data"]["actor"] == 0 and items[0]["data"]["slot"] == 0
    assert items[0]["data"]["epsilon"] == pytest.approx(0.4)
    z = np.load(out_npz)
    assert z["data/obs"].shape == (5, 4) and z["key"].shape == (5,)
    live_breakdown = json.loads(breakdown)
    assert watch.count("table transitions: 45/5,000 items") == 2
    assert sample_count(client) == before  # every live command left sampling alone
    server.stop()
    # Offline: the checkpoint root the server wrote, no server running.
    ckpt = f"--checkpoint={ckpt_root}"
    breakdown, stats, offline_text, offline_items = cli_lines(
        ["breakdown", ckpt, "--json"],
        ["stats", ckpt, "--json"],
        ["priorities", ckpt, "--k=1"],
        ["items", ckpt, "--n=3", "--order=bottom"],
    )
    offline_breakdown = json.loads(breakdown)
    for by in ("actor", "epsilon_band"):
        assert [r["count"] for r in offline_breakdown[by]] == [
            r["count"] for r in live_breakdown[by]
        ]
    stats = json.loads(stats)
    assert stats[0]["size"] == 45 and stats[0]["inserts"] == 45 and stats[0]["samples"] == 7
    assert "Prioritized" in stats[0]["sampler"]
    assert "45 items" in offline_text and "3.09" in offline_text
    offline_items = json.loads(offline_items)
    assert [it["key"] for it in offline_items] == [it["key"] for it in items]


@pytest.mark.cli
def test_cli_refuses_a_half_written_checkpoint(tmp_path):
    half = tmp_path / "2026-01-01T00:00:00"
    half.mkdir()
    (half / "tables.tfrecord").write_bytes(b"")
    out = subprocess.run(
        [sys.executable, "-m", "tools.replay", "priorities", f"--checkpoint={half}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "half-written" in out.stderr


@pytest.mark.integration  # a CLI process against a live server
@pytest.mark.timeout(120)
def test_ctrl_c_ends_watch_with_130_and_no_traceback(filled):
    import signal

    from tests.procs import ROOT, wait_until

    server = filled[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.replay", "watch", f"--server=localhost:{server.port}"]
        + ["--interval=0.2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = wait_until(proc.stdout.readline, 90, "watch's first table")
        assert first.startswith("--- "), first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
