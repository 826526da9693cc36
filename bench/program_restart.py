r"""What a learner death costs when the program brings itself back.

    .venv/bin/python bench/program_restart.py [--kills 3] [--period 10] [--between 25]
        [--config configs/apex_cartpole.py] [--no_save]

Starts one program (checkpoint.period_seconds=--period) and SIGKILLs its
learner --kills times, each --between s after the restarted learner's first
SGD step. Nobody relaunches anything: the launcher starts the program again
from the newest complete checkpoint (checkpoint.max_program_restarts). For each
kill it reports the seconds from the SIGKILL to the line of the restarted
learner's first SGD step (what a user watching the output sees), and the env
and SGD steps lost back to the checkpoint (RUN_DIR/restarts.json). Lives here
are shorter than the default checkpoint.crash_loop_seconds (120 s), so the
bench sets it to 10 s: each restart then starts at once, as after a long life.
Then a SIGTERM stops the program; it checks exit 143 and that no process is
left. Writes bench/results/program_restart-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil
from common import ROOT, header, save_results

FIRST_STEP = "learner: first SGD step"


def _reader(proc: subprocess.Popen, lines: list[tuple[float, str]]) -> threading.Thread:
    def read() -> None:
        for line in proc.stdout:
            lines.append((time.time(), line))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _wait(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"waited {timeout:g} s for {what}")


def _learner_pid(run_dir: str, not_pid: int | None) -> int | None:
    from apex import read_heartbeats

    beat = read_heartbeats(run_dir).get("learner")
    pid = beat and int(beat["pid"])
    return pid if pid and pid != not_pid and beat.get("state") != "stopped" else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--between", type=float, default=25.0)
    ap.add_argument("--config", default="configs/apex_cartpole.py")
    ap.add_argument("--no_save", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from apex import checkpointing, read_program_restarts

    print(header("bench/program_restart.py"))
    run_dir = os.path.join(tempfile.mkdtemp(prefix="apex-restart-"), "run")
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        f"--config={args.config}",
        f"--config.run_dir={run_dir}",
        "--config.stop.max_wall_seconds=None",
        "--config.stop.max_actor_steps=1000000000000",
        f"--config.checkpoint.period_seconds={args.period}",
        "--config.checkpoint.crash_loop_seconds=10",
        "--config.logging.tensorboard=False",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[tuple[float, str]] = []
    reader = _reader(proc, lines)
    events, pid = [], None
    try:
        mark = 0.0
        for k in range(1, args.kills + 1):
            _wait(
                lambda m=mark: any(t >= m and FIRST_STEP in s for t, s in lines), 300, "an SGD step"
            )
            time.sleep(args.between)  # a bench, not a test: a life of --between s
            _wait(lambda: checkpointing.latest_complete(run_dir), 300, "a complete checkpoint")
            pid = _wait(lambda p=pid: _learner_pid(run_dir, p), 60, "the learner's pid")
            killed = time.time()
            os.kill(pid, signal.SIGKILL)
            seen = _wait(
                lambda t0=killed: next((t for t, s in lines if t > t0 and FIRST_STEP in s), None),
                300,
                "the restarted learner's first SGD step",
            )
            record = _wait(
                lambda n=k: (read_program_restarts(run_dir)[n - 1 :] or [None])[0], 30, "the record"
            )
            events.append(
                {
                    "kill": k,
                    "seconds_to_sgd_step": round(seen - killed, 2),
                    "stop_seconds": round(record["time"] - killed, 2),
                    "wait_seconds": record["wait_seconds"],
                    "resumed_from": record.get("resumed_from"),
                    "env_steps_lost": record.get("env_steps_lost"),
                    "sgd_steps_lost": record.get("sgd_steps_lost"),
                }
            )
            print(json.dumps(events[-1]), flush=True)
            mark = seen
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:  # the bench failed: nothing of the program stays
            os.killpg(proc.pid, signal.SIGKILL)
    left = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if p.pid != os.getpid() and any(run_dir in a for a in (p.info["cmdline"] or []))
    ]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    secs = [e["seconds_to_sgd_step"] for e in events]
    result = {
        "config": args.config,
        "checkpoint_period_seconds": args.period,
        "kills": events,
        "median_seconds_to_sgd_step": statistics.median(secs),
        "exit_code": code,
        "program_restarts": summary.get("program_restarts"),
        "learner_steps": summary.get("learner_steps"),
        "processes_left": left,
    }
    print(
        f"learner kills {len(events)}: SIGKILL to the restarted learner's first SGD step "
        f"median {result['median_seconds_to_sgd_step']:.1f} s (each: {secs}); exit {code}; "
        f"program_restarts {result['program_restarts']}"
    )
    if not args.no_save:
        print("saved", save_results("program_restart", result))
    return 0 if code == 143 else 1


if __name__ == "__main__":
    sys.exit(main())
