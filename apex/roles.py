"""The contracts between apex's roles, as typing Protocols.

A role talks to another through one of these, whether the other is in the
same process (tests, local_mt) or behind a Courier client on another host.
Courier clients also offer every method under `.futures` (non-blocking);
where a role uses that, the protocol says so.

    actor ---- VariableSource.get_variables ----> learner (variable source)
    actor ---- ItemWriter.write ----------------> replay (the trajectory queue)
    actor, learner, evaluator -- Reporter ------> coordinator (control plane)
    any node -- MetricsSink.write --------------> run directory (directly or via the coordinator)
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

Variables = tuple[int, list[np.ndarray], dict[str, float]]

ACTOR_PREFIX = "actor_"
"""Node names: actor i is `actor_{i}`; a replay shard in a process of its own
is `replay_{i}` (the heartbeats', metrics' and summary's names)."""
SHARD_PREFIX = "replay_"


@runtime_checkable
class VariableSource(Protocol):
    """Serves versioned parameters: (version, weights, info); version counts SGD
    steps; info carries e.g. `max_priority` (for actors' initial priorities)."""

    def get_variables(self) -> Variables: ...


@runtime_checkable
class ItemWriter(Protocol):
    """Writes an actor's items (one replay item per row of `batch`) with their
    priorities; a context manager that flushes on exit.

    A writer that can store each frame once (apex.replay.writer: can_store_frames)
    also offers the agent's start_frames / append_frames (the actor then passes
    frame positions in place of observations); frames_written and frame_bytes
    count what it stored that way (0 otherwise)."""

    items_written: int
    seconds_writing: float
    can_store_frames: bool
    frames_written: int
    frame_bytes: int

    def write(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None: ...

    def flush(self, timeout: float | None = None) -> bool: ...

    def close(self, timeout: float = 3.0) -> bool: ...

    def __enter__(self) -> ItemWriter: ...

    def __exit__(self, *exc: Any) -> None: ...


@runtime_checkable
class MetricsSink(Protocol):
    """Takes a component's metrics rows ({'<component>/<metric>': value})."""

    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Reporter(Protocol):
    """The coordinator as the other nodes see it: every call is an RPC with a
    bounded timeout (apex.coordination.Coordinator implements it)."""

    def heartbeat(self, beat: dict[str, Any]) -> None: ...

    def report_actor(
        self,
        actor_id: int,
        env_steps: int,
        episodes: int,
        returns: list[float],
        start_time: float | None = None,
    ) -> None: ...

    def report_learner(
        self, steps: int, first_step_time: float | None, row: dict[str, Any]
    ) -> dict[str, Any]: ...

    def report_eval(
        self,
        return_mean: float,
        version: int,
        returns: list[float],
        env_steps: int | None = None,
    ) -> bool:
        """An evaluation of parameters `version`, pulled at `env_steps` env steps;
        False: refused (the stop is decided; the evaluator writes no row for it)."""
        ...

    def get_counts(self) -> dict[str, Any]: ...

    def report_failure(self, node: str, message: str) -> None:
        """`node` failed: '<Type>: <message>' of the exception it died of, or why it
        gave up; the coordinator stops the program with 'node failed'."""
        ...

    def write_metrics(self, component: str, step_key: str, row: dict[str, Any]) -> None: ...

    def node_finished(self, node: str) -> bool | None: ...

    def nodes_finished(self, prefix: str) -> bool: ...

    def checkpoint_state(self) -> dict[str, Any]: ...

    def checkpoint_written(
        self, path: str, step: int, seconds: float, size: int, final: bool = False
    ) -> None: ...
