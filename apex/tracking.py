"""Metrics where users already keep their runs: Weights & Biases and MLflow.

The launcher follows RUN_DIR/metrics/<component>.csv, the rows TensorBoard gets
with TensorBoard's step, and hands the new ones to each sink every few seconds.
The config goes as parameters when the run starts and summary.json as final
values when it ends. A key is TensorBoard's tag, under the component's name
when the tag does not start with it: `learner/loss`, `evaluator/return_mean`,
`actor_0/actor/env_steps`. Each component has its own step key
(`<component>/step`, TensorBoard's step for its rows).

RUN_DIR/sinks.json keeps the W&B run id, the MLflow run id and how far each
file was read: a resumed or restarted run goes on in the same W&B and MLflow
runs, from where they were. A sink that fails while the run goes (a network
error, a full disk) is said once and dropped; the run goes on without it.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import glob
import importlib.util
import io
import json
import netrc
import os
import re
import threading
import time
import warnings
from typing import Any

from apex.config import apply_override
from apex.errors import ConfigError
from apex.jsonio import write_json_atomic

SINKS_FILE = "sinks.json"
_EXTRAS = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}  # field: (module, extra)
_PERIOD_SECONDS = 2.0
_MLFLOW_BATCH = 1000  # metrics per log_batch call (MLflow's limit)
_MLFLOW_PARAMS = 100  # params per log_batch call (MLflow's limit)
_MLFLOW_KEY = re.compile(r"[^\w\-. /]")


def check_sinks(logging_config: Any) -> None:
    """ConfigError for a sink switched on whose package is not installed."""
    for field, (module, extra) in _EXTRAS.items():
        if getattr(logging_config, field) and importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"logging.{field}",
                True,
                f"False, or True with the {module} package installed "
                f"(.venv/bin/pip install -e '.[{extra}]')",
            )


def metric_key(component: str, tag: str) -> str:
    """The sink's key for TensorBoard's `tag` in `component`'s run."""
    return tag if tag.split("/", 1)[0] == component else f"{component}/{tag}"


def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level of dotted keys; lists stay values."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat(v, key + "."))
        else:
            out[key] = v
    return out


