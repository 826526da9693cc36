"""Actors and replay shards cut off by the network: what the
coordinator shows while an actor or a shard on another host (another hostname
than the coordinator's) is silent, and what an actor's partitions cost once it
is back.

A shard in a process of its own beats like an actor (launch.nodes.replay):
while cut it shows as `replay_1 9 s` in the same list. On Ray it holds a lease
as an actor does: cut past it, it is counted lost and started again elsewhere
(apex.coordination.moves).

While cut, an actor's beats do not arrive: the progress line names it
(`actor_0 unreachable 12 s`) once its last beat is older than `UNREACHABLE_PERIODS`
beat periods, and the doctor's node_silent says the same. When the link
returns the actor carries on; if the partition broke its replay stream it
writes through a new one (launch.nodes.actor: ReplayStalled), not counted as
a restart. Its beats' counters then say what it cost: `reconnects`,
`items_lost_in_flight` (items written, never confirmed by the server) and
`seconds_stalled` (seconds its writes waited before the new stream). The
coordinator keeps the longest silence it saw of every actor
(`seconds_unreachable`: seconds without the actor). summary.json's `network`,
the metrics row and the progress line show them.
"""

from __future__ import annotations

from typing import Any

from apex.roles import ACTOR_PREFIX, SHARD_PREFIX

WATCHED = (ACTOR_PREFIX, SHARD_PREFIX)
UNREACHABLE_PERIODS = 3.0  # beat periods of silence before a node shows as unreachable
COST_KEYS = ("reconnects", "items_lost_in_flight", "seconds_stalled")


def silence(beat: dict[str, Any], now: float) -> float:
    """Seconds since `beat` was received."""
    return max(0.0, now - float(beat.get("received", beat.get("time", now))))


class Partitions:
    """The actors and shards silent now and the silences each one had (seconds without it).

    Example:
        >>> p = Partitions()
        >>> beats = {"actor_0": {"received": 100.0, "period_seconds": 1.0, "state": "acting"}}
        >>> p.unreachable(beats, now=110.0)
        {'actor_0': 10.0}
        >>> p.unreachable({"actor_0": dict(beats["actor_0"], received=111.0)}, now=111.5)
        {}
        >>> p.worst
        {'actor_0': 10.0}
    """

    def __init__(self, host: str | None = None) -> None:
        self.host = host  # this host's name: nodes on it are never "unreachable"
        self.worst: dict[str, float] = {}  # the longest silence seen of each node
        self.total: dict[str, float] = {}  # the silences that ended, summed, per node
        self._open: dict[str, float] = {}  # the silence going on now, per node

    def unreachable(self, beats: dict[str, dict[str, Any]], now: float) -> dict[str, float]:
        """{node: seconds silent} of the actors and shards silent for more than
        UNREACHABLE_PERIODS beat periods now (stopped ones are not)."""
        out = {}
        for node, beat in beats.items():
            if not node.startswith(WATCHED) or beat.get("state") == "stopped":
                continue
            if self.host is not None and beat.get("host") == self.host:
                continue  # on this host: its process is watched (apex.heartbeat), not its link
            period = float(beat.get("period_seconds") or 1.0)
            quiet = silence(beat, now)
            if quiet > UNREACHABLE_PERIODS * period:
                out[node] = round(quiet, 1)
                self._open[node] = quiet
                self.worst[node] = max(self.worst.get(node, 0.0), round(quiet, 1))
            elif node in self._open:  # back: its silence is over
                self.total[node] = round(self.total.get(node, 0.0) + self._open.pop(node), 1)
        return out

    def seconds_unreachable(self, prefix: str = ACTOR_PREFIX) -> float:
        """Seconds without an actor (or, `prefix` SHARD_PREFIX, a shard), summed
        over them (ended and ongoing silences)."""
        silences = list(self.total.items()) + list(self._open.items())
        return round(sum(s for node, s in silences if node.startswith(prefix)), 1)

    def costs(self, beats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """summary.json's `network`: the actors' counted costs, summed, and the
        seconds the coordinator heard nothing from them."""
        out: dict[str, Any] = {k: 0 for k in COST_KEYS}
        for node, beat in beats.items():
            if node.startswith(ACTOR_PREFIX):
                counters = beat.get("counters") or {}
                for k in COST_KEYS:
                    out[k] += counters.get(k, 0) or 0
        out["seconds_stalled"] = round(float(out["seconds_stalled"]), 1)
        out["seconds_unreachable"] = self.seconds_unreachable()
        shards = self.seconds_unreachable(SHARD_PREFIX)
        if shards:
            out["shard_seconds_unreachable"] = shards
        out["longest_silence_seconds"] = dict(sorted(self.worst.items()))
        return out

    def text(self, beats: dict[str, dict[str, Any]], now: float) -> str:
        """' | unreachable: actor_0 12 s, replay_1 9 s | reconnects 1' for the
        progress line ('' : none)."""
        silent = self.unreachable(beats, now)
        out = ""
        if silent:
            out += " | unreachable: " + ", ".join(
                f"{n} {s:.0f} s" for n, s in sorted(silent.items())
            )
        reconnects = self.costs(beats)["reconnects"]
        if reconnects:
            out += f" | reconnects {reconnects}"
        return out
