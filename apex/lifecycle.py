"""How a program's processes stop: the stop window and its invariant, the
launcher watchdog, stack dumps of a node that does not stop, and the guard
that proves a node needs no shared filesystem.

The stop window. After a stop request Launchpad kills every node process
`kill_seconds` later (its --lp_termination_notice_secs; launch.train sets it
for the launcher, every node process for itself). Inside that window, in order:

  learner   notices the stop (<= 0.2 s), joins its SGD thread (<= sgd_join),
            samples without training until every actor is out of its last
            insert (<= actor_drain), then writes the final checkpoint;
  replay    stays up replay_grace + 0.5 s, then until the learner has
            finished (<= final_checkpoint_wait), so the drain and the
            checkpoint talk to a live server;
  coordinator  writes summary.json, then waits for the final checkpoint
            (<= final_checkpoint_wait) to name it in summary.json;
  any node  still alive stack_dump_after s after the stop prints every
            thread's stack to its log before the kill: a hang is never silent.

`StopWindow.check()` states the ordering; tests/test_lifecycle.py holds it.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class StopWindow:
    """The stop-time constants (seconds) of a program; see the module docstring."""

    kill_seconds: float = 28.0
    replay_grace: float = 2.0
    final_checkpoint_wait: float = 24.0
    actor_drain: float = 10.0
    sgd_join: float = 2.0
    stack_dump_after: float = 26.0

    @property
    def checkpoint_budget(self) -> float:
        """Seconds left for the learner's final checkpoint after its SGD join and drain."""
        return self.final_checkpoint_wait - self.sgd_join - self.actor_drain

    def violations(self) -> list[str]:
        """Each ordering the window breaks, in words (empty: it holds)."""
        out = []
        if self.replay_grace + 0.5 + self.final_checkpoint_wait >= self.kill_seconds:
            out.append(
                f"replay_grace + 0.5 + final_checkpoint_wait = "
                f"{self.replay_grace + 0.5 + self.final_checkpoint_wait:g} s must end before "
                f"the kill at {self.kill_seconds:g} s (the replay would be killed while the "
                "learner checkpoints)"
            )
        if self.checkpoint_budget < 5.0:
            out.append(
                f"final_checkpoint_wait - sgd_join - actor_drain = {self.checkpoint_budget:g} s "
                "must leave >= 5 s for the final checkpoint"
            )
        if not self.final_checkpoint_wait < self.stack_dump_after < self.kill_seconds:
            out.append(
                f"stack_dump_after ({self.stack_dump_after:g} s) must come after "
                f"final_checkpoint_wait ({self.final_checkpoint_wait:g} s) and before the kill "
                f"({self.kill_seconds:g} s)"
            )
        return out

    def check(self) -> StopWindow:
        """Raises ValueError naming every broken ordering; returns self."""
        problems = self.violations()
        if problems:
            raise ValueError("inconsistent stop window: " + "; ".join(problems))
        return self


STOP_WINDOW = StopWindow().check()


def dump_stacks_later(seconds: float) -> None:
    """Prints every thread's stack to stderr `seconds` from now unless the process
    has exited (call it at a stop request)."""
    faulthandler.dump_traceback_later(seconds, exit=False)


_watchdog_started = False


def start_launcher_watchdog(launcher_pid: int, period: float = 1.0) -> bool:
    """Once per process: SIGTERM this process (Launchpad's orderly stop) when the
    launcher process `launcher_pid` (on this host) has died, e.g. by SIGKILL,
    which Launchpad cannot see. Returns whether a watchdog was started."""
    global _watchdog_started
    if _watchdog_started or launcher_pid <= 0:
        return False
    _watchdog_started = True

    def watch() -> None:
        while True:
            time.sleep(period)
            try:
                os.kill(launcher_pid, 0)
            except ProcessLookupError:
                try:  # whoever read our output may be gone with the launcher
                    print(
                        f"[apex] the launcher (pid {launcher_pid}) is gone; stopping this node",
                        flush=True,
                    )
                except (OSError, ValueError):
                    pass
                os.kill(os.getpid(), signal.SIGTERM)
                return
            except PermissionError:  # exists, another user's: not ours any more
                continue

    threading.Thread(target=watch, name="launcher-watchdog", daemon=True).start()
    return True


# Set in the environment (e.g. by a test, or by a user checking a deployment),
# node processes that must not need the run directory (actors) refuse every
# write under it: see forbid_writes_under.
NO_SHARED_FS_ENV = "APEX_CHECK_NO_SHARED_FS"


def forbid_writes_under(path: str) -> None:
    """Makes this process refuse (PermissionError) every Python-level write, mkdir,
    rename or removal under `path`: proof that a node works on a host that
    cannot see the run directory. Irreversible (an audit hook)."""
    root = os.path.realpath(path) + os.sep

    def under(target: object) -> bool:
        if isinstance(target, int) or target is None:
            return False
        try:
            name = os.fsdecode(target)  # type: ignore[arg-type]
        except TypeError:
            return False
        return (os.path.realpath(name) + os.sep).startswith(root)

    write_events = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree"}

    def hook(event: str, args: tuple) -> None:
        if event == "open" and args and under(args[0]):
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            )
            if writing:
                raise PermissionError(f"{NO_SHARED_FS_ENV}: this node may not write {args[0]}")
        elif event in write_events and args and under(args[0]):
            raise PermissionError(f"{NO_SHARED_FS_ENV}: this node may not change {args[0]}")

    sys.addaudithook(hook)
