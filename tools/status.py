r"""Program status and the hang doctor: `python -m tools.status RUN_DIR [--stacks] [--json]`.

For each node of a live (or finished) run: its pid and whether it lives, the
age of its last heartbeat, what it is doing and for how long, its rate and
counters; then the doctor's findings (a learner waiting for samples, an actor
blocked on an insert, a silent node) with the replay's rate-limiter numbers,
read from the live server named in RUN_DIR/replay_address without sampling.

A sharded replay (replay.num_shards = S > 1: RUN_DIR/replay_addresses lists
the shards): each shard's address, size and rate-limiter state (and its
node's heartbeat, if it has one), then the totals; the doctor reads an
actor's numbers from the shard it writes to (actor i: shard i % S) and names
every shard for a waiting learner (apex.doctor).

--stacks sends SIGUSR1 to every live node process: each appends all its
threads' stacks to RUN_DIR/stacks/<node>-<pid>.txt; the tool prints where.

It imports Reverb (and so TensorFlow) only to ask a replay server whose
address accepts a TCP connection: a finished run's status imports neither.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import flags  # noqa: E402

from apex import (  # noqa: E402
    diagnose,
    pid_alive,
    read_heartbeats,
    read_program_restarts,
    run_setting,
)
from apex import heartbeat as hb  # noqa: E402
from apex.replay import format_stats, shard_rule, table_stats  # noqa: E402
from tools.replay_inspect import format_shard_stats, read_shard_addresses, total_stats  # noqa: E402

_STACKS = flags.DEFINE_bool("stacks", False, "Ask every live node to dump its stacks.")
_JSON = flags.DEFINE_bool("json", False, "Print JSON instead of text.")
_STALL = flags.DEFINE_float(
    "stall_seconds", None, "Doctor threshold (default: the run's logging.stall_seconds)."
)

# What a run directory has from its start (config.json) or from its nodes.
RUN_DIR_MARKERS = ("config.json", "heartbeats", "replay_address")


def _alive(beat: dict, now: float) -> bool:
    """A node on this host: its process runs; on another host: it beat recently
    (5 periods, at least 10 s)."""
    if beat.get("host", hb.HOST) == hb.HOST:
        return pid_alive(int(beat.get("pid") or 0))
    period = float(beat.get("period_seconds") or 1.0)
    return now - float(beat.get("received", beat["time"])) <= max(10.0, 5 * period)


def _listening(address: str) -> bool:
    """Whether something accepts a TCP connection at HOST:PORT (within 2 s): a
    finished run's replay address is refused at once, before Reverb and
    TensorFlow are imported to ask it."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=2).close()
    except (OSError, ValueError):
        return False
    return True


def _replay_table(run_dir: str) -> dict | None:
    path = os.path.join(run_dir, "replay_address")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        address = f.read().strip()
    if not _listening(address):  # a stopped run keeps its replay_address
        return None
    import reverb  # TensorFlow: only when the run has a replay server to ask

    try:
        stats = table_stats(reverb.Client(address), timeout=2)
    except Exception:  # noqa: BLE001 - a finished run has no server: report without it
        return None
    return stats[0] if stats else None


def _replay_shards(run_dir: str) -> list[dict] | None:
    """Each shard of a sharded replay ({shard, address, table: its table stats or
    None when unreachable}), or None when the run has one shard (no
    RUN_DIR/replay_addresses, or one line in it)."""
    try:
        shards = read_shard_addresses(run_dir)
    except (OSError, ValueError):
        return None
    if not shards or len(shards) == 1:
        return None
    out = []
    for name, address in shards:
        stats = None
        if _listening(address):  # a stopped shard: unreachable, without TensorFlow
            import reverb  # TensorFlow: only when a shard of the run answers

            try:
                stats = table_stats(reverb.Client(address), timeout=2)
            except Exception:  # noqa: BLE001 - a stopped shard: reported as unreachable
                stats = None
        out.append({"shard": name, "address": address, "table": stats[0] if stats else None})
    return out


def _last_row(run_dir: str, component: str) -> dict | None:
    """The newest metrics row of `component` (RUN_DIR/metrics/<component>.jsonl), or None."""
    path = os.path.join(run_dir, "metrics", f"{component}.jsonl")
    if not os.path.exists(path):
        return None
    from apex import read_jsonl  # acme and Launchpad (its logger base): only to read a row

    rows = read_jsonl(path)
    return rows[-1] if rows else None


