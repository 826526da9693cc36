"""TensorBoard's HParams dashboard for an experiment: each trial's settings and
final figures, so that `tensorboard --logdir DIR` compares the trials.

Each trial that ends gets RUN_DIR/tensorboard/hparams/ (its hyperparameters as
an HParams session, and one scalar per final figure of its summary.json); the
experiment's folder gets the dashboard's config (every grid field with its
values, every metric). A setting is one HParams trial: its seeds are the
sessions of one group, which the dashboard aggregates in DIR/tensorboard-hparams/. Written with TensorBoard's
own protos and event writer (no TensorFlow session or graph).
"""

from __future__ import annotations

import os
import time
from typing import Any

# summary.json figure -> (HParams metric tag, display name)
METRICS = {
    "eval_return_mean": ("experiment/final_eval_return", "final eval return"),
    "best_eval_return_mean": ("experiment/best_eval_return", "best eval return"),
    "solved_at_env_steps": ("experiment/env_steps_to_target", "env steps to target"),
    "solved_at_wall_seconds": ("experiment/wall_seconds_to_target", "wall s to target"),
    "env_steps": ("experiment/env_steps", "env steps"),
    "wall_seconds": ("experiment/wall_seconds", "wall seconds"),
}
HPARAMS_SUBDIR = os.path.join("tensorboard", "hparams")
CONFIG_DIR = "tensorboard-hparams"


def typed(text: str) -> Any:
    """An override's text as the bool, int, float or str HParams takes."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def trial_hparams(trial: dict[str, Any]) -> dict[str, Any]:
    return {k: typed(v) for k, v in trial["overrides"].items()}


def _writer(folder: str):
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):  # a rerun's trial replaces its session
        if name.startswith("events.out.tfevents."):
            os.remove(os.path.join(folder, name))
    return EventFileWriter(folder)


def write_trial(run_dir: str, trial: dict[str, Any], summary: dict[str, Any]) -> str:
    """Writes the trial's HParams session and final figures; returns the folder."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.hparams import summary_v2

    folder = os.path.join(run_dir, HPARAMS_SUBDIR)
    writer = _writer(folder)
    now = time.time()
    # The setting is the HParams trial: its seeds are one session group (the
    # dashboard aggregates them); each seed is a session named by its run folder.
    session = summary_v2.hparams_pb(trial_hparams(trial), trial_id=trial["setting"])
    writer.add_event(event_pb2.Event(wall_time=now, step=0, summary=session))
    step = int(summary.get("env_steps") or 0)
    values = [
        summary_pb2.Summary.Value(tag=tag, simple_value=float(summary[key]))
        for key, (tag, _) in METRICS.items()
        if isinstance(summary.get(key), (int, float))
    ]
    writer.add_event(
        event_pb2.Event(wall_time=now, step=step, summary=summary_pb2.Summary(value=values))
    )
    writer.close()
    return folder


def write_config(out: str, grid: dict[str, list[str]]) -> str:
    """Writes the dashboard's config (the grid's fields and values, the metrics)."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.hparams import api as hp
    from tensorboard.plugins.hparams import summary_v2

    hparams = []
    for key, values in grid.items():
        vals = [typed(v) for v in values]
        if len({type(v) for v in vals}) == 1:
            hparams.append(hp.HParam(key, hp.Discrete(vals)))
        else:
            hparams.append(hp.HParam(key, hp.Discrete([str(v) for v in vals])))
    metrics = [hp.Metric(tag, display_name=name) for tag, name in METRICS.values()]
    folder = os.path.join(out, CONFIG_DIR)
    writer = _writer(folder)
    pb = summary_v2.hparams_config_pb(hparams=hparams, metrics=metrics)
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=0, summary=pb))
    writer.close()
    return folder
