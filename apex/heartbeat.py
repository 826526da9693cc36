"""Heartbeats: every node says, once a period, that it lives and what it waits on.

Each node process rewrites RUN_DIR/heartbeats/<node>.json atomically from a
daemon thread: pid, time, its current state and since when, its counters and
their rate. The hot loop only records state changes (two attribute writes), so
the cost is one small file write per node per period. `apex.doctor` turns
heartbeats plus the replay's rate-limiter numbers into named reasons;
`python -m tools.status RUN_DIR` prints them.

Each node process also registers SIGUSR1 to dump every thread's stack to
RUN_DIR/stacks/<node>-<pid>.txt (`python -m tools.status RUN_DIR --stacks`).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from apex.jsonio import write_json_atomic

HEARTBEAT_DIR = "heartbeats"
STACKS_DIR = "stacks"

# States a node reports (the doctor keys on the waiting ones).
STARTING = "starting"
ACTING = "acting"
INSERTING = "inserting (Reverb insert; blocked while the rate limiter holds it)"
WAITING_PARAMS = "waiting for parameters"
TRAINING = "sampling + SGD step (blocked while the rate limiter holds sampling)"
EVALUATING = "evaluating"
IDLE = "idle"
STOPPED = "stopped"


class Heartbeat:
    """Writes RUN_DIR/heartbeats/<node>.json every `period` seconds.

    Args:
      run_dir: the run directory ('' : nothing is written, `enter` still works).
      node: the node's name, e.g. 'learner' or 'actor_0'.
      period: seconds between writes (0: never write).
      counters: returns the node's counters, e.g. {'env_steps': 123}; the first
        one's rate per second is reported as `rate`.
    """

    def __init__(
        self,
        run_dir: str | None,
        node: str,
        period: float = 1.0,
        counters: Callable[[], dict[str, float]] | None = None,
    ):
        self.node = node
        self.state = STARTING
        self.since = time.time()
        self._counters = counters or (lambda: {})
        self._path = (
            os.path.join(run_dir, HEARTBEAT_DIR, f"{node}.json") if run_dir and period > 0 else None
        )
        self._period = float(period)
        self._stop = threading.Event()
        self._last: tuple[float, float] | None = None
        if self._path is not None:
            os.makedirs(os.path.dirname(self._path), exist_ok=True)
            self.beat()
            threading.Thread(target=self._loop, name=f"heartbeat-{node}", daemon=True).start()

    def enter(self, state: str) -> None:
        """Records that the node is now in `state` (cheap: call it from hot loops)."""
        if state is not self.state:
            self.state = state
            self.since = time.time()

    def beat(self) -> dict[str, Any]:
        now = time.time()
        try:
            counts = dict(self._counters())
        except Exception:  # noqa: BLE001 - a heartbeat must not take a node down
            counts = {}
        rate = None
        if counts:
            first = float(next(iter(counts.values())))
            if self._last is not None and now > self._last[0]:
                rate = (first - self._last[1]) / (now - self._last[0])
            self._last = (now, first)
        data = {
            "node": self.node,
            "pid": os.getpid(),
            **memory_mb(),
            "time": now,
            "state": self.state,
            "state_since": self.since,
            "state_seconds": now - self.since,
            "counters": counts,
            "rate_per_second": rate,
            "period_seconds": self._period,
        }
        if self._path is not None:
            write_json_atomic(self._path, data)
        return data

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self.beat()
            except OSError:  # the run directory went away (e.g. a test's tmpdir): stop beating
                return

    def close(self) -> None:
        self.enter(STOPPED)
        self._stop.set()
        if self._path is not None:
            self.beat()


def memory_mb() -> dict[str, float]:
    """This process's resident memory now and at its peak (MiB), from /proc (Linux)."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key = "rss_mb" if line.startswith("VmRSS") else "peak_rss_mb"
                    out[key] = int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return out


_stack_file: Any = None


def register_stack_dump(run_dir: str | None, node: str) -> str | None:
    """SIGUSR1 dumps every thread's stack of this process to RUN_DIR/stacks/<node>-<pid>.txt.

    Once per process: colocated nodes share the first caller's file. Returns its path.
    """
    global _stack_file
    if not run_dir:
        return None
    if _stack_file is not None:
        return _stack_file.name
    path = os.path.join(run_dir, STACKS_DIR, f"{node}-{os.getpid()}.txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    f = open(path, "a")  # noqa: SIM115 - must stay open for the signal handler
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
    _stack_file = f
    return path


def read_heartbeats(run_dir: str) -> dict[str, dict[str, Any]]:
    """Every node's last heartbeat in RUN_DIR (skips unreadable files)."""
    out = {}
    folder = os.path.join(run_dir, HEARTBEAT_DIR)
    if not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError):
            continue
        out[data.get("node", name[:-5])] = data
    return out
