"""Hosts with their own addresses (issue 31): the Ray launcher across network
namespaces (tests/netns.py), the launcher's choice of its own node, a
partition that heals (with the replay-content checks on the final
checkpoint), the stop across hosts (Ctrl-C, SIGTERM, a stop criterion), two
replay shards across hosts; and the pieces of it that need no cluster (the
routing choice, a writer whose stream broke, the costs summed). The cluster
tests share one cluster (a module-scoped fixture).

The cluster tests need root and `ip` (they skip naming why not) and carry the
`multihost` marker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from apex import ConfigError
from tests import netns
from tests.procs import ROOT, STARTUP_TIMEOUT, STOP_TIMEOUT, wait_for_state, wait_until
from tests.replay_checks import assert_final_checkpoint_nstep

# ------------------------------------------------------------------ no cluster


def _default_route_ip() -> str | None:
    from launch.ray_connect import route_ip

    return route_ip("192.0.2.1")  # TEST-NET-1: the default route's source address


def test_the_driver_attaches_with_the_address_that_routes_to_the_head():
    from launch.ray_connect import choose_node_ip

    ip = _default_route_ip()
    if ip is None:
        pytest.skip("this host has no default route")
    chosen = choose_node_ip(f"{ip}:6379", raylets={ip, "10.99.0.1"})
    assert (chosen.ip, chosen.source) == (ip, f"routes to the head {ip}")
    # No Ray node on the routed address: the one node of this host, else Ray's choice.
    assert choose_node_ip(f"{ip}:6379", raylets={"10.99.0.1"}).ip == "10.99.0.1"
    assert choose_node_ip(f"{ip}:6379", raylets={"10.99.0.1", "10.99.0.2"}).ip is None
    # A head that resolves nowhere leaves the choice to Ray.
    assert choose_node_ip("no-such-host.invalid:6379", raylets=set()).source == "Ray's choice"


def test_ray_node_ip_must_be_an_address_of_this_host_with_a_ray_node():
    from launch.ray_connect import check_node_ip, choose_node_ip

    with pytest.raises(ConfigError, match=r"--ray_node_ip='not-an-ip' is invalid: expected an IP"):
        check_node_ip("not-an-ip")
    with pytest.raises(ConfigError, match=r"--ray_node_ip='192.0.2.77' is invalid: .*interfaces"):
        check_node_ip("192.0.2.77")  # TEST-NET-1: no interface of this host has it
    assert check_node_ip("127.0.0.1") == "127.0.0.1"
    with pytest.raises(ConfigError, match=r"a Ray node on this host \(10.99.0.1\)"):
        choose_node_ip("auto", flag="127.0.0.1", raylets={"10.99.0.1"})
    chosen = choose_node_ip("auto", flag="127.0.0.1", raylets={"127.0.0.1"})
    assert (chosen.ip, chosen.source) == ("127.0.0.1", "--ray_node_ip")


@pytest.mark.cli
def test_a_bad_ray_node_ip_is_refused_in_one_line_before_anything_starts(tmp_path):
    from tests.procs import train_command

    run_dir = str(tmp_path / "never")
    proc = subprocess.run(
        train_command(
            "--config=configs/apex_cartpole.py",
            f"--config.run_dir={run_dir}",
            "--launcher=ray",
            "--ray_address=127.0.0.1:9",
            "--ray_node_ip=192.0.2.77",
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
    )
    assert proc.returncode == 2 and not os.path.exists(run_dir), proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--ray_node_ip='192.0.2.77' is invalid" in lines[0], lines


@pytest.fixture
def two_interface_host():
    """One namespace with two interfaces on two subnets (a host with a cluster
    network and another, as cloud VMs and InfiniBand hosts have)."""
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    name = f"anx{os.getpid()}h9"
    try:
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        for dev, ip in (("d0", "10.77.0.11/24"), ("d1", "10.88.0.11/24")):
            ns = ["ip", "netns", "exec", name, "ip"]
            subprocess.run([*ns, "link", "add", dev, "type", "veth", "peer", f"{dev}p"], check=True)
            subprocess.run([*ns, "addr", "add", ip, "dev", dev], check=True)
            subprocess.run([*ns, "link", "set", dev, "up"], check=True)
            subprocess.run([*ns, "link", "set", f"{dev}p", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_on_a_host_with_two_networks_the_route_to_the_head_picks_the_address(two_interface_host):
    script = (
        "from launch.ray_connect import route_ip; "
        "print(route_ip('10.88.0.5'), route_ip('10.77.0.5'), route_ip('10.55.0.5'))"
    )
    got = subprocess.run(
        ["ip", "netns", "exec", two_interface_host, sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert got.stdout.split() == ["10.88.0.11", "10.77.0.11", "None"], got


class _BrokenStream:
    """A Reverb writer whose stream never confirms anything (a partition left it so)."""

    def Flush(self, pending, timeout_ms):  # noqa: N802 - Reverb's name
        raise RuntimeError("Timeout exceeded before the items were confirmed")

    def Close(self):  # noqa: N802 - Reverb's name
        pass


def test_a_writer_whose_stream_broke_while_the_server_answers_asks_for_a_new_one(reverb_server):
    import reverb

    from apex.replay import ReplayStalled, TransitionWriter

    client = reverb.Client(f"localhost:{reverb_server.port}")
    w = TransitionWriter(client, "transitions", actor_id=0, epsilons=np.zeros(4))
    w.stall_seconds = 0.2
    w._writer = _BrokenStream()  # the server answers; its rate limiter takes inserts
    with pytest.raises(ReplayStalled, match="took no item .* would take inserts") as err:
        w._wait(0, None)
    assert err.value.pending == 48 and err.value.address == client.server_address
    assert w.unreachable_since is None


def test_a_writer_cut_off_from_the_server_waits_and_says_so(reverb_server):
    import reverb

    from apex.replay import TransitionWriter

    client = reverb.Client(f"localhost:{reverb_server.port}")
    w = TransitionWriter(client, "transitions", actor_id=0, epsilons=np.zeros(4))
    w.stall_seconds = 0.2
    w._writer = _BrokenStream()
    w._client = reverb.Client("localhost:1")  # nothing answers there
    w._should_stop = lambda: w.unreachable_since is not None
    assert w._wait(0, None) is False  # waited (no new writer for a server that is not there)
    assert w.unreachable_since is not None


def test_a_writer_cut_off_from_a_shard_that_moved_asks_for_a_new_one_at_its_new_address(
    reverb_server,
):
    """The coordinator said the shard listens elsewhere (apex.coordination.moves;
    launch.nodes.actor sets `address_moved`): the writer stops waiting on the
    old address and raises ReplayStalled(moved=True), and the actor takes a new
    writer at the new address."""
    import reverb

    from apex.replay import ReplayStalled, TransitionWriter

    client = reverb.Client(f"localhost:{reverb_server.port}")
    w = TransitionWriter(client, "transitions", actor_id=0, epsilons=np.zeros(4))
    w.stall_seconds = 0.2
    w._writer = _BrokenStream()
    w._client = reverb.Client("localhost:1")  # nothing answers there
    w.address_moved = lambda: True
    with pytest.raises(ReplayStalled, match="started again elsewhere") as err:
        w._wait(0, None)  # unreachable at the first probe, and moved: no waiting on
    assert err.value.moved and err.value.pending == 48 and w.unreachable_since is not None


class _HeldTable:
    """A replay server that answers and whose rate limiter holds inserts (other
    writers keep it full); each answer counts `others` more inserts from them."""

    server_address = "localhost:0"

    def __init__(self, others: int, on_answer=None):
        self.inserts, self.others, self.on_answer = 1000, others, on_answer
        self.answers = 0

    def server_info(self, timeout=None):
        from types import SimpleNamespace as NS

        self.answers += 1
        self.inserts += self.others
        if self.on_answer:
            self.on_answer()
        stats = NS(
            insert_stats=NS(completed=self.inserts),
            sample_stats=NS(completed=self.inserts),  # diff 0: one more insert is over max_diff
            samples_per_insert=1.0,
            min_size_to_sample=1,
            min_diff=-1.0,
            max_diff=0.5,
        )
        return {
            "transitions": NS(
                rate_limiter_info=stats,
                current_size=100,
                max_size=1000,
                num_unique_samples=0,
                signature=None,
            )
        }


class _SlowStream:
    """A working stream the rate limiter holds: one of its items is confirmed
    each time the server answers a probe."""

    def __init__(self, pending: int):
        self.pending = pending

    def Flush(self, pending, timeout_ms):  # noqa: N802 - Reverb's name
        if self.pending > pending:
            raise RuntimeError("Timeout exceeded before the items were confirmed")

    def Close(self):  # noqa: N802 - Reverb's name
        pass


def _held_writer(reverb_server, monkeypatch, stream, table):
    import reverb

    from apex.replay import TransitionWriter
    from apex.replay import writer as writer_module

    monkeypatch.setattr(writer_module, "STALL_PROBE_SECONDS", 0.01)
    w = TransitionWriter(
        reverb.Client(f"localhost:{reverb_server.port}"), "transitions", 0, np.zeros(4)
    )
    w.stall_seconds, w.fellow_writers = 0.05, 2
    w._writer, w._client = stream, table
    w._should_stop = lambda: table.answers > 300  # a writer that waits on: False, not a hang
    return w


def test_a_writer_whose_stream_errored_asks_for_a_new_one_though_the_limiter_holds(
    reverb_server, monkeypatch
):
    # The partition broke the stream (it says so at once); the link is back but
    # another actor keeps the table full: waiting would never end.
    from apex.replay import ReplayStalled

    class Errored(_BrokenStream):
        def Flush(self, pending, timeout_ms):  # noqa: N802 - Reverb's name
            raise RuntimeError("UNAVAILABLE: Socket closed")

    w = _held_writer(reverb_server, monkeypatch, Errored(), _HeldTable(others=0))
    with pytest.raises(ReplayStalled, match="last stream error RuntimeError: UNAVAILABLE"):
        w._wait(0, None)


def test_a_silent_stream_is_broken_once_other_writers_took_several_fair_shares(
    reverb_server, monkeypatch
):
    # No error, the limiter holds, and the table takes other writers' items
    # while none of this one's is confirmed: 4 x 48 x 2 writers = 384 of theirs.
    from apex.replay import ReplayStalled

    table = _HeldTable(others=50)
    w = _held_writer(reverb_server, monkeypatch, _BrokenStream(), table)
    with pytest.raises(ReplayStalled, match="took no item") as err:
        w._wait(0, None)
    assert err.value.pending == 48
    assert 384 <= table.inserts - 1000 <= 384 + 3 * 50  # not before, and soon after


def test_a_held_writer_that_gets_its_turn_waits_on_however_much_others_insert(
    reverb_server, monkeypatch
):
    # A working stream: every probe sees one more of its items confirmed, while
    # other writers insert far more than the broken-stream bound. No new writer.
    stream = _SlowStream(pending=40)

    def confirm_one():
        stream.pending -= 1

    table = _HeldTable(others=500, on_answer=confirm_one)
    w = _held_writer(reverb_server, monkeypatch, stream, table)
    assert w._wait(0, None) is True
    assert table.inserts - 1000 > 40 * 384


def test_the_costs_of_partitions_are_summed_from_the_actors_beats():
    from apex.coordination.partitions import Partitions

    p = Partitions(host="here")
    beats = {
        "actor_0": {
            "host": "h2",
            "received": 100.0,
            "period_seconds": 1.0,
            "counters": {"reconnects": 1, "items_lost_in_flight": 12, "seconds_stalled": 9.5},
        },
        "actor_1": {"host": "here", "received": 100.0, "period_seconds": 1.0, "counters": {}},
        "learner": {"host": "h2", "received": 0.0, "period_seconds": 1.0},
    }
    assert p.text(beats, now=110.0) == " | unreachable: actor_0 10 s | reconnects 1"
    beats["actor_0"]["received"] = 111.0  # back
    assert p.text(beats, now=111.5) == " | reconnects 1"
    costs = p.costs(beats)
    assert costs == {
        "reconnects": 1,
        "items_lost_in_flight": 12,
        "seconds_stalled": 9.5,
        "seconds_unreachable": 10.0,
        "longest_silence_seconds": {"actor_0": 10.0},
    }


def test_a_cut_replay_shard_shows_next_to_the_actors_and_its_silence_is_counted_apart():
    from apex.coordination.partitions import Partitions

    p = Partitions(host="here")
    beats = {
        "actor_0": {"host": "h2", "received": 100.0, "period_seconds": 1.0, "counters": {}},
        "replay_1": {"host": "h2", "received": 101.0, "period_seconds": 1.0},
        "replay_2": {"host": "here", "received": 90.0, "period_seconds": 1.0},  # its process
        "learner": {"host": "h2", "received": 0.0, "period_seconds": 1.0},
    }
    assert p.text(beats, now=110.0) == " | unreachable: actor_0 10 s, replay_1 9 s"
    assert p.unreachable(beats, now=110.0) == {"actor_0": 10.0, "replay_1": 9.0}
    beats["actor_0"]["received"] = beats["replay_1"]["received"] = 111.0  # back
    assert p.text(beats, now=111.5) == ""
    costs = p.costs(beats)
    assert costs["seconds_unreachable"] == 10.0  # seconds without an actor
    assert costs["shard_seconds_unreachable"] == 9.0
    assert costs["longest_silence_seconds"] == {"actor_0": 10.0, "replay_1": 9.0}


def test_a_node_host_out_of_reach_for_now_is_not_counted_dead():
    # A partition makes Ray fail the launcher's tick of the cut host's NodeHost
    # with ActorUnavailableError (a RayActorError): that actor is not dead, and
    # its lease decides whether it is lost (a loaded run replaced actor_0 after a
    # 10-s cut when any RayActorError counted as a death).
    from ray import exceptions

    from launch.ray_launch import host_died

    assert host_died(exceptions.ActorDiedError(), exceptions)
    assert not host_died(exceptions.ActorUnavailableError("connection lost", None), exceptions)
    assert host_died(exceptions.ActorDiedError(), object())  # a Ray without the distinction


def test_the_nodes_left_at_the_stop_windows_end_are_named_with_what_their_hosts_said():
    # A loaded run's two-shard stop left learner/0 and replay_1 running with
    # every beat 'stopped' and no stack in the output: the launcher now asks
    # each late node's host (SIGUSR1: its stacks, if it runs); one whose
    # process has exited is not late, and the others are named with the answer.
    from launch.ray_stop import still_running

    text = still_running({"learner/0": True, "actor/0": None})
    assert text == (
        "learner/0 (its process runs; its stacks follow in its log or RUN_DIR/stacks), "
        "actor/0 (its host did not answer)"
    )


# --------------------------------------------------------------- the cluster


@pytest.fixture(scope="module")
def hosts():
    """Three hosts h1..h3 (10.77.0.11..13), a Ray head in h1 ('apex_learner'),
    workers in h2 and h3 ('apex_actor'); everything torn down at the end, also
    when a test fails (and at exit, if this process is interrupted)."""
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    with netns.ray_cluster(3, cpus=2) as cluster:
        yield cluster


def _node_processes(cluster) -> list[str]:
    out = []
    for pids in cluster.pids().values():
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "launch.node_process" in cmd or "launch.train" in cmd:
                out.append(cmd[:200])
    return out


def _assert_stopped_in_window(hosts, out: str, run_dir: str) -> None:
    """Every node stopped inside the stop window, and none is left on any host.
    A failure shows the stacks the launcher had the late nodes dump (their
    logs' tail in `out`, or RUN_DIR/stacks)."""
    stacks = ""
    folder = os.path.join(run_dir, "stacks")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name)) as f:
            stacks += f"\n--- {name}\n{f.read()[-6000:]}"
    assert "still running after the stop window" not in out, out[-4000:] + stacks
    assert "Timeout (" not in out and "Traceback" not in out, out[-4000:] + stacks
    wait_until(lambda: not _node_processes(hosts), STOP_TIMEOUT, "every node process to exit")


