"""The coordinator's hang doctor: runs apex.doctor on the beats and the replay
figures, prints each new finding and keeps RUN_DIR/doctor.log (which every run
has, findings or not)."""

from __future__ import annotations

import os
import time
from typing import Any

from apex.config import LoggingConfig
from apex.doctor import Finding, diagnose
from apex.full_disk import FULL_DISK

REPEAT_SECONDS = 60.0  # a finding still there is logged again after this long


class HealthLog:
    """The findings of the last check, and the lines logged so far.

    Args:
      run_dir: where doctor.log goes ('' : nowhere).
      logging: the config's logging section (stall_seconds: how long a state
        counts as a stall).
      out: where finding lines are printed.
    """

    def __init__(self, run_dir: str, logging: LoggingConfig, out: Any):
        self._run_dir = run_dir
        self._logging = logging
        self._out = out
        self._reported: dict[tuple[str, str], float] = {}
        self.lines = 0
        self.findings: list[Finding] = []

    def check(
        self,
        beats: dict[str, dict[str, Any]],
        table: dict[str, Any] | None,
        shard_tables: dict[str, Any] | None,
        now: float,
    ) -> list[Finding]:
        """Diagnoses and logs each new finding (again every REPEAT_SECONDS)."""
        self.findings = diagnose(
            beats, table, self._logging.stall_seconds, now, shard_tables=shard_tables
        )
        active = set()
        for f in self.findings:
            key = (f.reason, f.node)
            active.add(key)
            if now - self._reported.get(key, -1e18) >= REPEAT_SECONDS:
                self._reported[key] = now
                line = f"[apex doctor] {f}"
                print(line, file=self._out, flush=True)
                self.log(line)
        self._reported = {k: v for k, v in self._reported.items() if k in active}
        return self.findings

    def log(self, line: str) -> None:
        """Appends to RUN_DIR/doctor.log."""
        self.lines += 1
        if self._run_dir:
            FULL_DISK.guard(
                "doctor.log", self._append, f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}"
            )

    def _append(self, line: str) -> None:
        with open(os.path.join(self._run_dir, "doctor.log"), "a") as log:
            log.write(f"{line}\n")

    def close(self) -> None:
        """A run without findings says so in doctor.log."""
        if self.lines == 0:
            self.log(
                "[apex doctor] no stall found in this run "
                f"(logging.stall_seconds={self._logging.stall_seconds:g})"
            )
