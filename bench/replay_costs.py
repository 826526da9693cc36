r"""The replay server's CPU per insert and per sample, from whole programs.

    .venv/bin/python bench/replay_costs.py [--seconds 45] [--ratios 4 8]

Runs the default CartPole program (local_mp) with the replay server in a
process of its own (replay.colocate_with_learner=False), once per samples-per-
insert ratio, and reads each process's CPU seconds (psutil, by the run's token).
The server's CPU is modelled as a * inserts + b * sampled items; two ratios give
two equations for a and b (least squares over more). Also prints the learner's
CPU per SGD step without the server, and the actors' CPU per env step. The scale
model in docs/performance.md ("How far does it scale?") uses these. Writes
bench/results/replay_costs-<commit>.json. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid

import numpy as np
import psutil
from common import ROOT, header, save_results
from ray_vs_local import TOKEN_VAR, CpuByPid, _roles


def run(ratio: float, seconds: float) -> dict:
    run_dir = tempfile.mkdtemp(prefix="apex-bench-replay-")
    token = uuid.uuid4().hex
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        "--config=configs/apex_cartpole.py",
        f"--config.run_dir={run_dir}",
        "--config.replay.colocate_with_learner=False",
        f"--config.replay.samples_per_insert={ratio}",
        f"--config.stop.max_wall_seconds={seconds}",
        "--config.stop.max_actor_steps=None",
        "--config.logging.tensorboard=False",
    ]
    entries: dict[int, str] = {}
    with CpuByPid(token) as cpu:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=dict(os.environ, **{TOKEN_VAR: token}),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None:  # the node processes' command lines, while they live
            for p in psutil.process_iter(["pid", "cmdline"]):
                line = " ".join(p.info["cmdline"] or [])
                if "process_entry.py" in line and "node_output" not in line:
                    entries.setdefault(p.info["pid"], line)
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                continue
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    roles = _roles(run_dir)
    by_role: dict[str, float] = {}
    for pid, seconds_cpu in cpu.cpu.items():
        role = roles.get(pid) or ("replay" if pid in entries else "other")
        by_role[role] = by_role.get(role, 0.0) + seconds_cpu
    batch = 64  # configs/apex_cartpole.py's learner.batch_size
    return {
        "samples_per_insert": ratio,
        "returncode": proc.returncode,
        "inserts": s["replay_inserts"],
        "sampled_items": s["replay_samples"],
        "learner_steps": s["learner_steps"],
        "env_steps": s["env_steps"],
        "cpu_by_role": by_role,
        "batch": batch,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--ratios", type=float, nargs="+", default=[4.0, 8.0])
    args = ap.parse_args()
    print(header("replay_costs"), flush=True)
    runs = []
    for ratio in args.ratios:
        r = run(ratio, args.seconds)
        runs.append(r)
        c = r["cpu_by_role"]
        print(
            f"samples/insert {ratio:g}: {r['inserts']:,} inserts, {r['sampled_items']:,} sampled "
            f"items, {r['learner_steps']:,} SGD steps; CPU s: replay {c.get('replay', 0):.1f}, "
            f"learner {c.get('learner', 0):.1f}, actors {c.get('actor', 0):.1f}",
            flush=True,
        )
    a = np.array([[r["inserts"], r["sampled_items"]] for r in runs], dtype=float)
    y = np.array([r["cpu_by_role"].get("replay", 0.0) for r in runs])
    (per_insert, per_sample), *_ = np.linalg.lstsq(a, y, rcond=None)
    learner = [r["cpu_by_role"].get("learner", 0.0) / max(r["learner_steps"], 1) for r in runs]
    actor = [r["cpu_by_role"].get("actor", 0.0) / max(r["env_steps"], 1) for r in runs]
    result = {
        "replay_cpu_us_per_insert": per_insert * 1e6,
        "replay_cpu_us_per_sampled_item": per_sample * 1e6,
        "learner_cpu_ms_per_sgd_step_without_server": [x * 1e3 for x in learner],
        "actor_cpu_us_per_env_step": [x * 1e6 for x in actor],
    }
    print(
        f"replay server: {result['replay_cpu_us_per_insert']:.1f} us CPU per insert, "
        f"{result['replay_cpu_us_per_sampled_item']:.1f} us per sampled item; learner without "
        f"the server: {', '.join(f'{x:.2f}' for x in result['learner_cpu_ms_per_sgd_step_without_server'])} "
        f"ms per SGD step; actors {', '.join(f'{x:.0f}' for x in result['actor_cpu_us_per_env_step'])} "
        "us per env step"
    )
    path = save_results("replay_costs", {"args": vars(args), "runs": runs, "result": result})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
