"""`--launcher=ray`'s connection: to a Ray cluster (or one simulated on this
machine, launch.ray_cluster), what it has, and the program's placement on it."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from apex import (
    SERVER_LABELS,
    ApexConfig,
    ClusterNode,
    ConfigError,
    Demand,
    PlacementError,
    plan_placement,
)
from launch.ray_cluster import ADDRESS_PREFIX
from launch.ray_plan import program_demands

RAY_NAMESPACE = "apex"


class RayUnavailableError(ConfigError):
    """Ray is missing, or the cluster cannot be reached (a bad --ray_address)."""


@dataclasses.dataclass
class RaySession:
    """A connection to a Ray cluster (and the simulated one it started, if any)."""

    address: str
    nodes: list[ClusterNode]
    launcher_ip: str
    free_cpus: float
    launcher_node: str = ""  # the Ray node this driver is attached to
    simulated: Any = None
    launcher_ip_source: str = "Ray's choice"  # how launcher_ip was chosen (NodeAddress.source)

    def shutdown(self) -> None:
        # Deferred: Ray is optional (the 'ray' extra); import_ray says when it is missing.
        import ray

        ray.shutdown()
        if self.simulated is not None:
            self.simulated.shutdown()
            self.simulated = None


def import_ray() -> Any:
    """The `ray` module (RayUnavailableError if Ray is not installed)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no phone-home prompt or upload
    try:
        import ray  # optional (the 'ray' extra): refused below when missing
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


# ------------------------------------------------------ the driver's own node
@dataclasses.dataclass(frozen=True)
class NodeAddress:
    """The address the launcher's Ray driver attaches to (`ip`, None: Ray's own
    choice) and how it was chosen (`source`, for the launch line and placement.json)."""

    ip: str | None
    source: str


