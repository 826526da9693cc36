"""The program's stop and failure decisions, as values.

The coordinator decides why a run stops (`StopVerdict`, one `StopReason`) and
which node failed, and how (`NodeFailure`, one `FailureKind`); the launcher's
watch on the coordinator (apex.supervision) names a dead coordinator the same
way. Code and tests read the fields; the text a user sees (summary.json's
`stop_reason` and `failure`, the progress and stop lines, doctor.log) is each
value's `message`, worded here once.
"""

from __future__ import annotations

import dataclasses
import enum


class StopReason(enum.Enum):
    """Why a run stopped; the value is summary.json's `stop_reason`."""

    NODE_FAILED = "node failed"  # a node gave up or died (NodeFailure says which)
    MAX_ACTOR_STEPS = "max_actor_steps"  # stop.max_actor_steps env steps reached
    MAX_LEARNER_STEPS = "max_learner_steps"  # stop.max_learner_steps learner steps reached
    MAX_WALL_SECONDS = "max_wall_seconds"  # stop.max_wall_seconds reached
    SOLVED = "solved"  # stop.when_solved and an evaluation reached target_return
    STOPPED = "stopped"  # stopped from outside (Ctrl-C, SIGTERM, the launcher)


class FailureKind(enum.Enum):
    """How a node failed."""

    REPORTED = "reported"  # it said so: gave up, or raised ('<node>: <cause>')
    DIED = "died"  # its process is gone, with a recorded exception (the cause)
    KILLED = "killed"  # its process is gone without a record (a kill, out of memory)
    SILENT = "silent"  # a node on another host sent no beat for `silent_after` s


KILLED_TEXT = "exited without stopping (killed, e.g. SIGKILL or out of memory)"


@dataclasses.dataclass(frozen=True)
class NodeFailure:
    """A node's failure: the first one found is the run's likely cause.

    Attributes:
      node: the node's name ('learner', 'actor_3', 'replay_1', 'coordinator').
      kind: how it failed.
      cause: REPORTED: what the node said ('<Type>: <message>', or why it gave
        up); DIED: the exception its process recorded (apex.supervision);
        empty otherwise.
      pid: its process id (None: not known).
      host: SILENT: the host it ran on.
      silent_after: SILENT: the seconds of silence that count as gone.
      then: how the other nodes found gone with it are named, in order.
    """

    node: str
    kind: FailureKind
    cause: str = ""
    pid: int | None = None
    host: str | None = None
    silent_after: float | None = None
    then: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """The text of summary.json's `failure` and of '[apex] a node failed: ...'."""
        if self.kind is FailureKind.REPORTED:
            text = f"{self.node}: {self.cause}"
        elif self.kind is FailureKind.DIED:
            text = f"{self.node} (pid {self.pid}) died of {self.cause}"
        elif self.kind is FailureKind.KILLED:
            text = f"{self.node} (pid {self.pid}) {KILLED_TEXT}"
        else:
            text = (
                f"{self.node} on {self.host} (pid {self.pid}) sent no heartbeat "
                f"for {self.silent_after:.0f} s (its process or host is gone)"
            )
        return text + ("; then " + ", ".join(self.then) if self.then else "")

    def __str__(self) -> str:
        return self.message

    def with_then(self, others: list[str] | tuple[str, ...]) -> NodeFailure:
        """This failure, naming `others` as found gone with it."""
        return dataclasses.replace(self, then=tuple(others))


@dataclasses.dataclass(frozen=True)
class StopVerdict:
    """Why the program stops.

    Attributes:
      reason: the stop criterion reached, a failure, or a stop from outside.
      failure: NODE_FAILED: the failure that made it (None: not known here,
        e.g. a launcher that saw a node die).
    """

    reason: StopReason
    failure: NodeFailure | None = None

    @property
    def message(self) -> str:
        """summary.json's `stop_reason`, and the word of '[apex] stopping: ...'."""
        return self.reason.value

    @property
    def failed(self) -> bool:
        return self.reason is StopReason.NODE_FAILED

    def __str__(self) -> str:
        return self.message
