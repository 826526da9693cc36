"""Whole-run checkpoints: the on-disk format, resume checks, and real runs that
are checkpointed, stopped by signals or killed, and resumed."""

import json
import os
import signal

import numpy as np
import pytest

from apex import checkpointing
from apex.errors import ConfigError


def _write(run_dir, step, keep=5, replay=True, arrays=None):
    replay_path = None
    if replay:
        replay_path = os.path.join(run_dir, f"r{step}")
        os.makedirs(replay_path)
        open(os.path.join(replay_path, "DONE"), "w").close()
        with open(os.path.join(replay_path, "chunks.tfrecord"), "wb") as f:
            f.write(bytes(range(64)))
    manifest = {"format": checkpointing.FORMAT, "config": {"agent": "apex_dqn"}}
    return checkpointing.write(
        run_dir,
        step,
        arrays or {"steps": np.asarray(step)},
        {"learner_steps": step, "actor_steps": {"0": 10 * step}},
        manifest,
        replay_path,
        keep,
    )


def test_written_checkpoint_loads_back_and_newest_complete_wins(tmp_path):
    run_dir = str(tmp_path)
    _write(run_dir, 5, arrays={"steps": np.asarray(5), "online/0": np.arange(6.0).reshape(2, 3)})
    path = _write(run_dir, 12)
    assert checkpointing.latest_complete(run_dir) == path
    assert os.path.basename(path) == "ckpt-000000012"
    first = checkpointing.load(checkpointing.list_complete(run_dir)[0])
    assert first.step == 5 and first.state["actor_steps"] == {"0": 50}
    np.testing.assert_array_equal(first.learner["online/0"], np.arange(6.0).reshape(2, 3))
    assert os.path.isfile(os.path.join(first.replay_path, "DONE"))


def test_half_written_checkpoint_is_ignored_and_refused(tmp_path):
    run_dir = str(tmp_path)
    good = _write(run_dir, 3)
    # A newer checkpoint that was being written when the run died: no COMPLETE.
    partial = os.path.join(checkpointing.checkpoints_dir(run_dir), "ckpt-000000009.partial")
    os.makedirs(partial)
    unmarked = os.path.join(checkpointing.checkpoints_dir(run_dir), "ckpt-000000010")
    os.makedirs(unmarked)
    assert checkpointing.latest_complete(run_dir) == good
    with pytest.raises(checkpointing.CheckpointError, match="no COMPLETE marker"):
        checkpointing.load(unmarked)


def test_corrupt_checkpoint_is_refused_naming_the_path(tmp_path):
    path = _write(str(tmp_path), 4)
    with open(os.path.join(path, checkpointing.LEARNER_FILE), "wb") as f:
        f.write(b"not a zip file")
    with pytest.raises(checkpointing.CheckpointError, match=r"ckpt-000000004 is corrupt"):
        checkpointing.load(path)


def _flip_a_byte(path: str, offset: int = 0) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize(
    "name", [checkpointing.LEARNER_FILE, checkpointing.STATE_FILE, "replay/chunks.tfrecord"]
)
def test_a_flipped_byte_in_any_file_is_refused_naming_that_file(tmp_path, name):
    path = _write(str(tmp_path), 4)
    with open(os.path.join(path, checkpointing.CHECKSUMS_FILE)) as f:
        listed = sorted(json.load(f)["sha256"])
    assert listed == sorted(
        [checkpointing.LEARNER_FILE, checkpointing.MANIFEST_FILE, checkpointing.STATE_FILE]
        + ["replay/DONE", "replay/chunks.tfrecord"]
    )
    _flip_a_byte(os.path.join(path, name), offset=3)
    with pytest.raises(checkpointing.CorruptCheckpointError) as err:
        checkpointing.load(path)
    assert str(err.value).startswith(f"{path} is corrupt: {name} does not match its checksum")


def test_a_missing_or_added_file_is_refused_and_old_checkpoints_without_sums_load(tmp_path):
    path = _write(str(tmp_path), 4)
    os.remove(os.path.join(path, "replay", "chunks.tfrecord"))
    with pytest.raises(checkpointing.CorruptCheckpointError, match="chunks.tfrecord is missing"):
        checkpointing.load(path)
    path = _write(str(tmp_path), 5)
    open(os.path.join(path, "replay", "stray"), "w").close()
    with pytest.raises(checkpointing.CorruptCheckpointError, match="stray was not in it"):
        checkpointing.load(path)
    path = _write(str(tmp_path), 6)
    os.remove(os.path.join(path, checkpointing.CHECKSUMS_FILE))  # written before checksums
    assert checkpointing.load(path).step == 6