def route_ip(host: str, port: int = 6379) -> str | None:
    """The address of this host that routes to `host` (the source address the
    kernel picks for it: a UDP socket's connect sends nothing); None when no
    route goes there or `host` does not resolve."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, int(port)))
            return str(s.getsockname()[0])
    except (OSError, ValueError):
        return None


def local_raylet_ips() -> set[str]:
    """The node addresses of the Ray nodes running on this host (their raylets'
    --node_ip_address): the addresses a driver here can attach to."""
    try:
        import psutil  # a dependency of apex (pyproject.toml)
    except ImportError:
        return set()
    found = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] != "raylet":
                continue
            for arg in proc.info["cmdline"] or ():
                if arg.startswith("--node_ip_address="):
                    found.add(arg.split("=", 1)[1])
        except (psutil.Error, TypeError):
            continue
    return found


def head_address(address: str) -> str | None:
    """HOST:PORT of the head `address` names: itself, or for 'auto' the
    RAY_ADDRESS variable or the address `ray start` recorded on this host
    (Ray's own file, <tmp>/ray/ray_current_cluster); None if neither."""
    if address != "auto":
        return address
    env = os.environ.get("RAY_ADDRESS", "")
    if env and env != "auto":
        return env
    try:
        with open(os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def check_node_ip(value: str) -> str:
    """`--ray_node_ip`, validated: an IP address of this host (ConfigError if not)."""
    try:
        ip = str(ipaddress.ip_address(value.strip()))
    except ValueError:
        raise ConfigError(
            "--ray_node_ip",
            value,
            "an IP address of this host (e.g. 10.0.0.5), or '' for the "
            "address that routes to the Ray head",
        ) from None
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((ip, 0))
    except OSError as err:
        raise ConfigError(
            "--ray_node_ip", value, f"an address of one of this host's interfaces ({err.strerror})"
        ) from None
    return ip


def choose_node_ip(address: str, flag: str = "", raylets: set[str] | None = None) -> NodeAddress:
    """The address the launcher's driver attaches to Ray with (`_node_ip_address`).

    A driver attaches to the Ray node on its host with that address. Left to
    Ray, on a host whose hostname several Ray nodes share (network namespaces,
    containers) or whose default route leaves by another interface than the
    cluster's (cloud VMs, InfiniBand), it may attach to another node's raylet,
    and the launcher would think it runs there. In order:

    1. `flag` (--ray_node_ip), validated (an address of this host; a Ray node
       must run on it);
    2. the address that routes to the head (`route_ip`), if a Ray node runs on it;
    3. the one address of the Ray nodes on this host, if there is one;
    4. Ray's own choice (None).

    raylets: the addresses of this host's Ray nodes (default: local_raylet_ips()).

    Example:
        >>> choose_node_ip("10.77.0.11:6379", raylets={"10.77.0.11", "10.77.0.12"}).source
        'routes to the head 10.77.0.11'
    """
    if raylets is None:
        raylets = local_raylet_ips()
    if flag:
        ip = check_node_ip(flag)
        if raylets and ip not in raylets:
            raise ConfigError(
                "--ray_node_ip",
                flag,
                f"the address of a Ray node on this host ({', '.join(sorted(raylets))}); start "
                f"one with `ray start --node-ip-address={ip} ...`",
            )
        return NodeAddress(ip, "--ray_node_ip")
    head = head_address(address)
    if head:
        host, _, port = head.rpartition(":")
        routed = route_ip(host, int(port)) if port.isdigit() and host else None
        if routed and routed in raylets and not ipaddress.ip_address(routed).is_loopback:
            return NodeAddress(routed, f"routes to the head {host}")
    if len(raylets) == 1:
        only = next(iter(raylets))
        return NodeAddress(only, "the one Ray node on this host")
    return NodeAddress(None, "Ray's choice")


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


def connect(address: str, simulate_nodes: int, config: ApexConfig, node_ip: str = "") -> RaySession:
    """Connects to the cluster at `address` ('auto', HOST:PORT), or starts a
    simulated one of `simulate_nodes` nodes on this machine (address ignored).
    The driver attaches to the Ray node `choose_node_ip` picks (node_ip: the
    --ray_node_ip flag, '' to choose by the route to the head)."""
    if node_ip:
        check_node_ip(node_ip)  # refused before Ray is imported
    ray = import_ray()
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
    try:
        chosen = choose_node_ip(address, node_ip)
    except ConfigError:
        if simulated is not None:
            simulated.shutdown()
        raise
    extra = {} if chosen.ip is None else {"_node_ip_address": chosen.ip}
    try:
        ray.init(
            address=address,
            namespace=RAY_NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
            include_dashboard=False,
            **extra,
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
        launcher_ip_source=chosen.source,
    )


def plan(config: ApexConfig, session: RaySession) -> tuple[dict[str, str], list[Demand]]:
    """Placement of `config`'s program on the session's cluster (PlacementError if
    it does not fit: raised before anything starts)."""
    wanted = program_demands(config)
    placement = plan_placement(session.nodes, wanted, session.launcher_ip, session.free_cpus)
    return placement, wanted


def open_session(
    config: ApexConfig, address: str, simulate_nodes: int, node_ip: str = ""
) -> tuple[RaySession, tuple[dict[str, str], list[Demand]]]:
    """Connects (`connect`) and plans the placement (`plan`) before anything is
    created, with the learner on this host (the run directory is written there).
    Returns (the session, (placement, demands)); a refusal shuts the session down."""
    session = connect(address, simulate_nodes, config, node_ip)
    try:
        placement, wanted = plan(config, session)
        home = next(n for n in session.nodes if n.node_id == placement["learner"])
        if home.ip != session.launcher_ip:
            raise PlacementError(
                f"the learner's node {home.short} is not this host ({session.launcher_ip}, "
                f"{session.launcher_ip_source}); start the launcher on the learner's host (the "
                "run directory is written there), or name this host's Ray address with "
                "--ray_node_ip"
            )
    except BaseException:
        session.shutdown()
        raise
    return session, (placement, wanted)
