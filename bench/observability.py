r"""Issue-4 figures: the cost of looking inside replay and of watching a run.

    .venv/bin/python bench/observability.py inspect [--items 1000000]
    .venv/bin/python bench/observability.py overhead [--repeats 3 --seconds 40]

inspect: fills an in-process Reverb server with --items CartPole n-step
transitions (apex's table and writer), then times, on that live server,
`tools.replay stats`, `items --n=10` (oldest and newest), `priorities` and
`breakdown` both as library calls (snapshot + read) and as the CLI
(a fresh process, Python and TensorFlow start-up included); and reports the
checkpoint's size on disk. Checks that the table's sample count did not move.
overhead: alternates default CartPole runs with TensorBoard/CSV metrics and
heartbeats on (the default) and off (logging.tensorboard=false,
logging.heartbeat_period_seconds=0; the JSONL metrics stay on), --seconds each,
and reports env steps/s and learner steps/s medians and their ratio.
Writes bench/results/observability-<what>-<commit>.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import ROOT, fill_transitions, fmt, header, run_program, save_results


def inspect_bench(args) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import reverb

    from apex import ApexConfig, checkpointing, env_spec
    from apex.agents import TRANSITIONS_TABLE, make_tables
    from tools import replay_inspect as inspect

    c = ApexConfig()
    c.replay.capacity = args.items
    c.replay.min_size = 1
    c.replay.error_buffer = 1e12
    root = tempfile.mkdtemp(prefix="apex-inspect-bench-")
    server = reverb.Server(
        make_tables(c, env_spec(c.env)),
        checkpointer=reverb.checkpointers.DefaultCheckpointer(path=root),
    )
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    fill = fill_transitions(client, args.items)
    size = client.server_info()[TRANSITIONS_TABLE].current_size
    samples_before = client.server_info()[TRANSITIONS_TABLE].rate_limiter_info.sample_stats
    print(f"filled {size:,} items in {fill:.1f} s", flush=True)

    lib = {}
    t = time.time()
    inspect.table_stats(client)
    lib["stats"] = time.time() - t
    t = time.time()
    path = inspect.snapshot(client)
    lib["snapshot (checkpoint written by the server)"] = time.time() - t
    t = time.time()
    inspect.select_items(path, TRANSITIONS_TABLE, 10, "oldest")
    lib["items --n=10 --order=oldest (read)"] = time.time() - t
    t = time.time()
    inspect.select_items(path, TRANSITIONS_TABLE, 10, "newest")
    lib["items --n=10 --order=newest (read)"] = time.time() - t
    t = time.time()
    inspect.priority_summary(inspect.item_table(path, TRANSITIONS_TABLE, provenance=False))
    lib["priorities (read)"] = time.time() - t
    t = time.time()
    inspect.breakdown(inspect.item_table(path, TRANSITIONS_TABLE))
    lib["breakdown (read, all payloads decoded)"] = time.time() - t
    ckpt_bytes = checkpointing.directory_bytes(path)

    cli = {}
    for name, extra in [
        ("stats", []),
        ("items --n=10 --order=oldest", ["--n=10", "--order=oldest"]),
        ("items --n=10 --order=newest", ["--n=10", "--order=newest"]),
        ("priorities", []),
    ]:
        command = name.split()[0]
        t = time.time()
        out = subprocess.run(
            [sys.executable, "-m", "tools.replay", command, f"--server={address}", *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        cli[name] = time.time() - t
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
    samples_after = client.server_info()[TRANSITIONS_TABLE].rate_limiter_info.sample_stats
    server.stop()
    print(f"\n{size:,}-item table of CartPole transitions (this 2-core machine):")
    print("| operation | library s | CLI s (fresh process) |\n|---|---|---|")
    rows = [
        ("stats", "stats", "stats"),
        (
            "snapshot",
            "snapshot (checkpoint written by the server)",
            None,
        ),
        (
            "items --n=10 --order=oldest",
            "items --n=10 --order=oldest (read)",
            "items --n=10 --order=oldest",
        ),
        (
            "items --n=10 --order=newest",
            "items --n=10 --order=newest (read)",
            "items --n=10 --order=newest",
        ),
        ("priorities", "priorities (read)", "priorities"),
        ("breakdown", "breakdown (read, all payloads decoded)", None),
    ]
    for label, lk, ck in rows:
        print(f"| {label} | {lib[lk]:.2f} | {'-' if ck is None else f'{cli[ck]:.1f}'} |")
    print(f"checkpoint on disk: {ckpt_bytes / 1e6:.1f} MB ({ckpt_bytes / size:.0f} bytes/item)")
    moved = samples_after.completed - samples_before.completed
    print(f"samples taken from the table by all of this: {moved}")
    path = save_results(
        "observability-inspect",
        {
            "items": size,
            "fill_seconds": fill,
            "library_seconds": lib,
            "cli_seconds": cli,
            "checkpoint_bytes": ckpt_bytes,
            "samples_moved": moved,
        },
    )
    print(f"wrote {path}")


def overhead_bench(args) -> None:
    on: list[dict] = []
    off: list[dict] = []
    base = [
        f"--config.stop.max_wall_seconds={args.seconds}",
        "--config.stop.max_actor_steps=None",
    ]
    for i in range(args.repeats):
        for label, extra, sink in [
            ("on", [], on),
            (
                "off",
                [
                    "--config.logging.tensorboard=false",
                    "--config.logging.heartbeat_period_seconds=0",
                ],
                off,
            ),
        ]:
            s = run_program("configs/apex_cartpole.py", base + extra, timeout=args.seconds + 180)
            sink.append(s)
            print(
                f"run {i} {label}: env steps/s {fmt(s['env_steps_per_second'])}, "
                f"learner steps/s {fmt(s['learner_steps_per_second'])}",
                flush=True,
            )
    res = {}
    for key in ("env_steps_per_second", "learner_steps_per_second"):
        m_on = statistics.median(r[key] for r in on)
        m_off = statistics.median(r[key] for r in off)
        res[key] = {"on": m_on, "off": m_off, "ratio_on_off": m_on / m_off}
        print(f"{key}: on {m_on:,.0f}, off {m_off:,.0f}, on/off {m_on / m_off:.3f}")
    path = save_results(
        "observability-overhead", {"seconds": args.seconds, "medians": res, "on": on, "off": off}
    )
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    i = sub.add_parser("inspect")
    i.add_argument("--items", type=int, default=1_000_000)
    o = sub.add_parser("overhead")
    o.add_argument("--repeats", type=int, default=3)
    o.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    print(header(f"bench/observability.py {args.what}"), flush=True)
    if args.what == "inspect":
        inspect_bench(args)
    else:
        overhead_bench(args)


if __name__ == "__main__":
    main()
