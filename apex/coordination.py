"""The coordinator: the program's control plane. It counts, receives every
node's beats and decides liveness and "finished" from them, writes the run
directory's files for the nodes that cannot (metrics of remote nodes,
heartbeats, state.json, replay_address, summary.json), prints progress and
stops the program.

With replay.num_shards S > 1 it polls every shard's server: the replay
figures (metrics rows, state.json, summary.json, the progress line) are
totals over the shards, with each shard's own next to them
(`replay/shard_<s>/...` rows, summary.json's `replay_shards`); the file
RUN_DIR/replay_address names shard 0's server and RUN_DIR/replay_addresses
every shard's, one line each: `<shard name> <HOST:PORT>` (REPLAY_ADDRESSES_FILE).
A shard server in a process of its own beats like any node, so its death stops
the program with 'node failed' naming it.

Every call a node makes to it is an RPC with a bounded timeout (courier),
so a node on another host, with no access to the run directory, takes part
in a run, a stop and a resume.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from apex.config import ApexConfig, env_steps_per_item
from apex.doctor import diagnose
from apex.heartbeat import HOST, HeartbeatStore
from apex.jsonio import write_json_atomic
from apex.metrics import MetricsWriter
from apex.replay.inspect import stats_from_server_info
from apex.replay.shards import ADDRESSES_FILE, shard_name
from apex.supervision import death_message

REPLAY_ADDRESS_FILE = "replay_address"
"""RUN_DIR/replay_address: HOST:PORT of the replay server (shard 0's with shards)."""
REPLAY_ADDRESSES_FILE = (
    ADDRESSES_FILE  # apex.replay.shards: one `<shard_name> <HOST:PORT>` per line
)
"""RUN_DIR/replay_addresses (replay.num_shards > 1 only): one line per shard,
shard s on line s+1, `<shard name> <HOST:PORT>`, e.g. `replay_1 localhost:40123`."""
# The per-shard figures of the metrics rows (replay/shard_<s>/<key>) and of
# summary.json's replay_shards.
SHARD_KEYS = ("size", "inserts", "samples", "samples_per_insert")

SUMMARY_KEYS = (
    "env_steps",
    "learner_steps",
    "wall_seconds",
    "first_learner_step_seconds",
    "env_steps_per_second",
    "learner_steps_per_second",
    "samples_per_insert",
    "eval_return_mean",
    "best_eval_return_mean",
    "best_eval_version",
    "solved_at_wall_seconds",
    "solved_at_env_steps",
)


class Coordinator:
    """Counter and stopper of a program.

    Actors, the learner and the evaluator report to it; `run` polls the replay
    table, writes `coordinator` metrics, prints a progress line, checks the stop
    criteria and, when one is reached, writes summary.json and calls
    `stop_program`. If the program is stopped from outside (Ctrl-C, SIGTERM),
    `run` writes summary.json before it returns.

    Args:
      config: the program config.
      run_dir: where summary.json and state.json go ('' : nowhere).
      start_time: unix time of the launch (wall_seconds count from it).
      replay_client: a reverb.Client of the replay server (None: no replay stats),
        or a list of one per replay shard (shard s at index s).
      stop_program: called once when a stop criterion is reached.
      metrics: the coordinator's own metrics rows.
      out: where progress lines go (default stdout).
      silent_after: seconds without a beat after which a node on another host
        counts as gone (a node on this host is gone when its process is).
    """

    def __init__(
        self,
        config: ApexConfig,
        run_dir: str,
        start_time: float,
        replay_client: Any = None,
        stop_program: Callable[[], None] | None = None,
        metrics: MetricsWriter | None = None,
        out: Any = None,
        silent_after: float = 60.0,
    ):
        self._config = config
        self._run_dir = run_dir
        self._start = float(start_time)
        if isinstance(replay_client, (list, tuple)):
            self._replays = list(replay_client)
        else:
            self._replays = [] if replay_client is None else [replay_client]
        self._replay = self._replays[0] if self._replays else None
        self.shard_names = [shard_name(s, len(self._replays)) for s in range(len(self._replays))]
        self._stop_program = stop_program
        self._metrics = metrics
        self._out = out if out is not None else sys.stdout
        self._lock = threading.Lock()
        self._actor_steps: dict[int, int] = {}
        self._actor_episodes: dict[int, int] = {}
        self._actor_start: dict[int, float] = {}
        self._recent_returns: list[float] = []
        self._learner_steps = 0
        self._learner_first_step: float | None = None
        self._learner_row: dict[str, Any] = {}
        self._eval: dict[str, Any] | None = None
        # (return, wall s, env steps, param version); the learner keeps its parameters
        self._best: tuple[float, float, int, int | None] | None = None
        self._table_stats: list[dict[str, Any]] = []
        # With shards: each shard's table stats (None until its first poll) and
        # figures (the keys of _replay_info), shard s at index s.
        self._shard_stats: list[dict[str, Any] | None] = [None] * len(self._replays)
        self._shard_info: list[dict[str, float]] = [{} for _ in self._replays]
        self._reported: dict[tuple[str, str], float] = {}
        self._doctor_lines = 0
        self.findings: list[Any] = []
        self._failure: str | None = None
        self._solved_at: tuple[float, int] | None = None
        self._replay_info: dict[str, float] = {}
        self._env_steps_per_item = env_steps_per_item(config)
        self.stop_reason: str | None = None
        # Set once the stop is decided: summary.json's evaluation is final, and a
        # later one is refused (report_eval returns False; the evaluator then
        # writes no row for it).
        self._frozen = False
        self._checkpoint: dict[str, Any] | None = None
        self._checkpoint_event = threading.Event()
        self._resumed_from: str | None = None
        self.final_checkpoint_timeout = 0.0  # seconds run() waits at a stop for the learner's
        self.heartbeats = HeartbeatStore(run_dir, silent_after=silent_after)
        self._node_metrics: dict[str, MetricsWriter] = {}
        if run_dir and self._replay is not None:
            # For tools: python -m tools.replay stats --run_dir=RUN_DIR finds the live server.
            address = getattr(self._replay, "server_address", None)
            if address:
                with open(os.path.join(run_dir, REPLAY_ADDRESS_FILE), "w") as f:
                    f.write(address + "\n")
            if len(self._replays) > 1:
                lines = [
                    f"{name} {getattr(client, 'server_address', '')}\n"
                    for name, client in zip(self.shard_names, self._replays)
                ]
                with open(os.path.join(run_dir, REPLAY_ADDRESSES_FILE), "w") as f:
                    f.writelines(lines)

    # --------------------------------------------------------- control plane
    def heartbeat(self, beat: dict[str, Any]) -> None:
        """A node's beat (RPC): recorded, and written to RUN_DIR/heartbeats for tools."""
        self.heartbeats.record(beat)

    def forget_node(self, node: str) -> None:
        """The launcher restarts `node` on another host (RPC): its old beats are not
        a death (apex.heartbeat.HeartbeatStore.forget)."""
        self.heartbeats.forget(node)

    def actor_counts(self, actor_id: int) -> tuple[int, int]:
        """(env steps, episodes) actor `actor_id` reported last (RPC): a restarted
        actor carries on from them, so the run's counts never go back."""
        with self._lock:
            return (
                int(self._actor_steps.get(int(actor_id), 0)),
                int(self._actor_episodes.get(int(actor_id), 0)),
            )

    def node_finished(self, node: str) -> bool | None:
        """Whether `node` stopped or is gone (None: it never sent a beat)."""
        return self.heartbeats.finished(node)

    def nodes_finished(self, prefix: str) -> bool:
        """Whether every node named `prefix`... has stopped or is gone."""
        return self.heartbeats.all_finished(prefix)

    def write_metrics(self, component: str, step_key: str, row: dict[str, Any]) -> None:
        """A metrics row of a node that does not write the run directory itself (RPC)."""
        with self._lock:
            writer = self._node_metrics.get(component)
            if writer is None:
                writer = MetricsWriter(
                    self._run_dir,
                    component,
                    step_key=step_key,
                    tensorboard=self._config.logging.tensorboard,
                )
                self._node_metrics[component] = writer
        writer.write(row)

    def close(self) -> None:
        """Closes the metrics files of remote nodes; doctor.log says how the run went."""
        for writer in [*self._node_metrics.values(), self._metrics]:
            if writer is not None:
                writer.close()
        if self._doctor_lines == 0:
            self._doctor_log(
                "[apex doctor] no stall found in this run "
                f"(logging.stall_seconds={self._config.logging.stall_seconds:g})"
            )

    def _doctor_log(self, line: str) -> None:
        """Appends to RUN_DIR/doctor.log (which every run has, findings or not)."""
        self._doctor_lines += 1
        if self._run_dir:
            with open(os.path.join(self._run_dir, "doctor.log"), "a") as log:
                log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    # ------------------------------------------------------- checkpointing
    def checkpoint_state(self) -> dict[str, Any]:
        """The counters a run checkpoint keeps (JSON-safe); `restore` reads them back."""
        with self._lock:
            first_act = min(self._actor_start.values()) if self._actor_start else None
            return {
                "wall_seconds": time.time() - self._start,
                "actor_steps": {str(k): v for k, v in self._actor_steps.items()},
                "actor_episodes": {str(k): v for k, v in self._actor_episodes.items()},
                "learner_steps": self._learner_steps,
                "first_learner_step_seconds": None
                if self._learner_first_step is None
                else self._learner_first_step - self._start,
                "first_actor_seconds": None if first_act is None else first_act - self._start,
                "eval": self._eval,
                "best_eval": None if self._best is None else list(self._best),
                "solved_at": None if self._solved_at is None else list(self._solved_at),
            }

    def restore(self, state: dict[str, Any], checkpoint_path: str = "") -> None:
        """Continues from a checkpoint's counters: env and learner steps, wall
        seconds (the clock continues from the saved value), evaluations."""
        with self._lock:
            self._start -= float(state.get("wall_seconds", 0.0))
            self._actor_steps = {int(k): int(v) for k, v in state.get("actor_steps", {}).items()}
            self._actor_episodes = {
                int(k): int(v) for k, v in state.get("actor_episodes", {}).items()
            }
            self._learner_steps = int(state.get("learner_steps", 0))
            if state.get("first_learner_step_seconds") is not None:
                self._learner_first_step = self._start + state["first_learner_step_seconds"]
            if state.get("first_actor_seconds") is not None:
                for actor_id in self._actor_steps:
                    self._actor_start[actor_id] = self._start + state["first_actor_seconds"]
            self._eval = state.get("eval")
            best = state.get("best_eval")
            self._best = (*best, None)[:4] if best else None  # older checkpoints: no version
            self._solved_at = tuple(state["solved_at"]) if state.get("solved_at") else None
            self._resumed_from = checkpoint_path or None

    def checkpoint_written(
        self, path: str, step: int, seconds: float, size: int, final: bool = False
    ) -> None:
        """The learner wrote a run checkpoint (`final`: the one at a stop, which
        releases `run`)."""
        with self._lock:
            self._checkpoint = {
                "path": path,
                "learner_step": step,
                "seconds": seconds,
                "bytes": size,
            }
        if final:
            self._checkpoint_event.set()

    # -------------------------------------------------------------- reports
    def report_actor(
        self,
        actor_id: int,
        env_steps: int,
        episodes: int,
        returns: list[float],
        start_time: float | None = None,
    ) -> None:
        with self._lock:
            if actor_id not in self._actor_start:
                self._actor_start[actor_id] = start_time or time.time()
            self._actor_steps[int(actor_id)] = int(env_steps)
            self._actor_episodes[int(actor_id)] = int(episodes)
            self._recent_returns.extend(float(r) for r in returns)

    def report_failure(self, node: str, message: str) -> None:
        """A node gave up (e.g. an actor past actor.max_restarts) or died of an
        exception ('<Type>: <message>'): stop the program with 'node failed',
        naming it as '<node>: <message>' (RPC). A replay shard found dead by
        then is named first: its clients' errors follow from its death."""
        self._check_dead_shards()
        self.report_failure_text(f"{node}: {message}")

    def _check_dead_shards(self) -> None:
        if len(self._replays) < 2 or self._failure is not None:
            return
        dead = [b for b in self.heartbeats.dead() if b.get("node") in self.shard_names]
        if dead:
            self.check_nodes()

    def report_failure_text(self, failure: str) -> None:
        """Records `failure` (the first one is kept: the likely cause)."""
        with self._lock:
            if self._failure is None:  # the first failure is the likely cause
                self._failure = failure

    def report_learner(
        self, steps: int, first_step_time: float | None, row: dict[str, Any]
    ) -> dict[str, Any]:
        """The learner's counters; returns the run's counters (what a run checkpoint
        keeps), which the learner holds for a checkpoint after this node is gone."""
        with self._lock:
            self._learner_steps = int(steps)
            if first_step_time is not None and self._learner_first_step is None:
                self._learner_first_step = float(first_step_time)
            self._learner_row = dict(row)
        return self.checkpoint_state()

    def report_eval(
        self,
        return_mean: float,
        version: int,
        returns: list[float],
        env_steps: int | None = None,
    ) -> bool:
        """An evaluation of the parameters of learner step `version`, pulled when
        the run had `env_steps` env steps (None: as of now). Returns whether it
        is accepted: False once the stop is decided (summary.json's evaluation is
        final then; the evaluator writes no row for a refused one)."""
        now = time.time()
        with self._lock:
            if self._frozen:
                return False
            steps = self.env_steps if env_steps is None else int(env_steps)
            self._eval = {
                "return_mean": float(return_mean),
                "version": int(version),
                "returns": list(returns),
                "time": now,
                "env_steps": steps,
            }
            if self._best is None or return_mean >= self._best[0]:  # as the learner keeps it
                self._best = (float(return_mean), now - self._start, steps, int(version))
            if self._solved_at is None and self.reaches_target(return_mean):
                self._solved_at = (now - self._start, steps)
        return True

    def reaches_target(self, return_mean: float) -> bool:
        """Whether `return_mean` counts as solved (never without a target_return)."""
        target = self._config.evaluation.target_return
        if target is None or isinstance(target, str):  # None: no target ('auto' unresolved)
            return False
        return float(return_mean) >= float(target)

    # ---------------------------------------------------------------- state
    @property
    def env_steps(self) -> int:
        return sum(self._actor_steps.values())

    def get_counts(self) -> dict[str, Any]:
        with self._lock:
            return {
                "env_steps": self.env_steps,
                "learner_steps": self._learner_steps,
                "episodes": sum(self._actor_episodes.values()),
                "eval_return_mean": None if self._eval is None else self._eval["return_mean"],
            }

    _INFO_KEYS = ("size", "capacity", "inserts", "samples", "samples_per_insert", "unique_samples")

    def _poll_replay(self) -> None:
        if self._replay is None:
            return
        if len(self._replays) > 1:
            self._poll_shards()
            return
        try:
            info = self._replay.server_info(timeout=2)
        except Exception:  # noqa: BLE001 - the server may be gone at shutdown
            return
        self._table_stats = stats_from_server_info(info)
        if self._table_stats:  # the program's one table
            t = self._table_stats[0]
            self._replay_info = {k: t[k] for k in self._INFO_KEYS}

    def _poll_shards(self) -> None:
        """Every shard's server_info; a shard that does not answer keeps its last
        figures (the totals are over the last figures of every shard)."""
        for s, client in enumerate(self._replays):
            try:
                stats = stats_from_server_info(client.server_info(timeout=2))
            except Exception:  # noqa: BLE001 - the server may be gone (shutdown, or dead)
                continue
            if stats:  # the shard's one table
                self._shard_stats[s] = stats[0]
                self._shard_info[s] = {k: stats[0][k] for k in self._INFO_KEYS}
        known = [i for i in self._shard_info if i]
        if not known:
            return
        total = {
            k: sum(i[k] for i in known)
            for k in ("size", "capacity", "inserts", "samples", "unique_samples")
        }
        total["samples_per_insert"] = (
            total["samples"] / total["inserts"] if total["inserts"] else 0.0
        )
        self._replay_info = total
        self._table_stats = [t for t in self._shard_stats if t is not None]

    def shard_figures(self) -> dict[str, dict[str, Any]]:
        """Each shard's figures by shard name (SHARD_KEYS; None before its first
        poll); empty with one replay server."""
        if len(self._replays) < 2:
            return {}
        return {
            name: {k: info.get(k) for k in SHARD_KEYS}
            for name, info in zip(self.shard_names, self._shard_info)
        }

    def summary(self) -> dict[str, Any]:
        now = time.time()
        with self._lock:
            env_steps = self.env_steps
            first_act = min(self._actor_start.values()) if self._actor_start else None
            lfs = self._learner_first_step
            s = {
                "env_steps": env_steps,
                "learner_steps": self._learner_steps,
                "episodes": sum(self._actor_episodes.values()),
                "wall_seconds": now - self._start,
                "first_learner_step_seconds": None if lfs is None else lfs - self._start,
                "env_steps_per_second": env_steps / (now - first_act)
                if first_act and now > first_act
                else 0.0,
                "env_steps_per_second_since_launch": env_steps / max(1e-9, now - self._start),
                "learner_steps_per_second": self._learner_steps / (now - lfs)
                if lfs and now > lfs
                else 0.0,
                "samples_per_insert": self._replay_info.get("samples_per_insert"),
                "replay_size": self._replay_info.get("size"),
                "replay_inserts": self._replay_info.get("inserts"),
                "replay_samples": self._replay_info.get("samples"),
                "eval_return_mean": None if self._eval is None else self._eval["return_mean"],
                "eval_returns": None if self._eval is None else self._eval["returns"],
                "best_eval_return_mean": None if self._best is None else self._best[0],
                "best_eval_at_wall_seconds": None if self._best is None else self._best[1],
                "best_eval_at_env_steps": None if self._best is None else self._best[2],
                "best_eval_version": None if self._best is None else self._best[3],
                "target_return": self._config.evaluation.target_return,
                "solved_at_wall_seconds": None if self._solved_at is None else self._solved_at[0],
                "solved_at_env_steps": None if self._solved_at is None else self._solved_at[1],
                "stop_reason": self.stop_reason,
                "failure": self._failure,
                # Unix time wall_seconds count from (a resumed run's clock continues):
                # tools.plot draws every series against it.
                "clock_start_time": self._start,
                "policy_lag_p50_steps": self._learner_row.get("learner/policy_lag_p50_steps"),
                "checkpoint": self._checkpoint,
                "resumed_from": self._resumed_from,
            }
            if len(self._replays) > 1:
                s["replay_shards"] = self.shard_figures()
        return s

    def write_summary(self) -> dict[str, Any]:
        """summary.json, and state.json with the same figures (a run that stops
        between two state writes still ends with state.json at its last counts)."""
        s = self.summary()
        if self._run_dir:
            write_json_atomic(os.path.join(self._run_dir, "summary.json"), s)
            self._write_state()
        return s

    def _write_state(self) -> None:
        if self._run_dir:
            # counters: what a run checkpoint keeps, for the learner if this node dies
            state = dict(self.summary(), counters=self.checkpoint_state())
            write_json_atomic(os.path.join(self._run_dir, "state.json"), state)

    # ---------------------------------------------------------------- loop
    def check_stop(self) -> str | None:
        """The name of the first stop criterion reached, or None."""
        sc = self._config.stop
        if self._failure is not None:  # first: it explains whatever else happens
            return "node failed"
        if sc.max_actor_steps is not None and self.env_steps >= sc.max_actor_steps:
            return "max_actor_steps"
        if sc.max_learner_steps is not None and self._learner_steps >= sc.max_learner_steps:
            return "max_learner_steps"
        if sc.max_wall_seconds is not None and time.time() - self._start >= sc.max_wall_seconds:
            return "max_wall_seconds"
        if sc.when_solved and self._solved_at is not None:
            return "solved"
        return None

    def env_steps_now(self) -> int:
        """Env steps as of now: the actors' reports (up to a report period old), or,
        when the replay has seen more inserts than that explains, the steps those
        inserts took (each item follows `env_steps_per_item` env steps), so the
        progress line never shows fewer env steps than items in replay."""
        inserts = self._replay_info.get("inserts") or 0
        return max(self.env_steps, int(inserts * self._env_steps_per_item))

    def progress_line(self, rates: dict[str, float]) -> str:
        r = self._replay_info
        ev = "-" if self._eval is None else f"{self._eval['return_mean']:.1f}"
        shards = ""
        if len(self._replays) > 1:  # each shard's size: ' (1,200+1,180)'
            shards = " (" + "+".join(f"{i.get('size', 0):,}" for i in self._shard_info) + ")"
        return (
            f"[apex {time.time() - self._start:6.1f}s] env_steps {self.env_steps_now():,} "
            f"({rates.get('env', 0.0):,.0f}/s) | learner_steps {self._learner_steps:,} "
            f"({rates.get('learner', 0.0):.1f}/s) | replay {r.get('size', 0):,}/{r.get('capacity', 0):,}"
            f"{shards} | samples/insert {r.get('samples_per_insert', 0.0):.2f} | eval_return {ev}"
        )

    def run(self, should_stop: Callable[[], bool]) -> None:
        lc = self._config.logging
        last_metrics = last_progress = time.time()
        last_env, last_learner = self.env_steps, self._learner_steps
        rates: dict[str, float] = {}
        while not should_stop():
            time.sleep(0.1)
            now = time.time()
            if now - last_metrics >= lc.metrics_period_seconds:
                self._poll_replay()
                dt = now - last_metrics
                rates = {
                    "env": (self.env_steps - last_env) / dt,
                    "learner": (self._learner_steps - last_learner) / dt,
                }
                last_env, last_learner, last_metrics = self.env_steps, self._learner_steps, now
                self._write_metrics(rates)
                self._write_state()
                self.check_health(now)
                self.check_nodes(now)
            if lc.progress_period_seconds and now - last_progress >= lc.progress_period_seconds:
                print(self.progress_line(rates), file=self._out, flush=True)
                last_progress = now
            reason = self.check_stop()
            if reason is not None:
                self.stop(reason)
                return
        self._freeze()
        # Stopped from outside; a failure recorded by then is still why it ended.
        self.stop_reason = self.stop_reason or ("node failed" if self._failure else "stopped")
        self._poll_replay()
        self.write_summary()
        self._await_final_checkpoint()
        self._await_final_beats()

    def _freeze(self) -> None:
        with self._lock:
            self._frozen = True

    def stop(self, reason: str) -> None:
        """Stops the program for `reason` (a stop criterion, or 'node failed' with
        the failure recorded first): summary.json, the stop lines, `stop_program`,
        then waits (bounded) for the final checkpoint and the nodes' final beats."""
        self._freeze()
        self.stop_reason = reason
        self._poll_replay()
        s = self.write_summary()
        if reason == "node failed":
            print(f"[apex] a node failed: {self._failure}", file=self._out, flush=True)
        # The summary itself is printed once, by the launcher, from
        # summary.json as the stop leaves it (final checkpoint included).
        print(
            f"[apex] stopping: {reason} at {s['wall_seconds']:.1f} s, "
            f"{s['env_steps']:,} env steps, {s['learner_steps']:,} learner steps",
            file=self._out,
            flush=True,
        )
        if self._stop_program is not None:
            self._stop_program()
        self._await_final_checkpoint()
        self._await_final_beats()

    def _await_final_beats(self, timeout: float = 5.0) -> None:
        """Stays up (bounded) until every other node has sent its final 'stopped'
        beat or is gone, so RUN_DIR/heartbeats ends with how each node ended (a
        node in this process, the evaluator, would otherwise lose the race)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all(
                self.heartbeats.finished(n) is not False
                for n in self.heartbeats.beats()
                if n != "coordinator"
            ):
                return
            time.sleep(0.1)

    def _await_final_checkpoint(self) -> None:
        """Stays up (bounded) while the learner writes its checkpoint at the stop: it
        asks this node for the counters; summary.json then names the checkpoint."""
        if self.final_checkpoint_timeout <= 0:
            return
        deadline = time.time() + self.final_checkpoint_timeout
        while not self._checkpoint_event.wait(0.2):
            if time.time() > deadline or self._learner_gone():
                return
        self.write_summary()

    def _learner_gone(self) -> bool:
        """The learner finished or died without (another) checkpoint: stop waiting."""
        return self.heartbeats.finished("learner") is True

    def check_nodes(self, now: float | None = None) -> str | None:
        """Records a failure (the program then stops with 'node failed') when a node is
        gone without having stopped; returns the failure."""
        dead = self.heartbeats.dead(now)
        if not dead or self._failure is not None:
            return None
        names = []
        for beat in dead:
            if beat.get("host") not in (None, HOST):
                names.append(
                    f"{beat['node']} on {beat['host']} (pid {beat.get('pid')}) sent no heartbeat "
                    f"for {self.heartbeats.silent_after:.0f} s (its process or host is gone)"
                )
            else:
                names.append(death_message(beat["node"], int(beat.get("pid") or 0), self._run_dir))
        failure = names[0] + ("; then " + ", ".join(names[1:]) if names[1:] else "")
        self.report_failure_text(failure)
        return failure

    def check_health(self, now: float | None = None) -> list[Any]:
        """Runs the hang doctor on the heartbeats and logs each new finding (again every 60 s)."""
        now = time.time() if now is None else now
        table = self._table_stats[0] if self._table_stats else None
        shards = None
        if len(self._replays) > 1:
            shards = dict(zip(self.shard_names, self._shard_stats))
        self.findings = diagnose(
            self.heartbeats.beats(),
            table,
            self._config.logging.stall_seconds,
            now,
            shard_tables=shards,
        )
        active = set()
        for f in self.findings:
            key = (f.reason, f.node)
            active.add(key)
            if now - self._reported.get(key, -1e18) >= 60.0:
                self._reported[key] = now
                line = f"[apex doctor] {f}"
                print(line, file=self._out, flush=True)
                self._doctor_log(line)
        self._reported = {k: v for k, v in self._reported.items() if k in active}
        return self.findings

    def _write_metrics(self, rates: dict[str, float]) -> None:
        if self._metrics is None:
            return
        r = self._replay_info
        row = {
            "coordinator/env_steps": self.env_steps,
            "coordinator/learner_steps": self._learner_steps,
            "coordinator/env_steps_per_second": rates.get("env"),
            "coordinator/learner_steps_per_second": rates.get("learner"),
            "replay/size": r.get("size"),
            "replay/inserts": r.get("inserts"),
            "replay/samples": r.get("samples"),
            "replay/samples_per_insert": r.get("samples_per_insert"),
            "replay/unique_samples": r.get("unique_samples"),
            "coordinator/stall_findings": len(self.findings),
        }
        for s, info in enumerate(self._shard_info if len(self._replays) > 1 else []):
            for key in SHARD_KEYS:
                row[f"replay/shard_{s}/{key}"] = info.get(key)
        with self._lock:
            if self._recent_returns:
                row["coordinator/episode_return_mean"] = sum(self._recent_returns) / len(
                    self._recent_returns
                )
                self._recent_returns = []
        self._metrics.write(row)
