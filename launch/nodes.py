"""Node adapters: each wires one apex role to Launchpad's handles and stop event.

Nodes are classes plus plain arguments (the config, the builder, handles), so
the program pickles for local_mp. Which node may touch the run directory:

  coordinator (+ evaluator)  the control plane; owns the run directory
  learner (+ replay)         metrics, checkpoints, stack dumps, on the same host
  actor                      nothing: beats, metrics rows and failures go to the
                             coordinator over RPC, items to replay, parameters
                             come from the learner; an actor can run on a host
                             that cannot see the run directory

Every public method of a CourierNode class is an RPC.

A node that dies of an exception names it: it reports '<Type>: <message>' to
the coordinator (`report_node_failure`: over RPC, or directly to a coordinator
in its own process) and, where it may write the run directory, leaves
RUN_DIR/failures/<node>.json (apex.supervision.record_failure) for whoever
finds its process dead. The evaluator, in the coordinator's process, reports
and returns: the coordinator then stops the program in order ('node failed').
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import launchpad as lp
from absl import logging as absl_logging

from apex import checkpointing, compat, lifecycle
from apex import heartbeat as hb
from apex.agents.builder import AgentBuilder
from apex.config import ApexConfig
from apex.coordination import Coordinator
from apex.envs import EnvSpec
from apex.evaluation import Evaluator
from apex.exploration import slot_epsilons
from apex.inference import InferenceService, follow_learner
from apex.learner import Learner
from apex.lifecycle import STOP_WINDOW
from apex.metrics import MetricsWriter, RemoteMetrics
from apex.restart import decide_restart
from apex.roles import Reporter
from apex.supervision import exception_text, record_failure
from apex.variables import StopRequested

# Set by launch.train: the launcher's pid. A node process whose launcher is gone
# (SIGKILLed) stops itself in order instead of running on as an orphan.
LAUNCHER_PID_ENV = "APEX_LAUNCHER_PID"
# Set by a launcher that starts a node again after its host died (the Ray
# launcher): an actor then carries on from the counts the coordinator holds.
RESTARTED_ENV = "APEX_NODE_RESTARTED"


def node_should_stop() -> Callable[[], bool]:
    """The node's stop check. In a local_mp node process of its own it also sets
    the process's stop window, schedules a stack dump for a node that does not
    stop in time, and starts the launcher watchdog."""
    event = lp.stop_event()
    if compat.in_launchpad_node_process():
        lp.register_stop_handler(lambda: lifecycle.dump_stacks_later(STOP_WINDOW.stack_dump_after))
        compat.set_node_termination_window(STOP_WINDOW.kill_seconds)
        lifecycle.start_launcher_watchdog(int(os.environ.get(LAUNCHER_PID_ENV, "0") or 0))
    return event.is_set


# Seconds a failing node keeps trying to tell the coordinator (which may still be
# starting) before it gives up and simply dies.
REPORT_FAILURE_TIMEOUT = 30.0

# The Coordinator of this process, if a CoordinatorNode runs here: a node in the
# same process (the evaluator) reports its failure to it directly.
_local_coordinator: Callable[[], Coordinator | None] = lambda: None  # noqa: E731
_local_lock = threading.Lock()


def _set_local_coordinator(coordinator: Coordinator | None) -> None:
    global _local_coordinator
    with _local_lock:
        if coordinator is None:
            _local_coordinator = lambda: None  # noqa: E731
        else:
            _local_coordinator = weakref.ref(coordinator)


# The Learner of this process, if a LearnerNode runs here: the inference node in
# the same process reads its newest parameters directly (no network pull).
_local_learner: Callable[[], Learner | None] = lambda: None  # noqa: E731


def _set_local_learner(learner: Learner | None) -> None:
    global _local_learner
    with _local_lock:
        _local_learner = (lambda: None) if learner is None else weakref.ref(learner)


def _stopping() -> bool:
    """Whether this node's program is stopping (False outside a Launchpad node)."""
    try:
        return lp.stop_event().is_set()
    except Exception:  # noqa: BLE001 - no Launchpad worker manager in this thread
        return False


