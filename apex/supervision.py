"""The launcher's watch on the coordinator.

The coordinator watches every other node: their beats reach it over RPC
(apex.heartbeat.HeartbeatStore), and a node that is gone without stopping
stops the program with "node failed". The coordinator itself cannot report
its own death: the launcher, which runs on the coordinator's host (the host of
the run directory), watches the coordinator's process through the beat the
coordinator records for itself. Launchpad's local_mp launcher cannot see how a
node process ended (it watches them through a wrapper process and assumes a
clean exit), so without this a SIGKILLed coordinator would leave the program
running without it.

A node that dies of an exception says so first: a node that can write the run
directory (learner, coordinator, evaluator) leaves RUN_DIR/failures/<node>.json
(`record_failure`: pid, host, exception type, message, traceback tail), and
`death_verdict` names that exception for a dead pid that matches a record,
instead of guessing a kill. The failure is a value (apex.verdicts.NodeFailure);
its `message` is the text summary.json and the launcher print.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from apex import heartbeat as hb
from apex.heartbeat import pid_alive  # noqa: F401 - re-exported for tools and bench
from apex.jsonio import write_json_atomic
from apex.verdicts import FailureKind, NodeFailure

WATCHED_BY_LAUNCHER = ("coordinator",)
FAILURES_DIR = "failures"
MESSAGE_LIMIT = 1000  # characters of an exception's message kept in a failure text
TRACEBACK_LINES = 30  # lines of the traceback's tail kept in a record


def exception_text(err: BaseException) -> str:
    """'<Type>: <message>' of an exception, on one line and at most MESSAGE_LIMIT
    characters of message (TensorFlow's messages run to pages)."""
    message = " ".join(str(err).split())
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 3] + "..."
    return f"{type(err).__name__}: {message}" if message else type(err).__name__


def failures_dir(run_dir: str) -> str:
    return os.path.join(run_dir, FAILURES_DIR)


def record_failure(run_dir: str, node: str, err: BaseException) -> str | None:
    """Writes RUN_DIR/failures/<node>.json for `err`, raised in this process by
    `node`: what `death_message` reads when this process is found dead. Returns
    its path (None: no run directory, or it could not be written: a record never
    hides the failure it records)."""
    if not run_dir:
        return None
    tb = traceback.format_exception(type(err), err, err.__traceback__)
    record = {
        "node": node,
        "pid": os.getpid(),
        "host": hb.HOST,
        "time": time.time(),
        "type": type(err).__name__,
        "message": exception_text(err).partition(": ")[2],
        "traceback": "".join(tb).splitlines()[-TRACEBACK_LINES:],
    }
    path = os.path.join(failures_dir(run_dir), f"{node}.json")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json_atomic(path, record)
    except OSError:
        return None
    return path


def read_failures(run_dir: str) -> dict[str, dict[str, Any]]:
    """Every failure record of RUN_DIR, by node (unreadable ones skipped)."""
    out: dict[str, dict[str, Any]] = {}
    folder = failures_dir(run_dir) if run_dir else ""
    if not folder or not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict):
            out[str(data.get("node", name[:-5]))] = data
    return out


def _record_text(record: dict[str, Any]) -> str:
    kind, message = record.get("type") or "Exception", record.get("message") or ""
    return f"{kind}: {message}" if message else kind


def failure_of_pid(run_dir: str, node: str, pid: int) -> str | None:
    """The exception process `pid` (of this host) recorded as its failure, as
    '<Type>: <message>', with the node that raised it when that is another node
    of the same process ('... (raised by evaluator, in the same process)');
    None without a record for that pid."""
    if not run_dir or pid <= 0:
        return None
    records = [
        r
        for r in read_failures(run_dir).values()
        if int(r.get("pid") or 0) == pid and r.get("host", hb.HOST) == hb.HOST
    ]
    if not records:
        return None
    own = [r for r in records if r.get("node") == node]
    if own:
        return _record_text(own[0])
    first = min(records, key=lambda r: float(r.get("time") or 0.0))
    return f"{_record_text(first)} (raised by {first.get('node')}, in the same process)"


