"""What the Ray launcher asks the coordinator about lost actors and replay
shards, and where it starts one again (apex.fence has the lease and
why it fences).

An actor is started again elsewhere when Ray reports its NodeHost dead, when
its process fenced itself (exit FENCED_EXIT_CODE), or when the coordinator
counts it lost (silent past its lease; `lost_nodes`); a replay shard in a
process of its own when the coordinator counts it lost. Every time, the
launcher first calls the coordinator's `fence_node`, which refuses the old
copy's beats from then on and says how long the last lease granted to it may
still hold; the new copy starts only after that. A shard's new copy listens
at a new address: the launcher tells the coordinator (`shard_moved`), which
tells the shard's clients (apex.coordination.moves).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apex import ClusterNode, Demand, fence


class CoordinatorLink:
    """The launcher's calls to the coordinator (courier, bounded timeouts)."""

    def __init__(self, lease_seconds: float):
        self.address: str | None = None
        self.lease_seconds = float(lease_seconds)
        self._clients: dict[str, Any] = {}

    def _client(self) -> Any:
        """One client per address (the launcher asks every second)."""
        client = self._clients.get(self.address)
        if client is None:
            import courier  # deferred: Launchpad's gRPC client, needed only here

            client = self._clients[self.address] = courier.Client(self.address, call_timeout=5)
        return client

    def forget(self, name: str) -> None:
        """Tells the coordinator the node's old beats are not a death."""
        if self.address is None:
            return
        try:
            self._client().forget_node(name)
        except Exception:  # noqa: BLE001 - the coordinator judges by its own beats then
            pass

    def lost(self) -> list[tuple[str, str]]:
        """[(node, incarnation)] the coordinator counts lost ([] if it does not answer)."""
        if self.address is None or self.lease_seconds <= 0:
            return []
        try:
            return [(str(n), str(i)) for n, i in self._client().lost_nodes()]
        except Exception:  # noqa: BLE001 - asked again at the next round
            return []

    def shard_moved(self, name: str, address: str, tries: int = 5) -> bool:
        """Tells the coordinator shard `name` listens at `address` now; whether it
        heard (asked up to `tries` times: until it has, the shard's clients keep
        dialling the old address)."""
        for _ in range(max(1, tries)):
            if self.address is None:
                return False
            try:
                self._client().shard_moved(name, address)
                return True
            except Exception:  # noqa: BLE001 - asked again
                continue
        return False

    def fence(self, name: str) -> float:
        """Fences every copy of `name` seen so far; returns the seconds to wait before
        its new copy starts (the whole lease and margin when the coordinator does
        not answer: the old copy's lease has surely run out by then)."""
        if self.lease_seconds <= 0:
            return 0.0
        if self.address is not None:
            try:
                return max(0.0, float(self._client().fence_node(name)))
            except Exception:  # noqa: BLE001 - assume the longest lease
                pass
        return fence.lost_after(self.lease_seconds)


def pick_node(
    nodes: Iterable[ClusterNode],
    demand: Demand,
    used: dict[str, float],
    avoid: set[str],
    last: set[str] = frozenset(),
) -> str | None:
    """The node to start an actor again on: one with its resource and room for
    its CPUs (`used`: CPUs the program's nodes take on each node), not in
    `avoid` (the lost copy's node, nodes whose actors are silent), nodes in
    `last` (the learner's) only when no other fits; the one with the most room.
    None: none fits (Ray chooses).

    Example:
        >>> a = ClusterNode("a", "10.0.0.2", 2.0, resources=(("apex_actor", 1.0),))
        >>> b = ClusterNode("b", "10.0.0.3", 2.0, resources=(("apex_actor", 1.0),))
        >>> d = Demand("actor", 0, 1.0, resource="apex_actor")
        >>> pick_node([a, b], d, used={"a": 1.0, "b": 1.0}, avoid={"a"})
        'b'
        >>> pick_node([a, b], d, used={"a": 1.0, "b": 2.0}, avoid={"a"}) is None
        True
    """
    best, best_room = None, -1.0
    for rank in (0, 1):
        for n in nodes:
            if (
                n.node_id in avoid
                or (n.node_id in last) != bool(rank)
                or not n.has(demand.resource)
            ):
                continue
            room = n.cpus - used.get(n.node_id, 0.0)
            if room + 1e-9 >= demand.cpus and room > best_room:
                best, best_room = n.node_id, room
        if best is not None:
            return best
    return None
