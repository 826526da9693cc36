r"""Whole Pong programs, before and after the native-speed envs, side by side.

    .venv/bin/python bench/program_speed.py                    # 180 s each, 1 round (~13 min)
    .venv/bin/python bench/program_speed.py --seconds 120 --rounds 2 --agents apex_atari

For each agent config (configs/apex_atari.py, configs/r2d2_atari.py), 2
actors x 16 envs, the same program twice in turn: 'today' (env.vectorization=
python, TF_ENABLE_ONEDNN_OPTS=0: each actor a Python list of wrapped envs,
TensorFlow without oneDNN) and 'native' (the defaults: ALE's C++ vector env,
oneDNN on). Each runs `--config.stop.max_wall_seconds` through launch.train
(local_mp) and reports from its summary.json: env frames/s (agent steps x
frame skip), SGD steps/s, the first SGD step's seconds after launch; medians
over rounds and native/today ratios. Writes bench/results/program_speed-<commit>.json.
Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import os
import statistics

from common import header, run_program, save_results

VARIANTS = {"today": ("python", "0"), "native": ("auto", "1")}
FIGURES = ("frames_per_s", "sgd_steps_per_s", "first_sgd_step_s")


def run(agent: str, variant: str, args) -> dict:
    mode, onednn = VARIANTS[variant]
    before = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = onednn
    try:
        s = run_program(
            f"configs/{agent}.py",
            [
                f"--config.env.vectorization={mode}",
                f"--config.actor.num_actors={args.actors}",
                f"--config.actor.envs_per_actor={args.envs}",
                f"--config.stop.max_wall_seconds={args.seconds}",
                *args.overrides,
            ],
            timeout=args.seconds + 300,
        )
    finally:
        if before is None:
            os.environ.pop("TF_ENABLE_ONEDNN_OPTS", None)
        else:
            os.environ["TF_ENABLE_ONEDNN_OPTS"] = before
    return {
        "frames_per_s": s["env_steps_per_second"] * 4,
        "sgd_steps_per_s": s["learner_steps_per_second"],
        "first_sgd_step_s": s["first_learner_step_seconds"],
        "env_steps": s["env_steps"],
        "learner_steps": s["learner_steps"],
        "returncode": s["returncode"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", nargs="+", default=["apex_atari", "r2d2_atari"])
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--overrides", nargs="*", default=[], help="more --config.a.b=v for both")
    args = ap.parse_args()
    print(header("program_speed.py"), flush=True)
    runs: dict = {a: {v: [] for v in VARIANTS} for a in args.agents}
    for r in range(args.rounds):
        for agent in args.agents:
            for variant in VARIANTS:
                out = run(agent, variant, args)
                runs[agent][variant].append(out)
                print(
                    f"round {r + 1} {agent:11s} {variant:7s} frames/s {out['frames_per_s']:8.1f}  "
                    f"SGD steps/s {out['sgd_steps_per_s']:7.2f}  first SGD step "
                    f"{out['first_sgd_step_s']:.1f} s",
                    flush=True,
                )
    medians: dict = {}
    print("\nmedians, native / today")
    for agent, variants in runs.items():
        med = {
            v: {f: statistics.median(x[f] for x in xs) for f in FIGURES}
            for v, xs in variants.items()
        }
        med["ratio"] = {f: med["native"][f] / med["today"][f] for f in FIGURES}
        medians[agent] = med
        for f in FIGURES:
            print(
                f"{agent:11s} {f:17s} today {med['today'][f]:9.2f}  native "
                f"{med['native'][f]:9.2f}  x{med['ratio'][f]:.2f}"
            )
    path = save_results("program_speed", {"args": vars(args), "runs": runs, "medians": medians})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
