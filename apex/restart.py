"""The actor restart policy, as a pure function.

An actor whose life ends in an exception (an env that raised, a lost replay
connection) is started again with fresh envs, a fresh writer and fresh
parameters, after a back-off that doubles each time (capped), unless it had
run long enough to count as recovered, in which case the back-off starts
over. Past `max_restarts` the node gives up and the program stops with
"node failed".
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

RECOVERED_AFTER_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 30.0


@dataclass(frozen=True)
class RestartDecision:
    """What to do after the `restarts`-th failure.

    Attributes:
      restart: start again (False: give up, the node fails).
      wait: seconds to wait before the restart.
      next_backoff: the back-off to carry to the next failure.
    """

    restart: bool
    wait: float
    next_backoff: float


def decide_restart(
    restarts: int,
    backoff: float,
    ran_seconds: float,
    base_backoff: float,
    max_restarts: int,
) -> RestartDecision:
    """The decision after a failure.

    Args:
      restarts: failures so far, this one included (1 for the first).
      backoff: the back-off carried from the previous failure (base_backoff at first).
      ran_seconds: how long the life that just failed ran.
      base_backoff: actor.restart_backoff_seconds.
      max_restarts: actor.max_restarts.

    Example:
        >>> decide_restart(1, 1.0, 0.5, 1.0, 3)
        RestartDecision(restart=True, wait=1.0, next_backoff=2.0)
    """
    if ran_seconds > RECOVERED_AFTER_SECONDS:  # it had recovered: back off from the start
        backoff = base_backoff
    if restarts > max_restarts:
        return RestartDecision(False, 0.0, backoff)
    next_backoff = min(2.0 * backoff, MAX_BACKOFF_SECONDS) if backoff > 0 else 0.0
    return RestartDecision(True, backoff, next_backoff)


# Whole-program restarts (checkpoint.max_program_restarts): after a node other
# than an actor dies (the learner, a replay shard, the coordinator, ...), the
# launcher stops what is left and starts the program again from the newest
# complete checkpoint. Their records: RUN_DIR/restarts.json ({'restarts': [...]}, oldest first).

PROGRAM_RESTARTS_FILE = "restarts.json"
_NODE_NAME = re.compile(r"[A-Za-z]+(?:_[A-Za-z]+)*(?:_\d+)?")
CRASH_LOOP_LIVES = 3  # quick deaths of the same node in a row that make a crash loop


@dataclass(frozen=True)
class ProgramRestartDecision:
    """What the launcher does after the program stopped on a node's failure.

    Attributes:
      restart: start the program again (False: stop, exit 1, with `why`).
      wait: seconds to wait before starting again.
      why: one line: the restart's count or why there is none.
    """

    restart: bool
    wait: float
    why: str


def failed_node(failure: str) -> str:
    """The node a failure text names first ('learner (pid 5) exited ...' -> 'learner';
    'replay_1: ...' -> 'replay_1'; "learner/0's Ray worker ..." -> 'learner').

    Example:
        >>> failed_node("actor_1: its process (pid 7) was killed by SIGKILL")
        'actor_1'
    """
    match = _NODE_NAME.match(failure.strip())
    return match.group(0) if match else ""


def decide_program_restart(
    node: str,
    life_seconds: float,
    earlier: list[dict],
    max_restarts: int,
    crash_loop_seconds: float,
) -> ProgramRestartDecision:
    """The decision after the program stopped because `node` failed.

    Args:
      node: the failed node's name (failed_node of the failure).
      life_seconds: how long this program life ran before the failure.
      earlier: this launch's earlier restart records, oldest first (each with
        'node' and 'life_seconds').
      max_restarts: checkpoint.max_program_restarts.
      crash_loop_seconds: checkpoint.crash_loop_seconds: a life shorter than
        this is quick; CRASH_LOOP_LIVES quick lives in a row ended by the same
        node make a crash loop.

    Actors are not restarted this way (their slots restart on their own, up
    to actor.max_restarts, and past it the program stops), nor is a run that
    never got to place its nodes. After a quick life the wait doubles from 1 s;
    after a long one the program starts again at once.

    Example:
        >>> decide_program_restart("learner", 600.0, [], 10, 120.0)
        ProgramRestartDecision(restart=True, wait=0.0, why='restart 1/10')
    """
    if node.startswith("actor") or node in ("", "placement"):
        return ProgramRestartDecision(False, 0.0, f"{node or 'the failure'} is not restarted")
    if len(earlier) >= max_restarts:
        return ProgramRestartDecision(
            False, 0.0, f"past checkpoint.max_program_restarts={max_restarts}"
        )
    quick = 0
    if life_seconds < crash_loop_seconds:
        quick = 1
        for rec in reversed(earlier):
            if rec.get("node") != node or float(rec.get("life_seconds", 0)) >= crash_loop_seconds:
                break
            quick += 1
    if quick >= CRASH_LOOP_LIVES:
        return ProgramRestartDecision(
            False,
            0.0,
            f"crash loop: {node} failed {quick} times in a row, each within "
            f"{crash_loop_seconds:g} s of a start (checkpoint.crash_loop_seconds)",
        )
    wait = float(2 ** (quick - 1)) if quick else 0.0
    return ProgramRestartDecision(True, wait, f"restart {len(earlier) + 1}/{max_restarts}")


def read_program_restarts(run_dir: str) -> list[dict]:
    """The program restarts recorded in RUN_DIR (oldest first; [] when none)."""
    path = os.path.join(run_dir, PROGRAM_RESTARTS_FILE)
    try:
        with open(path) as f:
            records = json.load(f).get("restarts", [])
    except (OSError, ValueError, AttributeError):
        return []
    return records if isinstance(records, list) else []
