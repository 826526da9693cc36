"""The soak bench's parts (bench/soak.py): one launch of the run directory and
its output, reads of the run directory, the resource sampler, the final replay
check and the result table."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
from common import ROOT

from apex import checkpointing

TOKEN_VAR = "APEX_SOAK_TOKEN"
CONFIGS = {"apex": "configs/apex_cartpole.py", "r2d2": "configs/r2d2_cartpole_masked.py"}
STOP_TIMEOUT = 150.0  # a stopped launch's processes are gone within this (hang guard)
RECOVERY_TIMEOUT = 300.0
_STEPS = re.compile(r"learner_steps ([\d,]+)")
_INSERTING = re.compile(r"\[apex +[\d.]+s\] actor_\d+ inserting")
_FIRST_SGD = "learner: first SGD step"


# ------------------------------------------------------------------ one launch
class Launch:
    """One `python -m launch.train` of the soak's run directory; its output lines
    are kept with the time each arrived."""

    def __init__(self, args, run_dir: str, token: str):
        cmd = [
            sys.executable,
            "-m",
            "launch.train",
            f"--config={CONFIGS[args.agent]}",
            f"--config.run_dir={run_dir}",
            "--config.stop.max_wall_seconds=None",
            "--config.stop.max_actor_steps=1000000000000",  # a stop criterion must exist
            "--config.stop.when_solved=false",
            f"--config.checkpoint.period_seconds={args.checkpoint_period}",
            # Its program kills come at least 20 s apart: a life of 20 s is no
            # crash loop here (the default, 120 s, is for real runs).
            "--config.checkpoint.crash_loop_seconds=20",
            "--config.logging.progress_period_seconds=10",
            "--config.logging.tensorboard=False",
            f"--config.replay.num_shards={args.shards}",
            *args.override,
        ]
        if args.launcher == "ray":
            cmd += ["--launcher=ray", f"--ray_simulate_nodes={args.ray_simulate_nodes}"]
        self.started = time.time()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=dict(os.environ, **{TOKEN_VAR: token}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def first_line(self, pattern, after: float = 0.0) -> float | None:
        """When the first line matching `pattern` (a regex or a substring) arrived."""
        for t, line in list(self.lines):
            if t >= after and (
                pattern.search(line) if hasattr(pattern, "search") else pattern in line
            ):
                return t
        return None

    def learner_steps(self, after: float = 0.0) -> int:
        """The learner steps of the last progress line that arrived after `after` (0: none)."""
        for t, line in reversed(list(self.lines)):
            m = _STEPS.search(line) if t >= after else None
            if m:
                return int(m.group(1).replace(",", ""))
        return 0

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait(self, timeout: float) -> int | None:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(timeout=10)
        return code


# ------------------------------------------------------------------ run directory reads
def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


def beats(run_dir: str) -> dict[str, dict]:
    folder = os.path.join(run_dir, "heartbeats")
    out = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json"):
            beat = read_json(os.path.join(folder, name))
            if beat:
                out[name[:-5]] = beat
    return out


def counters(run_dir: str) -> dict[str, int]:
    s = read_json(os.path.join(run_dir, "state.json"))
    return {k: int(s.get(k) or 0) for k in ("env_steps", "episodes", "learner_steps")}


def rows_after(run_dir: str, component: str, after: float) -> list[dict]:
    path = os.path.join(run_dir, "metrics", f"{component}.jsonl")
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    if float(row.get("time", 0.0)) >= after:
                        out.append(row)
    except (OSError, json.JSONDecodeError):
        pass
    return out


def poll(predicate, timeout: float, interval: float = 0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def processes(token: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TOKEN_VAR) == token and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def checkpoints_load(run_dir: str) -> tuple[int, list[str]]:
    """(complete checkpoints, the errors of those that do not load)."""
    paths = checkpointing.list_complete(run_dir)
    errors = []
    for path in paths:
        try:
            checkpointing.load(path)
        except checkpointing.CheckpointError as err:
            errors.append(str(err))
    return len(paths), errors


def latest_step(run_dir: str) -> tuple[int, dict]:
    path = checkpointing.latest_complete(run_dir)
    if path is None:
        return 0, {}
    ckpt = checkpointing.load(path)
    return ckpt.step, ckpt.state


def replay_counts(ckpt_path: str) -> list[tuple[int, int]]:
    """(inserts, samples) of each shard's rate limiter in a run checkpoint
    (shard order; one pair with one server)."""
    from tools.replay_inspect import checkpoint_reader as cr

    out = []
    for shard_path in checkpointing.load(ckpt_path).shard_paths:
        tables = cr.read_tables(shard_path).values()
        out.append(
            (
                sum(t.rate_limiter.inserts for t in tables),
                sum(t.rate_limiter.samples for t in tables),
            )
        )
    return out


def replay_restored(run_dir: str, saved: list[tuple[int, int]], after: float) -> list[str]:
    """What did not carry on from the checkpoint a launch resumed from: each
    shard's rate-limiter inserts and samples, at the coordinator's first metrics
    row after `after` in which that shard answered, must be at least the
    checkpoint's (a server started empty counts from 0). Waits at most 60 s."""
    keys = (
        [("replay/inserts", "replay/samples")]
        if len(saved) == 1
        else [(f"replay/shard_{s}/inserts", f"replay/shard_{s}/samples") for s in range(len(saved))]
    )

    def first_rows() -> list[dict] | None:
        rows = rows_after(run_dir, "coordinator", after)
        firsts = [next((r for r in rows if r.get(k[0]) is not None), None) for k in keys]
        return firsts if all(r is not None for r in firsts) else None

    firsts = poll(first_rows, 60.0, 0.5)
    if firsts is None:
        return ["no replay figures from every shard within 60 s of the resume"]
    back = []
    for s, ((ins_key, smp_key), row, (ins, smp)) in enumerate(zip(keys, firsts, saved)):
        if int(row[ins_key]) < ins or int(row[smp_key] or 0) < smp:
            back.append(
                f"replay shard {s}: rate limiter at {row[ins_key]:,} inserts, "
                f"{row[smp_key]:,} samples after the resume; the checkpoint had {ins:,}, {smp:,}"
            )
    return back


