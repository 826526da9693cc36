"""The launcher's view of its node processes: which died without stopping.

Launchpad's local_mp launcher cannot see how a node process ended (it watches
them through a wrapper process and assumes a clean exit), so a node killed by
SIGKILL or the OOM killer would leave the program running without it. Every
node's heartbeat names its pid; a heartbeat that is not 'stopped' whose
process is gone is a node that died.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from apex import heartbeat as hb


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists (another user's)
        return True
    try:  # a zombie (exited, not yet reaped) is dead for us
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def node_finished(run_dir: str, node: str) -> bool | None:
    """Whether `node` is done: its heartbeat says 'stopped' or its process is gone
    (None: it has no heartbeat)."""
    beat = hb.read_heartbeats(run_dir).get(node)
    if beat is None:
        return None
    return beat.get("state") == hb.STOPPED or not pid_alive(int(beat.get("pid") or 0))


def dead_nodes(run_dir: str) -> list[tuple[str, int]]:
    """(node, pid) of every node whose heartbeat is not 'stopped' and whose process
    is gone, the one whose heartbeat stopped first (the likely cause) first."""
    out = []
    for node, beat in hb.read_heartbeats(run_dir).items():
        pid = int(beat.get("pid") or 0)
        if pid > 0 and beat.get("state") != hb.STOPPED and not pid_alive(pid):
            out.append((float(beat.get("time") or 0.0), node, pid))
    return [(node, pid) for _, node, pid in sorted(out)]


class NodeMonitor:
    """Calls `on_death(message)` once when a node process dies without stopping.

    Runs on a daemon thread until `stopping()` is true (a stop in progress kills
    slow nodes on purpose) or a death was reported.
    """

    def __init__(
        self,
        run_dir: str,
        on_death: Callable[[str], None],
        stopping: Callable[[], bool],
        period: float = 1.0,
    ):
        self._run_dir = run_dir
        self._on_death = on_death
        self._stopping = stopping
        self._period = period
        self.failure: str | None = None
        self._thread = threading.Thread(target=self._loop, name="node-monitor", daemon=True)

    def start(self) -> NodeMonitor:
        self._thread.start()
        return self

    def _loop(self) -> None:
        stop = threading.Event()
        while not stop.wait(self._period):
            if self._stopping():
                return
            dead = dead_nodes(self._run_dir)
            if dead and not self._stopping():
                (first, pid), rest = dead[0], dead[1:]
                self.failure = (
                    f"{first} (pid {pid}) exited without stopping (killed, e.g. SIGKILL or "
                    "out of memory)"
                )
                if rest:
                    self.failure += "; then " + ", ".join(f"{n} (pid {p})" for n, p in rest)
                self._on_death(self.failure)
                return
