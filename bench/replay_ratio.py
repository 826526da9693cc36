r"""The fourth tension on CartPole: samples per insert and batch size against env
steps and seconds to solve (issue 28), and the learner's throughput in the whole program.

    .venv/bin/python bench/replay_ratio.py --seeds 3                 # the settings below, ~6 min
    .venv/bin/python bench/replay_ratio.py --seeds 3 --settings old new k1

Each setting is configs/apex_cartpole.py with a few overrides; for each seed the
settings run in turn (side by side: a busy moment of the machine hits every
setting alike), each a fresh `python -m launch.train` (local_mp) that stops when
the evaluation mean first reaches 475 (or at --budget seconds). Per run: env
steps and seconds (from launch) to solve, SGD steps, the learner's SGD steps/s x
batch (transitions it consumed per second), and its process's CPU (psutil, every
thread: sampling, SGD, priority updates and the replay server it hosts serving
inserts) per SGD step and per sampled transition. Prints a row per run and the
medians per setting; writes bench/results/replay_ratio-<commit>.json. Run
nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import statistics

from cartpole import cpu_figures
from common import fmt, header, run_program, save_results

# name: (what it is, overrides of configs/apex_cartpole.py)
SETTINGS = {
    "old": (
        "the default before issue 28: 4 samples/insert, 3 columns, 1 step/call",
        [
            "--config.replay.samples_per_insert=4",
            "--config.replay.transition_layout=columns",
            "--config.learner.steps_per_call=1",
        ],
    ),
    "spi4": ("4 samples/insert", ["--config.replay.samples_per_insert=4"]),
    "spi8": ("8 samples/insert", ["--config.replay.samples_per_insert=8"]),
    "new": ("the default: 16 samples/insert, one row, 4 SGD steps per call", []),
    "k1": ("the default, 1 SGD step per call", ["--config.learner.steps_per_call=1"]),
    "spi32": ("32 samples/insert", ["--config.replay.samples_per_insert=32"]),
    "b256": (
        "16 samples/insert, batch 256",
        ["--config.learner.batch_size=256"],
    ),
}
FIELDS = [
    ("solved_at_env_steps", "env steps to solve"),
    ("solved_at_wall_seconds", "s to solve"),
    ("first_learner_step_seconds", "1st SGD s"),
    ("sgd_steps_to_solve", "SGD steps to solve"),
    ("learner_steps_per_second", "SGD steps/s"),
    ("transitions_per_second", "transitions/s"),
    ("learner_cpu_ms_per_step", "learner CPU ms/step"),
    ("learner_cpu_us_per_transition", "learner CPU us/transition"),
    ("env_steps_per_second", "env steps/s"),
]


def run(name: str, seed: int, budget: float) -> dict:
    s = run_program(
        "configs/apex_cartpole.py",
        [
            "--config.stop.when_solved=true",
            f"--config.stop.max_wall_seconds={budget}",
            "--config.stop.max_actor_steps=None",
            f"--config.seed={seed}",
            *SETTINGS[name][1],
        ],
        timeout=budget + 120,
    )
    s.update(cpu_figures(s))
    steps, solved = s.get("learner_steps") or 0, s.get("solved_at_env_steps")
    # SGD steps at the solve: the run stops at the evaluation that solved it
    s["sgd_steps_to_solve"] = steps if solved is not None else None
    s["setting"], s["seed"] = name, seed
    return s


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=150.0, help="max wall seconds per run")
    parser.add_argument(
        "--settings",
        nargs="+",
        default=["old", "spi8", "new", "k1", "spi32", "b256"],
        choices=list(SETTINGS),
    )
    args = parser.parse_args()
    print(header("bench/replay_ratio.py"), flush=True)
    runs: list[dict] = []
    for seed in range(args.seeds):
        for name in args.settings:
            s = run(name, seed, args.budget)
            runs.append(s)
            print(
                f"{name} seed {seed}: "
                + "  ".join(f"{label}={fmt(s.get(key))}" for key, label in FIELDS)
                + f"  rc={s['returncode']}",
                flush=True,
            )
    print("\nmedians per setting (a run that did not solve counts as not solved)\n")
    print("| setting | solved | " + " | ".join(label for _, label in FIELDS) + " |")
    print("|---" * (len(FIELDS) + 2) + "|")
    medians: dict = {}
    for name in args.settings:
        mine = [r for r in runs if r["setting"] == name]
        m = {}
        for key, _ in FIELDS:
            vals = [r[key] for r in mine if r.get(key) is not None]
            m[key] = statistics.median(vals) if vals else None
        m["solved"] = sum(r.get("solved_at_env_steps") is not None for r in mine)
        medians[name] = m
        print(
            f"| {name}: {SETTINGS[name][0]} | {m['solved']}/{len(mine)} | "
            + " | ".join(fmt(m[key]) for key, _ in FIELDS)
            + " |"
        )
    if "old" in medians and "new" in medians:
        o, n = medians["old"], medians["new"]
        for key, label in (
            ("transitions_per_second", "transitions consumed/s, new/old"),
            ("learner_cpu_us_per_transition", "learner CPU per sampled transition, new/old"),
            ("solved_at_env_steps", "env steps to solve, new/old"),
            ("solved_at_wall_seconds", "seconds to solve, new/old"),
        ):
            if o.get(key) and n.get(key):
                print(f"{label}: {n[key] / o[key]:.2f}")
    path = save_results(
        "replay_ratio", {"args": vars(args), "settings": SETTINGS, "medians": medians, "runs": runs}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
