"""Every failure names its real cause: a node that dies of an exception is
reported as that exception (its type and message) in summary.json's
`failure`, whichever process it shared; a process found dead reads as the
exception it recorded, not as a kill. And the evaluation rows: each carries
the env and learner steps of its parameters, a row is written only for an
evaluation the coordinator took, and evaluation episodes are capped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

from apex import heartbeat as hb
from apex.coordination import Coordinator, FailureKind, StopReason, StopVerdict
from apex.metrics import MetricsWriter, read_jsonl
from apex.supervision import (
    NodeMonitor,
    dead_nodes,
    death_message,
    exception_text,
    recorded_failure,
)
from tests.fakes import FakeVariableSource
from tests.procs import ROOT, kill_tree, start_train, wait_until, wait_until_gone

KILLED = "exited without stopping (killed, e.g. SIGKILL or out of memory)"


def _die_after_recording(run_dir: str, *nodes: str) -> int:
    """Runs a process that records a ValueError for each of `nodes` (as a node
    of it would before dying) and exits; returns its (now dead) pid."""
    code = (
        "import sys; from apex.supervision import record_failure\n"
        "for node in sys.argv[2:]:\n"
        "    try:\n"
        "        raise ValueError(f'{node} broke: shapes (3,) and (4,) differ')\n"
        "    except ValueError as err:\n"
        "        record_failure(sys.argv[1], node, err)\n"
    )
    subprocess.run([sys.executable, "-c", code, run_dir, *nodes], cwd=ROOT, check=True)
    with open(os.path.join(run_dir, "failures", f"{nodes[0]}.json")) as f:
        return int(json.load(f)["pid"])


def _beat(node, pid, state=hb.IDLE, t=1000.0):
    return {"node": node, "host": hb.HOST, "pid": pid, "time": t, "state": state}


# ------------------------------------------------------------ the record path
def test_a_dead_process_with_a_failure_record_reads_as_its_exception(tmp_path):
    run_dir = str(tmp_path)
    pid = _die_after_recording(run_dir, "coordinator")
    assert death_message("coordinator", pid, run_dir) == (
        f"coordinator (pid {pid}) died of ValueError: coordinator broke: shapes (3,) and (4,) differ"
    )
    with open(os.path.join(run_dir, "failures", "coordinator.json")) as f:
        record = json.load(f)
    assert record["type"] == "ValueError" and record["host"] == hb.HOST
    assert any("ValueError" in line for line in record["traceback"])
    # Another pid (a later process of that node) has no record: the kill wording stays.
    assert death_message("coordinator", pid + 1_000_000, run_dir).endswith(KILLED)
    assert death_message("coordinator", pid, "").endswith(KILLED)  # no run directory
    assert recorded_failure(run_dir) == death_message("coordinator", pid, run_dir)
    assert recorded_failure(run_dir, since=time.time() + 60) is None


def test_a_process_that_died_of_another_nodes_exception_names_that_node(tmp_path):
    # The evaluator shares the coordinator's process.
    run_dir = str(tmp_path)
    pid = _die_after_recording(run_dir, "evaluator")
    assert death_message("coordinator", pid, run_dir) == (
        f"coordinator (pid {pid}) died of ValueError: evaluator broke: shapes (3,) and (4,) "
        "differ (raised by evaluator, in the same process)"
    )


def test_the_coordinator_names_a_dead_nodes_recorded_exception(tmp_path, small_config):
    run_dir = str(tmp_path)
    pid = _die_after_recording(run_dir, "learner")
    c = Coordinator(small_config, run_dir, start_time=time.time())
    c.heartbeat(_beat("learner", pid))
    failure = c.check_nodes()
    assert (failure.node, failure.kind, failure.pid) == ("learner", FailureKind.DIED, pid)
    assert failure.cause == "ValueError: learner broke: shapes (3,) and (4,) differ"
    assert c.check_stop() == StopVerdict(StopReason.NODE_FAILED, failure)
    assert c.summary()["failure"] == (  # the text summary.json shows
        f"learner (pid {pid}) died of ValueError: learner broke: shapes (3,) and (4,) differ"
    )


def test_the_launcher_names_a_coordinator_that_died_in_its_constructor(tmp_path):
    # No beat was ever sent: the record alone says the coordinator is dead, and why.
    run_dir = str(tmp_path)
    pid = _die_after_recording(run_dir, "coordinator")
    assert dead_nodes(run_dir) == [("coordinator", pid)]
    deaths: list[str] = []
    monitor = NodeMonitor(run_dir, deaths.append, stopping=lambda: False, period=0.05).start()
    wait_until(lambda: deaths, 60, "the monitor to report the coordinator's death")
    assert deaths == [monitor.failure]
    verdict = monitor.verdict
    assert (verdict.node, verdict.kind, verdict.pid, verdict.then) == (
        "coordinator",
        FailureKind.DIED,
        pid,
        (),
    )
    assert monitor.failure == (
        f"coordinator (pid {pid}) died of ValueError: coordinator broke: shapes (3,) and (4,) "
        "differ"
    )


def test_a_stopped_beat_with_a_live_pid_is_not_a_death(tmp_path):
    run_dir = str(tmp_path)
    store = hb.HeartbeatStore(run_dir)
    store.record(_beat("coordinator", os.getpid(), state=hb.STOPPED))
    assert dead_nodes(run_dir) == []


def test_the_launcher_writes_a_summary_naming_a_recorded_failure_when_none_exists(tmp_path):
    from launch.summary import finalize_summary

    run_dir = str(tmp_path)
    since = time.time() - 1  # the launcher's start
    assert finalize_summary(run_dir, "stopped", since=since) is None  # nothing happened
    pid = _die_after_recording(run_dir, "coordinator")
    summary = finalize_summary(run_dir, "stopped", since=since)
    assert summary["stop_reason"] == "node failed"
    assert summary["failure"] == (
        f"coordinator (pid {pid}) died of ValueError: coordinator broke: shapes (3,) and (4,) "
        "differ"
    )
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["failure"] == summary["failure"]


def test_the_coordinators_failure_stands_over_a_death_the_launcher_saw_later(tmp_path):
    """A shard host cut off past its limit: the coordinator's verdict (at 60 s)
    came before Ray's word that the shard's worker died (at 75 s), and
    summary.json named Ray's. The first failure now stands; a death the
    launcher saw first still wins."""
    from launch.summary import finalize_summary

    run_dir = str(tmp_path)
    since = time.time() - 1  # the launcher's start
    start = time.time() - 100  # the run's clock
    coordinator = {
        "stop_reason": "node failed",
        "failure": "replay_1 (host 10.77.0.12) silent for 60 s",
        "failure_at_wall_seconds": 60.0,
        "clock_start_time": start,
    }
    ray_death = "replay_1's Ray worker or node (2149f485) died: ActorDiedError"

    def finalize(seen_at: float | None) -> dict:
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(coordinator, f)
        at = None if seen_at is None else start + seen_at
        return finalize_summary(run_dir, "stopped", ray_death, since=since, failure_time=at)

    later = finalize(75.0)
    assert (later["failure"], later["failure_at_wall_seconds"]) == (coordinator["failure"], 60.0)
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["failure"] == coordinator["failure"]
    earlier = finalize(30.0)  # the launcher saw its death first: the likely cause
    assert (earlier["failure"], earlier["failure_at_wall_seconds"]) == (ray_death, 30.0)
    assert finalize(None)["failure"] == ray_death  # its time unknown: the launcher's, as before


def test_a_failure_reported_as_the_program_is_stopped_from_outside_still_counts(small_config):
    c = Coordinator(small_config, "", start_time=time.time())
    c.report_failure("learner", "ValueError: boom")
    c.run(lambda: True)  # e.g. local_mt's launcher stopped everything on the same error
    assert c.verdict.reason is StopReason.NODE_FAILED
    failure = c.verdict.failure
    assert (failure.node, failure.kind, failure.cause) == (
        "learner",
        FailureKind.REPORTED,
        "ValueError: boom",
    )
    assert c.summary()["stop_reason"] == "node failed"
    assert c.summary()["failure"] == "learner: ValueError: boom"


def test_exception_text_is_one_bounded_line():
    err = ValueError("line one\n   line two " + "x" * 5000)
    text = exception_text(err)
    assert text.startswith("ValueError: line one line two x") and "\n" not in text
    assert len(text) < 1100 and text.endswith("...")
    assert exception_text(KeyboardInterrupt()) == "KeyboardInterrupt"


# ------------------------------------------------- evaluations and their rows
def _weights(config):
    from apex.agents.dqn.networks import QNetwork

    return QNetwork(4, 2, config.learner.hidden_sizes, seed=0).get_weights()


def test_an_evaluation_row_carries_its_parameters_steps_and_the_summary_agrees(
    tmp_path, small_config
):
    from apex.evaluation import Evaluator

    run_dir = str(tmp_path)
    small_config.evaluation.episodes = 1
    c = Coordinator(small_config, run_dir, start_time=time.time())
    c.report_actor(0, 1234, 3, [])
    metrics = MetricsWriter(run_dir, "evaluator", "evaluator/evaluations", tensorboard=False)
    evaluator = Evaluator(
        small_config, FakeVariableSource(_weights(small_config), version=7), c, metrics
    )
    row = evaluator.evaluate_once()
    assert row["evaluator/env_steps"] == 1234 and row["evaluator/learner_steps"] == 7
    c.report_actor(0, 5000, 9, [])  # the run went on: the evaluation keeps its own steps
    s = c.summary()
    assert s["best_eval_at_env_steps"] == 1234 and s["best_eval_version"] == 7

    c.stop(StopVerdict(StopReason.MAX_WALL_SECONDS))  # the stop is decided: summary.json is final
    assert evaluator.evaluate_once() is None  # an evaluation finished after it: refused
    metrics.close()
    rows = read_jsonl(os.path.join(run_dir, "metrics", "evaluator.jsonl"))
    assert len(rows) == 1 and evaluator.evaluations == 1
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["eval_return_mean"] == rows[-1]["evaluator/return_mean"]
    assert summary["stop_reason"] == "max_wall_seconds"


def test_a_refused_evaluation_offers_no_best(small_config):
    from apex.evaluation import Evaluator

    class Sink:
        def __init__(self):
            self.offers = []

        def best(self):
            return None

        def offer_best(self, *args):
            self.offers.append(args)
            return True

    small_config.evaluation.episodes = 1
    c = Coordinator(small_config, "", start_time=time.time())
    sink = Sink()
    evaluator = Evaluator(
        small_config, FakeVariableSource(_weights(small_config), version=1), c, best_sink=sink
    )
    c.stop(StopVerdict(StopReason.MAX_WALL_SECONDS))
    assert evaluator.evaluate_once() is None and sink.offers == []


def test_without_a_target_return_nothing_is_ever_solved(small_config):
    small_config.evaluation.target_return = None
    c = Coordinator(small_config, "", start_time=time.time())
    assert c.report_eval(1e9, 3, [1e9], env_steps=10) is True
    s = c.summary()
    assert s["solved_at_env_steps"] is None and s["target_return"] is None
    assert c.check_stop() is None
    small_config.evaluation.target_return = 100.0
    assert c.report_eval(150.0, 4, [150.0], env_steps=20)
    assert c.summary()["solved_at_env_steps"] == 20


class _Endless(gym.Env):
    """Never terminates, never truncates, and has no time limit."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, False, False, {}


