"""Helpers for tests that wait: `wait_until` (the one way a test waits for
something to happen), and for multi-process tests: launch the entry point,
find leftover processes.

No test sleeps and then assumes: it polls an observable with `wait_until`
until it holds or a deadline passes. Deadlines are hang guards, generous
enough for a loaded machine, never claims about speed.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN_VAR = "APEX_TEST_RUN_TOKEN"

# Hang guards (seconds). A loaded 2-core box took 104 s from launch to a
# program's first insert (stack_and_limits.md, B5): these leave room for that.
STARTUP_TIMEOUT = 300.0
"""Until a launched program's learner has done its first steps."""
STOP_TIMEOUT = 120.0
"""Until a stopped program's launcher has exited and every process of it is gone."""

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.2,
) -> T:
    """Calls `predicate` every `interval` s until it returns something truthy,
    and returns that. Past `timeout` s raises AssertionError naming `what`
    (a string, or a callable giving one, e.g. with the last state seen).

    Example:
        >>> wait_until(lambda: 2 + 2, timeout=1, what="arithmetic")
        4
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"waited {timeout:g} s for {text}; it did not happen")
        time.sleep(interval)


def train_command(*args: str) -> list[str]:
    """`python -m launch.train ARGS` (run it with cwd=ROOT)."""
    return [sys.executable, "-m", "launch.train", *args]


def read_in_background(proc: subprocess.Popen) -> tuple[list[str], threading.Thread]:
    """Collects a text-mode `proc`'s stdout lines as they come (a full pipe would
    hold the program); join the thread once the process has exited."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    return lines, reader


def start_train(
    run_dir: str,
    *overrides: str,
    config: str = "configs/apex_cartpole.py",
    new_session: bool = False,
) -> tuple[subprocess.Popen, str]:
    """Starts `python -m launch.train` with a unique token in its environment
    (new_session: in a process group of its own, as a terminal's job is)."""
    token = uuid.uuid4().hex
    env = dict(os.environ, **{TOKEN_VAR: token})
    proc = subprocess.Popen(
        train_command(
            f"--config={config}",
            f"--config.run_dir={run_dir}",
            "--config.logging.progress_period_seconds=2",
            *overrides,
        ),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=new_session,
    )
    return proc, token


