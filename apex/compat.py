"""Every private or version-specific symbol of Reverb, Launchpad and TensorFlow
that apex touches, in one place.

apex pins dm-reverb 0.7.0, dm-launchpad 0.5.0 and tensorflow-cpu 2.8.4
(pyproject.toml says why). The public APIs of those versions do not offer a
few things apex needs; each is reached here and nowhere else, and each
accessor fails loudly (`CompatError`, naming the symbol and the pinned
version) instead of falling back silently. `tests/test_compat.py` asserts
that every symbol listed in `SYMBOLS` exists with the pinned versions.
"""

from __future__ import annotations

import sys
from typing import Any

from apex.errors import ApexError


class CompatError(ApexError, RuntimeError):
    """A private symbol apex relies on is missing: the installed version differs
    from the pinned one."""

    def __init__(self, symbol: str, pinned: str, detail: str = ""):
        self.symbol = symbol
        super().__init__(
            f"{symbol} is missing ({pinned} is the version apex is pinned to and tested "
            f"with{'; ' + detail if detail else ''}): reinstall with ./scripts/setup.sh"
        )


REVERB_PIN = "dm-reverb 0.7.0"
LAUNCHPAD_PIN = "dm-launchpad 0.5.0"
TF_PIN = "tensorflow-cpu 2.8.4"


def _require(obj: Any, attr: str, symbol: str, pinned: str) -> Any:
    try:
        return getattr(obj, attr)
    except AttributeError:
        raise CompatError(symbol, pinned) from None


# ------------------------------------------------------------------ Reverb
def reverb_trajectory_writer(client: Any, chunk_length: int, signature_timeout_ms: int) -> Any:
    """Reverb's C++ TrajectoryWriter (`reverb.pybind`) on `client`'s connection.

    Why not the public `reverb.TrajectoryWriter`: its Python layer builds a
    history of column references per step (a few tens of microseconds per
    env step, measured in bench/components.py); apex writes pre-packed steps
    and needs none of it. Reached through `reverb.pybind.ConstantChunkerOptions`
    and `reverb.Client._client.NewTrajectoryWriter`, both private in 0.7.0.
    """
    from reverb import pybind

    options = _require(
        pybind, "ConstantChunkerOptions", "reverb.pybind.ConstantChunkerOptions", REVERB_PIN
    )
    cpp_client = _require(client, "_client", "reverb.Client._client", REVERB_PIN)
    new_writer = _require(
        cpp_client, "NewTrajectoryWriter", "reverb.Client._client.NewTrajectoryWriter", REVERB_PIN
    )
    return new_writer(options(int(chunk_length), int(chunk_length)), int(signature_timeout_ms))


# --------------------------------------------------------------- Launchpad
def in_launchpad_node_process() -> bool:
    """Whether this process is a local_mp node process of its own (Launchpad 0.5.0
    starts each node as `python .../launchpad/launch/run_locally/process_entry.py`;
    there is no public way to ask)."""
    return bool(sys.argv) and sys.argv[0].endswith("process_entry.py")


def set_node_termination_window(seconds: float) -> None:
    """Gives this node process `seconds` between a stop and its self-kill.

    Launchpad 0.5.0 reads its stop window (`--lp_termination_notice_secs`, 10 s
    by default) once, into the process-wide WorkerManager's private
    `_termination_notice_secs`; its local_mp cannot pass that flag to node
    processes (a KeyError in its flag forwarding), so it is set here.
    """
    from launchpad.launch import worker_manager

    manager = worker_manager.get_worker_manager()
    current = _require(
        manager,
        "_termination_notice_secs",
        "launchpad WorkerManager._termination_notice_secs",
        LAUNCHPAD_PIN,
    )
    if not isinstance(current, (int, float)):
        raise CompatError(
            "launchpad WorkerManager._termination_notice_secs",
            LAUNCHPAD_PIN,
            f"it holds {current!r}, not a number of seconds",
        )
    if current <= 0:  # not the process's main manager: it enforces no window
        return
    manager._termination_notice_secs = seconds  # noqa: SLF001 - see the docstring


def node_constructor(node: Any) -> Any:
    """The class or function a Launchpad CourierNode/PyNode builds its object from
    (`node._constructor`, private in 0.5.0)."""
    return _require(node, "_constructor", "launchpad PyClassNode._constructor", LAUNCHPAD_PIN)


