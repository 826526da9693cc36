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
actor starts again on any node that fits, under apex.restart's policy (the
one a local actor follows after an exception); a server node's host (the
learner's, the coordinator's) stops the program in order with "node failed".
Stops: Ctrl-C/SIGTERM on the launcher, or `lp.stop()` in a node, SIGTERM every
node process (Launchpad's orderly stop, as local_mp does), SIGKILL what is left
after the stop window, then kill every NodeHost: no Ray actor of the program
outlives the launcher (they are owned by this driver, so they die with it too).
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from apex import compat
from apex.config import ApexConfig
from apex.errors import ConfigError
from apex.heartbeat import RAY_NODE_ENV
from apex.lifecycle import STOP_WINDOW
from apex.placement import (
    SERVER_LABELS,
    ClusterNode,
    Demand,
    PlacementError,
    demands,
    describe,
    plan_placement,
)
from apex.restart import decide_restart

RAY_NAMESPACE = "apex"
PLACEMENT_FILE = "placement.json"
# The nodes that may leave a failure record (apex.supervision.record_failure) in
# the process of each program label (launch.program colocates them).
_RECORDING_NODES = {
    "coordinator": ("coordinator", "evaluator"),
    "learner": ("learner", "inference"),
}
# What the launcher passes on to node processes from its own environment.
_ENV_PREFIXES = ("APEX_", "TF_CPP_", "PYTHONWARNINGS", "PYTHONPATH")
_PALETTE = (36, 33, 32, 34, 35)


class RayUnavailableError(ConfigError):
    """Ray is missing, or the cluster cannot be reached (a bad --ray_address)."""


# ------------------------------------------------------------ the cluster
@dataclasses.dataclass
class RaySession:
    """A connection to a Ray cluster (and the simulated one it started, if any)."""

    address: str
    nodes: list[ClusterNode]
    launcher_ip: str
    free_cpus: float
    launcher_node: str = ""  # the Ray node this driver is attached to
    simulated: Any = None

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        if self.simulated is not None:
            self.simulated.shutdown()
            self.simulated = None


def _import_ray():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no phone-home prompt or upload
    try:
        import ray
    except ImportError as err:
        raise RayUnavailableError(
            "--launcher",
            "ray",
            f"Ray installed in this environment ({err}); ./scripts/setup.sh installs it "
            "(the 'ray' extra: pip install -e '.[ray]')",
        ) from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise RayUnavailableError(
            "--ray_address", address, "'auto' or HOST:PORT of a Ray cluster's head (GCS)"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise RayUnavailableError(
            "--ray_address",
            address,
            f"the address of a running Ray head; nothing answers there "
            f"({err.strerror or err}). Start one with `ray start --head` (README, "
            "'Running on a cluster') or try --ray_simulate_nodes=3",
        ) from None


class SimulatedCluster:
    """`python -m launch.ray_cluster` (Ray's multi-node simulation on this machine)
    in a session of its own: a Ctrl-C in the terminal reaches the launcher, which
    stops the program in order, and not the raylets under it. It shuts itself
    down when this process exits, however that happens."""

    def __init__(self, num_nodes: int, head_cpus: int, worker_cpus: int, timeout: float = 120.0):
        import subprocess

        from launch.ray_cluster import ADDRESS_PREFIX

        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "launch.ray_cluster",
                f"--nodes={num_nodes}",
                f"--head_cpus={head_cpus}",
                f"--worker_cpus={worker_cpus}",
                f"--parent_pid={os.getpid()}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        found: list[str] = []
        reader = threading.Thread(
            target=lambda: found.extend(
                line.strip() for line in self._proc.stdout if line.startswith(ADDRESS_PREFIX)
            ),
            daemon=True,
        )
        reader.start()
        deadline = time.time() + timeout
        while not found and self._proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        if not found:
            self.shutdown()
            err = (self._proc.stderr.read() if self._proc.stderr else "")[-2000:]
            raise RayUnavailableError(
                "--ray_simulate_nodes", num_nodes, f"a simulated cluster that starts ({err})"
            )
        self.address = found[0][len(ADDRESS_PREFIX) :]

    def shutdown(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=60)
            except Exception:  # noqa: BLE001 - it did not stop: kill it
                self._proc.kill()


def cluster_nodes(ray: Any) -> list[ClusterNode]:
    """The alive nodes of the connected cluster, as apex.placement reads them."""
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = dict(n.get("Resources", {}))
        custom = tuple(
            sorted(
                (k, float(v))
                for k, v in res.items()
                if k not in ("CPU", "GPU", "memory", "object_store_memory")
                and not k.startswith("node:")
                and not k.startswith("accelerator_type")
            )
        )
        out.append(
            ClusterNode(
                node_id=n["NodeID"],
                ip=n["NodeManagerAddress"],
                cpus=float(res.get("CPU", 0.0)),
                gpus=float(res.get("GPU", 0.0)),
                resources=custom,
                is_head="node:__internal_head__" in res,
            )
        )
    return out


def connect(address: str, simulate_nodes: int, config: ApexConfig) -> RaySession:
    """Connects to the cluster at `address` ('auto', HOST:PORT), or starts a
    simulated one of `simulate_nodes` nodes on this machine (address ignored)."""
    ray = _import_ray()
    simulated = None
    if simulate_nodes:
        if simulate_nodes < 2:
            raise RayUnavailableError(
                "--ray_simulate_nodes", simulate_nodes, "an integer >= 2 (a head and workers)"
            )
        wanted = program_demands(config)
        servers = sum(d.cpus for d in wanted if d.label in SERVER_LABELS and not d.is_shard)
        actors = sum(d.cpus for d in wanted if d.label == "actor" or d.is_shard)
        # Ray's node CPU counts are whole numbers.
        simulated = SimulatedCluster(
            simulate_nodes,
            max(math.ceil(servers), 1),
            max(math.ceil(actors / (simulate_nodes - 1)), 1),
        )
        address = simulated.address
    elif address != "auto":
        _check_reachable(address)
    import logging

    try:
        ray.init(
            address=address,
            namespace=RAY_NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
            include_dashboard=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as err:
        if simulated is not None:
            simulated.shutdown()
        if address == "auto":
            why = (
                "a Ray cluster started on this host; none is running here (start one with "
                "`.venv/bin/ray start --head`, pass --ray_address=HOST:PORT of a remote head, "
                "or try --ray_simulate_nodes=3)"
            )
        else:
            why = f"a running Ray cluster ({str(err).splitlines()[0]})"
        raise RayUnavailableError("--ray_address", address, why) from None
    nodes = cluster_nodes(ray)
    free = float(ray.available_resources().get("CPU", 0.0))
    return RaySession(
        address=address,
        nodes=nodes,
        launcher_ip=ray.util.get_node_ip_address(),
        free_cpus=free,
        launcher_node=ray.get_runtime_context().get_node_id(),
        simulated=simulated,
    )


def program_shape(config: ApexConfig) -> list[tuple[str, int]]:
    """The program's node groups as launch.program builds them: [(label, count)]."""
    groups = [("learner", 1)]
    shards = int(config.replay.num_shards)
    if not config.replay.colocate_with_learner:
        groups.insert(0, ("replay", shards))
    elif shards > 1:  # shard 0 is in the learner's process; the others are nodes
        groups.append(("replay", shards - 1))
    groups.append(("coordinator", 1))
    if config.model_store.enabled:
        groups.append(("model_store", 1))
    groups.append(("actor", config.actor.num_actors))
    return groups


def program_demands(config: ApexConfig) -> list[Demand]:
    """What each node of `config`'s program asks of the cluster (apex.placement.demands)."""
    first = 1 if config.replay.colocate_with_learner else 0
    return demands(config.cluster, program_shape(config), config.replay.num_shards, first)


def plan(config: ApexConfig, session: RaySession) -> tuple[dict[str, str], list[Demand]]:
    """Placement of `config`'s program on the session's cluster (PlacementError if
    it does not fit: raised before anything starts)."""
    wanted = program_demands(config)
    placement = plan_placement(session.nodes, wanted, session.launcher_ip, session.free_cpus)
    return placement, wanted


# ------------------------------------------------------------ node hosts
class NodeHost:
    """A Ray actor that runs one program node as a process of its own on its
    Ray node and hands its output (whole, filtered lines) to the launcher."""

    def __init__(self, title: str, colour: int, tty: bool, keep_all: bool):
        from apex.output import LineFilter

        self.title = title
        self._filter = LineFilter(f"[{title}] ", colour, tty=tty, keep_all=keep_all)
        self._lines: deque[bytes] = deque(maxlen=20_000)
        self._lock = threading.Lock()
        self._proc: Any = None
        self._reader: threading.Thread | None = None
        self._dir = tempfile.mkdtemp(prefix="apex-node-")

    def __repr__(self) -> str:  # Ray names the actor's log lines by it
        return self.title

    def info(self, num_ports: int) -> dict[str, Any]:
        """Where this host is, and `num_ports` free ports on it."""
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "ports": free_ports(num_ports),
        }

    def start(self, payload: bytes, argv_tail: list[str], env: dict[str, str]) -> int:
        """Starts the node process; returns its pid."""
        import subprocess

        import ray

        from launch.nodes import LAUNCHER_PID_ENV

        path = os.path.join(self._dir, "job.pkl")
        with open(path, "wb") as f:
            f.write(payload)
        full_env = dict(os.environ)
        full_env.update(env)
        full_env.update(
            {
                LAUNCHER_PID_ENV: str(os.getpid()),  # the node stops itself if this host dies
                RAY_NODE_ENV: ray.get_runtime_context().get_node_id(),
                "PYTHONUNBUFFERED": "1",
            }
        )
        # The node writes to a file, not a pipe to this host: if this host dies
        # first, the node's writes still succeed while it stops itself in order
        # (a broken pipe would raise in whichever of its threads printed).
        self.log_path = os.path.join(self._dir, "output.log")
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, *argv_tail, path],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                stdin=subprocess.DEVNULL,
            )
        self._reader = threading.Thread(target=self._read, name="node-output", daemon=True)
        self._reader.start()
        return self._proc.pid

    def _read(self) -> None:
        """Follows the node's output file until the node has exited and all of it
        is read."""
        with open(self.log_path, "rb") as f:
            while True:
                data = f.read(65536)
                if data:
                    batch = self._filter.feed(data)
                    with self._lock:
                        self._lines.extend(batch)
                    continue
                if self._proc.poll() is not None:
                    data = f.read()
                    if not data:
                        break
                    continue
                time.sleep(0.1)  # tailing a file: nothing new yet
        with self._lock:
            self._lines.extend(self._filter.flush())

    def cleanup(self) -> None:
        """Removes this host's files (the node's job and output) once it has exited."""
        import shutil

        if self._proc is None or self._proc.poll() is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def tick(self) -> tuple[list[bytes], int | None]:
        """(output lines since the last tick, the exit code once the node has
        exited and its output is all read; None while it runs)."""
        code = None if self._proc is None else self._proc.poll()
        if code is not None and self._reader is not None:
            self._reader.join(timeout=2.0)
        with self._lock:
            lines = list(self._lines)
            self._lines.clear()
        return lines, code

    def signal(self, signum: int) -> bool:
        """Sends `signum` to the node process; False if it has exited."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        self._proc.send_signal(signum)
        return True


# ----------------------------------------------------------- the launcher
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
        import courier

        courier.Client(self.address, call_timeout=10).stop_program()


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

    @property
    def done(self) -> bool:
        return self.exit_code is not None


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
        self._ray = _import_ray()
        self._config = config
        self._session = session
        self._placement = placement
        self._out = out
        self._tty = tty
        self._keep_all = keep_all
        self.failure: str | None = None
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
        self._env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
        self._coordinator_address: str | None = None

    # -------------------------------------------------------------- start
    def _new_host(self, slot: _Slot, node_id: str | None) -> Any:
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
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
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
        payload, argv_tail = compat.node_entry(slot.node)
        env = dict(self._env)
        if restarted:
            from launch.nodes import RESTARTED_ENV

            env[RESTARTED_ENV] = "1"
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
                self._coordinator_address = f"{slot.info['ip']}:{slot.info['ports'][0]}"
        for slot in self._slots:
            self._start(slot)
        self._record_placement()

    def _record_placement(self) -> None:
        """RUN_DIR/placement.json: the Ray node, IP and host pid of every program
        node and the launcher's own Ray node (tools and tests read it)."""
        run_dir = self._config.run_dir
        if not run_dir:
            return
        from apex.jsonio import write_json_atomic

        write_json_atomic(
            os.path.join(run_dir, PLACEMENT_FILE),
            {
                "ray_address": self._session.address,
                "launcher_node": self._session.launcher_node,
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
        return describe(hosts, self._session.nodes)

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
        slots = self._alive()
        futures = {s.host.tick.remote(): s for s in slots}
        deadline = time.time() + max(period, 0.05)
        ready, _ = ray.wait(list(futures), num_returns=len(futures), timeout=10.0)
        for f in ready:
            slot = futures[f]
            try:
                lines, code = ray.get(f)
            except ray.exceptions.RayActorError as err:
                self._host_died(slot, err)
                continue
            self._out(lines)
            if code is not None:
                slot.exit_code = code
                if code != 0 and not self._stop.is_set():
                    self._fail(self._exit_reason(slot, code))
        for slot in self._slots:
            if slot.restart_at is not None and time.time() >= slot.restart_at:
                self._restart(slot)
        left = deadline - time.time()
        if left > 0:
            self._stop.wait(left)

    def _exit_reason(self, slot: _Slot, code: int) -> str:
        """'<node> exited with code N', with the exception a node of its process
        recorded (RUN_DIR/failures, on this host) when there is one."""
        from apex.supervision import recorded_failure

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
        self._stop.set()

    def _host_died(self, slot: _Slot, err: Exception) -> None:
        node = slot.info.get("node_id", "?")[:8]
        reason = f"{slot.title}'s Ray worker or node ({node}) died"
        slot.host = None
        if self._stop.is_set():
            slot.exit_code = -1
            return
        if slot.demand.label != "actor":
            slot.exit_code = -1
            self._fail(f"{reason}: {type(err).__name__}")
            return
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
            return
        slot.backoff = decision.next_backoff
        slot.restart_at = time.time() + decision.wait
        self._say(
            f"{reason}; restart {slot.restarts}/{c.max_restarts} on any node that fits in "
            f"{decision.wait:.1f} s"
        )

    def _restart(self, slot: _Slot) -> None:
        slot.restart_at = None
        try:
            slot.host = self._new_host(slot, None)  # any node with its CPUs and resource
            self._await_infos([slot])
            self._bind(slot)
            self._forget(slot.demand.name)  # the old process's last beats too
            self._start(slot, restarted=True)
        except Exception as err:  # noqa: BLE001 - no room anywhere: the program fails
            slot.exit_code = -1
            self._fail(f"{slot.title} could not be restarted: {err}")
            return
        node = slot.info["node_id"][:8]
        self._say(f"{slot.title} restarted on Ray node {node}")
        self._record_placement()

    def _forget(self, name: str) -> None:
        """Tells the coordinator the node's old beats are not a death."""
        if self._coordinator_address is None:
            return
        try:
            import courier

            courier.Client(self._coordinator_address, call_timeout=5).forget_node(name)
        except Exception:  # noqa: BLE001 - the coordinator judges by its own beats then
            pass

    def _stopping(self) -> None:
        now = time.time()
        if self._stop_sent_at is None:
            self._stop_sent_at = now
            for slot in self._slots:
                if slot.host is None and not slot.done:
                    slot.exit_code = -1  # waiting for a restart: nothing to stop
                slot.restart_at = None
            self._signal_all(signal.SIGTERM)
        elif not self._killed and now - self._stop_sent_at > STOP_WINDOW.kill_seconds + 5.0:
            self._killed = True
            names = ", ".join(s.title for s in self._alive())
            self._say(f"nodes still running after the stop window: {names}; killing")
            self._signal_all(signal.SIGKILL)
        elif self._killed and now - self._stop_sent_at > STOP_WINDOW.kill_seconds + 20.0:
            for slot in self._alive():  # their hosts do not answer: give up on them
                slot.exit_code = -9

    def _signal_all(self, signum: int) -> None:
        ray = self._ray
        futures = [s.host.signal.remote(int(signum)) for s in self._alive()]
        try:
            ray.wait(futures, num_returns=len(futures), timeout=10.0)
        except Exception:  # noqa: BLE001 - a dead host is handled by the next tick
            pass

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


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on this host now (all held open while picked)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()
