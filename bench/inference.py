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
import multiprocessing as mp
import os
import signal
import sys
import time
from typing import Any

import numpy as np
import psutil
from children import STARTED, PointFailed, cpu_seconds, recv, start, stop_processes
from common import ROOT, header, save_results
from inference_procs import NETS, actor_main, paper_main, server_main
from inference_tables import label, modes, paper_tables, summarise

sys.path.insert(0, ROOT)

STARTUP_TIMEOUT = 300.0  # seconds for a group's processes to be ready (TF imports, 2 cores)
REPLY_TIMEOUT = 60.0  # seconds an actor or the server has to answer the bench


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
        self.server = start(
            ctx, server_main, (net, max_actors, max_batch, child), f"inference-{net}"
        )
        self.procs.append(self.server)
        _, self.server_pid, self.address = recv(
            parent, self.server, STARTUP_TIMEOUT, "the inference process"
        )
        import courier

        self.client = courier.Client(self.address, call_timeout=30)
        for kind in ("local", "central"):
            for i in range(max_actors):
                parent, child = ctx.Pipe()
                counter, running = ctx.RawValue("q", 0), ctx.RawValue("b", 0)
                args = (net, i, max_actors, max_batch, kind == "central", self.address, child)
                p = start(
                    ctx,
                    actor_main,
                    (*args, counter, running, self.measuring, self.quit),
                    f"actor-{kind}-{i}",
                )
                self.procs.append(p)
                self.actors[kind].append(
                    {"proc": p, "conn": parent, "counter": counter, "running": running}
                )
        for kind, actors in self.actors.items():
            for i, a in enumerate(actors):
                _, a["pid"] = recv(a["conn"], a["proc"], STARTUP_TIMEOUT, f"{kind} actor {i}")

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
            cpu0, t0 = cpu_seconds(pids), time.time()
            self.measuring.value = 1
            self._sleep(seconds)
            self.measuring.value = 0
            steps1 = [a["counter"].value for a in actors]
            cpu1, t1 = cpu_seconds(pids), time.time()
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
            samples += recv(a["conn"], a["proc"], REPLY_TIMEOUT, f"{mode} actor {i}")[1]
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
        stop_processes(self.procs)


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
            order = [(k, mode, wait) for k in args.actors for mode, wait in modes(args.waits_ms)]
            for r in range(args.repeats):
                for k, mode, wait in order if r % 2 == 0 else order[::-1]:  # ABBA
                    p = group.measure(mode, k, wait, args.warmup, args.seconds)
                    p.update(net=net, actors=k, mode=mode, wait_ms=wait, repeat=r)
                    points.append(p)
                    s = p["server"]
                    print(
                        f"[{net} K={k}] {label(mode, wait):<12} r{r}: "
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
            stop_processes(list(STARTED))
    return points, errors


def paper(args: argparse.Namespace) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = start(ctx, paper_main, (args.nets, args.paper_sizes, args.paper_repeats, child), "paper")
    try:
        return recv(parent, p, args.paper_timeout, "the forward-pass process")[1]
    finally:
        stop_processes([p])


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
        stop_processes(list(STARTED), grace=2.0)
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
