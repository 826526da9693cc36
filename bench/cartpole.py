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
import statistics

from common import fmt, header, run_program, save_results

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


CPU_FIELDS = [
    ("learner_cpu_ms_per_step", "learner CPU ms/SGD step"),
    ("learner_cpu_us_per_transition", "learner CPU us/sampled transition"),
    ("transitions_per_second", "sampled transitions/s"),
    ("actor_cpu_us_per_env_step", "actors CPU us/env step"),
    ("control_cpu_us_per_env_step", "coordinator+evaluator CPU us/env step"),
]


def cpu_figures(s: dict) -> dict:
    """Per-step CPU of the nodes (bench/common.run_program's node_cpu_seconds): the
    learner's process (SGD, sampling, priority updates and the replay server it
    hosts serving inserts) per SGD step and per sampled transition; the actors'
    and the control plane's per env step."""
    cpu, steps, env = (
        s.get("node_cpu_seconds") or {},
        s.get("learner_steps") or 0,
        s.get("env_steps") or 0,
    )
    with open(os.path.join(s["run_dir"], "config.json")) as f:
        batch = int(json.load(f)["learner"]["batch_size"])
    out = {"transitions_per_second": None}
    learner = cpu.get("learner")
    out["learner_cpu_ms_per_step"] = 1e3 * learner / steps if learner and steps else None
    per_t = out["learner_cpu_ms_per_step"]
    out["learner_cpu_us_per_transition"] = 1e3 * per_t / batch if per_t and batch else None
    if batch and s.get("learner_steps_per_second"):
        out["transitions_per_second"] = s["learner_steps_per_second"] * batch
    actors = sum(v for k, v in cpu.items() if k.startswith("actor"))
    control = sum(v for k, v in cpu.items() if k in ("coordinator", "evaluator"))
    out["actor_cpu_us_per_env_step"] = 1e6 * actors / env if actors and env else None
    out["control_cpu_us_per_env_step"] = 1e6 * control / env if control and env else None
    return out


def run_once(budget: float, overrides: list[str]) -> dict:
    return run_program(
        "configs/apex_cartpole.py",
        [
            "--config.stop.when_solved=true",
            f"--config.stop.max_wall_seconds={budget}",
            "--config.stop.max_actor_steps=None",
            *overrides,
        ],
        timeout=budget + 120,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=180.0, help="max wall seconds per run")
    parser.add_argument("--override", action="append", default=[], help="extra --config.* argument")
    args = parser.parse_args()

    print(header("bench/cartpole.py"), flush=True)
    runs = []
    for i in range(args.repeats):
        s = run_once(args.budget, args.override)
        s.update(cpu_figures(s))
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
    for key, label in CPU_FIELDS:
        vals = [r[key] for r in runs if r.get(key) is not None]
        medians[key] = statistics.median(vals) if vals else None
        print(f"| {label} | {fmt(medians[key])} | | | {len(vals)}/{len(runs)} |")
    solved = sum(r.get("solved_at_wall_seconds") is not None for r in runs)
    print(f"\nsolved in {solved}/{len(runs)} runs (budget {args.budget:g} s)")
    if medians.get("env_steps_per_second"):
        print(
            f"env steps/s vs peer: {medians['env_steps_per_second'] / PEER['env_steps_per_second']:.1f}x"
        )

    path = save_results(
        "cartpole",
        {
            "overrides": args.override,
            "budget": args.budget,
            "medians": medians,
            "solved": solved,
            "runs": runs,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
