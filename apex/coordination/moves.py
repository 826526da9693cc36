"""Replay shards lost to a partition and started again on another host:
what the coordinator tells the nodes that talk to a moved shard, and what the
moves cost.

A shard in a process of its own on another host holds a lease as an actor does
(apex.fence). Cut off past cluster.actor_lost_after_seconds it stops itself
(fenced); the coordinator counts it lost 5 s later, with the items its last
figures held, and the Ray launcher starts it again, empty, on a host that can
reach the program (launch.ray_launch). The new copy listens on another address.
The launcher says which (`Coordinator.shard_moved`); from then on every beat
reply tells the nodes that dial the shard where it is now:

- the learner's: {'shards': {'replay_1': 'HOST:PORT', ...}} (every moved shard;
  the learner samples it, sends its priority updates and checkpoints it there);
- an actor's that writes to a moved shard: {'replay_address': 'HOST:PORT'} (its
  writer, waiting on the old address, takes a new stream to this one).

The coordinator's own replay figures follow too (apex.coordination.replay_poll),
and RUN_DIR/replay_addresses is written again for the tools.
"""

from __future__ import annotations

import threading
from typing import Any

from apex.replay.shards import shard_of_actor
from apex.roles import ACTOR_PREFIX, SHARD_PREFIX


class ShardMoves:
    """The shards counted lost, where each moved one listens now, and the items lost.

    Args:
      num_shards: replay.num_shards.

    Example:
        >>> m = ShardMoves(num_shards=2)
        >>> m.lost("replay_1", items=1200); m.lost("replay_1", items=1300)  # counted once
        >>> m.being_replaced
        ['replay_1']
        >>> m.moved("replay_1", "10.0.0.3:9001")
        >>> m.reply_for("learner"), m.reply_for("actor_3"), m.reply_for("actor_2")
        ({'shards': {'replay_1': '10.0.0.3:9001'}}, {'replay_address': '10.0.0.3:9001'}, {})
        >>> m.figures()
        {'shards_lost': 1, 'items_lost_with_shards': 1200, 'shards_moved': {'replay_1': '10.0.0.3:9001'}}
    """

    def __init__(self, num_shards: int):
        self.num_shards = int(num_shards)
        self._lock = threading.Lock()
        self._addresses: dict[str, str] = {}  # moved shard -> where it listens now
        self._pending: set[str] = set()  # counted lost, its new copy not yet started
        self.shards_lost = 0
        self.items_lost = 0

    def lost(self, name: str, items: int) -> None:
        """Shard `name` was counted lost holding `items` items (its last figures);
        once until its new copy has started (`moved`)."""
        with self._lock:
            if name in self._pending:
                return
            self._pending.add(name)
            self.shards_lost += 1
            self.items_lost += max(0, int(items))

    def moved(self, name: str, address: str) -> None:
        """Shard `name`'s new copy listens at `address`."""
        with self._lock:
            self._pending.discard(name)
            self._addresses[name] = str(address)

    @property
    def being_replaced(self) -> list[str]:
        with self._lock:
            return sorted(self._pending)

    def reply_for(self, node: str) -> dict[str, Any]:
        """What a beat reply to `node` carries about moved shards ({} : nothing)."""
        with self._lock:
            if not self._addresses:
                return {}
            if node == "learner":
                return {"shards": dict(self._addresses)}
            if node.startswith(ACTOR_PREFIX) and self.num_shards > 1:
                try:
                    shard = shard_of_actor(int(node[len(ACTOR_PREFIX) :]), self.num_shards)
                except ValueError:
                    return {}
                address = self._addresses.get(f"{SHARD_PREFIX}{shard}")
                return {"replay_address": address} if address else {}
            return {}

    def figures(self) -> dict[str, Any]:
        """summary.json's network figures of shard moves ({} : none was lost)."""
        with self._lock:
            if not self.shards_lost:
                return {}
            return {
                "shards_lost": self.shards_lost,
                "items_lost_with_shards": self.items_lost,
                "shards_moved": dict(sorted(self._addresses.items())),
            }
