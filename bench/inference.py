r"""Central inference (issue 15) against local inference, side by side in one run:
the latency-batching curve, the actors' memory, and the forward-pass costs on paper.

    .venv/bin/python bench/inference.py [--nets=mlp,conv] [--actors=1,2,4]
        [--waits_ms=0,2,5] [--seconds=10] [--warmup=2] [--repeats=2]
        [--max_batch=256] [--no_live] [--no_paper] [--markdown=/tmp/inference_bench.md]

**Live** (per net, one group of processes for the whole run): one inference
process (a courier server, as launch.nodes.InferenceNode: apex's BatchingServer
over apex's ActingPolicy, the `infer` RPC answered by apex.inference.InferenceService;
a thread hands it "new" parameters every `inference.params_period_seconds`, as
follow_learner does for a training learner; it is also the variable source local
actors pull from, answering each pull with a new version), K_max local actors and
K_max central actors (K_max = the largest --actors). Every actor is a process of
its own stepping real envs through apex's own actor class (`builder.make_actor`,
the net's config, `actor.num_actors` = K_max), with a writer that counts and
discards items (no Reverb insert cost); local actors hold the network and pull
parameters over courier every `actor.params_update_period` env steps, central
actors call `infer` over courier. A point runs the first K actors of one kind
(the rest sleep; the server's `expected_clients` is set to K) for --warmup
seconds unmeasured, then --seconds measured. Points (every K, local and central
at each --waits_ms) run in ABBA order over --repeats (forward, then reversed).
Per point: env steps/s (total over the K actors), the actor-observed forward
time (local: its own forward pass; central: the RPC round trip), the server's
latency, queue wait, batch size and forward time (BatchingServer.stats over the
window), and CPU per env step (the K actors plus the inference process,
psutil). Tables give the medians over the repeats.

**Memory**: RSS (and USS: pages no other process shares) of each actor process
at the group's end, local against central; and the inference process's.

**On paper** (a process of its own, nothing else of ours running): ActingPolicy
forward-pass time (wall and CPU, all threads) against batch size on random
observations, median of --paper_repeats; then for N = --paper_actors actors of
E = --paper_envs envs, the batch central inference reaches (N x E, at most
--max_batch) and the CPU per env step of those batched forwards against each
actor's own batch-E forwards (RPC and serialisation costs not included: the live
part measures those).

Every process the bench starts is stopped at the end of its group, on a failed
point (the point fails with a message: an actor that dies, stops stepping, or
does not answer), on Ctrl-C and on SIGTERM; children also die with the bench
(PR_SET_PDEATHSIG). Records the commit; writes
bench/results/inference-<commit>.json. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing as mp
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil
from common import ROOT, header, save_results

from apex import InferenceService

sys.path.insert(0, ROOT)

NETS = {"mlp": "configs/apex_cartpole.py", "conv": "configs/apex_atari.py"}
STARTUP_TIMEOUT = 300.0  # seconds for a group's processes to be ready (TF imports, 2 cores)
REPLY_TIMEOUT = 60.0  # seconds an actor or the server has to answer the bench
_STARTED: list[Any] = []  # every process this bench started (stopped in main's finally)


class PointFailed(RuntimeError):
    """A measurement could not be made (a process died, hung or failed)."""


# ------------------------------------------------------------ child processes
def _child_setup() -> None:
    """In a child: die with the bench (SIGTERM when the parent goes), leave
    Ctrl-C to the parent (it stops the children in order), quiet TF."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _parent_gone(ppid: int) -> bool:
    return os.getppid() != ppid


def _load_config(net: str, num_actors: int, max_batch: int) -> tuple[Any, Any]:
    from apex import load_config_file, prepare_env

    config = load_config_file(os.path.join(ROOT, NETS[net]))
    config.actor.num_actors = num_actors
    config.inference.max_batch = max_batch
    spec = prepare_env(config).spec
    return config, spec


