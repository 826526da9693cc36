"""Actor processes that die are started again.

An actor whose envs raise is restarted inside its process (launch.nodes.actor);
this module is for an actor PROCESS that dies: SIGKILL, the OOM killer, a crash
in an env's native code (SIGSEGV, SIGABRT). Whoever watches the process starts
it again, in the same slot (same actor id, same epsilons), with a fresh writer,
fresh envs and fresh parameters; the new process carries the slot's counters
on from the coordinator (launch.node_env.RESTARTED_ENV). The policy is
apex.restart's, with actor.max_restarts and actor.restart_backoff_seconds:

- local_mp: the node's wrapper (launch.zygote's forked wrapper, or
  launch.node_output's for a spawned node) forks or spawns the node again; its
  pid, the one Launchpad's WorkerManager stops, stays the same.
- Ray: the launcher (launch.ray_launch) starts the node process again under the
  same NodeHost when only the process died, or on any node when its host died.

Past max_restarts the slot gives up: local_mp starts the actor once more with
GIVE_UP_ENV, and that process reports the failure to the coordinator (the
program stops in order, 'node failed', the failure named) instead of acting;
Ray's launcher names the failure itself. A process that ended of a signal
that asks a process to stop (SIGTERM, SIGINT, SIGQUIT, SIGHUP) or that exited
(0, or an exception it reported) is not restarted: that is a stop or a failure
the actor named itself.

The coordinator gives a dead actor `restart_grace_seconds` to come back
before it counts the death as a failure (`ACTOR_RESTARTS_ENV` tells it that
someone restarts actors).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

from apex import decide_restart
from launch.node_env import (
    ACTOR_RESTARTS_ENV,
    GIVE_UP_ENV,
    LAUNCHER_PID_ENV,
    PROCESS_RESTART_ENV,
    RESTARTED_ENV,
)

# Signals that ask a process to stop: a node ended by one was stopped, not lost.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
# The longest back-off apex.restart waits (its cap), plus room for a restarted
# process to start and beat on a loaded machine: how long the coordinator waits
# for a dead actor to come back before it calls the death a failure.
_MAX_BACKOFF = 30.0
_START_ROOM = 120.0
RESTARTED_GROUPS = ("actor",)
"""The Launchpad groups whose processes are started again when they die."""


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """actor.max_restarts and actor.restart_backoff_seconds, as they travel to a
    wrapper in its environment ('MAX:BACKOFF')."""

    max_restarts: int
    backoff: float

    def encode(self) -> str:
        return f"{self.max_restarts}:{self.backoff:g}"

    @classmethod
    def decode(cls, text: str | None) -> RestartPolicy | None:
        if not text:
            return None
        most, _, backoff = text.partition(":")
        return cls(int(most), float(backoff or 0.0))

    @classmethod
    def of(cls, config) -> RestartPolicy:
        return cls(int(config.actor.max_restarts), float(config.actor.restart_backoff_seconds))

    @property
    def grace_seconds(self) -> float:
        """How long the coordinator waits for a dead actor to come back."""
        return max(self.backoff, _MAX_BACKOFF) + _START_ROOM


def policy_env(config) -> dict[str, str]:
    """What a launcher that restarts actor processes puts in its nodes' environment."""
    return {ACTOR_RESTARTS_ENV: RestartPolicy.of(config).encode()}


def restart_grace_seconds(env: dict[str, str] | None = None) -> float:
    """The coordinator's grace for a dead actor (0: nobody restarts actor
    processes, a death is a failure at once, as before)."""
    policy = RestartPolicy.decode((os.environ if env is None else env).get(ACTOR_RESTARTS_ENV))
    return 0.0 if policy is None else policy.grace_seconds


def died_unasked(code: int) -> bool:
    """Whether a process that ended with `code` (Popen's: -N for signal N) was
    killed by a signal that does not ask it to stop (SIGKILL, SIGSEGV, ...)."""
    return code < 0 and -code not in [int(s) for s in STOP_SIGNALS]


def death_text(code: int) -> str:
    """How a process that ended with `code` ended, in words."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = {
        "SIGKILL": " (e.g. kill -9 or the out-of-memory killer)",
        "SIGSEGV": " (a crash, e.g. in an env's native code)",
        "SIGABRT": " (an abort, e.g. in native code)",
        "SIGBUS": " (a crash in native code)",
    }.get(name, "")
    return f"was killed by {name}{why}"


@dataclasses.dataclass(frozen=True)
class NextStart:
    """What a wrapper does after its node ended: start it again after `wait`
    seconds with `env` added (`give_up`: the last start, which only reports the
    failure), or (None from `after_exit`) end with the node's code."""

    wait: float
    env: dict[str, str]
    message: str
    give_up: bool = False


class ProcessRestarts:
    """The restarts of one actor slot's process, kept by whatever watches it.

    Args:
      name: the node's name as the coordinator knows it ('actor_3').
      policy: actor.max_restarts and actor.restart_backoff_seconds.
      launcher_pid: the launcher's pid (0: unknown); nothing restarts once it is gone.
    """

    def __init__(self, name: str, policy: RestartPolicy, launcher_pid: int = 0):
        self.name = name
        self.policy = policy
        self.launcher_pid = launcher_pid
        self.restarts = 0
        self._backoff = policy.backoff
        self._gave_up = False

    @classmethod
    def for_node(cls, title: str, task_id: int, env: dict[str, str]) -> ProcessRestarts | None:
        """The restarts of node `task_id` of the Launchpad command titled `title`
        ('actor/3': group/task), if its launcher restarts that group's processes
        (ACTOR_RESTARTS_ENV in `env`)."""
        group = title.partition("/")[0]
        policy = RestartPolicy.decode(env.get(ACTOR_RESTARTS_ENV))
        if policy is None or group not in RESTARTED_GROUPS:
            return None
        return cls(f"{group}_{task_id}", policy, int(env.get(LAUNCHER_PID_ENV, "0") or 0))

    def launcher_alive(self) -> bool:
        from apex import pid_alive

        return self.launcher_pid <= 0 or pid_alive(self.launcher_pid)

    def after_exit(self, pid: int, code: int, ran_seconds: float) -> NextStart | None:
        """What follows the end of process `pid` (exit `code`, Popen's sign
        convention) after `ran_seconds`: None (no restart), a restart, or the
        give-up start."""
        if self._gave_up or not died_unasked(code) or not self.launcher_alive():
            return None
        self.restarts += 1
        decision = decide_restart(
            self.restarts,
            self._backoff,
            ran_seconds,
            self.policy.backoff,
            self.policy.max_restarts,
        )
        what = f"{self.name}'s process (pid {pid}) {death_text(code)}"
        if not decision.restart:
            self._gave_up = True
            failure = (
                f"its process (pid {pid}) {death_text(code)}: {self.restarts} process "
                f"death(s), past actor.max_restarts={self.policy.max_restarts}"
            )
            return NextStart(
                0.0,
                {RESTARTED_ENV: "1", GIVE_UP_ENV: failure},
                f"{what}; past actor.max_restarts={self.policy.max_restarts}: the program stops",
                give_up=True,
            )
        self._backoff = decision.next_backoff
        return NextStart(
            decision.wait,
            {RESTARTED_ENV: "1", PROCESS_RESTART_ENV: str(self.restarts)},
            f"{what}; restart {self.restarts}/{self.policy.max_restarts} in "
            f"{decision.wait:.1f} s (same slot, counters carried on)",
        )

    def wait(self, seconds: float) -> bool:
        """Waits `seconds` (the back-off); False if the launcher went away meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.launcher_alive():
                return False
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return self.launcher_alive()
