"""Actor processes that die and come back: what the coordinator makes
of a dead actor when someone restarts actor processes (local_mp's node
wrappers, the Ray launcher; launch.node_restarts).

A dead actor is then not a failure at once: it has `grace` seconds to send a
beat from its new process. Past that, its death is judged as any node's
(the program stops with 'node failed'). An actor past actor.max_restarts
reports its failure itself (its last start does only that), so the program
does not wait out the grace then. The restarts every actor counted (its beats'
`restarts` counter) are the run's actor restarts: the progress line,
summary.json's `actor_restarts` and the metrics row show them.
"""

from __future__ import annotations

from typing import Any

from apex.roles import ACTOR_PREFIX


class ActorRestarts:
    """Which dead actors are still within their grace, and how many restarts the
    actors counted.

    Args:
      grace: seconds a dead actor has to come back (0: none, a death is a failure).

    Example:
        >>> r = ActorRestarts(grace=10.0)
        >>> beat = {"node": "actor_0", "pid": 7, "counters": {"restarts": 1}}
        >>> r.past_grace([beat], now=100.0), r.restarting
        ([], ['actor_0'])
        >>> [b["node"] for b in r.past_grace([beat], now=111.0)]
        ['actor_0']
    """

    def __init__(self, grace: float = 0.0):
        self.grace = float(grace)
        self._dead_since: dict[tuple[str, Any], float] = {}

    @property
    def restarting(self) -> list[str]:
        """The actors found dead and still within their grace (as of the last check)."""
        return sorted({node for node, _ in self._dead_since})

    def past_grace(self, dead: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """The beats of `dead` nodes whose death counts now: every node but an actor
        within its grace (an actor's grace counts from when it was first found dead)."""
        if self.grace <= 0:
            return dead
        out, seen = [], {}
        for beat in dead:
            node = str(beat.get("node", ""))
            if not node.startswith(ACTOR_PREFIX):
                out.append(beat)
                continue
            key = (node, beat.get("pid"))
            seen[key] = self._dead_since.get(key, now)
            if now - seen[key] > self.grace:
                out.append(beat)
        self._dead_since = {k: v for k, v in seen.items() if now - v <= self.grace}
        return out

    @staticmethod
    def total(beats: dict[str, dict[str, Any]]) -> int:
        """The restarts the actors' last beats count, summed."""
        return sum(
            int((b.get("counters") or {}).get("restarts", 0) or 0)
            for node, b in beats.items()
            if node.startswith(ACTOR_PREFIX)
        )

    def text(self, beats: dict[str, dict[str, Any]]) -> str:
        """' | actor restarts N (actor_0 restarting)' for the progress line ('' : none)."""
        total, now = self.total(beats), self.restarting
        if not total and not now:
            return ""
        return f" | actor restarts {total}" + (f" ({', '.join(now)} restarting)" if now else "")
