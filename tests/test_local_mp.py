"""Integration (local_mp): real processes, real Reverb, real CartPole; clean stops."""

import csv
import json
import os
import re
import signal

import pytest

from apex.coordination import SUMMARY_KEYS
from apex.heartbeat import read_heartbeats
from tests.procs import (
    ROOT,
    interrupt,
    processes_with_token,
    run_train,
    start_learning,
    wait_until_gone,
)

pytestmark = pytest.mark.integration


def read(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.timeout(240)
def test_stop_criterion_writes_summary_and_leaves_no_process(tmp_path):
    run_dir = str(tmp_path / "run")
    # A stop on learner steps, not wall seconds: a loaded machine (CI's other
    # worker) once took 20 s to its first env step. The wall criterion's decision
    # is unit-tested (tests/test_control_plane.py).
    out, s, token = run_train(
        run_dir,
        "--config.stop.max_learner_steps=200",
        "--config.stop.max_wall_seconds=None",
        "--config.stop.max_actor_steps=None",
        "--config.replay.min_size=500",
        timeout=200,
    )
    for key in SUMMARY_KEYS:
        assert key in s
    assert s["stop_reason"] == "max_learner_steps"
    assert s["learner_steps"] >= 200  # it ran until the criterion, not shorter
    assert s["env_steps"] > 1000
    assert s["first_learner_step_seconds"] > 0
    assert s["samples_per_insert"] > 0 and s["eval_return_mean"] is not None
    assert "[apex" in out and "env_steps" in out  # the progress line reached the terminal
    # Run directory contents.
    cfg = read(os.path.join(run_dir, "config.json"))
    assert cfg["stop"]["max_learner_steps"] == 200 and cfg["stop"]["max_wall_seconds"] is None
    versions = read(os.path.join(run_dir, "versions.json"))
    assert versions["packages"]["dm-reverb"] == "0.7.0" and "git_commit" in versions
    for name in ("learner", "coordinator", "evaluator", "actor_0", "actor_1"):
        path = os.path.join(run_dir, "metrics", f"{name}.jsonl")
        assert os.path.getsize(path) > 0, name
        first = json.loads(open(path).readline())
        assert all(k == "time" or "/" in k for k in first), first
        # The same rows as CSV (long format) and TensorBoard events.
        with open(os.path.join(run_dir, "metrics", f"{name}.csv")) as f:
            rows = list(csv.DictReader(f))
        assert rows and set(rows[0]) == {"time", "step", "key", "value"}
        assert {r["key"] for r in rows} <= {k for k in first} | {
            k for line in open(path) for k in json.loads(line)
        }
        events = os.listdir(os.path.join(run_dir, "tensorboard", name))
        assert any(e.startswith("events.out.tfevents") for e in events), events
    learner_rows = [
        json.loads(line) for line in open(os.path.join(run_dir, "metrics", "learner.jsonl"))
    ]
    shares = [r for r in learner_rows if "learner/sample_share_band_0" in r]
    assert shares, "no per-band sample shares"
    total = sum(v for k, v in shares[-1].items() if k.startswith("learner/sample_share_band_"))
    assert abs(total - 1.0) < 1e-6
    with open(os.path.join(run_dir, "replay_address")) as f:
        assert f.read().strip().startswith("localhost:")
    # Every metric key the run wrote is documented.
    documented = set(
        re.findall(r"`([a-z_]+/[a-z0-9_]+)`", open(os.path.join(ROOT, "docs", "metrics.md")).read())
    )
    written = set()
    for name in os.listdir(os.path.join(run_dir, "metrics")):
        if not name.endswith(".jsonl"):
            continue
        for line in open(os.path.join(run_dir, "metrics", name)):
            written |= {
                re.sub(r"_band_\d+$", "_band_0", k) for k in json.loads(line) if k != "time"
            }
    assert written and written <= documented, sorted(written - documented)
    # Every node left a heartbeat; at the end each says it stopped.
    beats = read_heartbeats(run_dir)
    assert set(beats) == {"learner", "coordinator", "evaluator", "actor_0", "actor_1"}
    assert {b["state"] for b in beats.values()} == {"stopped"}
    assert beats["learner"]["counters"]["steps"] >= s["learner_steps"] > 0
    # doctor.log is there, findings or not; no empty stack files are left behind.
    with open(os.path.join(run_dir, "doctor.log")) as f:
        assert "[apex doctor]" in f.read()
    stacks = os.path.join(run_dir, "stacks")
    if os.path.isdir(stacks):
        assert all(os.path.getsize(os.path.join(stacks, n)) > 0 for n in os.listdir(stacks))
    wait_until_gone(token)  # nothing of the program is left


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "sig", [signal.SIGINT]
)  # SIGTERM, and SIGINT to the group: test_checkpoint
def test_signal_stops_every_process_and_writes_summary(tmp_path, sig):
    run_dir = str(tmp_path / "run")
    proc, token = start_learning(
        run_dir,
        "--config.stop.max_wall_seconds=600",
        "--config.replay.min_size=500",
        learner_steps=0,
    )
    # launcher + learner/replay + coordinator + actors
    assert len(processes_with_token(token)) >= 4
    out = interrupt(proc, token, lambda: proc.send_signal(sig))  # waits until none is left
    assert proc.returncode == 128 + sig, out[-3000:]
    assert "did not terminate in time" not in out, out[-3000:]  # inside the stop window
    s = read(os.path.join(run_dir, "summary.json"))
    assert s["learner_steps"] > 0 and s["stop_reason"] in ("stopped", "node failed")


@pytest.mark.timeout(180)
def test_local_mt_launch_type_runs_the_same_program_in_threads(tmp_path):
    run_dir = str(tmp_path / "run")
    out, s, token = run_train(
        run_dir,
        "--lp_launch_type=local_mt",
        # Stops once the learner trained (however long that takes here).
        "--config.stop.max_learner_steps=50",
        "--config.stop.max_wall_seconds=None",
        "--config.replay.min_size=500",
        timeout=150,
    )
    assert "launching local_mt" in out
    assert s["stop_reason"] == "max_learner_steps" and s["learner_steps"] >= 50
    assert s["env_steps"] > 0
    assert processes_with_token(token) == []
