"""The run's end, as the launcher sees it: summary.json finalised from what the
coordinator left (and any failure a node recorded), and the stack files no node
wrote to removed."""

from __future__ import annotations

import json
import os

from apex import FULL_DISK, StopReason, recorded_failure, write_json_atomic


def finalize_summary(
    run_dir: str,
    reason: str,
    failure: str | None = None,
    *,
    since: float,
    failure_time: float | None = None,
) -> dict | None:
    """Writes summary.json from the coordinator's last state if the coordinator could
    not; records a node death the launcher saw (`failure`, at Unix time
    `failure_time`) unless the coordinator had recorded a failure before it:
    the first failure is the likely cause (a shard host cut off past its limit
    is the coordinator's verdict; Ray's word that its worker died comes later).

    A node that died of an exception nobody was told of (its failure record,
    RUN_DIR/failures, of this launch: written since `since`, the launcher's
    start) makes the run 'node failed' naming that exception; with neither a
    summary nor a state to start from, a failure still gets a summary.json of
    its own (counters unknown: None).
    """
    # Deferred: apex.coordination imports acme and Launchpad (TensorFlow), which this
    # module's importer, launch.train, must not pay for a refusal.
    from apex import SUMMARY_KEYS

    path = os.path.join(run_dir, "summary.json")
    summary = None
    if os.path.exists(path) and os.path.getmtime(path) >= since:
        with open(path) as f:
            summary = json.load(f)
    else:
        state = os.path.join(run_dir, "state.json")
        if os.path.exists(state):
            with open(state) as f:
                summary = json.load(f)
            summary.pop("counters", None)
            summary["stop_reason"] = summary.get("stop_reason") or reason
    if failure is None and (summary or {}).get("stop_reason") != StopReason.NODE_FAILED.value:
        failure = recorded_failure(run_dir, since=since)
    if summary is None:
        if failure is None:
            return None
        summary = {key: None for key in SUMMARY_KEYS}
    if failure is not None and not _failed_before(summary, failure_time):
        summary["stop_reason"] = StopReason.NODE_FAILED.value
        summary["failure"] = failure
        summary["failure_at_wall_seconds"] = _run_seconds(summary, failure_time)
    FULL_DISK.guard("summary.json", write_json_atomic, path, summary)
    return summary


def _failed_before(summary: dict, failure_time: float | None) -> bool:
    """Whether `summary` (the coordinator's) names a failure recorded no later
    than `failure_time` (False when either time is unknown: the launcher's wins)."""
    at = _failure_time(summary)
    return at is not None and failure_time is not None and at <= failure_time


def _failure_time(summary: dict) -> float | None:
    if summary.get("stop_reason") != StopReason.NODE_FAILED.value or not summary.get("failure"):
        return None
    start, seconds = summary.get("clock_start_time"), summary.get("failure_at_wall_seconds")
    if start is None or seconds is None:
        return None
    return float(start) + float(seconds)


def _run_seconds(summary: dict, at: float | None) -> float | None:
    start = summary.get("clock_start_time")
    return None if start is None or at is None else at - float(start)


def remove_empty_stack_files(run_dir: str) -> None:
    """Every node opens RUN_DIR/stacks/<node>-<pid>.txt up front (SIGUSR1's handler
    needs an open file); those never written to are removed at the end."""
    folder = os.path.join(run_dir, "stacks")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        try:
            if os.path.getsize(path) == 0:
                os.remove(path)
        except OSError:
            continue
    try:
        os.rmdir(folder)  # only if nothing is left
    except OSError:
        pass