# ------------------------------------------------------------------ resources
class Sampler:
    """RSS, open files and threads of every node process (by node name, from the
    heartbeats' pids; the launcher as 'launcher') every `period` s."""

    def __init__(self, run_dir: str, period: float):
        self.run_dir = run_dir
        self.period = period
        self.samples: list[dict] = []  # {time, node, pid, rss_mb, fds, threads}
        self.launcher_pid = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def sample(self) -> None:
        now = time.time()
        pids: dict[int, str] = {}
        for name, beat in beats(self.run_dir).items():  # colocated nodes: one process
            pid = int(beat.get("pid") or 0)
            pids[pid] = f"{pids[pid]}+{name}" if pid in pids else name
        if self.launcher_pid:
            pids[self.launcher_pid] = "launcher"
        for pid, node in pids.items():
            try:
                p = psutil.Process(pid)
                self.samples.append(
                    {
                        "time": now,
                        "node": node,
                        "pid": pid,
                        "rss_mb": p.memory_info().rss / 2**20,
                        "fds": p.num_fds(),
                        "threads": p.num_threads(),
                    }
                )
            except psutil.Error:
                continue

    def growth(self, warmup: float, start: float) -> dict[str, dict]:
        """Per node: first and last RSS, and the growth per hour (least squares
        over the samples after `warmup` s of each process's life, its longest
        life; None with fewer than 3 such samples)."""
        out = {}
        for node in sorted({s["node"] for s in self.samples}):
            lives: dict[int, list[dict]] = {}
            for s in self.samples:
                if s["node"] == node:
                    lives.setdefault(s["pid"], []).append(s)
            longest = max(lives.values(), key=lambda v: v[-1]["time"] - v[0]["time"])
            born = longest[0]["time"]
            warm = [s for s in longest if s["time"] - born >= warmup]
            entry = {
                "pids": len(lives),
                "rss_mb_first": longest[0]["rss_mb"],
                "rss_mb_last": longest[-1]["rss_mb"],
                "fds_last": longest[-1]["fds"],
                "threads_last": longest[-1]["threads"],
                "samples_after_warmup": len(warm),
            }
            for key, unit in (("rss_mb", "rss_mb_per_hour"), ("fds", "fds_per_hour")):
                entry[unit] = None
                if len(warm) >= 3:
                    t = np.array([s["time"] for s in warm]) / 3600.0
                    y = np.array([s[key] for s in warm], dtype=float)
                    entry[unit] = float(np.polyfit(t - t[0], y, 1)[0])
            entry["threads_per_hour"] = None
            if len(warm) >= 3:
                t = np.array([s["time"] for s in warm]) / 3600.0
                y = np.array([s["threads"] for s in warm], dtype=float)
                entry["threads_per_hour"] = float(np.polyfit(t - t[0], y, 1)[0])
            if entry["rss_mb_per_hour"] is not None and warm[0]["rss_mb"] > 0:
                entry["rss_pct_per_hour"] = 100.0 * entry["rss_mb_per_hour"] / warm[0]["rss_mb"]
            out[node] = entry
        return out