def report_node_failure(
    coordinator: Any,
    node: str,
    err: BaseException,
    run_dir: str = "",
    should_stop: Callable[[], bool] | None = None,
    timeout: float = REPORT_FAILURE_TIMEOUT,
) -> bool:
    """Says that `node` failed with `err`: prints it with its traceback, records
    it under `run_dir` (if given: only for nodes that may write the run
    directory) and reports '<Type>: <message>' to the coordinator, directly when
    it runs in this process, else over its RPC `report_failure` (retried for at
    most `timeout` s, or until `should_stop`). Returns whether the coordinator
    has it (it then stops the program with 'node failed')."""
    message = exception_text(err)
    print(f"[apex] {node} failed: {message}", file=sys.stderr, flush=True)
    traceback.print_exception(type(err), err, err.__traceback__)
    record_failure(run_dir, node, err)
    should_stop = should_stop or _stopping
    deadline = time.time() + timeout
    while True:
        local = _local_coordinator()
        if local is not None:
            local.report_failure(node, message)
            return True
        if coordinator is not None:
            try:
                coordinator.report_failure(node, message)
                return True
            except Exception:  # noqa: BLE001 - not up yet, or gone: try again until the deadline
                pass
        if time.time() >= deadline or should_stop():
            print(
                f"[apex] {node}: the coordinator could not be told of this failure",
                file=sys.stderr,
                flush=True,
            )
            return False
        time.sleep(0.5)


def _quiet_logs() -> None:
    # Node processes do not parse flags; keep absl's per-node INFO lines
    # (courier bindings, port picking) out of the user's terminal.
    absl_logging.set_verbosity(absl_logging.WARNING)


def _heartbeat(
    config: ApexConfig, coordinator: Reporter, name: str, counters: Callable[[], dict]
) -> hb.Heartbeat:
    """The node's heartbeat, sent to the coordinator (courier futures: never blocks)."""
    futures = getattr(coordinator, "futures", None)
    sink = (futures or coordinator).heartbeat
    return hb.Heartbeat(sink, name, config.logging.heartbeat_period_seconds, counters)


def _metrics(config: ApexConfig, run_dir: str, name: str, step_key: str) -> MetricsWriter:
    return MetricsWriter(run_dir, name, step_key=step_key, tensorboard=config.logging.tensorboard)


class PinnedPortAddress(lp.Address):
    """An lp.Address with a fixed port (replay.port): whatever builder a launch
    binds picks the host (localhost under local_mp, the host's IP on Ray), the
    port stays the configured one."""

    pinned_port: int = 0

    def bind(self, address_builder) -> None:
        super().bind(_PinnedPortBuilder(address_builder, self.pinned_port))


class _PinnedPortBuilder:
    def __init__(self, inner, port: int):
        self.inner = inner
        self.port = int(port)

    def build(self) -> str:
        return f"{self.inner.build().rsplit(':', 1)[0]}:{self.port}"


