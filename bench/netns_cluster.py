r"""The Ray launcher across hosts with their own addresses (issue 31): three
network namespaces on one machine (tests/netns.py), against local_mp on the
same machine. Needs root.

    sudo .venv/bin/python bench/netns_cluster.py [--window 20] [--cuts 5,30] [--local]

Measured on the namespace cluster (head + learner + coordinator in h1, an actor
in h2 and one in h3, the default CartPole program):
  - env steps/s and SGD steps/s over `--window` s after the learner's first steps;
  - bytes between hosts per env step: the actor hosts' veth counters
    (/sys/class/net/<veth>/statistics, both directions) over the same window;
  - for each cut of `--cuts` (seconds): h2's link down that long, then up;
    seconds from the link's return to actor_0's next insert (its first metric
    row after it: rows come only while it steps, i.e. once its write went
    through; by its own clock, same machine),
    and what summary.json's `network` counts at the end.
`--local` also runs the same program under local_mp for the same window;
`--cut_host learner` cuts the learner's host (h1) instead: every actor is cut off.
Prints one table; writes bench/results/netns_cluster-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests import netns  # noqa: E402 - the harness, from this checkout

BASE = [
    "--config=configs/apex_cartpole.py",
    "--config.checkpoint.period_seconds=None",
    "--config.logging.tensorboard=False",
    "--config.logging.progress_period_seconds=1",
    "--config.stop.max_wall_seconds=1800",
]


def _state(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "state.json")) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


def _beat(run_dir: str, node: str) -> dict:
    try:
        with open(os.path.join(run_dir, "heartbeats", f"{node}.json")) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


def _rows(run_dir: str, node: str) -> list[dict]:
    try:
        with open(os.path.join(run_dir, "metrics", f"{node}.jsonl")) as f:
            return sorted((json.loads(x) for x in f if x.strip()), key=lambda r: r["time"])
    except (OSError, json.JSONDecodeError):
        return []


def _poll(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)
    raise RuntimeError(f"waited {timeout:g} s for {what}")


def _window(run_dir: str, seconds: float, counters=None) -> dict:
    """env steps/s and SGD steps/s over `seconds` (and veth bytes if `counters`)."""
    s0, t0 = _state(run_dir), time.time()
    b0 = counters() if counters else 0
    time.sleep(seconds)
    s1, t1 = _state(run_dir), time.time()
    b1 = counters() if counters else 0
    env = (s1.get("env_steps", 0) or 0) - (s0.get("env_steps", 0) or 0)
    out = {
        "seconds": round(t1 - t0, 1),
        "env_steps_per_second": round(env / (t1 - t0), 1),
        "sgd_steps_per_second": round(
            ((s1.get("learner_steps", 0) or 0) - (s0.get("learner_steps", 0) or 0)) / (t1 - t0), 1
        ),
    }
    if counters:
        out["bytes_between_hosts"] = b1 - b0
        out["bytes_per_env_step"] = round((b1 - b0) / max(env, 1), 1)
    return out


def _stop(proc: subprocess.Popen) -> int:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def on_cluster(args, out_dir: str) -> dict:
    cluster = netns.NetnsCluster(3)
    result: dict = {}
    try:
        cluster.up()
        t = time.time()
        cluster.start_ray(head_cpus=2, worker_cpus=2)
        result["ray_start_seconds"] = round(time.time() - t, 1)
        run_dir = os.path.join(out_dir, "cluster")
        proc = cluster.popen(
            0,
            [
                sys.executable,
                "-m",
                "launch.train",
                *BASE,
                f"--config.run_dir={run_dir}",
                "--launcher=ray",
                f"--ray_address={cluster.address}",
                "--config.cluster.learner_resource=apex_learner",
                "--config.cluster.actor_resource=apex_actor",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
        try:
            _poll(lambda: (_state(run_dir).get("learner_steps") or 0) > 20, 600, "learning")
            with open(os.path.join(run_dir, "placement.json")) as f:
                placed = json.load(f)["nodes"]
            actors = [cluster.ips.index(placed[f"actor_{i}"]["ip"]) for i in range(2)]

            def veth_bytes() -> int:
                return sum(sum(cluster.link_bytes(h)) for h in actors)

            result["window"] = _window(run_dir, args.window, veth_bytes)
            victim = 0 if args.cut_host == "learner" else actors[0]
            result["cut_host"] = args.cut_host
            result["cuts"] = []
            for seconds in args.cuts:
                before = int(
                    (_beat(run_dir, "actor_0").get("counters") or {}).get("items_inserted", 0)
                )
                cluster.cut(victim)
                time.sleep(seconds)
                cluster.heal(victim)
                healed = time.time()

                def back(healed=healed):
                    # The actor's metric rows: one per report while it steps, none
                    # while its write waits; each carries the actor's own clock.
                    rows = _rows(run_dir, "actor_0")
                    return next((r for r in rows if float(r["time"]) > healed), None)

                row = _poll(back, 300, "actor_0 stepping and inserting again")
                result["cuts"].append(
                    {
                        "cut_seconds": seconds,
                        "seconds_to_first_insert": round(float(row["time"]) - healed, 1),
                        "items_inserted_before_cut": before,
                        "items_inserted_then": row.get("actor/items_inserted"),
                    }
                )
                time.sleep(5)
        finally:
            result["exit_code"] = _stop(proc)
            with open(os.path.join(out_dir, "cluster.log"), "w") as f:
                f.writelines(lines)
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        result["summary_network"] = summary.get("network")
        result["stop_reason"] = summary.get("stop_reason")
        result["stop_window_kill"] = any("still running after the stop window" in x for x in lines)
    finally:
        cluster.down()
    return result


def local(args, out_dir: str) -> dict:
    run_dir = os.path.join(out_dir, "local")
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.train", *BASE, f"--config.run_dir={run_dir}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _poll(lambda: (_state(run_dir).get("learner_steps") or 0) > 20, 600, "learning")
        return {"window": _window(run_dir, args.window)}
    finally:
        _stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--cuts", default="5,30", help="partition lengths, seconds")
    parser.add_argument("--local", action="store_true", help="also local_mp, same window")
    parser.add_argument(
        "--cut_host",
        choices=["actor", "learner"],
        default="actor",
        help="whose link goes down: actor_0's host, or the learner's (every actor cut off)",
    )
    parser.add_argument("--out_dir", default="/tmp/apex-netns-bench")
    args = parser.parse_args()
    args.cuts = [float(x) for x in args.cuts.split(",") if x]
    why = netns.unavailable()
    if why:
        sys.exit(f"netns_cluster: {why}")
    for sub in ("cluster", "local"):  # fresh run directories (an old one would be resumed)
        shutil.rmtree(os.path.join(args.out_dir, sub), ignore_errors=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    load = os.getloadavg()[0]
    out = {
        "commit": commit,
        "load_average_1min_at_start": load,
        "cluster": on_cluster(args, args.out_dir),
    }
    if args.local:
        out["local_mp"] = local(args, args.out_dir)
    print(json.dumps(out, indent=1))
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    tail = "" if args.cut_host == "actor" else f"-cut-{args.cut_host}"
    path = os.path.join(ROOT, "bench", "results", f"netns_cluster-{commit}{tail}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
