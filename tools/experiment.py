r"""An experiment's results: `python -m tools.experiment report DIR [--json]
[--compare=I,J] [--reps=2000] [--noplot]`, `python -m tools.experiment status DIR`.

DIR is a folder `python -m launch.experiment` wrote. `report` reads every
finished trial's summary.json and prints, per setting (the grid's values that
vary), over its seeds:

  final eval return     summary.json eval_return_mean (the last evaluation)
  best eval return      summary.json best_eval_return_mean
  env steps to target   summary.json solved_at_env_steps (solved trials only; k/n says how many)
  wall s to target      summary.json solved_at_wall_seconds (solved trials only)

each as median, interquartile mean (IQM) and mean, with the 95% stratified
bootstrap confidence interval of the IQM (strata: the env of each trial;
tools/experiment_stats.py, rliable's estimators). Then the probability of
improvement P(A > B) of the final and the best eval return with its 95%
interval, every setting against the first (or --compare=I,J: setting I
against J, the numbers in the first column). It draws DIR/plots/eval_return.png:
per setting the mean evaluation return with its 95% bootstrap band, against
env steps and against wall seconds (each trial's metrics/evaluator.jsonl).
--json prints all of it as one JSON object (each trial's figures too).
Trials not finished are listed and left out of the statistics.

`status` prints every trial's state (and a failed one's cause).
"""

from __future__ import annotations

import json
import os
import sys

from absl import flags

_JSON = flags.DEFINE_bool("json", False, "Print the report as JSON.")
_COMPARE = flags.DEFINE_multi_string(
    "compare", [], "I,J: the probability that setting I improves on setting J (repeatable)."
)
_REPS = flags.DEFINE_integer("reps", 2000, "Bootstrap resamples.")
_PLOT = flags.DEFINE_bool("plot", True, "Draw DIR/plots/eval_return.png.")

from tools.experiment_report import _states, analyse, load, render  # noqa: E402


def report_main(out: str) -> int:
    from tools.experiment_curves import plot_experiment

    compare = []
    for text in _COMPARE.value:
        try:
            i, j = (int(v) for v in text.split(","))
        except ValueError:
            print(
                f"tools.experiment: --compare={text}: expected I,J (setting numbers)",
                file=sys.stderr,
            )
            return 2
        compare.append((i, j))
    try:
        report = analyse(out, reps=_REPS.value, compare=compare)
    except ValueError as err:
        print(f"tools.experiment: {err}", file=sys.stderr)
        return 2
    groups = report.pop("_groups")
    if _PLOT.value:
        title = f"{report['experiment']} ({report['config']}, commit {report['commit']})"
        drawn = plot_experiment(out, [g for g in groups if g["curves"]], title)
        report["plots"] = [drawn["path"]]
    if _JSON.value:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
        for path in report.get("plots", []):
            print(f"plot: {path}")
    return 0


def status_main(out: str) -> int:
    record = load(out)
    print(f"experiment {os.path.abspath(out)}: " + ", ".join(
        f"{n} {s}" for s, n in sorted(_states(record).items())))  # fmt: skip
    for t in record["trials"]:
        cause = f" ({t['cause']})" if t.get("cause") else ""
        print(f"  {t['id']}: {t['state']}{cause}, {len(t.get('attempts', []))} attempt(s)")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("report", "status"):
        print("usage: python -m tools.experiment report|status DIR [--json]", file=sys.stderr)
        return 2
    try:
        return report_main(argv[2]) if argv[1] == "report" else status_main(argv[2])
    except FileNotFoundError as err:
        print(f"tools.experiment: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from tools import run_tool

    run_tool(main)
