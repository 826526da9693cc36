"""Metrics: per component, three files in the run directory, written row by row.

  RUN_DIR/metrics/<name>.jsonl       one JSON object per row (what tools read)
  RUN_DIR/metrics/<name>.csv         long format: time,step,key,value
  RUN_DIR/tensorboard/<name>/        TensorBoard event files (scalars)

Both writers are Acme loggers (`acme.utils.loggers.Logger`: `write(row)`,
`close()`), so Acme's logger filters and aggregators wrap them as they are.

Every row has `time` (unix seconds) and keys `<component>/<metric>`; every key
is documented in docs/metrics.md. Files are flushed after every row, so they
can be read (and TensorBoard pointed at RUN_DIR/tensorboard) while the run goes.
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import socket
import threading
import time
from typing import Any

from acme.utils.loggers import base as acme_loggers

from apex.full_disk import FULL_DISK


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


class _AppendFile:
    """A file appended to in whole records: a record a full disk cuts short is
    cut off again (the file keeps only whole rows) and the error raised."""

    def __init__(self, path: str):
        self._f = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in close()

    def write(self, data: bytes | str) -> None:
        data = data.encode() if isinstance(data, str) else data
        start = os.fstat(self._f.fileno()).st_size
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += self._f.write(view[done:]) or 0
        except OSError:
            if done:
                try:
                    os.ftruncate(self._f.fileno(), start)
                except OSError:
                    pass
            raise

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._f.close()

    @property
    def closed(self) -> bool:
        return self._f.closed


class MetricsWriter(acme_loggers.Logger):
    """Appends rows for component `name` (no-op when run_dir is empty).

    A full disk (apex.full_disk) drops rows, said once, until space returns;
    the files keep only whole rows.

    Args:
      run_dir: the run directory ('' or None: write nothing).
      name: the component, e.g. 'learner' or 'actor_0'.
      step_key: the row key used as TensorBoard's and the CSV's step (e.g.
        'learner/steps'); rows without it reuse the last step seen.
      tensorboard: also write TensorBoard event files.
    """

    def __init__(
        self,
        run_dir: str | None,
        name: str,
        step_key: str | None = None,
        tensorboard: bool = True,
    ):
        self.name = name
        self.path = os.path.join(run_dir, "metrics", f"{name}.jsonl") if run_dir else None
        self._step_key = step_key
        self._step = 0
        self._lock = threading.Lock()
        self._file: _AppendFile | None = None
        self._csv_file: _AppendFile | None = None
        self._events_dir = os.path.join(run_dir, "tensorboard", name) if tensorboard else None
        self._events: Any = None  # a RecordWriter on the events file, opened on first use
        if self.path:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._file = _AppendFile(self.path)
            csv_path = os.path.join(run_dir, "metrics", f"{name}.csv")
            new = not os.path.exists(csv_path)
            self._csv_file = _AppendFile(csv_path)
            if new:
                self._csv_file.write(_csv_text([["time", "step", "key", "value"]]))

    def write(self, row: dict[str, Any]) -> None:
        if self._file is None:
            return
        now = float(row.get("time") or time.time())  # a remote node's row keeps its time
        data = {"time": now, **{k: _clean(v) for k, v in row.items() if k != "time"}}
        if self._step_key is not None and isinstance(data.get(self._step_key), numbers.Number):
            self._step = int(data[self._step_key])
        scalars = [
            (k, float(v))
            for k, v in data.items()
            if k != "time" and isinstance(v, numbers.Number) and not isinstance(v, bool)
        ]
        with self._lock:
            if self._file is None:
                return
            FULL_DISK.guard(f"{self.name} metrics", self._write_rows, data, scalars, now)
            if self._events_dir is not None and scalars:
                FULL_DISK.guard(f"{self.name} TensorBoard events", self._write_event, now, scalars)

    def _write_rows(self, data: dict[str, Any], scalars: list, now: float) -> None:
        self._file.write(json.dumps(data) + "\n")
        self._csv_file.write(
            _csv_text([[f"{now:.3f}", self._step, k, repr(v)] for k, v in scalars])
        )

    def _write_event(self, now: float, scalars: list[tuple[str, float]]) -> None:
        if self._events is None:  # a new events file (after a full disk: another one)
            from tensorboard.summary.writer.record_writer import RecordWriter

            os.makedirs(self._events_dir, exist_ok=True)
            name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}"
            n = len([f for f in os.listdir(self._events_dir) if f.startswith(name)])
            self._events = RecordWriter(_AppendFile(os.path.join(self._events_dir, f"{name}.{n}")))
            self._events.write(_version_event(now).SerializeToString())
        self._events.write(_event(now, self._step, scalars).SerializeToString())

    def close(self) -> None:
        with self._lock:
            for f in (self._file, self._csv_file, self._events):
                if f is not None:
                    f.close()
            self._file = self._csv_file = self._events = None


def _csv_text(rows: list[list[Any]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


class RemoteMetrics(acme_loggers.Logger):
    """The metrics rows of a node that does not write the run directory (an actor,
    possibly on another host): each row goes to the coordinator's
    `write_metrics` RPC (courier futures: never blocks the node), which writes
    it with a MetricsWriter of its own.

    Args:
      coordinator: a courier client of the coordinator (or the Coordinator itself).
      name: the component, e.g. 'actor_0'.
      step_key: as MetricsWriter's.
    """

    def __init__(self, coordinator: Any, name: str, step_key: str | None = None):
        self.name = name
        self._step_key = step_key
        futures = getattr(coordinator, "futures", None)
        self._send = (futures or coordinator).write_metrics
        self.rows_sent = 0

    def write(self, row: dict[str, Any]) -> None:
        data = {"time": time.time(), **{k: _clean(v) for k, v in row.items()}}
        try:
            self._send(self.name, self._step_key, data)
            self.rows_sent += 1
        except Exception:  # noqa: BLE001 - metrics are best effort; the node goes on
            pass

    def close(self) -> None:
        pass


def _version_event(wall_time: float):
    from tensorboard.compat.proto.event_pb2 import Event

    return Event(wall_time=wall_time, file_version="brain.Event:2")


def _event(wall_time: float, step: int, scalars: list[tuple[str, float]]):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    values = [Summary.Value(tag=k, simple_value=v) for k, v in scalars]
    return Event(wall_time=wall_time, step=step, summary=Summary(value=values))


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """Reads a metrics file (skipping a torn last line)."""
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows
