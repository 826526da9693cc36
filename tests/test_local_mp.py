"""Integration (local_mp): real processes, real Reverb, real CartPole; clean stops."""

import json
import os
import re
import signal
import time

import pytest

from tests.procs import (
    ROOT,
    kill_tree,
    processes_with_token,
    run_train,
    start_train,
    wait_for_state,
)

pytestmark = pytest.mark.integration

SUMMARY_KEYS = [
    "env_steps",
    "learner_steps",
    "wall_seconds",
    "first_learner_step_seconds",
    "env_steps_per_second",
    "learner_steps_per_second",
    "samples_per_insert",
    "eval_return_mean",
    "solved_at_wall_seconds",
    "solved_at_env_steps",
]


def read(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.timeout(240)
def test_stop_criterion_writes_summary_and_leaves_no_process(tmp_path):
    run_dir = str(tmp_path / "run")
    out, s, token = run_train(
        run_dir,
        "--config.stop.max_wall_seconds=30",
        "--config.stop.max_actor_steps=None",
        "--config.replay.min_size=500",
        timeout=200,
    )
    for key in SUMMARY_KEYS:
        assert key in s
    assert s["stop_reason"] == "max_wall_seconds"
    assert 30 <= s["wall_seconds"] < 60
    assert s["env_steps"] > 1000 and s["learner_steps"] > 10
    assert 0 < s["first_learner_step_seconds"] < 30
    assert s["samples_per_insert"] > 0 and s["eval_return_mean"] is not None
    assert "[apex" in out and "env_steps" in out  # the progress line reached the terminal
    # Run directory contents.
    cfg = read(os.path.join(run_dir, "config.json"))
    assert cfg["stop"]["max_wall_seconds"] == 30.0
    versions = read(os.path.join(run_dir, "versions.json"))
    assert versions["packages"]["dm-reverb"] == "0.7.0" and "git_commit" in versions
    for name in ("learner", "coordinator", "evaluator", "actor_0", "actor_1"):
        path = os.path.join(run_dir, "metrics", f"{name}.jsonl")
        assert os.path.getsize(path) > 0, name
        first = json.loads(open(path).readline())
        assert all(k == "time" or "/" in k for k in first), first
    with open(os.path.join(run_dir, "replay_address")) as f:
        assert f.read().strip().startswith("localhost:")
    # Every metric key the run wrote is documented.
    documented = set(
        re.findall(r"`([a-z_]+/[a-z0-9_]+)`", open(os.path.join(ROOT, "docs", "metrics.md")).read())
    )
    written = set()
    for name in os.listdir(os.path.join(run_dir, "metrics")):
        for line in open(os.path.join(run_dir, "metrics", name)):
            written |= {k for k in json.loads(line) if k != "time"}
    assert written and written <= documented, sorted(written - documented)
    # Nothing of the program is left.
    deadline = time.time() + 10
    while processes_with_token(token) and time.time() < deadline:
        time.sleep(0.5)
    assert processes_with_token(token) == []


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_every_process_within_30s_and_writes_summary(tmp_path, sig):
    run_dir = str(tmp_path / "run")
    proc, token = start_train(
        run_dir, "--config.stop.max_wall_seconds=600", "--config.replay.min_size=500"
    )
    try:
        wait_for_state(run_dir, lambda s: (s.get("learner_steps") or 0) > 0, timeout=150)
        assert (
            len(processes_with_token(token)) >= 4
        )  # launcher + learner/replay + coordinator + actors
        t0 = time.time()
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        while processes_with_token(token) and time.time() - t0 < 30:
            time.sleep(0.2)
        elapsed = time.time() - t0
        left = processes_with_token(token)
    finally:
        kill_tree(proc, token)
    assert left == [], [p.cmdline() for p in left]
    assert elapsed < 30
    s = read(os.path.join(run_dir, "summary.json"))
    assert s["learner_steps"] > 0 and s["stop_reason"] in ("stopped", "node failed")


@pytest.mark.timeout(180)
def test_local_mt_launch_type_runs_the_same_program_in_threads(tmp_path):
    run_dir = str(tmp_path / "run")
    out, s, token = run_train(
        run_dir,
        "--lp_launch_type=local_mt",
        "--config.stop.max_wall_seconds=15",
        "--config.replay.min_size=500",
        timeout=150,
    )
    assert "launching local_mt" in out
    assert s["stop_reason"] == "max_wall_seconds" and s["learner_steps"] > 0 and s["env_steps"] > 0
    assert processes_with_token(token) == []
