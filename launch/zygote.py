"""The fork server (zygote) that starts local_mp's node processes.

A node process spent ~4.5 s of CPU importing TensorFlow, Reverb and Launchpad,
each node on its own. launch.train imports them once; right after, before it
has made any thread, channel, TensorFlow runtime or Reverb object, it forks
this zygote (`Zygote.start`). Launchpad's local_mp then hands its node commands
to `launch_nodes` (apex.compat.use_node_launcher) instead of starting a Python
process per command, and the zygote forks each node from its warm copy:

    launcher -- zygote -- wrapper (title) -- node (process_entry.py's work)

- The wrapper is launch/node_output.py's job in a forked process: it ignores
  SIGINT/SIGTERM/SIGQUIT, passes the node's output on as whole, filtered,
  prefixed lines (or, with --terminal=output_to_files, gives the node its log
  file) and exits with the node's code. Its pid is what the launcher registers
  with Launchpad's WorkerManager, as it registers node_output's today: the stop
  signals Launchpad sends to the wrapper's children reach the node, a kill
  reaches the whole tree.
- The node: the launcher's environment (sent with each request), stdout and
  stderr on the descriptors the launcher sent, signal handlers as a fresh
  Python has them, fresh random seeds, then exactly what Launchpad's
  process_entry.py does (apex.compat.run_node_entry).
- The zygote stays single-threaded: it counts its threads (/proc/self/task)
  when it starts and refuses a fork request when it has more (a fork would copy
  a lock another thread may hold). launch_nodes then starts that node the old
  way (a spawned process) and says so in one line.
- It reaps its children and reports each exit status to the launcher; it exits
  when the launcher's socket closes, and dies with the launcher
  (PR_SET_PDEATHSIG), so nothing is left behind.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from apex import ApexError, compat

_MAX_MESSAGE = 1 << 20
_PR_SET_PDEATHSIG = 1
_WRAPPER_FAILED = 70


class ZygoteError(ApexError, RuntimeError):
    """The zygote cannot fork (it refused, or it is gone)."""


def thread_count() -> int:
    """This process's OS threads."""
    return len(os.listdir("/proc/self/task"))


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _send(sock: socket.socket, message: dict, wait: bool = True) -> None:
    try:
        sock.send(json.dumps(message).encode(), 0 if wait else socket.MSG_DONTWAIT)
    except OSError:  # the launcher is gone (or, for an exit report, not reading)
        pass


class Zygote:
    """The launcher's handle on its zygote process."""

    def __init__(self, pid: int, sock: socket.socket):
        self.pid = pid
        self._sock = sock
        self.exits: dict[int, int] = {}  # wrapper pid -> exit code, as reported

    @classmethod
    def start(cls, on_start: Callable[[], None] | None = None) -> Zygote:
        """Forks the zygote from this process (call it before this process starts
        any thread, channel or TensorFlow runtime). `on_start` runs in the zygote
        after it counted its threads (tests use it to start one)."""
        _flush_std()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        launcher = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = _WRAPPER_FAILED
            try:
                ours.close()
                code = _serve(theirs, launcher, on_start)
            except BaseException:  # noqa: BLE001 - never unwind into the launcher's frames
                traceback.print_exc()
            finally:
                os._exit(code)
        theirs.close()
        return cls(pid, ours)

    def fork_node(self, spec: dict, fds: list[int]) -> int:
        """Asks the zygote for one node (see _run_wrapper for `spec`); `fds`: the
        descriptors its output goes to. Returns the wrapper's pid."""
        try:
            socket.send_fds(self._sock, [json.dumps(spec).encode()], fds)
            while True:
                data = self._sock.recv(_MAX_MESSAGE)
                if not data:
                    raise ZygoteError(f"the zygote (pid {self.pid}) has exited")
                message = json.loads(data)
                if "exit" in message:
                    self.exits[int(message["exit"])] = int(message["code"])
                elif "error" in message:
                    raise ZygoteError(message["error"])
                else:
                    return int(message["pid"])
        except OSError as err:
            raise ZygoteError(f"the zygote (pid {self.pid}) cannot be reached: {err}") from err

    def collect_exits(self) -> dict[int, int]:
        """Reads the exit reports that arrived; returns every one seen so far."""
        while True:
            try:
                data = self._sock.recv(_MAX_MESSAGE, socket.MSG_DONTWAIT)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            message = json.loads(data)
            if "exit" in message:
                self.exits[int(message["exit"])] = int(message["code"])
        return self.exits

    def close(self, timeout: float = 5.0) -> None:
        """Closes the socket (the zygote then exits) and reaps the zygote."""
        import time

        self._sock.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid:
                return
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return
            time.sleep(0.02)


