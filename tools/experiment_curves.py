"""An experiment's learning curves: each trial's evaluations (its
metrics/evaluator.jsonl) against env steps and wall seconds, and per setting
the mean over trials with a 95% bootstrap band, drawn as tools.plot draws a
run (matplotlib, Agg) into DIR/plots/eval_return.png."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tools.experiment_stats import mean_band
from tools.plot import _rows, _target_return


def _wall_seconds(t: float, attempts: list[dict], fallback: float | None) -> float | None:
    """Seconds on the run's clock at unix time `t`. A resumed run's clock goes on
    from its checkpoint's wall_seconds: each attempt (experiment.json) has its
    own clock_start_time, which holds for the rows written while it ran."""
    for a in reversed(attempts):
        start, end, clock = a.get("started"), a.get("ended"), a.get("clock_start_time")
        if clock is not None and start is not None and start - 1 <= t <= (end or t) + 1:
            return t - clock
    return None if fallback is None else t - fallback


def trial_curve(run_dir: str, attempts: list[dict], clock_start: float | None) -> dict[str, list]:
    """{'env_steps': [...], 'wall_seconds': [...], 'return': [...]} of every
    evaluation of a trial, in order (rows without env steps are left out)."""
    pts = []
    for r in _rows(run_dir, "evaluator"):
        ret, steps = r.get("evaluator/return_mean"), r.get("evaluator/env_steps")
        if ret is None or steps is None:
            continue
        pts.append((float(steps), _wall_seconds(float(r["time"]), attempts, clock_start), ret))
    return {
        "env_steps": [p[0] for p in pts],
        "wall_seconds": [p[1] for p in pts],
        "return": [float(p[2]) for p in pts],
    }


def on_grid(curves: list[dict], key: str, points: int = 101) -> tuple[np.ndarray, np.ndarray]:
    """The curves as step functions (the latest evaluation at or before x; a
    trial that ended keeps its last value) on a common grid of x from the
    earliest evaluation to the latest. Returns (x, values[trial, point]), NaN
    where a trial had no evaluation yet."""
    usable = []
    for c in curves:
        pts = sorted((x, y) for x, y in zip(c[key], c["return"]) if x is not None)
        if pts:
            usable.append(pts)
    if not usable:
        return np.zeros(0), np.zeros((0, 0))
    lo = min(p[0][0] for p in usable)
    hi = max(p[-1][0] for p in usable)
    x = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    values = np.full((len(usable), x.size), np.nan)
    for i, pts in enumerate(usable):
        xs = np.array([p[0] for p in pts])
        ys = np.array([p[1] for p in pts])
        at = np.searchsorted(xs, x, side="right") - 1
        values[i, at >= 0] = ys[at[at >= 0]]
    return x, values


def plot_experiment(
    out: str, groups: list[dict[str, Any]], title: str, plot_dir: str | None = None
) -> dict[str, Any]:
    """Draws DIR/plots/eval_return.png: per setting (groups: {'setting', 'curves',
    'run_dirs'}) the mean evaluation return with its 95% band, against env steps
    and against wall seconds. Returns {'path', 'series': [...]}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir = plot_dir or os.path.join(out, "plots")
    os.makedirs(plot_dir, exist_ok=True)
    path = os.path.join(plot_dir, "eval_return.png")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    series = []
    target = None
    for g in groups:
        for rd in g["run_dirs"]:
            target = target if target is not None else _target_return(rd)
        for ax, key, label in (
            (axes[0], "env_steps", "env steps"),
            (axes[1], "wall_seconds", "wall seconds"),
        ):
            x, values = on_grid(g["curves"], key)
            if not x.size:
                continue
            m, lo, hi = mean_band(values)
            (line,) = ax.plot(x, m, label=f"{g['setting']} (n={values.shape[0]})")
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
            ax.set_xlabel(label)
            series.append(f"{g['setting']} vs {label}")
    for ax in axes:
        if target is not None:
            ax.axhline(
                target, color="grey", linewidth=0.8, linestyle="--", label=f"target {target:g}"
            )
        ax.set_ylabel("evaluation return (mean, 95% CI band)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"path": path, "series": series}
