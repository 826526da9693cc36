r"""Learning curves beyond CartPole (issue 18): the default config, only the env changed.

    .venv/bin/python bench/env_curves.py [--envs=Acrobot-v1,LunarLander-v3] [--seeds=3]
        [--max_actor_steps=N | --max_actor_steps=ENV=N ...] [--explicit_target]
        [--override=--config.a.b=v ...] [--out=DIR]

For each env, its seeds are one experiment (launch.experiment, the project's
one way to run seeds: seed S sets `seed` and `learner.seed`) in
OUT/experiments/<env> (a new temp folder without --out), one seed after the other, each a fresh
`python -m launch.train` (local_mp) of

    python -m launch.train --config=configs/apex_cartpole.py --config.env.id=ENV
        --config.seed=S --config.stop.max_actor_steps=N --config.stop.when_solved=false
        --config.stop.max_wall_seconds=GUARD --config.run_dir=TMP

The run length is a budget of env steps (summed over all actors), so that a
curve against env steps does not depend on the machine's load; the wall limit
is only a hang guard (N / 300 env steps/s, at least 600 s), and a run that stops
on it is marked in the table. `when_solved=false` keeps every run to its budget.

From each run's RUN_DIR/metrics/evaluator.jsonl (one row per evaluation: the
mean return of evaluation.episodes greedy episodes) it takes the curve of
evaluation return against env steps: a row's own `evaluator/env_steps` and
`evaluator/learner_steps` (the run's counts when the evaluated parameters were
pulled) where it has them, else the coordinator's counts
(RUN_DIR/metrics/coordinator.jsonl, a row a second) interpolated at the row's
`time` (when the evaluation was reported, a few seconds later). It prints per
env a table, per seed and the median over seeds: the last and the best
evaluation so far at 25%, 50%, 75% and 100% of the budget and at the end of
the run, the env and learner steps reached (summary.json), wall seconds, and
the env steps of the first evaluation at or above the env's reward_threshold
(gymnasium's spec: Acrobot-v1 -100, LunarLander-v3 200), computed from the
curve whatever the run's own evaluation.target_return was. Writes DIR/env_curves-<commit>.png (the curves)
and DIR/env_curves-<commit>.json (every curve, summary and the commit); DIR is
bench/results by default.

The config's evaluation.target_return 'auto' resolves to the same threshold,
so summary.json's solved_at_* agree with the table; --explicit_target passes
`--config.evaluation.target_return=<reward_threshold>` instead, for a checkout
whose config has a fixed target (CartPole's 475) or no 'auto'. A run whose
target differs from the threshold is noted in the output.

Budgets (defaults of --max_actor_steps): Acrobot-v1 200,000 and LunarLander-v3
600,000 env steps. Measured on the 2-core machine, one 60 s run of each with
the default config: Acrobot-v1 3,270 env steps/s (summary.json; 1,900-2,100/s
in the smoke runs, with other jobs on the machine), LunarLander-v3 2,200 env
steps/s (with other jobs running; 1,600/s at the end, when its evaluations of
10 episodes of up to 1,000 steps each run alongside; 2,480/s in a 60k smoke
run), and 15-20 s from launch to the first SGD step plus ~10 s of shut-down per
run. So a seed of Acrobot takes ~1.5 min and one of LunarLander ~5-6.5 min: the
whole bench (2 envs x 3 seeds) ~20-25 min, under the 30 min aimed at. In the
60 s runs Acrobot first reached -100 at ~70k env steps (with single
evaluations falling back to -400 after), and LunarLander reached 160 at ~75k
and was still rising at 100k: 200k is ~3x Acrobot's first solve, 600k 6x the
point where LunarLander still rose (the RL Zoo's DQN trains 100k on each).
Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile

from common import ROOT, fmt, header, save_results

from apex import git_commit, read_jsonl
from launch.experiment import run_experiment, trial_results

CONFIG = "configs/apex_cartpole.py"
DEFAULT_ENVS = ("Acrobot-v1", "LunarLander-v3")
DEFAULT_BUDGETS = {"Acrobot-v1": 200_000, "LunarLander-v3": 600_000}
FALLBACK_BUDGET = 200_000
CHECKPOINTS = (0.25, 0.5, 0.75, 1.0)
# The wall limit is a hang guard only: budget / this rate, at least GUARD_MIN_SECONDS.
GUARD_MIN_RATE = 300.0
GUARD_MIN_SECONDS = 600.0
# How long past the wall guard a run may take before it is killed (start-up, shutdown).
GRACE_SECONDS = 180.0


def reward_threshold(env_id: str) -> float | None:
    import gymnasium

    return gymnasium.spec(env_id).reward_threshold


def wall_guard(budget: int) -> float:
    return float(max(GUARD_MIN_SECONDS, math.ceil(budget / GUARD_MIN_RATE)))


def budgets_for(envs: list[str], specs: list[str]) -> dict[str, int]:
    """--max_actor_steps entries: 'N' for every env, 'ENV=N' for one (later wins)."""
    budgets = {e: DEFAULT_BUDGETS.get(e, FALLBACK_BUDGET) for e in envs}
    for spec in specs:
        env, sep, n = spec.rpartition("=")
        value = int(float(n.replace("_", "").replace(",", "")))
        if not sep:
            budgets = dict.fromkeys(envs, value)
        elif env in budgets:
            budgets[env] = value
        else:
            raise SystemExit(f"--max_actor_steps={spec}: {env} is not in --envs {envs}")
    return budgets


def overrides_for(env_id: str, seed: int, budget: int, target: float | None, extra: list[str]):
    args = [
        f"--config.env.id={env_id}",
        f"--config.seed={seed}",
        f"--config.stop.max_actor_steps={budget}",
        "--config.stop.when_solved=false",
        f"--config.stop.max_wall_seconds={wall_guard(budget):g}",
    ]
    if target is not None:
        args.append(f"--config.evaluation.target_return={target:g}")
    return args + list(extra)


def _interp(x: float, xs: list[float], ys: list[float]) -> float | None:
    """Linear interpolation of (xs, ys) at x (xs ascending), clamped at both ends."""
    import numpy as np

    return float(np.interp(x, xs, ys)) if xs else None


def _rows(run_dir: str, name: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics", f"{name}.jsonl")
    return read_jsonl(path) if os.path.exists(path) else []


def read_curve(run_dir: str, t0: float | None = None) -> list[dict]:
    """The run's evaluations in order: wall seconds since t0 (the run's clock
    start), env steps, learner steps, parameter version and return mean. Env and
    learner steps are the evaluator row's own where it has them, else the
    coordinator's counts interpolated at the row's time (`steps_from` says which)."""
    coord = [r for r in _rows(run_dir, "coordinator") if r.get("coordinator/env_steps") is not None]
    c_t = [float(r["time"]) for r in coord]
    c_env = [float(r["coordinator/env_steps"]) for r in coord]
    c_learn = [float(r.get("coordinator/learner_steps") or 0) for r in coord]
    evals = [r for r in _rows(run_dir, "evaluator") if r.get("evaluator/return_mean") is not None]
    if t0 is None:
        times = [float(r["time"]) for r in evals[:1] + coord[:1]]
        t0 = min(times) if times else 0.0
    curve = []
    for r in evals:
        t = float(r["time"])
        env_steps = r.get("evaluator/env_steps")
        learner_steps = r.get("evaluator/learner_steps")
        source = "evaluator"
        if env_steps is None:
            env_steps = _interp(t, c_t, c_env)
            source = "coordinator"
        if learner_steps is None:
            learner_steps = _interp(t, c_t, c_learn)
        if env_steps is None:
            continue  # neither the row nor a coordinator row says where it was
        curve.append(
            {
                "wall_seconds": round(t - t0, 3),
                "env_steps": int(round(env_steps)),
                "learner_steps": None if learner_steps is None else int(round(learner_steps)),
                "param_version": r.get("evaluator/param_version"),
                "return_mean": float(r["evaluator/return_mean"]),
                "steps_from": source,
            }
        )
    return curve


def at_steps(curve: list[dict], steps: float) -> tuple[float | None, float | None]:
    """(last, best) evaluation return among the evaluations at or before `steps`."""
    seen = [p["return_mean"] for p in curve if p["env_steps"] <= steps]
    return (seen[-1], max(seen)) if seen else (None, None)


def solved_at(curve: list[dict], threshold: float | None) -> int | None:
    if threshold is None:
        return None
    return next((p["env_steps"] for p in curve if p["return_mean"] >= threshold), None)


def run_row(seed: int, budget: int, threshold: float | None, s: dict) -> dict:
    """One seed's figures from its summary and curve."""
    curve = read_curve(s["run_dir"], s.get("clock_start_time"))
    config_target = None
    try:
        with open(os.path.join(s["run_dir"], "config.json")) as f:
            config_target = json.load(f)["evaluation"]["target_return"]
    except (OSError, KeyError, ValueError):
        pass
    row = {
        "seed": seed,
        "evaluations": len(curve),
        "checkpoints": {},
        "final_last": curve[-1]["return_mean"] if curve else None,
        "final_best": max(p["return_mean"] for p in curve) if curve else None,
        "env_steps": s.get("env_steps"),
        "learner_steps": s.get("learner_steps"),
        "wall_seconds": s.get("wall_seconds"),
        "process_seconds": s.get("process_seconds"),
        "env_steps_per_second": s.get("env_steps_per_second"),
        "solved_at_env_steps": solved_at(curve, threshold),
        "config_target_return": config_target,
        "summary_solved_at_env_steps": s.get("solved_at_env_steps"),
        "stop_reason": s.get("stop_reason"),
        "returncode": s.get("returncode"),
        "steps_from": sorted({p["steps_from"] for p in curve}),
        "run_dir": s["run_dir"],
        "curve": curve,
        "summary": {k: v for k, v in s.items() if k != "eval_returns"},
    }
    for frac in CHECKPOINTS:
        last, best = at_steps(curve, frac * budget)
        row["checkpoints"][f"{frac:g}"] = {
            "env_steps": int(frac * budget),
            "last": last,
            "best": best,
        }
    return row


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _pair(last, best) -> str:
    return f"{fmt(last)} / {fmt(best)}"


