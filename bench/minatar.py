r"""MinAtar at equal wall-clock: apex (configs/apex_minatar.py) next to Stable-Baselines3
DQN with the MinAtar authors' settings and network (bench/peers/sb3_minatar.py).

    .venv/bin/python bench/minatar.py --seeds 2 --budget 600 [--games breakout,freeway]
    .venv/bin/python bench/minatar.py --report bench/results/minatar-<commit>.json

Needs the `minatar` extra in apex's venv and bench/peers/setup_sb3.sh's venv (the
bench installs MinAtar into the latter). For each seed and game, one run of each,
one after the other (which goes first alternates), each for --budget wall seconds
counted from the spawn of its process (imports and start-up included). Both
evaluate greedily, 5 episodes every 20 s. A run's final return is its last
evaluation within the budget (SB3's is taken at the budget itself, with the
parameters it has then). Prints per game the IQM over seeds of each and, over the
suite, the probability that an apex run beats an SB3 run of the same game with its
95% interval (tools/experiment_stats.py, stratified by game). Writes
bench/results/minatar-<commit>.json and, beside it, the curves
(minatar-<commit>.png: return against wall minutes and against env steps, mean
over seeds with a 95% bootstrap band). Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from common import ROOT, header, run_program, save_results

from tools.experiment_curves import on_grid
from tools.experiment_stats import (
    iqm,
    mean_band,
    probability_of_improvement,
    probability_of_improvement_ci,
)

PEERS = os.path.join(ROOT, "bench", "peers")
SB3_PYTHON = os.path.join(PEERS, ".venv-sb3", "bin", "python")
GAMES = {
    "asterix": "Asterix",
    "breakout": "Breakout",
    "freeway": "Freeway",
    "seaquest": "Seaquest",
    "space_invaders": "SpaceInvaders",
}
GRACE_SECONDS = 180.0  # past the budget before a run is killed (start-up, final checkpoint)
PROGRESS = os.path.join(ROOT, "bench", "results", ".minatar-progress.json")


def setup_peer() -> None:
    subprocess.run(["bash", os.path.join(PEERS, "setup_sb3.sh")], cwd=ROOT, check=True)
    subprocess.run(
        [SB3_PYTHON, "-m", "pip", "install", "--quiet", "minatar==1.0.15"], cwd=ROOT, check=True
    )


def run_apex(game: str, seed: int, budget: float) -> dict:
    overrides = [
        f"--config.env.id=MinAtar/{GAMES[game]}-v1",
        f"--config.stop.max_wall_seconds={budget}",
        f"--config.seed={seed}",
        f"--config.learner.seed={seed}",
    ]
    t_spawn = time.time()
    s = run_program("configs/apex_minatar.py", overrides, timeout=budget + GRACE_SECONDS)
    curve = []
    with open(os.path.join(s["run_dir"], "metrics", "evaluator.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("evaluator/return_mean") is not None and r["time"] - t_spawn <= budget:
                curve.append(
                    [r["evaluator/env_steps"], r["time"] - t_spawn, r["evaluator/return_mean"]]
                )
    return {
        "system": "apex",
        "game": game,
        "seed": seed,
        "final": curve[-1][2] if curve else None,
        "env_steps": s["env_steps"],
        "curve": curve,  # [env steps, seconds from spawn, eval mean]
        "first_learner_step_seconds": s.get("first_learner_step_seconds"),
        "run_dir": s["run_dir"],
    }


def run_sb3(game: str, seed: int, budget: float) -> dict:
    cmd = [SB3_PYTHON, os.path.join(PEERS, "sb3_minatar.py"), f"--game={game}"]
    cmd += [f"--seed={seed}", f"--budget={budget:g}"]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=budget + GRACE_SECONDS
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sb3_minatar.py exit {proc.returncode}: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "system": "sb3",
        "game": game,
        "seed": seed,
        "final": out["final_eval_mean"],
        "env_steps": out["env_steps"],
        "curve": out["eval_history"],
        "versions": out["versions"],
        "hyperparams": out["hyperparams"],
    }


def analyse(runs: list[dict], games: list[str], reps: int = 2000) -> dict:
    finals = {
        system: [
            [r["final"] for r in runs if r["system"] == system and r["game"] == g] for g in games
        ]
        for system in ("apex", "sb3")
    }
    per_game = {
        g: {system: float(iqm(np.array(finals[system][i]))) for system in finals}
        for i, g in enumerate(games)
    }
    return {
        "per_game_iqm": per_game,
        "games_apex_at_least_sb3": sum(v["apex"] >= v["sb3"] for v in per_game.values()),
        "p_apex_beats_sb3": probability_of_improvement(finals["apex"], finals["sb3"]),
        "p_apex_beats_sb3_ci": list(
            probability_of_improvement_ci(finals["apex"], finals["sb3"], reps=reps)
        ),
    }


def plot(runs: list[dict], games: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(games), figsize=(3.2 * len(games), 5.6), squeeze=False)
    for col, game in enumerate(games):
        for system, color in (("apex", "tab:blue"), ("sb3", "tab:orange")):
            mine = [r for r in runs if r["system"] == system and r["game"] == game]
            for row, (key, scale) in enumerate((("wall_seconds", 60.0), ("env_steps", 1e3))):
                curves = [
                    {"env_steps": [p[0] for p in r["curve"]], "wall_seconds": [p[1] for p in r["curve"]],
                     "return": [p[2] for p in r["curve"]]}
                    for r in mine
                ]  # fmt: skip
                x, values = on_grid(curves, key)
                if not x.size:
                    continue
                mean, lo, hi = mean_band(values)
                ax = axes[row][col]
                ax.plot(x / scale, mean, color=color, label=f"{system} ({len(mine)} seeds)")
                ax.fill_between(x / scale, lo, hi, color=color, alpha=0.2)
        axes[0][col].set_title(GAMES[game])
        axes[0][col].set_xlabel("wall minutes")
        axes[1][col].set_xlabel("env steps (thousands)")
    axes[0][0].set_ylabel("greedy return")
    axes[1][0].set_ylabel("greedy return")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def render(record: dict) -> str:
    games, a = record["games"], record["analysis"]
    lines = [f"{'game':<16}{'apex IQM':>10}{'SB3 IQM':>10}  apex env steps / SB3 (median)"]
    for g in games:
        steps = {
            s: np.median([r["env_steps"] for r in record["runs"] if r["system"] == s and r["game"] == g])
            for s in ("apex", "sb3")
        }  # fmt: skip
        v = a["per_game_iqm"][g]
        lines.append(
            f"{g:<16}{v['apex']:>10.2f}{v['sb3']:>10.2f}  {steps['apex'] / steps['sb3']:.1f}x"
        )
    lo, hi = a["p_apex_beats_sb3_ci"]
    lines.append(
        f"apex >= SB3 on {a['games_apex_at_least_sb3']}/{len(games)} games; "
        f"P(apex > SB3) = {a['p_apex_beats_sb3']:.2f} [{lo:.2f}, {hi:.2f}] "
        f"(budget {record['budget']:g} s, {len(record['seeds'])} seeds)"
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--games", default=",".join(GAMES))
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--budget", type=float, default=600.0, help="wall seconds per run")
    p.add_argument("--report", help="print and plot an existing record instead of running")
    args = p.parse_args()
    if args.report:
        with open(args.report) as f:
            record = json.load(f)
        print(render(record))
        plot(record["runs"], record["games"], args.report[: -len(".json")] + ".png")
        return
    games = args.games.split(",")
    print(header("minatar"), flush=True)
    setup_peer()
    runs: list[dict] = []
    if os.path.exists(PROGRESS):  # an interrupted run of the same settings goes on
        with open(PROGRESS) as f:
            saved = json.load(f)
        if saved["budget"] == args.budget:
            runs = saved["runs"]
    for seed in range(args.seeds):
        for i, game in enumerate(games):
            order = (run_apex, run_sb3) if (seed + i) % 2 == 0 else (run_sb3, run_apex)
            for run in order:
                system = "apex" if run is run_apex else "sb3"
                if any(
                    r["system"] == system and r["game"] == game and r["seed"] == seed for r in runs
                ):
                    continue
                r = run(game, seed, args.budget)
                runs.append(r)
                print(
                    f"{system:<5} {game:<15} seed {seed}: final {r['final']}, {r['env_steps']:,} env steps",
                    flush=True,
                )
                with open(PROGRESS, "w") as f:
                    json.dump({"budget": args.budget, "runs": runs}, f)
    record = {
        "budget": args.budget,
        "games": games,
        "seeds": list(range(args.seeds)),
        "argv": sys.argv,
        "runs": runs,
        "analysis": analyse(runs, games),
    }
    path = save_results("minatar", record)
    plot(runs, games, path[: -len(".json")] + ".png")
    os.remove(PROGRESS)
    print(render(record))
    print(f"record: {path}")


if __name__ == "__main__":
    main()
