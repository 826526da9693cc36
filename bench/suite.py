r"""The performance suite (issue 6): every part next to this machine's bound, the
whole program across actor and env counts, memory, and replay bytes.

    .venv/bin/python bench/suite.py                   # everything (~20 min on 2 cores)
    .venv/bin/python bench/suite.py --parts components,bytes --repeats 3
    .venv/bin/python bench/suite.py --parts sweep --actors 1 2 --envs 8 32 --budget 60

Parts (all measured in this one run, side by side):
- components: bench/components.py in a fresh process: raw env stepping, inserts,
  the actor process, the learner on constant tensors vs fed from Reverb,
  sampling alone, priority-update latency; each with its ratio to the bound.
- bytes: a Reverb server process filled with N real CartPole transitions
  through apex's writer: its memory growth per item against the raw payload of
  an item (the bytes of its fields), and the checkpoint's bytes per item.
- sweep: the default CartPole program (local_mp) for each actor count x envs per
  actor, stopping when solved or after --budget s: env steps/s, learner steps/s,
  samples per insert achieved, launch -> first learner step, launch -> solved,
  and peak RSS per node kind (from the nodes' heartbeats).
Prints one table per part and writes bench/results/suite-<commit>.json
(suite-<parts>-<commit>.json for a subset).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

from common import ROOT, fmt, header, run_program, save_results

TARGETS = {
    "actor process / raw env": 0.5,
    "learner from Reverb / constant input": 0.9,
}


def components(args) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "components.py"),
            f"--repeats={args.repeats}",
            f"--seconds={args.seconds}",
            f"--envs={args.component_envs}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    out_line = [line for line in proc.stdout.splitlines() if line.startswith("wrote ")][-1]
    with open(out_line.split(" ", 1)[1]) as f:
        med = json.load(f)["medians"]
    from components import ROWS

    table = []
    for label, bound, ours, unit in ROWS:
        table.append(
            {
                "part": label,
                "bound": med[bound],
                "apex": med[ours],
                "ratio": med[ours] / med[bound],
                "unit": unit,
                "target": TARGETS.get(label),
            }
        )
    print(
        f"\n## components ({args.component_envs} envs, medians of {args.repeats} x {args.seconds:g} s)"
    )
    print("| part | bound | apex | apex / bound | target | unit |\n|---|---|---|---|---|---|")
    for r in table:
        target = "-" if r["target"] is None else f">= {r['target']:.2f}"
        print(
            f"| {r['part']} | {r['bound']:,.0f} | {r['apex']:,.0f} | {r['ratio']:.2f} | {target} | {r['unit']} |"
        )
    print(
        f"| priority update, one batch | - | {med['priority_update_ms_per_batch']:.2f} ms | - | - | |"
    )
    print(
        f"| CPU per SGD step / per sampled batch, each alone | {med['sgd_cpu_ms_per_step']:.2f} ms "
        f"| {med['sample_cpu_ms_per_batch']:.2f} ms | - | - | |"
    )
    return {"medians": med, "rows": table}


def _fill_server(n: int, out_queue, ready, go, config_file=None, overrides=None) -> None:
    """A Reverb server process with the tables of `config_file` (default: the
    default CartPole config) and `overrides` ({'replay.frame_storage': 'packed'});
    reports its RSS each time `go` is set (then cleared)."""
    import psutil
    import reverb

    from apex import ApexConfig, env_spec, load_config_file
    from apex.agents import make_tables

    c = load_config_file(config_file) if config_file else ApexConfig()
    for path, value in (overrides or {}).items():
        section, field = path.split(".")
        setattr(getattr(c, section), field, value)
    c.replay.capacity = n
    c.replay.min_size = 1
    c.replay.error_buffer = 1e12
    server = reverb.Server(make_tables(c, env_spec(c.env)))
    me = psutil.Process()
    time.sleep(1.0)
    out_queue.put(("port", server.port, me.memory_info().rss))
    while not ready.is_set():
        if go.wait(0.2):
            time.sleep(1.0)
            go.clear()
            out_queue.put(("filled", None, me.memory_info().rss))
    server.stop()


def replay_bytes(args) -> dict:
    import numpy as np
    import reverb

    sys.path.insert(0, ROOT)
    from components import _Weights

    from apex import ApexConfig, env_spec
    from apex.agents import TRANSITIONS_TABLE, VectorActor, item_signature
    from apex.replay import TransitionWriter, unpack_item

    n = args.bytes_items
    ctx = mp.get_context("spawn")
    q, done, go = ctx.Queue(), ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_fill_server, args=(n, q, done, go), daemon=True)
    proc.start()
    _, port, rss0 = q.get(timeout=120)
    c = ApexConfig()
    c.actor.envs_per_actor = 16
    client = reverb.Client(f"localhost:{port}")

    rss = []
    with TransitionWriter(client, TRANSITIONS_TABLE, 0, np.full(16, 0.1, np.float32)) as w:
        actor = VectorActor(c, 0, _Weights(c), w)
        for target in (n // 2, n):  # the slope between half and full: no fixed costs
            while actor.items_written < target:
                actor.step()
            w.flush()  # every item is on the server
            while client.server_info()[TRANSITIONS_TABLE].current_size < target:
                time.sleep(0.2)
            go.set()
            rss.append(q.get(timeout=120)[2])
    done.set()
    proc.join(10)
    spec = env_spec(c.env)
    zero = {
        k: np.zeros(s.shape, s.dtype.as_numpy_dtype) for k, s in item_signature(c, spec).items()
    }
    stored = sum(v.nbytes for v in zero.values())
    fields = unpack_item(zero)  # the fields in their own types: the raw payload
    raw = sum(np.asarray(v).nbytes for v in fields.values())
    core = sum(
        np.asarray(fields[k]).nbytes for k in ("obs", "action", "reward", "discount", "next_obs")
    )
    per_item = (rss[1] - rss[0]) / (n - n // 2)
    result = {
        "items": n,
        "server_rss_bytes": [rss0, *rss],
        "server_rss_growth_bytes_per_item": per_item,
        "raw_payload_bytes_per_item": raw,
        "stored_column_bytes_per_item": stored,
        "raw_transition_bytes_per_item": core,
        "ratio_to_raw_payload": per_item / raw,
    }
    print(
        f"\n## replay bytes (CartPole transitions: server RSS growth from {n // 2:,} to {n:,} items)"
    )
    print(
        f"server memory per item {per_item:,.0f} B; raw payload {raw} B per item "
        f"(transition fields {core} B + provenance {raw - core} B); ratio {per_item / raw:.2f} "
        "(target <= 2)"
    )
    return result


def _peak_rss(run_dir: str) -> dict[str, float]:
    from apex import read_heartbeats

    kinds: dict[str, float] = {}
    for node, beat in read_heartbeats(run_dir).items():
        kind = node.split("_")[0]  # actor_3 -> actor
        peak = beat.get("peak_rss_mb")
        if peak is not None:
            kinds[kind] = max(kinds.get(kind, 0.0), float(peak))
    return kinds


def sweep(args) -> list[dict]:
    rows = []
    for actors in args.actors:
        for envs in args.envs:
            s = run_program(
                "configs/apex_cartpole.py",
                [
                    f"--config.actor.num_actors={actors}",
                    f"--config.actor.envs_per_actor={envs}",
                    "--config.stop.when_solved=true",
                    f"--config.stop.max_wall_seconds={args.budget}",
                    "--config.stop.max_actor_steps=None",
                    "--config.checkpoint.on_stop=false",
                    "--config.checkpoint.period_seconds=None",
                ],
                timeout=args.budget + 180,
            )
            row = {
                "actors": actors,
                "envs_per_actor": envs,
                "env_steps_per_second": s.get("env_steps_per_second"),
                "learner_steps_per_second": s.get("learner_steps_per_second"),
                "samples_per_insert": s.get("samples_per_insert"),
                "first_learner_step_seconds": s.get("first_learner_step_seconds"),
                "solved_at_wall_seconds": s.get("solved_at_wall_seconds"),
                "best_eval_return_mean": s.get("best_eval_return_mean"),
                "wall_seconds": s.get("wall_seconds"),
                "returncode": s.get("returncode"),
                "peak_rss_mb": _peak_rss(s["run_dir"]),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n## whole program, default CartPole config (stop when solved or at {args.budget:g} s)")
    print(
        "| actors x envs | env steps/s | learner steps/s | samples/insert | first step s | solved s "
        "| peak RSS MiB actor / learner+replay / coordinator+evaluator |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        rss = r["peak_rss_mb"]
        print(
            f"| {r['actors']} x {r['envs_per_actor']} | {fmt(r['env_steps_per_second'])} | "
            f"{fmt(r['learner_steps_per_second'])} | {fmt(r['samples_per_insert'])} | "
            f"{fmt(r['first_learner_step_seconds'])} | "
            f"{fmt(r['solved_at_wall_seconds']) if r['solved_at_wall_seconds'] else 'not solved'} | "
            f"{rss.get('actor', 0):,.0f} / {rss.get('learner', 0):,.0f} / {rss.get('coordinator', 0):,.0f} |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--parts", default="components,bytes,sweep")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--component_envs", type=int, default=16)
    ap.add_argument("--bytes_items", type=int, default=200_000)
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--envs", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--budget", type=float, default=60.0)
    args = ap.parse_args()
    parts = args.parts.split(",")
    print(header("bench/suite.py"), flush=True)
    results: dict = {"args": vars(args)}
    t0 = time.time()
    if "components" in parts:
        results["components"] = components(args)
    if "bytes" in parts:
        results["bytes"] = replay_bytes(args)
    if "sweep" in parts:
        results["sweep"] = sweep(args)
    results["suite_seconds"] = time.time() - t0
    name = "suite" if set(parts) == {"components", "bytes", "sweep"} else "suite-" + "-".join(parts)
    print("\nresults:", save_results(name, results))


if __name__ == "__main__":
    main()
