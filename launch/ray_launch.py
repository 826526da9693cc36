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
launch.ray_start (a node placed, bound and started), launch.ray_replace (the
coordinator's word on lost nodes, and where one starts again), launch.ray_stop
(the stop in order), and here `RayLauncher`, which runs the program on them:
it watches every node and restarts the ones that may start again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from apex import (
    SERVER_LABELS,
    ApexConfig,
    Demand,
    compat,
    decide_restart,
    describe_placement,
    fence,
    recorded_failure,
)
from launch.node_env import FORWARDED_ENV_PREFIXES
from launch.node_restarts import death_text, died_unasked, policy_env
from launch.ray_connect import RaySession, cluster_nodes, import_ray
from launch.ray_host import free_ports
from launch.ray_replace import CoordinatorLink, pick_node
from launch.ray_start import NodeStarter, Slot
from launch.ray_stop import StopControl, Stopping, StopViaLauncher, drain_all, kill_hosts

# The nodes that may leave a failure record (apex.supervision.record_failure) in
# the process of each program label (launch.program colocates them).
_RECORDING_NODES = {
    "coordinator": ("coordinator", "evaluator"),
    "learner": ("learner", "inference"),
}


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
        self.failure: str | None = None
        self.failure_time: float | None = None  # when it was seen (Unix time)
        self._stop = threading.Event()
        by_node = {(d.label, d.index): d for d in wanted}
        self._slots: list[Slot] = []
        colours = compat.NODE_COLOURS
        for label, nodes in compat.program_groups(program):
            for index, node in enumerate(nodes):
                colour = colours[len(self._slots) % len(colours)]
                demand = by_node[(label, index)]
                title = demand.name if demand.is_shard else f"{label}/{index}"
                self._slots.append(Slot(demand, node, title, colour))
        self._control_port = free_ports(1)[0]
        self._control = compat.courier_server(StopControl(self.request_stop), self._control_port)
        self._control_address = f"{session.launcher_ip}:{self._control_port}"
        compat.prepare_nodes(program, StopViaLauncher(self._control_address))
        env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}
        env.update(policy_env(config))  # dead actors come back: the coordinator waits
        lease = config.cluster.actor_lost_after_seconds
        if not lease or config.logging.heartbeat_period_seconds <= 0:
            lease = 0.0  # no beats, no lease: lost actors are not replaced
        if lease:
            env[fence.LEASE_ENV] = f"{lease:g}"  # actors hold leases; lost ones are replaced
        self._nodes = NodeStarter(self._ray, config, session, env, tty, keep_all)
        # time.sleep, not the stop event: that is set by now and would not wait
        self._stopping = Stopping(self._ray, self._slots, self._say, time.sleep)
        self._coordinator = CoordinatorLink(lease)
        self._next_lost_check = 0.0

    # -------------------------------------------------------------- start
    def start(self) -> None:
        """Places every node, binds every address, starts every node process."""
        for slot in self._slots:
            slot.host = self._nodes.new_host(slot, self._placement[slot.demand.name])
        self._nodes.await_infos(self._slots)
        for slot in self._slots:  # every address first: nodes pickle their peers' handles
            self._nodes.bind(slot)
            if slot.demand.label == "coordinator":
                self._coordinator.address = f"{slot.info['ip']}:{slot.info['ports'][0]}"
        for slot in self._slots:
            self._nodes.start(slot)
        self._nodes.record_placement(self._slots)

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
                    self._stopping.step()
        finally:
            self._out(drain_all(self._ray, self._slots))
            self.close()

    def _tick(self, period: float) -> None:
        ray = self._ray
        # Not one waiting to restart.
        slots = [s for s in self._slots if s.live and s.restart_at is None]
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

    def _exit_reason(self, slot: Slot, code: int) -> str:
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

    def _host_died(self, slot: Slot, err: Exception) -> None:
        node = slot.info.get("node_id", "?")[:8]
        reason = f"{slot.title}'s Ray worker or node ({node}) died"
        slot.host = None
        if self._stop.is_set():
            slot.exit_code = -1
            return
        if not slot.movable:
            slot.exit_code = -1
            self._fail(f"{reason}: {type(err).__name__}")
            return
        slot.avoid = {str(slot.info.get("node_id"))}
        self._schedule_elsewhere(slot, reason)

    def _schedule_elsewhere(self, slot: Slot, reason: str, ended: bool = False) -> bool:
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

    def _fence_holds(self, slot: Slot) -> bool:
        """Whether the old copy of `slot` may still hold a lease (then its restart
        waits: asked again every second, never past `fence_until`)."""
        left = slot.fence_until - time.monotonic()
        if left <= 0 or self._coordinator.fence(slot.demand.name) <= 0:
            return False
        slot.restart_at = time.time() + min(1.0, left)
        return True

    def _replace(self, slot: Slot, why: str, ended: bool = False) -> bool:
        """Actor `slot` lost to a partition (`why`): its NodeHost is killed (Ray
        ends it, and with it the node process, when its host can be reached
        again: a second fence) and the actor starts again on another node
        (`ended`: its process's exit was seen: no lease to wait out).
        False: nothing to do (a stop, or neither an actor nor a shard of its own)."""
        if self._stop.is_set() or not slot.movable or slot.host is None:
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

    def _pick_node(self, slot: Slot) -> str | None:
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
            if s.live:
                used[node] = used.get(node, 0.0) + s.demand.cpus
            elif s.movable:
                avoid.update(s.avoid)
        try:
            nodes = cluster_nodes(self._ray)
        except Exception:  # noqa: BLE001 - Ray's choice then
            return None
        return pick_node(nodes, slot.demand, used, avoid, learner_nodes)

    def _process_died(self, slot: Slot, code: int) -> bool:
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

    def _restart(self, slot: Slot) -> None:
        slot.restart_at = None
        if slot.host is not None:  # only its process died: start it again where it was
            try:
                self._forget(slot.demand.name)
                self._nodes.start(slot, restarted=True)
            except Exception as err:  # noqa: BLE001 - its host is gone too: the next tick says so
                self._say(f"{slot.title} could not be restarted under its NodeHost: {err}")
                self._host_died(slot, err)
                return
            self._say(f"{slot.title} restarted under its NodeHost")
            self._nodes.record_placement(self._slots)
            return
        if self._fence_holds(slot) or self._shard_pending(slot):
            return
        try:
            # Soft: if Ray finds no room there after all, it chooses.
            slot.host = self._nodes.new_host(slot, self._pick_node(slot), soft=True)
            self._nodes.await_infos([slot])
            self._nodes.bind(slot)
            self._forget(slot.demand.name)  # the old process's last beats too
            self._nodes.start(slot, restarted=True)
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
        self._nodes.record_placement(self._slots)

    def _shard_pending(self, slot: Slot) -> bool:
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

    def close(self) -> None:
        """Kills every NodeHost of the program (none outlives the launcher) and the
        control server."""
        kill_hosts(self._ray, self._slots)
        if self._control is not None:
            self._control.Stop()
            self._control = None
