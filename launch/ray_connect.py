"""`--launcher=ray`'s connection: to a Ray cluster (or one simulated on this
machine, launch.ray_cluster), what it has, and the program's placement on it."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import subprocess
import sys
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


def plan(config: ApexConfig, session: RaySession) -> tuple[dict[str, str], list[Demand]]:
    """Placement of `config`'s program on the session's cluster (PlacementError if
    it does not fit: raised before anything starts)."""
    wanted = program_demands(config)
    placement = plan_placement(session.nodes, wanted, session.launcher_ip, session.free_cpus)
    return placement, wanted


def open_session(
    config: ApexConfig, address: str, simulate_nodes: int
) -> tuple[RaySession, tuple[dict[str, str], list[Demand]]]:
    """Connects (`connect`) and plans the placement (`plan`) before anything is
    created, with the learner on this host (the run directory is written there).
    Returns (the session, (placement, demands)); a refusal shuts the session down."""
    session = connect(address, simulate_nodes, config)
    try:
        placement, wanted = plan(config, session)
        home = next(n for n in session.nodes if n.node_id == placement["learner"])
        if home.ip != session.launcher_ip:
            raise PlacementError(
                f"the learner's node {home.short} is not this host ({session.launcher_ip}); "
                "start the launcher on the learner's host: the run directory is written there"
            )
    except BaseException:
        session.shutdown()
        raise
    return session, (placement, wanted)