# ------------------------------------------------------------------ the zygote
def _serve(sock: socket.socket, launcher: int, on_start: Callable[[], None] | None) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != launcher:  # the launcher died before prctl
        return 0
    # Launchpad stops nodes through their wrappers; Ctrl-C reaches the whole
    # process group: the zygote waits for the launcher to close its socket.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    known = thread_count()
    if on_start is not None:
        on_start()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.2)
        _reap(sock)
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 4)
        except OSError:
            data, fds = b"", []
        if not data:
            return 0  # the launcher closed its end (or is gone)
        threads = thread_count()
        if threads > known:
            for fd in fds:
                os.close(fd)
            _send(
                sock,
                {
                    "error": f"the zygote (pid {os.getpid()}) has {threads} threads, {known} "
                    "when it started: a fork could copy a lock another thread holds; "
                    "it refuses to fork"
                },
            )
            continue
        spec = json.loads(data)
        _flush_std()
        pid = os.fork()
        if pid == 0:
            code = _WRAPPER_FAILED
            try:
                sock.close()
                code = _run_wrapper(spec, fds)
            except BaseException:  # noqa: BLE001 - never unwind into the zygote's frames
                traceback.print_exc()
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        _send(sock, {"pid": pid})


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)}, wait=False)


def _wait(pid: int) -> int:
    """The exit code of child `pid`, as Popen gives it (-N: killed by signal N)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _shell_code(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N


def _run_wrapper(spec: dict, fds: list[int]) -> int:
    """The wrapper: `spec` = {title, mode ('lines' | 'file'), colour, tty, keep_all,
    env, argv, data_file, task_id, init_file}; fds[0]: where output goes (the
    launcher's stdout, or the node's log file); fds[1], if sent: where the
    wrapper's own notices go (the launcher's stdout, in 'file' mode).

    An actor's node process that dies of a signal nobody sent to stop it
    (SIGKILL, SIGSEGV, ...) is forked again from this wrapper's warm copy
    (launch.node_restarts: the same slot, apex.restart's policy); this pid,
    the one Launchpad stops, stays the same."""
    from launch.node_restarts import ProcessRestarts

    out = fds[0]
    notices = fds[1] if len(fds) > 1 else out
    others = [fd for fd in fds[1:] if fd != out]  # not for the node
    restarts = ProcessRestarts.for_node(spec["title"], int(spec["task_id"]), spec["env"])
    death = None  # the code of the death that made the slot give up
    while True:
        started = time.monotonic()
        pid, code = _run_node_once(spec, out, others)
        ran = time.monotonic() - started
        step = None if restarts is None else restarts.after_exit(pid, code, ran)
        if step is None:  # after a give-up start, the wrapper ends as the death did
            return _shell_code(code if death is None else death)
        if step.give_up:
            death = code
        _notice(notices, f"[apex] {step.message}")
        if not restarts.wait(step.wait):
            return _shell_code(code)
        spec = dict(spec, env=dict(spec["env"], **step.env))


def _notice(fd: int, line: str) -> None:
    from apex import write_lines

    write_lines(fd, [(line + "\n").encode()])


def _run_node_once(spec: dict, out: int, others: list[int]) -> tuple[int, int]:
    """Forks the node, passes its output on until it ends; (its pid, its exit
    code). `others`: the wrapper's descriptors the node must not hold."""
    if spec["mode"] == "file":
        node = _fork_node(spec, out, keep=others)
        return node, _wait(node)
    read_end, write_end = os.pipe()
    node = _fork_node(spec, write_end, keep=[read_end, out, *others])
    os.close(write_end)
    from apex import LineFilter, write_lines

    lines = LineFilter(
        f"[{spec['title']}] ", int(spec["colour"]), tty=bool(spec["tty"]), keep_all=spec["keep_all"]
    )
    reader = True
    while True:  # drain the node to its end even with no reader: it must never block
        data = os.read(read_end, 65536)
        if not data:
            break
        reader = reader and write_lines(out, lines.feed(data))
    os.close(read_end)
    if reader:
        write_lines(out, lines.flush())
    return node, _wait(node)


def _fork_node(spec: dict, out: int, keep: list[int]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for fd in keep:
            os.close(fd)
        os.dup2(out, 1)
        os.dup2(out, 2)
        if out > 2:
            os.close(out)
        code = _run_node(spec)
    except BaseException:  # noqa: BLE001 - never unwind into the wrapper's frames
        traceback.print_exc()
    finally:
        _flush_std()
        os._exit(code)


def _stream(fd: int) -> Any:
    import io

    raw = open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115 - the process's own stdio
    return io.TextIOWrapper(
        raw, encoding="utf-8", errors="backslashreplace", line_buffering=True, write_through=True
    )


def _run_node(spec: dict) -> int:
    """In the node process: a fresh process's state, then process_entry.py's work."""
    for sig in (signal.SIGTERM, signal.SIGQUIT, signal.SIGALRM, signal.SIGUSR1, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(spec["env"])
    sys.stdout = _stream(1)
    sys.stderr = _stream(2)
    sys.argv = list(spec["argv"])
    random.seed()  # a spawned process seeds from the OS; forked copies share a state
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    for path in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if path and path not in sys.path:
            sys.path.insert(1, path)
    code = 0
    try:
        compat.run_node_entry(spec["data_file"], int(spec["task_id"]), spec["init_file"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a process
        traceback.print_exc()
        code = 1
    # What the interpreter does at its end: join non-daemon threads, run atexit.
    main = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    import atexit

    atexit._run_exitfuncs()  # noqa: SLF001 - os._exit follows: run them as an exit would
    return code


# ------------------------------------------------------------- the launcher side
def launch_nodes(zygote: Zygote, terminal: str, keep_all: bool) -> Callable[[Any], Any]:
    """Launchpad's local launcher for `terminal` (current_terminal or
    output_to_files), forking every node command it can from `zygote`; one it
    cannot (a command process_entry.py is not run with as apex's programs are, or
    a zygote that refuses) starts as a process of its own, as before."""

    def launch(commands: Any) -> Any:
        import atexit

        manager = compat.new_worker_manager()
        atexit.register(manager.wait)
        tty = os.isatty(1)
        logs = compat.output_to_files_dir() if terminal == "output_to_files" else ""
        titles: list[str] = []
        for i, command in enumerate(commands):
            path = ""
            if logs:  # as Launchpad's launch_and_output_to_files names the files
                title, count = command.title, 0
                while title in titles:
                    count += 1
                    title = f"{command.title}_{count}"
                titles.append(title)
                path = os.path.join(logs, title)
                os.makedirs(os.path.dirname(path), exist_ok=True)
            entry = compat.node_entry_args(list(command.command_as_list))
            reason = "its command is not process_entry.py's" if entry is None else ""
            if entry is not None:
                data_file, task_id, init_file = entry
                spec = {
                    "title": command.title,
                    "mode": "file" if logs else "lines",
                    "colour": compat.NODE_COLOURS[i % len(compat.NODE_COLOURS)],
                    "tty": tty,
                    "keep_all": keep_all,
                    "env": dict(os.environ, **command.env_overrides),
                    "argv": list(command.command_as_list[1:]),
                    "data_file": data_file,
                    "task_id": task_id,
                    "init_file": init_file,
                }
                try:
                    if logs:
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                        try:  # the wrapper's notices (a restart) go to the terminal
                            pid = zygote.fork_node(spec, [fd, 1])
                        finally:
                            os.close(fd)
                    else:
                        sys.stdout.flush()
                        pid = zygote.fork_node(spec, [1])
                    compat.register_forked_process(manager, command.title, pid)
                    continue
                except ZygoteError as err:
                    reason = str(err)
            print(
                f"[apex] node start: {command.title} starts as a process of its own ({reason})",
                flush=True,
            )
            if logs:
                compat.spawn_to_file(manager, command, path)
            else:
                compat.spawn_with_line_output(manager, command, i)
        return manager

    return launch
