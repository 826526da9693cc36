"""What a run sent to Weights & Biases (offline) and MLflow (a file store), read
back through the libraries' own readers, for the tests' assertions."""

from __future__ import annotations

import glob
import json
import os
import warnings
from typing import Any


def wandb_offline(run_dir: str) -> list[dict[str, Any]]:
    """Each offline W&B run folder of a run directory (one per life), oldest
    first: its id, group, config, history rows and summary."""
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal import datastore

    def started(path: str) -> tuple[str, int]:
        # offline-run-<time>-<id>[-<n>]: W&B adds -<n> when a later life
        # starts within the same second, and "-" sorts before "/"
        folder = os.path.basename(os.path.dirname(path))
        stamp, _, rest = folder[len("offline-run-") :].partition("-")
        later = rest.rpartition("-")[2] if "-" in rest else "0"
        return stamp, int(later) if later.isdigit() else 0

    lives = []
    found = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    for path in sorted(found, key=started):
        store = datastore.DataStore()
        store.open_for_scan(path)
        life: dict[str, Any] = {"history": [], "summary": {}, "config": {}}
        while (data := store.scan_data()) is not None:
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                life["id"], life["group"] = record.run.run_id, record.run.run_group
                life["config"] = _items(record.run.config.update)
            elif kind == "history":
                life["history"].append(_items(record.history.item))
            elif kind == "summary":
                life["summary"].update(_items(record.summary.update))
        lives.append(life)
    return lives


def _items(items) -> dict[str, Any]:
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def mlflow_runs(uri: str) -> list[Any]:
    """Every MLflow run in a tracking store, all experiments."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        ids = [e.experiment_id for e in client.search_experiments()]
        return client.search_runs(ids)


def mlflow_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of one metric of one MLflow run, in logged order."""
    from mlflow.tracking import MlflowClient

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        history = MlflowClient(tracking_uri=uri).get_metric_history(run_id, key)
    return [(m.step, m.value) for m in history]
