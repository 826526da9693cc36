"""The launcher's exit codes (README "Exit codes"), and the signals it was sent
that decide them."""

from __future__ import annotations

import signal

from apex import StopReason

EXIT_OK = 0  # the run reached its own stop criterion
EXIT_NODE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
# SIGINT/SIGTERM sent to the launcher, in order.
SIGNALS_SEEN: list[int] = []


def record_signals() -> None:
    """Notes SIGINT/SIGTERM sent to the launcher (for its exit code), then lets
    Launchpad's own handlers do the orderly stop."""
    for sig in EXIT_SIGNAL:
        previous = signal.getsignal(sig)

        def handler(signum, frame, previous=previous):
            SIGNALS_SEEN.append(signum)
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                raise KeyboardInterrupt

        signal.signal(sig, handler)


def exit_code(summary: dict | None, failed: bool) -> int:
    """0 for a run that stopped on its own criterion, 1 for a failed node, 130/143
    for a run stopped by SIGINT/SIGTERM."""
    if failed or (summary or {}).get("stop_reason") == StopReason.NODE_FAILED.value:
        return EXIT_NODE_FAILED
    reason = (summary or {}).get("stop_reason")
    if reason in (None, StopReason.STOPPED.value):
        for sig in (signal.SIGINT, signal.SIGTERM):
            if sig in SIGNALS_SEEN:
                return EXIT_SIGNAL[sig]
    return EXIT_OK
