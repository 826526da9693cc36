"""`--launcher=ray`'s stop: what `lp.stop()` in a node reaches, and the stop of
every node process in order.

Ctrl-C/SIGTERM on the launcher, or `lp.stop()` in a node (StopViaLauncher, an
RPC to the launcher's control server), SIGTERM every node process
(Launchpad's orderly stop, as local_mp does); after the stop window every
late node's stacks (SIGUSR1), then SIGKILL; then every NodeHost is killed: no
Ray actor of the program outlives the launcher.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable
from typing import Any

from apex import STOP_WINDOW
from launch.ray_start import Slot


class StopControl:
    """What `lp.stop()` in a node reaches (RPC on the launcher's control server)."""

    def __init__(self, on_stop: Callable[[], None]):
        self._on_stop = on_stop

    def stop_program(self) -> None:
        self._on_stop()


@dataclasses.dataclass
class StopViaLauncher:
    """The program stopper of every node on Ray (what `lp.stop()` calls): asks the
    launcher's control server to stop the program. Picklable; imports nothing
    of Ray in the node."""

    address: str

    def __call__(self, mark_as_completed: bool = False) -> None:
        del mark_as_completed
        import courier  # deferred: Launchpad's gRPC client, needed only in the node

        courier.Client(self.address, call_timeout=10).stop_program()


def still_running(answers: dict[str, bool | None]) -> str:
    """The nodes left at the stop window's end, each with what its host said:
    'learner/0 (its process runs; its stacks follow in its log or RUN_DIR/stacks)',
    'actor/0 (its host did not answer)'."""
    says = {
        True: "its process runs; its stacks follow in its log or RUN_DIR/stacks",
        None: "its host did not answer",
    }
    return ", ".join(f"{name} ({says[answer]})" for name, answer in answers.items())


class Stopping:
    """The stop of every node process, one step per launcher tick once a stop
    was asked for: SIGTERM; past the stop window every late node's stacks and
    SIGKILL; later still, hosts that do not answer are given up on."""

    def __init__(
        self,
        ray: Any,
        slots: list[Slot],
        say: Callable[[str], None],
        wait: Callable[[float], Any],
    ):
        self._ray = ray
        self._slots = slots
        self._say = say
        self._wait = wait
        self._sent_at: float | None = None
        self._killed = False

    def step(self) -> None:
        """The stop's next step, if its time has come."""
        now = time.time()
        if self._sent_at is None:
            self._sent_at = now
            for slot in self._slots:
                if (slot.host is None or slot.restart_at is not None) and not slot.done:
                    slot.exit_code = -1  # waiting for a restart: nothing to stop
                slot.restart_at = None
            self.signal_all(signal.SIGTERM)
        elif not self._killed and now - self._sent_at > STOP_WINDOW.kill_seconds + 5.0:
            self._killed = True
            # Every thread's stack first (SIGUSR1: faulthandler, which writes even
            # while the main thread sits in C++), so that a hang is never silent;
            # then the kill. A process that has exited is not late: its host's
            # tick was (the next one brings its exit code).
            answers = {n: a for n, a in self.signal_all(signal.SIGUSR1).items() if a is not False}
            if answers:
                self._say(
                    f"nodes still running after the stop window: {still_running(answers)}; killing"
                )
                if any(answers.values()):
                    self._wait(0.5)  # the handler writes at once; the kill must not beat it
                self.signal_all(signal.SIGKILL)
        elif self._killed and now - self._sent_at > STOP_WINDOW.kill_seconds + 20.0:
            for slot in self._slots:  # their hosts do not answer: give up on them
                if slot.live:
                    slot.exit_code = -9

    def signal_all(self, signum: int) -> dict[str, bool | None]:
        """Sends `signum` to every live node's process; by node title, whether its
        process was running (None: its host did not answer within 10 s)."""
        ray = self._ray
        futures = {s.host.signal.remote(int(signum)): s.title for s in self._slots if s.live}
        answers: dict[str, bool | None] = dict.fromkeys(futures.values())
        try:
            ready, _ = ray.wait(list(futures), num_returns=len(futures), timeout=10.0)
            for f in ready:
                try:
                    answers[futures[f]] = bool(ray.get(f))
                except Exception:  # noqa: BLE001 - a dead host is handled by the next tick
                    pass
        except Exception:  # noqa: BLE001 - a dead host is handled by the next tick
            pass
        return answers


def drain_all(ray: Any, slots: list[Slot]) -> list[bytes]:
    """The output lines every NodeHost still holds."""
    lines: list[bytes] = []
    for slot in slots:
        if slot.host is None:
            continue
        try:
            got, _ = ray.get(slot.host.tick.remote(), timeout=5)
            lines.extend(got)
        except Exception:  # noqa: BLE001 - a gone host has nothing more to say
            pass
    return lines


def kill_hosts(ray: Any, slots: list[Slot]) -> None:
    """Kills every NodeHost of the program (none outlives the launcher), each
    after its temporary folder is removed."""
    for slot in slots:
        if slot.host is not None:
            try:
                ray.get(slot.host.cleanup.remote(), timeout=5)
            except Exception:  # noqa: BLE001 - a gone host leaves its temp folder
                pass
            try:
                ray.kill(slot.host, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            slot.host = None
