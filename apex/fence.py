"""Actors lost to a partition, and the fence that keeps two copies of one actor
from inserting at once.

Reverb's server takes an insert from anyone who reaches it, so the fence is a
lease the actor holds from the coordinator, measured on each side's own
monotonic clock (no clock is compared with another):

- The actor (`Lease`): every beat the coordinator answers with a grant renews
  its lease until `sent + seconds`, where `sent` is when that beat was SENT
  (before the coordinator could have received it). It inserts only while the
  lease holds: it waits for its first grant before its first insert, and a
  watchdog thread ends the process (`fence_now`: its TCP connections aborted,
  `os._exit(FENCED_EXIT_CODE)`) as soon as the lease runs out, or at once
  when the coordinator answers a beat with `fenced`.
- The coordinator (`Leases`): grants a lease to each beat of an actor's
  current copy (its `incarnation`) and remembers when (its receive time).
  It counts a remote actor lost only when it has heard nothing from it for
  `seconds + LOST_MARGIN_SECONDS`; `fence(node)` refuses every later beat of
  the copies seen so far and returns how long the last lease it granted
  them may still hold. Whoever starts the actor again (the Ray launcher)
  waits that long first.

Why it holds: a lease the coordinator granted on receiving a beat at r ends,
on the actor's clock, at sent + seconds < r + seconds; the coordinator waits
until r_last + seconds + LOST_MARGIN_SECONDS. The margin covers the watchdog's
own delay (it looks every WATCHDOG_PERIOD_SECONDS) and the drift of two
monotonic clocks over `seconds` (ppm). What it cannot cover is a process that
does not run at all for longer than the margin (SIGSTOP, a VM paused) with
items already handed to its writer: those (at most the writer's in-flight
items) may still reach the server when it runs again (docs/cluster.md).

Aborting the sockets (SO_LINGER 0 before the exit) makes the kernel drop
what it still holds unsent for this process (a normal close would keep
retransmitting it, and a healed link would deliver it), so nothing the old
copy wrote reaches the replay after it has fenced itself.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

LEASE_ENV = "APEX_ACTOR_LEASE_SECONDS"
"""Set by a launcher that replaces lost actors (the Ray launcher): the lease in
seconds (cluster.actor_lost_after_seconds). Unset: no leases (local_mp)."""
LOST_MARGIN_SECONDS = 5.0
"""Seconds the coordinator waits past an actor's lease before it counts it lost."""
WATCHDOG_PERIOD_SECONDS = 0.1
FENCED_EXIT_CODE = 75
"""The exit code of an actor process that fenced itself (EX_TEMPFAIL)."""


def lost_after(lease_seconds: float) -> float:
    """Seconds of silence after which the coordinator counts a remote actor lost."""
    return float(lease_seconds) + LOST_MARGIN_SECONDS


def lease_seconds_from_env(env: dict[str, str] | None = None) -> float:
    """The lease a launcher set in this process's environment (0.0: none)."""
    text = (os.environ if env is None else env).get(LEASE_ENV, "")
    try:
        return max(0.0, float(text)) if text else 0.0
    except ValueError:
        return 0.0


