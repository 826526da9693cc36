r"""Soak and chaos bench: one run directory trained for `--minutes`
under a seeded schedule of faults; the program recovers from each by itself,
but a SIGTERM, which the bench resumes.

    .venv/bin/python bench/soak.py [--minutes 60] [--agent apex|r2d2] [--shards 1|2]
        [--launcher local|ray --ray_simulate_nodes 3] [--seed 0] [--actor_kill_every 150]

The faults (docs/reliability.md says what each does to a program):
  actor_kill     SIGKILL of a random actor's process: it is started again in its
                 slot (launch.node_restarts); the program goes on.
  learner_kill   SIGKILL of the learner's process (at 25%, 45% and 70% of the
                 run): the program starts again by itself from its newest
                 complete checkpoint (checkpoint.max_program_restarts).
  shard_kill     (--shards 2, at 80%) SIGKILL of the last replay shard's
                 process: the same.
  damaged_checkpoint  (at 90%) one byte of the newest complete checkpoint's
                 Reverb chunks flipped, then the learner SIGKILLed: the restart
                 sets that checkpoint aside and resumes from the one before.
  disk_full      (at 35%, with --disk_mb: the run directory on a tmpfs of that
                 size, root only) the filesystem filled for --disk_full_seconds,
                 then freed: training goes on, a checkpoint completes after it.
  sigterm        (at 60%) SIGTERM to the launcher: an orderly stop with a final
                 checkpoint (exit 143); the bench resumes it from outside.
  host_kill      (--launcher ray, at 50%) SIGKILL of an actor's NodeHost (its
                 Ray worker): the actor starts again on any node that fits.
Actor kills come every ~`--actor_kill_every` s (seeded jitter, 0.5x-1.5x).
`--no_program_stops` leaves the others out: one launch lives the whole soak
(actor kills only), so the learner's and replay's memory growth spans all of it.
The launches set checkpoint.crash_loop_seconds=20 (kills come >= 20 s apart).

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
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import psutil
from common import header, save_results
from soak_faults import Faults
from soak_parts import (
    _FIRST_SGD,
    _INSERTING,
    CONFIGS,
    RECOVERY_TIMEOUT,
    STOP_TIMEOUT,
    Launch,
    Sampler,
    beats,
    checkpoints_load,
    mount_tmpfs,
    poll,
    processes,
    read_json,
    replay_check,
    table,
)


def schedule(args) -> list[tuple[float, str]]:
    """(seconds from the start, fault) in order, from --seed."""
    rng = random.Random(args.seed)
    total = args.minutes * 60.0
    events: list[tuple[float, str]] = []
    if not args.no_program_stops:
        events += [(f * total, "learner_kill") for f in (0.25, 0.45, 0.70)]
        events += [(0.60 * total, "sigterm"), (0.90 * total, "damaged_checkpoint")]
        if args.disk_mb:
            events.append((0.35 * total, "disk_full"))
        if args.shards > 1:
            events.append((0.80 * total, "shard_kill"))
        if args.launcher == "ray":
            events.append((0.50 * total, "host_kill"))
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
class Soak(Faults):
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed + 1)
        self.run_dir = args.run_dir or tempfile.mkdtemp(prefix="apex-soak-")
        self.mounted = False
        if args.disk_mb:  # a disk the soak can fill (disk_full)
            why = mount_tmpfs(self.run_dir, args.disk_mb)
            self.mounted = why is None
            if why is not None:
                print(f"[soak] no disk_full fault: cannot mount a tmpfs ({why})", flush=True)
                args.disk_mb = 0
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
                elif kind == "disk_full":
                    self.disk_full(event)
                elif kind == "sigterm":
                    self.outside_resume(event, kind)
                else:
                    self.self_restart(event, kind)
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
            "survived_alone": sum(
                1 for e in self.events if str(e.get("did", "")).startswith("restarted itself")
            ),
            "relaunches_from_outside": self.launches - 1,
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
                    "program_restarts",
                    "disk_full",
                    "stop_reason",
                )
            },
            "problems": self.problems,
        }


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
        "--disk_mb",
        type=int,
        default=512,
        help="the run directory on a tmpfs of this size (root only), filled once for "
        "--disk_full_seconds (0: no disk-full fault, the run directory on disk)",
    )
    ap.add_argument("--disk_full_seconds", type=float, default=30.0)
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
        if soak.mounted:  # the tmpfs goes, and the run directory with it (the record stays)
            subprocess.run(["umount", "-l", soak.run_dir], capture_output=True)
    print(table(result), flush=True)
    if not args.no_save:
        name = f"soak-{args.agent}-{args.shards}shard-{args.launcher}"
        print(f"results: {save_results(name, result)}")
    return 0 if not result["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
