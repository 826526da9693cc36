"""A bench's child processes (multiprocessing): each started as a daemon and
remembered, each message received with a timeout (a child that dies, fails or
goes quiet fails the measurement), every one stopped at the end; a child dies
with the bench (PR_SET_PDEATHSIG) and leaves Ctrl-C to it."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import psutil

STARTED: list[Any] = []  # every process this bench started (stopped in main's finally)


class PointFailed(RuntimeError):
    """A measurement could not be made (a process died, hung or failed)."""


# ------------------------------------------------------------ in a child
def child_setup() -> None:
    """In a child: die with the bench (SIGTERM when the parent goes), leave
    Ctrl-C to the parent (it stops the children in order), quiet TF."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def parent_gone(ppid: int) -> bool:
    """Whether the bench (the child's parent, pid `ppid`) has gone."""
    return os.getppid() != ppid


# ------------------------------------------------------------ in the bench
def stop_processes(procs: list[Any], grace: float = 10.0) -> None:
    """Joins, then terminates, then kills each of `procs` (ours only)."""
    deadline = time.time() + grace
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.time()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    for p in procs:
        if p in STARTED and not p.is_alive():
            STARTED.remove(p)


def start(ctx: Any, target: Callable, args: tuple, name: str) -> Any:
    """A started daemon process of `ctx` running target(*args), remembered in STARTED."""
    p = ctx.Process(target=target, args=args, name=name, daemon=True)
    p.start()
    STARTED.append(p)
    return p


def recv(conn: Any, proc: Any, timeout: float, what: str) -> tuple:
    """The next message from a child; PointFailed if it died, failed or went quiet."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if conn.poll(0.2):
            msg = conn.recv()
            if msg[0] == "error":
                raise PointFailed(msg[1])
            return msg
        if not proc.is_alive():
            raise PointFailed(f"{what} exited (code {proc.exitcode}) without answering")
    raise PointFailed(f"{what} did not answer within {timeout:.0f} s")


def cpu_seconds(pids: list[int]) -> float:
    """The CPU seconds (user + system) the processes `pids` have used so far."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total
