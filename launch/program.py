"""make_program(config) -> lp.Program: the Ape-X DQN or R2D2 program graph.

This is the only module of the tree that imports launchpad. Node classes here
are thin: they wire apex objects to Launchpad's handles and stop event. Every
node factory is a class or function plus plain arguments (the config), so the
program pickles for local_mp.

    replay (ReverbNode) <- actors insert;  learner samples, updates priorities
    learner (CourierNode, the variable source) -> actors, evaluator pull weights
    coordinator (CourierNode: counter, stopper, progress, summary.json)
    evaluator (CourierNode: greedy episodes)
"""

from __future__ import annotations

import faulthandler
import functools
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
import traceback

import launchpad as lp
import reverb
from absl import logging as absl_logging

from apex import checkpointing
from apex import heartbeat as hb
from apex.agents.dqn.acting import VectorActor
from apex.agents.dqn.learning import DQNLearner
from apex.agents.r2d2.acting import RecurrentActor
from apex.agents.r2d2.learning import R2D2Learner
from apex.config import ApexConfig, validate
from apex.coordination import Coordinator
from apex.envs import EnvSpec, env_spec
from apex.errors import ConfigError
from apex.evaluation import Evaluator
from apex.exploration import slot_epsilons
from apex.metrics import MetricsWriter
from apex.replay.tables import make_tables
from apex.replay.writer import SequenceWriter, TransitionWriter
from apex.supervision import node_finished
from apex.variables import StopRequested

# A node still alive this long after a stop request prints every thread's stack
# to its log before Launchpad's 10 s deadline kills it: a hang is never silent.
STACK_DUMP_AFTER_STOP_SECONDS = 7.0


# Set by launch.train: the launcher's pid. A node process whose launcher is gone
# (SIGKILLed) stops itself in order instead of running on as an orphan.
LAUNCHER_PID_ENV = "APEX_LAUNCHER_PID"
_watchdog_started = False


def _stop_requested():
    event = lp.stop_event()
    if sys.argv and sys.argv[0].endswith("process_entry.py"):  # a local_mp node process of its own
        lp.register_stop_handler(
            lambda: faulthandler.dump_traceback_later(STACK_DUMP_AFTER_STOP_SECONDS, exit=False)
        )
        _widen_stop_window()
        _start_launcher_watchdog()
    return event.is_set


def _widen_stop_window() -> None:
    """Gives this node process LAUNCH_TERMINATION_SECONDS between a stop and its
    self-kill (Launchpad's default is 10 s), like the launcher: room for the final
    checkpoint. Launchpad 0.5.0 reads the window once, into its process-wide
    WorkerManager; its local_mp cannot pass that flag to nodes (a KeyError in
    its flag forwarding), so it is set here."""
    from launchpad.launch import worker_manager

    manager = worker_manager.get_worker_manager()
    if getattr(manager, "_termination_notice_secs", -1) > 0:
        manager._termination_notice_secs = LAUNCH_TERMINATION_SECONDS


