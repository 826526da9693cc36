r"""apex next to Stable-Baselines3 DQN at equal wall-clock, per env and seed.

    .venv/bin/python bench/vs_sb3.py minatar --seeds 2 --budget 600 [--envs breakout,freeway]
    .venv/bin/python bench/vs_sb3.py classic --seeds 3 [--budget 120]
    .venv/bin/python bench/vs_sb3.py --report bench/results/vs_sb3-minatar-<commit>.json

Suites:
  minatar  the five MinAtar games: configs/apex_minatar.py against SB3 with the
           MinAtar authors' DQN settings and network (needs the `minatar` extra)
  classic  Acrobot-v1 and LunarLander-v3: configs/apex_cartpole.py with only
           env.id changed against SB3 with the RL Baselines3 Zoo's tuned
           hyperparameters; LunarLander gets twice the budget
The peer runs in .venv-sb3 (bench/peers/setup_sb3.sh, run first;
bench/peers/sb3_wallclock.py). For each seed and env, one run of each, one after
the other (which goes first alternates), each for its budget in wall seconds
counted from the spawn of its process (imports and start-up included). Both
evaluate greedily every --eval-seconds (apex's evaluator in its own process, SB3
pausing its learning). A run's final return is its last evaluation within the
budget (SB3's is taken at the budget itself, with the parameters it has then).
Prints per env the IQM over seeds of each and, over the suite, the probability
that an apex run beats an SB3 run of the same env with its 95% interval
(tools/experiment_stats.py, stratified by env). Writes
bench/results/vs_sb3-<suite>-<commit>.json and, beside it, the curves (.png:
return against wall minutes and against env steps, mean over seeds with a 95%
bootstrap band). Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from common import PEERS, ROOT, SB3_PYTHON, header, run_program, save_results, setup_peer

from tools.experiment_curves import on_grid, trial_curve
from tools.experiment_stats import (
    iqm,
    mean_band,
    probability_of_improvement,
    probability_of_improvement_ci,
)

SUITES = {
    "minatar": {
        "config": "configs/apex_minatar.py",
        "envs": {
            "asterix": "MinAtar/Asterix-v1",
            "breakout": "MinAtar/Breakout-v1",
            "freeway": "MinAtar/Freeway-v1",
            "seaquest": "MinAtar/Seaquest-v1",
            "space_invaders": "MinAtar/SpaceInvaders-v1",
        },
        "budget_scale": {},
        "eval": (20.0, 5),  # (seconds between evaluations, episodes)
        "default_budget": 600.0,
    },
    "classic": {
        "config": "configs/apex_cartpole.py",
        "envs": {"acrobot": "Acrobot-v1", "lunar_lander": "LunarLander-v3"},
        "budget_scale": {"lunar_lander": 2.0},
        "eval": (10.0, 10),
        "default_budget": 120.0,
    },
}
GRACE_SECONDS = 180.0  # past the budget before a run is killed (start-up, final checkpoint)
PROGRESS = os.path.join(ROOT, "bench", "results", ".vs_sb3-{}-progress.json")


def run_apex(suite: dict, env: str, seed: int, budget: float, every: float, episodes: int) -> dict:
    overrides = [
        f"--config.env.id={suite['envs'][env]}",
        f"--config.stop.max_wall_seconds={budget}",
        "--config.stop.max_actor_steps=None",
        "--config.stop.when_solved=false",
        f"--config.evaluation.period_seconds={every}",
        f"--config.evaluation.episodes={episodes}",
        f"--config.seed={seed}",
        f"--config.learner.seed={seed}",
    ]
    t_spawn = time.time()
    s = run_program(suite["config"], overrides, timeout=budget + GRACE_SECONDS)
    c = trial_curve(s["run_dir"], [], t_spawn)  # every evaluation, seconds from the spawn
    curve = [list(p) for p in zip(c["env_steps"], c["wall_seconds"], c["return"]) if p[1] <= budget]
    return {
        "system": "apex",
        "env": env,
        "seed": seed,
        "final": curve[-1][2] if curve else None,
        "env_steps": s["env_steps"],
        "curve": curve,  # [env steps, seconds from spawn, eval mean]
        "first_learner_step_seconds": s.get("first_learner_step_seconds"),
        "run_dir": s["run_dir"],
    }


def run_sb3(suite: dict, env: str, seed: int, budget: float, every: float, episodes: int) -> dict:
    cmd = [SB3_PYTHON, os.path.join(PEERS, "sb3_wallclock.py"), f"--env={suite['envs'][env]}"]
    cmd += [f"--seed={seed}", f"--budget={budget:g}", f"--eval-seconds={every:g}"]
    cmd += [f"--eval-episodes={episodes}"]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=budget + GRACE_SECONDS
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sb3_wallclock.py exit {proc.returncode}: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "system": "sb3",
        "env": env,
        "seed": seed,
        "final": out["final_eval_mean"],
        "env_steps": out["env_steps"],
        "curve": out["eval_history"],
        "versions": out["versions"],
        "hyperparams": out["hyperparams"],
    }


def _finals(runs: list[dict], system: str, env: str) -> list[float]:
    return [r["final"] for r in runs if r["system"] == system and r["env"] == env]


def analyse(runs: list[dict], envs: list[str], reps: int = 2000) -> dict:
    apex = [_finals(runs, "apex", e) for e in envs]
    sb3 = [_finals(runs, "sb3", e) for e in envs]
    per_env = {
        e: {"apex": float(iqm(np.array(a))), "sb3": float(iqm(np.array(b)))}
        for e, a, b in zip(envs, apex, sb3)
    }
    return {
        "per_env_iqm": per_env,
        "envs_apex_at_least_sb3": sum(v["apex"] >= v["sb3"] for v in per_env.values()),
        "p_apex_beats_sb3": probability_of_improvement(apex, sb3),
        "p_apex_beats_sb3_ci": list(probability_of_improvement_ci(apex, sb3, reps=reps)),
    }


def _curves(runs: list[dict]) -> list[dict]:
    return [
        {
            "env_steps": [p[0] for p in r["curve"]],
            "wall_seconds": [p[1] for p in r["curve"]],
            "return": [p[2] for p in r["curve"]],
        }
        for r in runs
    ]


def plot(record: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs, runs = record["envs"], record["runs"]
    fig, axes = plt.subplots(2, len(envs), figsize=(3.2 * len(envs), 5.6), squeeze=False)
    for col, env in enumerate(envs):
        for system, color in (("apex", "tab:blue"), ("sb3", "tab:orange")):
            mine = [r for r in runs if r["system"] == system and r["env"] == env]
            for row, (key, scale) in enumerate((("wall_seconds", 60.0), ("env_steps", 1e3))):
                x, values = on_grid(_curves(mine), key)
                if not x.size:
                    continue
                mean, lo, hi = mean_band(values)
                ax = axes[row][col]
                ax.plot(x / scale, mean, color=color, label=f"{system} ({len(mine)} seeds)")
                ax.fill_between(x / scale, lo, hi, color=color, alpha=0.2)
        axes[0][col].set_title(record["env_ids"][env], fontsize=9)
        axes[0][col].set_xlabel("wall minutes")
        axes[1][col].set_xlabel("env steps (thousands)")
    for row in (0, 1):
        axes[row][0].set_ylabel("greedy return")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def render(record: dict) -> str:
    a = record["analysis"]
    lines = [f"{'env':<16}{'budget s':>9}{'apex IQM':>10}{'SB3 IQM':>10}  env steps apex / SB3"]
    for e in record["envs"]:
        steps = {
            s: np.median([r["env_steps"] for r in record["runs"] if r["system"] == s and r["env"] == e])
            for s in ("apex", "sb3")
        }  # fmt: skip
        v = a["per_env_iqm"][e]
        lines.append(
            f"{e:<16}{record['budgets'][e]:>9g}{v['apex']:>10.2f}{v['sb3']:>10.2f}"
            f"  {steps['apex'] / steps['sb3']:.1f}x"
        )
    lo, hi = a["p_apex_beats_sb3_ci"]
    lines.append(
        f"apex >= SB3 on {a['envs_apex_at_least_sb3']}/{len(record['envs'])} envs; "
        f"P(apex > SB3) = {a['p_apex_beats_sb3']:.2f} [{lo:.2f}, {hi:.2f}] "
        f"({len(record['seeds'])} seeds)"
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("suite", nargs="?", choices=sorted(SUITES))
    p.add_argument("--envs", help="a comma-separated subset of the suite's envs")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--budget", type=float, help="wall seconds per run (suite's default)")
    p.add_argument("--report", help="print and plot an existing record instead of running")
    args = p.parse_args()
    if args.report:
        with open(args.report) as f:
            record = json.load(f)
        print(render(record))
        plot(record, args.report[: -len(".json")] + ".png")
        return
    if args.suite is None:
        p.error("name a suite (minatar, classic) or --report RECORD")
    suite = SUITES[args.suite]
    envs = args.envs.split(",") if args.envs else list(suite["envs"])
    unknown = [e for e in envs if e not in suite["envs"]]
    if unknown:
        p.error(f"--envs: {unknown} not in {list(suite['envs'])}")
    budget = args.budget or suite["default_budget"]
    budgets = {e: budget * suite["budget_scale"].get(e, 1.0) for e in envs}
    every, episodes = suite["eval"]
    print(header(f"vs_sb3 {args.suite}"), flush=True)
    setup_peer()
    progress = PROGRESS.format(args.suite)
    runs: list[dict] = []
    if os.path.exists(progress):  # an interrupted run of the same settings goes on
        with open(progress) as f:
            saved = json.load(f)
        if saved["budgets"] == budgets:
            runs = saved["runs"]
    for seed in range(args.seeds):
        for i, env in enumerate(envs):
            order = (run_apex, run_sb3) if (seed + i) % 2 == 0 else (run_sb3, run_apex)
            for run in order:
                system = "apex" if run is run_apex else "sb3"
                done = [
                    r for r in runs if (r["system"], r["env"], r["seed"]) == (system, env, seed)
                ]
                if done:
                    continue
                r = run(suite, env, seed, budgets[env], every, episodes)
                runs.append(r)
                print(
                    f"{system:<5} {env:<15} seed {seed}: final {r['final']}, "
                    f"{r['env_steps']:,} env steps",
                    flush=True,
                )
                with open(progress, "w") as f:
                    json.dump({"budgets": budgets, "runs": runs}, f)
    record = {
        "suite": args.suite,
        "envs": envs,
        "env_ids": {e: suite["envs"][e] for e in envs},
        "budgets": budgets,
        "eval_every_seconds": every,
        "eval_episodes": episodes,
        "apex_config": suite["config"],
        "seeds": list(range(args.seeds)),
        "argv": sys.argv,
        "runs": runs,
    }
    record["analysis"] = analyse(runs, envs)
    path = save_results(f"vs_sb3-{args.suite}", record)
    plot(record, path[: -len(".json")] + ".png")
    os.remove(progress)
    print(render(record))
    print(f"record: {path}")


if __name__ == "__main__":
    main()
