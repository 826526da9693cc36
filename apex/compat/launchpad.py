"""Launchpad's private symbols apex touches to launch locally (dm-launchpad 0.5.0):
node processes, their stop window and output, local_mp's launchers and
WorkerManager, the node entry a forked process runs, and Launchpad's flags
defined without importing its package."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

from apex.compat.pins import LAUNCHPAD_PIN, CompatError, require


def in_launchpad_node_process() -> bool:
    """Whether this process is a program node's process of its own: Launchpad 0.5.0
    starts each local_mp node as `python .../launchpad/launch/run_locally/process_entry.py`
    (there is no public way to ask), the Ray launcher as `python -m
    launch.node_process` (argv[0] its path)."""
    if not sys.argv:
        return False
    argv0 = sys.argv[0].replace("\\", "/")
    return argv0.endswith("process_entry.py") or argv0.endswith("launch/node_process.py")


def set_node_termination_window(seconds: float) -> None:
    """Gives this node process `seconds` between a stop and its self-kill.

    Launchpad 0.5.0 reads its stop window (`--lp_termination_notice_secs`, 10 s
    by default) once, into the process-wide WorkerManager's private
    `_termination_notice_secs`; its local_mp cannot pass that flag to node
    processes (a KeyError in its flag forwarding), so it is set here.
    """
    from launchpad.launch import worker_manager

    manager = worker_manager.get_worker_manager()
    current = require(
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
    return require(node, "_constructor", "launchpad PyClassNode._constructor", LAUNCHPAD_PIN)


def set_output_to_files_dir(path: str) -> None:
    """Where `--terminal=output_to_files` writes node logs (one file per node).

    Launchpad 0.5.0 reads LAUNCHPAD_LOGGING_DIR once, when its
    launch_local_output_to_files module is imported (before any entry point
    can set it), into the private module variable `_LOGGING_DIR`; this sets
    that variable (and the environment variable, for anything that reads it later).
    """
    import os

    files = _output_to_files_module()
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

    terminal = run_locally.SEPARATE_TERMINAL_CURRENT_TERMINAL
    _local_launchers(terminal)[terminal] = _launch_with_line_output


def _launch_with_line_output(commands_to_launch: Any) -> Any:
    """Launchpad's launch_in_current_terminal, with launch/node_output.py as the
    per-node wrapper (same worker-manager registration)."""
    import atexit

    manager = new_worker_manager()
    atexit.register(manager.wait)
    for i, command in enumerate(commands_to_launch):
        spawn_with_line_output(manager, command, i)
    return manager


NODE_COLOURS = (36, 33, 32, 34, 35)


def spawn_with_line_output(manager: Any, command: Any, index: int) -> None:
    """Starts one Launchpad command behind `python -m launch.node_output` and
    registers the wrapper's pid with `manager` (Launchpad signals its children)."""
    import os
    import subprocess

    env = dict(os.environ, **command.env_overrides)
    wrapper = [sys.executable, "-m", "launch.node_output", command.title]
    colour = NODE_COLOURS[index % len(NODE_COLOURS)]
    process = subprocess.Popen([*wrapper, str(colour), "--", *command.command_as_list], env=env)
    manager.register_existing_process(command.title, process.pid)


def spawn_to_file(manager: Any, command: Any, path: str) -> None:
    """What Launchpad's launch_and_output_to_files does for one command: the node
    as a process worker of `manager`, stdout and stderr to `path`."""
    import os

    env = dict(os.environ, **command.env_overrides)
    with open(path, "w") as out:
        manager.process_worker(
            command.title, command.command_as_list, env=env, stdout=out, stderr=out
        )


