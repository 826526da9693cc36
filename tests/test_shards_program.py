"""Replay shards in the program (replay.num_shards > 1): the refusals and the
launch line per shard, run checkpoints that hold every shard or are not
complete, the coordinator's totals and per-shard figures, the doctor naming
the shard, a resume that restores every shard, and a real local_mp run whose
killed shard stops the program naming it. (Two shards learning CartPole, with
central inference: tests/test_inference_program.py.)"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import reverb

from apex import checkpointing, read_program_restarts
from apex import heartbeat as hb
from apex.config import ApexConfig, to_dict
from apex.errors import CheckpointError, ConfigError
from apex.planning import rate_limit_plan
from apex.validation import validate
from tests.procs import wait_until


def _sharded(num_shards: int = 2) -> ApexConfig:
    c = ApexConfig()
    c.replay.num_shards = num_shards
    return c


# ------------------------------------------------------------ planner, refusals


def test_launch_line_states_each_shards_numbers_and_one_server_is_unchanged():
    one = rate_limit_plan(ApexConfig())
    assert one.startswith("learner starts at 1,000 transitions") and "shard" not in one
    two = rate_limit_plan(_sharded(2))
    assert two.startswith(
        "2 shards (actor i writes to shard i % 2), each: learner samples a shard from 500 "
        "transitions (~500 env steps)"
    ), two
    assert "(error buffer 1000)" in two  # the auto buffer of a shard's own settings


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({"replay.num_shards": 3}, "replay.num_shards", "at most actor.num_actors (2)"),
        (
            {"replay.capacity": 100, "replay.min_size": 50, "learner.batch_size": 64},
            "learner.batch_size",
            "a shard's capacity, replay.capacity // replay.num_shards = 100 // 2 = 50",
        ),
        (
            {"replay.capacity": 1001, "replay.min_size": 1001},
            "replay.min_size",
            "ceil(replay.min_size / 2) = 501",
        ),
        ({"replay.error_buffer": 100.0}, "replay.error_buffer", "None or >= 128"),
        (
            # 3 actors on 2 shards: shard 1 has one actor, a third of 1,200 env steps.
            {"actor.num_actors": 3, "stop.max_actor_steps": 1200},
            "replay.min_size",
            "the 400 items that the 1 of 3 actors writing to a shard",
        ),
        ({"replay.port": 65535}, "replay.port", "None or a port in [1, 65534]"),
    ],
)
def test_settings_a_shard_could_never_pass_are_refused_per_shard(changes, field, words):
    c = _sharded(2)
    for path, value in changes.items():
        section, name = path.split(".")
        setattr(getattr(c, section), name, value)
    one = copy.deepcopy(c)
    one.replay.num_shards = 1
    if field != "replay.num_shards":
        validate(one)  # valid with one server: the refusal is the shard's
    with pytest.raises(ConfigError) as err:
        validate(c)
    assert err.value.field == field, str(err.value)
    assert words in str(err.value), str(err.value)


# ------------------------------------------------------------------ checkpoints


def _shard_dirs(run_dir: str, n: int) -> list[str]:
    paths = []
    for s in range(n):
        path = os.path.join(run_dir, f"reverb-{s}")
        os.makedirs(path)
        open(os.path.join(path, "DONE"), "w").close()
        paths.append(path)
    return paths


def _write(run_dir: str, num_shards: int, step: int = 7) -> str:
    c = ApexConfig()
    c.replay.num_shards = num_shards
    manifest = {"format": checkpointing.FORMAT, "config": to_dict(c)}
    replay = _shard_dirs(run_dir, num_shards) if num_shards > 1 else _shard_dirs(run_dir, 1)[0]
    return checkpointing.write(
        run_dir, step, {"steps": np.asarray(step)}, {"learner_steps": step}, manifest, replay, 2
    )


def test_a_sharded_checkpoint_holds_every_shard_and_one_missing_a_shard_is_refused(tmp_path):
    path = _write(str(tmp_path), 2)
    assert sorted(n for n in os.listdir(path) if n.startswith("replay")) == [
        "replay_0",
        "replay_1",
    ]
    ck = checkpointing.load(path)
    assert ck.num_shards == 2
    assert ck.shard_paths == [os.path.join(path, "replay_0"), os.path.join(path, "replay_1")]
    with pytest.raises(CheckpointError, match="shard_path"):
        ck.replay_path  # noqa: B018 - one path would silently be one shard of two
    shutil.rmtree(os.path.join(path, "replay_1"))
    with pytest.raises(CheckpointError, match=r"misses replay shard replay_1 of 2"):
        checkpointing.load(path)


def test_one_server_keeps_the_replay_directory(tmp_path):
    path = _write(str(tmp_path), 1)
    ck = checkpointing.load(path)
    assert ck.num_shards == 1 and ck.replay_path == ck.shard_path(0)
    assert os.path.isfile(os.path.join(path, "replay", "DONE"))
    assert not any(n.startswith("replay_") for n in os.listdir(path))
    # A checkpoint written before replay.num_shards existed reads as one shard.
    old = {"config": {"replay": {"capacity": 20_000}}}
    assert checkpointing.checkpoint_num_shards(old) == 1


def test_a_resume_with_another_number_of_shards_is_refused_naming_it():
    old, new = _sharded(2), ApexConfig()
    problems = checkpointing.compatibility_problems(
        {"config": to_dict(old)}, {"config": to_dict(new)}
    )
    assert problems == ["replay.num_shards is 2 in the checkpoint and 1 now"]
    before = to_dict(ApexConfig())
    del before["replay"]["num_shards"]  # written before the field existed: 1
    assert checkpointing.compatibility_problems({"config": before}, {"config": to_dict(new)}) == []


def test_replay_roots_one_per_shard(tmp_path):
    run_dir = str(tmp_path)
    root = os.path.join(run_dir, checkpointing.REPLAY_ROOT)
    assert checkpointing.replay_root(run_dir) == root
    assert checkpointing.replay_root(run_dir, 0, 1) == root
    assert checkpointing.replay_root(run_dir, 1, 2) == os.path.join(root, "replay_1")


# ------------------------------------------------------- coordinator and doctor


def _shard_servers(num_shards: int = 2):
    from apex.agents import make_tables
    from apex.envs import env_spec
    from apex.replay.shards import shard_config

    c = _sharded(num_shards)
    c.replay.min_size = 2 * num_shards
    spec = env_spec(c.env)
    servers = [reverb.Server(make_tables(shard_config(c), spec)) for _ in range(num_shards)]
    return c, servers, [reverb.Client(f"localhost:{s.port}") for s in servers]


def _insert(client, n: int) -> None:
    from apex.agents import TRANSITIONS_TABLE
    from apex.replay.writer import TransitionWriter
    from tests.test_doctor import transitions

    with TransitionWriter(client, TRANSITIONS_TABLE, 0, np.array([0.4])) as writer:
        writer.write(transitions(n), np.ones(n))


def test_coordinator_writes_totals_per_shard_figures_and_every_shards_address(tmp_path):
    from apex.coordination import REPLAY_ADDRESSES_FILE, Coordinator
    from apex.metrics import MetricsWriter

    run_dir = str(tmp_path)
    c, servers, clients = _shard_servers(2)
    try:
        _insert(clients[0], 3)
        _insert(clients[1], 5)
        metrics = MetricsWriter(run_dir, "coordinator", step_key="coordinator/env_steps")
        co = Coordinator(c, run_dir, time.time(), replay_client=clients, metrics=metrics)
        with open(os.path.join(run_dir, "replay_address")) as f:
            assert f.read() == clients[0].server_address + "\n"
        with open(os.path.join(run_dir, REPLAY_ADDRESSES_FILE)) as f:
            assert f.read() == (
                f"replay_0 {clients[0].server_address}\nreplay_1 {clients[1].server_address}\n"
            )
        co._poll_replay()
        co._write_metrics({})
        metrics.close()
        s = co.summary()
        assert s["replay_size"] == 8 and s["replay_inserts"] == 8 and s["replay_samples"] == 0
        assert s["replay_shards"] == {
            "replay_0": {"size": 3, "inserts": 3, "samples": 0, "samples_per_insert": 0.0},
            "replay_1": {"size": 5, "inserts": 5, "samples": 0, "samples_per_insert": 0.0},
        }
        with open(os.path.join(run_dir, "metrics", "coordinator.jsonl")) as f:
            row = json.loads(f.readline())
        assert row["replay/size"] == 8 and row["replay/shard_1/size"] == 5
        assert row["replay/shard_0/inserts"] == 3 and row["replay/shard_0/samples"] == 0
        line = co.progress_line({})
        assert "replay 8/20,000 (3+5) |" in line, line
        # A shard that stops answering keeps its last figures in the totals.
        servers[1].stop()
        _insert(clients[0], 1)
        co._poll_replay()
        assert co.summary()["replay_size"] == 9
    finally:
        for server in servers:
            server.stop()


def test_one_server_writes_no_shard_figures(tmp_path):
    from apex.coordination import REPLAY_ADDRESSES_FILE, Coordinator

    c, servers, clients = _shard_servers(1)
    try:
        co = Coordinator(c, str(tmp_path), time.time(), replay_client=clients[0])
        co._poll_replay()
        assert "replay_shards" not in co.summary()
        assert not os.path.exists(os.path.join(str(tmp_path), REPLAY_ADDRESSES_FILE))
        assert "replay 0/20,000 |" in co.progress_line({})
    finally:
        servers[0].stop()


def _beat(node: str, state: str, since: float, pid: int | None = None) -> dict:
    now = time.time()
    return {
        "node": node,
        "host": hb.HOST,
        "pid": pid or os.getpid(),
        "time": now,
        "state": state,
        "state_since": since,
        "period_seconds": 1.0,
    }


def test_doctor_names_the_shard_that_holds_an_actor_and_each_shard_for_the_learner():
    from apex.doctor import diagnose
    from apex.replay.stats import table_stats

    c, servers, clients = _shard_servers(2)
    try:
        _insert(clients[0], 10)  # shard 0 past its min_size (2); shard 1 empty
        shards = {"replay_0": table_stats(clients[0])[0], "replay_1": table_stats(clients[1])[0]}
        shards["replay_1"]["rate_limiter"]["can_insert"] = False  # as a held insert reads
        long_ago = time.time() - 100
        beats = {
            "actor_1": _beat("actor_1", hb.INSERTING, long_ago),
            "learner": _beat("learner", hb.TRAINING, long_ago),
        }
        found = {f.node: f for f in diagnose(beats, None, 30.0, shard_tables=shards)}
        actor = found["actor_1"].message
        assert actor.startswith("replay_1: the rate limiter holds inserts"), actor
        learner = found["learner"].message
        assert "replay_0: the rate limiter would let a sample through" in learner, learner
        assert "replay_1: the shard holds 0 items, below min_size 2" in learner, learner
    finally:
        for server in servers:
            server.stop()


def test_a_dead_shard_is_named_before_the_errors_of_its_clients(tmp_path):
    from apex.coordination import Coordinator, FailureKind, StopReason

    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that is gone
    c = _sharded(2)
    co = Coordinator(c, "", time.time(), replay_client=[object(), object()])  # never polled
    co.heartbeat(_beat("replay_1", hb.IDLE, time.time(), pid=dead.pid))
    co.report_failure("learner", "RuntimeError: Socket closed")
    verdict = co.check_stop()
    assert verdict.reason is StopReason.NODE_FAILED
    assert (verdict.failure.node, verdict.failure.kind) == ("replay_1", FailureKind.KILLED)
    failure = co.summary()["failure"]
    assert failure.startswith(f"replay_1 (pid {dead.pid}) exited without stopping"), failure


# ---------------------------------------------------------------- integration


def _shard_priorities(path: str):
    from tools.replay_inspect.checkpoint_reader import CheckpointReader

    reader = CheckpointReader(path)
    try:
        table = reader.table("transitions")
        items = {i.key: i.priority for i in reader.iter_items("transitions", decode=False)}
    finally:
        reader.close()
    return table, items


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_resume_restores_every_shard_and_another_shard_count_is_refused(tmp_path, small_config):
    """test_mt: train a little on 2 shards, checkpoint, start a second program
    from it (shards in processes of their own this time) with nothing inserting,
    and compare each shard: size, rate-limiter counts, priorities."""
    from absl.testing import absltest

    from launch.nodes import ActorNode, CoordinatorNode, LearnerNode
    from launch.program import make_program
    from launch.resume import resume_checkpoint
    from launch.testing import find_nodes, launch_stepped
    from tests.procs import threads_now, wait_no_threads_left

    c = small_config
    c.actor.num_actors = 2
    c.replay.num_shards = 2
    c.replay.capacity = 100_000  # nothing sampled is evicted before the checkpoint
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
        (coord_node,) = find_nodes(program, CoordinatorNode)
        coordinator = coord_node.create_handle().dereference()
        wait_until(  # both shards hold items (actor i writes to shard i % 2)
            lambda: all(
                (v["size"] or 0) > 0 for v in coordinator.summary()["replay_shards"].values()
            ),
            120,
            "items in both shards",
        )
        for _ in range(25):
            learner.step()
        wait_until(
            lambda: coordinator.get_counts()["env_steps"] > 0, 120, "actor steps at the coordinator"
        )
        path = learner.checkpoint()
        saved = checkpointing.load(path)
        assert saved.num_shards == 2 and saved.step == 25
        shards = [_shard_priorities(p) for p in saved.shard_paths]
        for table, priorities in shards:
            assert table.num_items == len(priorities) > 0
            assert table.max_size == c.replay.capacity // 2
        # The learner's updates reached the shard each key came from.
        keys, _, sent = learner.last_priority_update()
        found = 0
        for k, p in zip(keys.tolist(), sent.tolist()):
            owners = [prios for _, prios in shards if k in prios]
            assert len(owners) <= 1
            if owners:
                found += 1
                np.testing.assert_allclose(owners[0][k], p, rtol=1e-5)
        assert found > 0

        # (c) another number of shards is refused before anything launches.
        one = copy.deepcopy(c)
        one.replay.num_shards = 1
        with pytest.raises(CheckpointError, match=r"replay\.num_shards is 2 in the checkpoint"):
            resume_checkpoint(one, run_dir, require=True)

        resumed_dir = str(tmp_path / "resumed")
        os.makedirs(resumed_dir)
        c2 = copy.deepcopy(c)
        c2.replay.colocate_with_learner = False  # the other graph: every shard a node
        program2 = make_program(c2, run_dir=resumed_dir, resume=saved)
        for actor in find_nodes(program2, ActorNode):
            actor.disable_run()  # nothing inserts: the shards stay as restored
        learner2 = launch_stepped(program2, case, LearnerNode)
        assert learner2.get_steps() == 25
        path2 = learner2.checkpoint()
        restored = [_shard_priorities(p) for p in checkpointing.load(path2).shard_paths]
        for s, ((table, priorities), (table2, priorities2)) in enumerate(zip(shards, restored)):
            assert table2.num_items == table.num_items, s
            assert table2.rate_limiter == table.rate_limiter, s  # insert/sample counts too
            assert priorities2 == priorities, s
    finally:
        case.doCleanups()
    wait_no_threads_left(before)


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_sigkill_of_a_shard_restarts_the_program_from_a_checkpoint_with_every_shard(tmp_path):
    """A killed replay shard stops the program in order, naming it; the launcher
    starts the program again from the newest complete checkpoint (which holds
    both shards), the learner steps on, and a SIGTERM leaves no process."""
    from tests.procs import interrupt, start_learning, wait_for_state

    run_dir = str(tmp_path / "run")
    proc, token = start_learning(
        run_dir,
        "--config.replay.num_shards=2",
        "--config.stop.max_wall_seconds=400",
        "--config.checkpoint.period_seconds=2",
    )
    # Both shards fill (state.json: per-shard figures) before one is killed.
    wait_for_state(
        run_dir, lambda st: all((v["size"] or 0) > 0 for v in st["replay_shards"].values())
    )
    wait_until(lambda: checkpointing.latest_complete(run_dir), 300, "a complete checkpoint")
    pid = hb.read_heartbeats(run_dir)["replay_1"]["pid"]
    os.kill(pid, signal.SIGKILL)
    resumed = wait_until(
        lambda: next((r for r in read_program_restarts(run_dir) if "resumed_from" in r), None),
        300,
        "the program's restart",
    )
    step = int(resumed["resumed_from"].split("-")[1])
    wait_for_state(
        run_dir, lambda st: st.get("program_restarts") == 1 and st["learner_steps"] > step
    )
    out = interrupt(proc, token, proc.terminate)
    assert proc.returncode == 143, out[-3000:]
    assert resumed["node"] == "replay_1", resumed
    assert resumed["failure"].startswith(f"replay_1 (pid {pid}) exited without stopping"), resumed
    assert "did not terminate in time" not in out, out[-3000:]
    # A checkpoint without shard 1 is never complete.
    for path in checkpointing.list_complete(run_dir):
        assert checkpointing.load(path).num_shards == 2
