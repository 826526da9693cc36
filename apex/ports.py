"""Pre-launch checks of the ports a program binds."""

from __future__ import annotations

import socket

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
