"""The run's counters: what actors, the learner and the evaluator report to the
coordinator (env and learner steps, episodes, evaluations, the best one, when
the run was solved, the last checkpoint written), and what a run checkpoint
keeps of them (`checkpoint_state`, `restore`)."""

from __future__ import annotations

import threading
import time
from typing import Any

from apex.config import ApexConfig


class RunCounters:
    """The counters of one run, behind one lock (reports arrive on RPC threads).

    Args:
      config: the program config (evaluation.target_return: what counts as solved).
      start_time: unix time of the launch (wall seconds count from it; a resumed
        run's clock continues: `restore` moves it back).
    """

    def __init__(self, config: ApexConfig, start_time: float):
        self._config = config
        self.start = float(start_time)
        self.lock = threading.Lock()
        self.actor_steps: dict[int, int] = {}
        self.actor_episodes: dict[int, int] = {}
        self.actor_start: dict[int, float] = {}
        self.recent_returns: list[float] = []
        self.learner_steps = 0
        self.learner_first_step: float | None = None
        self.learner_row: dict[str, Any] = {}
        self.eval: dict[str, Any] | None = None
        # (return, wall s, env steps, param version); the learner keeps its parameters
        self.best: tuple[float, float, int, int | None] | None = None
        self.solved_at: tuple[float, int] | None = None
        # Set once the stop is decided: summary.json's evaluation is final, and a
        # later one is refused (report_eval returns False; the evaluator then
        # writes no row for it).
        self.frozen = False
        self.checkpoint: dict[str, Any] | None = None
        self.checkpoint_event = threading.Event()
        self.resumed_from: str | None = None
        # This launch's start events (apex.coordination.startup): each actor's first
        # report (unix time, env steps since it started, its start time) and the
        # learner's first SGD step, never restored from a checkpoint.
        self.first_reports: dict[int, tuple[float, int, float]] = {}
        self.first_step_this_launch: float | None = None

    # ------------------------------------------------------------- figures
    @property
    def env_steps(self) -> int:
        return sum(self.actor_steps.values())

    @property
    def episodes(self) -> int:
        return sum(self.actor_episodes.values())

    def first_actor_time(self) -> float | None:
        """Unix time the first actor started (None: no actor reported yet)."""
        return min(self.actor_start.values()) if self.actor_start else None

    def actor_counts(self, actor_id: int) -> tuple[int, int]:
        """(env steps, episodes) actor `actor_id` reported last."""
        with self.lock:
            return (
                int(self.actor_steps.get(int(actor_id), 0)),
                int(self.actor_episodes.get(int(actor_id), 0)),
            )

    def get_counts(self) -> dict[str, Any]:
        with self.lock:
            return {
                "env_steps": self.env_steps,
                "learner_steps": self.learner_steps,
                "episodes": self.episodes,
                "eval_return_mean": None if self.eval is None else self.eval["return_mean"],
            }

    def take_recent_returns(self) -> list[float]:
        """The episode returns reported since the previous call."""
        with self.lock:
            returns, self.recent_returns = self.recent_returns, []
        return returns

    # ------------------------------------------------------------- reports
    def report_actor(
        self,
        actor_id: int,
        env_steps: int,
        episodes: int,
        returns: list[float],
        start_time: float | None = None,
    ) -> None:
        with self.lock:
            now = time.time()
            if actor_id not in self.actor_start:
                self.actor_start[actor_id] = start_time or now
            if int(actor_id) not in self.first_reports:
                steps = int(env_steps) - self.actor_steps.get(int(actor_id), 0)
                self.first_reports[int(actor_id)] = (now, max(0, steps), start_time or now)
            self.actor_steps[int(actor_id)] = int(env_steps)
            self.actor_episodes[int(actor_id)] = int(episodes)
            self.recent_returns.extend(float(r) for r in returns)

    def report_learner(
        self, steps: int, first_step_time: float | None, row: dict[str, Any]
    ) -> dict[str, Any]:
        """The learner's counters; returns the run's counters (`checkpoint_state`)."""
        with self.lock:
            self.learner_steps = int(steps)
            if first_step_time is not None and self.learner_first_step is None:
                self.learner_first_step = float(first_step_time)
            if first_step_time is not None and self.first_step_this_launch is None:
                self.first_step_this_launch = float(first_step_time)
            self.learner_row = dict(row)
        return self.checkpoint_state()

    def report_eval(
        self,
        return_mean: float,
        version: int,
        returns: list[float],
        env_steps: int | None = None,
    ) -> bool:
        """An evaluation of the parameters of learner step `version`, pulled when
        the run had `env_steps` env steps (None: as of now). Returns whether it
        is accepted: False once frozen (the stop is decided)."""
        now = time.time()
        with self.lock:
            if self.frozen:
                return False
            steps = self.env_steps if env_steps is None else int(env_steps)
            self.eval = {
                "return_mean": float(return_mean),
                "version": int(version),
                "returns": list(returns),
                "time": now,
                "env_steps": steps,
            }
            if self.best is None or return_mean >= self.best[0]:  # as the learner keeps it
                self.best = (float(return_mean), now - self.start, steps, int(version))
            if self.solved_at is None and self.reaches_target(return_mean):
                self.solved_at = (now - self.start, steps)
        return True

    def reaches_target(self, return_mean: float) -> bool:
        """Whether `return_mean` counts as solved (never without a target_return)."""
        target = self._config.evaluation.target_return
        if target is None or isinstance(target, str):  # None: no target ('auto' unresolved)
            return False
        return float(return_mean) >= float(target)

    def freeze(self) -> None:
        """The stop is decided: evaluations from now on are refused."""
        with self.lock:
            self.frozen = True

    # ------------------------------------------------------- checkpointing
    def checkpoint_state(self) -> dict[str, Any]:
        """The counters a run checkpoint keeps (JSON-safe); `restore` reads them back."""
        with self.lock:
            first_act = self.first_actor_time()
            return {
                "wall_seconds": time.time() - self.start,
                "actor_steps": {str(k): v for k, v in self.actor_steps.items()},
                "actor_episodes": {str(k): v for k, v in self.actor_episodes.items()},
                "learner_steps": self.learner_steps,
                "first_learner_step_seconds": None
                if self.learner_first_step is None
                else self.learner_first_step - self.start,
                "first_actor_seconds": None if first_act is None else first_act - self.start,
                "eval": self.eval,
                "best_eval": None if self.best is None else list(self.best),
                "solved_at": None if self.solved_at is None else list(self.solved_at),
            }

    def restore(self, state: dict[str, Any], checkpoint_path: str = "") -> None:
        """Continues from a checkpoint's counters: env and learner steps, wall
        seconds (the clock continues from the saved value), evaluations."""
        with self.lock:
            self.start -= float(state.get("wall_seconds", 0.0))
            self.actor_steps = {int(k): int(v) for k, v in state.get("actor_steps", {}).items()}
            self.actor_episodes = {
                int(k): int(v) for k, v in state.get("actor_episodes", {}).items()
            }
            self.learner_steps = int(state.get("learner_steps", 0))
            if state.get("first_learner_step_seconds") is not None:
                self.learner_first_step = self.start + state["first_learner_step_seconds"]
            if state.get("first_actor_seconds") is not None:
                for actor_id in self.actor_steps:
                    self.actor_start[actor_id] = self.start + state["first_actor_seconds"]
            self.eval = state.get("eval")
            best = state.get("best_eval")
            self.best = (*best, None)[:4] if best else None  # older checkpoints: no version
            self.solved_at = tuple(state["solved_at"]) if state.get("solved_at") else None
            self.resumed_from = checkpoint_path or None

    def checkpoint_written(
        self, path: str, step: int, seconds: float, size: int, final: bool = False
    ) -> None:
        """The learner wrote a run checkpoint (`final`: the one at a stop)."""
        with self.lock:
            self.checkpoint = {
                "path": path,
                "learner_step": step,
                "seconds": seconds,
                "bytes": size,
            }
        if final:
            self.checkpoint_event.set()