def test_a_resume_sets_a_damaged_newest_checkpoint_aside_and_uses_the_one_before(tmp_path, capsys):
    from launch.resume import _newest_sound

    run_dir = str(tmp_path)
    older = _write(run_dir, 3)
    newest = _write(run_dir, 8)
    _flip_a_byte(os.path.join(newest, "replay", "chunks.tfrecord"))
    assert _newest_sound(run_dir).path == older
    out = capsys.readouterr().out
    assert out.startswith(f"[apex] {newest} is corrupt: replay/chunks.tfrecord does not match")
    assert out.rstrip().endswith(
        "set aside as checkpoints/ckpt-000000008.damaged; trying the checkpoint before it"
    )
    assert checkpointing.list_complete(run_dir) == [older]
    assert os.path.isdir(newest + ".damaged")
    # A new checkpoint at the same step later is kept apart from the damaged one.
    _write(run_dir, 8)
    assert os.path.isdir(newest + ".damaged") and checkpointing.latest_complete(run_dir) == newest
    _flip_a_byte(os.path.join(older, checkpointing.LEARNER_FILE))
    _flip_a_byte(os.path.join(newest, checkpointing.LEARNER_FILE))
    with pytest.raises(checkpointing.CheckpointError) as err:
        _newest_sound(run_dir)
    assert str(err.value) == (
        f"{run_dir} has no sound complete checkpoint left to resume from (set aside: "
        "ckpt-000000008.damaged.2, ckpt-000000003.damaged): start a new run_dir, or move "
        "one back to resume it"
    )


def test_only_the_newest_keep_checkpoints_remain(tmp_path):
    run_dir = str(tmp_path)
    for step in (1, 2, 3, 4):
        _write(run_dir, step, keep=2)
    names = [os.path.basename(p) for p in checkpointing.list_complete(run_dir)]
    assert names == ["ckpt-000000003", "ckpt-000000004"]


def test_incompatible_resume_names_the_differing_fields(tmp_path):
    from apex.config import ApexConfig, to_dict

    old, new = ApexConfig(), ApexConfig()
    new.learner.hidden_sizes = (64,)
    new.replay.capacity = 500
    new.stop.max_wall_seconds = 999  # allowed: not structural
    problems = checkpointing.compatibility_problems(
        {"config": to_dict(old)}, {"config": to_dict(new)}
    )
    assert problems == [
        "learner.hidden_sizes is (128, 128) in the checkpoint and (64,) now",
        "replay.capacity is 20000 in the checkpoint and 500 now",
    ]


def test_launch_refuses_a_run_dir_with_a_run_but_no_complete_checkpoint(tmp_path):
    from apex.config import ApexConfig
    from launch.resume import resume_checkpoint

    run_dir = str(tmp_path)
    assert resume_checkpoint(ApexConfig(), run_dir, require=False) is None  # empty: fresh run
    with pytest.raises(ConfigError, match="it holds no run"):
        resume_checkpoint(ApexConfig(), run_dir, require=True)
    open(os.path.join(run_dir, "config.json"), "w").close()
    os.makedirs(os.path.join(checkpointing.checkpoints_dir(run_dir), "ckpt-000000007.partial"))
    with pytest.raises(ConfigError, match=r"no complete checkpoint.*ckpt-000000007.partial"):
        resume_checkpoint(ApexConfig(), run_dir, require=False)


def test_learner_state_round_trips_exactly(reverb_server, small_config):
    from apex.envs import env_spec
    from apex.learner import Learner

    spec = env_spec(small_config.env)
    address = f"localhost:{reverb_server.port}"
    a = Learner(small_config, spec, address)
    rng = np.random.default_rng(0)
    for v in list(a._online.weights) + a._optimizer.m + a._optimizer.v:
        v.assign(rng.normal(size=v.shape).astype(np.float32))
    a._optimizer.iterations.assign(17)
    a.steps = 17
    state = a.get_state()
    b = Learner(small_config, spec, address)
    b.set_state(state)
    restored = b.get_state()
    assert sorted(restored) == sorted(state)
    for k in state:
        np.testing.assert_array_equal(restored[k], state[k], err_msg=k)
    assert b.steps == 17 and b.get_variables()[0] == 17
    bad = dict(state)
    bad["online/0"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="online/0: saved shape"):
        b.set_state(bad)


# --------------------------------------------------------------- integration

# A run that only a signal or a kill ends, with only the final checkpoint.
_LONG_RUN = ("--config.stop.max_wall_seconds=300", "--config.checkpoint.period_seconds=None")


