r"""Whole-program benchmark: time to solve CartPole-v1, apex vs Stable-Baselines3 DQN.

    .venv/bin/python bench/solve_vs_sb3.py --seeds 5 [--budget 300]

The peer is what a single-machine user would run instead: Stable-Baselines3 DQN
with the RL Baselines3 Zoo's CartPole-v1 hyperparameters (bench/peers/sb3_cartpole.py),
in its own venv, .venv-sb3, which bench/peers/setup_sb3.sh makes (run
first, idempotent). For each seed, one SB3 run, then one apex run
(configs/apex_cartpole.py, local_mp, stop when solved); each stops at its first
evaluation mean >= 475 or at --budget wall seconds.

Every time counts from the spawn of the run's process, taken here right before
the subprocess starts, so both include interpreter start, imports and set-up:
  solve s    spawn -> the end of the first evaluation with mean >= 475
  startup s  apex: spawn -> first learner step; SB3: spawn -> model built and ready
             to learn (its first gradient step, after learning_starts=1000 env
             steps, is shown as "sb3 1st grad s")
A run that does not solve counts as the budget (marked *). Prints a row per seed,
the medians, the ratio apex/SB3 of the median solve seconds (goal <= 0.5) and
how many seed pairs apex won; writes bench/results/solve_vs_sb3-<commit>.json.
Figures are for this machine only; run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

from common import PEERS, ROOT, SB3_PYTHON, fmt, header, run_program, save_results, setup_peer

SB3_SCRIPT = os.path.join(PEERS, "sb3_cartpole.py")
RATIO_GOAL = 0.5
# How long past the budget a run may take before it is killed (start-up, shutdown).
GRACE_SECONDS = 180.0


def _since(t: float | None, t_spawn: float) -> float | None:
    return None if t is None else t - t_spawn


def run_sb3(seed: int, budget: float) -> dict:
    """One SB3 run: its JSON line plus the driver's figures (seconds from spawn)."""
    cmd = [SB3_PYTHON, SB3_SCRIPT, f"--seed={seed}", f"--budget={budget:g}"]
    t_spawn = time.time()
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=budget + GRACE_SECONDS
        )
    except subprocess.TimeoutExpired:
        return _failed("sb3", seed, t_spawn, f"killed after {budget + GRACE_SECONDS:g} s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return _failed(
            "sb3", seed, t_spawn, f"rc={proc.returncode}: {proc.stderr[-2000:]}", proc.returncode
        )
    r = json.loads(lines[-1])
    solved = bool(r.get("solved"))
    r.update(
        driver_spawn_time=t_spawn,
        process_seconds=time.time() - t_spawn,
        returncode=proc.returncode,
        solve_s=_since(r.get("solved_at_time"), t_spawn) if solved else None,
        startup_s=_since(r.get("ready_time"), t_spawn),
        first_grad_s=_since(r.get("first_train_time"), t_spawn),
        steps_to_solve=r.get("env_steps") if solved else None,
    )
    return r