def table(env_id: str, budget: int, threshold: float | None, rows: list[dict]) -> str:
    """Markdown: a row per seed and the median over seeds."""
    cps = [f"{100 * f:g}% ({int(f * budget):,})" for f in CHECKPOINTS]
    head = (
        ["seed"]
        + [f"{c} last / best" for c in cps]
        + ["end last / best", "env steps", "learner steps", "wall s"]
        + [f"solved at env steps (>= {fmt(threshold)})", "stop"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['seed']} | failed: {r['error']} |" + " |" * (len(head) - 2))
            continue
        cells = [str(r["seed"])]
        cells += [
            _pair(r["checkpoints"][f"{f:g}"]["last"], r["checkpoints"][f"{f:g}"]["best"])
            for f in CHECKPOINTS
        ]
        cells += [
            _pair(r["final_last"], r["final_best"]),
            fmt(r["env_steps"]),
            fmt(r["learner_steps"]),
            fmt(r["wall_seconds"]),
            fmt(r["solved_at_env_steps"]),
            f"{r['stop_reason']}{'' if r['stop_reason'] == 'max_actor_steps' else ' (!)'}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    ok = [r for r in rows if not r.get("error")]
    if ok:
        med = ["**median**"]
        for f in CHECKPOINTS:
            key = f"{f:g}"
            med.append(
                _pair(
                    _median([r["checkpoints"][key]["last"] for r in ok]),
                    _median([r["checkpoints"][key]["best"] for r in ok]),
                )
            )
        solved = [r["solved_at_env_steps"] for r in ok]
        n_solved = sum(v is not None for v in solved)
        med += [
            _pair(_median([r["final_last"] for r in ok]), _median([r["final_best"] for r in ok])),
            fmt(_median([r["env_steps"] for r in ok])),
            fmt(_median([r["learner_steps"] for r in ok])),
            fmt(_median([r["wall_seconds"] for r in ok])),
            f"{fmt(_median(solved))} ({n_solved}/{len(ok)} solved)",
            "",
        ]
        lines.append("| " + " | ".join(med) + " |")
    return "\n".join(lines)


def median_curve(rows: list[dict], budget: int, points: int = 101) -> tuple[list, list]:
    """Median over seeds of the last evaluation at or before x, on a grid of x."""
    xs, ys = [], []
    for i in range(points):
        x = budget * i / (points - 1)
        vals = [at_steps(r["curve"], x)[0] for r in rows if r.get("curve")]
        vals = [v for v in vals if v is not None]
        if vals:
            xs.append(x)
            ys.append(statistics.median(vals))
    return xs, ys


def plot(results: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.2), squeeze=False)
    for ax, res in zip(axes[0], results):
        rows = [r for r in res["runs"] if r.get("curve")]
        for r in rows:
            c = r["curve"]
            ax.plot(
                [p["env_steps"] for p in c],
                [p["return_mean"] for p in c],
                lw=0.9,
                marker=".",
                ms=3,
                alpha=0.6,
                label=f"seed {r['seed']}",
            )
        xs, ys = median_curve(rows, res["max_actor_steps"])
        if len(rows) > 1 and xs:
            ax.step(xs, ys, where="post", color="black", lw=2, label="median (last eval)")
        if res["reward_threshold"] is not None:
            ax.axhline(
                res["reward_threshold"], color="grey", ls="--", lw=1, label="reward_threshold"
            )
        ax.set_title(
            f"{res['env']}: {len(res['runs'])} seeds, {res['max_actor_steps']:,} env steps"
        )
        ax.set_xlabel("env steps (all actors)")
        ax.set_ylabel("evaluation return (mean of greedy episodes)")
        ax.set_xlim(0, res["max_actor_steps"] * 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save(out_dir: str | None, payload: dict) -> str:
    """<out_dir or bench/results>/env_curves-<commit>.json (common.save_results)."""
    return save_results("env_curves", payload, out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", default=",".join(DEFAULT_ENVS), help="comma-separated env ids")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per env")
    parser.add_argument(
        "--max_actor_steps",
        action="append",
        default=[],
        help="env-step budget: N (every env) or ENV=N (one env); repeatable. Defaults: "
        + ", ".join(f"{e}={n:,}" for e, n in DEFAULT_BUDGETS.items()),
    )
    parser.add_argument(
        "--explicit_target",
        action="store_true",
        help="pass --config.evaluation.target_return=<the env spec's reward_threshold>",
    )
    parser.add_argument("--override", action="append", default=[], help="extra --config.* argument")
    parser.add_argument(
        "--out", default=None, help="directory for the JSON and PNG (bench/results)"
    )
    args = parser.parse_args()

    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    experiments = os.path.join(
        os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix="apex-env-curves-"),
        "experiments",
    )
    budgets = budgets_for(envs, args.max_actor_steps)
    print(header("bench/env_curves.py"), flush=True)
    print(f"extra overrides: {args.override or 'none (the default config, only the env changed)'}")
    results = []
    for env_id in envs:
        threshold = reward_threshold(env_id)
        budget = budgets[env_id]
        target = threshold if args.explicit_target else None
        if args.explicit_target and threshold is None:
            print(f"{env_id}: the spec has no reward_threshold; --explicit_target passes none")
        template = overrides_for(env_id, 0, budget, target, args.override)
        command = shlex.join(
            ["python", "-m", "launch.train", f"--config={CONFIG}"]
            + [
                a if not a.startswith("--config.seed=") else "--config.seed=<SEED>"
                for a in template
            ]
            + ["--config.run_dir=<TMP>"]
        )
        print(f"\n== {env_id}: {args.seeds} seeds x {budget:,} env steps", flush=True)
        print(f"   {command}", flush=True)
        runs = []
        sets = [
            a.removeprefix("--config.")
            for a in overrides_for(env_id, 0, budget, target, args.override)
            if not a.startswith("--config.seed=")
        ]
        os.chdir(ROOT)  # the trials' `python -m launch.train`
        out = os.path.join(experiments, env_id.replace("/", "_"))
        code, record = run_experiment(
            CONFIG,
            out,
            seeds=list(range(args.seeds)),
            sets=[*sets, "logging.progress_period_seconds=10"],
            trial_timeout=wall_guard(budget) + GRACE_SECONDS,
        )
        if code == 130:
            sys.exit(code)
        print(f"   experiment: {out} (python -m tools.experiment report {out})", flush=True)
        for s in trial_results(out, record):
            seed = s["seed"]
            if s["state"] != "finished" and not s.get("eval_return_mean"):
                runs.append({"seed": seed, "error": f"{s['state']}: {s['cause']}"[:300]})
                print(f"seed {seed}: FAILED {runs[-1]['error']}", flush=True)
                continue
            row = run_row(seed, budget, threshold, s)
            runs.append(row)
            print(
                f"seed {seed}: {row['evaluations']} evals, end last/best "
                f"{_pair(row['final_last'], row['final_best'])}, env steps {fmt(row['env_steps'])}, "
                f"learner steps {fmt(row['learner_steps'])}, {fmt(row['wall_seconds'])} s "
                f"({fmt(row['env_steps_per_second'])} env steps/s), solved at "
                f"{fmt(row['solved_at_env_steps'])}, stop {row['stop_reason']}, rc {row['returncode']}, "
                f"steps from {'+'.join(row['steps_from']) or '-'}, {row['run_dir']}",
                flush=True,
            )
            if not row["evaluations"]:
                print(
                    "   note: no evaluation finished in this run (a budget shorter than the "
                    "start-up and the first evaluation?)",
                    flush=True,
                )
            ct = row["config_target_return"]
            if threshold is not None and ct is not None and float(ct) != float(threshold):
                print(
                    f"   note: the run's evaluation.target_return is {ct:g}, not {env_id}'s "
                    f"reward_threshold {threshold:g}: summary.json's solved_at_* refer to {ct:g}; "
                    "the table's 'solved at' is from the curve (--explicit_target to align them)",
                    flush=True,
                )
        results.append(
            {
                "env": env_id,
                "max_actor_steps": budget,
                "wall_guard_seconds": wall_guard(budget),
                "reward_threshold": threshold,
                "explicit_target": args.explicit_target,
                "command": command,
                "runs": runs,
            }
        )

    for res in results:
        print(f"\n### {res['env']} ({res['max_actor_steps']:,} env steps, {args.seeds} seeds)\n")
        print(f"    {res['command']}\n")
        print(table(res["env"], res["max_actor_steps"], res["reward_threshold"], res["runs"]))
    print(
        "\ncells: mean return of one evaluation (evaluation.episodes greedy episodes); "
        "'last' is the latest evaluation at or before that many env steps, 'best' the best "
        "up to there; 'end' counts every evaluation of the run. (!): the run stopped on "
        "something other than its env-step budget."
    )

    payload = {
        "envs": envs,
        "seeds": args.seeds,
        "budgets": budgets,
        "checkpoints": list(CHECKPOINTS),
        "explicit_target": args.explicit_target,
        "overrides": args.override,
        "bench_command": shlex.join(["python", "bench/env_curves.py", *sys.argv[1:]]),
        "results": results,
    }
    path = save(args.out, payload)
    png = path[: -len(".json")] + ".png"
    commit = git_commit(ROOT)
    plot(
        results, png, f"apex env_curves, commit {commit}, {platform.node()}, {os.cpu_count()} cpus"
    )
    print(f"\nwrote {path}\nwrote {png}")


if __name__ == "__main__":
    main()
