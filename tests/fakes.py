"""Fakes of apex's roles (apex.roles) for tests: one definition each, shared.

FakeVariableSource   a VariableSource serving fixed weights, with a fixed
                     version or one that counts the calls (a training
                     learner), optionally holding calls until released
RecordingWriter      an ItemWriter that keeps every batch it is given
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


class FakeVariableSource:
    """A VariableSource (apex.roles): get_variables() -> (version, weights, info).

    Args:
      weights: the weights every call answers with.
      version: the version every call answers with; None: the number of calls
        so far (1, 2, ...), as a learner that trained between two pulls.
      info: the info dict every call answers with (e.g. {"max_priority": 9.0}).
      hold_after: with `release` set, calls after the first `hold_after` wait
        until `release` is set (a learner that is slow to answer).

    Example:
        >>> src = FakeVariableSource([np.zeros(2)], version=None)
        >>> src.get_variables()[0], src.get_variables()[0], src.calls
        (1, 2, 2)
    """

    def __init__(
        self,
        weights: list[np.ndarray],
        version: int | None = 0,
        info: dict[str, float] | None = None,
        hold_after: int | None = None,
    ):
        self.weights = weights
        self.version = version
        self.info = dict(info or {})
        self.hold_after = hold_after
        self.release = threading.Event()
        self.calls = 0
        self.held = threading.Event()  # set while a call waits for `release`
        self._lock = threading.Lock()

    def get_variables(self) -> tuple[int, list[np.ndarray], dict[str, float]]:
        with self._lock:
            self.calls += 1
            call = self.calls
        if self.hold_after is not None and call > self.hold_after:
            self.held.set()
            if not self.release.wait(timeout=60):  # a hang guard: a passing test releases it
                raise TimeoutError("FakeVariableSource: nobody set release")
            self.held.clear()
        version = call if self.version is None else self.version
        return version, self.weights, dict(self.info)


class RecordingWriter:
    """An ItemWriter (apex.roles) that keeps what it is given.

    `batches`: [(batch, priorities)] in call order; `items()`: the same as one
    ([(row dict, priority)]) per item.
    """

    def __init__(self):
        self.batches: list[tuple[dict[str, np.ndarray], np.ndarray]] = []
        self.items_written = 0
        self.seconds_writing = 0.0
        self.can_store_frames = False  # takes whole items only
        self.frames_written = 0
        self.frame_bytes = 0

    def write(self, batch: dict[str, np.ndarray], priorities: Any) -> None:
        priorities = np.asarray(priorities)
        self.batches.append((batch, priorities))
        self.items_written += len(priorities)

    def items(self) -> list[tuple[dict[str, Any], float]]:
        return [
            ({k: v[i] for k, v in batch.items()}, float(prios[i]))
            for batch, prios in self.batches
            for i in range(len(prios))
        ]

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float = 3.0) -> bool:
        return True

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
