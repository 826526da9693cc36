"""Heartbeats: every node says, once a period, that it lives and what it waits on.

Each node sends a beat from a daemon thread: host, pid, time, its current
state and since when, its counters and their rate. A hot loop records state
changes (`enter`: two attribute writes) or keeps its own finer state that the
beats read (`follow`: an actor's inserts). Beats go to a sink: in a program, the
coordinator's `heartbeat` RPC (so a node on another host, with no access to
the run directory, takes part); the coordinator keeps them in a
`HeartbeatStore`, which decides liveness and "finished" from them and also
rewrites RUN_DIR/heartbeats/<node>.json for people and tools (`apex.doctor`,
`python -m tools.status RUN_DIR`). Nothing reads those files to decide what a
node does.

A node process on the run directory's host also registers SIGUSR1 to dump
every thread's stack to RUN_DIR/stacks/<node>-<pid>.txt (`python -m
tools.status RUN_DIR --stacks`); elsewhere the stacks go to its stderr (its log).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from apex.full_disk import FULL_DISK
from apex.jsonio import write_json_atomic
from apex.roles import ACTOR_PREFIX, SHARD_PREFIX

HEARTBEAT_DIR = "heartbeats"
STACKS_DIR = "stacks"

# States a node reports (the doctor keys on the waiting ones).
STARTING = "starting"
ACTING = "acting"
INSERTING = "inserting (Reverb insert; blocked while the rate limiter holds it)"
WAITING_PARAMS = "waiting for parameters"
RECONNECTING = "reconnecting (the replay does not answer or its stream broke: a network partition?)"
TRAINING = "sampling + SGD step (blocked while the rate limiter holds sampling)"
EVALUATING = "evaluating"
IDLE = "idle"
SERVING = "serving"
STOPPED = "stopped"


HOST = socket.gethostname()
# Set by launch.ray_launch in a node's environment: the Ray node it runs on (a
# beat carries it, so tools.status and tests see where each node was placed).
RAY_NODE_ENV = "APEX_RAY_NODE_ID"
PLACEMENT = {"ray_node": os.environ[RAY_NODE_ENV]} if os.environ.get(RAY_NODE_ENV) else {}

# A beat is sent to a sink: a callable taking the beat (dict). A sink may
# return a future (a courier `futures` call); the last beat at close() is
# waited for, at most FINAL_BEAT_TIMEOUT_SECONDS.
Sink = Callable[[dict[str, Any]], Any]
FINAL_BEAT_TIMEOUT_SECONDS = 5.0


class Heartbeat:
    """Sends the node's beat to `sink` every `period` seconds, from a daemon thread.

    Args:
      sink: where beats go: a callable (e.g. the coordinator's `heartbeat`
        RPC through courier futures), a HeartbeatStore, or a run directory
        (str: its heartbeat files are written directly); None or '' : beats
        are not sent, `enter` still works.
      node: the node's name, e.g. 'learner' or 'actor_0'.
      period: seconds between beats (0: never send).
      counters: returns the node's counters, e.g. {'env_steps': 123}; the first
        one's rate per second is reported as `rate`.
      on_reply: called with (the monotonic time a beat was sent, the sink's
        answer to it) once a beat is delivered (an actor's lease,
        apex.fence); a beat that fails is not answered.

    Every beat carries `incarnation`: an id of this Heartbeat (one per node
    process), which tells two copies of one node apart.
    """

    def __init__(
        self,
        sink: Sink | HeartbeatStore | str | None,
        node: str,
        period: float = 1.0,
        counters: Callable[[], dict[str, float]] | None = None,
        on_reply: Callable[[float, Any], None] | None = None,
    ):
        self.node = node
        self.incarnation = uuid.uuid4().hex[:12]
        self._on_reply = on_reply
        self.state = STARTING
        self.since = time.time()
        self._counters = counters or (lambda: {})
        if isinstance(sink, str):
            sink = HeartbeatStore(sink) if sink else None
        if isinstance(sink, HeartbeatStore):
            sink = sink.record
        self._sink: Sink | None = sink if period > 0 else None
        self._period = float(period)
        self._stop = threading.Event()
        self._last: tuple[float, float] | None = None
        self._probe: Callable[[], tuple[str, float] | None] | None = None
        if self._sink is not None:
            self._send()
            threading.Thread(target=self._loop, name=f"heartbeat-{node}", daemon=True).start()

    def enter(self, state: str) -> None:
        """Records that the node is now in `state` (cheap: call it from hot loops)."""
        if state is not self.state:
            self.state = state
            self.since = time.time()

    def follow(self, probe: Callable[[], tuple[str, float] | None] | None) -> None:
        """While the node is ACTING, its beats report `probe()`'s (state, since)
        instead (when not None): a finer state its hot loop keeps without calling
        here, e.g. the actor's inserts (apex.agents.acting.Actor). None: no probe."""
        self._probe = probe

    def beat(self) -> dict[str, Any]:
        now = time.time()
        state, since = self.state, self.since
        probe = self._probe
        if probe is not None and state == ACTING:
            try:
                state, since = probe() or (state, since)
            except Exception:  # noqa: BLE001 - a heartbeat must not take a node down
                pass
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
            "incarnation": self.incarnation,
            "host": HOST,
            "pid": os.getpid(),
            **PLACEMENT,
            **memory_mb(),
            "time": now,
            "state": state,
            "state_since": since,
            "state_seconds": now - since,
            "counters": counts,
            "rate_per_second": rate,
            "period_seconds": self._period,
        }
        return data

    def _send(self) -> Any:
        if self._sink is None:
            return None
        sent = time.monotonic()  # before the receiver can have it (a lease counts from here)
        result = self._sink(self.beat())
        if self._on_reply is not None:
            if hasattr(result, "add_done_callback"):
                result.add_done_callback(lambda f: self._answered(sent, f))
            else:
                self._on_reply(sent, result)
        return result

    def _answered(self, sent: float, future: Any) -> None:
        try:
            if future.cancelled() or future.exception() is not None:
                return
            self._on_reply(sent, future.result())
        except Exception:  # noqa: BLE001 - a heartbeat must not take a node down
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._send()
            except OSError:  # the run directory went away (e.g. a test's tmpdir): stop beating
                return
            except Exception:  # noqa: BLE001 - a missed beat is what the receiver watches for
                continue

    def close(self) -> None:
        """Sends the final 'stopped' beat and waits (bounded) until it is delivered."""
        self.enter(STOPPED)
        self._stop.set()
        try:
            result = self._send()
            if hasattr(result, "result"):
                result.result(timeout=FINAL_BEAT_TIMEOUT_SECONDS)
        except Exception:  # noqa: BLE001 - the receiver is gone: nobody waits for this node
            pass


