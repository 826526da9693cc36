"""An experiment's results, read from its folder (launch.experiment wrote it):
the trials' figures, their statistics per setting and the text table.
`python -m tools.experiment` (tools/experiment.py) is the command; this module
defines no flags, so it imports next to any tool."""

from __future__ import annotations

import json
import os
from typing import Any

RECORD = "experiment.json"
# report key -> (summary.json key, title, what is better)
METRICS = {
    "final_eval_return": ("eval_return_mean", "final eval return", "higher"),
    "best_eval_return": ("best_eval_return_mean", "best eval return", "higher"),
    "env_steps_to_target": ("solved_at_env_steps", "env steps to target", "lower"),
    "wall_seconds_to_target": ("solved_at_wall_seconds", "wall s to target", "lower"),
}
POI_METRICS = ("final_eval_return", "best_eval_return")


def load(out: str) -> dict[str, Any]:
    path = os.path.join(out, RECORD)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{out} holds no {RECORD} (not an experiment folder)")
    with open(path) as f:
        return json.load(f)


def _summary(run_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _env(run_dir: str) -> str:
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            return str(json.load(f)["env"]["id"])
    except (OSError, ValueError, KeyError):
        return "?"


def collect(out: str, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The settings in order, each with its trials' figures (finished trials only
    count) and their curves."""
    from tools.experiment_curves import trial_curve

    groups: dict[int, dict[str, Any]] = {}
    for t in record["trials"]:
        g = groups.setdefault(
            t["setting_index"],
            {"index": t["setting_index"], "setting": t["setting"], "overrides": t["overrides"],
             "trials": [], "curves": [], "run_dirs": []},
        )  # fmt: skip
        run_dir = os.path.join(out, t["run_dir"])
        row: dict[str, Any] = {
            "id": t["id"],
            "seed": t["seed"],
            "state": t["state"],
            "cause": t.get("cause"),
            "run_dir": run_dir,
        }
        s = _summary(run_dir) if t["state"] == "finished" else None
        if s is not None:
            row["env"] = _env(run_dir)
            row["target_return"] = s.get("target_return")
            row["stop_reason"] = s.get("stop_reason")
            for key, (skey, _, _) in METRICS.items():
                row[key] = s.get(skey)
            g["curves"].append(
                trial_curve(run_dir, t.get("attempts", []), s.get("clock_start_time"))
            )
            g["run_dirs"].append(run_dir)
        g["trials"].append(row)
    return [groups[i] for i in sorted(groups)]


def _strata(trials: list[dict], key: str) -> dict[str, list[float]]:
    by_env: dict[str, list[float]] = {}
    for r in trials:
        if r.get(key) is not None:
            by_env.setdefault(r["env"], []).append(float(r[key]))
    return by_env


def analyse(out: str, reps: int = 2000, compare: list[tuple[int, int]] | None = None) -> dict:
    """The whole report as a dict (what --json prints)."""
    from tools.experiment_stats import (
        probability_of_improvement,
        probability_of_improvement_ci,
        summarize,
    )

    record = load(out)
    groups = collect(out, record)
    settings = []
    for g in groups:
        done = [r for r in g["trials"] if r["state"] == "finished" and "env" in r]
        metrics = {}
        for key in METRICS:
            strata = _strata(done, key)
            stats = summarize(list(strata.values()), reps=reps) if strata else {"n": 0}
            stats["of"] = len(done)
            metrics[key] = stats
        settings.append(
            {
                "index": g["index"],
                "setting": g["setting"],
                "overrides": g["overrides"],
                "finished": len(done),
                "trials": g["trials"],
                "metrics": metrics,
            }
        )
    pairs = compare if compare else [(i, 0) for i in range(1, len(settings))]
    comparisons = []
    for i, j in pairs:
        if not (0 <= i < len(settings) and 0 <= j < len(settings)) or i == j:
            raise ValueError(f"--compare={i},{j}: two different settings in 0..{len(settings) - 1}")
        a, b = settings[i], settings[j]
        for key in POI_METRICS:
            sa = _strata([r for r in a["trials"] if "env" in r], key)
            sb = _strata([r for r in b["trials"] if "env" in r], key)
            envs = sorted(set(sa) & set(sb))
            entry = {"a": i, "b": j, "metric": key, "a_setting": a["setting"],
                     "b_setting": b["setting"], "envs": envs}  # fmt: skip
            if envs:
                xs, ys = [sa[e] for e in envs], [sb[e] for e in envs]
                entry["probability"] = probability_of_improvement(xs, ys)
                entry["ci"] = list(probability_of_improvement_ci(xs, ys, reps=reps))
            comparisons.append(entry)
    return {
        "experiment": os.path.abspath(out),
        "config": record["config"],
        "grid": record["grid"],
        "seeds": record["seeds"],
        "commit": record.get("commit"),
        "confidence": 0.95,
        "bootstrap_reps": reps,
        "states": _states(record),
        "settings": settings,
        "comparisons": comparisons,
        "_groups": groups,
    }


def _states(record: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in record["trials"]:
        out[t["state"]] = out.get(t["state"], 0) + 1
    return out


def _num(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.1f}"


def render(report: dict) -> str:
    """The report as the text `report` prints."""
    lines = [
        f"experiment {report['experiment']}",
        f"  config {report['config']}, seeds {','.join(map(str, report['seeds']))}, "
        f"commit {report['commit']}",
        "  trials: " + ", ".join(f"{n} {s}" for s, n in sorted(report["states"].items())),
    ]
    for s in report["settings"]:
        for t in s["trials"]:
            if t["state"] != "finished":
                cause = f": {t['cause']}" if t.get("cause") else ""
                lines.append(f"  left out: {t['id']} ({t['state']}{cause})")
    width = max([len(s["setting"]) for s in report["settings"]] + [7])
    head = f"  {'#':>2} {'setting':<{width}} {'n':>5} {'median':>9} {'IQM':>9} {'mean':>9}  95% CI of IQM"
    for key, (_, title, better) in METRICS.items():
        solved = "to_target" in key
        lines += [
            "",
            f"{title} ({better} is better{'; solved trials only' if solved else ''})",
            head,
        ]
        for s in report["settings"]:
            m = s["metrics"][key]
            n = f"{m['n']}/{m['of']}" if solved else str(m["n"])
            if m["n"]:
                ci = f"[{_num(m['iqm_ci'][0])}, {_num(m['iqm_ci'][1])}]"
                cells = f"{_num(m['median']):>9} {_num(m['iqm']):>9} {_num(m['mean']):>9}  {ci}"
            else:
                cells = f"{'-':>9} {'-':>9} {'-':>9}  -"
            lines.append(f"  {s['index']:>2} {s['setting']:<{width}} {n:>5} {cells}")
    if report["comparisons"]:
        lines += ["", "probability of improvement P(A > B), 95% CI (a trial of A beats one of B)"]
        for c in report["comparisons"]:
            title = METRICS[c["metric"]][1]
            value = (
                f"{c['probability']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]"
                if "probability" in c
                else "- (no common finished trials)"
            )
            lines.append(f"  {title}: #{c['a']} > #{c['b']}: {value}")
    lines.append(
        f"\n(IQM: mean of the middle 50% of trials; CI: {report['bootstrap_reps']} stratified "
        "bootstrap resamples, percentile; from each trial's summary.json)"
    )
    return "\n".join(lines)
