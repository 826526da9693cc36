"""Where each node of a program goes on a Ray cluster, as a pure function.

`plan_placement(nodes, demands, cluster)` takes the cluster's nodes (what Ray
reports: id, IP, CPUs, GPUs, custom resources) and what each program node asks
for (apex.config.ClusterConfig), and returns a node id for every program node,
or raises PlacementError naming what is missing before anything starts.

The rules (ClusterConfig's docstring says them to users):
  - learner, replay, coordinator (with the evaluator): one node, the "learner's
    node": it has `learner_resource` and `learner_gpus` when they are asked for,
    and CPUs for all three. Among the nodes that fit, the launcher's own host
    comes first (the run directory is written there), then the head node.
  - replay shards (replay.num_shards > 1; apex.replay.shards) that are nodes of
    their own: spread over the nodes other than the learner's (those actors may
    use), each to the node with the most CPUs left, onto the learner's node
    only when the others are full. Shard 0 colocated with the learner stays
    with it.
  - actors: spread over the nodes other than the learner's (those with
    `actor_resource` when it is set), each to the node with the most CPUs left;
    the learner's node takes actors only when the others are full (and only
    when it has `actor_resource`, if that is set). An actor goes to the node of
    the shard it writes to (actor i -> shard i % S) when that node is one of
    those and has room: its inserts then stay on its host.

CPU counts are Ray's logical CPUs; a node's free CPUs are its total less what
this plan gives out (Ray itself refuses what another job already holds: the
launcher waits at most cluster.start_timeout_seconds and names what is pending).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from apex.config.schema import ClusterConfig
from apex.errors import ApexError

# How much of a custom resource each node asks for: the resource marks the
# nodes a kind of node may use; it does not count them.
RESOURCE_UNIT = 0.001

# Program node labels (launch.program) and the cluster field of their CPUs.
SERVER_LABELS = ("learner", "replay", "coordinator", "model_store")


class PlacementError(ApexError):
    """The program does not fit the cluster; the message names what is missing."""


@dataclasses.dataclass(frozen=True)
class ClusterNode:
    """One alive Ray node, as the launcher read it from `ray.nodes()`."""

    node_id: str
    ip: str
    cpus: float
    gpus: float = 0.0
    resources: tuple[tuple[str, float], ...] = ()
    is_head: bool = False

    def has(self, resource: str | None) -> bool:
        return resource is None or dict(self.resources).get(resource, 0.0) > 0

    @property
    def short(self) -> str:
        return f"{self.node_id[:8]} ({self.ip})"


@dataclasses.dataclass(frozen=True)
class Demand:
    """What one program node asks of the cluster."""

    label: str  # the program group: learner, replay, coordinator, actor
    index: int
    cpus: float
    gpus: float = 0.0
    resource: str | None = None
    shard: int | None = None
    """A replay shard's number (replay.num_shards > 1), or the shard an actor writes to."""

    @property
    def name(self) -> str:
        if self.label == "actor":
            return f"actor_{self.index}"
        if self.label == "replay" and self.shard is not None:
            return f"replay_{self.shard}"
        return self.label

    @property
    def is_shard(self) -> bool:
        return self.label == "replay" and self.shard is not None

    def ray_resources(self) -> dict[str, float]:
        return {self.resource: RESOURCE_UNIT} if self.resource else {}


def demands(
    cluster: ClusterConfig,
    groups: Sequence[tuple[str, int]],
    num_shards: int = 1,
    first_shard_node: int = 0,
) -> list[Demand]:
    """One Demand per program node; `groups` is [(label, number of nodes)].

    `num_shards` > 1: the replay group's nodes are shards `first_shard_node`,
    `first_shard_node` + 1, ... (1 when shard 0 is colocated with the learner),
    and each actor's demand names the shard it writes to."""
    sharded = int(num_shards) > 1
    out = []
    for label, count in groups:
        for i in range(count):
            if label == "learner":
                out.append(
                    Demand(
                        label,
                        i,
                        cluster.learner_cpus,
                        cluster.learner_gpus,
                        cluster.learner_resource,
                    )
                )
            elif label == "replay":
                shard = first_shard_node + i if sharded else None
                out.append(Demand(label, i, cluster.replay_cpus, shard=shard))
            elif label == "coordinator":
                out.append(Demand(label, i, cluster.coordinator_cpus))
            elif label == "model_store":
                out.append(Demand(label, i, cluster.model_store_cpus))
            elif label == "actor":
                shard = i % int(num_shards) if sharded else None
                out.append(
                    Demand(label, i, cluster.actor_cpus, 0.0, cluster.actor_resource, shard=shard)
                )
            else:
                raise PlacementError(f"no placement rule for program nodes labelled {label!r}")
    return out


def _fmt(x: float) -> str:
    return f"{x:g}"


