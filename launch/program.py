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
import os
import socket
import sys
import time
import traceback

import launchpad as lp
from absl import logging as absl_logging

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
from apex.variables import StopRequested

# A node still alive this long after a stop request prints every thread's stack
# to its log before Launchpad's 10 s deadline kills it: a hang is never silent.
STACK_DUMP_AFTER_STOP_SECONDS = 7.0


def _stop_requested():
    event = lp.stop_event()
    if sys.argv and sys.argv[0].endswith("process_entry.py"):  # a local_mp node process of its own
        lp.register_stop_handler(
            lambda: faulthandler.dump_traceback_later(STACK_DUMP_AFTER_STOP_SECONDS, exit=False)
        )
    return event.is_set


# Seconds the learner's process (which hosts the colocated replay server) stays
# up after a stop request, sampling without training, so that actors blocked by
# the rate limiter get out of their insert and close their Reverb writers
# against a live server (closing a writer whose server vanished aborts in gRPC).
REPLAY_STOP_GRACE_SECONDS = 2.0


class GracefulReverbNode(lp.ReverbNode):
    """lp.ReverbNode whose server outlives the stop request by the grace period."""

    def run(self) -> None:
        super().run()  # returns when the program is asked to stop
        time.sleep(REPLAY_STOP_GRACE_SECONDS + 0.5)


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
    """Learner + variable source. Public methods are courier RPCs."""

    def __init__(self, config: ApexConfig, spec: EnvSpec, replay, coordinator, run_dir: str):
        _quiet_logs()
        if run_dir:  # lets tools find the live replay: python -m tools.replay stats --run_dir=...
            with open(os.path.join(run_dir, "replay_address"), "w") as f:
                f.write(replay.server_address + "\n")
        learner_class = R2D2Learner if config.agent == "r2d2" else DQNLearner
        self._heartbeat = _heartbeat(config, run_dir, "learner", self._counters)
        self._learner = learner_class(
            config,
            spec,
            replay.server_address,
            coordinator=coordinator,
            metrics=_metrics(config, run_dir, "learner", "learner/steps"),
            heartbeat=self._heartbeat,
        )

    def run(self) -> None:
        try:
            self._learner.run(_stop_requested())
            self._learner.drain(REPLAY_STOP_GRACE_SECONDS)
        finally:
            self._heartbeat.close()

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
        self, config: ApexConfig, actor_id: int, replay, learner, coordinator, run_dir: str
    ):
        _quiet_logs()
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
            self._replay, self._actor_id, eps, slot_offset=self._actor_id * e
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
    def __init__(self, config: ApexConfig, run_dir: str, start_time: float, replay):
        _quiet_logs()
        self._coordinator = Coordinator(
            config,
            run_dir,
            start_time,
            replay_client=replay,
            stop_program=lp.stop,
            metrics=_metrics(config, run_dir, "coordinator", "coordinator/env_steps"),
        )
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

    def summary(self):
        return self._coordinator.summary()


def make_program(
    config: ApexConfig, run_dir: str = "", start_time: float | None = None
) -> lp.Program:
    """Builds the Launchpad program of `config` (validated first).

    Args:
      config: the program config.
      run_dir: where nodes write metrics and summary.json ('' : nothing written).
      start_time: unix time of the launch; wall_seconds count from it.
    """
    validate(config)
    if config.replay.port is not None:
        check_port_free("replay.port", config.replay.port)
    spec = env_spec(config.env)
    start_time = time.time() if start_time is None else start_time
    program = lp.Program("apex")

    replay_node = GracefulReverbNode(functools.partial(make_tables, config, spec))
    replay = replay_node.create_handle()

    coordinator_node = lp.CourierNode(CoordinatorNode, config, run_dir, start_time, replay)
    coordinator = coordinator_node.create_handle()
    coordinator.set_client_kwargs(call_timeout=5)  # reports never hang on a stopped coordinator

    learner_node = lp.CourierNode(LearnerNode, config, spec, replay, coordinator, run_dir)
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
            program.add_node(
                lp.CourierNode(ActorNode, config, i, replay, learner, coordinator, run_dir)
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
