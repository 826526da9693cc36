"""`--launcher=ray --ray_simulate_nodes=3`, the README's one command for trying
the Ray launcher on one machine (a 3-node Ray cluster simulated for the run),
stopped by a Ctrl-C at the terminal (SIGINT to the whole foreground process
group)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.procs import (
    STARTUP_TIMEOUT,
    STOP_TIMEOUT,
    interrupt,
    kill_tree,
    start_learning,
    wait_until,
)
from tools.status import format_status, status

pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.integration]


def _beats(run_dir: str) -> dict[str, dict]:
    from apex.heartbeat import read_heartbeats

    return read_heartbeats(run_dir)


def test_the_default_program_trains_across_nodes_and_ctrl_c_leaves_nothing(tmp_path):
    """Placed by custom resources (the head has 'apex_learner', the workers
    'apex_actor'): learner and coordinator on one node, the actors on the two
    others; a Ctrl-C at the terminal stops it in order and nothing is left."""
    run_dir = str(tmp_path / "run")
    proc, token = start_learning(
        run_dir,
        "--launcher=ray",
        "--ray_simulate_nodes=3",
        "--config.cluster.learner_resource=apex_learner",
        "--config.cluster.actor_resource=apex_actor",
        "--config.logging.tensorboard=False",
        learner_steps=50,
        new_session=True,
    )
    try:

        def placed() -> dict | None:
            beats = _beats(run_dir)
            names = {"learner", "coordinator", "actor_0", "actor_1"}
            return (
                beats
                if names <= set(beats) and all("ray_node" in beats[n] for n in names)
                else None
            )

        beats = wait_until(placed, STARTUP_TIMEOUT, "every node's beat with its Ray node")
        text = format_status(status(run_dir))  # tools.status names each node's Ray node
    except BaseException:
        kill_tree(proc, token)
        raise
    # Every process of the program carries the token: the launcher, the
    # simulated cluster (GCS, raylets, Ray workers) and the node processes.
    out = interrupt(proc, token, lambda: os.killpg(proc.pid, signal.SIGINT), STOP_TIMEOUT)
    assert proc.returncode == 130, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stop_reason"] == "stopped", summary
    assert summary["checkpoint"], summary  # the final checkpoint was written
    assert summary["learner_steps"] > 50 and summary["replay_size"] > 0, summary
    assert "[apex] placement:" in out and "Traceback" not in out, out[-3000:]

    with open(os.path.join(run_dir, "placement.json")) as f:
        placement = json.load(f)["nodes"]
    head = beats["learner"]["ray_node"]
    assert placement["learner"]["ray_node"] == head == beats["coordinator"]["ray_node"]
    actor_nodes = {beats[f"actor_{i}"]["ray_node"] for i in range(2)}
    assert head not in actor_nodes and len(actor_nodes) == 2, (head, actor_nodes)
    assert f"(Ray node {head[:8]})" in text, text