class DiscardWriter:
    """An ItemWriter (apex.roles) that counts items and keeps none."""

    def __init__(self) -> None:
        self.items_written = 0
        self.seconds_writing = 0.0
        self.can_store_frames = False  # takes whole items only
        self.frames_written = 0
        self.frame_bytes = 0

    def write(self, batch: dict, priorities: Any) -> None:
        self.items_written += len(priorities)

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float = 3.0) -> bool:
        return True

    def __enter__(self) -> DiscardWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class TimedQ:
    """Wraps an actor's Q source (LocalQ or RemoteQ): the time of each call, as the
    actor sees it, while `flag.value` is set."""

    def __init__(self, inner: Any, flag: Any):
        self._inner = inner
        self._flag = flag
        self.samples: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __call__(self, obs: np.ndarray, state: Any = None) -> Any:
        t = time.perf_counter()
        out = self._inner(obs, state)
        if self._flag.value:
            self.samples.append(time.perf_counter() - t)
        return out


class _BenchInference(InferenceService):
    """The inference process's RPCs: InferenceNode's `infer`, `version` and
    `stats` (apex.inference.InferenceService), a learner's `get_variables` (a
    new version each pull, as a training learner), and the bench's `configure`."""

    def __init__(self, server: Any, weights: list[np.ndarray], timeout: float):
        super().__init__(server, timeout)
        self._weights = weights
        self._lock = threading.Lock()
        self._pulls = 0

    def get_variables(self):
        with self._lock:
            self._pulls += 1
            version = self._pulls
        return version, self._weights, {"max_priority": 1.0}

    def configure(self, wait_ms: float, expected_clients: int) -> None:
        """inference.max_wait_ms and the number of actors sending requests."""
        self._server.max_wait = float(wait_ms) / 1000.0
        self._server.expected_clients = int(expected_clients)


def _server_main(net: str, num_actors: int, max_batch: int, conn: Any) -> None:
    _child_setup()
    ppid = os.getppid()
    try:
        from apex import BatchingServer, bucket_size, compat
        from apex.agents import make_network, make_policy

        config, spec = _load_config(net, num_actors, max_batch)
        policy = make_policy(config, spec)
        weights = [np.asarray(w) for w in make_network(config, spec).get_weights()]
        pad = config.learner.torso != "mlp"
        e = config.actor.envs_per_actor
        # Trace every padded shape a batch can take before anything is measured.
        policy.set_weights(weights)
        dtype = np.uint8 if spec.observation_dtype == "uint8" else np.float32
        for rows in sorted({bucket_size(n * e, max_batch) if pad else e for n in range(1, 9)}):
            policy(np.zeros((rows, *spec.observation_shape), dtype), None)
        server = BatchingServer(
            policy,
            max_batch,
            config.inference.max_wait_ms / 1000.0,
            expected_clients=num_actors,
            pad=pad,
            obs_shape=tuple(spec.observation_shape),
        )
        server.set_weights(0, weights, {"max_priority": 1.0})
        node = _BenchInference(server, weights, config.inference.call_timeout_seconds)
        from launch.ray_host import free_ports

        (port,) = free_ports(1)
        # The pool as launch/program.py sizes the inference node's.
        courier_server = compat.courier_server(
            node, port, thread_pool_size=max(16, 2 * num_actors + 4)
        )
        stop = threading.Event()

        def follow() -> None:  # a training learner: new parameters every period
            version = 0
            while not stop.wait(config.inference.params_period_seconds):
                version += 1
                server.set_weights(version, weights, {"max_priority": 1.0})

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        conn.send(("ready", os.getpid(), f"localhost:{port}"))
        try:
            while not _parent_gone(ppid):
                if server.error is not None:
                    conn.send(("error", f"inference server failed: {server.error!r}"))
                    break
                if conn.poll(0.5) and conn.recv()[0] == "quit":
                    break
        finally:
            stop.set()
            courier_server.Stop()
            server.close()
    except Exception:  # noqa: BLE001 - the bench reports it and fails the group
        conn.send(("error", "inference process: " + traceback.format_exc()))
        sys.exit(1)


def _actor_main(
    net: str,
    actor_id: int,
    num_actors: int,
    max_batch: int,
    central: bool,
    address: str,
    conn: Any,
    counter: Any,
    running: Any,
    measuring: Any,
    quit_flag: Any,
) -> None:
    _child_setup()
    ppid = os.getppid()
    try:
        import courier

        from apex.agents import get_builder

        config, _ = _load_config(net, num_actors, max_batch)
        client = courier.Client(address, call_timeout=config.inference.call_timeout_seconds + 5)
        actor = get_builder(config).make_actor(
            config, actor_id, client, DiscardWriter(), inference=client if central else None
        )
        timed = TimedQ(actor._qs, measuring)
        actor._qs = timed  # the actor-observed forward time
        for _ in range(3):
            actor.step()
        counter.value = actor.env_steps
        conn.send(("ready", os.getpid()))
        while not quit_flag.value and not _parent_gone(ppid):
            if conn.poll():
                msg = conn.recv()
                if msg[0] == "samples":
                    conn.send(("samples", timed.samples))
                    timed.samples = []
                elif msg[0] == "quit":
                    break
            if not running.value:
                time.sleep(0.02)
                continue
            actor.step()
            counter.value = actor.env_steps
        actor.close()
    except Exception:  # noqa: BLE001 - the bench reports it and fails the point
        conn.send(
            (
                "error",
                f"actor {actor_id} ({'central' if central else 'local'}): "
                + traceback.format_exc(),
            )
        )
        sys.exit(1)


