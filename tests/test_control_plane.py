"""The control plane: beats, liveness, 'finished' and remote metrics travel as
calls to the coordinator; nothing is read back from files to decide."""

import copy
import json
import os
import re
import subprocess
import sys
import time

import pytest

from apex import heartbeat as hb
from apex.coordination import Coordinator, FailureKind, StopReason, StopVerdict
from apex.metrics import RemoteMetrics, read_jsonl


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _beat(node, state=hb.ACTING, host=hb.HOST, pid=None, t=1000.0):
    return {"node": node, "host": host, "pid": pid or os.getpid(), "time": t, "state": state}


def test_a_node_whose_process_is_gone_without_stopping_is_dead_and_not_finished_waiting():
    store = hb.HeartbeatStore()
    store.record(_beat("actor_0", pid=_dead_pid()))
    store.record(_beat("actor_1"))
    assert [b["node"] for b in store.dead()] == ["actor_0"]
    assert store.finished("actor_0") is True  # gone: nobody waits for it
    assert store.finished("actor_1") is False
    assert store.finished("learner") is None
    assert not store.all_finished("actor_")


def test_a_stopped_node_is_finished_and_not_dead():
    store = hb.HeartbeatStore()
    store.record(_beat("learner", state=hb.STOPPED, pid=_dead_pid()))
    assert store.finished("learner") is True and store.dead() == []


def test_a_late_periodic_beat_does_not_overwrite_the_final_stopped_one(tmp_path):
    # Beats are concurrent RPCs: the last periodic one may arrive after 'stopped'.
    store = hb.HeartbeatStore(str(tmp_path))
    store.record(_beat("evaluator", state=hb.STOPPED, t=1001.0))
    store.record(_beat("evaluator", state=hb.IDLE, t=1000.0))
    assert store.beats()["evaluator"]["state"] == hb.STOPPED
    assert hb.read_heartbeats(str(tmp_path))["evaluator"]["state"] == hb.STOPPED
    store.record(_beat("evaluator", state=hb.ACTING, t=1002.0))  # a newer beat does count
    assert store.beats()["evaluator"]["state"] == hb.ACTING


def test_the_coordinator_waits_for_every_final_beat_before_it_closes(small_config, monkeypatch):
    from apex.coordination import stop

    c = Coordinator(small_config, "", start_time=time.time())
    c.heartbeat(_beat("evaluator", state=hb.IDLE))
    polls = []

    def poll(seconds):  # the evaluator's final beat arrives while the coordinator waits
        polls.append(seconds)
        c.heartbeat(_beat("evaluator", state=hb.STOPPED, t=1001.0))

    monkeypatch.setattr(stop.time, "sleep", poll)
    c._await_final_beats(timeout=60.0)
    assert len(polls) == 1 and c.heartbeats.beats()["evaluator"]["state"] == hb.STOPPED


def test_a_node_on_another_host_is_judged_by_silence_not_by_a_local_pid(monkeypatch):
    store = hb.HeartbeatStore(silent_after=30.0)
    store.record(_beat("actor_3", host="other-host", pid=_dead_pid()))
    received = store.beats()["actor_3"]["received"]
    assert store.dead(now=received + 29.0) == []  # its pid means nothing here
    assert [b["node"] for b in store.dead(now=received + 31.0)] == ["actor_3"]


def test_the_coordinator_stops_the_program_naming_a_node_that_died(small_config):
    c = Coordinator(small_config, "", start_time=time.time())
    pid = _dead_pid()
    c.heartbeat(_beat("actor_1", pid=pid))
    c.heartbeat(_beat("learner"))
    failure = c.check_nodes()
    assert (failure.node, failure.kind, failure.pid, failure.then) == (
        "actor_1",
        FailureKind.KILLED,
        pid,
        (),
    )
    assert c.check_stop() == StopVerdict(StopReason.NODE_FAILED, failure)
    assert c.summary()["failure"] == (  # the text summary.json shows
        f"actor_1 (pid {pid}) exited without stopping (killed, e.g. SIGKILL or out of memory)"
    )


def test_a_silent_remote_node_is_named_with_its_host(small_config):
    c = Coordinator(small_config, "", start_time=time.time(), silent_after=5.0)
    c.heartbeat(_beat("actor_0", host="far"))
    received = c.heartbeats.beats()["actor_0"]["received"]
    failure = c.check_nodes(now=received + 6.0)
    assert (failure.node, failure.kind, failure.host, failure.silent_after) == (
        "actor_0",
        FailureKind.SILENT,
        "far",
        5.0,
    )
    text = c.summary()["failure"]
    assert text.startswith("actor_0 on far (pid ") and "no heartbeat for 5 s" in text


