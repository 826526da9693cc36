"""Actor processes that die are started again (issue 29, launch.node_restarts):
the policy as a value, the coordinator's grace for a dead actor, and a real
local_mp program whose actor_0 is SIGKILLed and comes back in its slot with
its counters. (Past actor.max_restarts the program stops in order naming it:
tests/test_checkpoint.py::test_sigkill_of_an_actor_past_max_restarts_stops_the_program_in_order.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from apex import heartbeat as hb
from apex.coordination import Coordinator, FailureKind
from launch.node_env import ACTOR_RESTARTS_ENV, GIVE_UP_ENV, PROCESS_RESTART_ENV, RESTARTED_ENV
from launch.node_restarts import ProcessRestarts, RestartPolicy, died_unasked, restart_grace_seconds


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _restarts(max_restarts=2, backoff=0.5, title="actor/3") -> ProcessRestarts:
    env = {ACTOR_RESTARTS_ENV: RestartPolicy(max_restarts, backoff).encode()}
    return ProcessRestarts.for_node(title, 3, env)


def test_only_a_death_by_a_signal_nobody_sent_to_stop_it_restarts_an_actor():
    assert died_unasked(-signal.SIGKILL) and died_unasked(-signal.SIGSEGV)
    assert not died_unasked(-signal.SIGTERM) and not died_unasked(-signal.SIGINT)
    assert not died_unasked(0) and not died_unasked(1)  # a stop, or a failure it reported
    r = _restarts()
    assert r.after_exit(11, 0, 5.0) is None and r.after_exit(11, 1, 5.0) is None
    assert r.restarts == 0
    assert _restarts(title="learner/0") is None  # only actors come back
    assert ProcessRestarts.for_node("actor/0", 0, {}) is None  # no launcher restarts them


def test_a_killed_actor_restarts_in_its_slot_with_backoff_then_gives_up_past_max_restarts():
    r = _restarts(max_restarts=2, backoff=0.5)
    first = r.after_exit(101, -signal.SIGKILL, 5.0)
    assert first.wait == 0.5 and not first.give_up
    assert first.env == {RESTARTED_ENV: "1", PROCESS_RESTART_ENV: "1"}
    assert "actor_3's process (pid 101) was killed by SIGKILL" in first.message
    assert "restart 1/2 in 0.5 s" in first.message
    second = r.after_exit(102, -signal.SIGSEGV, 5.0)
    assert second.wait == 1.0 and second.env[PROCESS_RESTART_ENV] == "2"  # the back-off doubled
    last = r.after_exit(103, -signal.SIGKILL, 5.0)
    assert last.give_up and last.env[RESTARTED_ENV] == "1"
    assert (
        "pid 103" in last.env[GIVE_UP_ENV] and "past actor.max_restarts=2" in last.env[GIVE_UP_ENV]
    )
    assert r.after_exit(104, 0, 1.0) is None  # the give-up start ends it


def test_nothing_restarts_once_the_launcher_is_gone():
    env = {ACTOR_RESTARTS_ENV: "5:0", "APEX_LAUNCHER_PID": str(_dead_pid())}
    r = ProcessRestarts.for_node("actor/0", 0, env)
    assert r.after_exit(7, -signal.SIGKILL, 1.0) is None


def _beat(node, pid, restarts=0, t=1000.0):
    counters = {"restarts": restarts} if restarts else {}
    return {"node": node, "host": hb.HOST, "pid": pid, "time": t, "state": hb.ACTING,
            "counters": counters}  # fmt: skip


def test_the_coordinator_gives_a_dead_actor_its_grace_but_not_a_dead_learner(small_config):
    c = Coordinator(small_config, "", start_time=time.time(), restart_grace=30.0)
    dead = _dead_pid()
    c.heartbeat(_beat("actor_0", dead))
    now = time.time()
    assert c.check_nodes(now) is None and c.actor_restarts.restarting == ["actor_0"]
    assert "actor_0 restarting" in c.progress_line({})
    c.heartbeat(_beat("actor_0", os.getpid(), restarts=1, t=1001.0))  # it came back
    assert c.check_nodes(now + 1) is None and c.actor_restarts.restarting == []
    assert c.summary()["actor_restarts"] == 1 and "actor restarts 1" in c.progress_line({})
    c.heartbeat(_beat("actor_1", dead))  # one that never comes back fails past its grace
    assert c.check_nodes(now + 2) is None
    failure = c.check_nodes(now + 40)
    assert (failure.node, failure.kind) == ("actor_1", FailureKind.KILLED)
    c2 = Coordinator(small_config, "", start_time=time.time(), restart_grace=30.0)
    c2.heartbeat(_beat("learner", dead))
    assert c2.check_nodes().node == "learner"  # only actors come back


def test_the_grace_is_set_only_where_a_launcher_restarts_actors():
    assert restart_grace_seconds({}) == 0.0
    assert restart_grace_seconds({ACTOR_RESTARTS_ENV: "20:1"}) > 30.0


def _actor_rows(run_dir: str, i: int) -> list[dict]:
    with open(os.path.join(run_dir, "metrics", f"actor_{i}.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_sigkilled_actor_process_comes_back_in_its_slot_and_the_program_goes_on(tmp_path):
    """SIGKILL of actor_0's process: its wrapper forks it again; it carries its
    counters on, inserts again in its own slots, tools.status and summary.json
    count 1 restart; the items before and after it hold right n-step values;
    the program then stops in order with nothing left."""
    from apex import checkpointing
    from apex.replay.tables import unpack_item
    from tests.procs import interrupt, start_learning, wait_until
    from tests.replay_checks import assert_cartpole_nstep
    from tools.replay_inspect import checkpoint_reader as cr
    from tools.status import format_status, status

    run_dir = str(tmp_path / "run")
    proc, token = start_learning(
        run_dir,
        "--config.stop.max_wall_seconds=300",
        "--config.actor.max_restarts=3",
        new_session=True,  # Ctrl-C reaches its process group, as a terminal's does
    )
    before = hb.read_heartbeats(run_dir)["actor_0"]
    killed_at = time.time()
    os.kill(int(before["pid"]), signal.SIGKILL)

    def back() -> dict | None:
        beat = hb.read_heartbeats(run_dir).get("actor_0", {})
        counters = beat.get("counters", {})
        new = beat.get("pid") != before["pid"] and counters.get("restarts") == 1
        return beat if new and counters.get("items_inserted", 0) > 0 else None

    try:
        beat = wait_until(back, 120, "actor_0 to come back and insert again")
        assert beat["counters"]["env_steps"] > before["counters"]["env_steps"]  # carried on
        assert beat["counters"]["items_inserted"] > before["counters"]["items_inserted"]
        text = format_status(status(run_dir, stall_seconds=60.0))
        line = next(ln for ln in text.splitlines() if ln.startswith("actor_0 "))
        assert "restarts 1" in line and str(beat["pid"]) in line, text
    finally:
        out = interrupt(proc, token, lambda: os.killpg(proc.pid, signal.SIGINT))
    assert proc.returncode == 130, out[-3000:]  # a Ctrl-C stop, not a node failure
    assert f"actor_0's process (pid {before['pid']}) was killed by SIGKILL" in out
    assert "restart 1/3" in out, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    assert s["failure"] is None and s["actor_restarts"] == 1, s
    rows = _actor_rows(run_dir, 0)
    steps = [r["actor/env_steps"] for r in rows]
    assert steps == sorted(steps), steps[-10:]  # its counters never went back
    assert max(r.get("actor/restarts", 0) for r in rows) == 1
    # The stop's checkpoint: actor 0's items from before and after its restart,
    # in its own slots, with right n-step values.
    path = checkpointing.latest_complete(run_dir)
    times = {"before": 0, "after": 0}
    for item in cr.iter_items(checkpointing.load(path).shard_paths[0], "transitions"):
        data = unpack_item(item.data)
        assert_cartpole_nstep(data, 0.99, 3)
        if int(data["actor"]) == 0:
            assert 0 <= int(data["slot"]) < 16
            times["before" if float(data["insert_time"]) < killed_at else "after"] += 1
    assert times["after"] > 0, times


def test_a_process_started_again_counts_on_from_its_predecessors_restarts(small_config):
    """The soak's finding: an actor that restarted in-process (1) and then lost
    its process reported actor/restarts 1 again; it now counts on (2)."""
    from launch.node_env import PROCESS_RESTART_ENV, RESTARTED_ENV
    from launch.nodes.actor import restarts_at_start

    c = Coordinator(small_config, "", start_time=time.time(), restart_grace=30.0)
    c.heartbeat(_beat("actor_0", os.getpid(), restarts=1))  # one in-process restart
    assert (c.actor_restart_count(0), c.actor_restart_count(1)) == (1, 0)
    again = {RESTARTED_ENV: "1", PROCESS_RESTART_ENV: "1"}  # its first process death
    assert restarts_at_start(again, c, 0) == 2
    assert restarts_at_start(again, c, 1) == 1  # no beat counted more: the process count
    assert restarts_at_start({}, c, 0) == 0  # a first start counts from 0

    class Gone:
        def actor_restart_count(self, actor_id):
            raise ConnectionError("the coordinator is gone")

    assert restarts_at_start(again, Gone(), 0) == 1


def test_a_process_started_again_carries_on_from_its_last_beat_when_that_is_further(
    small_config,
):
    """CI found a restarted actor's env steps going back (1,872 in its last beat,
    1,712 in its last report): it now carries on from the larger."""
    c = Coordinator(small_config, "", start_time=time.time(), restart_grace=30.0)
    c.report_actor(0, 1712, 30, [])
    beat = _beat("actor_0", os.getpid())
    beat["counters"] = {"env_steps": 1872}
    c.heartbeat(beat)
    assert c.actor_counts(0) == (1872, 30)
    c.report_actor(0, 2000, 31, [])
    assert c.actor_counts(0) == (2000, 31)  # a report further on wins


def test_a_process_started_again_counts_its_items_on_from_its_last_beat(small_config):
    """A restarted actor's items_inserted went back to 0 (noted last stop): the
    coordinator now hands on the count its predecessor's last beat showed."""
    c = Coordinator(small_config, "", start_time=time.time(), restart_grace=30.0)
    assert c.actor_items_inserted(0) == 0  # no beat yet
    beat = _beat("actor_0", os.getpid())
    beat["counters"] = {"env_steps": 1872, "items_inserted": 1850}
    c.heartbeat(beat)
    assert (c.actor_items_inserted(0), c.actor_items_inserted(1)) == (1850, 0)
