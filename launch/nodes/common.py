"""What every node adapter shares: its process's stop check, quiet logs, beats and
metrics, and the report of its failure to the coordinator.

A node that dies of an exception names it: it reports '<Type>: <message>' to
the coordinator (`report_node_failure`: over RPC, or directly to a coordinator
in its own process) and, where it may write the run directory, leaves
RUN_DIR/failures/<node>.json (apex.supervision.record_failure) for whoever
finds its process dead.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import launchpad as lp
from absl import logging as absl_logging

from apex import (
    STOP_WINDOW,
    ApexConfig,
    Coordinator,
    Learner,
    MetricsWriter,
    Reporter,
    compat,
    exception_text,
    lifecycle,
    record_failure,
)
from apex import heartbeat as hb
from launch.node_env import LAUNCHER_PID_ENV


def node_should_stop() -> Callable[[], bool]:
    """The node's stop check. In a local_mp node process of its own it also sets
    the process's stop window, schedules a stack dump for a node that does not
    stop in time, starts the launcher watchdog, and makes SIGUSR1 dump every
    thread's stack to the node's log if the node has not chosen a file (the Ray
    launcher sends it to a node still running at the stop window's end)."""
    event = lp.stop_event()
    if compat.in_launchpad_node_process():
        hb.register_stack_dump(None, "node")  # once per process: a node's own file stays
        lp.register_stop_handler(lambda: lifecycle.dump_stacks_later(STOP_WINDOW.stack_dump_after))
        compat.set_node_termination_window(STOP_WINDOW.kill_seconds)
        lifecycle.start_launcher_watchdog(int(os.environ.get(LAUNCHER_PID_ENV, "0") or 0))
    return event.is_set


# Seconds a failing node keeps trying to tell the coordinator (which may still be
# starting) before it gives up and simply dies.
REPORT_FAILURE_TIMEOUT = 30.0

# The Coordinator of this process, if a CoordinatorNode runs here: a node in the
# same process (the evaluator) reports its failure to it directly.
_local_coordinator: Callable[[], Coordinator | None] = lambda: None  # noqa: E731
_local_lock = threading.Lock()


def set_local_coordinator(coordinator: Coordinator | None) -> None:
    global _local_coordinator
    with _local_lock:
        if coordinator is None:
            _local_coordinator = lambda: None  # noqa: E731
        else:
            _local_coordinator = weakref.ref(coordinator)


# The Learner of this process, if a LearnerNode runs here: the inference node in
# the same process reads its newest parameters directly (no network pull).
_local_learner: Callable[[], Learner | None] = lambda: None  # noqa: E731


def set_local_learner(learner: Learner | None) -> None:
    global _local_learner
    with _local_lock:
        _local_learner = (lambda: None) if learner is None else weakref.ref(learner)


def local_learner() -> Learner | None:
    """The Learner of this process's LearnerNode, if one runs here."""
    return _local_learner()


def stopping() -> bool:
    """Whether this node's program is stopping. False outside a Launchpad node's
    own thread (its worker manager is per thread): a thread the node starts
    must be handed `node_should_stop()`'s check instead."""
    try:
        return lp.stop_event().is_set()
    except Exception:  # noqa: BLE001 - no Launchpad worker manager in this thread
        return False


def report_node_failure(
    coordinator: Any,
    node: str,
    err: BaseException,
    run_dir: str = "",
    should_stop: Callable[[], bool] | None = None,
    timeout: float = REPORT_FAILURE_TIMEOUT,
) -> bool:
    """Says that `node` failed with `err`: prints it with its traceback, records
    it under `run_dir` (if given: only for nodes that may write the run
    directory) and reports '<Type>: <message>' to the coordinator, directly when
    it runs in this process, else over its RPC `report_failure` (retried for at
    most `timeout` s, or until `should_stop`). Returns whether the coordinator
    has it (it then stops the program with 'node failed')."""
    message = exception_text(err)
    print(f"[apex] {node} failed: {message}", file=sys.stderr, flush=True)
    traceback.print_exception(type(err), err, err.__traceback__)
    record_failure(run_dir, node, err)
    should_stop = should_stop or stopping
    deadline = time.time() + timeout
    while True:
        local = _local_coordinator()
        if local is not None:
            local.report_failure(node, message)
            return True
        if coordinator is not None:
            try:
                coordinator.report_failure(node, message)
                return True
            except Exception:  # noqa: BLE001 - not up yet, or gone: try again until the deadline
                pass
        if time.time() >= deadline or should_stop():
            print(
                f"[apex] {node}: the coordinator could not be told of this failure",
                file=sys.stderr,
                flush=True,
            )
            return False
        time.sleep(0.5)


def quiet_logs() -> None:
    # Node processes do not parse flags; keep absl's per-node INFO lines
    # (courier bindings, port picking) out of the user's terminal.
    absl_logging.set_verbosity(absl_logging.WARNING)


def node_heartbeat(
    config: ApexConfig,
    coordinator: Reporter,
    name: str,
    counters: Callable[[], dict],
    on_reply: Callable[[float, Any], None] | None = None,
) -> hb.Heartbeat:
    """The node's heartbeat, sent to the coordinator (courier futures: never blocks);
    `on_reply` gets the coordinator's answers (an actor's lease)."""
    futures = getattr(coordinator, "futures", None)
    sink = (futures or coordinator).heartbeat
    return hb.Heartbeat(
        sink, name, config.logging.heartbeat_period_seconds, counters, on_reply=on_reply
    )


def node_metrics(config: ApexConfig, run_dir: str, name: str, step_key: str) -> MetricsWriter:
    """The node's metrics file, RUN_DIR/metrics/<name>.jsonl."""
    return MetricsWriter(run_dir, name, step_key=step_key, tensorboard=config.logging.tensorboard)
