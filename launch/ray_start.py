"""`--launcher=ray`'s start of a node: its NodeHost placed on the Ray node the
plan (or a restart) picks, its addresses bound to that host's IP and free
ports, its process started under the host; and RUN_DIR/placement.json, where
every node ended up. launch.ray_launch decides when; this module knows how.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from apex import ApexConfig, Demand, PlacementError, compat, write_json_atomic
from launch import node_process
from launch.node_env import PROCESS_RESTART_ENV, RESTARTED_ENV
from launch.ray_connect import RaySession
from launch.ray_host import NodeHost

PLACEMENT_FILE = "placement.json"


@dataclasses.dataclass
class Slot:
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

    @property
    def live(self) -> bool:
        """Whether its process may run: not done, and its NodeHost is there."""
        return not self.done and self.host is not None

    @property
    def movable(self) -> bool:
        """Whether its node starts again elsewhere when its host is lost: an actor,
        or a replay shard in a process of its own."""
        return self.demand.label == "actor" or self.demand.is_shard


class NodeStarter:
    """Starts program nodes on the session's cluster, each under a NodeHost of
    its own with the node's CPUs, GPUs and custom resource, its process given
    `env` (the launcher's forwarded environment and restart policy)."""

    def __init__(
        self,
        ray: Any,
        config: ApexConfig,
        session: RaySession,
        env: dict[str, str],
        tty: bool = False,
        keep_all: bool = False,
    ):
        self._ray = ray
        self._config = config
        self._session = session
        self._env = env
        self._tty = tty
        self._keep_all = keep_all
        self._remote_cls = ray.remote(NodeHost)

    def new_host(self, slot: Slot, node_id: str | None, soft: bool = False) -> Any:
        """A NodeHost for `slot` on Ray node `node_id` (None: Ray's choice; `soft`:
        elsewhere if that node has no room after all)."""
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

    def await_infos(self, slots: list[Slot]) -> None:
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

    def bind(self, slot: Slot) -> None:
        """Binds the node's addresses to its host's IP and free ports."""
        ip, ports = slot.info["ip"], slot.info["ports"]
        compat.bind_node_addresses(slot.node, [f"{ip}:{p}" for p in ports])

    def start(self, slot: Slot, restarted: bool = False) -> None:
        """Starts the node's process under its NodeHost (`restarted`: a later copy)."""
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

    def record_placement(self, slots: list[Slot]) -> None:
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
                    for s in slots
                },
            },
        )