def _paper_main(nets: list[str], sizes: list[int], repeats: int, conn: Any) -> None:
    """Forward time (wall, CPU) per batch size; sends {net: [{batch, wall_ms, cpu_ms}]}."""
    _child_setup()
    try:
        from apex.agents import make_network, make_policy

        out: dict[str, list[dict]] = {}
        rng = np.random.default_rng(0)
        for net in nets:
            config, spec = _load_config(net, 1, max(sizes))
            policy = make_policy(config, spec)
            policy.set_weights(make_network(config, spec).get_weights())
            rows = []
            for b in sizes:
                shape = (b, *spec.observation_shape)
                if spec.observation_dtype == "uint8":
                    obs = rng.integers(0, 256, shape, dtype=np.uint8)
                else:
                    obs = rng.normal(size=shape).astype(np.float32)
                policy(obs, None)  # trace / warm
                t = time.perf_counter()
                policy(obs, None)
                single = time.perf_counter() - t
                inner = max(1, min(2000, int(0.2 / max(single, 1e-7))))
                walls, cpus = [], []
                for _ in range(repeats):
                    w0, c0 = time.perf_counter(), time.process_time()
                    for _ in range(inner):
                        policy(obs, None)
                    walls.append((time.perf_counter() - w0) / inner)
                    cpus.append((time.process_time() - c0) / inner)
                rows.append(
                    {
                        "batch": b,
                        "wall_ms": 1e3 * statistics.median(walls),
                        "cpu_ms": 1e3 * statistics.median(cpus),
                        "calls_per_repeat": inner,
                    }
                )
                print(
                    f"  paper {net} batch {b}: {rows[-1]['wall_ms']:.3f} ms wall, "
                    f"{rows[-1]['cpu_ms']:.3f} ms CPU",
                    flush=True,
                )
            out[net] = rows
        conn.send(("result", out))
    except Exception:  # noqa: BLE001 - the bench reports it
        conn.send(("error", "paper process: " + traceback.format_exc()))
        sys.exit(1)


# ------------------------------------------------------------------- parent
def _stop_processes(procs: list[Any], grace: float = 10.0) -> None:
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
        if p in _STARTED and not p.is_alive():
            _STARTED.remove(p)


def _start(ctx: Any, target: Callable, args: tuple, name: str) -> Any:
    p = ctx.Process(target=target, args=args, name=name, daemon=True)
    p.start()
    _STARTED.append(p)
    return p


def _recv(conn: Any, proc: Any, timeout: float, what: str) -> tuple:
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


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