def _start_launcher_watchdog() -> None:
    """Once per process: SIGTERM this process (Launchpad's orderly stop) when the
    launcher process has died, e.g. by SIGKILL, which Launchpad cannot see."""
    global _watchdog_started
    pid = int(os.environ.get(LAUNCHER_PID_ENV, "0") or 0)
    if _watchdog_started or pid <= 0:
        return
    _watchdog_started = True

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print(f"[apex] the launcher (pid {pid}) is gone; stopping this node", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            except PermissionError:  # exists, another user's: not ours any more
                continue

    threading.Thread(target=watch, name="launcher-watchdog", daemon=True).start()


# Seconds the learner's process (which hosts the colocated replay server) stays
# up after a stop request, sampling without training, so that actors blocked by
# the rate limiter get out of their insert and close their Reverb writers
# against a live server (closing a writer whose server vanished aborts in gRPC).
REPLAY_STOP_GRACE_SECONDS = 2.0


# Longest the replay server and the coordinator wait at a stop for the learner's
# final checkpoint (Launchpad kills a node LAUNCH_TERMINATION_SECONDS after it).
FINAL_CHECKPOINT_WAIT_SECONDS = 24.0
# Seconds Launchpad gives nodes between the stop request and SIGKILL (its
# lp_termination_notice_secs, 10 by default): launch.train sets it for the
# launcher, _widen_stop_window in every node process.
LAUNCH_TERMINATION_SECONDS = 28


# Longest the learner keeps sampling at a stop so that actors held by the rate
# limiter get out of their insert and stop (it ends as soon as they all have).
ACTOR_DRAIN_SECONDS = 10.0


class GracefulReverbNode(lp.ReverbNode):
    """lp.ReverbNode whose server outlives the stop request: by the grace period,
    and, in a run with a run_dir, until the learner has finished (its drain
    that releases the actors and its final checkpoint: its heartbeat turns
    'stopped', or its process is gone), at most FINAL_CHECKPOINT_WAIT_SECONDS."""

    def __init__(self, tables_fn, checkpoint_ctor=None, run_dir: str = ""):
        super().__init__(tables_fn, checkpoint_ctor)
        self._run_dir = run_dir

    def run(self) -> None:
        super().run()  # returns when the program is asked to stop
        time.sleep(REPLAY_STOP_GRACE_SECONDS + 0.5)
        if not self._run_dir:
            return
        deadline = time.time() + FINAL_CHECKPOINT_WAIT_SECONDS
        while time.time() < deadline and node_finished(self._run_dir, "learner") is False:
            time.sleep(0.2)


def _quiet_logs() -> None:
    # Node processes do not parse flags; keep absl's per-node INFO lines
    # (courier bindings, port picking) out of the user's terminal.
    absl_logging.set_verbosity(absl_logging.WARNING)


def _metrics(config: ApexConfig, run_dir: str, name: str, step_key: str) -> MetricsWriter:
    return MetricsWriter(run_dir, name, step_key=step_key, tensorboard=config.logging.tensorboard)


def _heartbeat(config: ApexConfig, run_dir: str, name: str, counters) -> hb.Heartbeat:
    """The node's heartbeat; also lets SIGUSR1 dump this process's stacks to RUN_DIR/stacks."""
    hb.register_stack_dump(run_dir, name)
    return hb.Heartbeat(run_dir, name, config.logging.heartbeat_period_seconds, counters)


class LearnerNode:
    """Learner + variable source + run checkpoints. Public methods are courier RPCs."""

    def __init__(
        self,
        config: ApexConfig,
        spec: EnvSpec,
        replay,
        coordinator,
        run_dir: str,
        resume_from: str = "",
    ):
        _quiet_logs()
        if run_dir:  # lets tools find the live replay: python -m tools.replay stats --run_dir=...
            with open(os.path.join(run_dir, "replay_address"), "w") as f:
                f.write(replay.server_address + "\n")
        learner_class = R2D2Learner if config.agent == "r2d2" else DQNLearner
        self._config = config
        self._run_dir = run_dir
        self._coordinator = coordinator
        self._coordinator_gone = False
        self._heartbeat = _heartbeat(config, run_dir, "learner", self._counters)
        self._learner = learner_class(
            config,
            spec,
            replay.server_address,
            coordinator=coordinator,
            metrics=_metrics(config, run_dir, "learner", "learner/steps"),
            heartbeat=self._heartbeat,
        )
        if resume_from:
            self._learner.set_state(checkpointing.load(resume_from).learner)
        ck = config.checkpoint
        if run_dir and (ck.period_seconds is not None or ck.on_stop):
            self._learner.checkpointer = checkpointing.RunCheckpointer(
                run_dir,
                checkpointing.make_manifest(
                    config, self._learner.signature, self._learner.network_shapes()
                ),
                self._learner.replay_client,
                counters=self._checkpoint_counters,
                period_seconds=ck.period_seconds,
                keep=ck.keep,
                on_written=self._checkpoint_written,
            )

    def run(self) -> None:
        try:
            self._learner.run(_stop_requested())
            if self._run_dir:  # until every actor is out of its last insert (bounded)
                self._learner.drain(ACTOR_DRAIN_SECONDS, until=self._actors_finished)
            else:
                self._learner.drain(REPLAY_STOP_GRACE_SECONDS)
            if self._learner.checkpointer is not None and self._config.checkpoint.on_stop:
                try:
                    self._learner.checkpointer.save(self._learner, reason="stop")
                except Exception as err:  # noqa: BLE001 - say so; the periodic ones remain
                    print(
                        f"[apex] the checkpoint at the stop failed ({type(err).__name__}: {err}); "
                        "a resume starts from the last periodic one",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            self._heartbeat.close()

    def _actors_finished(self) -> bool:
        actors = [n for n in hb.read_heartbeats(self._run_dir) if n.startswith("actor_")]
        return all(node_finished(self._run_dir, n) is not False for n in actors)

    def checkpoint(self) -> str:
        """Writes a run checkpoint now; returns its path (RPC)."""
        return self._learner.checkpoint_now()

    def _checkpoint_counters(self) -> dict:
        try:
            return self._coordinator.checkpoint_state()
        except Exception:  # noqa: BLE001 - the coordinator is gone: its last state.json
            self._coordinator_gone = True
            try:
                with open(os.path.join(self._run_dir, "state.json")) as f:
                    return json.load(f).get("counters", {})
            except (OSError, ValueError):
                return {}

    def _checkpoint_written(
        self, path: str, step: int, seconds: float, size: int, reason: str
    ) -> None:
        if not self._coordinator_gone:  # a dead one costs another call timeout
            self._coordinator.checkpoint_written(path, step, seconds, size, reason == "stop")

    def _counters(self) -> dict:
        learner = getattr(self, "_learner", None)
        return {"steps": learner.steps} if learner is not None else {}

    def step(self) -> dict[str, float]:
        return self._learner.step()

    def get_variables(self):
        return self._learner.get_variables()

    def get_steps(self) -> int:
        return self._learner.steps

    def flush_priorities(self) -> None:
        self._learner.start_priority_updates()
        self._learner.flush_priorities()

    def last_priority_update(self):
        """(keys, priorities when sampled, priorities sent) of the last step."""
        return self._learner.last_update


class ActorNode:
    def __init__(
        self,
        config: ApexConfig,
        actor_id: int,
        replay,
        learner,
        coordinator,
        run_dir: str,
        initial_counts: tuple[int, int] = (0, 0),
    ):
        _quiet_logs()
        self._initial_counts = initial_counts  # (env steps, episodes) of a resumed run
        self._config = config
        self._actor_id = actor_id
        self._replay = replay
        self._learner = learner
        self._coordinator = coordinator
        self._run_dir = run_dir

    def run(self) -> None:
        c = self._config
        e = c.actor.envs_per_actor
        eps = slot_epsilons(
            self._actor_id, e, c.actor.num_actors, c.actor.epsilon_base, c.actor.epsilon_alpha
        )
        should_stop = _stop_requested()
        r2d2 = c.agent == "r2d2"
        writer_class = SequenceWriter if r2d2 else TransitionWriter
        actor_class = RecurrentActor if r2d2 else VectorActor
        holder: dict = {}

        def counters() -> dict:
            a = holder.get("actor")
            return {"env_steps": a.env_steps, "items_inserted": a.items_written} if a else {}

        beat = _heartbeat(c, self._run_dir, f"actor_{self._actor_id}", counters)
        holder["metrics"] = _metrics(c, self._run_dir, f"actor_{self._actor_id}", "actor/env_steps")
        delay = c.actor.restart_backoff_seconds
        restarts = 0
        try:
            while not should_stop():
                beat.enter(hb.WAITING_PARAMS)
                started = time.time()
                try:
                    self._run_actor(
                        writer_class, actor_class, eps, should_stop, beat, holder, restarts
                    )
                    return
                except StopRequested:
                    return
                except Exception as err:  # noqa: BLE001 - restart with fresh envs and parameters
                    if should_stop():  # the replay or learner went away first during shutdown
                        return
                    restarts += 1
                    if time.time() - started > 60.0:  # it had recovered: back off from the start
                        delay = c.actor.restart_backoff_seconds
                    where = f"actor_{self._actor_id}"
                    if restarts > c.actor.max_restarts:
                        message = (
                            f"failed {restarts} times (actor.max_restarts={c.actor.max_restarts}); "
                            f"last: {type(err).__name__}: {err}"
                        )
                        print(f"[apex] {where} {message}", file=sys.stderr, flush=True)
                        traceback.print_exc()
                        self._report_failure(where, message)
                        raise
                    print(
                        f"[apex] {where} failed ({type(err).__name__}: {err}); restart "
                        f"{restarts}/{c.actor.max_restarts} in {delay:.1f} s with fresh envs "
                        "and parameters",
                        file=sys.stderr,
                        flush=True,
                    )
                    deadline = time.time() + delay
                    while time.time() < deadline and not should_stop():
                        time.sleep(0.1)
                    delay = min(2 * delay, 30.0) if delay > 0 else 0.0
        finally:
            beat.close()

    def _report_failure(self, node: str, message: str) -> None:
        try:
            self._coordinator.report_failure(node, message)
        except Exception:  # noqa: BLE001 - the coordinator may be gone; the node fails anyway
            pass

    def _run_actor(
        self, writer_class, actor_class, eps, should_stop, beat, holder, restarts: int
    ) -> None:
        """One life of the actor: a fresh writer, fresh envs, fresh parameters."""
        c = self._config
        e = c.actor.envs_per_actor
        with writer_class(
            self._replay,
            self._actor_id,
            eps,
            slot_offset=self._actor_id * e,
            should_stop=should_stop,
        ) as writer:
            actor = actor_class(
                c,
                self._actor_id,
                self._learner,
                writer,
                coordinator=self._coordinator,
                metrics=holder["metrics"],
                should_stop=should_stop,
                heartbeat=beat,
            )
            previous = holder.get("actor")
            if previous is not None:
                actor.resume_counts(previous)
            else:
                actor.env_steps, actor.episodes = self._initial_counts
            actor.restarts = restarts
            holder["actor"] = actor
            beat.enter(hb.ACTING)
            try:
                actor.run(should_stop)
            finally:
                actor.close()


class EvaluatorNode:
    def __init__(self, config: ApexConfig, learner, coordinator, run_dir: str):
        _quiet_logs()
        self._heartbeat = _heartbeat(
            config, run_dir, "evaluator", lambda: {"evaluations": self._evaluator.evaluations}
        )
        self._evaluator = Evaluator(
            config,
            learner,
            coordinator=coordinator,
            metrics=_metrics(config, run_dir, "evaluator", "evaluator/evaluations"),
            heartbeat=self._heartbeat,
        )

    def run(self) -> None:
        try:
            self._evaluator.run(_stop_requested())
        finally:
            self._heartbeat.close()


class CoordinatorNode:
    def __init__(
        self,
        config: ApexConfig,
        run_dir: str,
        start_time: float,
        replay,
        resume_state: dict | None = None,
        resume_from: str = "",
    ):
        _quiet_logs()
        self._coordinator = Coordinator(
            config,
            run_dir,
            start_time,
            replay_client=replay,
            stop_program=lp.stop,
            metrics=_metrics(config, run_dir, "coordinator", "coordinator/env_steps"),
        )
        if resume_state:
            self._coordinator.restore(resume_state, resume_from)
        if run_dir and config.checkpoint.on_stop:
            self._coordinator.final_checkpoint_timeout = FINAL_CHECKPOINT_WAIT_SECONDS
        self._heartbeat = _heartbeat(
            config, run_dir, "coordinator", lambda: {"env_steps": self._coordinator.env_steps}
        )
        self._heartbeat.enter(hb.IDLE)

    def run(self) -> None:
        try:
            self._coordinator.run(_stop_requested())
        finally:
            self._heartbeat.close()

    def report_actor(self, actor_id, env_steps, episodes, returns, start_time=None) -> None:
        self._coordinator.report_actor(actor_id, env_steps, episodes, returns, start_time)

    def report_learner(self, steps, first_step_time, row) -> None:
        self._coordinator.report_learner(steps, first_step_time, row)

    def report_failure(self, node, message) -> None:
        self._coordinator.report_failure(node, message)

    def report_eval(self, return_mean, version, returns) -> None:
        self._coordinator.report_eval(return_mean, version, returns)

    def get_counts(self):
        return self._coordinator.get_counts()

    def checkpoint_state(self):
        return self._coordinator.checkpoint_state()

    def checkpoint_written(self, path, step, seconds, size, final=False) -> None:
        self._coordinator.checkpoint_written(path, step, seconds, size, final)

    def summary(self):
        return self._coordinator.summary()


def make_program(
    config: ApexConfig,
    run_dir: str = "",
    start_time: float | None = None,
    resume: checkpointing.Checkpoint | None = None,
) -> lp.Program:
    """Builds the Launchpad program of `config` (validated first).

    Args:
      config: the program config.
      run_dir: where nodes write metrics, summary.json and checkpoints ('' : nothing written).
      start_time: unix time of the launch; wall_seconds count from it.
      resume: a checkpoint to continue from (checked against `config` by the caller:
        `launch.train.resume_checkpoint`): learner state, counters and replay.
    """
    validate(config)
    if config.replay.port is not None:
        check_port_free("replay.port", config.replay.port)
    spec = env_spec(config.env)
    start_time = time.time() if start_time is None else start_time
    program = lp.Program("apex")

    checkpoint_ctor = None
    if run_dir:
        # The server's checkpointer root holds only transient checkpoints (tools'
        # snapshots, a run checkpoint's replay until it is moved): start it empty,
        # since Reverb loads the fallback (a resumed replay) only into an empty root.
        shutil.rmtree(checkpointing.replay_root(run_dir), ignore_errors=True)
        checkpoint_ctor = functools.partial(
            reverb.checkpointers.DefaultCheckpointer,
            path=checkpointing.replay_root(run_dir),
            fallback_checkpoint_path=resume.replay_path if resume is not None else None,
        )
    replay_node = GracefulReverbNode(
        functools.partial(make_tables, config, spec),
        checkpoint_ctor,
        run_dir=run_dir,
    )
    replay = replay_node.create_handle()

    resume_state = resume.state if resume is not None else None
    resume_from = resume.path if resume is not None else ""
    coordinator_node = lp.CourierNode(
        CoordinatorNode, config, run_dir, start_time, replay, resume_state, resume_from
    )
    coordinator = coordinator_node.create_handle()
    coordinator.set_client_kwargs(call_timeout=5)  # reports never hang on a stopped coordinator

    learner_node = lp.CourierNode(
        LearnerNode, config, spec, replay, coordinator, run_dir, resume_from
    )
    learner = learner_node.create_handle()
    # Calls to the learner fail after 5 s instead of hanging on a dead node;
    # callers retry or stop (wait_for_ready still covers the learner's start-up).
    learner.set_client_kwargs(call_timeout=5)

    if config.replay.colocate_with_learner:
        # One process: sampling skips gRPC (measured 2x the learner's rate here).
        program.add_node(lp.MultiThreadingColocation([replay_node, learner_node]), label="learner")
    else:
        program.add_node(replay_node, label="replay")
        program.add_node(learner_node, label="learner")

    evaluator_node = lp.CourierNode(EvaluatorNode, config, learner, coordinator, run_dir)
    # The coordinator and the evaluator are light: one process for both saves a
    # TensorFlow import (~5 s of CPU) at start-up.
    program.add_node(
        lp.MultiThreadingColocation([coordinator_node, evaluator_node]), label="coordinator"
    )

    with program.group("actor"):
        for i in range(config.actor.num_actors):
            counts = (0, 0)
            if resume_state:
                counts = (
                    int(resume_state.get("actor_steps", {}).get(str(i), 0)),
                    int(resume_state.get("actor_episodes", {}).get(str(i), 0)),
                )
            program.add_node(
                lp.CourierNode(ActorNode, config, i, replay, learner, coordinator, run_dir, counts)
            )
    return program


def check_port_free(field: str, port: int) -> None:
    """Raises ConfigError if a process already listens on `port`.

    Needed because gRPC servers (Reverb's) bind with SO_REUSEPORT: a second
    server on a taken port starts without an error and the two then share
    the connections.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine
        try:
            s.bind(("0.0.0.0", port))
        except OSError as err:
            raise ConfigError(
                field, port, f"a free port; it is in use by another process ({err.strerror})"
            ) from None


def find_nodes(program: lp.Program, node_class: type) -> list:
    """The CourierNodes of `program` built from `node_class`, inside colocations too.

    Example (as in Acme's integration tests):
        >>> (learner,) = find_nodes(program, LearnerNode)
        >>> learner.disable_run()
    """
    found = []
    stack = list(program.get_all_nodes())
    while stack:
        node = stack.pop()
        if isinstance(node, lp.MultiThreadingColocation):
            stack.extend(node.nodes)
        elif getattr(node, "_constructor", None) is node_class:
            found.append(node)
    return found