@pytest.mark.multihost
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_three_hosts_train_a_cut_actor_host_comes_back_and_ctrl_c_stops_in_its_window(
    hosts, tmp_path
):
    """The README's cluster command in h1 with --ray_address of the head: the
    launcher attaches to its own node (the address that routes to the head),
    the learner and coordinator run in h1 and one actor in each of h2 and h3.
    h2's link goes down (the progress line names its actor unreachable) and
    comes back: that actor inserts again and its counts carry on. Ctrl-C then
    stops every node inside the stop window (no kill after it), exit 130,
    summary.json with the final checkpoint and what the partition cost, no
    node process is left on any host, and every item of the final checkpoint
    (actor_0's made after the link returned among them) holds right n-step
    values."""
    run_dir = str(tmp_path / "run")
    program = netns.ClusterProgram(hosts, run_dir, "netns", "--config.stop.max_wall_seconds=900")
    lines = program.lines
    healed = 0.0
    try:
        wait_for_state(run_dir, lambda s: (s.get("learner_steps") or 0) > 20, STARTUP_TIMEOUT)
        placed = program.placement()
        nodes = placed["nodes"]
        assert placed["launcher_ip"] == hosts.ips[0], placed
        assert placed["launcher_ip_source"] == f"routes to the head {hosts.ips[0]}", placed
        assert nodes["learner"]["ip"] == nodes["coordinator"]["ip"] == hosts.ips[0], placed
        assert {nodes["actor_0"]["ip"], nodes["actor_1"]["ip"]} == set(hosts.ips[1:]), placed
        victim = hosts.ips.index(nodes["actor_0"]["ip"])

        def inserted() -> int:
            return int(
                (netns.node_beat(run_dir, "actor_0").get("counters") or {}).get("items_inserted", 0)
            )

        wait_until(lambda: inserted() > 0, STARTUP_TIMEOUT, "actor_0's first inserts")
        hosts.cut(victim)

        def unreachable_for(seconds: float) -> bool:
            import re

            found = [re.search(r"unreachable: actor_0 (\d+) s", line) for line in list(lines)]
            return any(m and int(m.group(1)) >= seconds for m in found)

        wait_until(lambda: unreachable_for(8), 120, "the progress line naming actor_0 unreachable")
        before = inserted()
        hosts.heal(victim)
        healed = time.time()
        # A beat the actor made after the link returned, then one that counts
        # more items than it: the actor inserts again (beats made during the
        # cut arrive late; they count items queued before its write waited).
        after = wait_until(
            lambda: netns.node_beat(run_dir, "actor_0").get("time", 0) > healed and inserted(),
            120,
            "a beat of actor_0 made after the link returned",
        )
        # More than a writer's unconfirmed items (48) past it: items the actor
        # made after the link returned are in the replay.
        wait_until(
            lambda: inserted() > after + 200,
            120,
            lambda: (
                f"actor_0 inserting again (after {after}; now {inserted()}); "
                f"its beat {netns.node_beat(run_dir, 'actor_0')}; its lines:\n"
                + "".join(program.tail(("actor_0", "actor/0", "Ray node"), 40))
            ),
        )
        assert after >= before  # its counts carried on
        os.killpg(program.proc.pid, signal.SIGINT)  # Ctrl-C at the terminal
        out = program.wait()
    finally:
        if not healed:
            hosts.heal(0 if "victim" not in locals() else victim)
        program.kill()
    assert program.proc.returncode == 130, out[-4000:]
    _assert_stopped_in_window(hosts, out, run_dir)
    assert "launcher at 10.77.0.11 (routes to the head 10.77.0.11)" in out, out[-4000:]
    summary = program.summary()
    assert summary["stop_reason"] == "stopped" and summary["checkpoint"], summary
    assert summary["network"]["seconds_unreachable"] > 0, summary["network"]
    assert summary["network"]["longest_silence_seconds"].get("actor_0", 0) >= 8, summary
    counts = assert_final_checkpoint_nstep(run_dir, since=healed)
    assert counts.get(0) and counts.get(1) and counts["after"] > 0, counts