class Group:
    """One net: the inference process and K_max local and K_max central actors
    (K_max = the largest --actors); a point with K actors steps the first K of
    one kind, the others idle (asleep, no CPU)."""

    def __init__(self, ctx: Any, net: str, max_actors: int, max_batch: int):
        self.net = net
        self.procs: list[Any] = []
        self.quit = ctx.RawValue("b", 0)
        self.measuring = ctx.RawValue("b", 0)
        self.actors: dict[str, list[dict]] = {"local": [], "central": []}
        parent, child = ctx.Pipe()
        self.server_conn = parent
        self.server = _start(
            ctx, _server_main, (net, max_actors, max_batch, child), f"inference-{net}"
        )
        self.procs.append(self.server)
        _, self.server_pid, self.address = _recv(
            parent, self.server, STARTUP_TIMEOUT, "the inference process"
        )
        import courier

        self.client = courier.Client(self.address, call_timeout=30)
        for kind in ("local", "central"):
            for i in range(max_actors):
                parent, child = ctx.Pipe()
                counter, running = ctx.RawValue("q", 0), ctx.RawValue("b", 0)
                args = (net, i, max_actors, max_batch, kind == "central", self.address, child)
                p = _start(
                    ctx,
                    _actor_main,
                    (*args, counter, running, self.measuring, self.quit),
                    f"actor-{kind}-{i}",
                )
                self.procs.append(p)
                self.actors[kind].append(
                    {"proc": p, "conn": parent, "counter": counter, "running": running}
                )
        for kind, actors in self.actors.items():
            for i, a in enumerate(actors):
                _, a["pid"] = _recv(a["conn"], a["proc"], STARTUP_TIMEOUT, f"{kind} actor {i}")

    def _check(self) -> None:
        """PointFailed if any process of the group died or reported an error."""
        for conn, proc, what in [(self.server_conn, self.server, "the inference process")] + [
            (a["conn"], a["proc"], f"{kind} actor {i}")
            for kind, actors in self.actors.items()
            for i, a in enumerate(actors)
        ]:
            if conn.poll():
                msg = conn.recv()
                if msg[0] == "error":
                    raise PointFailed(msg[1])
            if not proc.is_alive():
                raise PointFailed(f"{what} exited (code {proc.exitcode})")

    def _sleep(self, seconds: float) -> None:
        deadline = time.time() + seconds
        while time.time() < deadline:
            self._check()
            time.sleep(min(0.25, max(0.0, deadline - time.time())))

    def measure(
        self, mode: str, k: int, wait_ms: float | None, warmup: float, seconds: float
    ) -> dict:
        """One point: the first `k` actors of `mode` step for warmup + seconds."""
        actors = self.actors[mode][:k]
        if mode == "central":
            self.client.configure(wait_ms, k)
        for a in actors:
            a["running"].value = 1
        try:
            self._sleep(warmup)
            pids = [a["pid"] for a in actors] + [self.server_pid]
            self.client.stats()  # resets the server's figures
            steps0 = [a["counter"].value for a in actors]
            cpu0, t0 = _cpu_seconds(pids), time.time()
            self.measuring.value = 1
            self._sleep(seconds)
            self.measuring.value = 0
            steps1 = [a["counter"].value for a in actors]
            cpu1, t1 = _cpu_seconds(pids), time.time()
            server = dict(self.client.stats()) if mode == "central" else {}
        finally:
            self.measuring.value = 0
            for a in actors:
                a["running"].value = 0
        steps = [b - a for a, b in zip(steps0, steps1)]
        stalled = [i for i, s in enumerate(steps) if s == 0]
        if stalled:
            raise PointFailed(f"{mode} actors {stalled} made no env step in {seconds:.0f} s (hung)")
        samples: list[float] = []
        for i, a in enumerate(actors):
            a["conn"].send(("samples",))
            samples += _recv(a["conn"], a["proc"], REPLY_TIMEOUT, f"{mode} actor {i}")[1]
        rss, uss = [], []
        for a in actors:
            info = psutil.Process(a["pid"]).memory_full_info()
            rss.append(info.rss / 2**20)
            uss.append(info.uss / 2**20)
        server_mem = psutil.Process(self.server_pid).memory_full_info()
        total = sum(steps)
        return {
            "env_steps_per_second": total / (t1 - t0),
            "per_actor_env_steps_per_second": [s / (t1 - t0) for s in steps],
            "actor_forward_ms_p50": _pct([1e3 * s for s in samples], 50),
            "actor_forward_ms_p99": _pct([1e3 * s for s in samples], 99),
            "actor_forward_calls": len(samples),
            "cpu_us_per_env_step": 1e6 * (cpu1 - cpu0) / max(total, 1),
            "server": server,
            "actor_rss_mb": rss,
            "actor_uss_mb": uss,
            "server_rss_mb": server_mem.rss / 2**20,
            "loadavg": os.getloadavg(),
        }

    def close(self) -> None:
        self.quit.value = 1
        for conn in [self.server_conn] + [a["conn"] for v in self.actors.values() for a in v]:
            try:
                conn.send(("quit",))
            except (OSError, ValueError):
                pass
        _stop_processes(self.procs)


def _modes(waits: list[float]) -> list[tuple[str, float | None]]:
    return [("local", None)] + [("central", w) for w in waits]