def format_inference(row: dict, now: float) -> str:
    """One line of the central inference server's newest figures (docs/metrics.md)."""
    g = row.get
    line = (
        f"inference: {g('inference/requests_per_second', 0):,.0f} requests/s in "
        f"{g('inference/forward_passes_per_second', 0):,.0f} forward passes/s"
    )
    if g("inference/batch_observations_p50") is not None:
        line += (
            f"; batch {g('inference/batch_observations_p50'):,.0f} observations "
            f"(p90 {g('inference/batch_observations_p90'):,.0f}) = "
            f"{g('inference/batch_requests_p50'):,.0f} requests (p90 "
            f"{g('inference/batch_requests_p90'):,.0f}); queue wait p50 "
            f"{g('inference/queue_wait_ms_p50'):.2f} ms, p99 {g('inference/queue_wait_ms_p99'):.2f} ms;"
            f" latency p50 {g('inference/latency_ms_p50'):.2f} ms, p99 "
            f"{g('inference/latency_ms_p99'):.2f} ms"
        )
    line += f"; version {g('inference/param_version', -1):,.0f}"
    if g("inference/policy_lag_steps") is not None:
        line += f" (lag {g('inference/policy_lag_steps'):,.0f} learner steps)"
    return line + f"; row {now - g('time', now):.1f} s old"


def format_model_store(row: dict, now: float) -> str:
    """One line of the model store's newest figures (docs/metrics.md)."""
    g = row.get
    line = (
        f"model store: version {g('model_store/newest_version', -1):,.0f} "
        f"({g('model_store/versions_held', 0):,.0f} held, "
        f"{g('model_store/bytes_held', 0) / 2**20:,.1f} MiB); "
        f"{g('model_store/pushes', 0):,.0f} pushes, {g('model_store/pulls', 0):,.0f} pulls "
        f"({g('model_store/pulls_per_second', 0):,.1f}/s)"
    )
    if g("model_store/best_version") is not None:
        line += (
            f"; best version {g('model_store/best_version'):,.0f} "
            f"(eval return {g('model_store/best_return'):,.1f})"
        )
    return line + f"; row {now - g('time', now):.1f} s old"


def status(run_dir: str, stall_seconds: float | None = None) -> dict:
    """Heartbeats, liveness, replay table stats and doctor findings of RUN_DIR.

    With a sharded replay, `replay` holds the totals over the shards
    (tools.replay_inspect.total_stats, None when no shard is reachable) and
    `replay_shards` each shard (shard, address, table, heartbeat).
    """
    if stall_seconds is None:
        stall_seconds = float(run_setting(run_dir, "logging.stall_seconds"))
    beats = read_heartbeats(run_dir)
    now = time.time()
    shards = _replay_shards(run_dir)
    table = _replay_table(run_dir) if shards is None else None
    nodes = {}
    for name, b in beats.items():
        nodes[name] = {**b, "alive": _alive(b, now), "age_seconds": now - b["time"]}
    if shards is None:
        findings = [f.__dict__ for f in diagnose(beats, table, stall_seconds, now)]
    else:
        shard_tables = {sh["shard"]: sh["table"] for sh in shards}
        found = diagnose(beats, None, stall_seconds, now, shard_tables=shard_tables)
        findings = [f.__dict__ for f in found]
        totals = total_stats([[sh["table"]] if sh["table"] else None for sh in shards])
        table = totals[0] if totals else None
        for sh in shards:
            n = nodes.get(sh["shard"])
            sh["heartbeat"] = (
                None
                if n is None
                else {"alive": n["alive"], "age_seconds": n["age_seconds"], "state": n["state"]}
            )
    out = {
        "run_dir": run_dir,
        "time": now,
        "nodes": nodes,
        "replay": table,
        "findings": findings,
    }
    if shards is not None:
        out["replay_shards"] = shards
    out["program_restarts"] = read_program_restarts(run_dir)
    for component in ("inference", "model_store"):
        row = _last_row(run_dir, component)
        if row is not None:
            out[component] = row
    return out


def format_program_restarts(records: list[dict]) -> str:
    """The run's whole-program restarts: how many, and the last one's cause and cost."""
    last = records[-1]
    cost = ""
    if last.get("env_steps_lost") is not None:
        cost = (
            f"; lost {last['env_steps_lost']:,} env steps and "
            f"{last.get('sgd_steps_lost') or 0:,} SGD steps back to {last['resumed_from']}"
        )
    return (
        f"program restarts: {len(records)}; the last after {last['node']} failed "
        f"{last['life_seconds']:.0f} s into its life ({last['failure']}){cost}"
    )


