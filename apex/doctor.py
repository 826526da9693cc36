"""The hang doctor: named reasons for a stalled program, from heartbeats and
the replay's rate-limiter numbers (apex.replay.inspect.table_stats).

Reasons (the `reason` field, stable for scripts):
  learner_waiting_for_samples   the learner has been inside a sampling + SGD step
                                longer than logging.stall_seconds
  actor_blocked_on_insert       an actor has been inside a Reverb insert that long
  node_silent                   a node's heartbeat is older than that (dead or hung)
Each message says why, with the numbers: replay below min_size, or the rate
limiter's insert/sample balance at one of its bounds, and what that means.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from apex import heartbeat as hb
from apex.replay.inspect import format_stats


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


def _why_no_samples(t: dict[str, Any] | None) -> str:
    if t is None:
        return "replay numbers unavailable (replay server unreachable)"
    rl = t["rate_limiter"]
    if t["size"] < rl["min_size_to_sample"]:
        why = (
            f"replay holds {t['size']:,} items, below min_size {rl['min_size_to_sample']:,}: "
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


def _why_no_insert(t: dict[str, Any] | None) -> str:
    if t is None:
        return "replay numbers unavailable (replay server unreachable)"
    rl = t["rate_limiter"]
    if not rl["can_insert"]:
        why = (
            "the rate limiter holds inserts: samples lag samples_per_insert by the whole "
            "error buffer, i.e. the learner samples too slowly or has stopped"
        )
    else:
        why = "the rate limiter would take an insert: the server or the connection is slow"
    return f"{why}. {_limiter_text(t)}"


def diagnose(
    heartbeats: dict[str, dict[str, Any]],
    table: dict[str, Any] | None,
    stall_seconds: float,
    now: float | None = None,
) -> list[Finding]:
    """Findings for the current heartbeats and replay table stats (may be empty)."""
    now = time.time() if now is None else now
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
                    f"{state}): the process died or is hung; `python -m tools.status RUN_DIR "
                    "--stacks` dumps the stacks of live nodes",
                )
            )
            continue
        in_state = now - float(beat.get("state_since", now))
        if in_state < stall_seconds:
            continue
        if state == hb.TRAINING:
            found.append(
                Finding("learner_waiting_for_samples", node, in_state, _why_no_samples(table))
            )
        elif state == hb.INSERTING:
            found.append(Finding("actor_blocked_on_insert", node, in_state, _why_no_insert(table)))
    return found