def live(args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    """Every (K, mode) point of every net, in ABBA order over the repeats."""
    ctx = mp.get_context("spawn")
    points: list[dict] = []
    errors: list[str] = []
    kmax = max(args.actors)
    for net in args.nets:
        print(f"[{net}] starting the inference process and {2 * kmax} actors", flush=True)
        t = time.time()
        group = None
        try:
            group = Group(ctx, net, kmax, args.max_batch)
            print(f"[{net}] ready in {time.time() - t:.0f} s", flush=True)
            order = [(k, mode, wait) for k in args.actors for mode, wait in _modes(args.waits_ms)]
            for r in range(args.repeats):
                for k, mode, wait in order if r % 2 == 0 else order[::-1]:  # ABBA
                    p = group.measure(mode, k, wait, args.warmup, args.seconds)
                    p.update(net=net, actors=k, mode=mode, wait_ms=wait, repeat=r)
                    points.append(p)
                    s = p["server"]
                    print(
                        f"[{net} K={k}] {_label(mode, wait):<12} r{r}: "
                        f"{p['env_steps_per_second']:8,.0f} env steps/s, actor fwd "
                        f"p50 {p['actor_forward_ms_p50']:.2f} ms, batch p50 "
                        f"{s.get('inference/batch_observations_p50', '-')}, "
                        f"{p['cpu_us_per_env_step']:.0f} us CPU/step",
                        flush=True,
                    )
        except PointFailed as err:
            print(f"[{net}] FAILED: {err}", file=sys.stderr, flush=True)
            errors.append(f"{net}: {err}")
        finally:
            if group is not None:
                group.close()
            _stop_processes(list(_STARTED))
    return points, errors


def paper(args: argparse.Namespace) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = _start(ctx, _paper_main, (args.nets, args.paper_sizes, args.paper_repeats, child), "paper")
    try:
        return _recv(parent, p, args.paper_timeout, "the forward-pass process")[1]
    finally:
        _stop_processes([p])


# ------------------------------------------------------------------ tables
def _label(mode: str, wait: float | None) -> str:
    return "local" if mode == "local" else f"central {wait:g} ms"


def _f(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _med(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


class Table:
    def __init__(self, title: str, headers: list[str]):
        self.title, self.headers, self.rows = title, headers, []

    def add(self, *cells: Any) -> None:
        self.rows.append([c if isinstance(c, str) else _f(c) for c in cells])

    def text(self) -> str:
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) for i, h in enumerate(self.headers)]
        line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
        return "\n".join([self.title, line(self.headers)] + [line(r) for r in self.rows])

    def markdown(self) -> str:
        out = [f"**{self.title}**", "", "| " + " | ".join(self.headers) + " |"]
        out.append("|" + "|".join("---:" for _ in self.headers) + "|")
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out)


