"""`--launcher=ray`: the program `make_program` builds, placed across a Ray cluster.

There is no second program graph. Every Launchpad node of the program runs as
it does under local_mp, a process of its own started through Launchpad's own
node entry (so stop events, stop windows and `lp.stop()` behave the same), but
on the Ray node apex.placement picks, under a small Ray actor (`NodeHost`)
that Ray schedules there with the node's CPUs, GPUs and custom resource:

    launcher (this process, on the run directory's host)
      |- control server (Courier): what `lp.stop()` in a node calls
      |- NodeHost "learner/0" on the learner's node  -> node process (learner + replay)
      |- NodeHost "coordinator/0" on the same node   -> node process (coordinator + evaluator)
      |- NodeHost "actor/i" on the other nodes        -> node process (actor i)

Addresses: each NodeHost picks free ports on its host and reports its host's
IP (Ray's node IP); the launcher binds every Launchpad address to `ip:port`
before it pickles the nodes, so an actor on host B dials the replay and the
learner on host A. Courier and Reverb listen on every interface.

Faults: a NodeHost whose Ray worker or node died is an actor's host: the
actor starts again on another node that fits, under apex.restart's policy (the
one a local actor follows after an exception); so does an actor the
coordinator counts lost (cut off past cluster.actor_lost_after_seconds) or
whose process fenced itself, after its old copy's lease has run out
(launch.ray_replace, apex.fence), and so does a replay shard in a process of
its own (empty, at a new address its clients are told:
apex.coordination.moves; its actors start again after it); an actor's process that dies
of a signal (SIGKILL, the OOM killer, a crash) while its NodeHost lives starts
again under that host, under the same policy (launch.node_restarts); a server node's host (the
learner's, the coordinator's) stops the program in order with "node failed".
Stops: Ctrl-C/SIGTERM on the launcher, or `lp.stop()` in a node, SIGTERM every
node process (Launchpad's orderly stop, as local_mp does), SIGKILL what is left
after the stop window, then kill every NodeHost: no Ray actor of the program
outlives the launcher (they are owned by this driver, so they die with it too).

The parts: launch.ray_connect (the cluster and the placement plan on it),
launch.ray_plan (what the program asks of it), launch.ray_host (`NodeHost`),
and here `RayLauncher`, which runs the program on them.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from apex import (
    SERVER_LABELS,
    STOP_WINDOW,
    ApexConfig,
    Demand,
    PlacementError,
    compat,
    decide_restart,
    describe_placement,
    fence,
    recorded_failure,
    write_json_atomic,
)
from launch import node_process
from launch.node_env import FORWARDED_ENV_PREFIXES, PROCESS_RESTART_ENV, RESTARTED_ENV
from launch.node_restarts import death_text, died_unasked, policy_env
from launch.ray_connect import RaySession, cluster_nodes, import_ray
from launch.ray_host import NodeHost, free_ports
from launch.ray_replace import CoordinatorLink, pick_node

PLACEMENT_FILE = "placement.json"
# The nodes that may leave a failure record (apex.supervision.record_failure) in
# the process of each program label (launch.program colocates them).
_RECORDING_NODES = {
    "coordinator": ("coordinator", "evaluator"),
    "learner": ("learner", "inference"),
}
_PALETTE = (36, 33, 32, 34, 35)


class _Control:
    """What `lp.stop()` in a node reaches (RPC on the launcher's control server)."""

    def __init__(self, on_stop: Callable[[], None]):
        self._on_stop = on_stop

    def stop_program(self) -> None:
        self._on_stop()


@dataclasses.dataclass
class StopViaLauncher:
    """The program stopper of every node on Ray (what `lp.stop()` calls): asks the
    launcher's control server to stop the program. Picklable; imports nothing
    of Ray in the node."""

    address: str

    def __call__(self, mark_as_completed: bool = False) -> None:
        del mark_as_completed
        import courier  # deferred: Launchpad's gRPC client, needed only in the node

        courier.Client(self.address, call_timeout=10).stop_program()


def host_died(err: BaseException, exceptions: Any) -> bool:
    """Whether a NodeHost's failed call (a RayActorError) means it died.

    Ray (2.48) raises ActorUnavailableError, a RayActorError too, when the
    actor cannot be reached for the moment: a network partition, its node's
    connection in reconnect back-off. That is not a death. A partitioned actor
    is lost only when its lease runs out (the coordinator counts it lost:
    `_check_lost`); a dead node's actors get ActorDiedError once Ray counts the
    node dead. `exceptions`: ray.exceptions."""
    unavailable = getattr(exceptions, "ActorUnavailableError", None)
    return not (unavailable is not None and isinstance(err, unavailable))


@dataclasses.dataclass
class _Slot:
    """One program node and the NodeHost that runs it."""

    demand: Demand
    node: Any  # the Launchpad node
    title: str
    colour: int
    host: Any = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    exit_code: int | None = None
    restarts: int = 0
    backoff: float = 0.0
    started: float = 0.0
    restart_at: float | None = None
    avoid: set[str] = dataclasses.field(default_factory=set)  # the node it was lost on
    fence_until: float = 0.0  # its old copy's lease has surely run out by then (monotonic)

    @property
    def done(self) -> bool:
        return self.exit_code is not None


def _movable(slot: _Slot) -> bool:
    """Whether `slot`'s node starts again elsewhere when its host is lost: an actor,
    or a replay shard in a process of its own."""
    return slot.demand.label == "actor" or slot.demand.is_shard


def still_running(answers: dict[str, bool | None]) -> str:
    """The nodes left at the stop window's end, each with what its host said:
    'learner/0 (its process runs; its stacks follow in its log or RUN_DIR/stacks)',
    'actor/0 (its host did not answer)'."""
    says = {
        True: "its process runs; its stacks follow in its log or RUN_DIR/stacks",
        None: "its host did not answer",
    }
    return ", ".join(f"{name} ({says[answer]})" for name, answer in answers.items())


class RayLauncher:
    """Runs a built program on the session's cluster until it stops.

    `failure` is set (a one-line reason) when a server node's host died or a
    node could not be placed or restarted; `wait()` returns when every node
    process has exited (or was killed after the stop window).
    """

    def __init__(
        self,
        program: Any,
        config: ApexConfig,
        session: RaySession,
        placement: dict[str, str],
        wanted: list[Demand],
        out: Callable[[list[bytes]], None],
        tty: bool = False,
        keep_all: bool = False,
    ):
        self._ray = import_ray()
        self._config = config
        self._session = session
        self._placement = placement
        self._out = out
        self._tty = tty
        self._keep_all = keep_all
        self.failure: str | None = None
        self.failure_time: float | None = None  # when it was seen (Unix time)
        self._stop = threading.Event()
        self._stop_sent_at: float | None = None
        self._killed = False
        by_node = {(d.label, d.index): d for d in wanted}
        self._slots: list[_Slot] = []
        for label, nodes in compat.program_groups(program):
            for index, node in enumerate(nodes):
                colour = _PALETTE[len(self._slots) % len(_PALETTE)]
                demand = by_node[(label, index)]
                title = demand.name if demand.is_shard else f"{label}/{index}"
                self._slots.append(_Slot(demand, node, title, colour))
        self._remote_cls = self._ray.remote(NodeHost)
        self._control_port = free_ports(1)[0]
        self._control = compat.courier_server(_Control(self.request_stop), self._control_port)
        self._control_address = f"{session.launcher_ip}:{self._control_port}"
        compat.prepare_nodes(program, StopViaLauncher(self._control_address))
        self._env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}
        self._env.update(policy_env(config))  # dead actors come back: the coordinator waits
        lease = config.cluster.actor_lost_after_seconds
        if not lease or config.logging.heartbeat_period_seconds <= 0:
            lease = 0.0  # no beats, no lease: lost actors are not replaced
        if lease:
            self._env[fence.LEASE_ENV] = f"{lease:g}"  # actors hold leases; lost ones are replaced
        self._coordinator = CoordinatorLink(lease)
        self._next_lost_check = 0.0

    # -------------------------------------------------------------- start
    def _new_host(self, slot: _Slot, node_id: str | None, soft: bool = False) -> Any:
        # Deferred: Ray is optional (the 'ray' extra); self._ray is imported by now.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        d = slot.demand
        options: dict[str, Any] = {
            "num_cpus": d.cpus,
            "num_gpus": d.gpus,
            "resources": d.ray_resources(),
            "max_concurrency": 4,
            "max_restarts": 0,
        }
        if node_id is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=soft)
        return self._remote_cls.options(**options).remote(
            slot.title, slot.colour, self._tty, self._keep_all
        )

    def _await_infos(self, slots: list[_Slot]) -> None:
        """Fills each slot's `info` (host, IP, free ports); names what is still
        unplaced after cluster.start_timeout_seconds."""
        ray = self._ray
        futures = {slot.host.info.remote(len(slot.node.addresses)): slot for slot in slots}
        timeout = self._config.cluster.start_timeout_seconds
        ready, pending = ray.wait(list(futures), num_returns=len(futures), timeout=timeout)
        if pending:
            names = ", ".join(futures[f].title for f in pending)
            raise PlacementError(
                f"Ray did not start {names} within cluster.start_timeout_seconds={timeout:g} "
                f"(the cluster lacks free CPUs or resources for them: see `ray status`)"
            )
        for f in ready:
            futures[f].info = ray.get(f)

    def _bind(self, slot: _Slot) -> None:
        ip, ports = slot.info["ip"], slot.info["ports"]
        compat.bind_node_addresses(slot.node, [f"{ip}:{p}" for p in ports])

    def _start(self, slot: _Slot, restarted: bool = False) -> None:
        payload, _ = compat.node_entry(slot.node)
        # HELPER-31: launch.node_process, not process_entry.py: the node ends with
        # os._exit as a local_mp node does (no interpreter finalization to hang in).
        argv_tail = node_process.argv_tail()
        env = dict(self._env)
        if restarted:
            env[RESTARTED_ENV] = "1"
            env[PROCESS_RESTART_ENV] = str(slot.restarts)  # the actor's actor/restarts
        self._ray.get(slot.host.start.remote(payload, argv_tail, env), timeout=60)
        slot.started = time.time()

    def start(self) -> None:
        """Places every node, binds every address, starts every node process."""
        for slot in self._slots:
            slot.host = self._new_host(slot, self._placement[slot.demand.name])
        self._await_infos(self._slots)
        for slot in self._slots:  # every address first: nodes pickle their peers' handles
            self._bind(slot)
            if slot.demand.label == "coordinator":
                self._coordinator.address = f"{slot.info['ip']}:{slot.info['ports'][0]}"
        for slot in self._slots:
            self._start(slot)
        self._record_placement()

    def _record_placement(self) -> None:
        """RUN_DIR/placement.json: the Ray node, IP and host pid of every program
        node and the launcher's own Ray node (tools and tests read it)."""
        run_dir = self._config.run_dir
        if not run_dir:
            return
        write_json_atomic(
            os.path.join(run_dir, PLACEMENT_FILE),
            {
                "ray_address": self._session.address,
                "launcher_node": self._session.launcher_node,
                # HELPER-31: the address the launcher's driver attached with, and why.
                "launcher_ip": self._session.launcher_ip,
                "launcher_ip_source": self._session.launcher_ip_source,
                "nodes": {
                    s.demand.name: {
                        "ray_node": s.info.get("node_id"),
                        "ip": s.info.get("ip"),
                        "host_pid": s.info.get("pid"),
                        "restarts": s.restarts,
                        "cpus": s.demand.cpus,
                    }
                    for s in self._slots
                },
            },
        )

    def placement_text(self) -> str:
        hosts = {s.demand.name: s.info.get("node_id", "?") for s in self._slots}
        session = self._session
        return (
            f"{describe_placement(hosts, session.nodes)}; launcher at {session.launcher_ip} "
            f"({session.launcher_ip_source})"
        )

    # -------------------------------------------------------------- run
    def request_stop(self) -> None:
        self._stop.set()

    def wait(self, period: float = 0.5) -> None:
        """Runs until every node process has exited; passes output on, restarts
        actors whose host died, stops everything on request."""
        try:
            while not all(s.done for s in self._slots):
                self._tick(period)
                if self._stop.is_set():
                    self._stopping()
        finally:
            self._out(self._drain_all())
            self.close()

    def _alive(self) -> list[_Slot]:
        return [s for s in self._slots if not s.done and s.host is not None]

    def _tick(self, period: float) -> None:
        ray = self._ray
        slots = [s for s in self._alive() if s.restart_at is None]  # not one waiting to restart
        futures = {s.host.tick.remote(): s for s in slots}
        deadline = time.time() + max(period, 0.05)
        ready, _ = ray.wait(list(futures), num_returns=len(futures), timeout=10.0)
        for f in ready:
            slot = futures[f]
            try:
                lines, code = ray.get(f)
            except ray.exceptions.RayActorError as err:
                if not host_died(err, ray.exceptions):
                    continue  # out of reach for now: its lease (the coordinator) decides
                self._host_died(slot, err)
                continue
            self._out(lines)
            if code is not None and self._process_died(slot, code):
                continue
            if code == fence.FENCED_EXIT_CODE and self._replace(slot, "fenced itself", ended=True):
                continue
            if code is not None:
                slot.exit_code = code
                if code != 0 and not self._stop.is_set():
                    self._fail(self._exit_reason(slot, code))
        self._check_lost()
        for slot in self._slots:
            if slot.restart_at is not None and time.time() >= slot.restart_at:
                self._restart(slot)
        left = deadline - time.time()
        if left > 0:
            self._stop.wait(left)

    def _exit_reason(self, slot: _Slot, code: int) -> str:
        """'<node> exited with code N', with the exception a node of its process
        recorded (RUN_DIR/failures, on this host) when there is one."""
        reason = f"{slot.title} exited with code {code}"
        names = _RECORDING_NODES.get(slot.demand.label)
        if self._config.run_dir and names:
            recorded = recorded_failure(self._config.run_dir, since=slot.started, nodes=names)
            if recorded is not None:
                reason += f": {recorded}"
        return reason

    def _say(self, text: str) -> None:
        self._out([f"[apex] {text}\n".encode()])

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            self.failure_time = time.time()
        self._stop.set()

    def _host_died(self, slot: _Slot, err: Exception) -> None:
        node = slot.info.get("node_id", "?")[:8]
        reason = f"{slot.title}'s Ray worker or node ({node}) died"
        slot.host = None
        if self._stop.is_set():
            slot.exit_code = -1
            return
        if not _movable(slot):
            slot.exit_code = -1
            self._fail(f"{reason}: {type(err).__name__}")
            return
        slot.avoid = {str(slot.info.get("node_id"))}
        self._schedule_elsewhere(slot, reason)

    def _schedule_elsewhere(self, slot: _Slot, reason: str, ended: bool = False) -> bool:
        """Schedules the start of actor `slot` on another node (its old copy fenced
        first: the coordinator refuses its beats and says how long its last lease
        may hold; the new copy starts after that, or once the coordinator knows
        the copy ended; `ended`: its exit was seen), or past actor.max_restarts
        fails the program. Returns whether a restart was scheduled."""
        wait_fence = self._coordinator.fence(slot.demand.name)
        if ended:
            wait_fence = 0.0
        slot.fence_until = time.monotonic() + wait_fence  # a clock no one sets
        self._forget(slot.demand.name)  # its silence from now on is not a death
        c = self._config.actor
        slot.restarts += 1
        decision = decide_restart(
            slot.restarts,
            slot.backoff or c.restart_backoff_seconds,
            time.time() - slot.started,
            c.restart_backoff_seconds,
            c.max_restarts,
        )
        if not decision.restart:
            slot.exit_code = -1
            self._fail(f"{reason}, {slot.restarts} times (actor.max_restarts={c.max_restarts})")
            return False
        slot.backoff = decision.next_backoff
        slot.restart_at = time.time() + decision.wait
        fenced = (
            f", once its old copy has ended or its lease has run out (at most {wait_fence:.1f} s)"
            if wait_fence > decision.wait
            else ""
        )
        self._say(
            f"{reason}; restart {slot.restarts}/{c.max_restarts} on another node that fits in "
            f"{decision.wait:.1f} s{fenced}"
        )
        return True

    def _fence_holds(self, slot: _Slot) -> bool:
        """Whether the old copy of `slot` may still hold a lease (then its restart
        waits: asked again every second, never past `fence_until`)."""
        left = slot.fence_until - time.monotonic()
        if left <= 0 or self._coordinator.fence(slot.demand.name) <= 0:
            return False
        slot.restart_at = time.time() + min(1.0, left)
        return True

    def _replace(self, slot: _Slot, why: str, ended: bool = False) -> bool:
        """Actor `slot` lost to a partition (`why`): its NodeHost is killed (Ray
        ends it, and with it the node process, when its host can be reached
        again: a second fence) and the actor starts again on another node
        (`ended`: its process's exit was seen: no lease to wait out).
        False: nothing to do (a stop, or neither an actor nor a shard of its own)."""
        if self._stop.is_set() or not _movable(slot) or slot.host is None:
            return False
        node = str(slot.info.get("node_id", "?"))
        try:
            self._ray.kill(slot.host, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        slot.host = None
        slot.avoid = {node}
        self._schedule_elsewhere(slot, f"{slot.title} on Ray node {node[:8]} {why}", ended)
        return True

    def _check_lost(self, period: float = 1.0) -> None:
        """Every `period` s: the actors and shards the coordinator counts lost are replaced."""
        now = time.time()
        if self._stop.is_set() or now < self._next_lost_check:
            return
        self._next_lost_check = now + period
        lost = self._coordinator.lost()
        for name, _ in lost:
            for slot in self._slots:
                if slot.demand.name == name and slot.restart_at is None and not slot.done:
                    self._replace(slot, "was counted lost by the coordinator (cut off)")

    def _pick_node(self, slot: _Slot) -> str | None:
        """Where to start actor `slot` again: a node with room, not one it was lost
        on nor one whose actor is lost now; the learner's node last (None: Ray's choice)."""
        used: dict[str, float] = {}
        avoid = set(slot.avoid)
        learner_nodes = set()
        for s in self._slots:
            node = s.info.get("node_id")
            if s is slot or node is None:
                continue
            if s.demand.label in SERVER_LABELS:
                learner_nodes.add(node)
            if s.host is not None and not s.done:
                used[node] = used.get(node, 0.0) + s.demand.cpus
            elif _movable(s):
                avoid.update(s.avoid)
        try:
            nodes = cluster_nodes(self._ray)
        except Exception:  # noqa: BLE001 - Ray's choice then
            return None
        return pick_node(nodes, slot.demand, used, avoid, learner_nodes)

    def _process_died(self, slot: _Slot, code: int) -> bool:
        """An actor's process that died of a signal nobody sent to stop it while its
        NodeHost lives (SIGKILL, the OOM killer, a crash): schedules its restart under
        the same host (apex.restart's policy; launch.node_restarts), or past
        actor.max_restarts fails the program. False: not such a death."""
        if self._stop.is_set() or slot.demand.label != "actor" or not died_unasked(code):
            return False
        reason = f"{slot.title}'s process {death_text(code)}"
        c = self._config.actor
        slot.restarts += 1
        decision = decide_restart(
            slot.restarts,
            slot.backoff or c.restart_backoff_seconds,
            time.time() - slot.started,
            c.restart_backoff_seconds,
            c.max_restarts,
        )
        if not decision.restart:
            slot.exit_code = code
            self._fail(f"{reason}, {slot.restarts} times (actor.max_restarts={c.max_restarts})")
            return True
        slot.backoff = decision.next_backoff
        slot.restart_at = time.time() + decision.wait
        self._say(
            f"{reason}; restart {slot.restarts}/{c.max_restarts} under its NodeHost in "
            f"{decision.wait:.1f} s (same slot, counters carried on)"
        )
        return True

    def _restart(self, slot: _Slot) -> None:
        slot.restart_at = None
        if slot.host is not None:  # only its process died: start it again where it was
            try:
                self._forget(slot.demand.name)
                self._start(slot, restarted=True)
            except Exception as err:  # noqa: BLE001 - its host is gone too: the next tick says so
                self._say(f"{slot.title} could not be restarted under its NodeHost: {err}")
                self._host_died(slot, err)
                return
            self._say(f"{slot.title} restarted under its NodeHost")
            self._record_placement()
            return
        if self._fence_holds(slot) or self._shard_pending(slot):
            return
        try:
            # Soft: if Ray finds no room there after all, it chooses.
            slot.host = self._new_host(slot, self._pick_node(slot), soft=True)
            self._await_infos([slot])
            self._bind(slot)
            self._forget(slot.demand.name)  # the old process's last beats too
            self._start(slot, restarted=True)
        except Exception as err:  # noqa: BLE001 - no room anywhere: the program fails
            slot.exit_code = -1
            self._fail(f"{slot.title} could not be restarted: {err}")
            return
        node = slot.info["node_id"][:8]
        self._say(f"{slot.title} restarted on Ray node {node} ({slot.info.get('ip')})")
        if slot.demand.is_shard:
            address = compat.node_address(slot.node)
            if not self._coordinator.shard_moved(slot.demand.name, address):
                self._say(f"the coordinator was not told that {slot.title} is at {address} now")
        self._record_placement()

    def _shard_pending(self, slot: _Slot) -> bool:
        """Whether actor `slot` writes to a shard that is being started again
        elsewhere (its restart then waits for it, asked again every second: the
        new copy of the actor must dial the shard's new address)."""
        shard = slot.demand.shard
        if slot.demand.label != "actor" or shard is None:
            return False
        for s in self._slots:
            if s.demand.is_shard and s.demand.shard == shard and not s.done:
                if s.host is None or s.restart_at is not None:
                    slot.restart_at = time.time() + 1.0
                    return True
        return False

    def _forget(self, name: str) -> None:
        """Tells the coordinator the node's old beats are not a death."""
        self._coordinator.forget(name)

    def _stopping(self) -> None:
        now = time.time()
        if self._stop_sent_at is None:
            self._stop_sent_at = now
            for slot in self._slots:
                if (slot.host is None or slot.restart_at is not None) and not slot.done:
                    slot.exit_code = -1  # waiting for a restart: nothing to stop
                slot.restart_at = None
            self._signal_all(signal.SIGTERM)
        elif not self._killed and now - self._stop_sent_at > STOP_WINDOW.kill_seconds + 5.0:
            self._killed = True
            # Every thread's stack first (SIGUSR1: faulthandler, which writes even
            # while the main thread sits in C++), so that a hang is never silent;
            # then the kill. A process that has exited is not late: its host's
            # tick was (the next one brings its exit code).
            answers = {n: a for n, a in self._signal_all(signal.SIGUSR1).items() if a is not False}
            if answers:
                self._say(
                    f"nodes still running after the stop window: {still_running(answers)}; killing"
                )
                if any(answers.values()):
                    self._stop.wait(0.5)  # the handler writes at once; the kill must not beat it
                self._signal_all(signal.SIGKILL)
        elif self._killed and now - self._stop_sent_at > STOP_WINDOW.kill_seconds + 20.0:
            for slot in self._alive():  # their hosts do not answer: give up on them
                slot.exit_code = -9

    def _signal_all(self, signum: int) -> dict[str, bool | None]:
        """Sends `signum` to every live node's process; by node title, whether its
        process was running (None: its host did not answer within 10 s)."""
        ray = self._ray
        futures = {s.host.signal.remote(int(signum)): s.title for s in self._alive()}
        answers: dict[str, bool | None] = dict.fromkeys(futures.values())
        try:
            ready, _ = ray.wait(list(futures), num_returns=len(futures), timeout=10.0)
            for f in ready:
                try:
                    answers[futures[f]] = bool(ray.get(f))
                except Exception:  # noqa: BLE001 - a dead host is handled by the next tick
                    pass
        except Exception:  # noqa: BLE001 - a dead host is handled by the next tick
            pass
        return answers

    def _drain_all(self) -> list[bytes]:
        lines: list[bytes] = []
        for slot in self._slots:
            if slot.host is None:
                continue
            try:
                got, _ = self._ray.get(slot.host.tick.remote(), timeout=5)
                lines.extend(got)
            except Exception:  # noqa: BLE001 - a gone host has nothing more to say
                pass
        return lines

    def close(self) -> None:
        """Kills every NodeHost of the program (none outlives the launcher) and the
        control server."""
        for slot in self._slots:
            if slot.host is not None:
                try:
                    self._ray.get(slot.host.cleanup.remote(), timeout=5)
                except Exception:  # noqa: BLE001 - a gone host leaves its temp folder
                    pass
                try:
                    self._ray.kill(slot.host, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
                slot.host = None
        if self._control is not None:
            self._control.Stop()
            self._control = None
