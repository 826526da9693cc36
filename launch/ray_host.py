"""The node host: a Ray actor that runs one program node as a process of its own
on its Ray node and hands the node's output, as whole filtered lines, to the
launcher (launch.ray_launch)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from typing import Any

from apex import LineFilter
from apex import heartbeat as hb
from launch.node_env import LAUNCHER_PID_ENV


class NodeHost:
    """A Ray actor that runs one program node as a process of its own on its
    Ray node and hands its output (whole, filtered lines) to the launcher."""

    def __init__(self, title: str, colour: int, tty: bool, keep_all: bool):
        self.title = title
        self._filter = LineFilter(f"[{title}] ", colour, tty=tty, keep_all=keep_all)
        self._lines: deque[bytes] = deque(maxlen=20_000)
        self._lock = threading.Lock()
        self._proc: Any = None
        self._reader: threading.Thread | None = None
        self._dir = tempfile.mkdtemp(prefix="apex-node-")

    def __repr__(self) -> str:  # Ray names the actor's log lines by it
        return self.title

    def info(self, num_ports: int) -> dict[str, Any]:
        """Where this host is, and `num_ports` free ports on it."""
        # Deferred: Ray is optional (the 'ray' extra); this runs under Ray.
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "ports": free_ports(num_ports),
        }

    def start(self, payload: bytes, argv_tail: list[str], env: dict[str, str]) -> int:
        """Starts the node process; returns its pid."""
        # Deferred: Ray is optional (the 'ray' extra); this runs under Ray.
        import ray

        path = os.path.join(self._dir, "job.pkl")
        with open(path, "wb") as f:
            f.write(payload)
        full_env = dict(os.environ)
        full_env.update(env)
        full_env.update(
            {
                LAUNCHER_PID_ENV: str(os.getpid()),  # the node stops itself if this host dies
                hb.RAY_NODE_ENV: ray.get_runtime_context().get_node_id(),
                "PYTHONUNBUFFERED": "1",
            }
        )
        # The node writes to a file, not a pipe to this host: if this host dies
        # first, the node's writes still succeed while it stops itself in order
        # (a broken pipe would raise in whichever of its threads printed).
        self.log_path = os.path.join(self._dir, "output.log")
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, *argv_tail, path],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                stdin=subprocess.DEVNULL,
            )
        self._reader = threading.Thread(target=self._read, name="node-output", daemon=True)
        self._reader.start()
        return self._proc.pid

    def _read(self) -> None:
        """Follows the node's output file until the node has exited and all of it
        is read."""
        with open(self.log_path, "rb") as f:
            while True:
                data = f.read(65536)
                if data:
                    batch = self._filter.feed(data)
                    with self._lock:
                        self._lines.extend(batch)
                    continue
                if self._proc.poll() is not None:
                    data = f.read()
                    if not data:
                        break
                    continue
                time.sleep(0.1)  # tailing a file: nothing new yet
        with self._lock:
            self._lines.extend(self._filter.flush())

    def cleanup(self) -> None:
        """Removes this host's files (the node's job and output) once it has exited."""
        if self._proc is None or self._proc.poll() is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def tick(self) -> tuple[list[bytes], int | None]:
        """(output lines since the last tick, the exit code once the node has
        exited and its output is all read; None while it runs)."""
        code = None if self._proc is None else self._proc.poll()
        if code is not None and self._reader is not None:
            self._reader.join(timeout=2.0)
        with self._lock:
            lines = list(self._lines)
            self._lines.clear()
        return lines, code

    def signal(self, signum: int) -> bool:
        """Sends `signum` to the node process; False if it has exited."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        self._proc.send_signal(signum)
        return True


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on this host now (all held open while picked)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()