def register_forked_process(manager: Any, title: str, pid: int) -> None:
    """Registers a node forked by launch.zygote with Launchpad's WorkerManager, as
    `register_existing_process` does, but as a process whose disappearance is
    not an error.

    Why: the zygote, not this launcher, is the parent and reaps the process the
    moment it exits, so its pid is gone at once (a spawned child stays a zombie
    until Launchpad waits for it). Launchpad 0.5.0's stop loop calls
    `children()` on every registered process without catching NoSuchProcess,
    which then ended the launcher's wait with 'process PID not found'.
    Reached through WorkerManager's private `_mutex`, `_workers_count` and
    `_active_workers`.
    """
    import psutil

    class _Forked(psutil.Process):
        def children(self, recursive: bool = False) -> list:
            try:
                return super().children(recursive=recursive)
            except psutil.NoSuchProcess:
                return []

    try:
        process = _Forked(pid)
    except psutil.NoSuchProcess:  # it already ended: nothing to watch or stop
        return
    mutex = require(manager, "_mutex", "launchpad WorkerManager._mutex", LAUNCHPAD_PIN)
    counts = require(
        manager, "_workers_count", "launchpad WorkerManager._workers_count", LAUNCHPAD_PIN
    )
    active = require(
        manager, "_active_workers", "launchpad WorkerManager._active_workers", LAUNCHPAD_PIN
    )
    with mutex:
        counts[title] += 1
        active[title].append(process)


def new_worker_manager() -> Any:
    """A Launchpad WorkerManager as local_mp's launchers make one (the first one
    made in a process handles its stop signals)."""
    from launchpad.launch import worker_manager

    return worker_manager.WorkerManager()


def output_to_files_dir() -> str:
    """Where `--terminal=output_to_files` writes node logs (set_output_to_files_dir)."""
    return _output_to_files_module()._LOGGING_DIR  # noqa: SLF001 - checked there


def _output_to_files_module() -> ModuleType:
    """Launchpad's launch_local_output_to_files, which keeps the log folder in
    its private module variable `_LOGGING_DIR` (checked to be there)."""
    from launchpad.launch.run_locally import launch_local_output_to_files as files

    require(
        files, "_LOGGING_DIR", "launchpad launch_local_output_to_files._LOGGING_DIR", LAUNCHPAD_PIN
    )
    return files


def _local_launchers(*terminals: str) -> dict[str, Any]:
    """local_mp's launcher for each terminal mode: run_locally's private
    `_LOCAL_LAUNCHER_MAP`, checked to hold one for each of `terminals`."""
    from launchpad.launch.run_locally import run_locally

    launchers = require(
        run_locally,
        "_LOCAL_LAUNCHER_MAP",
        "launchpad run_locally._LOCAL_LAUNCHER_MAP",
        LAUNCHPAD_PIN,
    )
    for terminal in terminals:
        if terminal not in launchers:
            raise CompatError(f"launchpad run_locally {terminal} launcher", LAUNCHPAD_PIN)
    return launchers


def use_node_launcher(terminal: str, launch: Any) -> None:
    """Makes local_mp start its node commands with `launch(commands) -> WorkerManager`
    for `terminal` ('current_terminal' or 'output_to_files'), in place of the
    launcher Launchpad 0.5.0 picks from its private `run_locally._LOCAL_LAUNCHER_MAP`
    (launch.zygote's fork starter uses this)."""
    _local_launchers(terminal)[terminal] = launch


def node_entry_args(command_as_list: list[str]) -> tuple[str, int, str] | None:
    """(data_file, task_id, init_file) of a local_mp node command
    (`python .../process_entry.py --data_file F --lp_task_id N`), or None when the
    command holds anything else (other flags, flags_to_populate): only a command
    that run_node_entry can run as process_entry.py would is forked."""
    if len(command_as_list) < 2 or not command_as_list[1].endswith("process_entry.py"):
        return None
    values: dict[str, str] = {}
    args = list(command_as_list[2:])
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            return None
        name, sep, value = arg[2:].partition("=")
        if not sep:
            if not args:
                return None
            value = args.pop(0)
        if name not in ("data_file", "lp_task_id", "init_file") or name in values:
            return None
        values[name] = value
    if "data_file" not in values or not values.get("lp_task_id", "").isdigit():
        return None
    return values["data_file"], int(values["lp_task_id"]), values.get("init_file", "")


