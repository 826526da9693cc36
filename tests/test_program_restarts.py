"""Whole-program restarts (checkpoint.max_program_restarts): the policy alone,
then real local_mp programs whose learner is SIGKILLed: once (the program comes
back by itself from the newest complete checkpoint and reaches its own stop),
and at every start (a crash loop: it stops naming the node). A killed replay
shard: tests/test_shards_program.py; a learner's host on Ray: tests/test_ray.py."""

from __future__ import annotations

import json
import os
import signal

import pytest

from apex import checkpointing, decide_program_restart, read_heartbeats, read_program_restarts
from apex.restart import CRASH_LOOP_LIVES
from tests.procs import (
    STARTUP_TIMEOUT,
    STOP_TIMEOUT,
    kill_tree,
    read_in_background,
    start_train,
    wait_for_state,
    wait_until,
    wait_until_gone,
)


def _life(node: str, seconds: float) -> dict:
    return {"node": node, "life_seconds": seconds}


def test_a_learner_death_restarts_the_program_at_once_after_a_long_life():
    d = decide_program_restart("learner", 900.0, [_life("learner", 800.0)], 10, 120.0)
    assert d.restart and d.wait == 0.0 and d.why == "restart 2/10"


def test_actors_and_placement_failures_are_not_restarted_this_way():
    for node in ("actor_0", "placement", ""):
        d = decide_program_restart(node, 900.0, [], 10, 120.0)
        assert not d.restart, node


def test_past_max_program_restarts_the_program_stops():
    earlier = [_life("learner", 500.0)] * 3
    d = decide_program_restart("replay_1", 500.0, earlier, 3, 120.0)
    assert not d.restart and d.why == "past checkpoint.max_program_restarts=3"
    assert not decide_program_restart("learner", 500.0, [], 0, 120.0).restart


def test_quick_deaths_back_off_then_make_a_crash_loop():
    first = decide_program_restart("learner", 5.0, [], 10, 120.0)
    second = decide_program_restart("learner", 5.0, [_life("learner", 5.0)], 10, 120.0)
    assert (first.restart, first.wait) == (True, 1.0)
    assert (second.restart, second.wait) == (True, 2.0)
    loop = decide_program_restart(
        "learner", 5.0, [_life("learner", 5.0)] * (CRASH_LOOP_LIVES - 1), 10, 120.0
    )
    assert not loop.restart
    assert loop.why == (
        "crash loop: learner failed 3 times in a row, each within 120 s of a start "
        "(checkpoint.crash_loop_seconds)"
    )


def test_a_long_life_or_another_node_between_quick_deaths_is_no_crash_loop():
    long_between = [_life("learner", 5.0), _life("learner", 600.0), _life("learner", 5.0)]
    assert decide_program_restart("learner", 5.0, long_between, 10, 120.0).restart
    other_node = [_life("learner", 5.0), _life("replay_0", 5.0)]
    assert decide_program_restart("learner", 5.0, other_node, 10, 120.0).restart


def _kill_learner(run_dir: str, not_pid: int | None = None) -> int:
    """SIGKILLs the learner's process once it beats (a pid other than `not_pid`)."""

    def learner_pid() -> int | None:
        beat = read_heartbeats(run_dir).get("learner")
        pid = beat and int(beat["pid"])
        return pid if pid and pid != not_pid else None

    pid = wait_until(learner_pid, STARTUP_TIMEOUT, "a learner's heartbeat")
    os.kill(pid, signal.SIGKILL)
    return pid


def _until_exit(proc, token: str, reader) -> None:
    """Waits (hang guards) for the launcher to exit, its output read, and every
    process of the program to be gone."""
    proc.wait(timeout=STARTUP_TIMEOUT + STOP_TIMEOUT)
    reader.join(timeout=STOP_TIMEOUT)
    wait_until_gone(token)


