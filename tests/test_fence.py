"""Actors lost to a partition and the fence (issue 31; apex.fence):
an actor inserts only while its lease from the coordinator holds, a copy whose
lease ran out ends itself before the coordinator counts it lost, and the
coordinator refuses a lost copy's beats and says how long its last lease may
hold. The cluster test is tests/test_netns_fence.py."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from apex import ApexConfig
from apex.errors import ConfigError
from apex.fence import (
    FENCED_EXIT_CODE,
    LOST_MARGIN_SECONDS,
    Lease,
    Leases,
    lost_after,
)
from apex.heartbeat import HOST, Heartbeat
from tests.procs import ROOT, wait_until

C = os.path.join(ROOT, "configs", "apex_cartpole.py")


def test_a_lease_holds_from_the_send_of_its_last_answered_beat_and_runs_out_without_answers():
    answering = threading.Event()
    answering.set()
    unanswered: list[concurrent.futures.Future] = []

    def sink(beat):
        f: concurrent.futures.Future = concurrent.futures.Future()
        if answering.is_set():
            f.set_result({"lease_seconds": 0.5})
        else:
            unanswered.append(f)  # a partition: the call never returns
        return f

    lease = Lease("actor_0", 0.5)
    assert not lease.held() and not lease.expired()  # no insert before the first grant
    beat = Heartbeat(sink, "actor_0", period=0.05, on_reply=lease.on_reply)
    try:
        assert lease.wait_held(lambda: False)
        answering.clear()
        wait_until(lease.expired, 10, "the lease to run out without answers")
        assert not lease.held() and unanswered
        assert "no word from the coordinator" in lease.fence_line()
        # An answer to a beat sent before the lease ran out extends it no further
        # than that beat's send + lease.
        t = [100.0]
        late = Lease("actor_0", 10.0, clock=lambda: t[0])
        late.on_reply(sent=90.0, reply={"lease_seconds": 10.0})
        assert late.expired()
    finally:
        beat.close()


def test_a_copy_the_coordinator_fenced_stops_at_its_next_answer():
    lease = Lease("actor_0", 60.0)
    lease.on_reply(sent=0.0, reply={"lease_seconds": 60.0})
    lease.on_reply(sent=1.0, reply={"fenced": True})
    assert lease.expired() and not lease.held()
    lease.on_reply(sent=2.0, reply={"lease_seconds": 60.0})  # never renewed again
    assert not lease.held()
    assert "counted this copy lost and fenced it" in lease.fence_line()


_CHILD = textwrap.dedent(
    """
    import os, socket, sys, time
    from apex.fence import Lease
    from apex.heartbeat import Heartbeat

    port, answer_file = int(sys.argv[1]), sys.argv[2]
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setblocking(False)
    sent = 0
    try:
        while True:  # fill the kernel's buffers: the peer does not read
            sent += conn.send(b"x" * 65536)
    except BlockingIOError:
        pass
    print("sent", sent, flush=True)

    def sink(beat):
        if not os.path.exists(answer_file):
            raise ConnectionError("cut off")
        return {"lease_seconds": 1.0}

    lease = Lease("actor_0", 1.0)
    beat = Heartbeat(sink, "actor_0", period=0.05, on_reply=lease.on_reply)
    lease.watch()
    assert lease.wait_held(lambda: False)
    while True:  # the hot loop inserts while the watchdog watches the lease
        if lease.held():
            print("insert", time.monotonic(), lease._until, flush=True)
        time.sleep(0.01)
    """
)


def test_an_actor_cut_off_past_its_lease_ends_itself_before_it_counts_as_lost(tmp_path):
    """The real watchdog in a process: inserts stop before the lease's end plus
    the coordinator's margin, the process exits FENCED_EXIT_CODE with the fence
    line, and its TCP connections are reset (what the kernel held unsent is
    dropped, not delivered later)."""
    answer = tmp_path / "answer"
    answer.write_text("yes")
    server = socket.create_server(("127.0.0.1", 0))
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(server.getsockname()[1]), str(answer)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        conn, _ = server.accept()
        sent = int(proc.stdout.readline().split()[1])
        assert proc.stdout.readline().startswith("insert")
        answer.unlink()  # the partition: no beat is answered from now on
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    assert proc.returncode == FENCED_EXIT_CODE, err
    assert f"actor_0 (pid {proc.pid}): no word from the coordinator for" in err, err
    assert "this copy stops (fenced)" in err, err
    inserts = [line.split() for line in out.splitlines() if line.startswith("insert")]
    last_insert, until = float(inserts[-1][1]), float(inserts[-1][2])
    assert last_insert < until + LOST_MARGIN_SECONDS
    received = 0
    with pytest.raises(ConnectionResetError):
        while True:
            data = conn.recv(1 << 20)
            if not data:
                break  # a clean end: the kernel would have delivered everything
            received += len(data)
    conn.close()
    assert received < sent


def _coordinator(lease: float):
    from apex.coordination import Coordinator

    return Coordinator(ApexConfig(), "", 0.0, restart_grace=150.0, lease_seconds=lease)


def _beat(copy: str, t: float, host: str = "h2") -> dict:
    return {"node": "actor_0", "incarnation": copy, "host": host, "pid": 7, "time": t,
            "state": "acting", "period_seconds": 1.0}  # fmt: skip


def test_the_coordinator_counts_a_remote_actor_lost_only_after_its_lease_and_a_margin():
    coord = _coordinator(lease=10.0)
    assert coord.heartbeat(_beat("a", 1.0)) == {"lease_seconds": 10.0}
    received = coord.heartbeats.beats()["actor_0"]["received"]
    # The lease of that beat ends, on the actor's clock, before `received` + 10 s;
    # the coordinator waits the margin more.
    assert lost_after(10.0) == 10.0 + LOST_MARGIN_SECONDS > 10.0
    coord.check_nodes(now=received + lost_after(10.0) - 0.01)
    assert coord.lost_nodes() == [] and coord.failure is None
    coord.check_nodes(now=received + lost_after(10.0) + 0.01)
    assert coord.lost_nodes() == [["actor_0", "a"]] and coord.failure is None
    # The lost copy's beats are refused (and not recorded) from now on.
    assert coord.heartbeat(_beat("a", 2.0)) == {"fenced": True}
    assert coord.heartbeats.beats()["actor_0"]["time"] == 1.0
    # The launcher fences it and waits out its last lease before the new copy.
    wait = coord.fence_node("actor_0")
    assert 0.0 <= wait <= lost_after(10.0) and coord.lost_nodes() == []
    assert coord.heartbeat(_beat("b", 3.0, host="h3")) == {"lease_seconds": 10.0}
    network = coord.summary()["network"]
    assert (network["actors_lost"], network["actors_fenced"]) == (1, 1)
    assert "actors lost 1" in coord.progress_line({})


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_an_actor_on_the_coordinators_host_is_never_lost_its_death_is_a_restart():
    """Silent or dead, an actor on this host is watched by its process: silence
    is no loss, and a dead process is a death its launcher restarts in place
    (the restart grace), not a loss that would move it to another node."""
    coord = _coordinator(lease=10.0)
    beat = dict(_beat("a", 1.0, host=HOST), pid=os.getpid())
    coord.heartbeat(beat)
    coord.check_nodes(now=beat["time"] + 1000.0)
    assert coord.lost_nodes() == []
    coord.heartbeat(dict(_beat("b", 2.0, host=HOST), pid=_dead_pid()))
    coord.check_nodes()
    assert coord.lost_nodes() == [] and coord.failure is None
    assert coord.actor_restarts.restarting == ["actor_0"]


def test_without_leases_beats_are_not_answered_and_silence_is_judged_as_before():
    coord = _coordinator(lease=0.0)
    assert coord.heartbeat(_beat("a", 1.0)) is None
    received = coord.heartbeats.beats()["actor_0"]["received"]
    coord.check_nodes(now=received + 30.0)
    assert coord.lost_nodes() == [] and coord.heartbeats.silent_after == 60.0


def test_fencing_a_copy_returns_how_long_its_last_lease_may_hold():
    t = [100.0]
    leases = Leases(10.0, clock=lambda: t[0])
    assert leases.fence("actor_0") == 0.0  # never granted: nothing to wait for
    leases.grant("actor_0", "a")
    t[0] = 104.0
    assert leases.fence("actor_0") == pytest.approx(100.0 + lost_after(10.0) - 104.0)
    t[0] = 200.0
    assert leases.fence("actor_0") == 0.0 and leases.fenced == 1


def test_a_copy_known_to_have_ended_leaves_no_lease_to_wait_out():
    """On the coordinator's host a copy whose process is gone holds no lease (the
    simulated Ray cluster of tests/test_ray.py); elsewhere its lease is waited out."""
    coord = _coordinator(lease=10.0)
    coord.heartbeat(dict(_beat("a", 1.0, host=HOST), pid=_dead_pid()))
    assert coord.fence_node("actor_0") == 0.0
    coord.heartbeat(_beat("b", 2.0, host="h2"))
    assert coord.fence_node("actor_0") > 0.0


def test_a_replacement_goes_to_a_node_with_room_away_from_the_lost_one():
    from apex import ClusterNode, Demand
    from launch.ray_replace import pick_node

    res = (("apex_actor", 1.0),)
    head = ClusterNode("h1", "10.0.0.1", 4.0, is_head=True)
    a, b = (
        ClusterNode("a", "10.0.0.2", 2.0, resources=res),
        ClusterNode("b", "10.0.0.3", 2.0, resources=res),
    )
    d = Demand("actor", 0, 1.0, resource="apex_actor")
    assert pick_node([head, a, b], d, used={"a": 0.0, "b": 1.0}, avoid={"a"}) == "b"
    assert pick_node([head, a, b], d, used={"b": 2.0}, avoid={"a"}) is None  # Ray's choice
    anywhere = Demand("actor", 0, 1.0)
    assert pick_node([head, a, b], anywhere, {"b": 2.0}, avoid={"a"}, last={"h1"}) == "h1"


@pytest.mark.parametrize(
    "value,shown,valid",
    [
        pytest.param("0", "0.0", "None or a number > 0", id="actor_lost_after_zero"),
        pytest.param(
            "2",
            "2.0",
            "None or at least 4 heartbeat periods (logging.heartbeat_period_seconds=1)",
            id="actor_lost_after_below_four_beats",
        ),
    ],
)
def test_a_bad_actor_lost_time_is_refused_before_launch(value, shown, valid):
    from launch.train import load_config

    with pytest.raises(ConfigError) as err:
        load_config(C, [("cluster.actor_lost_after_seconds", value)])
    assert err.value.field == "cluster.actor_lost_after_seconds"
    assert str(err.value).startswith(f"cluster.actor_lost_after_seconds={shown} is invalid: ")
    assert valid in str(err.value)


def test_a_remote_shard_silent_past_its_lease_is_lost_not_failed_and_its_clients_follow(
    tmp_path, small_config
):
    """A replay shard on another host holds a lease as an actor does: silent past
    it (and the margin) it is counted lost with the items it held, not a failure;
    once the launcher says where its new copy listens, the learner's and its
    actors' beat replies say so, the replay figures carry its counts on, and
    RUN_DIR/replay_addresses names the new address."""
    import reverb

    from apex.agents import make_tables
    from apex.coordination import Coordinator
    from apex.envs import env_spec
    from apex.replay.shards import shard_config
    from tests.test_shards_sampling import write_items

    small_config.replay.num_shards = 2
    tables = shard_config(small_config)
    servers = [reverb.Server(make_tables(tables, env_spec(small_config.env))) for _ in range(3)]
    try:
        addresses = [f"localhost:{s.port}" for s in servers]
        write_items(addresses[1], [1.0] * 30, first_id=0)
        coord = Coordinator(
            small_config,
            str(tmp_path),
            0.0,
            replay_client=[reverb.Client(a) for a in addresses[:2]],
            restart_grace=150.0,
            lease_seconds=10.0,
        )
        coord.replay.poll()
        beat = {"node": "replay_1", "incarnation": "r1", "host": "h2", "pid": 7, "time": 1.0,
                "state": "idle", "period_seconds": 1.0}  # fmt: skip
        assert coord.heartbeat(beat) == {"lease_seconds": 10.0}
        received = coord.heartbeats.beats()["replay_1"]["received"]
        coord.check_nodes(now=received + lost_after(10.0) - 0.01)
        assert coord.lost_nodes() == [] and coord.failure is None
        coord.check_nodes(now=received + lost_after(10.0) + 0.01)
        assert coord.lost_nodes() == [["replay_1", "r1"]] and coord.failure is None
        assert "shards lost 1 (replay_1 being replaced)" in coord.progress_line({})
        assert coord.heartbeat(dict(beat, time=2.0)) == {"fenced": True}
        coord.fence_node("replay_1")  # the launcher: counted once
        coord.shard_moved("replay_1", addresses[2])
        learner = {"node": "learner", "incarnation": "l", "host": HOST, "pid": os.getpid(),
                   "time": 3.0, "state": "training", "period_seconds": 1.0}  # fmt: skip
        assert coord.heartbeat(learner) == {"shards": {"replay_1": addresses[2]}}
        actor_1 = dict(_beat("a", 3.0), node="actor_1")
        assert coord.heartbeat(actor_1) == {"lease_seconds": 10.0, "replay_address": addresses[2]}
        assert coord.heartbeat(_beat("b", 3.0)) == {"lease_seconds": 10.0}  # shard 0's actor
        new = dict(beat, incarnation="r2", host="h3", time=4.0)
        assert coord.heartbeat(new) == {"lease_seconds": 10.0}
        coord.replay.poll()
        figures = coord.shard_figures()["replay_1"]
        assert figures["size"] == 0 and figures["inserts"] == 30, figures  # counts carried on
        network = coord.summary()["network"]
        assert (network["shards_lost"], network["items_lost_with_shards"]) == (1, 30), network
        assert (network["shards_fenced"], network["actors_fenced"]) == (1, 0), network
        assert network["shards_moved"] == {"replay_1": addresses[2]}, network
        with open(tmp_path / "replay_addresses") as f:
            assert f.read().splitlines()[1] == f"replay_1 {addresses[2]}"
        coord.check_nodes()
        assert coord.failure is None and "replay_1 being replaced" not in coord.progress_line({})
    finally:
        for s in servers:
            s.stop()


def test_a_node_started_again_elsewhere_counts_on_from_its_old_copys_last_beat():
    """forget_node (the launcher starts the actor again elsewhere) drops the old
    copy's beat, not its counts: the new copy asks for them and counts on, so
    actor/items_inserted and the restarts never go back (a learner-host cut past
    the lease once restarted them from 0)."""
    coord = _coordinator(lease=10.0)
    coord.heartbeat(dict(_beat("a", 1.0), counters={"env_steps": 900, "items_inserted": 500,
                                                    "restarts": 1}))  # fmt: skip
    coord.forget_node("actor_0")
    assert "actor_0" not in coord.heartbeats.beats()
    assert coord.actor_items_inserted(0) == 500 and coord.actor_restart_count(0) == 1
    assert coord.actor_counts(0)[0] == 900  # its env steps too (no report came)
    coord.heartbeat(dict(_beat("b", 2.0), counters={"items_inserted": 520, "restarts": 2}))
    assert coord.actor_items_inserted(0) == 520 and coord.actor_restart_count(0) == 2
