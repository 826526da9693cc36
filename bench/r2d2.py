r"""R2D2 figures: masked CartPole against feed-forward Ape-X DQN on the same
env-step budget, and a short Atari Pong run of both agents.

    .venv/bin/python bench/r2d2.py masked --repeats 3 [--steps 400000]
    .venv/bin/python bench/r2d2.py pong [--seconds 180]

masked: each repeat runs configs/r2d2_cartpole_masked.py and
configs/apex_cartpole.py with --config.env.observation_indices=(0, 2), one after
the other, both stopped at --steps env steps. Reports the best evaluation mean
of each and the env steps and wall seconds at which it was first reached.
pong: configs/r2d2_atari.py and configs/apex_atari.py for --seconds each;
reports env frames/s (agent steps x frame skip), learner steps/s and the
sequences (R2D2) or transitions (Ape-X) the learner consumes per second.
Writes bench/results/r2d2-<what>-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from common import fmt, header, run_program, save_results

MASKED = {
    "r2d2": ("configs/r2d2_cartpole_masked.py", []),
    "dqn": ("configs/apex_cartpole.py", ["--config.env.observation_indices=(0, 2)"]),
}
PONG = {
    "r2d2": "configs/r2d2_atari.py",
    "apex_dqn": "configs/apex_atari.py",
}


def masked(args) -> None:
    rows = {name: [] for name in MASKED}
    for i in range(args.repeats):
        for name, (config, extra) in MASKED.items():
            s = run_program(
                config,
                [
                    f"--config.stop.max_actor_steps={args.steps}",
                    f"--config.stop.max_wall_seconds={args.max_seconds}",
                    *extra,
                ],
                timeout=args.max_seconds + 180,
            )
            rows[name].append(s)
            print(
                f"run {i} {name}: best eval {fmt(s['best_eval_return_mean'])} at "
                f"{fmt(s['best_eval_at_env_steps'])} env steps / "
                f"{fmt(s['best_eval_at_wall_seconds'])} s; last eval {fmt(s['eval_return_mean'])}; "
                f"{fmt(s['env_steps'])} env steps in {fmt(s['wall_seconds'])} s; "
                f"stop={s['stop_reason']}",
                flush=True,
            )
    keys = [
        ("best_eval_return_mean", "best eval return"),
        ("best_eval_at_env_steps", "env steps to best"),
        ("best_eval_at_wall_seconds", "wall s to best"),
        ("eval_return_mean", "last eval return"),
        ("wall_seconds", "wall s for the budget"),
        ("env_steps_per_second", "env steps/s"),
    ]
    print(f"\nmasked CartPole, {args.steps:,} env steps, medians of {args.repeats}:")
    print("| figure | R2D2 | feed-forward DQN |\n|---|---|---|")
    medians = {}
    for key, label in keys:
        med = {}
        for name in MASKED:
            vals = [r[key] for r in rows[name] if r.get(key) is not None]
            med[name] = statistics.median(vals) if vals else None
        medians[key] = med
        print(f"| {label} | {fmt(med['r2d2'])} | {fmt(med['dqn'])} |")
    path = save_results("r2d2-masked", {"steps": args.steps, "medians": medians, "runs": rows})
    print(f"wrote {path}")


def pong(args) -> None:
    rows = {}
    for name, config in PONG.items():
        s = run_program(
            config,
            [
                f"--config.stop.max_wall_seconds={args.seconds}",
                "--config.stop.max_actor_steps=None",
            ],
            timeout=args.seconds + 240,
        )
        with open(os.path.join(s["run_dir"], "config.json")) as f:
            cfg = json.load(f)
        s["frames_per_second"] = s["env_steps_per_second"] * cfg["env"]["frame_skip"]
        s["items_per_second"] = s["learner_steps_per_second"] * cfg["learner"]["batch_size"]
        rows[name] = s
    print(f"\nPong, {args.seconds:g} s per run:")
    print("| figure | R2D2 | Ape-X DQN |\n|---|---|---|")
    for key, label in [
        ("frames_per_second", "env frames/s"),
        ("env_steps_per_second", "agent steps/s"),
        ("learner_steps_per_second", "learner steps/s"),
        ("items_per_second", "learner sequences/s (R2D2), transitions/s (Ape-X)"),
        ("first_learner_step_seconds", "launch->1st learner step s"),
        ("samples_per_insert", "samples/insert"),
    ]:
        print(f"| {label} | {fmt(rows['r2d2'].get(key))} | {fmt(rows['apex_dqn'].get(key))} |")
    path = save_results("r2d2-pong", {"seconds": args.seconds, "runs": rows})
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("masked", help="R2D2 vs feed-forward DQN on masked CartPole")
    m.add_argument("--repeats", type=int, default=3)
    m.add_argument("--steps", type=int, default=400_000, help="env-step budget of each run")
    m.add_argument("--max_seconds", type=float, default=600.0, help="wall cap of each run")
    p = sub.add_parser("pong", help="short Pong runs of both agents")
    p.add_argument("--seconds", type=float, default=180.0)
    args = parser.parse_args()
    print(header(f"bench/r2d2.py {args.what}"), flush=True)
    if args.what == "masked":
        masked(args)
    else:
        pong(args)


if __name__ == "__main__":
    main()