class GracefulReverbNode(lp.ReverbNode):
    """lp.ReverbNode whose server outlives the stop request: by the grace period,
    and until the coordinator says the learner has finished (its drain that
    releases the actors and its final checkpoint), at most
    STOP_WINDOW.final_checkpoint_wait.

    Args:
      tables_fn, checkpoint_ctor: as lp.ReverbNode's.
      port: replay.port (+ the shard's index): the server listens there.
      name: the node's name in failures and beats ('replay', or a shard's
        'replay_<s>', apex.replay.shards.shard_name).
      heartbeat_period: > 0 for a server in a process of its own (a replay
        shard): it beats to the coordinator as `name` every that many seconds,
        so its death stops the program ('node failed' naming it), and it
        watches the launcher like every node process. 0: no beats (the one
        replay server, or a shard in the learner's process), as before shards.
    """

    def __init__(
        self,
        tables_fn,
        checkpoint_ctor=None,
        port: int | None = None,
        name: str = "replay",
        heartbeat_period: float = 0.0,
    ):
        super().__init__(tables_fn, checkpoint_ctor)
        self._coordinator_handle: Any = None
        self._name = name
        self._heartbeat_period = float(heartbeat_period)
        self._coordinator: Any = None  # the dereferenced handle, once running
        if port is not None:  # replay.port: the server listens there, clients dial it
            address = self.reverb_address
            address.__class__ = PinnedPortAddress
            address.pinned_port = int(port)

    def _beat(self) -> hb.Heartbeat:
        # Held by the node: a courier client shuts its channel down when collected,
        # and the beat holds only its `futures` (which does not keep it alive).
        self._coordinator = coordinator = self._coordinator_handle.dereference()
        futures = getattr(coordinator, "futures", None)
        beat = hb.Heartbeat((futures or coordinator).heartbeat, self._name, self._heartbeat_period)
        beat.enter(hb.IDLE)
        return beat

    def wait_for_learner_through(self, coordinator_handle: Any) -> None:
        """At a stop, ask the coordinator (its handle) whether the learner has finished.

        Set after the node is made: the coordinator's node takes this node's
        handle, so it cannot exist first. The handle is dereferenced in `run`.
        """
        self._coordinator_handle = coordinator_handle

    def run(self) -> None:
        beat = None
        if self._heartbeat_period > 0 and self._coordinator_handle is not None:
            _quiet_logs()  # a shard's own process: no absl INFO lines (port picking)
            node_should_stop()  # its own process: the stop window, the launcher watchdog
            beat = self._beat()
        try:
            super().run()  # returns when the program is asked to stop
        except Exception as err:
            if not _stopping():  # the tables, the checkpointer or the server failed
                handle = self._coordinator_handle
                report_node_failure(handle.dereference() if handle else None, self._name, err)
            raise
        finally:
            if beat is not None:
                # 'stopped' at the stop request: the server still serves the drain
                # and the final checkpoint, but its end is no death to report.
                beat.close()
        time.sleep(STOP_WINDOW.replay_grace + 0.5)
        if self._coordinator_handle is None:
            return
        coordinator = self._coordinator or self._coordinator_handle.dereference()
        deadline = time.time() + STOP_WINDOW.final_checkpoint_wait
        while time.time() < deadline:
            try:
                if coordinator.node_finished("learner") is not False:
                    return
            except Exception:  # noqa: BLE001 - the coordinator is gone: so is the run
                return
            time.sleep(0.2)


