"""The model store: versioned parameters pushed once, served to many.

The learner pushes its parameters to a `ModelStore` once per version (its SGD
step count); actors and the evaluator pull the newest version from the store
(`get_variables`, the same (version, weights, info) triple as the learner's
`apex.roles.VariableSource`, so an `apex.variables.VariableClient` can pull
from either). N actors then cost the learner one push per version instead of
N pulls. The store keeps the newest `keep_last` versions, so the evaluator can
fetch the exact version it evaluated (`get_version`) and report the result
(`offer_best`); the store keeps the best evaluated parameters (`best`,
`best_variables`) by the rule of `BestParams`, which the learner shares.

Thread-safe: a courier server calls the methods from many threads. Stored
arrays are copied at push time and made read-only, so they are returned by
reference (no copy under the lock); callers must not rely on writing to them.

Checkpoints (`get_state`/`set_state`) hold the best record in the learner's
own keys ("best_return_mean", "best_version", "best/<i>") and the newest
version as "store_version", "store/<i>" (and its info as "store_info/<name>"),
so a resumed store serves at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

Variables = tuple[int, list[np.ndarray], dict[str, float]]

# Checkpoint keys. The best record's keys are the learner's (apex/learner/state.py
# get_state/set_state), so one checkpoint format holds either.
BEST_RETURN_KEY = "best_return_mean"
BEST_VERSION_KEY = "best_version"
BEST_PREFIX = "best/"
STORE_VERSION_KEY = "store_version"
STORE_PREFIX = "store/"
STORE_INFO_PREFIX = "store_info/"


class NoParameters(RuntimeError):
    """No parameters yet (nothing pushed to the store, nothing set on the inference
    server: the learner is starting); ask again later."""


def frozen(weights: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Read-only copies of `weights` (safe to hand out by reference)."""
    out = []
    for w in weights:
        a = np.array(w)
        a.setflags(write=False)
        out.append(a)
    return out


def shapes_of(weights: Sequence[np.ndarray]) -> list[tuple[int, ...]]:
    return [tuple(np.shape(w)) for w in weights]


class BestRecord(NamedTuple):
    return_mean: float
    version: int
    weights: list[np.ndarray]


class BestParams:
    """The best evaluated parameters and the rule that decides them.

    An offer is kept if its evaluation mean is at least the best so far (a
    tie keeps the later offer: evaluations come in version order, so the
    newer, more trained one), as `apex.learner.Learner.offer_best` decides.

    Not locked: its owner guards it with its own lock (the learner's best
    lock, the model store's lock).
    """

    def __init__(self) -> None:
        self._record: BestRecord | None = None

    def offer(
        self,
        return_mean: float,
        version: int,
        weights: Sequence[np.ndarray],
        shapes: Sequence[tuple[int, ...]] | None = None,
        copy: bool = True,
    ) -> bool:
        """Keeps (`return_mean`, `version`, `weights`) if at least as good as the
        best so far; returns whether it was kept.

        Args:
          shapes: the expected weight shapes (ValueError naming them otherwise);
            None: not checked.
          copy: False when `weights` are already read-only copies (e.g. a model
            store's held version) and can be kept by reference.
        """
        if shapes is not None and shapes_of(weights) != [tuple(s) for s in shapes]:
            raise ValueError(
                f"offer_best: weights of shapes {list(map(tuple, shapes))} expected, "
                f"got {shapes_of(weights)}"
            )
        if self._record is not None and return_mean < self._record.return_mean:
            return False
        kept = frozen(weights) if copy else list(weights)
        self._record = BestRecord(float(return_mean), int(version), kept)
        return True

    def record(self) -> BestRecord | None:
        """(return mean, version, weights) of the best, None before any."""
        return self._record

    def best(self) -> tuple[float, int] | None:
        """(return mean, version) of the best, None before any."""
        r = self._record
        return None if r is None else (r.return_mean, r.version)

    def best_variables(self) -> tuple[int, list[np.ndarray]] | None:
        """(version, weights) of the best, None before any."""
        r = self._record
        return None if r is None else (r.version, list(r.weights))

    def clear(self) -> None:
        self._record = None

    def get_state(self) -> dict[str, np.ndarray]:
        """The best record in the learner's checkpoint keys; {} before any."""
        r = self._record
        if r is None:
            return {}
        state = {
            BEST_RETURN_KEY: np.asarray(r.return_mean, np.float64),
            BEST_VERSION_KEY: np.asarray(r.version, np.int64),
        }
        for i, w in enumerate(r.weights):
            state[f"{BEST_PREFIX}{i}"] = np.asarray(w)
        return state

    def set_state(self, state: dict[str, np.ndarray], count: int | None = None) -> None:
        """Restores `get_state()`'s output (`count` arrays; None: as many as
        saved). A state without the best keys (an older checkpoint) leaves no best."""
        self._record = None
        if BEST_VERSION_KEY not in state:
            return
        if count is None:
            count = _count(state, BEST_PREFIX)
        self._record = BestRecord(
            float(state[BEST_RETURN_KEY]),
            int(state[BEST_VERSION_KEY]),
            frozen([state[f"{BEST_PREFIX}{i}"] for i in range(count)]),
        )