# ------------------------------------------------------------------ the schedule
def replay_check(run_dir: str, agent: str) -> dict:
    """The final checkpoint's items: each decodes; an Ape-X CartPole item holds
    right n-step values (tests/replay_checks.py's rule)."""
    from apex.replay import unpack_item
    from tools.replay_inspect import checkpoint_reader as cr

    path = checkpointing.latest_complete(run_dir)
    out = {"checkpoint": path, "items": 0, "mismatches": 0}
    if path is None:
        return out
    ckpt = checkpointing.load(path)
    replay = read_json(os.path.join(run_dir, "config.json")).get("replay", {})
    gamma, n = float(replay.get("discount", 0.99)), int(replay.get("n_step", 3))
    table = "transitions" if agent == "apex" else "sequences"
    returns = {k: sum(gamma**j for j in range(k)) for k in range(1, n + 1)}
    for shard_path in ckpt.shard_paths:
        for item in cr.iter_items(shard_path, table):
            out["items"] += 1
            if agent != "apex":
                continue
            data = unpack_item(item.data)
            reward, discount = float(data["reward"]), float(data["discount"])
            if discount > 0:
                k = int(round(np.log(discount) / np.log(gamma)))
                ok = 1 <= k <= n and np.isclose(discount, gamma**k, rtol=1e-6)
                ok = ok and np.isclose(reward, returns[k], rtol=1e-6)
            else:
                ok = any(np.isclose(reward, r, rtol=1e-6) for r in returns.values())
            out["mismatches"] += 0 if ok else 1
    return out


def fmt_s(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(result: dict) -> str:
    lines = [
        f"{'t (s)':>7}  {'fault':<13} {'node':<10} {'what the program did':<44} "
        f"{'insert s':>8} {'SGD s':>7} {'lost env':>9} {'lost SGD':>8}  counters"
    ]
    for e in result["events"]:
        back = e.get("counters_back")
        lines.append(
            f"{e['t']:7.1f}  {e['fault']:<13} {str(e.get('node', '-')):<10} "
            f"{str(e.get('did', e.get('error', '-')))[:44]:<44} {fmt_s(e.get('to_insert_s')):>8} "
            f"{'went on' if e.get('learner_went_on') else fmt_s(e.get('to_sgd_s')):>7} "
            f"{e.get('lost_env_steps', '-')!s:>9} "
            f"{e.get('lost_learner_steps', '-')!s:>8}  "
            + ("-" if back is None else ("ok" if not back else "BACK: " + "; ".join(back)))
        )
    lines.append("")
    lines.append(
        f"{'node':<20} {'pids':>4} {'RSS first':>9} {'RSS last':>9} {'MB/h':>8} {'%/h':>6} "
        f"{'fds':>5} {'fds/h':>7} {'threads':>7} {'thr/h':>7}"
    )
    for node, r in result["resources"].items():
        pct = r.get("rss_pct_per_hour")
        lines.append(
            f"{node:<20} {r['pids']:>4} {r['rss_mb_first']:>9.0f} {r['rss_mb_last']:>9.0f} "
            f"{fmt_s(r['rss_mb_per_hour']):>8} {'-' if pct is None else f'{pct:.1f}':>6} "
            f"{r['fds_last']:>5} {fmt_s(r['fds_per_hour']):>7} {r['threads_last']:>7} "
            f"{fmt_s(r['threads_per_hour']):>7}"
        )
    s = result["final_summary"]
    lines += [
        "",
        f"faults {result['faults']} (actor kills survived {result['actor_kills_survived']}, "
        f"program restarts by itself {result['survived_alone']}), "
        f"launches {result['launches']}, counter regressions {result['counter_regressions']}, "
        f"complete checkpoints at the end {result['complete_checkpoints_at_end']} "
        f"({result['checkpoints_not_loading']} do not load), replay items "
        f"{result['replay']['items']:,} ({result['replay']['mismatches']} mismatches), "
        f"processes left {result['processes_left']}",
        f"final: env steps {s['env_steps']}, learner steps {s['learner_steps']}, eval return "
        f"{s['eval_return_mean']} (best {s['best_eval_return_mean']}, target "
        f"{s['target_return']}), actor restarts in the last launch {s['actor_restarts']}",
        "problems: " + ("none" if not result["problems"] else "; ".join(result["problems"])),
    ]
    return "\n".join(lines)


def fill(path: str) -> int:
    """Writes `path` until its filesystem is full; returns the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        block = b"\0" * (1 << 20)
        while True:
            try:
                n = f.write(block) or 0
            except OSError:
                return written
            written += n
            if n < len(block):
                block = block[: max(4096, n)]


def flip_byte(path: str) -> None:
    """Flips one byte in the middle of `path` (a damaged checkpoint file)."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))


def mount_tmpfs(path: str, megabytes: int) -> str | None:
    """Mounts a tmpfs of `megabytes` at `path` (a disk the soak can fill); the
    reason it could not (not root), or None."""
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", path],
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else (done.stderr.strip() or "mount failed")
