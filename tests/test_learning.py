"""Learning: the default CartPole config reaches the solve target within a bounded budget."""

import json
import os

import pytest

from tests.procs import kill_tree, start_train

pytestmark = pytest.mark.learning


@pytest.mark.timeout(420)
def test_default_config_solves_cartpole(tmp_path):
    run_dir = str(tmp_path / "run")
    # Fixed seed (config.seed = 0). Budget: 300 s wall; the default run solves in about a minute.
    proc, token = start_train(run_dir, "--config.stop.when_solved=true", "--config.stop.max_wall_seconds=300",
                              "--config.stop.max_actor_steps=None")
    try:
        out, _ = proc.communicate(timeout=400)
    finally:
        kill_tree(proc, token)
    assert proc.returncode == 0, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    assert s["solved_at_wall_seconds"] is not None, s
    assert s["eval_return_mean"] >= 475.0
    assert s["stop_reason"] == "solved"
