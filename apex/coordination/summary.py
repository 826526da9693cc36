"""What the coordinator writes of a run's figures: summary.json and state.json,
the progress line and its own metrics row, all read from the counters, the
replay figures and the stop verdict."""

from __future__ import annotations

import os
import time
from typing import Any

from apex.config import ApexConfig
from apex.coordination.counters import RunCounters
from apex.coordination.replay_poll import ReplayPoller
from apex.jsonio import write_json_atomic
from apex.verdicts import NodeFailure, StopVerdict

SUMMARY_KEYS = (
    "env_steps",
    "learner_steps",
    "wall_seconds",
    "first_learner_step_seconds",
    "env_steps_per_second",
    "learner_steps_per_second",
    "samples_per_insert",
    "eval_return_mean",
    "best_eval_return_mean",
    "best_eval_version",
    "solved_at_wall_seconds",
    "solved_at_env_steps",
)
"""The figures the launcher prints of summary.json at the end ('[apex] summary: ...')."""


def summary(
    config: ApexConfig,
    counters: RunCounters,
    replay: ReplayPoller,
    verdict: StopVerdict | None,
    failure: NodeFailure | None,
    failure_time: float | None = None,
) -> dict[str, Any]:
    """summary.json's figures as of now (`verdict`: why the run stopped, None
    while it runs; `failure`: the first failure recorded, at Unix time
    `failure_time`)."""
    now = time.time()
    c = counters
    info = replay.info
    with c.lock:
        env_steps = c.env_steps
        first_act = c.first_actor_time()
        lfs = c.learner_first_step
        ev, best, solved = c.eval, c.best, c.solved_at
        s = {
            "env_steps": env_steps,
            "learner_steps": c.learner_steps,
            "episodes": c.episodes,
            "wall_seconds": now - c.start,
            "first_learner_step_seconds": None if lfs is None else lfs - c.start,
            "env_steps_per_second": env_steps / (now - first_act)
            if first_act and now > first_act
            else 0.0,
            "env_steps_per_second_since_launch": env_steps / max(1e-9, now - c.start),
            "learner_steps_per_second": c.learner_steps / (now - lfs) if lfs and now > lfs else 0.0,
            "samples_per_insert": info.get("samples_per_insert"),
            "replay_size": info.get("size"),
            "replay_inserts": info.get("inserts"),
            "replay_samples": info.get("samples"),
            "eval_return_mean": None if ev is None else ev["return_mean"],
            "eval_returns": None if ev is None else ev["returns"],
            "best_eval_return_mean": None if best is None else best[0],
            "best_eval_at_wall_seconds": None if best is None else best[1],
            "best_eval_at_env_steps": None if best is None else best[2],
            "best_eval_version": None if best is None else best[3],
            "target_return": config.evaluation.target_return,
            "evaluated_weights": config.evaluation.describe_weights(),
            "solved_at_wall_seconds": None if solved is None else solved[0],
            "solved_at_env_steps": None if solved is None else solved[1],
            "stop_reason": None if verdict is None else verdict.message,
            "failure": None if failure is None else failure.message,
            # When the failure was recorded, in the run's clock: the launcher keeps
            # it over a death it saw later (launch.summary.finalize_summary).
            "failure_at_wall_seconds": (
                None if failure is None or failure_time is None else failure_time - c.start
            ),
            # Unix time wall_seconds count from (a resumed run's clock continues):
            # tools.plot draws every series against it.
            "clock_start_time": c.start,
            "policy_lag_p50_steps": c.learner_row.get("learner/policy_lag_p50_steps"),
            "checkpoint": c.checkpoint,
            "resumed_from": c.resumed_from,
        }
        if replay.sharded:
            s["replay_shards"] = replay.shard_figures()
    return s


def write_summary(run_dir: str, summary: dict[str, Any]) -> None:
    """RUN_DIR/summary.json."""
    if run_dir:
        write_json_atomic(os.path.join(run_dir, "summary.json"), summary)


def write_state(run_dir: str, summary: dict[str, Any], counters: dict[str, Any]) -> None:
    """RUN_DIR/state.json: the summary's figures, and `counters` (what a run
    checkpoint keeps, for the learner if the coordinator dies)."""
    if run_dir:
        write_json_atomic(os.path.join(run_dir, "state.json"), dict(summary, counters=counters))


def env_steps_now(counters: RunCounters, replay: ReplayPoller, env_steps_per_item: float) -> int:
    """Env steps as of now: the actors' reports (up to a report period old), or,
    when the replay has seen more inserts than that explains, the steps those
    inserts took (each item follows `env_steps_per_item` env steps), so the
    progress line never shows fewer env steps than items in replay."""
    inserts = replay.info.get("inserts") or 0
    return max(counters.env_steps, int(inserts * env_steps_per_item))


def progress_line(
    counters: RunCounters, replay: ReplayPoller, env_steps: int, rates: dict[str, float]
) -> str:
    """'[apex 12.3s] env_steps ... | learner_steps ... | replay ... | eval_return ...'
    (`env_steps`: `env_steps_now`; `rates`: per second, 'env' and 'learner')."""
    r = replay.info
    ev = "-" if counters.eval is None else f"{counters.eval['return_mean']:.1f}"
    return (
        f"[apex {time.time() - counters.start:6.1f}s] env_steps {env_steps:,} "
        f"({rates.get('env', 0.0):,.0f}/s) | learner_steps {counters.learner_steps:,} "
        f"({rates.get('learner', 0.0):.1f}/s) | replay {r.get('size', 0):,}/{r.get('capacity', 0):,}"
        f"{replay.shard_sizes_text()} | samples/insert {r.get('samples_per_insert', 0.0):.2f} "
        f"| eval_return {ev}"
    )


def metrics_row(
    counters: RunCounters, replay: ReplayPoller, rates: dict[str, float], findings: int
) -> dict[str, Any]:
    """The coordinator's metrics row (the episode returns reported since the
    previous row are taken: their mean is in it)."""
    r = replay.info
    row = {
        "coordinator/env_steps": counters.env_steps,
        "coordinator/learner_steps": counters.learner_steps,
        "coordinator/env_steps_per_second": rates.get("env"),
        "coordinator/learner_steps_per_second": rates.get("learner"),
        "replay/size": r.get("size"),
        "replay/inserts": r.get("inserts"),
        "replay/samples": r.get("samples"),
        "replay/samples_per_insert": r.get("samples_per_insert"),
        "replay/unique_samples": r.get("unique_samples"),
        "coordinator/stall_findings": findings,
    }
    row.update(replay.shard_rows())
    returns = counters.take_recent_returns()
    if returns:
        row["coordinator/episode_return_mean"] = sum(returns) / len(returns)
    return row
