"""Whole-program restarts (checkpoint.max_program_restarts).

When the program stopped because a node other than an actor died (the
learner, a replay shard, the coordinator), the launcher decides with
apex.restart's policy whether to start it again; if so it records the restart
in RUN_DIR/restarts.json and executes itself again with the same command line
plus `--config.run_dir=RUN_DIR --resume`: the same pid and output, a fresh
process, the program resumed from the newest complete checkpoint. The new
launcher completes the record with the checkpoint it resumed from and what
the restart cost (env and SGD steps since that checkpoint).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

from apex import (
    FULL_DISK,
    PROGRAM_RESTARTS_FILE,
    ApexConfig,
    checkpointing,
    decide_program_restart,
    failed_node,
    read_program_restarts,
    write_json_atomic,
)

RESTARTS_ENV = "APEX_PROGRAM_RESTARTS"
"""Restarts so far in this launch, set for the launcher it executes again."""


def restarts_this_launch() -> int:
    """Program restarts since the user's launch (0 in the launch itself)."""
    try:
        return max(0, int(os.environ.get(RESTARTS_ENV, "0")))
    except ValueError:
        return 0


def _write(run_dir: str, records: list[dict]) -> None:
    path = os.path.join(run_dir, PROGRAM_RESTARTS_FILE)
    FULL_DISK.guard("restarts.json", write_json_atomic, path, {"restarts": records})


def _env_steps(state: dict) -> int | None:
    steps = state.get("actor_steps")
    return sum(int(v) for v in steps.values()) if isinstance(steps, dict) else None


def plan(
    run_dir: str,
    config: ApexConfig,
    summary: dict[str, Any] | None,
    failure: str,
    life_seconds: float,
) -> Restart | None:
    """After the program stopped on `failure`: the restart that starts it again
    (recorded and announced), or None (said why, where a restart was
    possible; a crash loop is named in `summary`'s failure)."""
    limit = config.checkpoint.max_program_restarts
    node = failed_node(failure)
    if limit == 0:
        return None
    records = read_program_restarts(run_dir)
    done = restarts_this_launch()
    earlier = records[len(records) - done :] if done else []
    decision = decide_program_restart(
        node, life_seconds, earlier, limit, config.checkpoint.crash_loop_seconds
    )
    if not decision.restart:
        if not node.startswith("actor") and node not in ("", "placement"):
            print(f"[apex] the program is not started again: {decision.why}", file=sys.stderr)
            if summary is not None and decision.why.startswith("crash loop"):
                summary["failure"] = f"{decision.why}: {failure}"
        return None
    latest = checkpointing.latest_complete(run_dir)
    if latest is None:
        print(
            "[apex] the program is not started again: no complete checkpoint to start from "
            "(checkpoint.period_seconds)",
            file=sys.stderr,
        )
        return None
    summary = summary or {}
    records.append(
        {
            "restart": len(records) + 1,
            "time": time.time(),
            "node": node,
            "failure": failure,
            "life_seconds": round(life_seconds, 3),
            "at_env_steps": summary.get("env_steps"),
            "at_learner_steps": summary.get("learner_steps"),
            "wait_seconds": decision.wait,
        }
    )
    _write(run_dir, records)
    wait = f" in {decision.wait:g} s" if decision.wait else ""
    print(
        f"[apex] starting the program again{wait} ({decision.why}, "
        f"checkpoint.max_program_restarts): {failure}",
        flush=True,
    )
    argv = [
        a for a in sys.orig_argv[1:] if a != "--resume" and not a.startswith("--config.run_dir=")
    ]
    os.environ[RESTARTS_ENV] = str(done + 1)
    return Restart([*argv, f"--config.run_dir={run_dir}", "--resume"], decision.wait)


@dataclasses.dataclass(frozen=True)
class Restart:
    """The launcher's next life: its command line (after the interpreter) and the
    back-off before it starts."""

    argv: list[str]
    wait: float

    def execute(self) -> None:
        """Replaces this launcher with the next one (same pid and output)."""
        sys.stdout.flush()
        sys.stderr.flush()
        if self.wait:
            time.sleep(self.wait)  # the back-off after a quick life (apex.restart)
        os.execv(sys.executable, [sys.executable, *self.argv])


def note_resume(run_dir: str, checkpoint: checkpointing.Checkpoint | None) -> None:
    """In a launcher started again: completes the last restart record with the
    checkpoint resumed from and the steps lost to it, and says so."""
    if not restarts_this_launch():
        return
    records = read_program_restarts(run_dir)
    if not records or "resumed_from" in records[-1] or checkpoint is None:
        return
    rec = records[-1]
    state = checkpoint.state
    rec["resumed_from"] = os.path.basename(checkpoint.path)
    env_at, sgd_at = rec.get("at_env_steps"), rec.get("at_learner_steps")
    env_ckpt = _env_steps(state)
    rec["env_steps_lost"] = (
        max(0, int(env_at) - env_ckpt) if env_at is not None and env_ckpt is not None else None
    )
    rec["sgd_steps_lost"] = max(0, int(sgd_at) - checkpoint.step) if sgd_at is not None else None
    _write(run_dir, records)
    lost = ", ".join(
        f"{rec[k]:,} {what}"
        for k, what in (("env_steps_lost", "env steps"), ("sgd_steps_lost", "SGD steps"))
        if rec.get(k) is not None
    )
    print(
        f"[apex] program restart {rec['restart']} after {rec['node']} failed: "
        f"lost {lost or 'an unknown number of steps'} since {rec['resumed_from']}",
        flush=True,
    )


def add_to_summary(run_dir: str, summary: dict[str, Any] | None) -> None:
    """summary.json's `restarts`: every program restart of the run directory."""
    records = read_program_restarts(run_dir)
    if summary is None or not records:
        return
    summary["restarts"] = records
    FULL_DISK.guard(
        "summary.json", write_json_atomic, os.path.join(run_dir, "summary.json"), summary
    )