class LearnerNode:
    """Learner + variable source + run checkpoints. Public methods are courier RPCs."""

    def __init__(
        self,
        config: ApexConfig,
        builder: AgentBuilder,
        spec: EnvSpec,
        replay,
        coordinator: Reporter,
        run_dir: str,
        resume_from: str = "",
        model_store=None,
    ):
        _quiet_logs()
        self._run_dir = run_dir
        self._coordinator = coordinator
        # model_store.enabled: the store's handle; the learner pushes to it and
        # its checkpoints hold the store's best record.
        self._store = model_store
        self._store_record: dict = {}
        self.pushes = 0
        try:
            self._setup(config, builder, spec, replay, coordinator, run_dir, resume_from)
        except Exception as err:
            if report_node_failure(coordinator, "learner", err, run_dir):
                beat = getattr(self, "_heartbeat", None)
                if beat is not None:
                    beat.close()
            raise

    def _setup(self, config, builder, spec, replay, coordinator, run_dir, resume_from) -> None:
        hb.register_stack_dump(run_dir, "learner")
        self._config = config
        self._coordinator_gone = False
        self._heartbeat = _heartbeat(config, coordinator, "learner", self._counters)
        # One replay server, or (replay.num_shards > 1) a list: shard s at index s.
        sharded = isinstance(replay, (list, tuple))
        addresses = [r.server_address for r in replay] if sharded else [replay.server_address]
        if config.replay.colocate_with_learner:
            # The server (shard 0) is in this process: Reverb samples in-process (no
            # gRPC) only through a localhost address, and a launcher on a cluster
            # binds the host's IP (launch.ray_launch).
            addresses[0] = "localhost:" + addresses[0].rsplit(":", 1)[1]
        address = addresses if sharded else addresses[0]
        self._learner = Learner(
            config,
            spec,
            address,
            builder=builder,
            coordinator=coordinator,
            metrics=_metrics(config, run_dir, "learner", "learner/steps"),
            heartbeat=self._heartbeat,
        )
        _set_local_learner(self._learner)
        if self._store is not None:
            self._learner.best_source = self._store_best
        if resume_from:
            state = checkpointing.load(resume_from)
            self._learner.set_state(state.learner)
            self._learner.run_counters = dict(state.state)
        ck = config.checkpoint
        if run_dir and (ck.period_seconds is not None or ck.on_stop):
            self._learner.checkpointer = checkpointing.RunCheckpointer(
                run_dir,
                checkpointing.make_manifest(
                    config, self._learner.signature, self._learner.network_shapes()
                ),
                # Every shard's client (learner.replay_clients), or the one server's.
                getattr(self._learner, "replay_clients", None) or self._learner.replay_client,
                counters=self._checkpoint_counters,
                period_seconds=ck.period_seconds,
                keep=ck.keep,
                on_written=self._checkpoint_written,
            )

    def _store_best(self) -> dict:
        """The model store's checkpoint record (its best and newest version); the
        last one fetched if the store does not answer now."""
        try:
            self._store_record = dict(self._store.get_state())
        except Exception as err:  # noqa: BLE001 - keep the last record; say so
            print(
                f"[apex] the model store did not answer for the checkpoint ({type(err).__name__}); "
                "it holds the best record fetched before",
                file=sys.stderr,
                flush=True,
            )
        return self._store_record

    def _push_loop(self, should_stop: Callable[[], bool], done: threading.Event) -> None:
        """Pushes the learner's parameters to the model store every
        model_store.push_period_steps SGD steps (version 0 before training)."""
        period = self._config.model_store.push_period_steps
        last = None
        while not (should_stop() or done.is_set()):
            if last is None or self._learner.steps - last >= period:
                version, weights, info = self._learner.get_variables()
                try:
                    self._store.push(version, weights, info)
                    last = version
                    self.pushes += 1
                except Exception:  # noqa: BLE001 - the store is starting (or gone: it is reported)
                    pass
            done.wait(0.01)

    def run(self) -> None:
        should_stop = node_should_stop()
        pushing = threading.Event()
        if self._store is not None:
            threading.Thread(
                target=self._push_loop,
                args=(should_stop, pushing),
                name="model-store-push",
                daemon=True,
            ).start()
        try:
            self._run(should_stop)
        except Exception as err:
            if should_stop():  # the stop took the replay or the coordinator away first
                raise
            if not report_node_failure(self._coordinator, "learner", err, self._run_dir):
                raise
            # The coordinator has it and stops the program in order.
            try:
                self._learner.close()
            except Exception:  # noqa: BLE001 - the failure is reported; this is tidying
                pass
        finally:
            pushing.set()
            self._heartbeat.close()

    def _run(self, should_stop: Callable[[], bool]) -> None:
        self._learner.run(should_stop)
        # Until every actor is out of its last insert (bounded).
        self._learner.drain(STOP_WINDOW.actor_drain, until=self._actors_finished)
        if self._learner.checkpointer is not None and self._config.checkpoint.on_stop:
            if self._learner.steps == 0:
                # Nothing trained: a checkpoint would be the actors' replay alone
                # (206 MB on Atari) and a long write inside the stop window.
                print(
                    "[apex] no checkpoint at the stop: the learner has not trained yet "
                    f"(it starts at replay.min_size={self._config.replay.min_size:,} items)",
                    flush=True,
                )
                return
            try:
                self._learner.checkpointer.save(self._learner, reason="stop")
            except Exception as err:  # noqa: BLE001 - say so; the periodic ones remain
                print(
                    f"[apex] the checkpoint at the stop failed ({type(err).__name__}: {err}); "
                    "a resume starts from the last periodic one",
                    file=sys.stderr,
                    flush=True,
                )

    def close(self) -> None:
        """Stops this node's threads (priority updates, heartbeat) and closes its
        metrics files; `run` does it at its end. For a learner stepped by hand
        (run disabled, as in launch.testing) this is the only way they end (RPC)."""
        self._learner.close()
        self._heartbeat.close()

    def _actors_finished(self) -> bool:
        try:
            return bool(self._coordinator.nodes_finished("actor_"))
        except Exception:  # noqa: BLE001 - no coordinator to ask: stop draining
            return True

    def checkpoint(self) -> str:
        """Writes a run checkpoint now; returns its path (RPC)."""
        return self._learner.checkpoint_now()

    def _checkpoint_counters(self) -> dict:
        if not self._coordinator_gone:
            try:
                self._learner.run_counters = self._coordinator.checkpoint_state()
            except Exception:  # noqa: BLE001 - the coordinator is gone: its last counters
                self._coordinator_gone = True
        return dict(self._learner.run_counters)

    def _checkpoint_written(
        self, path: str, step: int, seconds: float, size: int, reason: str
    ) -> None:
        if not self._coordinator_gone:  # a dead one costs another call timeout
            try:
                self._coordinator.checkpoint_written(path, step, seconds, size, reason == "stop")
            except Exception:  # noqa: BLE001 - the checkpoint is written; only the note is lost
                self._coordinator_gone = True

    def _counters(self) -> dict:
        learner = getattr(self, "_learner", None)
        if learner is None:
            return {}
        return {"steps": learner.steps, **({"pushes": self.pushes} if self._store else {})}

    def step(self) -> dict[str, float]:
        return self._learner.step()

    def get_variables(self):
        return self._learner.get_variables()

    def get_steps(self) -> int:
        return self._learner.steps

    def offer_best(self, return_mean: float, version: int, weights) -> bool:
        return self._learner.offer_best(return_mean, version, weights)

    def best(self):
        return self._learner.best()

    def best_variables(self):
        return self._learner.best_variables()

    def flush_priorities(self) -> None:
        self._learner.start_priority_updates()
        self._learner.flush_priorities()

    def last_priority_update(self):
        """(keys, priorities when sampled, priorities sent) of the last step."""
        return self._learner.last_update