def processes_with_token(token: str) -> list[psutil.Process]:
    """Every live process whose environment carries `token` (the program's processes inherit it)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TOKEN_VAR) == token and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_for_state(
    run_dir: str, predicate: Callable[[dict], bool], timeout: float = STARTUP_TIMEOUT
) -> dict:
    """Polls RUN_DIR/state.json until `predicate(state)` holds; returns that state."""
    last: dict = {}

    def satisfied() -> dict | None:
        nonlocal last
        try:
            with open(os.path.join(run_dir, "state.json")) as f:
                last = json.load(f)
        except (OSError, json.JSONDecodeError):
            return None
        return last if predicate(last) else None

    return wait_until(
        satisfied, timeout, lambda: f"state.json to satisfy the condition; last: {last}", 0.5
    )


def start_learning(
    run_dir: str, *overrides: str, learner_steps: int = 100, new_session: bool = False
) -> tuple[subprocess.Popen, str]:
    """start_train, then waits until the learner did more than `learner_steps` steps
    (the program is killed if it never does)."""
    proc, token = start_train(run_dir, *overrides, new_session=new_session)
    try:
        wait_for_state(run_dir, lambda s: (s.get("learner_steps") or 0) > learner_steps)
    except BaseException:
        kill_tree(proc, token)
        raise
    return proc, token


def wait_until_gone(token: str, timeout: float = STOP_TIMEOUT) -> None:
    """Waits until no process carries `token`; an AssertionError lists those left."""
    left: list[psutil.Process] = []

    def gone() -> bool:
        nonlocal left
        left = processes_with_token(token)
        return not left

    wait_until(
        gone, timeout, lambda: f"every process of the program to exit; left: {_cmdlines(left)}"
    )


def _cmdlines(processes: list[psutil.Process]) -> list[str]:
    lines = []
    for p in processes:
        try:
            lines.append(" ".join(p.cmdline())[:200])
        except psutil.Error:
            continue
    return lines


def interrupt(
    proc: subprocess.Popen, token: str, send: Callable[[], None], timeout: float = STOP_TIMEOUT
) -> str:
    """Calls `send()` (a signal to the program), waits for the launcher to exit
    and then for every process carrying `token` to be gone (each at most
    `timeout` s, a hang guard); returns the launcher's output. Whatever
    remains is killed."""
    try:
        send()
        out, _ = proc.communicate(timeout=timeout)
        wait_until_gone(token, timeout)
        return out
    finally:
        kill_tree(proc, token)


def kill_tree(proc: subprocess.Popen, token: str) -> None:
    for p in processes_with_token(token):
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.kill()


def run_train(
    run_dir: str, *overrides: str, timeout: float, config: str = "configs/apex_cartpole.py"
) -> tuple[str, dict, str]:
    """Runs the entry point to completion; asserts exit 0; returns (output, summary, token)."""
    proc, token = start_train(run_dir, *overrides, config=config)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc, token)
    assert proc.returncode == 0, out[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        return out, json.load(f), token


def threads_now() -> set:
    """The Python threads alive now: take it before a test starts a program."""
    import threading

    return set(threading.enumerate())


def threads_left(before: set | None = None) -> list[str]:
    """The Python threads of this process started since `before` (default: any
    but the main one and pytest's timeout timer): what an in-process program left
    running. (A C++ thread that once called into Python stays listed as a
    _DummyThread forever; not counted.)"""
    import threading

    return sorted(
        t.name
        for t in threading.enumerate()
        if t is not threading.main_thread()
        and (before is None or t not in before)
        and not isinstance(t, threading._DummyThread)
        and not t.name.startswith("pytest_timeout")
    )


def wait_no_threads_left(before: set | None = None, timeout: float = STOP_TIMEOUT) -> None:
    """Polls until the threads an in-process program started (since `before`) are
    gone (the timeout is a hang guard only)."""
    try:
        wait_until(lambda: not threads_left(before), timeout, "the program's threads to end")
    except AssertionError as err:
        raise AssertionError(f"{err}; left: {threads_left(before)}") from None


_TOOL_DRIVER = r"""
import contextlib, importlib, io, json, sys, traceback
from absl import app, flags
tool = importlib.import_module(sys.argv[1])

results = []
for argv in json.loads(sys.argv[2]):
    flags.FLAGS.unparse_flags()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            app.run(tool.main, argv=[sys.argv[1], *argv])
            rc = 0
        except SystemExit as e:
            rc = e.code
        except BaseException:
            traceback.print_exc()
            rc = "traceback"
    results.append({"argv": argv, "rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(results))
"""


def run_tool_lines(module: str, commands: list[list[str]], timeout: float = 240) -> list[dict]:
    """Runs each command line of the absl tool `module` (its `main` under
    app.run, flags reset to their defaults in between) in ONE helper process:
    one TensorFlow import for all of them. Returns, per command line, its argv,
    rc (the exit code, or "traceback"), stdout and stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", _TOOL_DRIVER, module, json.dumps(commands)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_start_lines(text: str, actors: int = 2) -> None:
    """The start lines (apex.coordination.startup) are in `text` (a launcher's
    output or the coordinator's log file): each once, the coordinator's first,
    then the replay serving before any actor inserting or the learner's first
    SGD step, all of them whole '[apex  N.Ns] ...' lines."""
    import re

    lines = text.splitlines()

    def find(pattern: str) -> int:
        found = [
            i for i, line in enumerate(lines) if re.match(r"\[apex +[0-9.]+s\] " + pattern, line)
        ]
        assert len(found) == 1, (pattern, found, text[-3000:])
        return found[0]

    up = find("coordinator up: waiting for ")
    replay = find(r"replay serving at \S+:\d+: table ")
    inserting = [find(f"actor_{i} inserting") for i in range(actors)]
    learner = find(r"learner: first SGD step, [0-9.]+ s after launch")
    progress = [
        i for i, line in enumerate(lines) if re.match(r"\[apex +[0-9.]+s\] env_steps", line)
    ]
    assert up < replay < min(inserting) and replay < learner, text[-3000:]
    assert not progress or up < progress[0], text[-3000:]


@contextlib.contextmanager
def small_filesystem(path: str, size: str) -> Iterator[str]:
    """A tmpfs of `size` (e.g. '2m') mounted at `path` for the block: a disk
    that fills. Skips the test where mounting is not allowed (not root)."""
    import pytest

    os.makedirs(path, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], capture_output=True)


def fill(path: str) -> int:
    """Writes `path` until the disk is full; returns the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        block = b"\0" * 4096
        while True:
            try:
                written += f.write(block) or 0
            except OSError:
                return written