def _table_priorities(path):
    from tools.replay_inspect.checkpoint_reader import CheckpointReader

    reader = CheckpointReader(path)
    try:
        table = reader.table("transitions")
        items = {i.key: i.priority for i in reader.iter_items("transitions", decode=False)}
    finally:
        reader.close()
    return table, items


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_resume_restores_learner_counters_replay_and_priorities(tmp_path, small_config):
    """test_mt: train a little, checkpoint, then start a second program from the
    checkpoint with nothing running that would change it, and compare."""
    from absl.testing import absltest

    from launch.nodes import ActorNode, CoordinatorNode, LearnerNode
    from launch.program import make_program
    from launch.testing import find_nodes, launch_stepped
    from tests.procs import threads_now, wait_no_threads_left, wait_until

    c = small_config
    c.actor.num_actors = 2
    c.stop.max_wall_seconds = 3600
    c.checkpoint.period_seconds = None
    before = threads_now()
    case = absltest.TestCase()
    case.setUp()  # test_mt registers its cleanup on this case
    try:
        run_dir = str(tmp_path / "run")
        os.makedirs(run_dir)
        program = make_program(c, run_dir=run_dir)
        learner = launch_stepped(program, case, LearnerNode)
        for _ in range(25):
            learner.step()
        (coord_node,) = find_nodes(program, CoordinatorNode)
        coordinator = coord_node.create_handle().dereference()
        wait_until(  # the coordinator has heard from the actors
            lambda: coordinator.get_counts()["env_steps"] > 0, 120, "actor steps at the coordinator"
        )
        path = learner.checkpoint()
        saved = checkpointing.load(path)
        saved_table, saved_priorities = _table_priorities(saved.replay_path)
        assert saved.step == 25 and saved.state["learner_steps"] == 25
        assert sum(saved.state["actor_steps"].values()) > 0
        assert saved_table.num_items == len(saved_priorities) > 0
        # The learner's updates are in the saved replay: some priorities left the
        # initial (actor) values. Sampled items' priorities were flushed before.
        keys, _, sent = learner.last_priority_update()
        found = 0
        for k, p in zip(keys.tolist(), sent.tolist()):
            if k in saved_priorities:
                found += 1
                np.testing.assert_allclose(saved_priorities[k], p, rtol=1e-5)
        assert found > 0  # some updated key was in the saved replay and compared

        resumed_dir = str(tmp_path / "resumed")
        os.makedirs(resumed_dir)
        program2 = make_program(c, run_dir=resumed_dir, resume=saved)
        for actor in find_nodes(program2, ActorNode):
            actor.disable_run()  # nothing inserts: the replay stays as restored
        learner2 = launch_stepped(program2, case, LearnerNode)
        assert learner2.get_steps() == 25
        version, weights, _ = learner2.get_variables()
        assert version == 25
        for i, w in enumerate(weights):
            np.testing.assert_array_equal(w, saved.learner[f"online/{i}"])
        (coord2_node,) = find_nodes(program2, CoordinatorNode)
        counts = coord2_node.create_handle().dereference().get_counts()
        assert counts["env_steps"] == sum(saved.state["actor_steps"].values())
        assert counts["learner_steps"] == 25
        # The restored server: same size, same rate-limiter counts, same priorities.
        path2 = learner2.checkpoint()
        table2, priorities2 = _table_priorities(checkpointing.load(path2).replay_path)
        assert table2.num_items == saved_table.num_items
        assert table2.rate_limiter == saved_table.rate_limiter  # insert/sample counts too
        assert priorities2 == saved_priorities
    finally:
        case.doCleanups()
    wait_no_threads_left(before)  # both programs closed every thread they started


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_sigterm_writes_a_final_checkpoint_leaves_no_process_and_resume_continues(tmp_path):
    from tests.procs import assert_start_lines, interrupt, kill_tree, start_learning, start_train

    run_dir = str(tmp_path / "run")
    proc, token = start_learning(run_dir, *_LONG_RUN, learner_steps=200)
    out = interrupt(proc, token, lambda: proc.send_signal(signal.SIGTERM))
    assert proc.returncode == 143, out[-3000:]  # 128 + SIGTERM: stopped by a signal
    assert "did not terminate in time" not in out, out[-3000:]  # inside the stop window
    assert "checkpoint (stop)" in out, out[-3000:]
    assert_start_lines(out, actors=2)  # no silent start, in a pipe
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    final = checkpointing.load(checkpointing.latest_complete(run_dir))
    assert summary["checkpoint"]["path"] == final.path
    assert final.step == summary["learner_steps"] > 200
    saved_env_steps = sum(final.state["actor_steps"].values())
    assert saved_env_steps > 0
    # The stopped run's replay is still inspectable: tools.replay reads its
    # checkpoint; stats and watch too: that checkpoint's numbers, once, not "is
    # it running?" (the three in one process: one TensorFlow import).
    from tests.procs import run_tool_lines

    looks = run_tool_lines(
        "tools.replay",
        [[verb, f"--run_dir={run_dir}", "--json"] for verb in ("priorities", "stats", "watch")],
    )
    for look in looks:
        verb = look["argv"][0]
        assert look["rc"] == 0, (verb, look["stderr"][-2000:])
        assert f"reading the run's newest checkpoint {final.path}" in look["stderr"], verb
        result = json.loads(look["stdout"])
        if verb == "priorities":
            assert result["checkpoint"] == os.path.join(final.path, "replay")
        else:
            tables = result["tables"] if verb == "watch" else result
            assert tables[0]["size"] > 0, (verb, tables)

    # Resume: the counters continue from the checkpoint. (With 2 SGD steps per
    # call: that traced step runs in a forked learner too.) It stops on env
    # steps, which only the actors make: a stop 100 SGD steps on came, on a
    # quiet machine, before any actor had inserted (the restored table lets
    # the learner start at once), and the start lines below never showed.
    # The rate limiter holds the actors to ~500 items ahead of the learner's
    # samples, so 4,000 more env steps also take 800+ more SGD steps (1,142 here).
    proc, token = start_train(
        run_dir,
        "--resume",
        f"--config.stop.max_actor_steps={saved_env_steps + 4000}",
        "--config.learner.steps_per_call=2",
    )
    try:
        out, _ = proc.communicate(timeout=150)
    finally:
        kill_tree(proc, token)
    assert proc.returncode == 0, out[-3000:]
    assert f"resuming from checkpoints/{os.path.basename(final.path)}" in out
    assert_start_lines(out, actors=2)  # a resumed run's start says the same
    # ... and its nodes are forked from the zygote too: checking the checkpoint
    # against the config (a network built) left the launcher without threads.
    assert "node start: each node a process of its own" not in out, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        resumed = json.load(f)
    assert resumed["resumed_from"] == final.path
    assert resumed["learner_steps"] >= final.step + 100
    assert resumed["env_steps"] > saved_env_steps
    with open(os.path.join(run_dir, "metrics", "learner.jsonl")) as f:
        steps = [json.loads(line)["learner/steps"] for line in f if line.strip()]
    later = steps[steps.index(max(s for s in steps if s <= final.step)) + 1 :]
    assert later and min(later) >= final.step  # the resumed learner counted on, not from 0


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_sigkill_of_an_actor_past_max_restarts_stops_the_program_in_order_with_a_checkpoint(
    tmp_path,
):
    # A killed actor process is started again (tests/test_actor_restart.py) up to
    # actor.max_restarts; past it (0 here) the program stops in order, naming it.
    from apex.heartbeat import read_heartbeats
    from tests.procs import interrupt, start_learning

    run_dir = str(tmp_path / "run")
    proc, token = start_learning(
        run_dir, "--config.stop.max_wall_seconds=300", "--config.actor.max_restarts=0"
    )
    pid = read_heartbeats(run_dir)["actor_1"]["pid"]
    out = interrupt(proc, token, lambda: os.kill(pid, signal.SIGKILL))
    assert proc.returncode == 1, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stop_reason"] == "node failed"
    assert summary["failure"] == (
        f"actor_1: its process (pid {pid}) was killed by SIGKILL (e.g. kill -9 or the "
        "out-of-memory killer): 1 process death(s), past actor.max_restarts=0"
    ), summary["failure"]
    assert "checkpoint (stop)" in out
    assert checkpointing.load(checkpointing.latest_complete(run_dir)).step > 100
    assert "did not terminate in time" not in out, out[-3000:]


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_sigkill_of_the_launcher_leaves_no_orphan_and_a_final_checkpoint(tmp_path):
    """Launchpad cannot clean up after a killed launcher: every node notices on its own."""
    from tests.procs import kill_tree, start_learning, wait_until_gone

    run_dir = str(tmp_path / "run")
    proc, token = start_learning(run_dir, *_LONG_RUN)
    try:
        proc.kill()
        proc.wait()
        wait_until_gone(token)  # every node noticed on its own and exited
    finally:
        kill_tree(proc, token)
    final = checkpointing.load(checkpointing.latest_complete(run_dir))
    assert final.step > 100 and sum(final.state["actor_steps"].values()) > 0


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_ctrl_c_to_the_process_group_writes_a_final_checkpoint_and_exits_130(tmp_path):
    """What a terminal's Ctrl-C does: SIGINT to the launcher and every node at once."""
    from tests.procs import interrupt, start_learning

    run_dir = str(tmp_path / "run")
    proc, token = start_learning(run_dir, *_LONG_RUN, new_session=True)
    out = interrupt(proc, token, lambda: os.killpg(proc.pid, signal.SIGINT))
    assert proc.returncode == 130, out[-3000:]  # 128 + SIGINT, as a shell expects
    assert "Traceback" not in out, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stop_reason"] == "stopped"
    final = checkpointing.load(checkpointing.latest_complete(run_dir))
    assert summary["checkpoint"]["path"] == final.path and final.step > 100
