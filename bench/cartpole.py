r"""Whole-program benchmark: the default Ape-X DQN CartPole run, repeated.

    .venv/bin/python bench/cartpole.py --repeats 3 [--override=--config.actor.num_actors=4 ...]

Each repeat is a fresh `python -m launch.train` (local_mp) that stops when the
evaluation mean first reaches 475 (or at --budget seconds). Prints one row per
repeat, the medians, and writes bench/results/cartpole-<commit>.json with the
commit, the machine and every summary. Figures are for this machine only; run
nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from apex.run_dir import git_commit  # noqa: E402

FIELDS = [
    ("first_learner_step_seconds", "launch->1st learner step s", 15.0, "<="),
    ("solved_at_wall_seconds", "launch->solved s", 60.0, "<="),
    ("solved_at_env_steps", "env steps to solve", None, ""),
    ("env_steps_per_second", "env steps/s", 3000.0, ">="),
    ("learner_steps_per_second", "learner steps/s", None, ""),
    ("samples_per_insert", "samples/insert", None, ""),
]
# Acme-TF DistributedDQN patched to run on this machine (figures from the issue).
PEER = {
    "solved_at_wall_seconds": 470.0,
    "env_steps_per_second": 125.0,
    "first_learner_step_seconds": 73.5,
}


def run_once(budget: float, overrides: list[str]) -> dict:
    run_dir = tempfile.mkdtemp(prefix="apex-bench-")
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        "--config=configs/apex_cartpole.py",
        f"--config.run_dir={run_dir}",
        "--config.stop.when_solved=true",
        f"--config.stop.max_wall_seconds={budget}",
        "--config.stop.max_actor_steps=None",
        "--config.logging.progress_period_seconds=10",
        *overrides,
    ]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=budget + 120)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    summary["process_seconds"] = time.time() - t0
    summary["returncode"] = proc.returncode
    summary["run_dir"] = run_dir
    return summary


def fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=180.0, help="max wall seconds per run")
    parser.add_argument("--override", action="append", default=[], help="extra --config.* argument")
    args = parser.parse_args()

    commit = git_commit(ROOT)
    print(
        f"apex bench/cartpole.py  commit {commit}  {platform.node()}  {os.cpu_count()} cpus",
        flush=True,
    )
    runs = []
    for i in range(args.repeats):
        s = run_once(args.budget, args.override)
        runs.append(s)
        print(
            f"run {i}: "
            + "  ".join(f"{label}={fmt(s.get(key))}" for key, label, _, _ in FIELDS)
            + f"  stop={s.get('stop_reason')} rc={s['returncode']}",
            flush=True,
        )

    print("\n| figure | median | target | peer (Acme-TF) | n |\n|---|---|---|---|---|")
    medians = {}
    for key, label, target, op in FIELDS:
        vals = [r[key] for r in runs if r.get(key) is not None]
        med = statistics.median(vals) if vals else None
        medians[key] = med
        tgt = f"{op} {target:g}" if target is not None else ""
        peer = PEER.get(key)
        print(f"| {label} | {fmt(med)} | {tgt} | {fmt(peer)} | {len(vals)}/{len(runs)} |")
    solved = sum(r.get("solved_at_wall_seconds") is not None for r in runs)
    print(f"\nsolved in {solved}/{len(runs)} runs (budget {args.budget:g} s)")
    if medians.get("env_steps_per_second"):
        print(
            f"env steps/s vs peer: {medians['env_steps_per_second'] / PEER['env_steps_per_second']:.1f}x"
        )

    out_dir = os.path.join(ROOT, "bench", "results")
    os.makedirs(out_dir, exist_ok=True)
    short = (commit or "nocommit")[:12]
    path = os.path.join(out_dir, f"cartpole-{short}.json")
    with open(path, "w") as f:
        json.dump(
            {
                "commit": commit,
                "time": time.time(),
                "machine": {
                    "node": platform.node(),
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                },
                "overrides": args.override,
                "budget": args.budget,
                "medians": medians,
                "solved": solved,
                "runs": runs,
            },
            f,
            indent=2,
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