def _count(state: dict[str, np.ndarray], prefix: str) -> int:
    """How many arrays "<prefix><i>" (i = 0, 1, ...) `state` holds."""
    n = 0
    while f"{prefix}{n}" in state:
        n += 1
    return n


class ModelStore:
    """Holds the newest `keep_last` versions of the parameters and the best one.

    Args:
      keep_last: how many versions to hold (the oldest is dropped first).
      clock: seconds (for `pulls_per_second`; injectable for tests).
    """

    def __init__(self, keep_last: int = 3, clock: Callable[[], float] = time.time):
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last}")
        self.keep_last = int(keep_last)
        self._clock = clock
        self._lock = threading.Lock()
        # Oldest first; each (version, read-only weights, info).
        self._held: list[Variables] = []
        self._best = BestParams()
        self._last_eval: tuple[float, int] | None = None
        self._pushes = 0
        self._pulls = 0
        self._rate_mark = (clock(), 0)  # (time, pulls) at the previous stats()

    # ------------------------------------------------------------ versions
    def push(
        self, version: int, weights: Sequence[np.ndarray], info: dict[str, float] | None = None
    ) -> bool:
        """Stores `version` (the learner's SGD step count); False (ignored) if a
        version at least as new is held already (a late or duplicate push)."""
        version = int(version)
        with self._lock:
            if self._held and version <= self._held[-1][0]:
                return False
        kept = frozen(weights)  # copied outside the lock
        with self._lock:
            if self._held and version <= self._held[-1][0]:  # a newer push won the race
                return False
            self._held.append((version, kept, dict(info or {})))
            del self._held[: -self.keep_last]
            self._pushes += 1
        return True

    def get_variables(self) -> Variables:
        """(version, weights, info) of the newest version (counts a pull);
        NoParameters before the first push."""
        with self._lock:
            if not self._held:
                raise NoParameters("the model store has no parameters yet (nothing was pushed)")
            version, weights, info = self._held[-1]
            self._pulls += 1
        return version, list(weights), dict(info)

    def get_version(self, version: int) -> Variables:
        """(version, weights, info) of one held version; KeyError naming the
        held versions otherwise."""
        with self._lock:
            found = self._find(int(version))
        return found[0], list(found[1]), dict(found[2])

    def _find(self, version: int) -> Variables:
        for held in self._held:
            if held[0] == version:
                return held
        held_versions = [v for v, _, _ in self._held]
        raise KeyError(f"version {version} is not held; the model store holds {held_versions}")

    def versions(self) -> list[int]:
        """The held versions, oldest first."""
        with self._lock:
            return [v for v, _, _ in self._held]

    def newest_version(self) -> int | None:
        with self._lock:
            return self._held[-1][0] if self._held else None

    # --------------------------------------------------------- best params
    def offer_best(
        self, return_mean: float, version: int, weights: Sequence[np.ndarray] | None = None
    ) -> bool:
        """The evaluator's result for `version`: kept as the best if at least as
        good as the best so far (`BestParams`); returns whether it was kept.

        `weights` None: those of the held `version` (KeyError if no longer held).
        Given weights must have the held versions' shapes (ValueError otherwise).
        Records (return_mean, version) as the last evaluation, kept or not
        (not when it raises).
        """
        return_mean, version = float(return_mean), int(version)
        kept = None if weights is None else frozen(weights)  # copied outside the lock
        with self._lock:
            if kept is None:
                try:
                    kept = self._find(version)[1]
                except KeyError as e:
                    raise KeyError(
                        f"offer_best: no weights given and {e.args[0]}; pass the weights"
                    ) from None
                shapes = None
            else:
                shapes = shapes_of(self._held[-1][1]) if self._held else None
            accepted = self._best.offer(return_mean, version, kept, shapes=shapes, copy=False)
            self._last_eval = (return_mean, version)
        return accepted

    def best(self) -> tuple[float, int] | None:
        """(return mean, version) of the best evaluated parameters, None before any."""
        with self._lock:
            return self._best.best()

    def best_variables(self) -> tuple[int, list[np.ndarray]] | None:
        """(version, weights) of the best evaluated parameters, None before any."""
        with self._lock:
            return self._best.best_variables()

    def last_eval(self) -> tuple[float, int] | None:
        """(return mean, version) of the last evaluation offered, None before any."""
        with self._lock:
            return self._last_eval

    # -------------------------------------------------------------- metrics
    def stats(self) -> dict[str, float]:
        """A metrics row; `pulls_per_second` counts since the previous call."""
        now = self._clock()
        with self._lock:
            held = list(self._held)
            record = self._best.record()
            pushes, pulls = self._pushes, self._pulls
            mark_time, mark_pulls = self._rate_mark
            self._rate_mark = (now, pulls)
        seconds = now - mark_time
        arrays = {id(w): w for _, weights, _ in held for w in weights}
        if record is not None:
            arrays.update((id(w), w) for w in record.weights)
        row = {
            "model_store/newest_version": float(held[-1][0]) if held else -1.0,
            "model_store/versions_held": float(len(held)),
            "model_store/pushes": float(pushes),
            "model_store/pulls": float(pulls),
            "model_store/pulls_per_second": (pulls - mark_pulls) / seconds if seconds > 0 else 0.0,
            "model_store/bytes_held": float(sum(w.nbytes for w in arrays.values())),
        }
        if record is not None:
            row["model_store/best_version"] = float(record.version)
            row["model_store/best_return"] = float(record.return_mean)
        return row

    # ---------------------------------------------------------- checkpoints
    def get_state(self) -> dict[str, np.ndarray]:
        """The best record (the learner's keys) and the newest version."""
        with self._lock:
            state = self._best.get_state()
            newest = self._held[-1] if self._held else None
        if newest is not None:
            version, weights, info = newest
            state[STORE_VERSION_KEY] = np.asarray(version, np.int64)
            for i, w in enumerate(weights):
                state[f"{STORE_PREFIX}{i}"] = w
            for name, value in info.items():
                if isinstance(value, (int, float, np.number)):
                    state[f"{STORE_INFO_PREFIX}{name}"] = np.asarray(value, np.float64)
        return state

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Restores `get_state()`'s output: the best (none if the state has no
        best keys) and the newest version (none held if the state has none)."""
        best = BestParams()
        best.set_state(state)
        held: list[Variables] = []
        if STORE_VERSION_KEY in state:
            weights = frozen(
                [state[f"{STORE_PREFIX}{i}"] for i in range(_count(state, STORE_PREFIX))]
            )
            info = {
                k[len(STORE_INFO_PREFIX) :]: float(v)
                for k, v in state.items()
                if k.startswith(STORE_INFO_PREFIX)
            }
            held.append((int(state[STORE_VERSION_KEY]), weights, info))
        with self._lock:
            self._best = best
            self._held = held
