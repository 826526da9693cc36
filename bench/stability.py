r"""Does a solved run stay solved? The default CartPole run, over several seeds.

    .venv/bin/python bench/stability.py --seeds 10 --seconds 300 [--override=--config.a.b=v ...] [--out=DIR]
    .venv/bin/python bench/stability.py --seeds 10 --override=--config.evaluation.weights=online,average

The seeds are one experiment (launch.experiment: the project's one way to run
seeds; seed S sets `seed` and `learner.seed`), in --out (default: a new temp
folder; rerun the same command with the same --out to resume it): each seed a
`python -m launch.train` (local_mp) for --seconds wall seconds that does not
stop when solved. An override with several values (a,b) makes a grid: its
settings run side by side, seed by seed, and each is reported on its own.
`apex experiment report OUT` reports it too. From the evaluator's metrics
(RUN_DIR/metrics/evaluator.jsonl; each evaluation is evaluation.episodes greedy
episodes) it takes the first evaluation whose mean reaches the target (475) and
counts how many of the later evaluations stay at or above it. The goal: at
least 90% of the later evaluations, in every seed. Also prints the env steps
to the first solve, the last evaluation, the best one, and what summary.json
reports for both. Writes bench/results/stability-<commit>.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from common import ROOT, fmt, header, save_results

from apex import read_jsonl
from launch.experiment import run_experiment, trial_results

GOAL = 0.90


def evaluations(run_dir: str) -> list[tuple[float, float]]:
    """(seconds since launch, return mean) of every evaluation of a run."""
    rows = read_jsonl(os.path.join(run_dir, "metrics", "evaluator.jsonl"))
    return [
        (float(r["time"]), float(r["evaluator/return_mean"]))
        for r in rows
        if r.get("evaluator/return_mean") is not None
    ]


def stability(evals: list[tuple[float, float]], target: float) -> dict:
    """The first evaluation at or above `target`, and the share of the later ones
    that stay there (None: never solved, or solved at the very last evaluation)."""
    first = next((i for i, (_, r) in enumerate(evals) if r >= target), None)
    if first is None:
        return {"solved_at_eval": None, "later": 0, "later_at_target": 0, "share": None}
    later = [r for _, r in evals[first + 1 :]]
    kept = sum(1 for r in later if r >= target)
    return {
        "solved_at_eval": first,
        "later": len(later),
        "later_at_target": kept,
        "share": kept / len(later) if later else None,
        "later_min": min(later) if later else None,
    }


def verdict(runs: list[dict], seeds: int, target: float) -> dict:
    """One setting's seeds: solved, the share kept per seed, the env steps to
    solve, and whether the goal (>= GOAL in every seed, all solved) is met."""
    shares = [r["share"] for r in runs if r["share"] is not None]
    solved = sum(1 for r in runs if r["solved_at_eval"] is not None)
    steps = [r["solved_at_env_steps"] for r in runs if r.get("solved_at_env_steps") is not None]
    met = solved == seeds and len(shares) == seeds and all(s >= GOAL for s in shares)
    per_seed = [None if r["share"] is None else round(100 * r["share"]) for r in runs]
    line = (
        f"solved {solved}/{seeds} seeds (median {fmt(statistics.median(steps)) if steps else '-'} "
        f"env steps); share of later evaluations >= {target:g}: median "
        f"{fmt(100 * statistics.median(shares)) if shares else '-'}%, min "
        f"{fmt(100 * min(shares)) if shares else '-'}%, per seed {per_seed}; goal >= "
        f"{100 * GOAL:.0f}% in every seed: {'met' if met else 'NOT met'}"
    )
    return {
        "solved": solved,
        "median_share": statistics.median(shares) if shares else None,
        "min_share": min(shares) if shares else None,
        "median_solved_at_env_steps": statistics.median(steps) if steps else None,
        "goal_met": met,
        "line": line,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--override", action="append", default=[], help="extra --config.* argument")
    parser.add_argument("--out", default=None, help="the experiment's folder (a new temp folder)")
    args = parser.parse_args()

    print(header("bench/stability.py"), flush=True)
    print(f"overrides: {args.override or 'none (the default config)'}", flush=True)
    out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="apex-stability-"))
    sets = [
        f"stop.max_wall_seconds={args.seconds:g}",
        "stop.max_actor_steps=None",
        "stop.when_solved=false",
        "logging.progress_period_seconds=10",
        *(o.removeprefix("--config.") for o in args.override),
    ]
    os.chdir(ROOT)  # the trials' `python -m launch.train`
    code, record = run_experiment(
        "configs/apex_cartpole.py",
        out,
        seeds=list(range(args.seeds)),
        sets=sets,
        trial_timeout=args.seconds + 180,
    )
    if code == 130:
        sys.exit(code)
    settings: dict[str, list[dict]] = {}
    for s in trial_results(out, record):
        runs = settings.setdefault(s["setting"], [])
        seed = s["seed"]
        if s["state"] != "finished":
            print(f"{s['id']}: {s['state']} ({s['cause']})", flush=True)
            runs.append({"seed": seed, "share": None, "solved_at_eval": None, "state": s["state"]})
            continue
        evals = evaluations(s["run_dir"])
        st = stability(evals, args.target)
        t0 = s.get("clock_start_time") or (evals[0][0] if evals else 0.0)
        first = st["solved_at_eval"]
        row = {
            "seed": seed,
            "evaluations": len(evals),
            "solved_at_seconds": evals[first][0] - t0 if first is not None else None,
            "solved_at_env_steps": s.get("solved_at_env_steps"),
            **st,
            "last_eval": evals[-1][1] if evals else None,
            "summary_eval_return_mean": s.get("eval_return_mean"),
            "summary_best_eval_return_mean": s.get("best_eval_return_mean"),
            "evaluated_weights": s.get("evaluated_weights"),
            "env_steps": s.get("env_steps"),
            "returncode": s.get("returncode"),
            "run_dir": s["run_dir"],
        }
        runs.append(row)
        share = "-" if row["share"] is None else f"{100 * row['share']:.0f}%"
        print(
            f"{s['id']}: {len(evals)} evals, solved at {fmt(row['solved_at_seconds'])} s / "
            f"{fmt(row['solved_at_env_steps'])} env steps, later {row['later_at_target']}/"
            f"{row['later']} >= {args.target:g} ({share}), later min "
            f"{fmt(row.get('later_min'))}, last {fmt(row['last_eval'])}, best "
            f"{fmt(row['summary_best_eval_return_mean'])}, rc {row['returncode']}",
            flush=True,
        )
    verdicts = {name: verdict(runs, args.seeds, args.target) for name, runs in settings.items()}
    for name, v in verdicts.items():
        print(f"{name or 'the config'}: {v['line']}", flush=True)
    path = save_results(
        "stability",
        {
            "seeds": args.seeds,
            "seconds": args.seconds,
            "target": args.target,
            "overrides": args.override,
            "experiment": out,
            "goal_met": all(v["goal_met"] for v in verdicts.values()),
            "settings": {
                name: {**{k: v for k, v in verdicts[name].items() if k != "line"}, "runs": runs}
                for name, runs in settings.items()
            },
        },
    )
    print("saved", path)


if __name__ == "__main__":
    main()
