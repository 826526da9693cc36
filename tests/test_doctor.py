"""The hang doctor names a deliberately blocked rate limiter, from real
heartbeats and a real Reverb server, through tools.status."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import reverb

from apex import heartbeat as hb
from apex.agents import TRANSITIONS_TABLE, make_tables
from apex.doctor import diagnose
from apex.envs import env_spec
from apex.replay.stats import table_stats
from apex.replay.writer import TransitionWriter
from tests.procs import wait_until
from tools.status import format_status, status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def transitions(n):
    return {
        "obs": np.zeros((n, 4), np.float32),
        "action": np.zeros(n, np.int32),
        "reward": np.ones(n, np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "next_obs": np.zeros((n, 4), np.float32),
        "slot": np.zeros(n, np.int32),
        "version": np.zeros(n, np.int64),
    }


def blocking_server(small_config):
    c = small_config
    c.replay.samples_per_insert, c.replay.min_size, c.replay.error_buffer = 1.0, 10, 64.0
    server = reverb.Server(make_tables(c, env_spec(c.env)))
    return server, reverb.Client(f"localhost:{server.port}")


@pytest.mark.slow
def test_actor_blocked_on_insert_is_named_with_the_rate_limiter_numbers(small_config, tmp_path):
    run_dir = str(tmp_path)
    server, client = blocking_server(small_config)
    with open(os.path.join(run_dir, "replay_address"), "w") as f:
        f.write(f"localhost:{server.port}\n")
    beat = hb.Heartbeat(run_dir, "actor_0", period=0.2, counters=lambda: {"env_steps": 1})
    writer = TransitionWriter(client, TRANSITIONS_TABLE, 0, np.array([0.4]))
    done = threading.Event()

    def act():
        beat.enter(hb.INSERTING)
        writer.write(transitions(300), np.ones(300))  # > min_size + error buffer: blocks
        beat.enter(hb.ACTING)
        done.set()

    threading.Thread(target=act, daemon=True).start()
    try:
        # The doctor names the hold once the actor has been inserting for stall_seconds.
        s = wait_until(
            lambda: _with_findings(status(run_dir, stall_seconds=1.0)),
            60,
            "tools.status to report the held insert",
        )
        assert not done.is_set(), "the insert should be held by the rate limiter"
        (finding,) = s["findings"]
        assert finding["reason"] == "actor_blocked_on_insert" and finding["node"] == "actor_0"
        assert "the rate limiter holds inserts" in finding["message"]
        assert "can_insert=False" in finding["message"] and "samples 0" in finding["message"]
        text = format_status(s)
        assert "actor_blocked_on_insert [actor_0" in text and "inserting" in text
        # The CLI prints the same, from another process.
        out = subprocess.run(
            [sys.executable, "-m", "tools.status", run_dir, "--stall_seconds=1"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "actor_blocked_on_insert" in out.stdout
        # Sampling releases the insert; the finding clears.
        drain = threading.Event()

        def sample_until_drained():
            while not drain.is_set():
                list(client.sample(TRANSITIONS_TABLE, num_samples=10, emit_timesteps=False))

        sampler = threading.Thread(target=sample_until_drained, daemon=True)
        sampler.start()
        assert done.wait(60)
        wait_until(
            lambda: status(run_dir, stall_seconds=1.0)["findings"] == [],
            60,
            "the finding to clear once the actor is acting again",
        )
        assert writer.close(timeout=30)  # the last chunk goes out while sampling goes on
        drain.set()
        # The sampler may be held by the rate limiter in its last call: inserts
        # release it (a sample has no timeout), so the test leaves no thread behind.
        with TransitionWriter(client, TRANSITIONS_TABLE, 0, np.array([0.4])) as more:
            wait_until(
                lambda: more.write(transitions(10), np.ones(10)) or not sampler.is_alive(),
                60,
                "the sampling thread to end",
            )
    finally:
        beat.close()
        server.stop()


def _with_findings(s: dict) -> dict | None:
    return s if s["findings"] else None


def test_learner_waiting_for_samples_names_the_min_size(small_config, tmp_path):
    from apex.learner import Learner

    run_dir = str(tmp_path)
    c = small_config
    c.replay.min_size = 1000
    server = reverb.Server(make_tables(c, env_spec(c.env)))
    address = f"localhost:{server.port}"
    beat = hb.Heartbeat(run_dir, "learner", period=0.2)
    learner = Learner(c, env_spec(c.env), address, heartbeat=beat)
    stop = threading.Event()
    learner._should_stop = stop.is_set  # the step gives up at the next sampling timeout
    stepping = threading.Thread(target=lambda: _step_quietly(learner), daemon=True)
    stepping.start()
    client = reverb.Client(address)
    try:
        findings = wait_until(
            lambda: diagnose(hb.read_heartbeats(run_dir), table_stats(client)[0], 1.0),
            60,
            "the doctor to name the learner's wait",
        )
        (finding,) = findings
        assert finding.reason == "learner_waiting_for_samples"
        assert "replay holds 0 items, below min_size 1,000" in finding.message
    finally:
        stop.set()
        stepping.join(timeout=60)
        assert not stepping.is_alive(), "the learner's step did not give up after the stop"
        learner.close()
        beat.close()
        server.stop()


def _step_quietly(learner):
    try:
        learner.step()
    except Exception:  # noqa: BLE001 - stopped on purpose
        pass


def test_a_silent_node_is_named_and_a_stopped_node_is_not():
    now = 1000.0
    beats = {
        "actor_1": {"pid": 1, "time": now - 100, "state": hb.ACTING, "state_since": now - 200},
        "evaluator": {"pid": 2, "time": now - 100, "state": hb.STOPPED, "state_since": now - 100},
        "learner": {"pid": 3, "time": now - 0.5, "state": hb.IDLE, "state_since": now - 0.5},
    }
    (f,) = diagnose(beats, None, stall_seconds=30, now=now)
    assert f.reason == "node_silent" and f.node == "actor_1" and "100 s" in f.message


def test_stack_dump_on_sigusr1_goes_to_the_run_dir(tmp_path):
    # The process prints the dump's path, signals itself, then waits for the dump.
    code = (
        "import os, signal, sys; from apex.heartbeat import register_stack_dump; "
        f"p = register_stack_dump({str(tmp_path)!r}, 'node'); print(p, flush=True); "
        "os.kill(os.getpid(), signal.SIGUSR1); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        path = proc.stdout.readline().strip()
        assert path.startswith(str(tmp_path)) and os.path.basename(path).startswith("node-")
        wait_until(
            lambda: os.path.exists(path) and "most recent call first" in open(path).read(),
            60,
            f"a stack dump in {path}",
        )
    finally:
        proc.kill()
        proc.communicate()


def test_coordinator_logs_a_finding_once_per_minute(small_config, tmp_path):
    import io

    from apex.coordination import Coordinator

    run_dir = str(tmp_path)
    small_config.logging.stall_seconds = 5.0
    out = io.StringIO()
    coord = Coordinator(small_config, run_dir, time.time(), out=out)
    beat = hb.Heartbeat(None, "actor_0", period=0)  # sends nothing by itself
    beat.enter(hb.ACTING)
    data = beat.beat()
    data["time"] -= 60  # a heartbeat a minute old: the actor is silent
    coord.heartbeat(data)  # as the actor's beat RPC delivers it
    now = time.time()
    (f,) = coord.check_health(now)
    coord.check_health(now + 1)  # the same finding is not repeated within 60 s
    assert f.reason == "node_silent" and f.node == "actor_0"
    assert out.getvalue().count("[apex doctor] node_silent [actor_0") == 1
    log = open(os.path.join(run_dir, "doctor.log")).read()
    assert log.count("node_silent [actor_0") == 1
    coord.check_health(now + 61)
    assert out.getvalue().count("[apex doctor] node_silent") == 2