def run_node_entry(data_file: str, task_id: int, init_file: str = "") -> None:
    """What Launchpad 0.5.0's nodes/python/process_entry.py `main` does, in a
    process forked from launch.zygote (its flags already known: no absl parsing):
    run the init file, load the pickled node functions, make the process's main
    WorkerManager (stop signals, the stop window) and run functions[task_id]."""
    import os

    import cloudpickle
    from launchpad.launch import worker_manager

    sys.path.append(os.getcwd())
    if init_file:
        with open(init_file, "rb") as f:
            cloudpickle.load(f)()
    with open(data_file, "rb") as f:
        functions = cloudpickle.load(f)
    worker_manager.WorkerManager(register_in_thread=True)
    functions[task_id]()


def define_launchpad_flags() -> None:
    """Defines Launchpad's flags (--lp_launch_type, --lp_termination_notice_secs, ...)
    by running Launchpad's own launchpad.flags module, and only that.

    `import launchpad` would define them too, but its package __init__ imports
    courier, numpy and every launcher (0.5 s of CPU), and this process needs none of
    that to refuse a bad flag or config: most of the suite's launch.train processes
    stop there. launchpad.flags imports only absl.flags and launchpad.context, so it
    is imported under a stand-in `launchpad` package (its __init__ not run), which is
    then dropped: the first real `import launchpad` runs the package as always and
    finds launchpad.flags (and context) already imported, so every flag is defined
    once, by Launchpad, exactly as before.
    """
    if "launchpad" in sys.modules or "launchpad.flags" in sys.modules:
        return
    spec = importlib.util.find_spec("launchpad")
    if spec is None or spec.submodule_search_locations is None:
        import launchpad  # noqa: F401 - not installed: the ImportError it always was

        return
    sys.modules["launchpad"] = importlib.util.module_from_spec(spec)
    try:
        importlib.import_module("launchpad.flags")
    finally:
        del sys.modules["launchpad"]


def import_launchpad() -> ModuleType:
    """`import launchpad`, with the package attributes a plain first import sets
    (`launchpad.context`, `launchpad.flags`): define_launchpad_flags imported those
    submodules before the package, so its __init__ does not set them all."""
    import launchpad

    for name in ("context", "flags"):
        module = sys.modules.get(f"launchpad.{name}")
        if module is not None and not hasattr(launchpad, name):
            setattr(launchpad, name, module)
    return launchpad


def check_symbols() -> None:
    """Each symbol above exists in the installed Launchpad (tests/test_compat.py)."""
    from launchpad.launch import worker_manager
    from launchpad.nodes.python import node as python_node

    manager_cls = worker_manager.WorkerManager
    if "_termination_notice_secs" not in manager_cls.__init__.__code__.co_names:
        raise CompatError("launchpad WorkerManager._termination_notice_secs", LAUNCHPAD_PIN)
    if "_constructor" not in python_node.PyClassNode.__init__.__code__.co_names:
        raise CompatError("launchpad PyClassNode._constructor", LAUNCHPAD_PIN)
    from launchpad.launch.run_locally import run_locally

    _output_to_files_module()
    _local_launchers(
        run_locally.SEPARATE_TERMINAL_CURRENT_TERMINAL,
        run_locally.SEPARATE_TERMINAL_OUTPUT_TO_FILES,
    )
    # The fields of Launchpad's CommandToLaunch that _launch_with_line_output reads.
    fields = set(run_locally.CommandToLaunch._fields) | set(dir(run_locally.CommandToLaunch))
    if not {"title", "command_as_list", "env_overrides"} <= fields:
        raise CompatError("launchpad run_locally.CommandToLaunch fields", LAUNCHPAD_PIN)
    # What run_node_entry emulates: process_entry's main, as in 0.5.0.
    manager_code = worker_manager.WorkerManager.__init__.__code__
    if "register_in_thread" not in manager_code.co_varnames:
        raise CompatError("launchpad WorkerManager(register_in_thread=)", LAUNCHPAD_PIN)
