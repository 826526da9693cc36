"""Helpers for multi-process tests: launch the entry point, find leftover processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN_VAR = "APEX_TEST_RUN_TOKEN"


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
        [
            sys.executable,
            "-m",
            "launch.train",
            f"--config={config}",
            f"--config.run_dir={run_dir}",
            "--config.logging.progress_period_seconds=2",
            *overrides,
        ],
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


def wait_for_state(run_dir: str, predicate, timeout: float) -> dict:
    deadline = time.time() + timeout
    last = {}
    while time.time() < deadline:
        try:
            with open(os.path.join(run_dir, "state.json")) as f:
                last = json.load(f)
            if predicate(last):
                return last
        except (OSError, json.JSONDecodeError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"state.json never satisfied the condition; last: {last}")


def start_learning(
    run_dir: str, *overrides: str, learner_steps: int = 100, new_session: bool = False
) -> tuple[subprocess.Popen, str]:
    """start_train, then waits until the learner did more than `learner_steps` steps
    (the program is killed if it never does)."""
    proc, token = start_train(run_dir, *overrides, new_session=new_session)
    try:
        wait_for_state(run_dir, lambda s: (s.get("learner_steps") or 0) > learner_steps, 120)
    except BaseException:
        kill_tree(proc, token)
        raise
    return proc, token


def seconds_until_gone(token: str, since: float, timeout: float = 40.0) -> float:
    """Waits (at most `timeout` s after `since`) until no process carries `token`;
    returns the seconds from `since` (inf if some are left)."""
    while processes_with_token(token):
        if time.time() - since > timeout:
            return float("inf")
        time.sleep(0.2)
    return time.time() - since


def interrupt(
    proc: subprocess.Popen, token: str, send: Callable[[], None], timeout: float
) -> tuple[str, float]:
    """Calls `send()` (a signal to the program), waits at most `timeout` s for the
    launcher to exit; returns (its output, seconds from the signal until no
    process carries `token`). Whatever remains is killed."""
    try:
        send()
        sent = time.time()
        out, _ = proc.communicate(timeout=timeout)
        return out, seconds_until_gone(token, sent)
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
