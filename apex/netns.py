"""A private network namespace for a run: only loopback, nothing reachable from outside.

Reverb's and Launchpad's servers listen on all interfaces without
authentication (README, Security). Where the kernel allows unprivileged user
and network namespaces, `launch.train --isolate_network` re-executes itself
under `unshare -rn` (a new user namespace mapping the caller to root in it, and
a new network namespace), then brings that namespace's loopback up; all of
apex's traffic is local, so the program runs unchanged and no port is visible
from the host or the network.
"""

from __future__ import annotations

import fcntl
import shutil
import socket
import struct
import subprocess

from apex.errors import ConfigError

ENV_MARK = "APEX_NETNS"
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def unshare_command() -> list[str]:
    """The command prefix that runs a program in a new user + network namespace.

    Raises ConfigError (naming the flag) where it is not available.
    """
    exe = shutil.which("unshare")
    if exe is None:
        raise ConfigError(
            "--isolate_network", True, "a machine with util-linux's unshare (not found on PATH)"
        )
    probe = subprocess.run([exe, "-rn", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise ConfigError(
            "--isolate_network",
            True,
            "a kernel that allows unprivileged user and network namespaces "
            f"(`unshare -rn true` failed: {probe.stderr.strip() or probe.returncode}); "
            "use a firewall instead (README, Security)",
        )
    return [exe, "-rn"]


def loopback_up() -> None:
    """Sets the interface `lo` up (a new network namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def interfaces() -> list[str]:
    """Names of this namespace's network interfaces."""
    return [name for _, name in socket.if_nameindex()]
