r"""Whole-program benchmark: the default CartPole program on a simulated multi-node
Ray cluster (--launcher=ray) against the same config under local_mp, side by side.

    .venv/bin/python bench/ray_vs_local.py [--seeds 3] [--budget 150]

The Ray cluster is Ray's own multi-node simulation on this machine (3 nodes:
a head with 'apex_learner', two workers with 'apex_actor'; started once, before
the runs, as a user's cluster would already be up). For each seed: one local_mp
run, then one Ray run, each stopping at its first evaluation mean >= 475 or at
--budget wall seconds. Per run:
  solve s      spawn -> the end of the first evaluation with mean >= 475
  startup s    spawn -> first learner step
  env/s        env steps per second over the run (summary.json)
  machine CPU  CPU seconds of the whole machine (every process, Ray's included)
               per 1,000 env steps
  lo MB/s      bytes through the loopback interface per second: on one machine
               every RPC (inserts, parameter pulls, control plane) crosses it
And from the local_mp runs, the inputs of the scale model (docs/performance.md):
  actor CPU per env step, learner-process CPU per SGD step (learner + the
  replay server it hosts), coordinator CPU per env step, and loopback bytes per
  env step; then how many actors one learner feeds and what 8, 32 and 128 cores
  give. Prints medians and Ray/local ratios; writes
  bench/results/ray_vs_local-<commit>.json. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psutil  # noqa: E402
from common import ROOT, fmt, header, save_results

TOKEN_VAR = "APEX_BENCH_TOKEN"
GRACE_SECONDS = 180.0
CORES = (8, 32, 128)


def _lo_bytes() -> int:
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                fields = rest.split()
                return int(fields[0]) + int(fields[8])  # received + sent
    return 0


def _machine_cpu() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0)


class CpuByPid:
    """Polls the CPU seconds of every process carrying the run's token; keeps
    each pid's last reading (a process's figure survives its exit)."""

    def __init__(self, token: str):
        self.token = token
        self.cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CpuByPid:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            for p in psutil.process_iter():
                try:
                    if p.environ().get(TOKEN_VAR) != self.token:
                        continue
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                except (psutil.Error, OSError):
                    continue


def _roles(run_dir: str) -> dict[int, str]:
    """pid -> the node names it ran (heartbeats), e.g. 'learner', 'actor'."""
    out: dict[int, str] = {}
    folder = os.path.join(run_dir, "heartbeats")
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        try:
            with open(os.path.join(folder, name)) as f:
                beat = json.load(f)
        except (OSError, ValueError):
            continue
        node = beat["node"]
        role = "actor" if node.startswith("actor_") else node
        pid = int(beat.get("pid") or 0)
        out[pid] = role if pid not in out else min(out[pid], role)  # coordinator+evaluator
    return out


def run(mode: str, seed: int, budget: float, ray_address: str = "") -> dict:
    run_dir = tempfile.mkdtemp(prefix=f"apex-bench-{mode}-")
    token = uuid.uuid4().hex
    cmd = [
        sys.executable,
        "-m",
        "launch.train",
        "--config=configs/apex_cartpole.py",
        f"--config.run_dir={run_dir}",
        "--config.logging.progress_period_seconds=10",
        "--config.stop.when_solved=true",
        f"--config.stop.max_wall_seconds={budget}",
        "--config.stop.max_actor_steps=None",
        f"--config.seed={seed}",
    ]
    if mode == "ray":
        cmd += [
            "--launcher=ray",
            f"--ray_address={ray_address}",
            "--config.cluster.learner_resource=apex_learner",
            "--config.cluster.actor_resource=apex_actor",
        ]
    env = dict(os.environ, **{TOKEN_VAR: token})  # APEX_*: Ray's node processes get it too
    cpu0, lo0 = _machine_cpu(), _lo_bytes()
    t_spawn = time.time()
    with CpuByPid(token) as cpu:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=budget + GRACE_SECONDS
        )
    t_end = time.time()
    cpu1, lo1 = _machine_cpu(), _lo_bytes()
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return {"mode": mode, "seed": seed, "failed": True, "returncode": proc.returncode}
    roles = _roles(run_dir)
    by_role: dict[str, float] = {}
    for pid, seconds in cpu.cpu.items():
        role = roles.get(pid, "other")  # the launcher, local_mp's output wrappers
        by_role[role] = by_role.get(role, 0.0) + seconds
    clock = s.get("clock_start_time")
    solved = s.get("solved_at_wall_seconds")
    first = s.get("first_learner_step_seconds")
    steps = max(int(s.get("env_steps") or 0), 1)
    return {
        "mode": mode,
        "seed": seed,
        "returncode": proc.returncode,
        "solved": solved is not None,
        "solve_s": None if clock is None or solved is None else clock + solved - t_spawn,
        "startup_s": None if clock is None or first is None else clock + first - t_spawn,
        "process_s": t_end - t_spawn,
        "env_steps": s.get("env_steps"),
        "learner_steps": s.get("learner_steps"),
        "env_steps_per_second": s.get("env_steps_per_second"),
        "learner_steps_per_second": s.get("learner_steps_per_second"),
        "steps_to_solve": s.get("solved_at_env_steps"),
        "machine_cpu_s": cpu1 - cpu0,
        "machine_cpu_per_1k_env_steps": (cpu1 - cpu0) / steps * 1000.0,
        "lo_bytes": lo1 - lo0,
        "lo_mb_per_s": (lo1 - lo0) / (t_end - t_spawn) / 1e6,
        "lo_bytes_per_env_step": (lo1 - lo0) / steps,
        "cpu_by_role": by_role,
        "run_dir": run_dir,
    }


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def scale_model(local_runs: list[dict], batch: int, spi: float) -> dict:
    """Per-unit costs measured in the local_mp runs, and what they imply."""
    per: dict[str, list[float]] = {k: [] for k in ("actor", "learner", "coord", "bytes")}
    for r in local_runs:
        roles, env, sgd = r["cpu_by_role"], r["env_steps"] or 0, r["learner_steps"] or 0
        if env and sgd:
            per["actor"].append(roles.get("actor", 0.0) / env)
            per["learner"].append(roles.get("learner", 0.0) / sgd)
            per["coord"].append(roles.get("coordinator", 0.0) / env)
            per["bytes"].append(r["lo_bytes_per_env_step"])
    if not per["actor"]:
        return {}
    c_actor = statistics.median(per["actor"])  # CPU s per env step (acting + inserting)
    c_sgd = statistics.median(per["learner"])  # CPU s per SGD step (+ sampling, replay server)
    c_coord = statistics.median(per["coord"])
    b_env = statistics.median(per["bytes"])
    # One learner process consumes batch/spi env steps per SGD step.
    env_per_sgd = batch / spi
    model = {
        "actor_cpu_us_per_env_step": c_actor * 1e6,
        "learner_cpu_ms_per_sgd_step": c_sgd * 1e3,
        "learner_cpu_us_per_env_step": c_sgd / env_per_sgd * 1e6,
        "coordinator_cpu_us_per_env_step": c_coord * 1e6,
        "bytes_per_env_step": b_env,
        "env_steps_per_sgd_step": env_per_sgd,
        "clusters": [],
    }
    # A learner host of L cores: SGD steps/s <= L / c_sgd (ideal TF scaling; an
    # upper bound). Actors on the rest. The rate is the smaller of the two.
    for cores in CORES:
        learner_cores = min(8, max(2, cores // 8))
        feed = learner_cores / c_sgd * env_per_sgd  # env steps/s the learner consumes
        actor_cores = cores - learner_cores
        act = actor_cores / (c_actor + c_coord)  # env steps/s the actors produce
        rate = min(feed, act)
        model["clusters"].append(
            {
                "cores": cores,
                "learner_cores": learner_cores,
                "actor_cores": actor_cores,
                "actors_to_saturate_learner": feed * (c_actor + c_coord),
                "learner_consumes_env_steps_per_s": feed,
                "actors_produce_env_steps_per_s": act,
                "env_steps_per_s": rate,
                "bound": "learner" if feed < act else "actors",
                "mb_per_s_between_hosts": rate * b_env / 1e6,
            }
        )
    return model


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=150.0)
    args = ap.parse_args()
    print(header("ray_vs_local"), flush=True)
    from apex import load_config_file
    from launch.ray_connect import SimulatedCluster

    config = load_config_file(os.path.join(ROOT, "configs", "apex_cartpole.py"))
    t0 = time.time()
    cluster = SimulatedCluster(3, 2, 2)
    print(f"simulated Ray cluster (3 nodes) up in {time.time() - t0:.1f} s", flush=True)
    runs: list[dict] = []
    try:
        for seed in range(args.seeds):
            for mode in ("local_mp", "ray"):
                r = run(mode, seed, args.budget, cluster.address)
                runs.append(r)
                print(
                    f"seed {seed} {mode:8s} solve {fmt(r.get('solve_s'))} s  startup "
                    f"{fmt(r.get('startup_s'))} s  env/s {fmt(r.get('env_steps_per_second'))}  "
                    f"machine CPU/1k steps {fmt(r.get('machine_cpu_per_1k_env_steps'))} s  "
                    f"lo {fmt(r.get('lo_mb_per_s'))} MB/s  rc {r.get('returncode')}",
                    flush=True,
                )
    finally:
        cluster.shutdown()

    def med(mode: str, key: str) -> float | None:
        return _median(r.get(key) for r in runs if r["mode"] == mode and not r.get("failed"))

    keys = (
        ("solve_s", "solve s (unsolved: budget)"),
        ("startup_s", "startup s"),
        ("env_steps_per_second", "env steps/s"),
        ("learner_steps_per_second", "SGD steps/s"),
        ("steps_to_solve", "env steps to solve"),
        ("machine_cpu_per_1k_env_steps", "machine CPU s / 1k env steps"),
        ("lo_mb_per_s", "loopback MB/s"),
    )
    for r in runs:
        if not r.get("failed") and r["solve_s"] is None:
            r["solve_s_counted"] = args.budget
        else:
            r["solve_s_counted"] = r.get("solve_s")
    summary = {}
    print(
        f"\n{'median over ' + str(args.seeds) + ' seeds':34s} {'local_mp':>10s} {'ray':>10s} {'ray/local':>10s}"
    )
    for key, label in (("solve_s_counted", "solve s (unsolved: budget)"), *keys[1:]):
        a, b = med("local_mp", key), med("ray", key)
        ratio = None if not a or b is None else b / a
        summary[key] = {"local_mp": a, "ray": b, "ratio": ratio}
        print(f"{label:34s} {fmt(a):>10s} {fmt(b):>10s} {fmt(ratio):>10s}")
    model = scale_model(
        [r for r in runs if r["mode"] == "local_mp" and not r.get("failed")],
        config.learner.batch_size,
        config.replay.samples_per_insert,
    )
    if model:
        print(
            f"\nscale model inputs (local_mp medians): actor {model['actor_cpu_us_per_env_step']:.0f} "
            f"us CPU/env step; learner {model['learner_cpu_ms_per_sgd_step']:.2f} ms CPU/SGD step "
            f"(= {model['learner_cpu_us_per_env_step']:.0f} us/env step at "
            f"{model['env_steps_per_sgd_step']:g} env steps per SGD step); coordinator "
            f"{model['coordinator_cpu_us_per_env_step']:.1f} us/env step; "
            f"{model['bytes_per_env_step']:.0f} B/env step over loopback"
        )
        for c in model["clusters"]:
            print(
                f"  {c['cores']:4d} cores: learner {c['learner_cores']} cores consumes "
                f"{c['learner_consumes_env_steps_per_s']:,.0f} env steps/s = "
                f"{c['actors_to_saturate_learner']:.1f} actor cores; {c['actor_cores']} actor "
                f"cores produce {c['actors_produce_env_steps_per_s']:,.0f}/s -> "
                f"{c['env_steps_per_s']:,.0f}/s, bound by the {c['bound']}, "
                f"{c['mb_per_s_between_hosts']:.1f} MB/s between hosts"
            )
    path = save_results(
        "ray_vs_local",
        {"args": vars(args), "runs": runs, "medians": summary, "scale_model": model},
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