@pytest.fixture
def endless_config(small_config):
    if "ApexTest/Endless-v0" not in gym.registry:
        gym.register("ApexTest/Endless-v0", entry_point=_Endless, max_episode_steps=None)
    small_config.env.id = "ApexTest/Endless-v0"
    small_config.evaluation.episodes = 2
    return small_config


def test_an_evaluation_episode_without_a_time_limit_is_cut_at_the_cap(endless_config, monkeypatch):
    from apex import evaluation
    from apex.agents import make_policy
    from apex.envs import env_spec, make_env

    env = make_env(endless_config.env)
    assert env.spec.max_episode_steps is None  # the env's own limit: none
    env.close()
    policy = make_policy(endless_config, env_spec(endless_config.env))
    policy.set_weights(_weights(endless_config))

    endless_config.evaluation.max_episode_steps = 37
    returns = evaluation.evaluate(endless_config, policy, 2, 0.0, seed=0)
    assert returns.tolist() == [37.0, 37.0]  # cut, and the return so far counted

    endless_config.evaluation.max_episode_steps = None  # the default cap for such an env
    monkeypatch.setattr(evaluation, "DEFAULT_EVAL_EPISODE_CAP", 23)
    assert evaluation.evaluate(endless_config, policy, 2, 0.0, seed=0).tolist() == [23.0, 23.0]


