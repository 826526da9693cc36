r"""Soak and chaos bench (issue 29): one run directory trained for `--minutes`
under a seeded schedule of faults, resumed after each fault that stops it.

    .venv/bin/python bench/soak.py [--minutes 60] [--agent apex|r2d2] [--shards 1|2]
        [--launcher local|ray --ray_simulate_nodes 3] [--seed 0] [--actor_kill_every 150]

The faults (docs/reliability.md says what each does to a program):
  actor_kill     SIGKILL of a random actor's process: it is started again in its
                 slot (launch.node_restarts); the program goes on.
  learner_kill   SIGKILL of the learner's process: the program stops ('node
                 failed'); the bench resumes the same run directory.
  sigterm        SIGTERM to the launcher: an orderly stop with a final
                 checkpoint (exit 143); the bench resumes.
  shard_kill     (--shards 2) SIGKILL of replay shard 1's process: the program
                 stops; the bench resumes.
  host_kill      (--launcher ray) SIGKILL of an actor's NodeHost (its Ray
                 worker): the actor starts again on any node that fits.
Actor kills come every ~`--actor_kill_every` s (seeded jitter, 0.5x-1.5x); the
learner kill, the SIGTERM and the shard kill at 35%, 60% and 80% of the run.
`--no_program_stops` leaves those out: one launch lives the whole soak (actor
kills only), so the learner's and replay's memory growth spans all of it.

Each event is logged with its time, what the program did (restart, stop,
resume) and the time to recover: to the actor's next insert (its first metrics
row after the kill, or the first 'actor_i inserting' line of the resumed
launch) and to the next SGD step (the learner's beat counting on, or the
resumed launch's 'learner: first SGD step' line), timed by this process's clock.
Checks after each event: env steps, episodes and learner steps never go back
(across a resume: not below the newest complete checkpoint before the fault,
the loss stated in env and learner steps); after a resume, each replay shard's
rate-limiter inserts and samples carry on from the checkpoint it resumed from
(the coordinator's first row: a server started empty would count from 0; the
items' priorities are checked exactly by tests/test_checkpoint.py's resume);
every complete checkpoint loads; no process of a stopped launch is left. At the end: the final checkpoint's replay
items decode and (apex agent) hold right n-step values; RSS, open files and
threads of every node process sampled every `--sample_seconds`, with growth
after `--warmup_minutes` as MB (or count) per hour per node; the evaluation
return after the last resume. Prints one table and writes
bench/results/soak-<agent>-<shards>-<launcher>-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import numpy as np
import psutil
from common import ROOT, header, save_results

from apex import checkpointing

TOKEN_VAR = "APEX_SOAK_TOKEN"
CONFIGS = {"apex": "configs/apex_cartpole.py", "r2d2": "configs/r2d2_cartpole_masked.py"}
STOP_TIMEOUT = 150.0  # a stopped launch's processes are gone within this (hang guard)
RECOVERY_TIMEOUT = 300.0
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
            # The soak resumes after a learner or shard kill itself (it does not
            # count the launcher's own restarts yet).
            "--config.checkpoint.max_program_restarts=0",
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
def schedule(args) -> list[tuple[float, str]]:
    """(seconds from the start, fault) in order, from --seed."""
    rng = random.Random(args.seed)
    total = args.minutes * 60.0
    events: list[tuple[float, str]] = []
    if not args.no_program_stops:
        events += [(0.35 * total, "learner_kill"), (0.60 * total, "sigterm")]
        if args.shards > 1:
            events.append((0.80 * total, "shard_kill"))
        if args.launcher == "ray":
            events.append((0.45 * total, "host_kill"))
    t = args.first_fault_seconds
    while t < total - 30.0:
        events.append((t, "actor_kill"))
        t += args.actor_kill_every * rng.uniform(0.5, 1.5)
    events.sort()
    # At least 20 s between two faults: each is judged on its own.
    out: list[tuple[float, str]] = []
    for at, kind in events:
        if out and at - out[-1][0] < 20.0:
            at = out[-1][0] + 20.0
        if at < total - 15.0:
            out.append((at, kind))
    return out


# ------------------------------------------------------------------ the soak
class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed + 1)
        self.run_dir = args.run_dir or tempfile.mkdtemp(prefix="apex-soak-")
        self.token = uuid.uuid4().hex
        self.events: list[dict] = []
        self.launch: Launch | None = None
        self.launches = 0
        self.sampler = Sampler(self.run_dir, args.sample_seconds)
        self.problems: list[str] = []
        self.start = time.time()

    def say(self, text: str) -> None:
        print(f"[soak {time.time() - self.start:7.1f}s] {text}", flush=True)

    # -------------------------------------------------------------- launches
    def new_launch(self) -> Launch:
        self.launch = Launch(self.args, self.run_dir, self.token)
        self.launches += 1
        self.sampler.launcher_pid = self.launch.proc.pid
        return self.launch

    def wait_learning(self, launch: Launch, after: float) -> tuple[float | None, float | None]:
        """Until the launch's first insert and first SGD step lines; their times."""
        got = poll(
            lambda: launch.first_line(_FIRST_SGD, after) or launch.proc.poll() is not None,
            RECOVERY_TIMEOUT,
        )
        if got is None or launch.proc.poll() is not None:
            tail = " | ".join(line for _, line in launch.lines[-5:])
            self.problems.append(f"launch {self.launches} did not reach its first SGD step: {tail}")
        return launch.first_line(_INSERTING, after), launch.first_line(_FIRST_SGD, after)

    def stopped_launch(self, code_expected: set[int]) -> dict:
        """Waits for the launch to exit; checks its code and that nothing is left."""
        launch = self.launch
        assert launch is not None
        code = launch.wait(STOP_TIMEOUT)
        left = poll(lambda: not processes(self.token), STOP_TIMEOUT) is not None
        out = {"exit_code": code, "processes_left": 0 if left else len(processes(self.token))}
        if code not in code_expected:
            self.problems.append(f"launch {self.launches} exited with {code}, not {code_expected}")
        if not left:
            names = []
            for p in processes(self.token):
                try:
                    names.append(" ".join(p.cmdline())[:160])
                    p.kill()
                except psutil.Error:
                    continue
            out["left"] = names
            self.problems.append(
                f"launch {self.launches} left {out['processes_left']} processes "
                f"{STOP_TIMEOUT:g} s after it exited: {names}"
            )
        summary = read_json(os.path.join(self.run_dir, "summary.json"))
        out["stop_reason"] = summary.get("stop_reason")
        out["failure"] = summary.get("failure")
        return out

    # -------------------------------------------------------------- faults
    def node_pid(self, node: str) -> int:
        beat = beats(self.run_dir).get(node, {})
        return int(beat.get("pid") or 0)

    def actor_kill(self, event: dict) -> None:
        n = self.num_actors()
        i = self.rng.randrange(n)
        node = f"actor_{i}"
        before = beats(self.run_dir).get(node, {})
        pid = int(before.get("pid") or 0)
        restarts = int((before.get("counters") or {}).get("restarts", 0))
        counts = counters(self.run_dir)
        learner_before = counts["learner_steps"]
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        event.update(node=node, pid=pid, did="restart")

        def inserted() -> dict | None:
            # The killed process writes nothing after t0: the first row after it is
            # the new process's, once a beat names a new pid. (Not "actor/restarts
            # went up": the restart count is checked on its own, below.)
            if self.node_pid(node) in (0, pid):
                return None
            rows = rows_after(self.run_dir, node, t0)
            return rows[0] if rows else None

        row = poll(inserted, RECOVERY_TIMEOUT)
        if row is None:
            event["did"] = "no restart seen"
            self.problems.append(
                f"{node} did not insert again after its kill at {t0 - self.start:.0f} s"
            )
        else:
            event["to_insert_s"] = float(row["time"]) - t0
            counted = poll(
                lambda: any(
                    r.get("actor/restarts", 0) > restarts
                    for r in rows_after(self.run_dir, node, t0)
                ),
                60.0,
            )
            event["restart_counted"] = counted is not None
            if counted is None:
                self.problems.append(
                    f"{node}'s restart after its kill at {t0 - self.start:.0f} s was not "
                    f"counted (actor/restarts stayed at {restarts})"
                )
        sgd = poll(lambda: counters(self.run_dir)["learner_steps"] > learner_before, 60.0)
        event["to_sgd_s"] = None  # the learner never stopped: nothing to recover
        event["learner_went_on"] = sgd is not None
        if sgd is None:
            self.problems.append(f"the learner did not step on after {node}'s kill")
        after = counters(self.run_dir)
        event["counters_back"] = [k for k in counts if after[k] < counts[k]]

    def host_kill(self, event: dict) -> None:
        placed = read_json(os.path.join(self.run_dir, "placement.json")).get("nodes", {})
        actors = sorted(n for n in placed if n.startswith("actor"))
        name = actors[self.rng.randrange(len(actors))]
        node = name.replace("/", "_")
        restarts = placed[name].get("restarts", 0)
        t0 = time.time()
        os.kill(int(placed[name]["host_pid"]), signal.SIGKILL)
        event.update(node=node, pid=placed[name]["host_pid"], did="restart elsewhere")
        row = poll(
            lambda: [
                r
                for r in rows_after(self.run_dir, node, t0)
                if r.get("actor/restarts", 0) > restarts
            ],
            RECOVERY_TIMEOUT,
        )
        if not row:
            event["did"] = "no restart seen"
            self.problems.append(f"{name}'s host kill: no insert after it")
        else:
            event["to_insert_s"] = float(row[0]["time"]) - t0

    def stopping_fault(self, event: dict, kind: str) -> None:
        """learner_kill, shard_kill, sigterm: the program stops; resume it."""
        # A fault that stops the program is resumed from a complete checkpoint:
        # wait (bounded) for the first one.
        period = float(self.args.checkpoint_period)
        if poll(lambda: checkpointing.latest_complete(self.run_dir), 2 * period + 120.0, 1.0):
            event["t"] = time.time() - self.start
        else:
            self.problems.append(f"{kind}: no complete checkpoint to resume from yet")
        before = counters(self.run_dir)
        ckpt_step, _ = latest_step(self.run_dir)
        t0 = time.time()
        if kind == "sigterm":
            assert self.launch is not None
            self.launch.proc.send_signal(signal.SIGTERM)
            event.update(node="launcher", pid=self.launch.proc.pid)
            expected = {143}
        else:
            node = "learner" if kind == "learner_kill" else f"replay_{self.args.shards - 1}"
            pid = self.node_pid(node)
            os.kill(pid, signal.SIGKILL)
            event.update(node=node, pid=pid)
            expected = {1}
        event.update(self.stopped_launch(expected))
        event["stopped_s"] = time.time() - t0
        event["checkpoints"], errors = checkpoints_load(self.run_dir)
        if errors:
            self.problems += errors
        resume_step, resume_state = latest_step(self.run_dir)
        resume_path = checkpointing.latest_complete(self.run_dir)
        saved_replay = replay_counts(resume_path) if resume_path else []
        launch = self.new_launch()
        event["did"] = f"stop (exit {event['exit_code']}), resume from step {resume_step:,}"
        ins, sgd = self.wait_learning(launch, launch.started)
        event["to_insert_s"] = None if ins is None else ins - t0
        event["to_sgd_s"] = None if sgd is None else sgd - t0
        resumed_env = sum(int(v) for v in resume_state.get("actor_steps", {}).values())
        # What the resume lost against the last state.json before the fault (at most
        # a metrics period old: a final checkpoint may be newer, then 0 is lost).
        event["lost_learner_steps"] = max(0, before["learner_steps"] - resume_step)
        event["lost_env_steps"] = max(0, before["env_steps"] - resumed_env)
        event["counters_back"] = []
        if resume_step < ckpt_step:  # a regression past the newest complete checkpoint
            event["counters_back"].append(f"learner step {resume_step} < {ckpt_step}")
        now = poll(lambda: counters(self.run_dir)["learner_steps"] > resume_step, 60.0)
        if not now:
            event["counters_back"].append("learner steps did not count on from the checkpoint")
        if (
            saved_replay
        ):  # the replay's rate limiter carried on from the checkpoint (its items: finish)
            event["replay_counts_at_resume"] = saved_replay
            event["counters_back"] += replay_restored(self.run_dir, saved_replay, launch.started)

    def num_actors(self) -> int:
        return sum(1 for n in beats(self.run_dir) if n.startswith("actor_"))

    # -------------------------------------------------------------- main
    def run(self) -> dict:
        a = self.args
        plan = schedule(a)
        self.say(
            f"run_dir {self.run_dir}; {len(plan)} faults over {a.minutes:g} min (seed {a.seed}): "
            + ", ".join(f"{kind}@{at:.0f}s" for at, kind in plan)
        )
        launch = self.new_launch()
        ins, sgd = self.wait_learning(launch, launch.started)
        self.events.append(
            {
                "t": 0.0,
                "fault": "launch",
                "did": "start",
                "to_insert_s": None if ins is None else ins - launch.started,
                "to_sgd_s": None if sgd is None else sgd - launch.started,
            }
        )
        self.sampler.start()
        self.start = launch.started
        for at, kind in plan:
            wait = self.start + at - time.time()
            if wait > 0:
                time.sleep(wait)
            if self.launch is None or self.launch.proc.poll() is not None:
                self.problems.append(f"the launch exited on its own before {kind} at {at:.0f} s")
                break
            event = {"t": time.time() - self.start, "fault": kind}
            self.say(f"fault: {kind}")
            try:
                if kind == "actor_kill":
                    self.actor_kill(event)
                elif kind == "host_kill":
                    self.host_kill(event)
                else:
                    self.stopping_fault(event, kind)
            except Exception as err:  # noqa: BLE001 - a bench records what went wrong and goes on
                event["error"] = f"{type(err).__name__}: {err}"
                self.problems.append(f"{kind} at {at:.0f} s: {event['error']}")
            self.events.append(event)
            self.say(json.dumps({k: v for k, v in event.items() if k != "t"}, default=str))
        rest = self.start + a.minutes * 60.0 - time.time()
        if rest > 0:
            time.sleep(rest)
        return self.finish()

    def finish(self) -> dict:
        a = self.args
        self.sampler.sample()
        self.sampler.stop()
        end = {"fault": "end", "t": time.time() - self.start, "did": "Ctrl-C (SIGINT)"}
        if self.launch is not None and self.launch.proc.poll() is None:
            self.launch.proc.send_signal(signal.SIGINT)
            end.update(self.stopped_launch({130}))
        self.events.append(end)
        summary = read_json(os.path.join(self.run_dir, "summary.json"))
        n, errors = checkpoints_load(self.run_dir)
        self.problems += errors
        replay = replay_check(self.run_dir, a.agent)
        if replay["mismatches"]:
            self.problems.append(f"{replay['mismatches']} replay items fail the checks")
        resources = self.sampler.growth(a.warmup_minutes * 60.0, self.start)
        regressions = sum(len(e.get("counters_back") or []) for e in self.events)
        return {
            "args": vars(a),
            "run_dir": self.run_dir,
            "launches": self.launches,
            "events": self.events,
            "faults": sum(1 for e in self.events if e["fault"] not in ("launch", "end")),
            "actor_kills_survived": sum(
                1 for e in self.events if e["fault"] == "actor_kill" and e.get("to_insert_s")
            ),
            "counter_regressions": regressions,
            "complete_checkpoints_at_end": n,
            "checkpoints_not_loading": len(errors),
            "replay": replay,
            "processes_left": len(processes(self.token)),
            "resources": resources,
            "final_summary": {
                k: summary.get(k)
                for k in (
                    "env_steps",
                    "learner_steps",
                    "episodes",
                    "eval_return_mean",
                    "best_eval_return_mean",
                    "target_return",
                    "actor_restarts",
                    "stop_reason",
                )
            },
            "problems": self.problems,
        }


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
        f"faults {result['faults']} (actor kills survived {result['actor_kills_survived']}), "
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


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--agent", choices=sorted(CONFIGS), default="apex")
    ap.add_argument("--shards", type=int, choices=(1, 2), default=1)
    ap.add_argument("--launcher", choices=("local", "ray"), default="local")
    ap.add_argument("--ray_simulate_nodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--actor_kill_every", type=float, default=150.0)
    ap.add_argument("--first_fault_seconds", type=float, default=60.0)
    ap.add_argument("--checkpoint_period", type=float, default=60.0)
    ap.add_argument("--sample_seconds", type=float, default=60.0)
    ap.add_argument("--warmup_minutes", type=float, default=10.0)
    ap.add_argument("--run_dir", default="")
    ap.add_argument(
        "--no_program_stops",
        action="store_true",
        help="no learner kill, SIGTERM, shard or host kill: one launch lives the whole "
        "soak (actor kills only), so every node's memory growth spans it",
    )
    ap.add_argument(
        "--override",
        action="append",
        default=[],
        help="a config override for every launch, e.g. "
        "--override=--config.actor.restart_backoff_seconds=0.2 (repeatable)",
    )
    ap.add_argument("--no_save", action="store_true", help="print only; write no results file")
    args = ap.parse_args()
    print(header("bench/soak.py"), flush=True)
    soak = Soak(args)
    try:
        result = soak.run()
    finally:
        for p in processes(soak.token):  # whatever a crash of this bench left
            p.kill()
    print(table(result), flush=True)
    if not args.no_save:
        name = f"soak-{args.agent}-{args.shards}shard-{args.launcher}"
        print(f"results: {save_results(name, result)}")
    return 0 if not result["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
