"""The learner node: the Learner, the actors' variable source, the run's
checkpoints and the pushes to the model store. Public methods are courier RPCs."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from apex import (
    STOP_WINDOW,
    ApexConfig,
    EnvSpec,
    Learner,
    Reporter,
    RunCheckpointer,
    checkpointing,
)
from apex import heartbeat as hb
from apex.agents import AgentBuilder
from apex.replay import shard_index
from launch.nodes.common import (
    node_heartbeat,
    node_metrics,
    node_should_stop,
    quiet_logs,
    report_node_failure,
    set_local_learner,
)


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
        quiet_logs()
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
        # One replay server, or (replay.num_shards > 1) a list: shard s at index s.
        sharded = isinstance(replay, (list, tuple))
        addresses = [r.server_address for r in replay] if sharded else [replay.server_address]
        self._shard_addresses = list(addresses)  # where each shard listens (moves change it)
        self._addresses_lock = threading.Lock()
        self._moving = threading.Lock()  # one move at a time, in the order they came
        self._heartbeat = node_heartbeat(
            config, coordinator, "learner", self._counters, self._on_reply if sharded else None
        )
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
            metrics=node_metrics(config, run_dir, "learner", "learner/steps"),
            heartbeat=self._heartbeat,
        )
        set_local_learner(self._learner)
        if self._store is not None:
            self._learner.best_source = self._store_best
        if resume_from:
            state = checkpointing.load(resume_from, verify_checksums=False)
            self._learner.set_state(state.learner)
            self._learner.run_counters = dict(state.state)
        ck = config.checkpoint
        if run_dir and (ck.period_seconds is not None or ck.on_stop):
            self._learner.checkpointer = RunCheckpointer(
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
                on_abandoned=self._checkpoint_abandoned,
            )

    def _on_reply(self, sent: float, reply) -> None:
        """The coordinator's answer to a beat: shards started again elsewhere
        ({'shards': {'replay_1': 'HOST:PORT'}}, apex.coordination.moves) are
        sampled there from now on (on a thread of its own: a reply callback
        must not wait on TensorFlow)."""
        del sent
        moved = reply.get("shards") if isinstance(reply, dict) else None
        if not moved or getattr(self, "_learner", None) is None:
            return
        for name, address in moved.items():
            shard = shard_index(str(name))
            with self._addresses_lock:  # replies may be answered on several threads
                if self._shard_addresses[shard] == address:
                    continue
                self._shard_addresses[shard] = address
            threading.Thread(
                target=self._move_shard, args=(shard, address), name="learner-shard-move"
            ).start()

    def _move_shard(self, shard: int, address: str) -> None:
        with self._moving:
            try:
                self._learner.move_shard(shard, address)
            except Exception as err:  # noqa: BLE001 - said; the old address stays in use
                print(
                    f"[apex] learner: moving replay_{shard} to {address} failed: {err}", flush=True
                )
                return
        print(
            f"[apex] learner: samples replay_{shard} at {address} now (a new copy)",
            flush=True,
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

    def _checkpoint_abandoned(self, step: int, reason: str, error: str) -> None:
        if not self._coordinator_gone:
            try:
                self._coordinator.checkpoint_abandoned(step, error, reason == "stop")
            except Exception:  # noqa: BLE001 - the learner said so in its own line
                self._coordinator_gone = True

    def _counters(self) -> dict:
        learner = getattr(self, "_learner", None)
        if learner is None:
            return {}
        return {"steps": learner.steps, **({"pushes": self.pushes} if self._store else {})}

    def step(self) -> dict[str, float]:
        return self._learner.step()

    def get_variables(self, which: str = "online"):
        return self._learner.get_variables(which)

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