def test_an_evaluation_episode_ends_at_the_envs_own_time_limit(small_config):
    import tests.crashing_envs  # noqa: F401 - registers its envs (50-step episodes)
    from apex import evaluation
    from apex.agents import make_policy
    from apex.envs import env_spec

    small_config.env.id = "ApexTest/EvalCrash-v0"
    small_config.env.max_episode_steps = None
    policy = make_policy(small_config, env_spec(small_config.env))
    policy.set_weights(_weights(small_config))
    assert evaluation.evaluate(small_config, policy, 1, 0.0, seed=0).tolist() == [50.0]


def test_an_error_of_the_evaluation_itself_is_raised_at_once(small_config):
    import tests.crashing_envs  # noqa: F401
    from apex.evaluation import Evaluator

    small_config.env.id = "ApexTest/EvalCrash-v0"
    source = FakeVariableSource(_weights(small_config), version=1)
    evaluator = Evaluator(small_config, source)
    with pytest.raises(ValueError, match="evaluation seed 10000000"):
        evaluator.run(lambda: False)
    assert source.calls == 1 and evaluator.failures == 0


def test_a_learner_that_cannot_be_reached_is_retried(small_config):
    from apex.evaluation import Evaluator

    class Gone:
        calls = 0

        def get_variables(self):
            self.calls += 1
            raise ConnectionError("learner unavailable")

    source = Gone()
    evaluator = Evaluator(small_config, source)
    evaluator.run(lambda: source.calls >= 3)  # no exception: retried until the stop
    assert source.calls == 3 and evaluator.evaluations == 0


