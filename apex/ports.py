"""Pre-launch checks of the ports a program binds, and a wait for a server's port."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from apex.errors import ConfigError


def check_port_free(field: str, port: int) -> None:
    """Raises ConfigError if a process already listens on `port`.

    Needed because gRPC servers (Reverb's) bind with SO_REUSEPORT: a second
    server on a taken port starts without an error and the two then share
    the connections.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine
        try:
            s.bind(("0.0.0.0", port))
        except OSError as err:
            raise ConfigError(
                field, port, f"a free port; it is in use by another process ({err.strerror})"
            ) from None


def wait_until_listening(
    address: str,
    deadline: float,
    should_stop: Callable[[], bool] | None = None,
    interval: float = 0.02,
) -> bool:
    """Polls until a TCP connection to `address` ('host:port') is accepted, the
    unix time `deadline` passes or `should_stop()`; True if it was accepted.

    A gRPC channel whose first connection is refused waits out gRPC's reconnect
    back-off (1 s at first, not settable from Python) before it tries again: an
    actor that asked the learner for its first parameters while the learner was
    still building its networks waited ~1 s longer than needed. Its
    first call is made once the port listens instead.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "localhost"
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return True
        except (OSError, ValueError):
            pass
        if time.time() >= deadline or (should_stop is not None and should_stop()):
            return False
        time.sleep(interval)
