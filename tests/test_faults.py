"""Actor faults (local_mp): an actor whose envs raise is restarted and the
program keeps training; past actor.max_restarts the program stops with a
named failure. No process is left either way."""

import json
import os

import pytest

from tests.procs import kill_tree, run_train, start_train, wait_until_gone

pytestmark = pytest.mark.integration


def actor_rows(run_dir, i):
    with open(os.path.join(run_dir, "metrics", f"actor_{i}.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.timeout(240)
def test_actors_whose_envs_raise_are_restarted_and_training_goes_on(tmp_path):
    run_dir = str(tmp_path / "run")
    out, s, token = run_train(
        run_dir,
        "--config.env.fault_every=400",  # every env raises on its 400th, 800th, ... step
        "--config.actor.restart_backoff_seconds=0.2",
        # A budget in env steps (~30k per actor: 4 or more restarts each), not seconds.
        "--config.stop.max_wall_seconds=None",
        "--config.stop.max_actor_steps=60000",
        timeout=200,
    )
    assert s["stop_reason"] == "max_actor_steps", s
    restarts = [max(r.get("actor/restarts", 0) for r in actor_rows(run_dir, i)) for i in (0, 1)]
    assert min(restarts) >= 2, restarts
    assert "InjectedFault" in out and "restart 1/20" in out
    # Counters continue across restarts, and the learner kept training.
    steps = [r["actor/env_steps"] for r in actor_rows(run_dir, 0)]
    assert steps == sorted(steps) and steps[-1] > 3 * 400 * 16
    assert s["learner_steps"] > 0 and s["eval_return_mean"] is not None
    wait_until_gone(token)  # no process of the program is left


@pytest.mark.timeout(240)
def test_an_actor_past_max_restarts_stops_the_program_with_a_named_failure(tmp_path):
    run_dir = str(tmp_path / "run")
    proc, token = start_train(
        run_dir,
        "--config.env.fault_every=50",
        "--config.actor.max_restarts=1",
        "--config.actor.restart_backoff_seconds=0",
        "--config.stop.max_wall_seconds=120",
    )
    try:
        out, _ = proc.communicate(timeout=200)
    finally:
        kill_tree(proc, token)
    assert proc.returncode == 1, out[-3000:]  # the entry point says a node failed
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    assert s["stop_reason"] == "node failed", s
    assert s["failure"].startswith("actor_") and "max_restarts=1" in s["failure"]
    assert "InjectedFault" in s["failure"]
    wait_until_gone(token)  # no process of the program is left
