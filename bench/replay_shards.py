r"""Replay shards (issue 14): what S Reverb servers insert and sample, and at what
CPU per item on each shard; then whole programs with S = 1 and S = 2.

    .venv/bin/python bench/replay_shards.py [--shards 1 2 4] [--seconds 20]
        [--program_repeats 2] [--program_budget 600000]

**Servers** (for each S, one after the other): S Reverb servers, each a process
of its own with the CartPole transition table of one shard
(`apex.replay.shards.shard_config` of the default config, rate limiter opened
wide), fed by S writer processes (writer w writes to shard w % S: the actors'
rule) with real packed transitions through apex's own TransitionWriter, for
--seconds; then sampled for --seconds by one sampling process with one Reverb
TrajectoryDataset stream per shard (batches of 64, whole batches per shard, as
the learner samples). psutil reads each server process's CPU seconds in each
phase: CPU per insert and CPU per sampled item *on each shard*. Inserts/s and
sampled items/s are totals over the shards. On this 2-core machine S servers
plus S writers share two cores, so totals cannot grow with S here; what must
hold is that the cost per item on a shard does not grow with S, and that is
what extrapolates: with a core per shard (and per writer), throughput is about
S x (1 / CPU per item).

**Programs** (--program_repeats > 0): the default CartPole program
(configs/apex_cartpole.py) with replay.num_shards 1 and 2, alternated
(1, 2, 1, 2, ...), each to the solve target or --program_budget env steps:
env steps/s, learner steps/s and seconds and env steps to solve, medians.

Records the commit; writes bench/results/replay_shards-<commit>.json. Run
nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time

import psutil
from common import ROOT, header, save_results

sys.path.insert(0, ROOT)

BATCH = 64


def _config(num_shards: int):
    from apex import ApexConfig

    c = ApexConfig()
    c.replay.num_shards = num_shards
    c.replay.capacity = 20_000 * num_shards
    c.replay.min_size = num_shards
    c.replay.error_buffer = 1e12  # no rate limiting: the servers' own costs
    return c


def _server(num_shards: int, port_queue, stop) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import reverb

    from apex import env_spec
    from apex.agents import make_tables
    from apex.replay import shard_config

    c = _config(num_shards)
    server = reverb.Server(make_tables(shard_config(c), env_spec(c.env)))
    port_queue.put((os.getpid(), server.port))
    stop.wait()
    server.stop()


def _writer(address: str, actor: int, num_writers: int, stop, counter) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import reverb

    from apex.agents import TRANSITIONS_TABLE, QNetwork, VectorActor
    from apex.replay import TransitionWriter
    from tests.fakes import FakeVariableSource

    c = _config(1)
    c.actor.num_actors = num_writers  # this writer's slots on the actors' epsilon ladder
    c.actor.envs_per_actor = 16
    client = reverb.Client(address)
    source = FakeVariableSource(QNetwork(4, 2, c.learner.hidden_sizes).get_weights(), version=0)
    eps = np.full(c.actor.envs_per_actor, 0.4, np.float32)
    with TransitionWriter(client, TRANSITIONS_TABLE, actor, eps) as writer:
        a = VectorActor(c, actor, source, writer)
        while not stop.is_set():
            a.step()
        counter.value = a.items_written
        a.close()


def _sampler(addresses: list[str], num_shards: int, seconds: float, out) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import threading

    from apex import env_spec
    from apex.agents import TRANSITIONS_TABLE, item_signature
    from apex.replay import make_dataset, shard_config

    c = _config(num_shards)
    sig = item_signature(shard_config(c), env_spec(c.env))
    counts = [0] * len(addresses)
    deadline = time.time() + seconds

    def drain(i: int, address: str) -> None:
        it = iter(make_dataset(address, sig, BATCH, table=TRANSITIONS_TABLE))
        while time.time() < deadline:
            next(it)
            counts[i] += BATCH

    threads = [threading.Thread(target=drain, args=(i, a)) for i, a in enumerate(addresses)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(counts)


def _cpu(pids: list[int]) -> list[float]:
    out = []
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        out.append(t.user + t.system)
    return out


def servers_run(num_shards: int, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    ports = ctx.Queue()
    servers = [
        ctx.Process(target=_server, args=(num_shards, ports, stop)) for _ in range(num_shards)
    ]
    for p in servers:
        p.start()
    started = [ports.get(timeout=120) for _ in servers]
    pids = [pid for pid, _ in started]
    addresses = [f"localhost:{port}" for _, port in started]
    try:
        # Inserts: writer w -> shard w % S.
        wstop = ctx.Event()
        counters = [ctx.Value("q", 0) for _ in range(num_shards)]
        writers = [
            ctx.Process(
                target=_writer, args=(addresses[w % num_shards], w, num_shards, wstop, counters[w])
            )
            for w in range(num_shards)
        ]
        import reverb

        clients = [reverb.Client(a) for a in addresses]
        for p in writers:
            p.start()
        # Start the clock once every writer inserts (their TF import is not the servers').
        table = "transitions"
        deadline = time.time() + 300  # a hang guard: every writer imports TF first
        while any(
            c.server_info()[table].rate_limiter_info.insert_stats.completed == 0 for c in clients
        ):
            if time.time() > deadline or not all(p.is_alive() for p in writers):
                raise RuntimeError("a writer did not start inserting (see its traceback above)")
            time.sleep(0.2)
        cpu0 = _cpu(pids)
        ins0 = [c.server_info()[table].rate_limiter_info.insert_stats.completed for c in clients]
        t0 = time.time()
        time.sleep(seconds)
        cpu1 = _cpu(pids)
        ins1 = [c.server_info()[table].rate_limiter_info.insert_stats.completed for c in clients]
        t1 = time.time()
        wstop.set()
        for p in writers:
            p.join(timeout=60)
        inserts = [b - a for a, b in zip(ins0, ins1)]
        insert_cpu = [b - a for a, b in zip(cpu0, cpu1)]
        # Samples: one stream per shard, whole batches.
        out = ctx.Queue()
        sampler = ctx.Process(target=_sampler, args=(addresses, num_shards, seconds + 15, out))
        sampler.start()
        while (
            sum(c.server_info()[table].rate_limiter_info.sample_stats.completed for c in clients)
            == 0
        ):
            time.sleep(0.2)
        cpu2 = _cpu(pids)
        s0 = [c.server_info()[table].rate_limiter_info.sample_stats.completed for c in clients]
        t2 = time.time()
        time.sleep(seconds)
        cpu3 = _cpu(pids)
        s1 = [c.server_info()[table].rate_limiter_info.sample_stats.completed for c in clients]
        t3 = time.time()
        out.get(timeout=120)
        sampler.join(timeout=60)
        sampled = [b - a for a, b in zip(s0, s1)]
        sample_cpu = [b - a for a, b in zip(cpu2, cpu3)]
    finally:
        stop.set()
        for p in servers:
            p.join(timeout=30)
    return {
        "shards": num_shards,
        "inserts_per_second": sum(inserts) / (t1 - t0),
        "sampled_items_per_second": sum(sampled) / (t3 - t2),
        "per_shard": [
            {
                "inserts": inserts[i],
                "sampled_items": sampled[i],
                "cpu_us_per_insert": 1e6 * insert_cpu[i] / max(inserts[i], 1),
                "cpu_us_per_sampled_item": 1e6 * sample_cpu[i] / max(sampled[i], 1),
            }
            for i in range(num_shards)
        ],
    }


def program_run(num_shards: int, budget: int) -> dict:
    run_dir = tempfile.mkdtemp(prefix="apex-bench-shards-")
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        "--config=configs/apex_cartpole.py",
        f"--config.run_dir={run_dir}",
        f"--config.replay.num_shards={num_shards}",
        "--config.stop.when_solved=true",
        f"--config.stop.max_actor_steps={budget}",
        "--config.stop.max_wall_seconds=None",
        "--config.logging.tensorboard=False",
    ]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    wall = time.time() - t0
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    return {
        "shards": num_shards,
        "returncode": proc.returncode,
        "launcher_wall_seconds": wall,
        "env_steps_per_second": s.get("env_steps_per_second"),
        "learner_steps_per_second": s.get("learner_steps_per_second"),
        "solved_at_wall_seconds": s.get("solved_at_wall_seconds"),
        "solved_at_env_steps": s.get("solved_at_env_steps"),
        "run_dir": run_dir,
    }


def _joined(rows: list[dict], key: str) -> str:
    return ", ".join(f"{r[key]:.1f}" for r in rows)


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--program_repeats", type=int, default=2)
    ap.add_argument("--program_budget", type=int, default=600_000)
    args = ap.parse_args()
    print(header("replay_shards"), flush=True)
    servers = []
    for s in args.shards:
        r = servers_run(s, args.seconds)
        servers.append(r)
        per = r["per_shard"]
        print(
            f"S={s}: {r['inserts_per_second']:,.0f} inserts/s, "
            f"{r['sampled_items_per_second']:,.0f} sampled items/s (totals); per shard CPU "
            f"us/insert {_joined(per, 'cpu_us_per_insert')}, "
            f"us/sampled item {_joined(per, 'cpu_us_per_sampled_item')}",
            flush=True,
        )
    programs = []
    for _ in range(args.program_repeats):
        for s in (1, 2):
            r = program_run(s, args.program_budget)
            programs.append(r)
            print(
                f"program S={s}: rc {r['returncode']}, env steps/s {r['env_steps_per_second']:,.0f}, "
                f"learner steps/s {r['learner_steps_per_second']:,.1f}, solved at "
                f"{r['solved_at_wall_seconds']} s / {r['solved_at_env_steps']} env steps",
                flush=True,
            )
    medians = {}
    for s in (1, 2):
        rows = [r for r in programs if r["shards"] == s]
        medians[s] = {
            k: _median([r[k] for r in rows])
            for k in (
                "env_steps_per_second",
                "learner_steps_per_second",
                "solved_at_wall_seconds",
                "solved_at_env_steps",
            )
        }
    if programs:
        print("program medians:", json.dumps(medians))
    path = save_results(
        "replay_shards",
        {"args": vars(args), "servers": servers, "programs": programs, "medians": medians},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
