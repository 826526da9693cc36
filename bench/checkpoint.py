r"""Issue-5 figures: run checkpoints and what a SIGKILL costs.

    .venv/bin/python bench/checkpoint.py size [--items 100000 1000000]
    .venv/bin/python bench/checkpoint.py sigkill [--period 10]

size: fills an in-process Reverb server (apex's CartPole transitions table)
with N n-step transitions, attaches a real DQN learner, and times one whole-run
checkpoint (`RunCheckpointer.save`: priority flush, Reverb checkpoint, learner
state, manifest, COMPLETE) and its size on disk; then the resume: reading the
checkpoint, a new server loading the replay, and the learner state restored.
sigkill: for each node kind (actor, learner, coordinator, the launcher), starts
the default CartPole program with checkpoint.period_seconds=--period, kills
that process with SIGKILL once a periodic checkpoint exists, and reports
how the program ended, the newest complete checkpoint and the learner and env
steps lost (at the kill vs in that checkpoint); then resumes from it (to 200
more learner steps) and checks the resume continued from that checkpoint.
Writes bench/results/checkpoint-<what>-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from common import ROOT, fill_transitions, fmt, header, save_results


def size_bench(args) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import reverb

    from apex import ApexConfig, Learner, RunCheckpointer, checkpointing, env_spec
    from apex.agents import TRANSITIONS_TABLE, make_tables

    rows = []
    for n in args.items:
        c = ApexConfig()
        c.replay.capacity = n
        c.replay.min_size = 1
        c.replay.error_buffer = 1e12
        spec = env_spec(c.env)
        run_dir = tempfile.mkdtemp(prefix="apex-ckpt-bench-")
        server = reverb.Server(
            make_tables(c, spec),
            checkpointer=reverb.checkpointers.DefaultCheckpointer(
                path=checkpointing.replay_root(run_dir)
            ),
        )
        address = f"localhost:{server.port}"
        client = reverb.Client(address)
        fill = fill_transitions(client, n)
        print(f"filled {n:,} items in {fill:.1f} s", flush=True)
        learner = Learner(c, spec, address)
        saver = RunCheckpointer(
            run_dir,
            checkpointing.make_manifest(c, learner.signature, learner.network_shapes()),
            client,
            counters=lambda n=n: {"actor_steps": {"0": n}},
            period_seconds=None,
            keep=2,
        )
        path = saver.save(learner, reason="bench")
        _, seconds, size = saver.written[-1]
        server.stop()

        t0 = time.time()
        loaded = checkpointing.load(path)
        t_load = time.time() - t0
        t0 = time.time()
        server2 = reverb.Server(
            make_tables(c, spec),
            checkpointer=reverb.checkpointers.DefaultCheckpointer(
                path=os.path.join(run_dir, "fresh-root"),
                fallback_checkpoint_path=loaded.replay_path,
            ),
        )
        restored = reverb.Client(f"localhost:{server2.port}").server_info()[TRANSITIONS_TABLE]
        t_replay = time.time() - t0
        learner2 = Learner(c, spec, f"localhost:{server2.port}")
        t0 = time.time()
        learner2.set_state(loaded.learner)
        t_learner = time.time() - t0
        assert restored.current_size == n, restored.current_size
        server2.stop()
        row = {
            "items": n,
            "checkpoint_seconds": seconds,
            "checkpoint_bytes": size,
            "bytes_per_item": size / n,
            "resume_read_seconds": t_load,
            "resume_replay_load_seconds": t_replay,
            "resume_learner_seconds": t_learner,
            "resume_seconds": t_load + t_replay + t_learner,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(header("bench/checkpoint.py size"))
    print(f"{'items':>10} {'ckpt s':>8} {'MB':>8} {'B/item':>7} {'resume s':>9} (replay load)")
    for r in rows:
        print(
            f"{r['items']:>10,} {r['checkpoint_seconds']:>8.2f} {r['checkpoint_bytes'] / 1e6:>8.1f} "
            f"{r['bytes_per_item']:>7.0f} {r['resume_seconds']:>9.2f} "
            f"({r['resume_replay_load_seconds']:.2f})"
        )
    print("results:", save_results("checkpoint-size", {"rows": rows}))


def _state(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "state.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _pid_of(run_dir: str, kind: str, launcher_pid: int) -> int:
    from apex import read_heartbeats

    if kind == "launcher":
        return launcher_pid
    node = {"actor": "actor_0", "learner": "learner", "coordinator": "coordinator"}[kind]
    return int(read_heartbeats(run_dir)[node]["pid"])


def _train(run_dir: str, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "launch.train",
            "--config=configs/apex_cartpole.py",
            f"--config.run_dir={run_dir}",
            "--config.logging.progress_period_seconds=0",
            # What a kill costs when the run is resumed by hand (the launcher's
            # own restarts: tests/test_program_restarts.py).
            "--config.checkpoint.max_program_restarts=0",
            *overrides,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def sigkill_bench(args) -> None:
    from apex import checkpointing, pid_alive

    rows = []
    for kind in args.kinds:
        run_dir = tempfile.mkdtemp(prefix=f"apex-kill-{kind}-")
        proc = _train(
            run_dir,
            f"--config.checkpoint.period_seconds={args.period}",
            "--config.stop.max_wall_seconds=600",
        )
        deadline = time.time() + 180
        while time.time() < deadline and not checkpointing.latest_complete(run_dir):
            time.sleep(0.5)
        time.sleep(args.period / 2)  # halfway to the next periodic checkpoint
        before = _state(run_dir)
        pid = _pid_of(run_dir, kind, proc.pid)
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        if kind == "launcher":
            proc.wait()
            pgid = proc.pid
            while time.time() - killed < 60:
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.5)
            out = ""
        else:
            out, _ = proc.communicate(timeout=120)
        ended = time.time() - killed
        left = []
        try:
            os.killpg(proc.pid, 0)
            left = ["process group still alive"]
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        latest = checkpointing.latest_complete(run_dir)
        ckpt = checkpointing.load(latest)
        saved_env = sum(ckpt.state.get("actor_steps", {}).values())
        at_kill_learner = before.get("learner_steps") or 0
        at_kill_env = before.get("env_steps") or 0
        summary = {}
        if os.path.exists(os.path.join(run_dir, "summary.json")):
            with open(os.path.join(run_dir, "summary.json")) as f:
                summary = json.load(f)
        # Resume from what is there.
        t0 = time.time()
        resume = _train(run_dir, "--resume", f"--config.stop.max_learner_steps={ckpt.step + 200}")
        rout, _ = resume.communicate(timeout=180)
        resumed = {}
        with open(os.path.join(run_dir, "summary.json")) as f:
            resumed = json.load(f)
        row = {
            "killed": kind,
            "pid_alive_after": pid_alive(pid),
            "exit_code": None if kind == "launcher" else proc.returncode,
            "stop_reason": summary.get("stop_reason") if kind != "launcher" else "(launcher gone)",
            "all_processes_gone_seconds": ended,
            "leftover": left,
            "final_checkpoint_written": "checkpoint (stop)" in out if kind != "launcher" else None,
            "checkpoint_step": ckpt.step,
            "learner_steps_at_kill": at_kill_learner,
            "learner_steps_lost": max(0, at_kill_learner - ckpt.step),
            "env_steps_at_kill": at_kill_env,
            "env_steps_lost": max(0, at_kill_env - saved_env),
            "resume_exit_code": resume.returncode,
            "resumed_from": resumed.get("resumed_from"),
            "resumed_learner_steps": resumed.get("learner_steps"),
            "resume_process_seconds": time.time() - t0,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        if resume.returncode != 0:
            print(rout[-2000:])
    print(header("bench/checkpoint.py sigkill"))
    print(
        f"{'killed':>12} {'exit':>5} {'stop_reason':>14} {'gone s':>7} {'ckpt step':>9} "
        f"{'lost learner':>12} {'lost env':>9} {'resume':>7}"
    )
    for r in rows:
        print(
            f"{r['killed']:>12} {fmt(r['exit_code']):>5} {str(r['stop_reason']):>14} "
            f"{r['all_processes_gone_seconds']:>7.1f} {r['checkpoint_step']:>9,} "
            f"{r['learner_steps_lost']:>12,} {r['env_steps_lost']:>9,} "
            f"{'ok' if r['resume_exit_code'] == 0 and r['resumed_from'] else 'FAILED':>7}"
        )
    print("results:", save_results("checkpoint-sigkill", {"period": args.period, "rows": rows}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("size")
    s.add_argument("--items", type=int, nargs="+", default=[100_000, 1_000_000])
    k = sub.add_parser("sigkill")
    k.add_argument("--period", type=float, default=10.0)
    k.add_argument(
        "--kinds",
        nargs="+",
        default=["actor", "learner", "coordinator", "launcher"],
        choices=["actor", "learner", "coordinator", "launcher"],
        help="which process to SIGKILL, one run each",
    )
    args = parser.parse_args()
    {"size": size_bench, "sigkill": sigkill_bench}[args.what](args)


if __name__ == "__main__":
    main()