@pytest.mark.multihost
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_across_hosts_sigterm_and_a_stop_criterion_stop_every_node_in_the_window(hosts, tmp_path):
    """Two programs on the same three hosts, one after the other. SIGTERM to the
    launcher (as a supervisor sends it): exit 143. Then two replay shards
    (replay.num_shards=2) stopped by a stop criterion (max_learner_steps):
    exit 0; shard 1 is a node on an actor host (shard 0 is in the learner's
    process in h1) and its actor (actor_1) is next to it; both shards took
    items, were sampled and acknowledged the learner's priority updates
    (routed to the shard each key came from). Each time every node stops
    inside the stop window, no node process is left and the final
    checkpoint's items hold right n-step values."""
    # SIGTERM
    run_dir = str(tmp_path / "sigterm")
    program = netns.ClusterProgram(
        hosts, run_dir, "netns-term", "--config.stop.max_wall_seconds=900"
    )
    try:
        wait_for_state(run_dir, lambda s: (s.get("learner_steps") or 0) > 20, STARTUP_TIMEOUT)
        program.proc.send_signal(signal.SIGTERM)  # the launcher's pid only
        out = program.wait()
    finally:
        program.kill()
    assert program.proc.returncode == 143, out[-4000:]
    _assert_stopped_in_window(hosts, out, run_dir)
    summary = program.summary()
    assert summary["stop_reason"] == "stopped" and summary["checkpoint"], summary
    assert_final_checkpoint_nstep(run_dir)

    # Two shards, a stop criterion
    run_dir = str(tmp_path / "shards")
    steps = 400
    program = netns.ClusterProgram(
        hosts,
        run_dir,
        "netns-shards",
        "--config.replay.num_shards=2",
        f"--config.stop.max_learner_steps={steps}",
        "--config.stop.max_wall_seconds=900",
    )
    try:
        program.proc.wait(timeout=STARTUP_TIMEOUT + 300)  # it stops itself
        out = program.wait()
    finally:
        program.kill()
    assert program.proc.returncode == 0, out[-4000:]
    _assert_stopped_in_window(hosts, out, run_dir)
    nodes = program.placement()["nodes"]
    assert nodes["learner"]["ip"] == hosts.ips[0], nodes  # shard 0 is in its process
    assert nodes["replay_1"]["ip"] in hosts.ips[1:], nodes
    assert nodes["actor_1"]["ip"] == nodes["replay_1"]["ip"], nodes  # next to its shard
    summary = program.summary()
    assert summary["stop_reason"] == "max_learner_steps" and summary["checkpoint"], summary
    shards = summary["replay_shards"]
    for name in ("replay_0", "replay_1"):
        assert shards[name]["inserts"] > 0 and shards[name]["samples"] > 0, shards
    rows = netns.metrics_rows(run_dir, "learner")
    last = rows[-1] if rows else {}
    for s in (0, 1):
        assert last.get(f"learner/batches_shard_{s}", 0) > 0, last
        assert last.get(f"learner/priority_updates_acked_shard_{s}", 0) > 0, last
    counts = assert_final_checkpoint_nstep(run_dir)
    assert counts.get(0) and counts.get(1), counts


def test_a_parameter_request_a_partition_swallowed_is_asked_again():
    import concurrent.futures

    from apex.variables import VariableClient

    class Source:
        calls = 0

        def get_variables(self):
            return (1, [np.zeros(2)], {})

        class futures:  # noqa: N801 - courier's attribute name
            pending: list = []

            @classmethod
            def get_variables(cls):
                f = concurrent.futures.Future()  # never answered
                cls.pending.append(f)
                return f

    client = VariableClient(Source(), update_period=1)
    client.request_timeout = 0.0
    client.maybe_update(5)  # asks
    client.maybe_update(10)  # no answer within request_timeout: cancelled, asked again
    assert len(Source.futures.pending) == 2 and Source.futures.pending[0].cancelled()
