"""The soak's faults (bench/soak.py): each one done to the running program and
what the program did about it, checked and timed; mixed into its Soak."""

from __future__ import annotations

import os
import signal
import time

from soak_parts import (
    _FIRST_SGD,
    _INSERTING,
    RECOVERY_TIMEOUT,
    beats,
    checkpoints_load,
    counters,
    fill,
    flip_byte,
    latest_step,
    poll,
    read_json,
    replay_counts,
    replay_restored,
    rows_after,
)

from apex import checkpointing, read_program_restarts


class Faults:
    """The fault methods of bench/soak.py's Soak (its run_dir, args, launch,
    start, problems and node helpers)."""

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

    def _a_checkpoint(self, event: dict, kind: str) -> None:
        """Waits (bounded) for a complete checkpoint: what a stop resumes from."""
        period = float(self.args.checkpoint_period)
        if poll(lambda: checkpointing.latest_complete(self.run_dir), 2 * period + 120.0, 1.0):
            event["t"] = time.time() - self.start
        else:
            self.problems.append(f"{kind}: no complete checkpoint to resume from yet")

    def self_restart(self, event: dict, kind: str) -> None:
        """learner_kill, shard_kill, damaged_checkpoint (the newest complete one
        gets a flipped byte, then the learner is killed): the program comes back
        by itself (checkpoint.max_program_restarts); nobody relaunches it."""
        self._a_checkpoint(event, kind)
        ckpt_step, _ = latest_step(self.run_dir)
        done = len(read_program_restarts(self.run_dir))
        damaged = None
        if kind == "damaged_checkpoint":
            damaged = checkpointing.latest_complete(self.run_dir)
            name = "replay/chunks.tfrecord" if self.args.shards == 1 else "replay_0/chunks.tfrecord"
            flip_byte(os.path.join(damaged, name))
            event["damaged"] = f"{os.path.basename(damaged)}/{name}"
        node = f"replay_{self.args.shards - 1}" if kind == "shard_kill" else "learner"
        pid = self.node_pid(node)
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        event.update(node=node, pid=pid, did="no restart seen")

        def resumed() -> dict | None:
            records = read_program_restarts(self.run_dir)[done:]
            return records[-1] if records and "resumed_from" in records[-1] else None

        rec = poll(resumed, RECOVERY_TIMEOUT)
        launch = self.launch
        if rec is None or launch is None:
            self.problems.append(f"{kind} at {t0 - self.start:.0f} s: the program did not restart")
            return
        sgd = poll(lambda: launch.first_line(_FIRST_SGD, t0), RECOVERY_TIMEOUT)
        ins = launch.first_line(_INSERTING, t0)
        event["did"] = f"restarted itself from {rec['resumed_from']}"
        event["to_insert_s"] = None if ins is None else ins - t0
        event["to_sgd_s"] = None if sgd is None else sgd - t0
        event["lost_env_steps"] = rec.get("env_steps_lost")
        event["lost_learner_steps"] = rec.get("sgd_steps_lost")
        resume_step = int(rec["resumed_from"].split("-")[1])
        back = []
        if damaged is not None:
            event["set_aside"] = os.path.isdir(damaged + ".damaged") and rec[
                "resumed_from"
            ] != os.path.basename(damaged)
            if not event["set_aside"]:
                self.problems.append(f"the damaged {event['damaged']} was not set aside")
        elif resume_step < ckpt_step:  # a regression past the newest complete checkpoint
            back.append(f"learner step {resume_step} < {ckpt_step}")
        if not poll(lambda: counters(self.run_dir)["learner_steps"] > resume_step, 60.0):
            back.append("learner steps did not count on from the checkpoint")
        path = os.path.join(checkpointing.checkpoints_dir(self.run_dir), rec["resumed_from"])
        # Rows of the new life only: the old coordinator writes rows with its last
        # (stale) poll of a dead shard until its stop ends, before the record's time.
        back += replay_restored(self.run_dir, replay_counts(path), float(rec["time"]))
        event["counters_back"] = back

    def disk_full(self, event: dict) -> None:
        """The run directory's filesystem filled for --disk_full_seconds, then freed:
        training goes on, and a checkpoint is complete again after it."""
        launch = self.launch
        assert launch is not None
        filler = os.path.join(self.run_dir, "soak-filler")
        t0 = time.time()
        steps = launch.learner_steps()
        event.update(node="disk", bytes_filled=fill(filler))
        time.sleep(self.args.disk_full_seconds)  # the window (a bench, not a test)
        went_on = launch.learner_steps(after=t0) > steps
        full_step = launch.learner_steps()
        os.remove(filler)
        later = poll(
            lambda: latest_step(self.run_dir)[0] > full_step, 2 * self.args.checkpoint_period + 60
        )
        said = [line for t, line in launch.lines if t >= t0]
        abandoned = sum("abandoned, the disk is full" in line for line in said)
        event["did"] = (
            f"full {self.args.disk_full_seconds:g} s: {abandoned} checkpoint(s) abandoned"
        )
        event["learner_went_on"] = went_on
        event["counters_back"] = []
        if not went_on:
            self.problems.append("the learner did not step on while the disk was full")
        if not later:
            self.problems.append("no complete checkpoint after the disk had space again")
        if any("Traceback" in line for line in said):
            self.problems.append("a traceback while the disk was full")

    def outside_resume(self, event: dict, kind: str) -> None:
        """sigterm: the program stops in order (exit 143); the bench resumes it."""
        self._a_checkpoint(event, kind)
        before = counters(self.run_dir)
        ckpt_step, _ = latest_step(self.run_dir)
        t0 = time.time()
        assert self.launch is not None
        self.launch.proc.send_signal(signal.SIGTERM)
        event.update(node="launcher", pid=self.launch.proc.pid)
        event.update(self.stopped_launch({143}))
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