class ActorNode:
    """One actor process: acting with restarts (apex.restart). Touches no file of
    the run directory: everything it reports goes to the coordinator."""

    def __init__(
        self,
        config: ApexConfig,
        builder: AgentBuilder,
        actor_id: int,
        replay,
        learner,
        coordinator: Reporter,
        initial_counts: tuple[int, int] = (0, 0),
        inference=None,
    ):
        _quiet_logs()
        if os.environ.get(lifecycle.NO_SHARED_FS_ENV) == "1" and config.run_dir:
            lifecycle.forbid_writes_under(config.run_dir)
            print(
                f"[apex] actor_{actor_id}: writes under the run directory are refused "
                f"({lifecycle.NO_SHARED_FS_ENV}=1)",
                flush=True,
            )
        hb.register_stack_dump(None, f"actor_{actor_id}")  # SIGUSR1: stacks to its log
        self._initial_counts = initial_counts  # (env steps, episodes) of a resumed run
        self._config = config
        self._builder = builder
        self._actor_id = actor_id
        self._replay = replay
        self._learner = learner
        self._coordinator = coordinator
        self._inference = inference  # the inference node's handle (actor.inference='central')
        self._name = f"actor_{actor_id}"

    def run(self) -> None:
        c = self._config
        should_stop = node_should_stop()
        holder: dict = {}
        if os.environ.get(RESTARTED_ENV) == "1":  # a launcher started it again elsewhere
            try:
                counts = tuple(self._coordinator.actor_counts(self._actor_id))
                if counts[0] > self._initial_counts[0]:
                    self._initial_counts = (int(counts[0]), int(counts[1]))
            except Exception:  # noqa: BLE001 - the coordinator may be gone: start from ours
                pass

        def counters() -> dict:
            a = holder.get("actor")
            return {"env_steps": a.env_steps, "items_inserted": a.items_written} if a else {}

        beat = _heartbeat(c, self._coordinator, self._name, counters)
        holder["metrics"] = RemoteMetrics(self._coordinator, self._name, "actor/env_steps")
        backoff = c.actor.restart_backoff_seconds
        restarts = 0
        try:
            while not should_stop():
                beat.enter(hb.WAITING_PARAMS)
                started = time.time()
                try:
                    self._run_actor(should_stop, beat, holder, restarts)
                    return
                except StopRequested:
                    return
                except Exception as err:  # noqa: BLE001 - restart with fresh envs and parameters
                    if should_stop():  # the replay or learner went away first during shutdown
                        return
                    restarts += 1
                    decision = decide_restart(
                        restarts,
                        backoff,
                        time.time() - started,
                        c.actor.restart_backoff_seconds,
                        c.actor.max_restarts,
                    )
                    if not decision.restart:
                        message = (
                            f"failed {restarts} times (actor.max_restarts={c.actor.max_restarts}); "
                            f"last: {type(err).__name__}: {err}"
                        )
                        print(f"[apex] {self._name} {message}", file=sys.stderr, flush=True)
                        traceback.print_exc()
                        self._report_failure(message)
                        raise
                    print(
                        f"[apex] {self._name} failed ({type(err).__name__}: {err}); restart "
                        f"{restarts}/{c.actor.max_restarts} in {decision.wait:.1f} s with fresh "
                        "envs and parameters",
                        file=sys.stderr,
                        flush=True,
                    )
                    deadline = time.time() + decision.wait
                    while time.time() < deadline and not should_stop():
                        time.sleep(0.1)
                    backoff = decision.next_backoff
        finally:
            beat.close()

    def _report_failure(self, message: str) -> None:
        try:
            self._coordinator.report_failure(self._name, message)
        except Exception:  # noqa: BLE001 - the coordinator may be gone; the node fails anyway
            pass

    def _run_actor(self, should_stop, beat, holder, restarts: int) -> None:
        """One life of the actor: a fresh writer, fresh envs, fresh parameters."""
        c = self._config
        e = c.actor.envs_per_actor
        eps = slot_epsilons(
            self._actor_id, e, c.actor.num_actors, c.actor.epsilon_base, c.actor.epsilon_alpha
        )
        with self._builder.make_writer(
            self._replay, self._actor_id, eps, self._actor_id * e, should_stop
        ) as writer:
            actor = self._builder.make_actor(
                c,
                self._actor_id,
                self._learner,
                writer,
                coordinator=self._coordinator,
                metrics=holder["metrics"],
                should_stop=should_stop,
                heartbeat=beat,
                inference=self._inference,
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


class InferenceNode(InferenceService):
    """The central inference server (actor.inference='central', apex.inference):
    in the learner's process, it reads the learner's newest parameters there
    every `inference.params_period_seconds` and answers the actors' `infer`
    calls in batches. Its figures go to RUN_DIR/metrics/inference.jsonl every
    `logging.metrics_period_seconds`. If it fails, it says so to the
    coordinator, which stops the program in order ('node failed'); actors
    waiting on it get an error, never a hang."""

    # Seconds the node waits for the learner of its process to exist.
    LEARNER_WAIT = 600.0

    def __init__(self, config: ApexConfig, spec: EnvSpec, coordinator: Reporter, run_dir: str):
        from apex.agents.policy import ActingPolicy
        from apex.inference import BatchingServer

        _quiet_logs()
        self._config = config
        self._coordinator = coordinator
        self._run_dir = run_dir
        ic = config.inference
        server = BatchingServer(
            ActingPolicy(config, spec),
            ic.max_batch,
            ic.max_wait_ms / 1000.0,
            expected_clients=config.actor.num_actors,
            pad=config.learner.torso != "mlp",
            obs_shape=tuple(spec.observation_shape),
        )
        super().__init__(server, timeout=ic.call_timeout_seconds)  # infer, version, stats
        self._metrics = _metrics(config, run_dir, "inference", "inference/requests")

    # -------------------------------------------------------------------- run
    def run(self) -> None:
        should_stop = node_should_stop()
        try:
            learner = self._wait_for_learner(should_stop)
            if learner is None:
                return
            self._serve(learner, should_stop)
            # The stop: serve until every actor is out of its loop (bounded), so
            # no actor's last step meets a closed server.
            deadline = time.time() + STOP_WINDOW.actor_drain
            while time.time() < deadline and not self._actors_finished():
                time.sleep(0.05)
        except Exception as err:
            if should_stop():
                return
            if not report_node_failure(
                self._coordinator, "inference", err, self._run_dir, should_stop
            ):
                raise
        finally:
            self._server.close()
            self._metrics.close()

    def _actors_finished(self) -> bool:
        try:
            return bool(self._coordinator.nodes_finished("actor_"))
        except Exception:  # noqa: BLE001 - no coordinator to ask: stop serving
            return True

    def _wait_for_learner(self, should_stop) -> Learner | None:
        deadline = time.time() + self.LEARNER_WAIT
        while not should_stop():
            learner = _local_learner()
            if learner is not None:
                return learner
            if time.time() > deadline:
                raise RuntimeError(
                    "no learner in this process: the inference node runs in the learner's "
                    "process (launch/program.py colocates them)"
                )
            time.sleep(0.05)
        return None

    def _serve(self, learner: Learner, should_stop) -> None:
        ic = self._config.inference
        follow_learner(
            self._server,
            learner,
            should_stop,
            lp.stop_event().wait,
            ic.params_period_seconds,
            self._config.logging.metrics_period_seconds,
            self._metrics.write,
        )


class ModelStoreNode:
    """The model store (model_store.enabled, apex.model_store): a process of its
    own that holds the versions the learner pushes and serves them to the actors
    and the evaluator; it keeps the best evaluated parameters. It beats to the
    coordinator (its death stops the program, 'node failed'), writes its figures
    through the coordinator (it needs no run directory), and at a stop serves
    until the learner has written its final checkpoint (which holds the store's
    best record). A resumed store starts from the checkpoint's record and newest
    version. Public methods are courier RPCs."""

    def __init__(self, config: ApexConfig, coordinator: Reporter, resume_from: str = ""):
        from apex.model_store import ModelStore

        _quiet_logs()
        self._config = config
        self._coordinator = coordinator
        self._store = ModelStore(keep_last=config.model_store.keep_last)
        if resume_from:
            self._store.set_state(checkpointing.load(resume_from).learner)
        self._metrics = RemoteMetrics(coordinator, "model_store", "model_store/newest_version")
        self._heartbeat = _heartbeat(config, coordinator, "model_store", self._counters)

    def _counters(self) -> dict:
        newest = self._store.newest_version()
        return {"version": -1 if newest is None else newest}

    # ------------------------------------------------------------------ RPCs
    def push(self, version: int, weights, info=None) -> bool:
        return self._store.push(version, weights, info)

    def get_variables(self):
        return self._store.get_variables()

    def get_version(self, version: int):
        return self._store.get_version(version)

    def offer_best(self, return_mean: float, version: int, weights=None) -> bool:
        return self._store.offer_best(return_mean, version, weights)

    def best(self):
        return self._store.best()

    def best_variables(self):
        return self._store.best_variables()

    def get_state(self) -> dict:
        return self._store.get_state()

    def stats(self) -> dict:
        return self._store.stats()

    def close(self) -> None:
        """Stops the heartbeat; `run` does it at its end (for a store made by hand)."""
        self._heartbeat.close()

    # -------------------------------------------------------------------- run
    def run(self) -> None:
        should_stop = node_should_stop()
        period = self._config.logging.metrics_period_seconds
        event = lp.stop_event()
        try:
            self._heartbeat.enter(hb.SERVING)
            while not should_stop():
                event.wait(period)
                self._metrics.write(self._store.stats())
            # Serve until the learner's final checkpoint (it asks for the best record).
            deadline = time.time() + STOP_WINDOW.final_checkpoint_wait
            while time.time() < deadline:
                try:
                    if self._coordinator.node_finished("learner") is not False:
                        break
                except Exception:  # noqa: BLE001 - the coordinator is gone: so is the run
                    break
                time.sleep(0.2)
        finally:
            self._heartbeat.close()


class EvaluatorNode:
    """Greedy evaluation episodes on the latest parameters (with the coordinator).

    It shares the coordinator's process: an exception in its constructor or
    its evaluations is reported to the coordinator (and recorded under the run
    directory), and the node ends without taking the process down; the
    coordinator then stops the program in order with 'node failed'.
    """

    def __init__(
        self, config: ApexConfig, learner, coordinator: Reporter, run_dir: str, model_store=None
    ):
        _quiet_logs()
        # With a model store, parameters come from it and the best goes to it.
        source = learner if model_store is None else model_store
        self._coordinator = coordinator
        self._run_dir = run_dir
        self._evaluator: Evaluator | None = None
        self._failed: Exception | None = None  # the constructor's, reported by run()
        self._heartbeat = _heartbeat(config, coordinator, "evaluator", self._counters)
        metrics = _metrics(config, run_dir, "evaluator", "evaluator/evaluations")
        try:
            self._evaluator = Evaluator(
                config,
                source,
                coordinator=coordinator,
                best_sink=source,
                metrics=metrics,
                heartbeat=self._heartbeat,
            )
        except Exception as err:  # noqa: BLE001 - reported by run(): this process is the coordinator's
            metrics.close()
            self._failed = err

    def _counters(self) -> dict:
        return {"evaluations": self._evaluator.evaluations} if self._evaluator else {}

    def run(self) -> None:
        should_stop = node_should_stop()
        try:
            if self._failed is not None:
                raise self._failed
            assert self._evaluator is not None
            self._evaluator.run(should_stop)
        except Exception as err:
            if should_stop():
                return
            if not report_node_failure(
                self._coordinator, "evaluator", err, self._run_dir, should_stop
            ):
                raise
            # The coordinator has it and stops the program in order.
        finally:
            self._heartbeat.close()
            if self._evaluator is not None:
                self._evaluator.close()


class CoordinatorNode:
    """The control plane (apex.coordination.Coordinator); its methods are the RPCs
    every other node calls."""

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
        self._run_dir = run_dir
        try:
            self._setup(config, run_dir, start_time, replay, resume_state, resume_from)
        except Exception as err:
            # No coordinator to tell: the record names the exception once this
            # process is found dead (the launcher watches it).
            print(f"[apex] coordinator failed: {exception_text(err)}", file=sys.stderr, flush=True)
            record_failure(run_dir, "coordinator", err)
            raise
        _set_local_coordinator(self._coordinator)

    def _setup(self, config, run_dir, start_time, replay, resume_state, resume_from) -> None:
        hb.register_stack_dump(run_dir, "coordinator")
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
            self._coordinator.final_checkpoint_timeout = STOP_WINDOW.final_checkpoint_wait
        self._heartbeat = hb.Heartbeat(
            self._coordinator.heartbeats,
            "coordinator",
            config.logging.heartbeat_period_seconds,
            lambda: {"env_steps": self._coordinator.env_steps},
        )
        self._heartbeat.enter(hb.IDLE)

    def run(self) -> None:
        should_stop = node_should_stop()
        failed = False
        try:
            self._coordinator.run(should_stop)
        except Exception as err:
            failed = not self._stop_for(err)
            if failed:
                raise
        finally:
            _set_local_coordinator(None)
            if not failed:  # else no 'stopped' beat: the launcher finds it dead, and why
                self._heartbeat.close()
            self._coordinator.close()

    def _stop_for(self, err: Exception) -> bool:
        """The coordinator's own loop raised `err`: records it, then stops the program
        in order with 'node failed' naming it. Returns whether that stop was made."""
        print(f"[apex] coordinator failed: {exception_text(err)}", file=sys.stderr, flush=True)
        traceback.print_exception(type(err), err, err.__traceback__)
        record_failure(self._run_dir, "coordinator", err)
        self._coordinator.report_failure("coordinator", exception_text(err))
        try:
            self._coordinator.stop("node failed")
        except Exception:  # noqa: BLE001 - no orderly stop: the process dies of `err`
            return False
        return True

    # The control plane: every other node's calls.
    def heartbeat(self, beat) -> None:
        self._coordinator.heartbeat(beat)

    def node_finished(self, node):
        return self._coordinator.node_finished(node)

    def forget_node(self, node) -> None:
        self._coordinator.forget_node(node)

    def actor_counts(self, actor_id):
        return self._coordinator.actor_counts(actor_id)

    def nodes_finished(self, prefix):
        return self._coordinator.nodes_finished(prefix)

    def write_metrics(self, component, step_key, row) -> None:
        self._coordinator.write_metrics(component, step_key, row)

    def report_actor(self, actor_id, env_steps, episodes, returns, start_time=None) -> None:
        self._coordinator.report_actor(actor_id, env_steps, episodes, returns, start_time)

    def report_learner(self, steps, first_step_time, row):
        return self._coordinator.report_learner(steps, first_step_time, row)

    def report_failure(self, node, message) -> None:
        self._coordinator.report_failure(node, message)

    def report_eval(self, return_mean, version, returns, env_steps=None) -> bool:
        return self._coordinator.report_eval(return_mean, version, returns, env_steps)

    def get_counts(self):
        return self._coordinator.get_counts()

    def checkpoint_state(self):
        return self._coordinator.checkpoint_state()

    def checkpoint_written(self, path, step, seconds, size, final=False) -> None:
        self._coordinator.checkpoint_written(path, step, seconds, size, final)

    def summary(self):
        return self._coordinator.summary()