class HeartbeatStore:
    """The receiving end: the last beat of every node, what it says about each
    node, and (with a run directory) RUN_DIR/heartbeats/<node>.json for tools.

    Thread-safe: courier serves `record` on many threads.

    Args:
      run_dir: where heartbeat files go ('' or None: kept in memory only).
      silent_after: seconds without a beat after which a node on another host
        (whose process this host cannot look at) counts as gone.
      leased_silent_after: the same for actors and replay shards (None:
        `silent_after`): they hold leases, and are lost past their lease
        (apex.fence).
    """

    def __init__(
        self,
        run_dir: str | None = None,
        silent_after: float = 60.0,
        leased_silent_after: float | None = None,
    ):
        self._dir = os.path.join(run_dir, HEARTBEAT_DIR) if run_dir else None
        self.silent_after = float(silent_after)
        self.leased_silent_after = leased_silent_after
        self._beats: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if self._dir is not None:
            os.makedirs(self._dir, exist_ok=True)

    def record(self, beat: dict[str, Any]) -> None:
        """Keeps `beat` as its node's last, unless a later one of that node is
        already here (beats travel as concurrent RPCs and may arrive out of order:
        a periodic beat must not overwrite the final 'stopped' one)."""
        beat = dict(beat, received=time.time())
        with self._lock:
            last = self._beats.get(beat["node"])
            if last is not None and float(last.get("time", 0.0)) > float(beat.get("time", 0.0)):
                return
            self._beats[beat["node"]] = beat
            if self._dir is not None:  # the files are for tools: a full disk only skips them
                path = os.path.join(self._dir, f"{beat['node']}.json")
                FULL_DISK.guard("heartbeat files", write_json_atomic, path, beat)

    def forget(self, node: str) -> None:
        """Drops `node`'s last beat (its launcher is starting it again elsewhere: the
        old process's silence is not a death). Its file stays for the tools."""
        with self._lock:
            self._beats.pop(node, None)

    def beats(self) -> dict[str, dict[str, Any]]:
        """A copy of every node's last beat (what the doctor reads)."""
        with self._lock:
            return {k: dict(v) for k, v in self._beats.items()}

    def gone(self, beat: dict[str, Any], now: float | None = None) -> bool:
        """Whether the node of `beat` no longer runs: its process on this host is
        gone, or (on another host) it has been silent for `silent_after` s."""
        if beat.get("host", HOST) == HOST:
            return not pid_alive(int(beat.get("pid") or 0))
        now = time.time() if now is None else now
        return now - float(beat.get("received", beat.get("time", now))) > self.silent_limit(beat)

    def silent_limit(self, beat: dict[str, Any]) -> float:
        """Seconds of silence after which the node of `beat` (on another host) is gone."""
        leased = str(beat.get("node", "")).startswith((ACTOR_PREFIX, SHARD_PREFIX))
        if self.leased_silent_after is not None and leased:
            return float(self.leased_silent_after)
        return self.silent_after

    def finished(self, node: str) -> bool | None:
        """Whether `node` is done: its last beat says 'stopped' or it is gone
        (None: it never sent a beat)."""
        beat = self.beats().get(node)
        if beat is None:
            return None
        return beat.get("state") == STOPPED or self.gone(beat)

    def all_finished(self, prefix: str) -> bool:
        """Whether every node whose name starts with `prefix` is finished."""
        return all(self.finished(n) is not False for n in self.beats() if n.startswith(prefix))

    def dead(self, now: float | None = None) -> list[dict[str, Any]]:
        """The beats of nodes that are gone without having stopped, the one whose
        beats stopped first (the likely cause) first."""
        out = [b for b in self.beats().values() if b.get("state") != STOPPED and self.gone(b, now)]
        return sorted(out, key=lambda b: float(b.get("time") or 0.0))


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host runs (a zombie does not)."""
    if pid <= 0:
        return False
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


def memory_mb() -> dict[str, float]:
    """This process's resident memory (MiB), from /proc (Linux): now, at its peak,
    and its private part (anonymous pages; the rest is shared library and file
    pages that every node process on a host maps once)."""
    keys = {"VmRSS:": "rss_mb", "VmHWM:": "peak_rss_mb", "RssAnon:": "anon_rss_mb"}
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key = keys.get(line.split(" ", 1)[0].split("\t", 1)[0])
                if key is not None:
                    out[key] = int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return out


_stack_file: Any = None


def register_stack_dump(run_dir: str | None, node: str) -> str | None:
    """SIGUSR1 dumps every thread's stack of this process to RUN_DIR/stacks/<node>-<pid>.txt
    (no run_dir: to stderr, i.e. the node's log).

    Once per process: colocated nodes share the first caller's file. Returns its path.
    """
    global _stack_file
    if _stack_file is not None:
        return getattr(_stack_file, "name", None)
    if not run_dir:
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=False)
        _stack_file = sys.stderr
        return None
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