def _summary(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_a_sigkilled_learner_is_survived_without_a_relaunch(tmp_path):
    """The learner dies after a complete checkpoint: the launcher starts the
    program again in the same run directory from it, the restart is recorded
    with its cost, and the run reaches its own stop (exit 0) with no process
    left."""
    run_dir = str(tmp_path / "run")
    proc, token = start_train(
        run_dir,
        "--config.checkpoint.period_seconds=2",
        "--config.stop.max_learner_steps=3000",
        "--config.stop.max_wall_seconds=400",
        "--config.logging.tensorboard=False",
    )
    lines, reader = read_in_background(proc)
    try:
        ckpt = wait_until(
            lambda: checkpointing.latest_complete(run_dir),
            STARTUP_TIMEOUT,
            lambda: f"a complete checkpoint; output: {''.join(lines)[-3000:]}",
        )
        # The coordinator has counted steps past that checkpoint: some are lost.
        saved = int(os.path.basename(ckpt).split("-")[1])
        wait_for_state(run_dir, lambda st: (st.get("learner_steps") or 0) > saved + 50)
        killed = _kill_learner(run_dir)
        _until_exit(proc, token, reader)
    finally:
        kill_tree(proc, token)
    out = "".join(lines)
    assert proc.returncode == 0, out[-4000:]
    assert "[apex] starting the program again in" in out, out[-4000:]
    (record,) = read_program_restarts(run_dir)
    assert record["node"] == "learner" and f"(pid {killed})" in record["failure"], record
    # Resumed from a complete checkpoint at or after the one seen before the kill.
    step = int(record["resumed_from"].split("-")[1])
    assert step >= int(os.path.basename(ckpt).split("-")[1]), record
    # Lost: what the coordinator had counted at the failure past the checkpoint.
    assert record["sgd_steps_lost"] == max(0, record["at_learner_steps"] - step), record
    assert record["env_steps_lost"] >= 0, record
    summary = _summary(run_dir)
    assert summary["stop_reason"] == "max_learner_steps", summary
    assert summary["learner_steps"] >= 3000 and summary["program_restarts"] == 1, summary
    assert summary["restarts"] == [record], summary
    assert f"program restart 1 after learner failed: lost {record['env_steps_lost']:,}" in out


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_learner_that_dies_at_every_start_is_a_crash_loop_named_in_the_summary(tmp_path):
    run_dir = str(tmp_path / "run")
    proc, token = start_train(
        run_dir,
        "--config.checkpoint.period_seconds=1",
        "--config.stop.max_wall_seconds=500",
        "--config.logging.tensorboard=False",
    )
    lines, reader = read_in_background(proc)
    try:
        wait_until(lambda: checkpointing.latest_complete(run_dir), STARTUP_TIMEOUT, "a checkpoint")
        pid = None
        for _ in range(3):  # each life's learner, as soon as it beats
            pid = _kill_learner(run_dir, not_pid=pid)
        _until_exit(proc, token, reader)
    finally:
        kill_tree(proc, token)
    out = "".join(lines)
    assert proc.returncode == 1, out[-4000:]
    assert len(read_program_restarts(run_dir)) == 2, out[-4000:]
    failure = _summary(run_dir)["failure"]
    assert failure.startswith("crash loop: learner failed 3 times in a row"), failure
    assert f"learner (pid {pid}) exited without stopping" in failure, failure
    assert "the program is not started again: crash loop" in out, out[-4000:]


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_a_damaged_newest_checkpoint_is_refused_by_tools_and_set_aside_by_a_resume(tmp_path):
    """A stopped run's final checkpoint gets one flipped byte in its Reverb
    chunks: tools.replay refuses it naming the file (exit 2), and a resume,
    with nobody moving anything, sets it aside and continues from the one before."""
    from tests.procs import interrupt, run_tool_lines, start_learning

    run_dir = str(tmp_path / "run")
    proc, token = start_learning(
        run_dir, "--config.checkpoint.period_seconds=1", "--config.stop.max_wall_seconds=300"
    )
    wait_until(
        lambda: len(checkpointing.list_complete(run_dir)) >= 2, STARTUP_TIMEOUT, "2 checkpoints"
    )
    out = interrupt(proc, token, proc.terminate)
    assert proc.returncode == 143, out[-3000:]
    older, newest = checkpointing.list_complete(run_dir)[-2:]
    chunks = os.path.join(newest, "replay", "chunks.tfrecord")
    with open(chunks, "r+b") as f:
        f.seek(os.path.getsize(chunks) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))

    (look,) = run_tool_lines("tools.replay", [["stats", f"--run_dir={run_dir}"]])
    assert look["rc"] == 2, look["stderr"][-2000:]
    assert (
        f"tools.replay: cannot read the checkpoint: {newest} is corrupt: "
        "replay/chunks.tfrecord does not match its checksum"
    ) in look["stderr"], look["stderr"][-2000:]

    saved = sum(checkpointing.load(older).state["actor_steps"].values())
    proc, token = start_train(run_dir, "--resume", f"--config.stop.max_actor_steps={saved + 2000}")
    try:
        out, _ = proc.communicate(timeout=STARTUP_TIMEOUT)
    finally:
        kill_tree(proc, token)
    assert proc.returncode == 0, out[-3000:]
    name = os.path.basename(newest)
    assert f"set aside as checkpoints/{name}.damaged" in out, out[-3000:]
    assert f"resuming from checkpoints/{os.path.basename(older)}" in out, out[-3000:]
    assert _summary(run_dir)["resumed_from"] == older
    assert os.path.isdir(newest + ".damaged")


def test_tools_status_names_the_program_restarts_of_a_finished_run(tmp_path):
    """A finished run's status (no replay reachable): the restarts' count, the
    last one's node, cause and cost."""
    from tools.status import format_status, status

    run_dir = str(tmp_path)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump({"logging": {"stall_seconds": 30.0}}, f)
    record = {
        "restart": 1,
        "node": "learner",
        "failure": "learner (pid 7) exited without stopping (killed, e.g. SIGKILL or out of memory)",
        "life_seconds": 612.4,
        "resumed_from": "ckpt-000001000",
        "env_steps_lost": 4096,
        "sgd_steps_lost": 512,
    }
    with open(os.path.join(run_dir, "restarts.json"), "w") as f:
        json.dump({"restarts": [record]}, f)
    s = status(run_dir)
    assert s["program_restarts"] == [record]
    assert (
        "program restarts: 1; the last after learner failed 612 s into its life (learner "
        "(pid 7) exited without stopping (killed, e.g. SIGKILL or out of memory)); lost 4,096 "
        "env steps and 512 SGD steps back to ckpt-000001000"
    ) in format_status(s)
