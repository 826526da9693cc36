"""Learner: the composition of the learner's parts (apex.learner) and its
loop: SGD on its own thread, periodic metrics and checkpoints, the variable
source of the actors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import reverb
import tensorflow as tf
from acme import core as acme_core

from apex import compat
from apex import heartbeat as hb
from apex.agents import get_builder
from apex.agents.builder import AgentBuilder
from apex.config import ApexConfig
from apex.learner.averaging import WeightAverage
from apex.learner.metrics import SampleStats, learner_row
from apex.learner.priority_updates import PriorityFeedback
from apex.learner.sampling import LearnerBatches
from apex.learner.sgd import SGDStep
from apex.learner.state import BestKeeper, CheckpointRequests, restore_sgd_state, sgd_state
from apex.metrics import MetricsWriter
from apex.specs import EnvSpec


class Learner(acme_core.Saveable):
    """Trains the agent's Q-network on prioritized items sampled from Reverb.

    `step()` does one SGD step; `run(should_stop)` steps until asked to stop or
    until config.stop.max_learner_steps; `get_variables()` returns
    (version, weights, info) where version is the number of SGD steps done.

    Args:
      config: the program config.
      spec: the env's spec (observation shape and dtype, actions).
      replay_address: HOST:PORT of the Reverb server, or a sequence of them, one
        per replay shard (shard s at index s; apex.replay.shards): every batch
        then comes whole from one shard (apex.replay.sharded), and its priority
        updates go back to it. One address (or a sequence of one) is one server.
      builder: the agent's parts (default: the builder of config.agent).
      coordinator: a Reporter (apex.roles) the learner reports its counters to.
      metrics: where the learner's metrics rows go.
      heartbeat: the node's heartbeat (the learner marks when it waits on sampling).

    Attributes (besides steps): num_shards; replay_clients (one reverb.Client
    per shard) and replay_client (shard 0's); last_update (keys, sampled
    priorities, new priorities) of the last step and last_shards (the shard of
    each of those items); with S > 1 also last_weights (the importance weights
    it trained with) and last_draw (shard, q, ready shards, N of that batch).
    """

    def __init__(
        self,
        config: ApexConfig,
        spec: EnvSpec,
        replay_address: str | Sequence[str],
        builder: AgentBuilder | None = None,
        coordinator: Any = None,
        metrics: MetricsWriter | None = None,
        heartbeat: hb.Heartbeat | None = None,
    ):
        self._config = config
        # Before the first tf.function call: TF 2.8 leaks ~400 B a call otherwise
        # (the learner grew 35%/h in a soak; docs/reliability.md).
        compat.share_function_rendezvous()
        builder = builder or get_builder(config)
        self._heartbeat = heartbeat
        addresses = [replay_address] if isinstance(replay_address, str) else list(replay_address)
        if len(addresses) != int(config.replay.num_shards):
            raise ValueError(
                f"Learner: {len(addresses)} replay address(es) for "
                f"replay.num_shards = {config.replay.num_shards}"
            )
        self.num_shards = len(addresses)
        self._signature = builder.item_signature(config, spec)
        self._batches = LearnerBatches(
            config, addresses, self._signature, builder.table, builder.input_transform(config, spec)
        )
        self.replay_clients = self._batches.clients
        self._sampler = self._batches.sampler  # S > 1; its drainers start on the first step
        self._sgd = SGDStep(
            config, builder, spec, self._batches.element_spec if self._sampler else None
        )
        self._online = self._sgd.online
        self._optimizer = self._sgd.optimizer
        # One server: made on the first step (an iterator starts sampling, and
        # counting samples in the rate limiter, as soon as it exists).
        self._iterator: Any = None
        # Steps per call of the traced step (one server): priorities of a call's
        # k batches arrive as one put, so merge per priority_update_period steps.
        self._steps_per_call = 1 if self._sampler else int(config.learner.steps_per_call)
        # Set once the k-step function is traced (_train_steps); step() trains
        # one step per call until then. Set here for callers of step() alone.
        self._k_ready = threading.Event()
        self._k_ready.set()
        self._first_step_done = threading.Event()  # then the k-step function is traced
        self._priorities = PriorityFeedback(
            self.replay_clients,
            -(-int(config.learner.priority_update_period) // self._steps_per_call),
            builder.table,
        )
        self._coordinator = coordinator
        self._metrics = metrics
        self.steps = 0
        self.first_step_time: float | None = None
        # evaluation.weights='average': the average the evaluator plays.
        self.average: WeightAverage | None = None
        if config.evaluation.weights == "average":
            self.average = WeightAverage(self._online.weights, config.evaluation.average_decay)
        # The weights get_variables serves, by kind ('online', 'average'), as
        # copied by the SGD thread between two steps when asked (`_wanted`).
        self._caches: dict[str, tuple[int, list[np.ndarray]]] = {
            "online": (0, self._online.get_weights())
        }
        if self.average is not None:
            self._caches["average"] = (0, self.average.get_weights())
        # The best evaluated parameters: (return mean, version, weights), kept
        # next to the latest in every checkpoint (the evaluator offers them).
        # With a model store (model_store.enabled) the store keeps them, and
        # `best_source` (set by the node) gives its record for checkpoints.
        self._best = BestKeeper()
        self.best_source: Callable[[], dict[str, np.ndarray]] | None = None
        self._wanted: set[str] = set()
        self._weights_cv = threading.Condition()
        self._training = False
        self._last: dict[str, float] = {}
        self._stats = SampleStats(config.logging.epsilon_bands)
        self.last_update: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # The shard of each item of last_update (one batch is one shard's).
        self.last_shards: np.ndarray | None = None
        # S > 1: the importance weights the last step trained with, and its draw
        # (apex.replay.sharded.ShardBatch without the sample: shard, q, ready, N).
        self.last_weights: np.ndarray | None = None
        self.last_draw: Any = None
        self._error: Exception | None = None
        self._should_stop: Callable[[], bool] | None = None
        self.checkpointer: Any = None  # apex.run_checkpointer.RunCheckpointer, set by the node
        self.run_counters: dict[str, Any] = {}  # the coordinator's, as of the last report
        self._checkpoint_requests = CheckpointRequests()

    # ------------------------------------------------------------------ SGD
    def step(self) -> dict[str, float]:
        """One call of the SGD step: learner.steps_per_call SGD steps (one with
        S > 1 shards; fewer when stop.max_learner_steps is nearer), each on its
        own batch (blocks until the rate limiter lets the batches through)."""
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.TRAINING)
        k = self._steps_per_call
        if k > 1 and not self._k_ready.is_set():
            k = 1  # the k-step function is still being traced (start-up)
        max_steps = self._config.stop.max_learner_steps
        if max_steps is not None and k > 1:
            k = max(1, min(k, max_steps - self.steps))
        out, shard = self._step_shards() if self._sampler is not None else self._step_one(k)
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.IDLE)
        return self._account(out, shard, k)

    def _account(self, out: dict[str, tf.Tensor], shard: int, k: int = 1) -> dict[str, float]:
        """The bookkeeping after a call of k SGD steps: the step count, the
        target copy (k = 1; k > 1 copied inside the call), the weights asked
        for, the priorities sent, the batch statistics and the last scalars."""
        first = self.steps + 1
        self.steps += k
        if self.first_step_time is None:
            self.first_step_time = time.time()
            self._first_step_done.set()
        if k == 1 and self.steps % self._config.learner.target_update_period == 0:
            self._sgd.update_target()
        if self.average is not None:
            self.average.update(k)
        if self._wanted:
            with self._weights_cv:
                for which in self._wanted:
                    self._caches[which] = (self.steps, self._read(which))
                self._wanted.clear()
                self._weights_cv.notify_all()
        keys = out["keys"].numpy()
        prios = out["priorities"].numpy()
        self._priorities.put(keys, prios, shard)
        self.last_update = (keys, out["sampled_priorities"].numpy(), prios)
        self.last_shards = np.full(len(keys), shard, np.int32)
        # The step that trained on each item (its policy lag is counted from there).
        step_of = (
            self.steps if k == 1 else np.repeat(np.arange(first, self.steps + 1), len(keys) // k)
        )
        self._stats.add(step_of, time.time(), out["provenance"].numpy(), self.last_update[1])
        loss, grad_norm, q_mean = out["scalars"].numpy().tolist()
        self._last = {"loss": loss, "grad_norm": grad_norm, "q_mean": q_mean}
        return self._last

    def _step_one(self, k: int = 1) -> tuple[dict[str, tf.Tensor], int]:
        """One server: k SGD steps on the next k batches of its dataset; (outputs, 0)."""
        while True:
            try:
                if self._iterator is None:
                    self._iterator = iter(self._batches.dataset)
                return self._sgd.on_iterator(self._iterator, k, self.steps), 0
            except (tf.errors.OutOfRangeError, StopIteration):
                # The rate limiter held sampling past its timeout; start a new stream.
                self._iterator = iter(self._batches.dataset)
                if self._should_stop is not None and self._should_stop():
                    raise _Stopped() from None

    def _step_shards(self) -> tuple[dict[str, tf.Tensor], int]:
        """S > 1: one SGD step on the next batch of the sampler; (outputs, shard)."""
        batch = self._sampler.next(self._should_stop)
        if batch is None:
            raise _Stopped()
        out = self._sgd.on_batch(batch.sample, batch.q, batch.total_size)
        self.last_weights = out["weights"].numpy()
        self.last_draw = batch._replace(sample=None)
        return out, batch.shard

    # ----------------------------------------------------------------- loop
    def run(self, should_stop: Callable[[], bool]) -> None:
        """Steps until should_stop() or config.stop.max_learner_steps.

        SGD runs on a daemon thread; this thread watches `should_stop` so a stop
        request is honoured within a fraction of a second even while a step
        waits for the rate limiter.
        """
        self._should_stop = should_stop
        self._priorities.start()
        worker = threading.Thread(
            target=self._train_loop, args=(should_stop,), name="learner-sgd", daemon=True
        )
        worker.start()
        while worker.is_alive() and not should_stop():
            worker.join(0.2)
        worker.join(timeout=2.0)
        self._sgd.join_traces(timeout=10.0)
        if self._error is not None:
            raise self._error
        self.report(time.time(), None)
        self.close()

    def _train_loop(self, should_stop: Callable[[], bool]) -> None:
        self._training = True
        try:
            self._train_steps(should_stop)
        finally:
            self._training = False

    def _train_steps(self, should_stop: Callable[[], bool]) -> None:
        max_steps = self._config.stop.max_learner_steps
        period = self._config.logging.metrics_period_seconds
        last_t, last_steps = time.time(), self.steps
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.TRAINING)
        if self._sampler is None:  # traced while the actors fill the table and it trains
            self._k_ready = self._sgd.prepare_in_background(
                self._batches.element_spec, self._steps_per_call, self._first_step_done
            )
        self._batches.wait_for_min_size(should_stop)
        try:
            while not should_stop():
                if max_steps is not None and self.steps >= max_steps:
                    time.sleep(0.2)
                else:
                    self.step()
                now = time.time()
                if self.checkpointer is not None and self.checkpointer.due(now):
                    self.checkpointer.save(self)  # between two steps: weights are whole
                self._checkpoint_requests.serve(lambda reason: self.checkpointer.save(self, reason))
                if now - last_t >= period:
                    self.report(now, (self.steps - last_steps) / (now - last_t))
                    last_t, last_steps = now, self.steps
        except _Stopped:
            pass
        except Exception as err:  # noqa: BLE001 - surfaced by run() on its own thread
            if not should_stop():
                self._error = err

    def drain(self, seconds: float, until: Callable[[], bool] | None = None) -> int:
        """Samples (without training) for at most `seconds`, or until `until()`;
        returns the batches drawn.

        Used at shutdown: the rate limiter blocks actors' inserts once the
        learner stops sampling, and an actor stuck in an insert cannot see the
        stop request nor close its writer. Sampling releases them, on every
        shard. It uses fresh iterators (the SGD thread may still hold the old
        one) on daemon threads so that a blocked sample cannot hold the caller.
        """
        return self._batches.drain(seconds, until)

    def start_priority_updates(self) -> None:
        """Starts the background priority sender (run() does it; tests call it)."""
        self._priorities.start()

    def flush_priorities(self) -> None:
        """Blocks until every priority update so far reached Reverb (every shard)."""
        self._priorities.flush()

    def report(self, now: float, rate: float | None) -> dict[str, Any]:
        """Writes one metrics row (apex.learner.metrics) and reports the counters
        to the coordinator (best effort); returns the row."""
        row = learner_row(
            self.steps,
            self._optimizer.learning_rate(),
            rate,
            self._last,
            self._stats,
            self._priorities,
            self._sampler.batches if self._sampler is not None else None,
        )
        if self._metrics is not None:
            self._metrics.write(row)
        if self._coordinator is not None:
            try:
                future = self._coordinator.futures.report_learner(
                    self.steps, self.first_step_time, row
                )
                future.add_done_callback(self._keep_counters)
            except Exception:  # noqa: BLE001 - best effort
                pass
        return row

    def _keep_counters(self, future: Any) -> None:
        """Holds the run's counters the coordinator returned: a checkpoint written
        after the coordinator is gone (a stop) still has them."""
        try:
            counters = future.result()
        except Exception:  # noqa: BLE001 - the coordinator is gone: keep the last ones
            return
        if isinstance(counters, dict):
            self.run_counters = counters

    # ------------------------------------------------------------ variables
    def get_variables(
        self, which: str = "online"
    ) -> tuple[int, list[np.ndarray], dict[str, float]]:
        """(version, weights, info): version = SGD steps done; info has max_priority.

        `which`: 'online' (what actors act with) or 'average' (with
        evaluation.weights='average': the average of the online weights as of
        that step; ValueError otherwise). While the SGD thread runs, the weights
        are copied by that thread right after its next step (never
        half-applied); if no step completes within 0.5 s (the learner waits for
        data) they are read directly.
        """
        if which not in self._caches:
            raise ValueError(
                f"get_variables({which!r}): this learner serves {sorted(self._caches)} "
                "(an average needs evaluation.weights='average')"
            )
        info = {"max_priority": self._priorities.max_priority}
        if self._training:
            target = self.steps
            with self._weights_cv:
                self._wanted.add(which)
                if self._weights_cv.wait_for(lambda: self._caches[which][0] >= target, timeout=0.5):
                    version, weights = self._caches[which]
                    return version, weights, info
        version, weights = self.steps, self._read(which)
        self._caches[which] = (version, weights)
        return version, weights, info

    def _read(self, which: str) -> list[np.ndarray]:
        if which == "average" and self.average is not None:
            return self.average.get_weights()
        return self._online.get_weights()

    def offer_best(self, return_mean: float, version: int, weights: list[np.ndarray]) -> bool:
        """The evaluator's result for the parameters of `version`: kept as the best
        if its evaluation mean is at least the best so far (a tie keeps the
        newer, more trained one; apex.model_store.BestParams). Returns whether
        it was kept."""
        shapes = [tuple(v.shape) for v in self._online.weights]
        return self._best.offer(return_mean, version, weights, shapes=shapes)

    def best(self) -> tuple[float, int] | None:
        """(return mean, version) of the best evaluated parameters, None before any."""
        return self._best.best()

    def best_variables(self) -> tuple[int, list[np.ndarray]] | None:
        """(version, weights) of the best evaluated parameters, None before any."""
        return self._best.best_variables()

    # ---------------------------------------------------------- checkpoints
    def get_state(self) -> dict[str, np.ndarray]:
        """Everything SGD needs to continue exactly (apex.learner.state): online
        and target weights, Adam's moments and step count, the learner step and
        the max priority; and the best params (the model store's record, with
        its newest version, when it keeps them)."""
        state = sgd_state(self._sgd, self.steps, self._priorities.max_priority)
        if self.average is not None:
            state.update(self.average.get_state())
        state.update(self.best_source() if self.best_source is not None else self._best.get_state())
        return state

    def save(self) -> dict[str, np.ndarray]:
        """acme.core.Saveable: the same as get_state()."""
        return self.get_state()

    def restore(self, state: dict[str, np.ndarray]) -> None:
        """acme.core.Saveable: the same as set_state()."""
        self.set_state(state)

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Restores `get_state()`'s output; ValueError names a missing or misshapen array."""
        self.steps, self._priorities.max_priority = restore_sgd_state(self._sgd, state)
        if self.average is not None:
            self.average.set_state(state)
        self._caches = {which: (self.steps, self._read(which)) for which in self._caches}
        self._best.set_state(state, count=len(self._online.weights))

    def checkpoint_now(self, reason: str = "requested", timeout: float = 120.0) -> str:
        """Writes a run checkpoint now (between two SGD steps if training); its path."""
        if self.checkpointer is None:
            raise RuntimeError("this learner has no checkpointer (no run_dir)")
        if not self._training:
            return self.checkpointer.save(self, reason)
        return self._checkpoint_requests.ask(reason, timeout)

    # ------------------------------------------------------------- the rest
    def network_shapes(self) -> list[list[int]]:
        return [list(v.shape) for v in self._online.weights]

    @property
    def signature(self):
        return self._signature

    @property
    def replay_client(self) -> reverb.Client:
        """Shard 0's client (the only one with one server); all: replay_clients."""
        return self.replay_clients[0]

    def move_shard(self, shard: int, address: str) -> None:
        """Shard `shard` was started again elsewhere and listens at `address`
        (apex.coordination.moves): sampled there, its priority updates and its
        part of every later checkpoint go there (replay_clients updated in place)."""
        client = self._batches.move(shard, address)
        self._priorities.move(shard, client)
        if self.checkpointer is not None:
            self.checkpointer.replace_client(shard, client)

    def close(self) -> None:
        """Stops the sampler's threads (S > 1), the priority updater and closes
        the metrics files (idempotent)."""
        self._batches.close()
        self._priorities.close()
        if self._metrics is not None:
            self._metrics.close()


class _Stopped(Exception):
    pass
