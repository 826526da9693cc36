"""`--launcher=ray --ray_simulate_nodes=3`, the README's one command for trying
the Ray launcher on one machine, stopped by a Ctrl-C at the terminal (SIGINT to
the whole foreground process group)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.procs import STOP_TIMEOUT, interrupt, start_learning

pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.integration]


def test_ctrl_c_stops_the_program_in_order_and_the_simulated_cluster_goes_too(tmp_path):
    run_dir = str(tmp_path / "run")
    proc, token = start_learning(
        run_dir,
        "--launcher=ray",
        "--ray_simulate_nodes=3",
        "--config.logging.tensorboard=False",
        learner_steps=50,
        new_session=True,
    )
    # Every process of the program carries the token: the launcher, the
    # simulated cluster (GCS, raylets, Ray workers) and the node processes.
    out = interrupt(proc, token, lambda: os.killpg(proc.pid, signal.SIGINT), STOP_TIMEOUT)
    assert proc.returncode == 130, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stop_reason"] == "stopped", summary
    assert summary["checkpoint"], summary  # the final checkpoint was written
    with open(os.path.join(run_dir, "placement.json")) as f:
        placed = json.load(f)
    learner_node = placed["nodes"]["learner"]["ray_node"]
    assert {placed["nodes"][f"actor_{i}"]["ray_node"] for i in range(2)}.isdisjoint(
        {learner_node}
    ), placed
    assert "[apex] placement:" in out and "Traceback" not in out, out[-3000:]
