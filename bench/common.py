"""Shared by the whole-program benchmarks: run the entry point, save results."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from apex import git_commit  # noqa: E402

PEERS = os.path.join(ROOT, "bench", "peers")
# Stable-Baselines3, the peer, in a venv of its own made by bench/peers/setup_sb3.sh
SB3_PYTHON = os.path.join(ROOT, ".venv-sb3", "bin", "python")


def setup_peer() -> None:
    """Runs bench/peers/setup_sb3.sh (idempotent), its output shown."""
    subprocess.run(["bash", os.path.join(PEERS, "setup_sb3.sh")], cwd=ROOT, check=True)


def run_program(config: str, overrides: list[str], timeout: float) -> dict:
    """Runs `python -m launch.train --config=config` (local_mp) to its end; returns
    summary.json plus process_seconds, returncode and run_dir."""
    run_dir = tempfile.mkdtemp(prefix="apex-bench-")
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        f"--config={config}",
        f"--config.run_dir={run_dir}",
        "--config.logging.progress_period_seconds=10",
        *overrides,
    ]
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
        cpu = _node_cpu_until_exit(proc, run_dir, timeout)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    summary["process_seconds"] = time.time() - t0
    summary["returncode"] = proc.returncode
    summary["run_dir"] = run_dir
    summary["node_cpu_seconds"] = cpu
    return summary


def _node_cpu_until_exit(proc: subprocess.Popen, run_dir: str, timeout: float) -> dict:
    """Waits for `proc` (killed past `timeout`); meanwhile, every 0.25 s, each
    node's process CPU seconds (every thread, psutil; the node pids from the
    run's heartbeats): {node: the last value seen before the node exited}."""
    import psutil

    cpu: dict[str, float] = {}
    beats = os.path.join(run_dir, "heartbeats")
    deadline = time.time() + timeout
    while proc.poll() is None:
        if time.time() > deadline:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(proc.args, timeout)
        for name in os.listdir(beats) if os.path.isdir(beats) else []:
            try:
                with open(os.path.join(beats, name)) as f:
                    pid = json.load(f)["pid"]
                t = psutil.Process(pid).cpu_times()
                cpu[name.removesuffix(".json")] = t.user + t.system
            except (OSError, ValueError, KeyError, psutil.Error):
                pass
        time.sleep(0.25)
    return cpu


def fill_transitions(client, n: int, batch: int = 1000) -> float:
    """Writes n CartPole-shaped n-step transitions (random values, 16 slots, priorities
    ~ Exp(1)) through apex's TransitionWriter; returns the seconds it took."""
    import numpy as np

    from apex.agents import TRANSITIONS_TABLE
    from apex.replay import TransitionWriter

    rng = np.random.default_rng(0)
    t0 = time.time()
    with TransitionWriter(
        client, TRANSITIONS_TABLE, 0, np.geomspace(0.4, 0.001, 16).astype(np.float32)
    ) as w:
        for i in range(n // batch):
            w.write(
                {
                    "obs": rng.normal(size=(batch, 4)).astype(np.float32),
                    "action": rng.integers(0, 2, batch).astype(np.int32),
                    "reward": np.ones(batch, np.float32),
                    "discount": np.full(batch, 0.99**3, np.float32),
                    "next_obs": rng.normal(size=(batch, 4)).astype(np.float32),
                    "slot": rng.integers(0, 16, batch).astype(np.int32),
                    "version": np.full(batch, i, np.int64),
                },
                rng.exponential(1.0, batch) + 1e-3,
            )
    return time.time() - t0


def fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"


def header(script: str) -> str:
    commit = git_commit(ROOT)
    return f"apex {script}  commit {commit}  {platform.node()}  {os.cpu_count()} cpus"


def save_results(name: str, payload: dict, out_dir: str | None = None) -> str:
    """Writes <out_dir>/<name>-<commit>.json (default bench/results) with the commit
    and the machine; `-2`, `-3`, ... after it when that file exists already."""
    commit = git_commit(ROOT)
    out_dir = out_dir or os.path.join(ROOT, "bench", "results")
    os.makedirs(out_dir, exist_ok=True)
    stem = f"{name}-{(commit or 'nocommit')[:12]}"
    path = os.path.join(out_dir, f"{stem}.json")
    # A second run on the same commit gets -2, -3, ...: a record is never overwritten.
    n = 2
    while os.path.exists(path):
        path = os.path.join(out_dir, f"{stem}-{n}.json")
        n += 1
    record = {
        "commit": commit,
        "time": time.time(),
        "machine": {
            "node": platform.node(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        **payload,
    }
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    return path
