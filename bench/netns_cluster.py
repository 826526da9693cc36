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
`--shards 2` runs replay.num_shards=2 (shard 0 in the learner's process in h1,
shard 1 a node on an actor host, next to actor_1) and records the placement,
each shard's figures and the learner's per-shard batches and acknowledged
priority updates; `--cut_host shard` then cuts shard 1's host (with actor_1 on
it: that actor is watched) and also measures the seconds from the link's
return to the learner's first batch from that shard.
`--tcp_rto_max_ms N` sets net.ipv4.tcp_rto_max_ms in every host (the most
TCP waits between retransmissions; the kernel's default is 120 s), the
setting docs/cluster.md recommends for partitions of the learner's host.
A cut the program does not outlive (it stops, or a copy of the actor starts
elsewhere) is recorded as such, with the launcher's lines about it (`events`).
At the end, the replay-content checks of the tests (tests/replay_checks.py) run
on the final checkpoint (`replay_content`: items, mismatches).
Prints the JSON; writes bench/results/netns_cluster[-cut-X][-shardsN]-<commit>.json
(bench/common.py save_results, with the command).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from common import save_results  # noqa: E402 - bench/common.py

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
    if proc.poll() is not None:  # it stopped by itself (e.g. a node failed)
        return proc.returncode
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


_EVENTS = re.compile(
    r"lost|fenc|restart|node failed|silent|stopping|stalled|reconnect|marked dead|Raylet is term"
    r"|listens at|samples replay"
)


_PROGRESS = re.compile(r"^\[apex +[\d.]+s\]")


def _events(lines: list[str], limit: int = 30) -> list[str]:
    """The launcher's lines about losses, fences, restarts and stops (not progress lines)."""
    found = [x.rstrip() for x in lines if _EVENTS.search(x) and not _PROGRESS.match(x)]
    return found[:limit]


def _sampled_again(rows: list[dict], key: str, since: float, until: float) -> float | None:
    """The time of the first learner row in (since, until) where counter `key`
    (a shard's batches) grew again after it had stopped growing: the batches
    queued before a cut drain first, then the count stalls, then a copy of the
    shard started elsewhere serves (None: it did not, in that span)."""
    last, stalled = None, False
    for r in rows:
        t = float(r["time"])
        if t <= since or t >= until:
            continue
        value = r.get(key, 0) or 0
        if last is not None and value == last:
            stalled = True
        elif stalled and last is not None and value > last:
            return t
        last = value
    return None


def on_cluster(args, out_dir: str) -> dict:
    sysctls = {}
    if args.tcp_rto_max_ms:  # the most TCP waits between retransmissions (Linux >= 6.15)
        sysctls["net.ipv4.tcp_rto_max_ms"] = str(args.tcp_rto_max_ms)
    health = {} if args.ray_default_health_check else None  # None: the harness's 75 s
    cluster = netns.NetnsCluster(3, sysctls=sysctls, ray_health_check=health)
    result: dict = {"sysctls": sysctls, "ray_health_check": cluster.ray_health_check}
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
                f"--config.replay.num_shards={args.shards}",
                *args.override,
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
            result["placement"] = {name: node["ip"] for name, node in placed.items()}
            actors = [cluster.ips.index(placed[f"actor_{i}"]["ip"]) for i in range(2)]

            def veth_bytes() -> int:
                return sum(sum(cluster.link_bytes(h)) for h in actors)

            result["window"] = _window(run_dir, args.window, veth_bytes)
            if args.cut_host == "learner":
                victim, watched = 0, "actor_0"
            elif args.cut_host == "shard":  # the host of the last shard (a node of its own)
                shard_ip = placed[f"replay_{args.shards - 1}"]["ip"]
                victim = cluster.ips.index(shard_ip)
                watched = next(
                    (f"actor_{i}" for i in range(2) if placed[f"actor_{i}"]["ip"] == shard_ip),
                    "actor_0",
                )
            else:
                victim, watched = actors[0], "actor_0"
            result["cut_host"] = args.cut_host
            result["cut_ip"] = cluster.ips[victim]
            result["watched_actor"] = watched
            result["cuts"] = []
            for seconds in args.cuts:
                before = int(
                    (netns.node_beat(run_dir, watched).get("counters") or {}).get(
                        "items_inserted", 0
                    )
                )
                learner_before = _state(run_dir).get("learner_steps") or 0
                cut_at = time.time()
                cluster.cut(victim)
                while time.time() < cut_at + seconds and proc.poll() is None:
                    time.sleep(0.2)
                cluster.heal(victim)
                healed = time.time()
                cut: dict = {
                    "cut_seconds": seconds,
                    "items_inserted_before_cut": before,
                    "learner_steps_during_cut": (_state(run_dir).get("learner_steps") or 0)
                    - learner_before,
                }
                during = [
                    r
                    for r in netns.metrics_rows(run_dir, watched)
                    if cut_at + 1 < float(r["time"]) < healed
                ]
                if during:  # rows while its first host was cut off: a copy started elsewhere
                    cut["rows_during_cut"] = len(during)
                    cut["first_row_during_cut_after_seconds"] = round(
                        float(during[0]["time"]) - cut_at, 1
                    )
                if args.shards > 1:  # the shard started again elsewhere during the cut?
                    again = _sampled_again(
                        netns.metrics_rows(run_dir, "learner"),
                        f"learner/batches_shard_{args.shards - 1}",
                        cut_at,
                        healed,
                    )
                    if again is not None:
                        cut["shard_sampled_again_during_cut_after_seconds"] = round(
                            again - cut_at, 1
                        )
                if proc.poll() is not None:
                    cut["program_exited_during_cut"] = proc.returncode
                    result["cuts"].append(cut)
                    break

                def back(healed=healed):
                    # The actor's metric rows: one per report while it steps, none
                    # while its write waits; each carries the actor's own clock.
                    if proc.poll() is not None:
                        return {"exited": proc.returncode}
                    rows = netns.metrics_rows(run_dir, watched)
                    return next((r for r in rows if float(r["time"]) > healed), None)

                row = _poll(back, 300, f"{watched} stepping and inserting again")
                if "exited" in row:
                    cut["program_exited_after_heal"] = row["exited"]
                    result["cuts"].append(cut)
                    break
                cut["seconds_to_first_insert"] = round(float(row["time"]) - healed, 1)
                cut["items_inserted_then"] = row.get("actor/items_inserted")
                if args.shards > 1:
                    s = args.shards - 1
                    key = f"learner/batches_shard_{s}"
                    at_heal = max(
                        (
                            r.get(key, 0)
                            for r in netns.metrics_rows(run_dir, "learner")
                            if float(r["time"]) <= healed
                        ),
                        default=0,
                    )

                    def sampled(key=key, at_heal=at_heal, healed=healed):
                        rows = netns.metrics_rows(run_dir, "learner")
                        return next(
                            (
                                r
                                for r in rows
                                if float(r["time"]) > healed and r.get(key, 0) > at_heal
                            ),
                            None,
                        )

                    got = _poll(sampled, 300, f"the learner sampling shard {s} again")
                    cut[f"seconds_to_first_batch_of_shard_{s}"] = round(
                        float(got["time"]) - healed, 1
                    )
                result["cuts"].append(cut)
                time.sleep(5)
        finally:
            result["exit_code"] = _stop(proc)
            with open(os.path.join(out_dir, "cluster.log"), "w") as f:
                f.writelines(lines)
        result["events"] = _events(lines)
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        result["summary_network"] = summary.get("network")
        result["stop_reason"] = summary.get("stop_reason")
        result["failure"] = summary.get("failure")
        if args.shards > 1:
            result["replay_shards"] = summary.get("replay_shards")
            last = (netns.metrics_rows(run_dir, "learner") or [{}])[-1]
            result["learner_shards"] = {
                k: v for k, v in last.items() if "_shard_" in k or k.endswith("_unacked")
            }
        result["stop_window_kill"] = any("still running after the stop window" in x for x in lines)
        result["replay_content"] = _replay_content(run_dir)
    finally:
        cluster.down()
    return result


def _replay_content(run_dir: str) -> dict:
    """The replay-content checks of the tests (tests/replay_checks.py: every
    CartPole item's n-step reward and discount) on the final checkpoint."""
    from apex import ApexConfig, checkpointing
    from apex.replay import unpack_item
    from tests.replay_checks import assert_cartpole_nstep
    from tools.replay_inspect import checkpoint_reader as cr

    replay = ApexConfig().replay
    path = checkpointing.latest_complete(run_dir)
    if path is None:
        return {"checkpoint": None}
    items, bad = 0, []
    for shard_path in checkpointing.load(path).shard_paths:
        for item in cr.iter_items(shard_path, "transitions"):
            items += 1
            data = unpack_item(item.data)
            try:
                assert_cartpole_nstep(data, replay.discount, replay.n_step)
            except AssertionError:
                bad.append({k: float(data[k]) for k in ("reward", "discount", "actor")})
    return {
        "checkpoint": os.path.basename(path),
        "items": items,
        "mismatches": len(bad),
        "first_mismatches": bad[:5],
    }


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
        choices=["actor", "learner", "shard"],
        default="actor",
        help="whose link goes down: actor_0's host, the learner's (every actor cut off), "
        "or the last replay shard's (--shards > 1; its actor is watched)",
    )
    parser.add_argument("--shards", type=int, default=1, help="replay.num_shards")
    parser.add_argument(
        "--override", action="append", default=[], help="another --config.X=Y for the program"
    )
    parser.add_argument("--out_dir", default="/tmp/apex-netns-bench")
    parser.add_argument(
        "--ray_default_health_check",
        action="store_true",
        help="Ray's own health checks (a cut host dead after ~15-50 s, before apex's "
        "60 + 5 s lease) instead of tests/netns.py's 75 s",
    )
    parser.add_argument(
        "--tcp_rto_max_ms",
        type=int,
        default=0,
        help="set net.ipv4.tcp_rto_max_ms in every host (0: the kernel's, 120000)",
    )
    args = parser.parse_args()
    args.cuts = [float(x) for x in args.cuts.split(",") if x]
    if args.cut_host == "shard" and args.shards < 2:
        parser.error("--cut_host shard needs --shards 2 or more")
    why = netns.unavailable()
    if why:
        sys.exit(f"netns_cluster: {why}")
    for sub in ("cluster", "local"):  # fresh run directories (an old one would be resumed)
        shutil.rmtree(os.path.join(args.out_dir, sub), ignore_errors=True)
    out = {
        "command": " ".join(["bench/netns_cluster.py", *sys.argv[1:]]),
        "args": vars(args),
        "load_average_1min_at_start": os.getloadavg()[0],
        "cluster": on_cluster(args, args.out_dir),
    }
    if args.local:
        out["local_mp"] = local(args, args.out_dir)
    print(json.dumps(out, indent=1))
    tail = "" if args.cut_host == "actor" else f"-cut-{args.cut_host}"
    tail += f"-shards{args.shards}" if args.shards > 1 else ""
    tail += f"-rto{args.tcp_rto_max_ms}" if args.tcp_rto_max_ms else ""
    tail += "-raydefaulthealth" if args.ray_default_health_check else ""
    if args.cuts != [5.0, 30.0]:  # other cuts: a record of their own
        tail += "-cuts" + "-".join(f"{c:g}" for c in args.cuts)
    print("wrote", save_results(f"netns_cluster{tail}", out))


if __name__ == "__main__":
    main()
