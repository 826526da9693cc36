"""The coordinator's stop decisions: which stop criterion a run has reached,
how the nodes found gone are named as its failure, what the stop prints, and
the bounded waits at a stop (the final checkpoint, the nodes' final beats).
Every decision is a value (apex.verdicts)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from apex.config import StopConfig
from apex.coordination.counters import RunCounters
from apex.heartbeat import HOST, HeartbeatStore
from apex.supervision import death_verdict
from apex.verdicts import FailureKind, NodeFailure, StopReason, StopVerdict


def stop_verdict(
    stop: StopConfig, counters: RunCounters, failure: NodeFailure | None, now: float
) -> StopVerdict | None:
    """The first stop criterion reached (a failure first: it explains whatever
    else happens), or None."""
    if failure is not None:
        return StopVerdict(StopReason.NODE_FAILED, failure)
    if stop.max_actor_steps is not None and counters.env_steps >= stop.max_actor_steps:
        return StopVerdict(StopReason.MAX_ACTOR_STEPS)
    if stop.max_learner_steps is not None and counters.learner_steps >= stop.max_learner_steps:
        return StopVerdict(StopReason.MAX_LEARNER_STEPS)
    if stop.max_wall_seconds is not None and now - counters.start >= stop.max_wall_seconds:
        return StopVerdict(StopReason.MAX_WALL_SECONDS)
    if stop.when_solved and counters.solved_at is not None:
        return StopVerdict(StopReason.SOLVED)
    return None


def outside_stop_verdict(verdict: StopVerdict | None, failure: NodeFailure | None) -> StopVerdict:
    """Why a run stopped from outside (Ctrl-C, SIGTERM) ended: the verdict decided
    by then, else a failure recorded by then, else STOPPED."""
    if verdict is not None:
        return verdict
    if failure is not None:
        return StopVerdict(StopReason.NODE_FAILED, failure)
    return StopVerdict(StopReason.STOPPED)


def dead_nodes_failure(
    dead: list[dict[str, Any]], silent_after: float, run_dir: str
) -> NodeFailure:
    """The failure of the nodes `dead` (their last beats, the first first): a node
    on another host is SILENT, one on this host DIED or was KILLED
    (apex.supervision.death_verdict); the others follow as 'then'."""
    failures = []
    for beat in dead:
        if beat.get("host") not in (None, HOST):
            failures.append(
                NodeFailure(
                    beat["node"],
                    FailureKind.SILENT,
                    pid=beat.get("pid"),
                    host=beat["host"],
                    silent_after=silent_after,
                )
            )
        else:
            failures.append(death_verdict(beat["node"], int(beat.get("pid") or 0), run_dir))
    return failures[0].with_then([f.message for f in failures[1:]])


def stop_lines(verdict: StopVerdict, failure: NodeFailure | None, s: dict[str, Any]) -> list[str]:
    """What a stop prints (`s`: the summary written at it)."""
    lines = []
    if verdict.failed:
        lines.append(f"[apex] a node failed: {failure}")
    lines.append(
        f"[apex] stopping: {verdict.message} at {s['wall_seconds']:.1f} s, "
        f"{s['env_steps']:,} env steps, {s['learner_steps']:,} learner steps"
    )
    return lines


def await_final_beats(heartbeats: HeartbeatStore, timeout: float = 5.0) -> None:
    """Waits (bounded) until every other node has sent its final 'stopped' beat or
    is gone, so RUN_DIR/heartbeats ends with how each node ended (a node in the
    coordinator's process, the evaluator, would otherwise lose the race)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(
            heartbeats.finished(n) is not False for n in heartbeats.beats() if n != "coordinator"
        ):
            return
        time.sleep(0.1)


def await_final_checkpoint(
    written: threading.Event, timeout: float, learner_gone: Callable[[], bool]
) -> bool:
    """Waits (bounded by `timeout` s) while the learner writes its checkpoint at
    the stop; returns whether it was written (`written` set) in time."""
    if timeout <= 0:
        return False
    deadline = time.time() + timeout
    while not written.wait(0.2):
        if time.time() > deadline or learner_gone():
            return False
    return True
