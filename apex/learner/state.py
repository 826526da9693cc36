"""The learner's checkpoint state: the arrays SGD needs to continue exactly
(online and target weights, Adam's moments and step count, the learner step,
the max priority), the best evaluated parameters kept beside them, and the
checkpoints another thread asks for, written between two SGD steps."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from apex.learner.sgd import SGDStep
from apex.model_store import BestParams


def _groups(sgd: SGDStep) -> dict[str, list]:
    return {
        "online": list(sgd.online.weights),
        "target": list(sgd.target.weights),
        "adam_m": sgd.optimizer.m,
        "adam_v": sgd.optimizer.v,
    }


def sgd_state(sgd: SGDStep, steps: int, max_priority: float) -> dict[str, np.ndarray]:
    """steps, max_priority, adam_iterations and <group>/<i> for the groups
    online, target, adam_m, adam_v (the learner's checkpoint keys)."""
    state: dict[str, np.ndarray] = {"steps": np.asarray(steps, np.int64)}
    state["max_priority"] = np.asarray(max_priority, np.float64)
    state["adam_iterations"] = sgd.optimizer.iterations.numpy()
    for prefix, variables in _groups(sgd).items():
        for i, v in enumerate(variables):
            state[f"{prefix}/{i}"] = v.numpy()
    return state


def restore_sgd_state(sgd: SGDStep, state: dict[str, np.ndarray]) -> tuple[int, float]:
    """Assigns `sgd_state`'s arrays back; returns (steps, max_priority).
    ValueError names a missing or misshapen array."""
    for prefix, variables in _groups(sgd).items():
        count = sum(1 for k in state if k.startswith(prefix + "/"))
        if count != len(variables):
            raise ValueError(f"{prefix}: {count} arrays saved, the network has {len(variables)}")
        for i, v in enumerate(variables):
            value = state[f"{prefix}/{i}"]
            if tuple(value.shape) != tuple(v.shape):
                raise ValueError(f"{prefix}/{i}: saved shape {value.shape}, now {v.shape}")
            v.assign(value)
    sgd.optimizer.iterations.assign(int(state["adam_iterations"]))
    return int(state["steps"]), float(state.get("max_priority", 0.0))


class BestKeeper:
    """The best evaluated parameters (apex.model_store.BestParams), locked:
    the evaluator offers from its thread, checkpoints read from the SGD one."""

    def __init__(self) -> None:
        self._best = BestParams()
        self._lock = threading.Lock()

    def offer(
        self,
        return_mean: float,
        version: int,
        weights: list[np.ndarray],
        shapes: Sequence[tuple[int, ...]],
    ) -> bool:
        with self._lock:
            return self._best.offer(return_mean, version, weights, shapes=shapes)

    def best(self) -> tuple[float, int] | None:
        with self._lock:
            return self._best.best()

    def best_variables(self) -> tuple[int, list[np.ndarray]] | None:
        with self._lock:
            return self._best.best_variables()

    def get_state(self) -> dict[str, np.ndarray]:
        with self._lock:
            return self._best.get_state()

    def set_state(self, state: dict[str, np.ndarray], count: int) -> None:
        """Checkpoints written before best params existed have none: cleared then."""
        with self._lock:
            self._best.set_state(state, count=count)


class CheckpointRequests:
    """Checkpoints asked for while SGD runs on its own thread: `ask` waits for
    the SGD thread, which `serve`s them between two steps (weights are whole)."""

    def __init__(self) -> None:
        self._pending: list[tuple[str, threading.Event, list]] = []

    def ask(self, reason: str, timeout: float) -> str:
        """Waits at most `timeout` s for the checkpoint's path (re-raises its error)."""
        done, result = threading.Event(), []
        self._pending.append((reason, done, result))
        if not done.wait(timeout):
            raise TimeoutError(f"no checkpoint within {timeout} s (the learner is not stepping)")
        if isinstance(result[0], Exception):
            raise result[0]
        return result[0]

    def serve(self, save: Callable[[str], str]) -> None:
        """Writes every pending request with `save(reason) -> path`."""
        while self._pending:
            reason, done, result = self._pending.pop(0)
            try:
                result.append(save(reason))
            except Exception as err:  # noqa: BLE001 - handed to the caller
                result.append(err)
            done.set()
