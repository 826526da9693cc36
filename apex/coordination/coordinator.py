"""The Coordinator: the program's control plane. Its methods are the RPCs the
nodes call (beats, reports, failures, remote metrics rows, checkpoint notes);
`run` is its loop (poll, write, check, stop). It composes the run's counters
(counters.py), the replay figures (replay_poll.py), the written figures
(summary.py), the hang doctor (health.py) and the stop decisions (stop.py)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from apex.agents import get_builder
from apex.config import ApexConfig
from apex.coordination import stop as stopping
from apex.coordination import summary as figures
from apex.coordination.counters import RunCounters
from apex.coordination.health import HealthLog
from apex.coordination.moves import ShardMoves
from apex.coordination.partitions import Partitions
from apex.coordination.replay_poll import ReplayPoller
from apex.coordination.restarts import ActorRestarts
from apex.coordination.startup import StartLines
from apex.doctor import Finding
from apex.fence import Leases
from apex.full_disk import FULL_DISK, FullDisk, episodes_before
from apex.heartbeat import HOST, HeartbeatStore, pid_alive
from apex.metrics import MetricsWriter
from apex.replay.shards import shard_index
from apex.restart import read_program_restarts
from apex.roles import ACTOR_PREFIX, SHARD_PREFIX
from apex.verdicts import FailureKind, NodeFailure, StopReason, StopVerdict


def _gone_here(host: Any, pid: Any) -> bool:
    """Whether a copy of a node is known to have ended: on this host, its process gone."""
    return host == HOST and not pid_alive(int(pid or 0))


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
      restart_grace: seconds a dead actor has to come back when its launcher
        restarts actor processes (0: a dead actor is a failure at once;
        apex.coordination.restarts).
      lease_seconds: the lease actors and replay shards in processes of their
        own hold (cluster.actor_lost_after_seconds, when a launcher replaces
        lost nodes; 0: no leases). An actor or shard on another host silent past
        it (plus a margin) counts as lost: `lost_nodes` names it for the
        launcher, which starts it again (apex.fence; a shard's new address
        then reaches its clients: apex.coordination.moves).

    Attributes:
      verdict: why the run stopped (None while it runs).
      counters: the run's counters (RunCounters).
      replay: the replay figures (ReplayPoller).
      heartbeats: every node's last beat (apex.heartbeat.HeartbeatStore).
      final_checkpoint_timeout: seconds a stop waits for the learner's final checkpoint.
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
        restart_grace: float = 0.0,
        lease_seconds: float = 0.0,
    ):
        self._config = config
        self._run_dir = run_dir
        self._stop_program = stop_program
        self._metrics = metrics
        self._out = out if out is not None else sys.stdout
        self._lock = threading.Lock()
        self.counters = RunCounters(config, start_time)
        self.replay = ReplayPoller(replay_client)
        self._start_lines = StartLines(config, start_time)
        self._health = HealthLog(run_dir, config.logging, self._out)
        self._failure: NodeFailure | None = None
        self._failure_time: float | None = None  # when it was recorded (Unix time)
        self._env_steps_per_item = float(get_builder(config).env_steps_per_item(config))
        self.verdict: StopVerdict | None = None
        self.final_checkpoint_timeout = 0.0  # seconds run() waits at a stop for the learner's
        self.leases = Leases(lease_seconds, gone=_gone_here) if lease_seconds > 0 else None
        self.heartbeats = HeartbeatStore(
            run_dir,
            silent_after=silent_after,
            leased_silent_after=self.leases.lost_after if self.leases is not None else None,
        )
        self._lost: dict[str, str] = {}  # node -> the copy counted lost, until replaced
        # The counters of the last beat of a node started again elsewhere (its beats
        # forgotten): its new copy counts on from them (`actor_items_inserted`).
        self._forgotten: dict[str, dict[str, Any]] = {}
        self.actors_lost = 0
        self.moves = ShardMoves(int(config.replay.num_shards))  # shards lost and moved
        self.actor_restarts = ActorRestarts(restart_grace)
        # Disk-full episodes: checkpoints the learner could not write (its own lines
        # said so), and those of the run's earlier lives (summary.json's).
        self.checkpoints_full = FullDisk(quiet=True)
        self.disk_full_before = episodes_before(run_dir) if run_dir else []
        self.program_restarts = len(read_program_restarts(run_dir)) if run_dir else 0  # before
        self.partitions = Partitions(HOST)  # actors cut off by the network
        self._node_metrics: dict[str, MetricsWriter] = {}
        self.replay.write_addresses(run_dir)

    @property
    def shard_names(self) -> list[str]:
        return self.replay.shard_names

    @property
    def findings(self) -> list[Finding]:
        """The hang doctor's findings of the last check."""
        return self._health.findings

    @property
    def failure(self) -> NodeFailure | None:
        """The first failure recorded (the likely cause), or None."""
        return self._failure

    # --------------------------------------------------------- control plane
    def heartbeat(self, beat: dict[str, Any]) -> dict[str, Any] | None:
        """A node's beat (RPC): recorded, and written to RUN_DIR/heartbeats for tools.
        With leases, an actor's or a shard's beat is answered with its lease
        renewed ({'lease_seconds': L}), or with {'fenced': True} (not recorded)
        for a copy that was counted lost (apex.fence). Once a shard has moved,
        the replies to the learner and to that shard's actors also say where it
        listens now (apex.coordination.moves)."""
        node = str(beat.get("node", ""))
        reply: dict[str, Any] = {}
        if self.leases is not None and node.startswith((ACTOR_PREFIX, SHARD_PREFIX)):
            reply = self.leases.grant(
                node, beat.get("incarnation"), beat.get("host"), beat.get("pid")
            )
            if reply.get("fenced"):
                return reply
        self.heartbeats.record(beat)
        reply.update(self.moves.reply_for(node))
        return reply or None

    def lost_nodes(self) -> list[list[str]]:
        """[[node, incarnation]] of the actors and shards counted lost and not yet
        started again (RPC: the Ray launcher asks, then calls `fence_node`)."""
        with self._lock:
            return [[n, i] for n, i in sorted(self._lost.items())]

    def fence_node(self, node: str) -> float:
        """The launcher starts `node` again (RPC): every copy of it seen so far is
        fenced (its beats refused from now on); returns the seconds the last
        lease granted to them may still hold: the new copy starts after that."""
        with self._lock:
            self._lost.pop(node, None)
        if node.startswith(SHARD_PREFIX):  # also when Ray, not the lease, said it was gone
            self.moves.lost(node, self.replay.size(shard_index(node)))
        if self.leases is None:
            return 0.0
        return self.leases.fence(node)

    def shard_moved(self, node: str, address: str) -> None:
        """The launcher started shard `node` again at `address` (RPC): polled
        there, named in RUN_DIR/replay_addresses, and told to the learner and the
        shard's actors with their next beats (apex.coordination.moves)."""
        self.replay.move(shard_index(node), address, self._run_dir)
        self.moves.moved(node, address)
        self._print(
            f"[apex] {node} listens at {address} now (a new copy); the learner and its "
            "actors are told with their next beats"
        )

    def forget_node(self, node: str) -> None:
        """The launcher restarts `node` on another host (RPC): its old beats are not
        a death (apex.heartbeat.HeartbeatStore.forget); its counts stay for its new copy."""
        beat = self.heartbeats.beats().get(node)
        if beat is not None:
            with self._lock:
                kept = self._forgotten.setdefault(node, {})
                for key, value in (beat.get("counters") or {}).items():
                    if isinstance(value, (int, float)):
                        kept[key] = max(value, kept.get(key, value))
        self.heartbeats.forget(node)
        with self._lock:
            self._lost.pop(node, None)  # a new copy is on its way

    def actor_counts(self, actor_id: int) -> tuple[int, int]:
        """(env steps, episodes) actor `actor_id` reported last (RPC): a restarted
        actor carries on from them, so the run's counts never go back. Its env
        steps are its last beat's when that is further on: beats come every
        second, reports less often, and a process killed between a beat and the
        next report would otherwise start again below what it had shown."""
        steps, episodes = self.counters.actor_counts(actor_id)
        return max(steps, self._beat_count(actor_id, "env_steps")), episodes

    def _beat_count(self, actor_id: int, key: str) -> int:
        """Counter `key` of actor `actor_id`'s last beat, or of the last beat of a
        copy whose beats were forgotten (it was started again), whichever is
        further on (0 if none)."""
        node = f"{ACTOR_PREFIX}{int(actor_id)}"
        beat = self.heartbeats.beats().get(node) or {}
        with self._lock:
            kept = self._forgotten.get(node, {}).get(key, 0)
        return int(max((beat.get("counters") or {}).get(key, 0) or 0, kept or 0))

    def actor_items_inserted(self, actor_id: int) -> int:
        """The items actor `actor_id`'s last beat counted as inserted (RPC; 0 if
        none): a process started again counts on from them, as its env steps do."""
        return self._beat_count(actor_id, "items_inserted")

    def actor_restart_count(self, actor_id: int) -> int:
        """The restarts actor `actor_id`'s last beat counted (RPC; 0 if none): a
        process started again counts on from them, so a slot's restarts never
        go back when an in-process restart came before a process's death."""
        return self._beat_count(actor_id, "restarts")

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
        self._health.close()

    # ------------------------------------------------------- checkpointing
    def checkpoint_state(self) -> dict[str, Any]:
        """The counters a run checkpoint keeps (JSON-safe); `restore` reads them back."""
        return self.counters.checkpoint_state()

    def restore(self, state: dict[str, Any], checkpoint_path: str = "") -> None:
        """Continues from a checkpoint's counters: env and learner steps, wall
        seconds (the clock continues from the saved value), evaluations."""
        self.counters.restore(state, checkpoint_path)

    def checkpoint_written(
        self, path: str, step: int, seconds: float, size: int, final: bool = False
    ) -> None:
        """The learner wrote a run checkpoint (`final`: the one at a stop, which
        releases `run`)."""
        self.checkpoints_full.wrote("checkpoints")
        self.counters.checkpoint_written(path, step, seconds, size, final)

    def checkpoint_abandoned(self, step: int, error: str, final: bool = False) -> None:
        """The learner could not write the checkpoint of `step` (a full disk): the
        last complete one stands; a final one releases `run` all the same."""
        self.checkpoints_full.failed("checkpoints", RuntimeError(f"learner step {step}: {error}"))
        if final:
            self.counters.checkpoint_event.set()

    # -------------------------------------------------------------- reports
    def report_actor(
        self,
        actor_id: int,
        env_steps: int,
        episodes: int,
        returns: list[float],
        start_time: float | None = None,
    ) -> None:
        self.counters.report_actor(actor_id, env_steps, episodes, returns, start_time)

    def report_failure(self, node: str, message: str) -> None:
        """A node gave up (e.g. an actor past actor.max_restarts) or died of an
        exception ('<Type>: <message>'): stop the program with 'node failed',
        naming it as '<node>: <message>' (RPC). A replay shard found dead by
        then is named first: its clients' errors follow from its death."""
        self._check_dead_shards()
        self._record_failure(NodeFailure(node, FailureKind.REPORTED, message))

    def _check_dead_shards(self) -> None:
        if not self.replay.sharded or self._failure is not None:
            return
        dead = [b for b in self.heartbeats.dead() if b.get("node") in self.shard_names]
        if dead:
            self.check_nodes()

    def _record_failure(self, failure: NodeFailure) -> None:
        """Records `failure` (the first one is kept: the likely cause)."""
        with self._lock:
            if self._failure is None:  # the first failure is the likely cause
                self._failure = failure
                self._failure_time = time.time()

    def report_learner(
        self, steps: int, first_step_time: float | None, row: dict[str, Any]
    ) -> dict[str, Any]:
        """The learner's counters; returns the run's counters (what a run checkpoint
        keeps), which the learner holds for a checkpoint after this node is gone."""
        return self.counters.report_learner(steps, first_step_time, row)

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
        return self.counters.report_eval(return_mean, version, returns, env_steps)

    def reaches_target(self, return_mean: float) -> bool:
        """Whether `return_mean` counts as solved (never without a target_return)."""
        return self.counters.reaches_target(return_mean)

    # ---------------------------------------------------------------- state
    @property
    def env_steps(self) -> int:
        return self.counters.env_steps

    def get_counts(self) -> dict[str, Any]:
        return self.counters.get_counts()

    def _poll_replay(self) -> None:
        self.replay.poll()

    def shard_figures(self) -> dict[str, dict[str, Any]]:
        """Each shard's figures by shard name (SHARD_KEYS; None before its first
        poll); empty with one replay server."""
        return self.replay.shard_figures()

    def summary(self) -> dict[str, Any]:
        s = figures.summary(
            self._config,
            self.counters,
            self.replay,
            self.verdict,
            self._failure,
            self._failure_time,
        )
        s["actor_restarts"] = ActorRestarts.total(self.heartbeats.beats())
        s["program_restarts"] = self.program_restarts
        full = FULL_DISK.figures() + self.checkpoints_full.figures()
        s["disk_full"] = self.disk_full_before + full
        s["network"] = self.partitions.costs(self.heartbeats.beats())
        s["network"].update(self._fence_figures())
        s["network"].update(self.moves.figures())
        return s

    def _fence_figures(self) -> dict[str, int]:
        leases = self.leases
        out = {
            "actors_lost": self.actors_lost,
            "actors_fenced": leases.fenced_of(ACTOR_PREFIX) if leases is not None else 0,
        }
        if leases is not None and self.moves.shards_lost:
            out["shards_fenced"] = leases.fenced_of(SHARD_PREFIX)
        return out

    def write_summary(self) -> dict[str, Any]:
        """summary.json, and state.json with the same figures (a run that stops
        between two state writes still ends with state.json at its last counts)."""
        s = self.summary()
        if self._run_dir:
            FULL_DISK.guard("summary.json", figures.write_summary, self._run_dir, s)
            self._write_state()
        return s

    def _write_state(self) -> None:
        if self._run_dir:
            # counters: what a run checkpoint keeps, for the learner if this node dies
            state = (self._run_dir, self.summary(), self.checkpoint_state())
            FULL_DISK.guard("state.json", figures.write_state, *state)

    def env_steps_now(self) -> int:
        """Env steps as of now, never fewer than the replay's inserts explain
        (apex.coordination.summary.env_steps_now)."""
        return figures.env_steps_now(self.counters, self.replay, self._env_steps_per_item)

    def progress_line(self, rates: dict[str, float]) -> str:
        line = figures.progress_line(self.counters, self.replay, self.env_steps_now(), rates)
        line += self.partitions.text(self.heartbeats.beats(), time.time())
        with self._lock:
            lost = sorted(n for n in self._lost if n.startswith(ACTOR_PREFIX))
        if lost or self.actors_lost:
            line += f" | actors lost {self.actors_lost}" + (
                f" ({', '.join(lost)} being replaced)" if lost else ""
            )
        if self.moves.shards_lost:
            moving = self.moves.being_replaced
            line += f" | shards lost {self.moves.shards_lost}" + (
                f" ({', '.join(moving)} being replaced)" if moving else ""
            )
        if self.program_restarts:
            line += f" | program restarts {self.program_restarts}"
        return line + self.actor_restarts.text(self.heartbeats.beats())

    def _write_metrics(self, rates: dict[str, float]) -> None:
        if self._metrics is None:
            return
        row = figures.metrics_row(self.counters, self.replay, rates, len(self.findings))
        row["coordinator/actor_restarts"] = ActorRestarts.total(self.heartbeats.beats())
        row["coordinator/program_restarts"] = self.program_restarts
        network = self.partitions.costs(self.heartbeats.beats())
        silent = self.partitions.unreachable(self.heartbeats.beats(), time.time())
        row["coordinator/actors_unreachable"] = sum(n.startswith(ACTOR_PREFIX) for n in silent)
        row["coordinator/shards_unreachable"] = len(silent) - row["coordinator/actors_unreachable"]
        row["coordinator/actor_reconnects"] = network["reconnects"]
        row["coordinator/items_lost_in_flight"] = network["items_lost_in_flight"]
        fences = self._fence_figures()
        row["coordinator/actors_lost"] = fences["actors_lost"]
        row["coordinator/actors_fenced"] = fences["actors_fenced"]
        if self.replay.sharded:
            row["coordinator/shards_lost"] = self.moves.shards_lost
            row["coordinator/items_lost_with_shards"] = self.moves.items_lost
        self._metrics.write(row)

    # ---------------------------------------------------------------- loop
    def check_stop(self) -> StopVerdict | None:
        """The first stop criterion reached (a recorded failure first), or None."""
        return stopping.stop_verdict(self._config.stop, self.counters, self._failure, time.time())

    def run(self, should_stop: Callable[[], bool]) -> None:
        lc = self._config.logging
        last_metrics = last_progress = time.time()
        last_env, last_learner = self.env_steps, self.counters.learner_steps
        rates: dict[str, float] = {}
        starting = bool(lc.progress_period_seconds)  # the start lines go with progress lines
        if starting:
            self._print(self._start_lines.waiting_line(self.counters, self.replay))
        while not should_stop():
            time.sleep(0.1)
            now = time.time()
            if now - last_metrics >= lc.metrics_period_seconds:
                self._poll_replay()
                dt = now - last_metrics
                learner_steps = self.counters.learner_steps
                rates = {
                    "env": (self.env_steps - last_env) / dt,
                    "learner": (learner_steps - last_learner) / dt,
                }
                last_env, last_learner, last_metrics = self.env_steps, learner_steps, now
                self._write_metrics(rates)
                self._write_state()
                self.check_health(now)
                self.check_nodes(now)
            if starting:
                for line in self._start_lines.new_lines(self.counters, self.replay):
                    self._print(line)
                starting = not self._start_lines.done
            if lc.progress_period_seconds and now - last_progress >= lc.progress_period_seconds:
                print(self.progress_line(rates), file=self._out, flush=True)
                last_progress = now
            verdict = self.check_stop()
            if verdict is not None:
                self.stop(verdict)
                return
        self.counters.freeze()
        # Stopped from outside; a failure recorded by then is still why it ended.
        self.verdict = stopping.outside_stop_verdict(self.verdict, self._failure)
        self._poll_replay()
        self.write_summary()
        self._await_final_checkpoint()
        self._await_final_beats()

    def _print(self, line: str) -> None:
        print(line, file=self._out, flush=True)

    def stop(self, verdict: StopVerdict) -> None:
        """Stops the program for `verdict` (a stop criterion, or NODE_FAILED with
        the failure recorded first): summary.json, the stop lines, `stop_program`,
        then waits (bounded) for the final checkpoint and the nodes' final beats."""
        self.counters.freeze()
        self.verdict = verdict
        self._poll_replay()
        s = self.write_summary()
        # The summary itself is printed once, by the launcher, from
        # summary.json as the stop leaves it (final checkpoint included).
        for line in stopping.stop_lines(verdict, self._failure, s):
            print(line, file=self._out, flush=True)
        if self._stop_program is not None:
            self._stop_program()
        self._await_final_checkpoint()
        self._await_final_beats()

    def stop_failed(self) -> None:
        """Stops the program with 'node failed' for the failure recorded first
        (`report_failure` before)."""
        self.stop(StopVerdict(StopReason.NODE_FAILED, self._failure))

    def _await_final_beats(self, timeout: float = 5.0) -> None:
        stopping.await_final_beats(self.heartbeats, timeout)

    def _await_final_checkpoint(self) -> None:
        """Stays up (bounded) while the learner writes its checkpoint at the stop: it
        asks this node for the counters; summary.json then names the checkpoint."""
        if stopping.await_final_checkpoint(
            self.counters.checkpoint_event, self.final_checkpoint_timeout, self._learner_gone
        ):
            self.write_summary()

    def _learner_gone(self) -> bool:
        """The learner finished or died without (another) checkpoint: stop waiting."""
        return self.heartbeats.finished("learner") is True

    def check_nodes(self, now: float | None = None) -> NodeFailure | None:
        """Records a failure (the program then stops with 'node failed') when a node is
        gone without having stopped; returns the failure."""
        now = time.time() if now is None else now
        dead = self.heartbeats.dead(now)
        self._count_lost(dead, now)
        if self.leases is not None:  # a copy counted lost is being replaced: no death
            dead = [
                b
                for b in dead
                if not self.leases.is_fenced(str(b.get("node")), str(b.get("incarnation")))
            ]
        # A dead actor that its launcher restarts has a grace to come back.
        dead = self.actor_restarts.past_grace(dead, now)
        if not dead or self._failure is not None:
            return None
        failure = stopping.dead_nodes_failure(
            dead, self.heartbeats.silent_limit(dead[0]), self._run_dir
        )
        self._record_failure(failure)
        return failure

    def _count_lost(self, dead: list[dict[str, Any]], now: float) -> None:
        """Actors and shards on another host silent past their lease (and the
        margin): lost. Their copy has stopped itself by now (fenced); its beats
        are refused from here on, and the launcher starts the node again
        (`lost_nodes`); a shard's items are counted lost with it."""
        if self.leases is None:
            return
        for beat in dead:
            node, copy = str(beat.get("node", "")), str(beat.get("incarnation"))
            shard = node.startswith(SHARD_PREFIX)
            if not (shard or node.startswith(ACTOR_PREFIX)) or beat.get("host", HOST) == HOST:
                continue  # on this host its process is watched: a death, not a loss
            if self.leases.is_fenced(node, copy):
                continue
            self.leases.fence(node)
            items = self.replay.size(shard_index(node)) if shard else 0
            with self._lock:
                self._lost[node] = copy
                if shard:
                    self.moves.lost(node, items)
                else:
                    self.actors_lost += 1
            quiet = now - float(beat.get("received", beat.get("time", now)))
            again = (
                f"it starts again on a host that can reach the program; the {items:,} items "
                "it held are lost"
                if shard
                else "it starts again on a host that can reach the program"
            )
            self._print(
                f"[apex] {node} on {beat.get('host')}: no beat for {quiet:.0f} s (past its "
                f"lease, cluster.actor_lost_after_seconds={self.leases.seconds:g}, + "
                f"{self.leases.lost_after - self.leases.seconds:g} s): counted lost; its copy "
                f"there has stopped itself (fenced); {again}"
            )

    def check_health(self, now: float | None = None) -> list[Finding]:
        """Runs the hang doctor on the heartbeats and logs each new finding (again every 60 s)."""
        now = time.time() if now is None else now
        table, shards = self.replay.doctor_tables()
        return self._health.check(self.heartbeats.beats(), table, shards, now)