def test_beats_reach_the_coordinator_and_its_files_and_the_last_one_says_stopped(
    tmp_path, small_config
):
    run_dir = str(tmp_path)
    c = Coordinator(small_config, run_dir, start_time=time.time())
    beat = hb.Heartbeat(c.heartbeat, "actor_0", period=3600, counters=lambda: {"env_steps": 7})
    assert c.node_finished("actor_0") is False
    beat.close()
    assert c.node_finished("actor_0") is True
    with open(os.path.join(run_dir, "heartbeats", "actor_0.json")) as f:
        written = json.load(f)
    assert written["state"] == hb.STOPPED and written["counters"] == {"env_steps": 7}
    assert written["host"] == hb.HOST


def test_rows_of_a_remote_node_are_written_by_the_coordinator_with_their_own_time(
    tmp_path, small_config
):
    run_dir = str(tmp_path)
    c = Coordinator(small_config, run_dir, start_time=time.time())
    metrics = RemoteMetrics(c, "actor_2", "actor/env_steps")
    metrics.write({"actor/env_steps": 10, "actor/episodes": 1})
    metrics.write({"actor/env_steps": 20, "actor/episodes": 2})
    c.close()
    rows = read_jsonl(os.path.join(run_dir, "metrics", "actor_2.jsonl"))
    assert [r["actor/env_steps"] for r in rows] == [10, 20]
    assert rows[0]["time"] <= rows[1]["time"]
    with open(os.path.join(run_dir, "metrics", "actor_2.csv")) as f:
        lines = f.read().splitlines()
    assert lines[0] == "time,step,key,value" and lines[-1].split(",")[1] == "20"


def test_the_learner_gets_the_run_counters_in_reply_to_its_report(small_config):
    c = Coordinator(small_config, "", start_time=time.time())
    c.report_actor(0, 1234, 5, [])
    counters = c.report_learner(17, None, {})
    assert counters["learner_steps"] == 17 and counters["actor_steps"] == {"0": 1234}


def test_the_progress_line_never_shows_fewer_env_steps_than_replay_items(small_config):
    # Actors report once a second; the replay is polled fresh. Seen: "env_steps
    # 16,512 | replay 20,000/20,000" on the first progress line.
    c = Coordinator(small_config, "", start_time=time.time())
    c.report_actor(0, 16_512, 10, [])
    c.replay.info = {"size": 20_000, "capacity": 20_000, "inserts": 20_000}
    line = c.progress_line({})
    assert "env_steps 20,000 " in line and "replay 20,000/20,000" in line
    c.report_actor(0, 25_000, 12, [])  # a fresher report wins again
    assert "env_steps 25,000 " in c.progress_line({})


@pytest.mark.parametrize(
    "field,value,reason",
    [
        ("max_actor_steps", 100, StopReason.MAX_ACTOR_STEPS),
        ("max_learner_steps", 10, StopReason.MAX_LEARNER_STEPS),
        ("max_wall_seconds", 50.0, StopReason.MAX_WALL_SECONDS),
    ],
)
def test_each_stop_criterion_is_decided_when_reached_and_not_before(
    small_config, field, value, reason
):
    config = copy.deepcopy(small_config)
    config.stop.max_actor_steps = config.stop.max_learner_steps = None
    config.stop.max_wall_seconds = None
    setattr(config.stop, field, value)
    started = time.time() - (10.0 if field != "max_wall_seconds" else 0.0)
    c = Coordinator(config, "", start_time=started)
    c.report_actor(0, 99, 0, [], started)
    c.report_learner(9, started, {})
    assert c.check_stop() is None
    c.report_actor(0, 100, 0, [], started)
    c.report_learner(10, started, {})
    if field == "max_wall_seconds":
        assert c.check_stop() is None  # 100 env steps and 10 learner steps stop nothing here
        c = Coordinator(config, "", start_time=time.time() - 50.0)
    assert c.check_stop() == StopVerdict(reason)
    assert str(c.check_stop()) == field  # summary.json's stop_reason


def test_a_stop_between_two_state_writes_leaves_state_json_at_the_final_counts(
    tmp_path, small_config
):
    # Seen: a run stopped 1 s after its first learner step; state.json stayed at
    # learner step 1 while summary.json said 300 (state is written every few seconds).
    run_dir = str(tmp_path)
    c = Coordinator(small_config, run_dir, start_time=time.time())
    c.final_checkpoint_timeout = 0
    c.report_actor(0, 500, 3, [])
    c.report_learner(300, time.time(), {})
    c.stop(StopVerdict(StopReason.MAX_LEARNER_STEPS))
    with open(os.path.join(run_dir, "state.json")) as f:
        state = json.load(f)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert state["learner_steps"] == summary["learner_steps"] == 300
    assert state["stop_reason"] == "max_learner_steps"
    assert state["counters"]["learner_steps"] == 300
    c.close()


