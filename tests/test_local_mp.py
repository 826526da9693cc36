"""Integration (local_mp): real processes, real Reverb, real CartPole; clean stops."""

import csv
import json
import os
import re
import threading

import pytest

from apex.coordination import SUMMARY_KEYS
from apex.heartbeat import read_heartbeats
from tests.procs import (
    ROOT,
    kill_tree,
    processes_with_token,
    run_train,
    start_train,
    wait_until_gone,
)

pytestmark = pytest.mark.integration


def read(path):
    with open(path) as f:
        return json.load(f)


# The budget of every CartPole learning test: 600k env steps, not wall seconds (a
# loaded machine steps slower, it does not learn less per step). The default run
# solves at about 130k; timeouts are hang guards only.
CARTPOLE_BUDGET = (
    "--config.stop.when_solved=true",
    "--config.stop.max_wall_seconds=None",
    "--config.stop.max_actor_steps=600000",
)


@pytest.mark.learning
@pytest.mark.timeout(480)
def test_the_default_run_piped_solves_cartpole_writes_its_run_dir_and_leaves_no_process(
    tmp_path,
):
    """The README's quick-start run (default config, fixed seed 0) through a pipe,
    as `| tee`, CI logs and nohup see it, to its stop criterion (solved, within
    the budget): progress lines arrive as the run goes, whole, without colour
    codes or carriage returns; one summary, equal to summary.json; the run
    directory complete; nothing left. (The decision of each stop criterion:
    tests/test_control_plane.py.)"""
    run_dir = str(tmp_path / "run")
    proc, token = start_train(run_dir, *CARTPOLE_BUDGET)
    lines, summary_existed = [], []
    summary_path = os.path.join(run_dir, "summary.json")

    def read_lines() -> None:
        for line in proc.stdout:
            if re.match(r"\[apex +[0-9.]+s\] env_steps", line):
                summary_existed.append(os.path.exists(summary_path))
            lines.append(line)

    reader = threading.Thread(target=read_lines, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=440)
        reader.join(30)
    finally:
        kill_tree(proc, token)
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:]
    assert "\x1b[" not in out and "\r" not in out
    # Progress lines reached the pipe while the run went on, not in one lump at the end.
    assert len(summary_existed) >= 2 and not summary_existed[0], out[-3000:]
    # Every line is whole: apex's own, a node's (prefixed) or the stop countdown.
    for line in lines:
        assert re.match(r"(\[apex[ \]]|\[[a-z_]+/\d+\] |Waiting for the nodes)", line), line
    assert "Reverb client connecting" not in out and "User-requested termination" not in out
    # Forked from the warm launcher although scipy is installed (the dev extra pins
    # it; TensorFlow imports it and, with it, a BLAS thread pool), each actor
    # stepping CartPole's NumPy vector env (env.vectorization='auto').
    import importlib.util

    assert importlib.util.find_spec("scipy") is not None
    assert "each node a process of its own" not in out, out[:3000]
    assert "stepped as one vector env: gymnasium (auto)" in out, out[:3000]
    s = read(summary_path)
    printed = [
        json.loads(line.split("summary: ", 1)[1]) for line in lines if "] summary: {" in line
    ]
    assert len(printed) == 1 and printed[0] == {k: s[k] for k in printed[0]}
    for key in SUMMARY_KEYS:
        assert key in s
    assert s["stop_reason"] == "solved", s
    assert s["solved_at_env_steps"] is not None and s["solved_at_env_steps"] <= 600000, s
    assert s["eval_return_mean"] >= 475.0 and s["best_eval_return_mean"] >= 475.0, s
    assert s["env_steps"] > 1000
    assert s["first_learner_step_seconds"] > 0
    assert s["samples_per_insert"] > 0 and s["eval_return_mean"] is not None
    assert "[apex" in out and "env_steps" in out  # the progress line reached the terminal
    # Run directory contents.
    cfg = read(os.path.join(run_dir, "config.json"))
    assert cfg["stop"]["when_solved"] is True and cfg["stop"]["max_wall_seconds"] is None
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


@pytest.mark.timeout(180)
@pytest.mark.parametrize("why", ["--node_start=spawn", "--config.learner.jit_compile=true"])
def test_spawn_node_start_runs_each_node_as_a_process_of_its_own(tmp_path, why):
    # The path before the fork server, still there where it cannot be used (README
    # "How nodes start"): each node a fresh `python process_entry.py` behind
    # launch.node_output. Asked for, or where a forked learner would fail (XLA).
    run_dir = str(tmp_path / "run")
    out, s, token = run_train(
        run_dir,
        why,
        "--config.stop.max_learner_steps=50",
        "--config.stop.max_wall_seconds=None",
        "--config.replay.min_size=500",
        timeout=150,
    )
    assert "launching local_mp" in out and "starts as a process of its own" not in out
    if "jit_compile" in why:
        assert "node start: each node a process of its own (learner.jit_compile" in out
    assert s["stop_reason"] == "max_learner_steps" and s["learner_steps"] >= 50
    assert processes_with_token(token) == []


@pytest.mark.timeout(240)
def test_actors_stepping_their_envs_in_subprocesses_stop_with_no_process_left(tmp_path):
    """env.vectorization=gymnasium_async: each actor's envs in subprocesses forked
    from the actor; the program trains, and its stop ends them with their actor."""
    run_dir = str(tmp_path / "run")
    out, s, token = run_train(
        run_dir,
        "--config.env.vectorization=gymnasium_async",
        "--config.actor.envs_per_actor=2",
        "--config.stop.max_learner_steps=50",
        "--config.stop.max_wall_seconds=None",
        "--config.replay.min_size=300",
        timeout=200,
    )
    assert "stepped as one vector env: gymnasium_async" in out, out[:3000]
    assert s["stop_reason"] == "max_learner_steps" and s["env_steps"] >= 300
    assert processes_with_token(token) == []
