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

import importlib
import importlib.util
import sys
from types import ModuleType
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
def reverb_trajectory_writer(
    client: Any, chunk_length: int, signature_timeout_ms: int, keep_alive: int | None = None
) -> Any:
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
    keep = max(int(chunk_length), int(keep_alive or 0))  # each column's newest refs kept usable
    return new_writer(options(int(chunk_length), keep), int(signature_timeout_ms))


# --------------------------------------------------------------- Launchpad
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
    mutex = _require(manager, "_mutex", "launchpad WorkerManager._mutex", LAUNCHPAD_PIN)
    counts = _require(
        manager, "_workers_count", "launchpad WorkerManager._workers_count", LAUNCHPAD_PIN
    )
    active = _require(
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
    from launchpad.launch.run_locally import launch_local_output_to_files as files

    return _require(
        files, "_LOGGING_DIR", "launchpad launch_local_output_to_files._LOGGING_DIR", LAUNCHPAD_PIN
    )


def use_node_launcher(terminal: str, launch: Any) -> None:
    """Makes local_mp start its node commands with `launch(commands) -> WorkerManager`
    for `terminal` ('current_terminal' or 'output_to_files'), in place of the
    launcher Launchpad 0.5.0 picks from its private `run_locally._LOCAL_LAUNCHER_MAP`
    (launch.zygote's fork starter uses this)."""
    from launchpad.launch.run_locally import run_locally

    launchers = _require(
        run_locally,
        "_LOCAL_LAUNCHER_MAP",
        "launchpad run_locally._LOCAL_LAUNCHER_MAP",
        LAUNCHPAD_PIN,
    )
    if terminal not in launchers:
        raise CompatError(f"launchpad run_locally {terminal} launcher", LAUNCHPAD_PIN)
    launchers[terminal] = launch


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


# ------------------------------------------------- Launchpad on other launchers
# launch.ray_launch starts the very nodes `make_program` builds, each as
# Launchpad's own node entry (process_entry.py) in a process of its own, the
# way local_mp does, but on the host Ray picks. What it needs of a Launchpad
# 0.5.0 program is reached through these.
def program_groups(program: Any) -> list[tuple[str, list[Any]]]:
    """[(label, [node, ...])] of a Launchpad program, in the order they were added."""
    groups = _require(program, "groups", "launchpad Program.groups", LAUNCHPAD_PIN)
    return [(label, list(nodes)) for label, nodes in groups.items()]


class StaticAddress:
    """A Launchpad address builder that returns one fixed `host:port` (what
    `lp.AbstractAddressBuilder` asks of a launch type's builder)."""

    def __init__(self, address: str):
        self.address = address

    def build(self) -> str:
        return self.address


def prepare_nodes(program: Any, program_stopper: Any) -> None:
    """Gives every node the launch context local_mp gives it (LOCAL_MULTI_PROCESSING,
    no launch config) with `program_stopper` as what `lp.stop()` calls in it, and
    lets every handle know its node (as local_mp's launch does before binding)."""
    from launchpad import context

    for _label, nodes in program_groups(program):
        for node in nodes:
            ctx = _require(node, "launch_context", "launchpad Node.launch_context", LAUNCHPAD_PIN)
            ctx.initialize(context.LaunchType.LOCAL_MULTI_PROCESSING, None, program_stopper)
    for label, nodes in program_groups(program):
        for node in nodes:
            for handle in node.input_handles:
                handle.connect(node, label)


def bind_node_addresses(node: Any, addresses: list[str]) -> None:
    """Binds each address a node owns or references (`node.addresses`, in order)."""
    owned = list(node.addresses)
    if len(owned) != len(addresses):
        raise ValueError(f"{len(owned)} addresses to bind, {len(addresses)} given")
    for address, value in zip(owned, addresses):
        builder = StaticAddress(value)
        address.bind(builder)


def node_address(node: Any) -> str:
    """HOST:PORT of the first address a node owns, as bound (bind_node_addresses)."""
    return str(_require(node, "addresses", "launchpad Node.addresses", LAUNCHPAD_PIN)[0].resolve())


def node_entry(node: Any) -> tuple[bytes, list[str]]:
    """(payload, argv tail): the node's function pickled as local_mp pickles it, and
    the command that runs it once the payload is in a file: argv tail + [path]."""
    import os

    import cloudpickle
    from launchpad.launch import serialization
    from launchpad.nodes.python import local_multi_processing

    serialization.enable_lru_cache_pickling_once()
    function = _require(node, "function", "launchpad PyNode.function", LAUNCHPAD_PIN)
    entry = os.path.join(os.path.dirname(local_multi_processing.__file__), "process_entry.py")
    if not os.path.isfile(entry):
        raise CompatError("launchpad nodes/python/process_entry.py", LAUNCHPAD_PIN)
    return cloudpickle.dumps([function]), [entry, "--lp_task_id=0", "--data_file"]


def courier_address(client: Any) -> str | None:
    """The 'host:port' a courier client (a dereferenced Launchpad handle) dials,
    which courier.Client keeps private; None for any other object (an in-process
    source, a test's fake)."""
    try:
        from courier.python.client import Client
    except ImportError:
        return None
    if not isinstance(client, Client):
        return None
    address = getattr(client, "_address", None)
    return address if isinstance(address, str) and ":" in address else None


def courier_server(instance: Any, port: int, thread_pool_size: int = 16) -> Any:
    """A started Courier server exposing `instance`'s public methods (what a
    CourierNode serves), through Launchpad's courier_utils; `thread_pool_size`
    calls run at once (courier's default, 16)."""
    from launchpad.nodes.courier import courier_utils

    server = courier_utils.make_courier_server(
        instance, port=port, thread_pool_size=thread_pool_size
    )
    server.Start()
    return server


# -------------------------------------------------------------- TensorFlow
# TF 2.8's eager runtime gives each tf.function call a rendezvous of its own and
# never frees it: ~400 B per call, forever (tensorflow/tensorflow#50765; fixed in
# TF 2.12). A learner calls its SGD function ~50 times a second for days. The
# runtime can instead hand every call one shared rendezvous, a switch TF 2.8
# keeps in C++ (EagerContext::SetReuseRendezvousForFunctions, no Python API).
_REUSE_RENDEZVOUS = "_ZN10tensorflow12EagerContext30SetReuseRendezvousForFunctionsEb"
_rendezvous_shared: bool | None = None


def share_function_rendezvous() -> bool:
    """Stop TF 2.8's per-call leak of tf.function calls in this process; True when done.

    Call it before the process's first tf.function call (a function's kernel
    keeps the rendezvous it was made with). It does nothing (False) where it is
    unsafe or not needed: a TensorFlow other than 2.8, TFRT, or any GPU/TPU
    visible. A shared rendezvous is only a hazard for functions that send
    tensors between devices (two concurrent calls could swap them); on a
    CPU-only process every function runs on one device and sends nothing.
    Idempotent.
    """
    global _rendezvous_shared
    if _rendezvous_shared is not None:
        return _rendezvous_shared
    _rendezvous_shared = False
    import ctypes

    import tensorflow as tf
    from tensorflow.python.eager import context

    if not tf.__version__.startswith("2.8."):
        return False
    if any(d.device_type != "CPU" for d in tf.config.list_physical_devices()):
        return False
    ctx = context.context()
    if getattr(ctx, "_use_tfrt", False):
        return False
    ctx.ensure_initialized()
    capsule = _require(ctx, "_handle", "tf context._handle", TF_PIN)
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    pointer = get_pointer(capsule, get_name(capsule))
    library = ctypes.CDLL(_tf_internal_library())
    setter = _require(
        library, _REUSE_RENDEZVOUS, "EagerContext::SetReuseRendezvousForFunctions", TF_PIN
    )
    setter.argtypes = [ctypes.c_void_p, ctypes.c_bool]
    setter.restype = None
    # TFE_Context* is the EagerContext* (its first base) in TF 2.8's eager runtime.
    setter(pointer, True)
    _rendezvous_shared = True
    return True


def _tf_internal_library() -> str:
    import os

    import tensorflow as tf

    return os.path.join(os.path.dirname(tf.__file__), "python", "_pywrap_tensorflow_internal.so")


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
    if run_locally.SEPARATE_TERMINAL_OUTPUT_TO_FILES not in launchers:
        raise CompatError("launchpad run_locally output_to_files launcher", LAUNCHPAD_PIN)
    # What run_node_entry emulates: process_entry's main, as in 0.5.0.
    manager_code = worker_manager.WorkerManager.__init__.__code__
    if "register_in_thread" not in manager_code.co_varnames:
        raise CompatError("launchpad WorkerManager(register_in_thread=)", LAUNCHPAD_PIN)
    # What launch.ray_launch reaches (the "other launchers" section above).
    import os

    import launchpad as lp
    from launchpad.launch import serialization
    from launchpad.nodes.courier import courier_utils
    from launchpad.nodes.python import local_multi_processing

    _require(lp.Program("check"), "groups", "launchpad Program.groups", LAUNCHPAD_PIN)
    _require(python_node.PyNode, "launch_context", "launchpad Node.launch_context", LAUNCHPAD_PIN)
    _require(python_node.PyNode, "function", "launchpad PyNode.function", LAUNCHPAD_PIN)
    _require(
        serialization,
        "enable_lru_cache_pickling_once",
        "launchpad serialization.enable_lru_cache_pickling_once",
        LAUNCHPAD_PIN,
    )
    _require(
        courier_utils,
        "make_courier_server",
        "launchpad courier_utils.make_courier_server",
        LAUNCHPAD_PIN,
    )
    entry = os.path.join(os.path.dirname(local_multi_processing.__file__), "process_entry.py")
    if not os.path.isfile(entry):
        raise CompatError("launchpad nodes/python/process_entry.py", LAUNCHPAD_PIN)


def _check_tensorflow() -> None:
    import ctypes

    from tensorflow.python.eager import context

    if not isinstance(getattr(context.Context, "_handle", None), property):
        raise CompatError("tf context._handle", TF_PIN)
    _require(
        ctypes.CDLL(_tf_internal_library()),
        _REUSE_RENDEZVOUS,
        "EagerContext::SetReuseRendezvousForFunctions",
        TF_PIN,
    )


SYMBOLS: dict[str, Any] = {
    "reverb": _check_reverb,
    "launchpad": _check_launchpad,
    "tensorflow": _check_tensorflow,
}