def recorded_failure(
    run_dir: str, since: float = 0.0, nodes: Sequence[str] | None = None
) -> str | None:
    """The first failure recorded in RUN_DIR at or after unix time `since` (by one
    of `nodes`, if given), as '<node> (pid N) died of <Type>: <message>' (None:
    no record)."""
    records = [
        r
        for r in read_failures(run_dir).values()
        if float(r.get("time") or 0.0) >= since and (nodes is None or r.get("node") in nodes)
    ]
    if not records:
        return None
    first = min(records, key=lambda r: float(r.get("time") or 0.0))
    return NodeFailure(
        str(first.get("node")), FailureKind.DIED, _record_text(first), pid=first.get("pid")
    ).message


def dead_nodes(run_dir: str, nodes: Sequence[str] = WATCHED_BY_LAUNCHER) -> list[tuple[str, int]]:
    """(node, pid) of each of `nodes` (on this host) whose last beat is not 'stopped'
    and whose process is gone."""
    out = []
    beats = hb.read_heartbeats(run_dir)
    for node, beat in beats.items():
        pid = int(beat.get("pid") or 0)
        on_this_host = beat.get("host", hb.HOST) == hb.HOST
        if (
            node in nodes
            and on_this_host
            and beat.get("state") != hb.STOPPED
            and not pid_alive(pid)
        ):
            out.append((float(beat.get("time") or 0.0), node, pid))
    # A node that failed before its first beat (e.g. in its constructor) left
    # only its failure record.
    for node, record in read_failures(run_dir).items():
        pid = int(record.get("pid") or 0)
        if (
            node in nodes
            and node not in beats
            and record.get("host", hb.HOST) == hb.HOST
            and not pid_alive(pid)
        ):
            out.append((float(record.get("time") or 0.0), node, pid))
    return [(node, pid) for _, node, pid in sorted(out)]


def death_verdict(node: str, pid: int, run_dir: str = "") -> NodeFailure:
    """A node that died without stopping: DIED of the exception its process
    recorded (RUN_DIR/failures, `record_failure`) when one matches `pid`, else
    KILLED."""
    recorded = failure_of_pid(run_dir, node, pid)
    if recorded is not None:
        return NodeFailure(node, FailureKind.DIED, recorded, pid=pid)
    return NodeFailure(node, FailureKind.KILLED, pid=pid)


def death_message(node: str, pid: int, run_dir: str = "") -> str:
    """How a node that died without stopping is named in summary.json's `failure`
    (`death_verdict`'s message)."""
    return death_verdict(node, pid, run_dir).message


class NodeMonitor:
    """Calls `on_death(message)` once when a watched node's process dies without stopping
    (`verdict`: that death as a value; `failure`: its message).

    Runs on a daemon thread until `stopping()` is true (a stop in progress kills
    slow nodes on purpose) or a death was reported.
    """

    def __init__(
        self,
        run_dir: str,
        on_death: Callable[[str], None],
        stopping: Callable[[], bool],
        period: float = 1.0,
        nodes: Sequence[str] = WATCHED_BY_LAUNCHER,
    ):
        self._run_dir = run_dir
        self._nodes = tuple(nodes)
        self._on_death = on_death
        self._stopping = stopping
        self._period = period
        self.verdict: NodeFailure | None = None
        self.failure_time: float | None = None  # when the death was seen (Unix time)
        self._thread = threading.Thread(target=self._loop, name="node-monitor", daemon=True)

    @property
    def failure(self) -> str | None:
        """The death's text, as summary.json's `failure` names it (None: none seen)."""
        return None if self.verdict is None else self.verdict.message

    def start(self) -> NodeMonitor:
        self._thread.start()
        return self

    def _loop(self) -> None:
        stop = threading.Event()
        while not stop.wait(self._period):
            if self._stopping():
                return
            dead = dead_nodes(self._run_dir, self._nodes)
            if dead and not self._stopping():
                (first, pid), rest = dead[0], dead[1:]
                self.verdict = death_verdict(first, pid, self._run_dir).with_then(
                    [f"{n} (pid {p})" for n, p in rest]
                )
                self.failure_time = time.time()
                self._on_death(self.verdict.message)
                return