# ------------------------------------------------------ a real program (local_mp)
@pytest.mark.integration
@pytest.mark.timeout(400)
def test_an_evaluator_that_dies_of_a_value_error_stops_the_program_naming_it(tmp_path, monkeypatch):
    """The evaluator shares the coordinator's process: its ValueError is the run's
    failure, the coordinator stops the program in order, nothing is left."""
    run_dir = str(tmp_path / "run")
    # Every node process imports tests.crashing_envs (env.imports): from the repository.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    )
    proc, token = start_train(
        run_dir,
        "--config.env.id=ApexTest/EvalCrashLater-v0",
        "--config.env.imports=('tests.crashing_envs',)",
        "--config.evaluation.period_seconds=0.5",
        "--config.stop.max_wall_seconds=300",
        # The failure as the program stops on it; not started again
        # (tests/test_program_restarts.py: the restarts).
        "--config.checkpoint.max_program_restarts=0",
    )
    try:
        out, _ = proc.communicate(timeout=360)
    finally:
        kill_tree(proc, token)
    assert proc.returncode == 1, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    print("failure:", s["failure"])
    assert s["stop_reason"] == "node failed", s
    assert s["failure"] == (
        "evaluator: ValueError: evaluation seed 10002000 refused by ApexTest/EvalCrash (a test env)"
    ), s
    assert f"[apex] a node failed: {s['failure']}" in out
    # Two evaluations went through before the crash; the summary's is the last row's.
    rows = read_jsonl(os.path.join(run_dir, "metrics", "evaluator.jsonl"))
    assert len(rows) == 2, rows
    assert s["eval_return_mean"] == rows[-1]["evaluator/return_mean"]
    assert all(r["evaluator/env_steps"] is not None for r in rows)
    with open(os.path.join(run_dir, "failures", "evaluator.json")) as f:
        assert json.load(f)["type"] == "ValueError"
    wait_until_gone(token)  # no process of the program is left