def set_output_to_files_dir(path: str) -> None:
    """Where `--terminal=output_to_files` writes node logs (one file per node).

    Launchpad 0.5.0 reads LAUNCHPAD_LOGGING_DIR once, when its
    launch_local_output_to_files module is imported (before any entry point
    can set it), into the private module variable `_LOGGING_DIR`; this sets
    that variable (and the environment variable, for anything that reads it later).
    """
    import os

    from launchpad.launch.run_locally import launch_local_output_to_files as files

    _require(
        files, "_LOGGING_DIR", "launchpad launch_local_output_to_files._LOGGING_DIR", LAUNCHPAD_PIN
    )
    os.makedirs(path, exist_ok=True)
    files._LOGGING_DIR = path  # noqa: SLF001 - see the docstring
    os.environ["LAUNCHPAD_LOGGING_DIR"] = path


def use_line_output() -> None:
    """Makes local_mp's `current_terminal` mode start each node behind
    `launch/node_output.py` (whole, filtered lines; see apex.output) instead of
    Launchpad's bash + sed `decorate_output`.

    Launchpad 0.5.0 picks its local launcher from the private dict
    `run_locally._LOCAL_LAUNCHER_MAP`; apex puts its own function there.
    """
    from launchpad.launch.run_locally import run_locally

    launchers = _require(
        run_locally,
        "_LOCAL_LAUNCHER_MAP",
        "launchpad run_locally._LOCAL_LAUNCHER_MAP",
        LAUNCHPAD_PIN,
    )
    if run_locally.SEPARATE_TERMINAL_CURRENT_TERMINAL not in launchers:
        raise CompatError("launchpad run_locally current_terminal launcher", LAUNCHPAD_PIN)
    launchers[run_locally.SEPARATE_TERMINAL_CURRENT_TERMINAL] = _launch_with_line_output


def _launch_with_line_output(commands_to_launch: Any) -> Any:
    """Launchpad's launch_in_current_terminal, with launch/node_output.py as the
    per-node wrapper (same worker-manager registration)."""
    import atexit
    import os
    import subprocess

    from launchpad.launch import worker_manager

    manager = worker_manager.WorkerManager()
    atexit.register(manager.wait)
    palette = (36, 33, 32, 34, 35)
    for i, command in enumerate(commands_to_launch):
        env = dict(os.environ, **command.env_overrides)
        wrapper = [sys.executable, "-m", "launch.node_output", command.title]
        process = subprocess.Popen(
            [*wrapper, str(palette[i % len(palette)]), "--", *command.command_as_list], env=env
        )
        manager.register_existing_process(command.title, process.pid)
    return manager


# Every symbol above, as (description, importable check). tests/test_compat.py
# runs each check against the installed packages.
def _check_reverb() -> None:
    import reverb
    from reverb import pybind

    _require(pybind, "ConstantChunkerOptions", "reverb.pybind.ConstantChunkerOptions", REVERB_PIN)
    _require(
        pybind.Client, "NewTrajectoryWriter", "reverb.pybind.Client.NewTrajectoryWriter", REVERB_PIN
    )
    if "_client" not in reverb.Client.__init__.__code__.co_names:
        raise CompatError("reverb.Client._client", REVERB_PIN)


def _check_launchpad() -> None:
    from launchpad.launch import worker_manager
    from launchpad.nodes.python import node as python_node

    manager_cls = worker_manager.WorkerManager
    if "_termination_notice_secs" not in manager_cls.__init__.__code__.co_names:
        raise CompatError("launchpad WorkerManager._termination_notice_secs", LAUNCHPAD_PIN)
    if "_constructor" not in python_node.PyClassNode.__init__.__code__.co_names:
        raise CompatError("launchpad PyClassNode._constructor", LAUNCHPAD_PIN)
    from launchpad.launch.run_locally import launch_local_output_to_files as files

    _require(
        files, "_LOGGING_DIR", "launchpad launch_local_output_to_files._LOGGING_DIR", LAUNCHPAD_PIN
    )

    from launchpad.launch.run_locally import run_locally

    launchers = _require(
        run_locally,
        "_LOCAL_LAUNCHER_MAP",
        "launchpad run_locally._LOCAL_LAUNCHER_MAP",
        LAUNCHPAD_PIN,
    )
    if run_locally.SEPARATE_TERMINAL_CURRENT_TERMINAL not in launchers:
        raise CompatError("launchpad run_locally current_terminal launcher", LAUNCHPAD_PIN)
    # The fields of Launchpad's CommandToLaunch that _launch_with_line_output reads.
    fields = set(run_locally.CommandToLaunch._fields) | set(dir(run_locally.CommandToLaunch))
    if not {"title", "command_as_list", "env_overrides"} <= fields:
        raise CompatError("launchpad run_locally.CommandToLaunch fields", LAUNCHPAD_PIN)


SYMBOLS: dict[str, Any] = {
    "reverb": _check_reverb,
    "launchpad": _check_launchpad,
}