class Lease:
    """The actor's side: a lease renewed by the coordinator's grants.

    Args:
      node: the actor's name ('actor_0'), for the fence line.
      seconds: how long a grant holds, from when its beat was sent.
      clock: a monotonic clock (tests pass a fake).

    Example:
        >>> t = [0.0]
        >>> lease = Lease("actor_0", 10.0, clock=lambda: t[0])
        >>> lease.held()
        False
        >>> lease.on_reply(sent=1.0, reply={"lease_seconds": 10.0})
        >>> t[0] = 10.5; lease.held()
        True
        >>> t[0] = 11.5; lease.held()
        False
    """

    def __init__(self, node: str, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.node = node
        self.seconds = float(seconds)
        self._clock = clock
        self._until: float | None = None  # None: never granted
        self._granted_at: float | None = None
        self.fenced_by_coordinator = False
        self._lock = threading.Lock()

    def on_reply(self, sent: float, reply: Any) -> None:
        """A beat sent at `sent` (this clock) was answered with `reply`."""
        if not isinstance(reply, dict):
            return
        with self._lock:
            if reply.get("fenced"):
                self.fenced_by_coordinator = True
                return
            if "lease_seconds" in reply and not self.fenced_by_coordinator:
                until = sent + self.seconds
                if self._until is None or until > self._until:
                    self._until = until
                    self._granted_at = sent

    def held(self, now: float | None = None) -> bool:
        """Whether the actor may insert now."""
        now = self._clock() if now is None else now
        with self._lock:
            return not self.fenced_by_coordinator and self._until is not None and now < self._until

    def expired(self, now: float | None = None) -> bool:
        """Whether a lease it held has run out, or the coordinator fenced it (a
        lease never granted has not expired: the actor waits for it)."""
        now = self._clock() if now is None else now
        with self._lock:
            if self.fenced_by_coordinator:
                return True
            return self._until is not None and now >= self._until

    def silence(self, now: float | None = None) -> float:
        """Seconds since the beat of the last grant was sent."""
        now = self._clock() if now is None else now
        return 0.0 if self._granted_at is None else now - self._granted_at

    def wait_held(self, should_stop: Callable[[], bool], period: float = 0.05) -> bool:
        """Waits for the first grant (or a stop); returns whether the lease holds."""
        while not self.held():
            if should_stop() or self.expired():
                return False
            time.sleep(period)
        return True

    def fence_line(self) -> str:
        if self.fenced_by_coordinator:
            why = "the coordinator counted this copy lost and fenced it"
        else:
            why = f"no word from the coordinator for {self.silence():.0f} s"
        return (
            f"[apex] {self.node} (pid {os.getpid()}): {why} (lease {self.seconds:g} s, "
            "cluster.actor_lost_after_seconds); this copy stops (fenced) so that its "
            "replacement is the only copy at work"
        )

    def watch(self, on_expire: Callable[[], None] | None = None) -> threading.Thread:
        """Starts the watchdog thread: `on_expire` (default `fence_now`) once expired."""
        action = on_expire or (lambda: fence_now(self.fence_line()))

        def loop() -> None:
            while not self.expired():
                time.sleep(WATCHDOG_PERIOD_SECONDS)
            action()

        thread = threading.Thread(target=loop, name=f"lease-{self.node}", daemon=True)
        thread.start()
        return thread


def abort_tcp_connections() -> int:
    """Sets SO_LINGER 0 on every TCP socket of this process, so that closing it
    (at exit) resets the connection and drops what the kernel holds unsent.
    Returns how many sockets it set."""
    count = 0
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    for name in fds:
        try:
            fd = int(name)
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except (OSError, ValueError):
            continue
        try:
            if s.type == socket.SOCK_STREAM and s.family in (socket.AF_INET, socket.AF_INET6):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                count += 1
        except OSError:
            pass
        finally:
            s.close()  # the dup only: the original stays open until the exit
    return count


def fence_now(line: str, exit: Callable[[int], Any] = os._exit) -> None:
    """Ends this actor process at once: says why, aborts its TCP connections, exits
    FENCED_EXIT_CODE without flushing its writer or running any cleanup."""
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - nothing may delay the fence
        pass
    abort_tcp_connections()
    exit(FENCED_EXIT_CODE)


class Leases:
    """The coordinator's side: grants to the current copy of each actor, refusals
    to fenced copies, and how long the last grant to a fenced copy may hold.

    Args:
      seconds: the lease (cluster.actor_lost_after_seconds).
      clock: a monotonic clock (tests pass a fake).
      gone: whether the copy at (host, pid) is known to have ended (its host is
        this one and its process is gone): its lease needs no waiting out.

    Example:
        >>> t = [100.0]
        >>> leases = Leases(10.0, clock=lambda: t[0])
        >>> leases.grant("actor_0", "a1")
        {'lease_seconds': 10.0}
        >>> t[0] = 103.0; leases.fence("actor_0")   # holds until at most 100 + 10 + margin
        12.0
        >>> leases.grant("actor_0", "a1")
        {'fenced': True}
        >>> leases.grant("actor_0", "b2")         # its replacement
        {'lease_seconds': 10.0}
    """

    def __init__(
        self,
        seconds: float,
        clock: Callable[[], float] = time.monotonic,
        gone: Callable[[Any, Any], bool] = lambda host, pid: False,
    ):
        self.seconds = float(seconds)
        self._clock = clock
        self._gone = gone
        self._lock = threading.Lock()
        self._last_grant: dict[tuple[str, str], float] = {}
        self._where: dict[tuple[str, str], tuple[Any, Any]] = {}  # (host, pid) of each copy
        self._fenced: set[tuple[str, str]] = set()
        self.refused = 0  # beats of fenced copies refused

    @property
    def lost_after(self) -> float:
        return lost_after(self.seconds)

    def grant(
        self, node: str, incarnation: Any, host: Any = None, pid: Any = None
    ) -> dict[str, Any]:
        """The reply to a beat of `node`'s copy `incarnation` (at `host`, `pid`),
        received now."""
        key = (node, str(incarnation))
        with self._lock:
            if key in self._fenced:
                self.refused += 1
                return {"fenced": True}
            self._last_grant[key] = self._clock()
            self._where[key] = (host, pid)
            return {"lease_seconds": self.seconds}

    def is_fenced(self, node: str, incarnation: Any) -> bool:
        with self._lock:
            return (node, str(incarnation)) in self._fenced

    def fence(self, node: str) -> float:
        """Refuses every later beat of the copies of `node` seen so far; returns the
        seconds until the last lease granted to them has surely run out (0: none,
        or every such copy is known to have ended). Asking again is how a
        launcher learns that the wait is over."""
        now = self._clock()
        with self._lock:
            keys = [k for k in self._last_grant if k[0] == node]
            self._fenced.update(keys)
            live = [k for k in keys if not self._gone(*self._where.get(k, (None, None)))]
            last = max((self._last_grant[k] for k in live), default=None)
        if last is None:
            return 0.0
        return max(0.0, last + self.lost_after - now)

    @property
    def fenced(self) -> int:
        """Copies fenced so far (actors' and shards')."""
        with self._lock:
            return len(self._fenced)

    def fenced_of(self, prefix: str) -> int:
        """Copies fenced so far of nodes named `prefix`... ('actor_', 'replay_')."""
        with self._lock:
            return sum(node.startswith(prefix) for node, _ in self._fenced)
