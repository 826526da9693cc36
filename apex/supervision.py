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
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from apex import heartbeat as hb
from apex.heartbeat import pid_alive  # noqa: F401 - re-exported for tools and bench

WATCHED_BY_LAUNCHER = ("coordinator",)


def dead_nodes(run_dir: str, nodes: Sequence[str] = WATCHED_BY_LAUNCHER) -> list[tuple[str, int]]:
    """(node, pid) of each of `nodes` (on this host) whose last beat is not 'stopped'
    and whose process is gone."""
    out = []
    for node, beat in hb.read_heartbeats(run_dir).items():
        pid = int(beat.get("pid") or 0)
        on_this_host = beat.get("host", hb.HOST) == hb.HOST
        if (
            node in nodes
            and on_this_host
            and beat.get("state") != hb.STOPPED
            and not pid_alive(pid)
        ):
            out.append((float(beat.get("time") or 0.0), node, pid))
    return [(node, pid) for _, node, pid in sorted(out)]


def death_message(node: str, pid: int) -> str:
    """How a node that died without stopping is named in summary.json's `failure`."""
    return f"{node} (pid {pid}) exited without stopping (killed, e.g. SIGKILL or out of memory)"


class NodeMonitor:
    """Calls `on_death(message)` once when a watched node's process dies without stopping.

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
            dead = dead_nodes(self._run_dir, self._nodes)
            if dead and not self._stopping():
                (first, pid), rest = dead[0], dead[1:]
                self.failure = death_message(first, pid)
                if rest:
                    self.failure += "; then " + ", ".join(f"{n} (pid {p})" for n, p in rest)
                self._on_death(self.failure)
                return
