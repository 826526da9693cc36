"""The actor restart policy, as a pure function.

An actor whose life ends in an exception (an env that raised, a lost replay
connection) is started again with fresh envs, a fresh writer and fresh
parameters, after a back-off that doubles each time (capped), unless it had
run long enough to count as recovered, in which case the back-off starts
over. Past `max_restarts` the node gives up and the program stops with
"node failed".
"""

from __future__ import annotations

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
