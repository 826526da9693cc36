r"""An hour of Ape-X DQN on Pong on this machine: the honest picture of what two
cores do, with the rates.

    .venv/bin/python bench/pong_hour.py                          # runs 60 min, then plots
    .venv/bin/python bench/pong_hour.py --run_dir runs/pong-60min  # plots a run that ended

Runs configs/apex_atari.py (2 actors x 16 envs, the defaults: ALE's vector env,
oneDNN) for --minutes through launch.train, then reads its metrics: the
actors' episode returns (each actor's mean over its report period, epsilon-
greedy) and the evaluator's greedy returns, against wall minutes and against
emulator frames (agent steps x frame skip 4). Writes the PNG to
bench/results/pong_hour-<commit>.png and the figures (rates, returns, first SGD
step) to bench/results/pong_hour-<commit>.json. There is no threshold.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from common import ROOT, header, save_results

FRAME_SKIP = 4


def _rows(run_dir: str, name: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics", f"{name}.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _series(run_dir: str) -> dict:
    """Actor returns, evaluator returns, each with (minutes, frames) since the start."""
    coord = _rows(run_dir, "coordinator")
    t0 = coord[0]["time"] if coord else 0.0
    # Env steps at a time: the coordinator's count, interpolated for the other rows.
    times = [r["time"] for r in coord]
    steps = [r["coordinator/env_steps"] for r in coord]

    def frames_at(t: float) -> float:
        import numpy as np

        return float(np.interp(t, times, steps)) * FRAME_SKIP

    actor = []
    for name in ("actor_0", "actor_1"):
        for r in _rows(run_dir, name):
            if "actor/episode_return_mean" in r:
                t = r["time"]
                actor.append(((t - t0) / 60, frames_at(t), r["actor/episode_return_mean"]))
    actor.sort()
    evals = [
        ((r["time"] - t0) / 60, frames_at(r["time"]), r["evaluator/return_mean"])
        for r in _rows(run_dir, "evaluator")
    ]
    return {"actor": actor, "eval": evals}


def plot(run_dir: str, out_png: str, summary: dict) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = _series(run_dir)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, i, label in ((axes[0], 0, "wall minutes"), (axes[1], 1, "emulator frames")):
        if s["actor"]:
            ax.plot(
                [a[i] for a in s["actor"]],
                [a[2] for a in s["actor"]],
                ".",
                ms=3,
                alpha=0.5,
                label="actors (epsilon-greedy, period means)",
            )
        if s["eval"]:
            ax.plot(
                [e[i] for e in s["eval"]],
                [e[2] for e in s["eval"]],
                "o-",
                label="evaluator (greedy)",
            )
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode return")
    axes[0].legend(loc="upper left", fontsize=8)
    fps = summary["env_steps_per_second"] * FRAME_SKIP
    fig.suptitle(
        f"Ape-X DQN, Pong, 2 actors x 16 envs, 2 CPU cores: {fps:,.0f} frames/s, "
        f"{summary['learner_steps_per_second']:.1f} SGD steps/s (batch 32), "
        f"{summary['wall_seconds'] / 60:.0f} min",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)
    return {
        "frames_per_s": fps,
        "sgd_steps_per_s": summary["learner_steps_per_second"],
        "first_sgd_step_s": summary["first_learner_step_seconds"],
        "env_frames": summary["env_steps"] * FRAME_SKIP,
        "learner_steps": summary["learner_steps"],
        "last_eval_return": s["eval"][-1][2] if s["eval"] else None,
        "best_eval_return": max((e[2] for e in s["eval"]), default=None),
        "last_actor_return": s["actor"][-1][2] if s["actor"] else None,
        "evaluations": s["eval"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--run_dir", help="plot this finished run instead of running one")
    args = ap.parse_args()
    print(header("pong_hour.py"), flush=True)
    run_dir = args.run_dir
    if run_dir is None:
        run_dir = os.path.join(ROOT, "runs", "pong-hour")
        cmd = [
            sys.executable,
            "-m",
            "launch.train",
            "--config=configs/apex_atari.py",
            "--config.actor.envs_per_actor=16",
            f"--config.stop.max_wall_seconds={args.minutes * 60}",
            f"--config.run_dir={run_dir}",
            "--config.logging.progress_period_seconds=60",
        ]
        subprocess.run(cmd, cwd=ROOT, check=True)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "versions.json")) as f:
        run_commit = json.load(f).get("git_commit")  # the commit the run ran at
    path = save_results(
        "pong_hour", {"run_dir": run_dir, "run_commit": run_commit, "summary": summary}
    )
    png = path[: -len(".json")] + ".png"
    figures = plot(run_dir, png, summary)
    with open(path) as f:
        record = json.load(f)
    record["figures"] = figures
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    print(json.dumps({k: v for k, v in figures.items() if k != "evaluations"}, indent=1))
    print(f"wrote {os.path.relpath(path, ROOT)} and {os.path.relpath(png, ROOT)}")


if __name__ == "__main__":
    main()
