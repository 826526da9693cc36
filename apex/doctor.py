"""The hang doctor: named reasons for a stalled program, from heartbeats and
the replay's rate-limiter numbers (apex.replay.stats.table_stats).

Reasons (the `reason` field, stable for scripts):
  learner_waiting_for_samples   the learner has been inside a sampling + SGD step
                                longer than logging.stall_seconds
  actor_blocked_on_insert       an actor has been inside a Reverb insert that long
  node_silent                   a node's heartbeat is older than that (dead or hung)
Each message says why, with the numbers: replay below min_size, or the rate
limiter's insert/sample balance at one of its bounds, and what that means.
With replay shards (replay.num_shards > 1) the numbers are a shard's, named:
an actor's insert waits on its own shard (actor i writes to shard i % S), and
the learner waits only while no shard lets a batch through, so its finding
names every shard and why each holds it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from apex import heartbeat as hb
from apex.replay.stats import format_stats


@dataclasses.dataclass(frozen=True)
class Finding:
    reason: str
    node: str
    seconds: float
    message: str

    def __str__(self) -> str:
        return f"{self.reason} [{self.node}, {self.seconds:.0f} s]: {self.message}"


def _limiter_text(t: dict[str, Any]) -> str:
    return format_stats([t], signature=False).replace("\n  ", "; ")


_UNREACHABLE = "replay numbers unavailable (replay server unreachable)"
_SHARD_UNREACHABLE = "its numbers unavailable (its server unreachable)"


def _why_no_samples(t: dict[str, Any] | None, shard: bool = False) -> str:
    """Why a sample waits (`shard`: said of one shard, whose name comes before)."""
    if t is None:
        return _SHARD_UNREACHABLE if shard else _UNREACHABLE
    rl = t["rate_limiter"]
    if t["size"] < rl["min_size_to_sample"]:
        where = "the shard" if shard else "replay"
        why = (
            f"{where} holds {t['size']:,} items, below min_size {rl['min_size_to_sample']:,}: "
            "the actors have not inserted enough yet (are they running? see their heartbeats)"
        )
    elif not rl["can_sample"]:
        why = (
            "the rate limiter holds sampling: the learner is ahead of samples_per_insert "
            "by the whole error buffer, i.e. the actors insert too slowly for the target ratio"
        )
    else:
        why = "the rate limiter would let a sample through: the input pipeline or the step itself is slow"
    return f"{why}. {_limiter_text(t)}"


def _why_no_insert(t: dict[str, Any] | None, shard: bool = False) -> str:
    """Why an insert waits (`shard`: said of one shard, whose name comes before)."""
    if t is None:
        return _SHARD_UNREACHABLE if shard else _UNREACHABLE
    rl = t["rate_limiter"]
    if not rl["can_insert"]:
        why = (
            "the rate limiter holds inserts: samples lag samples_per_insert by the whole "
            "error buffer, i.e. the learner samples too slowly or has stopped"
        )
    else:
        why = "the rate limiter would take an insert: the server or the connection is slow"
    return f"{why}. {_limiter_text(t)}"


def _shard_of(node: str, num_shards: int) -> int | None:
    """The shard actor node 'actor_<i>' writes to (None for another node)."""
    from apex.replay.shards import shard_of_actor

    prefix, _, index = node.partition("_")
    if prefix != "actor" or not index.isdigit():
        return None
    return shard_of_actor(int(index), num_shards)


def _why_no_samples_sharded(shards: dict[str, dict[str, Any] | None]) -> str:
    return "no shard lets a batch through: " + " | ".join(
        f"{name}: {_why_no_samples(t, shard=True)}" for name, t in shards.items()
    )


def diagnose(
    heartbeats: dict[str, dict[str, Any]],
    table: dict[str, Any] | None,
    stall_seconds: float,
    now: float | None = None,
    shard_tables: dict[str, dict[str, Any] | None] | None = None,
) -> list[Finding]:
    """Findings for the current heartbeats and replay table stats (may be empty).

    shard_tables: with replay.num_shards > 1, each shard's table stats (None:
    unreachable) by shard name, shard s the s-th entry; `table` is then unused.
    """
    now = time.time() if now is None else now
    names = list(shard_tables or {})
    found = []
    for node, beat in sorted(heartbeats.items()):
        state = beat.get("state")
        if state == hb.STOPPED:
            continue
        age = now - float(beat.get("time", 0))
        period = float(beat.get("period_seconds") or 1.0)
        if age > max(stall_seconds, 5 * period):
            found.append(
                Finding(
                    "node_silent",
                    node,
                    age,
                    f"no heartbeat from pid {beat.get('pid')} for {age:.0f} s (last state: "
                    f"{state}): the process died or is hung"
                    + (
                        f", or host {beat.get('host')} is cut off from this one (a network "
                        "partition: it carries on when the link returns)"
                        if beat.get("host") not in (None, hb.HOST)
                        else ""
                    )
                    + "; `python -m tools.status RUN_DIR --stacks` dumps the stacks of live nodes",
                )
            )
            continue
        in_state = now - float(beat.get("state_since", now))
        if in_state < stall_seconds:
            continue
        if state == hb.TRAINING:
            why = (
                _why_no_samples_sharded(shard_tables)
                if shard_tables and len(names) > 1
                else _why_no_samples(table)
            )
            found.append(Finding("learner_waiting_for_samples", node, in_state, why))
        elif state == hb.INSERTING:
            shard = _shard_of(node, len(names)) if len(names) > 1 else None
            if shard is None or shard_tables is None:
                why = _why_no_insert(table)
            else:
                name = names[shard]
                why = f"{name}: {_why_no_insert(shard_tables[name], shard=True)}"
            found.append(Finding("actor_blocked_on_insert", node, in_state, why))
    return found