def format_status(s: dict) -> str:
    lines = [f"run {s['run_dir']}"]
    lines.append(
        f"{'node':<12} {'pid':>7} {'alive':<5} {'beat':>7}  {'rate/s':>9}  {'RSS MiB':>8}  state"
    )
    for name, n in s["nodes"].items():
        # A stopped or dead node has no current rate: its last one would read as live.
        rate = n.get("rate_per_second") if n["alive"] and n["state"] != hb.STOPPED else None
        where = "" if n.get("host", hb.HOST) == hb.HOST else f" on {n['host']}"
        if n.get("ray_node"):  # --launcher=ray: the Ray node it was placed on
            where += f" (Ray node {n['ray_node'][:8]})"
        rss = n.get("rss_mb")
        counters = ", ".join(f"{k} {v:,}" for k, v in n.get("counters", {}).items())
        lines.append(
            f"{name:<12} {n['pid']:>7} {'yes' if n['alive'] else 'no':<5} "
            f"{n['age_seconds']:>6.1f}s  {'-' if rate is None else f'{rate:,.1f}':>9}  "
            f"{'-' if rss is None else f'{rss:,.0f}':>8}  "
            f"{n['state']} (for {n['state_seconds'] + n['age_seconds']:.1f} s)"
            + (f"; {counters}" if counters else "")
            + where
        )
    if not s["nodes"]:
        lines.append("(no heartbeats in RUN_DIR/heartbeats: not an apex run, or not started)")
    if s.get("replay_shards"):
        shards = s["replay_shards"]
        lines.append(f"replay: {len(shards)} shards ({shard_rule(len(shards))})")
        rows = []
        for sh in shards:
            beat = sh.get("heartbeat")
            note = (
                None
                if beat is None
                else f"heartbeat {beat['age_seconds']:.1f} s ago, "
                f"{'alive' if beat['alive'] else 'not alive'}, {beat['state']}"
            )
            tables = None if sh["table"] is None else [sh["table"]]
            rows.append(
                {"shard": sh["shard"], "address": sh["address"], "tables": tables, "note": note}
            )
        lines.append(format_shard_stats(rows, signature=False, num_shards=len(shards)))
    elif s["replay"] is not None:
        lines.append(format_stats([s["replay"]], signature=False))
    else:
        lines.append("replay: not reachable (the run has stopped, or no replay_address)")
    if s.get("inference"):
        lines.append(format_inference(s["inference"], s["time"]))
    if s.get("model_store"):
        lines.append(format_model_store(s["model_store"], s["time"]))
    if s.get("program_restarts"):
        lines.append(format_program_restarts(s["program_restarts"]))
    if s["findings"]:
        lines.append("doctor:")
        lines += [
            f"  {f['reason']} [{f['node']}, {f['seconds']:.0f} s]: {f['message']}"
            for f in s["findings"]
        ]
    else:
        lines.append("doctor: nothing stalled")
    return "\n".join(lines)


def dump_stacks(run_dir: str, nodes: dict) -> list[str]:
    """SIGUSR1 to every live node process of this host; returns the stack files
    written (actors print their stacks to their own log instead)."""
    pids = {
        int(n["pid"]) for n in nodes.values() if n["alive"] and n.get("host", hb.HOST) == hb.HOST
    }
    for pid in pids:
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    time.sleep(1.0)
    folder = os.path.join(run_dir, "stacks")
    if not os.path.isdir(folder):
        return []
    return sorted(
        os.path.join(folder, f)
        for f in os.listdir(folder)
        if any(f.endswith(f"-{pid}.txt") for pid in pids)
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tools.status RUN_DIR [--stacks] [--json]", file=sys.stderr)
        return 2
    run_dir = argv[1]
    if not os.path.isdir(run_dir):
        print(f"tools.status: {run_dir} is not a directory", file=sys.stderr)
        return 2
    if not any(os.path.exists(os.path.join(run_dir, m)) for m in RUN_DIR_MARKERS):
        print(
            f"tools.status: {run_dir} is not an apex run directory (it has none of "
            f"{', '.join(RUN_DIR_MARKERS)})",
            file=sys.stderr,
        )
        return 2
    s = status(run_dir, _STALL.value)
    if _STACKS.value:
        s["stack_files"] = dump_stacks(run_dir, s["nodes"])
    if _JSON.value:
        print(json.dumps(s, indent=2, default=str))
    else:
        print(format_status(s))
        for path in s.get("stack_files", []):
            print(f"stacks: {path}")
    return 0


if __name__ == "__main__":
    from tools import run_tool

    run_tool(main)