def plan_placement(
    nodes: Sequence[ClusterNode],
    wanted: Sequence[Demand],
    launcher_ip: str = "",
    cluster_free_cpus: float | None = None,
) -> dict[str, str]:
    """{demand.name: node_id} for every demand, or PlacementError.

    Args:
      nodes: the alive Ray nodes.
      wanted: every program node's demand (`demands`).
      launcher_ip: the launcher's host; the learner's node is on it when one fits.
      cluster_free_cpus: Ray's `available_resources()['CPU']` (other jobs' use);
        None: the nodes' totals are all free.
    """
    if not nodes:
        raise PlacementError("the Ray cluster has no alive node")
    servers = [d for d in wanted if d.label in SERVER_LABELS and not d.is_shard]
    shards = [d for d in wanted if d.is_shard]
    actors = [d for d in wanted if d.label == "actor"]
    total = sum(d.cpus for d in wanted)
    if cluster_free_cpus is not None and total > cluster_free_cpus + 1e-9:
        raise PlacementError(
            f"the program needs {_fmt(total)} CPUs ({_breakdown(servers + shards, actors)}); "
            f"the cluster has {_fmt(cluster_free_cpus)} free"
        )
    learner = next((d for d in servers if d.label == "learner"), None)
    resource = learner.resource if learner else None
    gpus = learner.gpus if learner else 0.0
    server_cpus = sum(d.cpus for d in servers)
    fits = [n for n in nodes if n.has(resource) and n.gpus >= gpus and n.cpus >= server_cpus]
    if not fits:
        labels = ", ".join(dict.fromkeys(d.label for d in servers))
        need = [f"{_fmt(server_cpus)} CPUs ({labels})"]
        if gpus:
            need.append(f"{_fmt(gpus)} GPUs")
        if resource:
            need.append(f"the custom resource {resource!r} (cluster.learner_resource)")
        have = "; ".join(
            f"{n.short}: {_fmt(n.cpus)} CPUs, {_fmt(n.gpus)} GPUs, resources "
            f"{sorted(k for k, _ in n.resources) or 'none'}"
            for n in nodes
        )
        raise PlacementError(f"no node for the learner: it needs {', '.join(need)}; nodes: {have}")
    fits.sort(key=lambda n: (n.ip != launcher_ip, not n.is_head, -n.cpus, n.node_id))
    home = fits[0]
    plan = {d.name: home.node_id for d in servers}
    free = {n.node_id: n.cpus for n in nodes}
    free[home.node_id] -= server_cpus
    actor_resource = actors[0].resource if actors else None
    others = [n for n in nodes if n.node_id != home.node_id and n.has(actor_resource)]
    overflow = [home] if home.has(actor_resource) else []

    for d in shards:  # each on a host of its own where one has room
        target = _most_free(others, free, d.cpus) or _most_free([home], free, d.cpus)
        if target is None:
            raise PlacementError(
                f"no node for {d.name}: it needs {_fmt(d.cpus)} CPUs (cluster.replay_cpus); "
                f"free: {', '.join(f'{n.short}: {_fmt(free[n.node_id])}' for n in nodes)}"
            )
        plan[d.name] = target.node_id
        free[target.node_id] -= d.cpus

    if actors:
        eligible = others + overflow
        if not eligible:
            raise PlacementError(
                f"no node for actors: none has the custom resource {actor_resource!r} "
                "(cluster.actor_resource)"
            )
        spare = {n.node_id: max(free[n.node_id], 0.0) for n in eligible}
        for d in actors:
            target = None
            shard_node = plan.get(f"replay_{d.shard}") if d.shard is not None else None
            if shard_node is not None and shard_node != home.node_id:
                # Next to the shard it writes to, when that host is one actors use.
                target = _most_free([n for n in others if n.node_id == shard_node], free, d.cpus)
            target = (
                target or _most_free(others, free, d.cpus) or _most_free(overflow, free, d.cpus)
            )
            if target is None:
                where = (
                    f"the nodes with {actor_resource!r} (cluster.actor_resource) have"
                    if actor_resource
                    else "the cluster has"
                )
                per = ", ".join(f"{n.short}: {_fmt(spare[n.node_id])}" for n in eligible)
                raise PlacementError(
                    f"{len(actors)} actors x {_fmt(d.cpus)} CPUs need "
                    f"{_fmt(len(actors) * d.cpus)} CPUs; {where} {_fmt(sum(spare.values()))} "
                    f"free for actors, after the learner's node takes {_fmt(server_cpus)}"
                    + (
                        f" and the replay shards {_fmt(sum(s.cpus for s in shards))}"
                        if shards
                        else ""
                    )
                    + f" ({per})"
                )
            plan[d.name] = target.node_id
            free[target.node_id] -= d.cpus
    return plan


def _most_free(candidates: Sequence[ClusterNode], free: dict[str, float], cpus: float):
    best = None
    for n in candidates:
        if free[n.node_id] + 1e-9 >= cpus and (
            best is None or free[n.node_id] > free[best.node_id]
        ):
            best = n
    return best


def _breakdown(servers: Sequence[Demand], actors: Sequence[Demand]) -> str:
    parts = [f"{d.name} {_fmt(d.cpus)}" for d in servers]
    if actors:
        parts.append(f"{len(actors)} actors x {_fmt(actors[0].cpus)}")
    return ", ".join(parts)


def describe(plan: dict[str, str], nodes: Sequence[ClusterNode]) -> str:
    """One line per Ray node: which program nodes it holds."""
    by_node: dict[str, list[str]] = {}
    for name, node_id in plan.items():
        by_node.setdefault(node_id, []).append(name)
    lines = []
    for n in nodes:
        names = by_node.get(n.node_id)
        if names:
            lines.append(f"{n.short}: {', '.join(names)}")
    return "; ".join(lines)
