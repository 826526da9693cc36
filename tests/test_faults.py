"""Actor faults (local_mp): an actor whose envs raise is restarted and the
program keeps training; past actor.max_restarts the program stops with a
named failure, and no process is left (one run shows both)."""

import json
import os

import pytest

from tests.procs import kill_tree, start_train, wait_until_gone

pytestmark = pytest.mark.integration


def actor_rows(run_dir, i):
    with open(os.path.join(run_dir, "metrics", f"actor_{i}.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.timeout(300)
def test_actors_whose_envs_raise_are_restarted_until_max_restarts_then_the_program_stops(
    tmp_path,
):
    """Every env raises on its 400th, 800th, ... step (16 envs per actor: an
    actor fails every 6,400 env steps). Each actor is restarted with its counters
    and the learner trains on; an actor's 5th failure is past max_restarts=4: the
    program stops with a named failure, exit 1, and no process is left."""
    run_dir = str(tmp_path / "run")
    proc, token = start_train(
        run_dir,
        "--config.env.fault_every=400",
        "--config.actor.max_restarts=4",
        "--config.actor.restart_backoff_seconds=0.2",
        "--config.stop.max_wall_seconds=None",
        "--config.stop.max_actor_steps=1000000",  # the hang guard: 5 failures come first
    )
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        kill_tree(proc, token)
    assert proc.returncode == 1, out[-3000:]  # the entry point says a node failed
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    assert s["stop_reason"] == "node failed", s
    assert s["failure"].startswith("actor_") and "max_restarts=4" in s["failure"], s
    assert "InjectedFault" in s["failure"]
    # Before that, both actors were restarted and went on: "restart 1/4" in the
    # output, restarts in their rows, counters that never went back.
    assert "InjectedFault" in out and "restart 1/4" in out, out[-3000:]
    restarts = [max(r.get("actor/restarts", 0) for r in actor_rows(run_dir, i)) for i in (0, 1)]
    assert min(restarts) >= 2 and max(restarts) >= 3, restarts
    for i in (0, 1):
        steps = [r["actor/env_steps"] for r in actor_rows(run_dir, i)]
        assert steps == sorted(steps) and steps[-1] > 2 * 400 * 16, (i, steps[-5:])
    # The learner kept training through the restarts.
    assert s["learner_steps"] > 0 and s["eval_return_mean"] is not None, s
    wait_until_gone(token)  # no process of the program is left