def run_apex(seed: int, budget: float) -> dict:
    """One apex run: summary.json plus the driver's figures (seconds from spawn)."""
    overrides = [
        "--config.stop.when_solved=true",
        f"--config.stop.max_wall_seconds={budget}",
        "--config.stop.max_actor_steps=None",
        f"--config.seed={seed}",
    ]
    t_spawn = time.time()  # run_program starts the subprocess right after this
    try:
        s = run_program("configs/apex_cartpole.py", overrides, timeout=budget + GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        return _failed("apex", seed, t_spawn, f"killed after {budget + GRACE_SECONDS:g} s")
    except (OSError, ValueError) as e:  # no or unreadable summary.json
        return _failed("apex", seed, t_spawn, f"no summary.json: {e!r}")
    clock = s.get("clock_start_time")
    solved_wall = s.get("solved_at_wall_seconds")
    first_step = s.get("first_learner_step_seconds")
    s.update(
        peer="apex",
        seed=seed,
        driver_spawn_time=t_spawn,
        solved=clock is not None and solved_wall is not None,
        # apex's clock start (psutil's create_time of its process) less the spawn
        # here: about 0, but up to 1 s early, as /proc/stat's btime is whole seconds.
        # The figures below are unix times less t_spawn, so that offset cancels.
        clock_start_minus_spawn_s=_since(clock, t_spawn),
        solve_s=None if clock is None or solved_wall is None else clock + solved_wall - t_spawn,
        startup_s=None if clock is None or first_step is None else clock + first_step - t_spawn,
        steps_to_solve=s.get("solved_at_env_steps"),
    )
    return s


def _failed(
    peer: str, seed: int, t_spawn: float, error: str, returncode: int | None = None
) -> dict:
    return {
        "peer": peer,
        "seed": seed,
        "solved": False,
        "error": error,
        "returncode": returncode,
        "driver_spawn_time": t_spawn,
        "process_seconds": time.time() - t_spawn,
        "solve_s": None,
        "startup_s": None,
        "steps_to_solve": None,
    }


def counted_solve_seconds(run: dict, budget: float) -> float:
    """The run's solve seconds from spawn, or the budget when it did not solve."""
    return run["solve_s"] if run.get("solve_s") is not None else budget


def _solve_cell(run: dict, budget: float) -> str:
    return fmt(run["solve_s"]) if run.get("solve_s") is not None else f"{budget:,.1f}*"


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5, help="seed pairs: seeds 0..N-1")
    parser.add_argument("--budget", type=float, default=300.0, help="max wall seconds per run")
    args = parser.parse_args()

    print(header("bench/solve_vs_sb3.py"), flush=True)
    setup_peer()

    pairs = []
    for seed in range(args.seeds):
        sb3 = run_sb3(seed, args.budget)
        print(
            f"seed {seed} sb3:  solve s={_solve_cell(sb3, args.budget)}"
            f"  startup s={fmt(sb3.get('startup_s'))}  env steps={fmt(sb3.get('env_steps'))}"
            + (f"  ERROR {sb3['error']}" if sb3.get("error") else ""),
            flush=True,
        )
        apex = run_apex(seed, args.budget)
        print(
            f"seed {seed} apex: solve s={_solve_cell(apex, args.budget)}"
            f"  startup s={fmt(apex.get('startup_s'))}  env steps={fmt(apex.get('env_steps'))}"
            f"  stop={apex.get('stop_reason')} rc={apex.get('returncode')}"
            + (f"  ERROR {apex['error']}" if apex.get("error") else ""),
            flush=True,
        )
        pairs.append({"seed": seed, "sb3": sb3, "apex": apex})

    b = args.budget
    print(
        "\n| seed | apex solve s | sb3 solve s | apex startup s | sb3 startup s | sb3 1st grad s"
        " | apex env steps to solve | sb3 env steps to solve | winner |"
        "\n|---|---|---|---|---|---|---|---|---|"
    )
    apex_wins = 0
    for p in pairs:
        a_s, s_s = counted_solve_seconds(p["apex"], b), counted_solve_seconds(p["sb3"], b)
        if a_s < s_s:
            winner, apex_wins = "apex", apex_wins + 1
        else:
            winner = "sb3" if s_s < a_s else "tie"
        print(
            f"| {p['seed']} | {_solve_cell(p['apex'], b)} | {_solve_cell(p['sb3'], b)}"
            f" | {fmt(p['apex'].get('startup_s'))} | {fmt(p['sb3'].get('startup_s'))}"
            f" | {fmt(p['sb3'].get('first_grad_s'))}"
            f" | {fmt(p['apex'].get('steps_to_solve'))} | {fmt(p['sb3'].get('steps_to_solve'))}"
            f" | {winner} |"
        )

    medians = {}
    for peer in ("apex", "sb3"):
        runs = [p[peer] for p in pairs]
        medians[peer] = {
            "solve_s": _median([counted_solve_seconds(r, b) for r in runs]),
            "startup_s": _median([r.get("startup_s") for r in runs]),
            "steps_to_solve": _median([r.get("steps_to_solve") for r in runs]),
            "solved": sum(bool(r.get("solved")) for r in runs),
        }
    print(
        f"| median | {fmt(medians['apex']['solve_s'])} | {fmt(medians['sb3']['solve_s'])}"
        f" | {fmt(medians['apex']['startup_s'])} | {fmt(medians['sb3']['startup_s'])}"
        f" | {fmt(_median([p['sb3'].get('first_grad_s') for p in pairs]))}"
        f" | {fmt(medians['apex']['steps_to_solve'])} | {fmt(medians['sb3']['steps_to_solve'])}"
        " | |"
    )

    n = len(pairs)
    unsolved = n - medians["apex"]["solved"] + n - medians["sb3"]["solved"]
    if unsolved:
        print(f"\n* not solved within the budget ({b:g} s): counted as {b:g} s ({unsolved} runs)")
    print(
        f"\nsolved: apex {medians['apex']['solved']}/{n}, sb3 {medians['sb3']['solved']}/{n}"
        "  (env steps to solve: medians of the solved runs only)"
    )
    ratio = None
    if medians["apex"]["solve_s"] is not None and medians["sb3"]["solve_s"]:
        ratio = medians["apex"]["solve_s"] / medians["sb3"]["solve_s"]
        verdict = "met" if ratio <= RATIO_GOAL else "not met"
        print(f"median solve s apex/sb3: {ratio:.2f}  (goal <= {RATIO_GOAL:g}: {verdict})")
    print(f"apex won {apex_wins}/{n} seed pairs")
    versions = next((p["sb3"]["versions"] for p in pairs if p["sb3"].get("versions")), None)
    if versions:
        print("sb3 peer: " + "  ".join(f"{k} {v}" for k, v in versions.items()))

    path = save_results(
        "solve_vs_sb3",
        {
            "budget": b,
            "seeds": args.seeds,
            "ratio_goal": RATIO_GOAL,
            "median_solve_ratio_apex_over_sb3": ratio,
            "apex_wins": apex_wins,
            "medians": medians,
            "sb3_versions": versions,
            "pairs": pairs,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