class _SlowReplay:
    """A replay client whose server answers from its `up`-th server_info on."""

    server_address = "localhost:4321"

    def __init__(self, up: int = 3):
        self.calls, self.up = 0, up

    def server_info(self, timeout=None):
        from types import SimpleNamespace as NS

        self.calls += 1
        if self.calls < self.up:
            raise TimeoutError("not serving yet")
        rl = NS(
            insert_stats=NS(completed=0),
            sample_stats=NS(completed=0),
            samples_per_insert=4.0,
            min_size_to_sample=64,
            min_diff=-1e7,
            max_diff=1e7,
        )
        info = NS(
            rate_limiter_info=rl,
            current_size=0,
            max_size=5_000,
            num_unique_samples=0,
            signature=None,
        )
        return {"transitions": info}


def test_the_start_lines_say_each_start_event_once_in_order_before_progress(small_config):
    """No silent start (issue 27): the coordinator says it is up and what it waits
    for, then once each: the replay serving, every actor inserting (an early report
    waits for the replay's line), the learner's first SGD step."""
    import io
    import threading

    from tests.procs import wait_until

    config = copy.deepcopy(small_config)
    config.actor.num_actors = 2
    config.logging.progress_period_seconds = 0.2
    config.logging.metrics_period_seconds = 0.1
    config.stop.max_wall_seconds = None
    launched = time.time() - 1.0
    out = io.StringIO()
    c = Coordinator(config, "", start_time=launched, replay_client=_SlowReplay(), out=out)
    c.report_actor(1, 300, 0, [], launched + 0.5)  # before the replay answered a poll
    stop = threading.Event()
    loop = threading.Thread(target=c.run, args=(stop.is_set,), daemon=True)
    loop.start()
    try:
        wait_until(lambda: "actor_1 inserting" in out.getvalue(), 30, "actor_1's line")
        c.report_actor(0, 100, 0, [], launched + 0.5)
        c.report_actor(0, 900, 0, [], launched + 0.5)  # a second report: no second line
        c.report_learner(5, launched + 2.5, {})
        wait_until(lambda: "learner: first SGD" in out.getvalue(), 30, "the learner's line")
        wait_until(lambda: out.getvalue().count("] env_steps ") >= 2, 30, "progress lines")
    finally:
        stop.set()
        loop.join(30)
    lines = out.getvalue().splitlines()
    starts = [line for line in lines if "] env_steps " not in line]
    assert [line.split("] ", 1)[1].split(" ")[0] for line in starts] == [
        "coordinator",
        "replay",
        "actor_1",
        "actor_0",
        "learner:",
    ], lines
    assert starts[0].endswith("waiting for the replay, 2 actors and the learner's first SGD step")
    assert (
        "replay serving at localhost:4321: table transitions (0/5,000 items; sampled from 64)"
        in (starts[1])
    )
    assert "learner: first SGD step, 2.5 s after launch (replay at 64+ transitions)" in starts[4]
    assert lines.index(starts[0]) == 0  # before the first progress line
    for line in lines:
        assert re.match(r"\[apex +[0-9.]+s\] ", line), line


def test_the_summary_keeps_the_disk_full_episodes_of_the_run_s_earlier_lives(
    small_config, tmp_path
):
    """A program started again (or resumed) in the same run directory lists the
    episodes its earlier lives wrote into summary.json before its own."""
    earlier = {"what": "checkpoints", "since": 10.0, "until": 40.0, "dropped": 2, "error": "x"}
    (tmp_path / "summary.json").write_text(json.dumps({"disk_full": [earlier]}))
    c = Coordinator(small_config, str(tmp_path), start_time=time.time())
    c.checkpoint_abandoned(7, "OSError: [Errno 28] No space left on device", False)
    from apex.full_disk import FULL_DISK  # this process's (other tests may have filled it)

    episodes = c.summary()["disk_full"]
    assert episodes[0] == earlier and episodes[1:-1] == FULL_DISK.figures()
    assert episodes[-1]["what"] == "checkpoints" and "until" not in episodes[-1]
    assert "No space left on device" in episodes[-1]["error"]
    fresh = Coordinator(small_config, str(tmp_path / "new"), time.time())
    assert fresh.summary()["disk_full"] == FULL_DISK.figures()  # a new run has no earlier life