def summarise(points: list[dict], args: argparse.Namespace) -> tuple[list[Table], list[dict]]:
    curve = Table(
        "Latency-batching curve (medians over repeats; env steps/s total over K actors)",
        [
            "net",
            "K",
            "inference",
            "env steps/s",
            "vs local",
            "actor fwd p50 ms",
            "actor fwd p99 ms",
            "server lat p50 ms",
            "server lat p99 ms",
            "queue p50 ms",
            "batch obs p50",
            "batch obs p90",
            "reqs/batch p50",
            "fwd ms p50",
            "CPU us/step",
        ],
    )
    memory = Table(
        "Memory per actor process (MB, at the group's end; median over actors)",
        [
            "net",
            "K",
            "local RSS",
            "central RSS",
            "saved RSS",
            "local USS",
            "central USS",
            "saved USS",
            "inference proc RSS",
        ],
    )
    summary: list[dict] = []
    for net in args.nets:
        for k in args.actors:
            group = [p for p in points if p["net"] == net and p["actors"] == k]
            if not group:
                continue
            local_rate = None
            for mode, wait in _modes(args.waits_ms):
                ps = [p for p in group if p["mode"] == mode and p["wait_ms"] == wait]
                if not ps:
                    continue

                def m(key: str, ps: list[dict] = ps) -> float | None:
                    return _med([p[key] for p in ps])

                def s(key: str, ps: list[dict] = ps) -> float | None:
                    return _med([p["server"].get(f"inference/{key}") for p in ps])

                rate = m("env_steps_per_second")
                if mode == "local":
                    local_rate = rate
                row = {
                    "net": net,
                    "actors": k,
                    "mode": mode,
                    "wait_ms": wait,
                    "repeats": len(ps),
                    "env_steps_per_second": rate,
                    "vs_local": rate / local_rate if rate and local_rate else None,
                    "actor_forward_ms_p50": m("actor_forward_ms_p50"),
                    "actor_forward_ms_p99": m("actor_forward_ms_p99"),
                    "server_latency_ms_p50": s("latency_ms_p50"),
                    "server_latency_ms_p99": s("latency_ms_p99"),
                    "queue_wait_ms_p50": s("queue_wait_ms_p50"),
                    "batch_observations_p50": s("batch_observations_p50"),
                    "batch_observations_p90": s("batch_observations_p90"),
                    "batch_requests_p50": s("batch_requests_p50"),
                    "forward_ms_p50": s("forward_ms_p50"),
                    "cpu_us_per_env_step": m("cpu_us_per_env_step"),
                }
                summary.append(row)
                curve.add(
                    net,
                    str(k),
                    _label(mode, wait),
                    _f(rate, 0),
                    _f(row["vs_local"], 2) + "x" if row["vs_local"] else "-",
                    _f(row["actor_forward_ms_p50"], 2),
                    _f(row["actor_forward_ms_p99"], 2),
                    _f(row["server_latency_ms_p50"], 2),
                    _f(row["server_latency_ms_p99"], 2),
                    _f(row["queue_wait_ms_p50"], 2),
                    _f(row["batch_observations_p50"], 0),
                    _f(row["batch_observations_p90"], 0),
                    _f(row["batch_requests_p50"], 1),
                    _f(row["forward_ms_p50"], 2),
                    _f(row["cpu_us_per_env_step"], 0),
                )
            last = max(p["repeat"] for p in group)
            mem = {}
            for mode in ("local", "central"):
                ps = [p for p in group if p["mode"] == mode and p["repeat"] == last]
                mem[mode] = (
                    (_med(ps[-1]["actor_rss_mb"]), _med(ps[-1]["actor_uss_mb"]))
                    if ps
                    else (None,) * 2
                )
            server_rss = _med([p["server_rss_mb"] for p in group if p["repeat"] == last])
            (lr, lu), (cr, cu) = mem["local"], mem["central"]
            memory.add(
                net,
                str(k),
                _f(lr, 0),
                _f(cr, 0),
                _f(lr - cr, 0) if lr and cr else "-",
                _f(lu, 0),
                _f(cu, 0),
                _f(lu - cu, 0) if lu and cu else "-",
                _f(server_rss, 0),
            )
            summary.append(
                {
                    "net": net,
                    "actors": k,
                    "memory_mb": {
                        "local_rss": lr,
                        "central_rss": cr,
                        "local_uss": lu,
                        "central_uss": cu,
                        "inference_process_rss": server_rss,
                    },
                }
            )
    return [curve, memory], summary


def _interp(rows: list[dict], batch: int, key: str) -> float:
    """Per-call `key` at `batch`, linear between the measured sizes around it."""
    pts = sorted((r["batch"], r[key]) for r in rows)
    for (b0, v0), (b1, v1) in zip(pts, pts[1:]):
        if b0 <= batch <= b1:
            return v0 + (v1 - v0) * (batch - b0) / (b1 - b0)
    b, v = pts[-1] if batch > pts[-1][0] else pts[0]
    return v * batch / b


def paper_tables(result: dict, args: argparse.Namespace) -> tuple[list[Table], list[dict]]:
    fwd = Table(
        "Forward pass against batch size (ActingPolicy, random observations; median of repeats)",
        ["net", "batch", "wall ms", "CPU ms", "CPU us/obs"],
    )
    for net, rows in result.items():
        for r in rows:
            fwd.add(
                net,
                str(r["batch"]),
                _f(r["wall_ms"], 3),
                _f(r["cpu_ms"], 3),
                _f(1e3 * r["cpu_ms"] / r["batch"], 2),
            )
    e = args.paper_envs
    scale = Table(
        f"On paper: CPU per env step of the forward passes, N actors x E={e} envs "
        f"(central batch = N x E, at most max_batch={args.max_batch}; local: batch {e} per actor)",
        [
            "net",
            "N",
            "central batch",
            "central us/step",
            "local us/step",
            "saving",
            "uncapped batch",
            "uncapped us/step",
            "uncapped saving",
        ],
    )
    out = []
    for net, rows in result.items():
        local = _interp(rows, e, "cpu_ms") / e * 1e3
        for n in args.paper_actors:
            b = min(n * e, args.max_batch)
            central = _interp(rows, b, "cpu_ms") / b * 1e3
            bu = n * e
            uncapped = _interp(rows, bu, "cpu_ms") / bu * 1e3
            rec = {
                "net": net,
                "actors": n,
                "envs_per_actor": e,
                "central_batch": b,
                "central_cpu_us_per_step": central,
                "local_cpu_us_per_step": local,
                "saving": 1 - central / local,
                "uncapped_batch": bu,
                "uncapped_cpu_us_per_step": uncapped,
                "uncapped_saving": 1 - uncapped / local,
            }
            out.append(rec)
            scale.add(
                net,
                str(n),
                str(b),
                _f(central, 2),
                _f(local, 2),
                f"{100 * rec['saving']:.0f}% ({local / central:.1f}x)",
                str(bu),
                _f(uncapped, 2),
                f"{100 * rec['uncapped_saving']:.0f}% ({local / uncapped:.1f}x)",
            )
    return [fwd, scale], out


