r"""Does a solved run stay solved? The default CartPole run, over several seeds.

    .venv/bin/python bench/stability.py --seeds 5 --seconds 300 [--override=--config.a.b=v ...] [--out=DIR]

The seeds are one experiment (launch.experiment: the project's one way to run
seeds; seed S sets `seed` and `learner.seed`), in --out (default: a new temp
folder; rerun the same command with the same --out to resume it): each seed a
`python -m launch.train` (local_mp) for --seconds wall seconds that does not
stop when solved. `python -m tools.experiment report OUT` reports it too. From the evaluator's metrics
(RUN_DIR/metrics/evaluator.jsonl; each evaluation is evaluation.episodes greedy
episodes) it takes the first evaluation whose mean reaches the target (475) and
counts how many of the later evaluations stay at or above it. The goal (issue
17): at least 90% of the later evaluations, in every seed. Also prints the
last evaluation, the best one, and what summary.json reports for both.
Writes bench/results/stability-<commit>.json.
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
    runs = []
    for s in trial_results(out, record):
        seed = s["seed"]
        if s["state"] != "finished":
            print(f"seed {seed}: {s['state']} ({s['cause']})", flush=True)
            continue
        evals = evaluations(s["run_dir"])
        st = stability(evals, args.target)
        t0 = s.get("clock_start_time") or (evals[0][0] if evals else 0.0)
        solved_t = evals[st["solved_at_eval"]][0] - t0 if st["solved_at_eval"] is not None else None
        row = {
            "seed": seed,
            "evaluations": len(evals),
            "solved_at_seconds": solved_t,
            **st,
            "last_eval": evals[-1][1] if evals else None,
            "summary_eval_return_mean": s.get("eval_return_mean"),
            "summary_best_eval_return_mean": s.get("best_eval_return_mean"),
            "env_steps": s.get("env_steps"),
            "returncode": s.get("returncode"),
            "run_dir": s["run_dir"],
        }
        runs.append(row)
        share = "-" if row["share"] is None else f"{100 * row['share']:.0f}%"
        print(
            f"seed {seed}: {len(evals)} evals, solved at {fmt(solved_t)} s, "
            f"later {row['later_at_target']}/{row['later']} >= {args.target:g} ({share}), "
            f"later min {fmt(row.get('later_min'))}, last {fmt(row['last_eval'])}, "
            f"best {fmt(row['summary_best_eval_return_mean'])}, rc {row['returncode']}",
            flush=True,
        )
    shares = [r["share"] for r in runs if r["share"] is not None]
    solved = sum(1 for r in runs if r["solved_at_eval"] is not None)
    met = solved == args.seeds and all(s >= GOAL for s in shares)  # a failed seed: not met
    print(
        f"solved {solved}/{args.seeds} seeds; share of later evaluations >= {args.target:g}: "
        f"median {fmt(100 * statistics.median(shares)) if shares else '-'}%, "
        f"min {fmt(100 * min(shares)) if shares else '-'}%, per seed "
        f"{[None if s is None else round(100 * s) for s in (r['share'] for r in runs)]}; "
        f"goal >= {100 * GOAL:.0f}% in every seed: {'met' if met else 'NOT met'}"
    )
    path = save_results(
        "stability",
        {
            "seeds": args.seeds,
            "seconds": args.seconds,
            "target": args.target,
            "overrides": args.override,
            "experiment": out,
            "goal_met": met,
            "runs": runs,
        },
    )
    print("saved", path)


if __name__ == "__main__":
    main()
