"""Metrics: one JSONL file per component in RUN_DIR/metrics, flushed row by row.

Every row has `time` (unix seconds) and keys `<component>/<metric>`; every key
is documented in docs/metrics.md.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Any


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


class MetricsWriter:
    """Appends rows to RUN_DIR/metrics/<name>.jsonl (no-op when run_dir is empty)."""

    def __init__(self, run_dir: str | None, name: str):
        self.name = name
        self.path = os.path.join(run_dir, "metrics", f"{name}.jsonl") if run_dir else None
        self._lock = threading.Lock()
        self._file = None
        if self.path:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - closed in close()

    def write(self, row: dict[str, Any]) -> None:
        if self._file is None:
            return
        data = {"time": time.time(), **{k: _clean(v) for k, v in row.items()}}
        with self._lock:
            self._file.write(json.dumps(data) + "\n")

    def close(self) -> None:
        if self._file is not None:
            with self._lock:
                self._file.close()
                self._file = None


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