# -------------------------------------------------------------------- main
def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _names(text: str) -> list[str]:
    names = [x for x in text.split(",") if x]
    for n in names:
        if n not in NETS:
            raise argparse.ArgumentTypeError(f"unknown net {n!r}: one of {sorted(NETS)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--nets",
        type=_names,
        default=["mlp", "conv"],
        help="comma list of mlp (CartPole), conv (Atari Pong)",
    )
    ap.add_argument("--actors", type=_ints, default=[1, 2, 4], help="actor counts K")
    ap.add_argument(
        "--waits_ms",
        type=_floats,
        default=[0.0, 2.0, 5.0],
        help="inference.max_wait_ms values (central)",
    )
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per point")
    ap.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds per point")
    ap.add_argument("--repeats", type=int, default=2, help="ABBA repeats of every mode")
    ap.add_argument("--max_batch", type=int, default=256, help="inference.max_batch")
    ap.add_argument("--no_live", action="store_true", help="skip the live processes")
    ap.add_argument("--no_paper", action="store_true", help="skip the forward-pass table")
    ap.add_argument("--paper_sizes", type=_ints, default=[16, 32, 64, 128, 256, 512, 1024, 2048])
    ap.add_argument("--paper_repeats", type=int, default=5)
    ap.add_argument("--paper_actors", type=_ints, default=[8, 32, 128])
    ap.add_argument("--paper_envs", type=int, default=16)
    ap.add_argument("--paper_timeout", type=float, default=900.0)
    ap.add_argument("--markdown", default="", help="also write the tables here (markdown)")
    return ap.parse_args(argv)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in background
    print(header("inference"), flush=True)
    t0 = time.time()
    load0 = os.getloadavg()
    points: list[dict] = []
    errors: list[str] = []
    forward: dict = {}
    try:
        if not args.no_paper:
            print("forward pass against batch size ...", flush=True)
            try:
                forward = paper(args)
            except PointFailed as err:
                errors.append(f"paper: {err}")
                print(f"paper FAILED: {err}", file=sys.stderr, flush=True)
        if not args.no_live:
            points, live_errors = live(args)
            errors += live_errors
    except KeyboardInterrupt:
        print("interrupted: stopping every process the bench started", file=sys.stderr)
        raise
    finally:
        _stop_processes(list(_STARTED), grace=2.0)
    tables, summary = summarise(points, args) if points else ([], [])
    paper_summary: list[dict] = []
    if forward:
        more, paper_summary = paper_tables(forward, args)
        tables += more
    print()
    for t in tables:
        print(t.text(), end="\n\n")
    for e in errors:
        print(f"FAILED: {e}", file=sys.stderr)
    path = save_results(
        "inference",
        {
            "args": vars(args),
            "wall_seconds": time.time() - t0,
            "loadavg_start": load0,
            "loadavg_end": os.getloadavg(),
            "summary": summary,
            "points": points,
            "forward": forward,
            "on_paper": paper_summary,
            "errors": errors,
        },
    )
    print(f"wrote {path} ({time.time() - t0:.0f} s)")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"{header('inference')}; results in {os.path.relpath(path, ROOT)}\n\n")
            f.write("\n\n".join(t.markdown() for t in tables) + "\n")
            if errors:
                f.write("\nFailed: " + "; ".join(errors) + "\n")
        print(f"wrote {args.markdown}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
