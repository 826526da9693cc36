"""`--launcher=ray`: the default CartPole program placed across a multi-node Ray
cluster simulated on this machine (Ray's own ray.cluster_utils.Cluster: one
raylet per node, each with its own CPUs and custom resources)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from apex import checkpointing, read_program_restarts
from apex.lifecycle import NO_SHARED_FS_ENV
from tests.procs import (
    ROOT,
    STARTUP_TIMEOUT,
    STOP_TIMEOUT,
    kill_tree,
    read_in_background,
    start_train,
    train_command,
    wait_for_state,
    wait_until,
    wait_until_gone,
)

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.integration]

ON_CLUSTER = (
    "--launcher=ray",
    "--config.cluster.learner_resource=apex_learner",
    "--config.cluster.actor_resource=apex_actor",
    "--config.checkpoint.period_seconds=None",
    "--config.logging.tensorboard=False",
)


@pytest.fixture(scope="module")
def cluster():
    """Head (2 CPUs, 'apex_learner') and two workers (2 CPUs, 'apex_actor')."""
    from launch.ray_cluster import start

    c = start(3, head_cpus=2, worker_cpus=2)
    try:
        yield c
    finally:
        c.shutdown()


def _all_free(cluster) -> bool:
    """Every CPU and custom resource of the cluster is free: no Ray actor of a
    program holds any. (The test connects only for this: a node a driver is
    attached to cannot be removed.)"""
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    try:
        total, free = ray.cluster_resources(), ray.available_resources()
    finally:
        ray.shutdown()
    keys = [k for k in total if k == "CPU" or k.startswith("apex_")]
    return all(abs(free.get(k, 0.0) - total[k]) < 1e-6 for k in keys)


def _beats(run_dir: str) -> dict[str, dict]:
    out = {}
    folder = os.path.join(run_dir, "heartbeats")
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        try:
            with open(os.path.join(folder, name)) as f:
                out[name[: -len(".json")]] = json.load(f)
        except (OSError, json.JSONDecodeError):
            continue
    return out


def _head_id(cluster) -> str:
    return cluster.head_node.node_id


@pytest.mark.timeout(900)
def test_a_lost_actor_node_is_replaced_then_a_lost_learner_host_restarts_the_program(
    cluster, tmp_path, monkeypatch
):
    """A worker node removed mid-run: its actor runs again on another node and
    carries on from its counts. The other actor's process is SIGKILLed: it
    starts again under its NodeHost, with its counts. The learner's host (its Ray
    worker) then dies: the program stops in order and the launcher starts it
    again on the cluster from the newest complete checkpoint, with nobody
    relaunching it; a SIGTERM then stops it (exit 143) and nothing is left. (A Ctrl-C's orderly stop on a cluster, with its final checkpoint:
    tests/test_ray_simulated.py.)"""
    spare = cluster.add_node(num_cpus=2, resources={"apex_actor": 1})
    cluster.wait_for_nodes()
    # Actors on other hosts need no shared filesystem: here they cannot write the
    # run directory at all (every write under it is refused in their processes).
    monkeypatch.setenv(NO_SHARED_FS_ENV, "1")
    run_dir = str(tmp_path / "run")
    proc, token = start_train(
        run_dir,
        *ON_CLUSTER,
        f"--ray_address={cluster.address}",
        "--config.actor.restart_backoff_seconds=0.5",
        "--config.stop.max_wall_seconds=600",
        "--config.checkpoint.period_seconds=5",
    )
    lines, reader = read_in_background(proc)
    try:
        wait_for_state(run_dir, lambda s: (s.get("learner_steps") or 0) > 50)

        def both_actors() -> dict | None:
            beats = _beats(run_dir)
            return beats if {"actor_0", "actor_1"} <= set(beats) else None

        beats = wait_until(both_actors, STARTUP_TIMEOUT, "both actors' beats")
        with open(os.path.join(run_dir, "placement.json")) as f:
            placed = json.load(f)
        # An actor's node, not the one the launcher's Ray driver is attached to
        # (on one machine Ray attaches it to any node: on a cluster, the head).
        name, victim = next(
            (a, n)
            for a in ("actor_0", "actor_1")
            for n in cluster.worker_nodes
            if n.node_id == beats[a]["ray_node"] and n.node_id != placed["launcher_node"]
        )
        assert placed["nodes"][name]["ray_node"] == victim.node_id
        steps_before = int(beats[name]["counters"].get("env_steps", 0))
        cluster.remove_node(victim)

        def moved() -> dict | None:
            beat = _beats(run_dir).get(name, {})
            alive = beat.get("ray_node") not in (None, victim.node_id)
            return beat if alive and beat.get("state") != "stopped" else None

        beat = wait_until(
            moved,
            STARTUP_TIMEOUT,
            lambda: f"{name} to run again on another node; output: {''.join(lines)[-4000:]}",
        )
        # It carried on from its counts (the run's env steps never go back).
        wait_until(
            lambda: int(_beats(run_dir)[name]["counters"].get("env_steps", 0)) > steps_before,
            STARTUP_TIMEOUT,
            f"the restarted {name} to step envs",
        )
        assert beat["ray_node"] != victim.node_id
        with open(os.path.join(run_dir, "placement.json")) as f:
            moved_placement = json.load(f)
        assert moved_placement["nodes"][name]["restarts"] == 1
        assert moved_placement["nodes"][name]["ray_node"] not in (victim.node_id, None)
        # The other actor's process dies (SIGKILL) while its NodeHost lives: it
        # starts again under that host, in its slot, with its counts (issue 29).
        other = "actor_1" if name == "actor_0" else "actor_0"
        old = _beats(run_dir)[other]
        os.kill(int(old["pid"]), 9)

        def back() -> dict | None:
            beat = _beats(run_dir).get(other, {})
            counters = beat.get("counters", {})
            new = beat.get("pid") != old["pid"] and counters.get("restarts") == 1
            return beat if new and counters.get("items_inserted", 0) > 0 else None

        again = wait_until(
            back,
            STARTUP_TIMEOUT,
            lambda: f"{other}'s process to come back; output: {''.join(lines)[-4000:]}",
        )
        assert again["ray_node"] == old["ray_node"]  # under the same NodeHost
        assert again["counters"]["env_steps"] > old["counters"]["env_steps"]
        wait_until(lambda: checkpointing.latest_complete(run_dir), STARTUP_TIMEOUT, "a checkpoint")
        os.kill(moved_placement["nodes"]["learner"]["host_pid"], 9)  # the learner's host
        # The program comes back by itself: a new learner steps past the checkpoint.
        restarts = wait_until(
            lambda: read_program_restarts(run_dir), STOP_TIMEOUT, "a program restart record"
        )
        wait_until(
            lambda: "resumed_from" in read_program_restarts(run_dir)[-1],
            STARTUP_TIMEOUT,
            lambda: f"the restarted program's resume; output: {''.join(lines)[-4000:]}",
        )
        resumed = read_program_restarts(run_dir)[-1]
        step = int(resumed["resumed_from"].split("-")[1])

        def trains_again() -> bool:
            try:
                with open(os.path.join(run_dir, "state.json")) as f:
                    st = json.load(f)
            except (OSError, ValueError):
                return False
            return st.get("program_restarts") == 1 and (st.get("learner_steps") or 0) > step

        wait_until(
            trains_again,
            STARTUP_TIMEOUT,
            lambda: f"the restarted learner to step; output: {''.join(lines)[-4000:]}",
        )
        proc.terminate()
        proc.wait(timeout=STOP_TIMEOUT)
        reader.join(timeout=STOP_TIMEOUT)
    finally:
        kill_tree(proc, token)
    out = "".join(lines)
    assert "restarted on Ray node" in out, out[-3000:]
    assert "restarted under its NodeHost" in out and "was killed by SIGKILL" in out, out[-3000:]
    assert proc.returncode == 143, out[-3000:]
    assert "starting the program again" in out, out[-3000:]
    for i in (0, 1):  # the guard was on in both actors, and nothing they did needed a write
        assert f"actor_{i}: writes under the run directory are refused" in out, out[-3000:]
    assert "PermissionError" not in out, out[-3000:]
    for i in (0, 1):  # what they report reached the run directory through the coordinator
        with open(os.path.join(run_dir, "metrics", f"actor_{i}.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        assert rows and rows[-1]["actor/env_steps"] > 0
    assert len(restarts) == 1 and restarts[0]["node"] == "learner", restarts
    assert "learner/0's Ray worker or node" in restarts[0]["failure"], restarts
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stop_reason"] == "stopped", summary
    assert summary["program_restarts"] == 1 and summary["learner_steps"] > step, summary
    assert summary["restarts"][0]["resumed_from"] == resumed["resumed_from"], summary
    wait_until_gone(token)
    wait_until(
        lambda: _all_free(cluster), STOP_TIMEOUT, "every Ray actor of the program to be gone"
    )
    del spare


def _refused(args: list[str], tmp_path, env: dict | None = None) -> str:
    run_dir = str(tmp_path / "never")
    proc = subprocess.run(
        train_command("--config=configs/apex_cartpole.py", f"--config.run_dir={run_dir}", *args),
        cwd=ROOT,
        env=dict(os.environ, **(env or {})),
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not os.path.exists(run_dir)  # refused before anything was created
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_bad_ray_input_is_one_line_and_exit_2(cluster, tmp_path):
    line = _refused(["--launcher=ray", "--ray_address=127.0.0.1:9"], tmp_path)
    assert "--ray_address='127.0.0.1:9'" in line and "nothing answers" in line, line

    line = _refused(["--ray_simulate_nodes=3"], tmp_path)  # a Ray flag, a local launch
    assert "--ray_simulate_nodes=3 is invalid: expected given only with --launcher=ray" in line

    line = _refused(
        [
            "--launcher=ray",
            f"--ray_address={cluster.address}",
            "--config.cluster.learner_resource=gpu_box",
        ],
        tmp_path,
    )
    assert "no node for the learner" in line and "'gpu_box'" in line, line

    line = _refused(
        ["--launcher=ray", f"--ray_address={cluster.address}", "--config.actor.num_actors=40"],
        tmp_path,
    )
    assert "needs 41.5 CPUs" in line and "40 actors x 1" in line, line
    assert "the cluster has 6 free" in line, line

    shim = tmp_path / "no_ray"
    (shim / "ray").mkdir(parents=True)
    (shim / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    line = _refused(
        ["--launcher=ray"],
        tmp_path,
        env={"PYTHONPATH": f"{shim}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )
    assert "Ray installed" in line and "setup.sh" in line, line
