r"""Plots of a run: `python -m tools.plot RUN_DIR [--out=DIR]`.

Reads RUN_DIR/metrics/*.jsonl (while the run goes or after) and writes PNGs to
--out (default RUN_DIR/plots):
  eval_return.png   evaluation mean return against env steps and against wall seconds
  throughput.png    env steps/s, learner steps/s and samples per insert over time
  policy_lag.png    the learner's policy lag (p50, p90, max) and sample age over time
  band_returns.png  actors' episode return per epsilon band over time
Prints each file and the series it holds.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from absl import flags

_OUT = flags.DEFINE_string("out", None, "Where the PNGs go (default RUN_DIR/plots).")


def _rows(run_dir: str, name: str) -> list[dict[str, Any]]:
    from apex import read_jsonl

    path = os.path.join(run_dir, "metrics", f"{name}.jsonl")
    return read_jsonl(path) if os.path.exists(path) else []


def _clock_start(run_dir: str) -> float | None:
    """The run's clock (what summary.json's wall_seconds count from): the
    launch, so that a plot's seconds agree with the summary's."""
    for name in ("summary.json", "state.json"):
        try:
            with open(os.path.join(run_dir, name)) as f:
                value = json.load(f).get("clock_start_time")
        except (OSError, ValueError):
            continue
        if value is not None:
            return float(value)
    return None


def _target_return(run_dir: str) -> float | None:
    """The run's solve target (summary.json, else config.json when it is a number)."""
    for name, path in (
        ("summary.json", ("target_return",)),
        ("config.json", ("evaluation", "target_return")),
    ):
        try:
            with open(os.path.join(run_dir, name)) as f:
                value: Any = json.load(f)
            for key in path:
                value = value[key]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _series(rows: list[dict], key: str, t0: float) -> tuple[list[float], list[float]]:
    pts = [(r["time"] - t0, r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_run(run_dir: str, out_dir: str | None = None) -> dict[str, list[str]]:
    """Writes the PNGs; returns {path: [series labels]}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out_dir = out_dir or os.path.join(run_dir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    metrics_dir = os.path.join(run_dir, "metrics")
    names = sorted(f[:-6] for f in os.listdir(metrics_dir) if f.endswith(".jsonl"))
    data = {n: _rows(run_dir, n) for n in names}
    times = [r["time"] for rows in data.values() for r in rows[:1]]
    if not times:
        raise ValueError(f"no metrics rows in {metrics_dir}")
    t0 = _clock_start(run_dir) or min(times)
    coord = data.get("coordinator", [])
    written: dict[str, list[str]] = {}

    def save(fig, name: str, labels: list[str]) -> None:
        path = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        written[path] = labels

    # Evaluation return against env steps (each row's own evaluator/env_steps: the
    # run's env steps when its parameters were pulled; rows of older runs lack
    # it: the coordinator's count at the row's time) and against wall seconds.
    ev_rows = [r for r in data.get("evaluator", []) if r.get("evaluator/return_mean") is not None]
    ev_t, ev_r = _series(ev_rows, "evaluator/return_mean", t0)
    c_t, c_steps = _series(coord, "coordinator/env_steps", t0)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    fallback = np.interp(ev_t, c_t, c_steps) if c_t else np.zeros(len(ev_t))
    steps = [
        r["evaluator/env_steps"] if r.get("evaluator/env_steps") is not None else s
        for r, s in zip(ev_rows, fallback)
    ]
    best = np.maximum.accumulate(ev_r) if ev_r else []
    target = _target_return(run_dir)
    for a, x, label in ((a1, steps, "env steps"), (a2, ev_t, "wall seconds")):
        a.plot(x, ev_r, marker=".", label="evaluation return (mean)")
        a.plot(x, best, linestyle="--", label="best so far")
        if target is not None:
            a.axhline(target, color="grey", linewidth=0.8, label=f"target {target:g}")
        a.set_xlabel(label)
        a.set_ylabel("return")
        a.legend()
    save(fig, "eval_return.png", ["evaluation return vs env steps", "evaluation return vs wall s"])

    fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    labels = []
    for ax, key, label in zip(
        axes,
        (
            "coordinator/env_steps_per_second",
            "coordinator/learner_steps_per_second",
            "replay/samples_per_insert",
        ),
        ("env steps/s", "learner steps/s", "samples per insert"),
    ):
        t, v = _series(coord, key, t0)
        ax.plot(t, v, label=label)
        ax.set_ylabel(label)
        labels.append(label)
    axes[-1].set_xlabel("wall seconds")
    save(fig, "throughput.png", labels)

    learner = data.get("learner", [])
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    labels = []
    for q in ("p50", "p90", "max"):
        t, v = _series(learner, f"learner/policy_lag_{q}_steps", t0)
        a1.plot(t, v, label=f"policy lag {q}")
        labels.append(f"policy lag {q}")
    a1.set_ylabel("learner steps")
    a1.legend()
    for q in ("p50", "p90"):
        t, v = _series(learner, f"learner/sample_age_{q}_seconds", t0)
        a2.plot(t, v, label=f"sample age {q}")
        labels.append(f"sample age {q}")
    a2.set_ylabel("seconds")
    a2.set_xlabel("wall seconds")
    a2.legend()
    save(fig, "policy_lag.png", labels)

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = []
    actors = [n for n in names if n.startswith("actor_")]
    band_keys = sorted(
        {
            k
            for n in actors
            for r in data[n]
            for k in r
            if k.startswith("actor/episode_return_band_")
        }
    )
    from apex import band_labels, run_setting

    names_of_bands = band_labels(tuple(run_setting(run_dir, "logging.epsilon_bands")))
    for key in band_keys:
        pts = sorted(
            (r["time"] - t0, r[key]) for n in actors for r in data[n] if r.get(key) is not None
        )
        b = int(key.rsplit("_", 1)[1])
        label = names_of_bands[b] if b < len(names_of_bands) else f"band {b}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", label=label, alpha=0.6)
        labels.append(label)
    ax.set_xlabel("wall seconds")
    ax.set_ylabel("episode return (exploring)")
    if labels:
        ax.legend(title="epsilon band")
    save(fig, "band_returns.png", labels)

    inference = data.get("inference", [])
    if inference:  # actor.inference='central': the latency-batching tension over time
        fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
        labels = []
        for ax, keys, ylabel in (
            (a1, ("batch_observations_p50", "batch_observations_p90"), "observations per batch"),
            (
                a2,
                ("queue_wait_ms_p50", "latency_ms_p50", "latency_ms_p99"),
                "milliseconds",
            ),
            (a3, ("requests_per_second",), "requests/s"),
        ):
            for key in keys:
                t, v = _series(inference, f"inference/{key}", t0)
                ax.plot(t, v, label=key.replace("_", " "))
                labels.append(key.replace("_", " "))
            ax.set_ylabel(ylabel)
            ax.legend()
        a3.set_xlabel("wall seconds")
        save(fig, "inference.png", labels)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tools.plot RUN_DIR [--out=DIR]", file=sys.stderr)
        return 2
    if not os.path.isdir(os.path.join(argv[1], "metrics")):
        print(f"tools.plot: {argv[1]} has no metrics/ directory (not a run dir)", file=sys.stderr)
        return 2
    for path, labels in plot_run(argv[1], _OUT.value).items():
        print(f"{path}: {', '.join(labels) if labels else '(no data yet)'}")
    return 0


if __name__ == "__main__":
    from tools import run_tool

    run_tool(main)