class MetricsTail:
    """New whole rows of RUN_DIR/metrics/*.csv since the offsets given.

    `rows()` yields (component, unix time, step, {tag: value}), one per metrics
    row, in file order; `offsets` says how far each file was read."""

    def __init__(self, run_dir: str, offsets: dict[str, int] | None = None):
        self._dir = os.path.join(run_dir, "metrics")
        self.offsets: dict[str, int] = dict(offsets or {})

    def rows(self):
        for path in sorted(glob.glob(os.path.join(self._dir, "*.csv"))):
            component = os.path.basename(path)[: -len(".csv")]
            start = self.offsets.get(component, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            whole = data[: data.rfind(b"\n") + 1]  # a row being written waits
            self.offsets[component] = start + len(whole)
            row: tuple[float, int] | None = None
            values: dict[str, float] = {}
            for line in csv.reader(io.StringIO(whole.decode())):
                if len(line) != 4 or line[0] == "time":
                    continue
                at, tag, value = (float(line[0]), int(line[1])), line[2], float(line[3])
                if at != row and values:
                    yield component, row[0], row[1], values
                    values = {}
                row = at
                values[tag] = value
            if values:
                yield component, row[0], row[1], values


def _wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


class _Wandb:
    name = "Weights & Biases"

    def __init__(self, run_dir: str, cfg: Any, params: dict, state: dict):
        import wandb

        mode = os.environ.get("WANDB_MODE") or ("online" if _wandb_credentials() else "offline")
        kwargs: dict[str, Any] = {"mode": mode} if not os.environ.get("WANDB_MODE") else {}
        if mode == "online":  # offline, a new life is a new folder with the same id
            kwargs["resume"] = "allow"
        self._run = wandb.init(
            project=cfg.wandb_project,
            dir=run_dir,
            id=state.get("wandb_id") or wandb.util.generate_id(),
            name=os.path.basename(run_dir),
            group=cfg.group or None,
            config=params,
            settings=wandb.Settings(console="off", silent=True),
            **kwargs,
        )
        state["wandb_id"] = self._run.id
        self.where = f"W&B run {self._run.id} ({'offline' if self._run.offline else 'online'})"
        self._components: set[str] = set()

    def log(self, component: str, at: float, step: int, values: dict[str, float]) -> None:
        step_key = f"{component}/step"
        if component not in self._components:
            self._components.add(component)
            self._run.define_metric(step_key, hidden=True)
            self._run.define_metric(f"{component}/*", step_metric=step_key)
        row = {metric_key(component, k): v for k, v in values.items()}
        self._run.log({**row, step_key: step})

    def finish(self, summary: dict[str, Any], exit_code: int) -> None:
        self._run.summary.update(
            {f"summary/{k}": v for k, v in flat(summary).items() if not isinstance(v, list)}
        )
        self._run.finish(exit_code=exit_code)


def _mlflow_client(uri: str):
    if uri.startswith("file:"):  # MLflow 3.13+ asks for this to keep a file store
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _mlflow_experiment(client: Any, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # noqa: BLE001 - another run created it first
        return client.get_experiment_by_name(name).experiment_id


class _Mlflow:
    name = "MLflow"

    def __init__(self, run_dir: str, cfg: Any, params: dict, state: dict):
        uri = cfg.mlflow_tracking_uri or "file:" + os.path.join(run_dir, "mlruns")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the file store's deprecation
            from mlflow.entities import Metric, Param

            self._client = _mlflow_client(uri)
            self._metric = Metric
            run_id = state.get("mlflow_run_id")
            if run_id:
                self._client.update_run(run_id, status="RUNNING")
            else:
                run_id = self._new_run(cfg, run_dir)
                state["mlflow_run_id"] = run_id
                items = sorted(flat(params).items())
                for i in range(0, len(items), _MLFLOW_PARAMS):
                    batch = [
                        Param(k, json.dumps(v)[:6000]) for k, v in items[i : i + _MLFLOW_PARAMS]
                    ]
                    self._client.log_batch(run_id, params=batch)
        self._run_id = run_id
        self.where = f"MLflow run {run_id} at {uri}"
        self._pending: list = []

    def _new_run(self, cfg: Any, run_dir: str) -> str:
        exp_id = _mlflow_experiment(self._client, cfg.mlflow_experiment)
        tags = {"apex.run_dir": run_dir}
        if cfg.group:
            tags["apex.group"] = cfg.group
        if cfg.mlflow_parent_run_id:
            tags["mlflow.parentRunId"] = cfg.mlflow_parent_run_id
        name = os.path.basename(run_dir)
        return self._client.create_run(exp_id, run_name=name, tags=tags).info.run_id

    def log(self, component: str, at: float, step: int, values: dict[str, float]) -> None:
        ms = int(at * 1000)
        for k, v in values.items():
            key = _MLFLOW_KEY.sub("_", metric_key(component, k))
            self._pending.append(self._metric(key, v, ms, step))
        if len(self._pending) >= _MLFLOW_BATCH:
            self.flush()

    def flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:_MLFLOW_BATCH], self._pending[_MLFLOW_BATCH:]
            self._client.log_batch(self._run_id, metrics=batch)

    def finish(self, summary: dict[str, Any], exit_code: int) -> None:
        self.flush()
        ms, values = int(time.time() * 1000), flat(summary)
        for k, v in values.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                key = _MLFLOW_KEY.sub("_", f"summary/{k}")
                self._pending.append(self._metric(key, float(v), ms, 0))
            elif isinstance(v, str) and len(v) < 5000:
                self._client.set_tag(self._run_id, f"apex.summary.{k}", v)
        self.flush()
        self._client.set_terminated(self._run_id, _mlflow_status(exit_code))


def group_overrides(
    config: Any, out: str, state: dict[str, Any], train_args: list[str] = ()
) -> dict[str, str]:
    """The overrides that group an experiment's trials (a grid in folder `out`)
    when `config` with the trials' `--config.F=V` flags switches a sink on: the
    W&B group and the MLflow parent run, made once (its id kept in `state`, a
    part of the experiment's record). {} when no sink is on."""
    config = copy.deepcopy(config)
    for arg in (a[len("--config.") :] for a in train_args if a.startswith("--config.")):
        apply_override(config, *arg.split("=", 1))
    cfg = config.logging
    if not (cfg.wandb or cfg.mlflow):
        return {}
    out = os.path.abspath(out)
    overrides = {"logging.group": cfg.group or os.path.basename(out)}
    if cfg.mlflow:
        uri = cfg.mlflow_tracking_uri or "file:" + os.path.join(out, "mlruns")
        if not state.get("mlflow_parent_run_id"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                client = _mlflow_client(uri)
                exp_id = _mlflow_experiment(client, cfg.mlflow_experiment)
                tags = {"apex.experiment": out, "apex.group": overrides["logging.group"]}
                run = client.create_run(exp_id, run_name=os.path.basename(out), tags=tags)
            state["mlflow_parent_run_id"] = run.info.run_id
        overrides["logging.mlflow_tracking_uri"] = uri
        overrides["logging.mlflow_parent_run_id"] = state["mlflow_parent_run_id"]
    return overrides


def end_group(overrides: dict[str, str], exit_code: int) -> None:
    """Ends the experiment's MLflow parent run, if it has one, after every trial
    finished (exit 0) or some failed (1); a stopped experiment's stays open."""
    run_id = overrides.get("logging.mlflow_parent_run_id")
    if run_id and exit_code in (0, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            client = _mlflow_client(overrides["logging.mlflow_tracking_uri"])
            client.set_terminated(run_id, _mlflow_status(exit_code))


class MetricSinks:
    """The sinks a config switches on, fed from the run's metrics files by a thread."""

    def __init__(self, run_dir: str, sinks: list, state: dict):
        self._run_dir = run_dir
        self._sinks = sinks
        self._state = state
        self._tail = MetricsTail(run_dir, state.get("offsets"))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="apex-sinks", daemon=True)

    @classmethod
    def start(cls, config: Any, run_dir: str) -> MetricSinks | None:
        """Starts the sinks `config.logging` switches on (None when none is);
        a sink that cannot start is said and left out."""
        cfg = config.logging
        if not (cfg.wandb or cfg.mlflow):
            return None
        state = _read_state(run_dir)
        with open(os.path.join(run_dir, "config.json")) as f:
            params = json.load(f)
        sinks = []
        for on, kind in ((cfg.wandb, _Wandb), (cfg.mlflow, _Mlflow)):
            if not on:
                continue
            try:
                sink = kind(run_dir, cfg, params, state)
            except Exception as err:  # noqa: BLE001 - the run goes on without it
                print(
                    f"[apex] metrics to {kind.name}: could not start ({err}); the run goes on without it",
                    flush=True,
                )
                continue
            print(f"[apex] metrics to {sink.where}", flush=True)
            sinks.append(sink)
        self = cls(run_dir, sinks, state)
        self._save()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(_PERIOD_SECONDS):
            self.flush()

    def flush(self) -> None:
        """Hands every new row to every sink."""
        with self._lock:
            rows = list(self._tail.rows())
            for sink in list(self._sinks):
                self._guard(sink, _feed, sink, rows)
            self._state["offsets"] = self._tail.offsets
            self._save()

    def close(self, summary: dict[str, Any] | None, exit_code: int) -> None:
        """The last rows, the summary as final values, the sinks' runs ended
        with the launcher's exit code (MLflow: 0 FINISHED, 130/143 KILLED, else
        FAILED)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.flush()
        with self._lock:
            for sink in list(self._sinks):
                self._guard(sink, sink.finish, summary or {}, exit_code)

    def _guard(self, sink: Any, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - one sink's failure never stops the run
            self._sinks.remove(sink)
            print(
                f"[apex] metrics to {sink.name} failed ({err}); the run goes on without it",
                flush=True,
            )

    def _save(self) -> None:
        with contextlib.suppress(OSError):  # a full disk: the offsets are saved next time
            write_json_atomic(os.path.join(self._run_dir, SINKS_FILE), self._state)


def _mlflow_status(exit_code: int) -> str:
    return {0: "FINISHED", 130: "KILLED", 143: "KILLED"}.get(exit_code, "FAILED")


def _feed(sink: Any, rows: list) -> None:
    for component, at, step, values in rows:
        sink.log(component, at, step, values)
    if hasattr(sink, "flush"):
        sink.flush()


def _read_state(run_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(run_dir, SINKS_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
