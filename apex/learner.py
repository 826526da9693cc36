"""The generic learner: prioritized sampling from Reverb, importance weights,
the SGD step, target network, asynchronous priority updates, run checkpoints;
also the variable source of the actors. The agent's builder supplies the
network, the input transform and the loss (apex.agents.builder)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import reverb
import tensorflow as tf
from acme import core as acme_core

from apex import heartbeat as hb
from apex.agents import get_builder
from apex.agents.builder import AgentBuilder
from apex.agents.optim import Adam
from apex.config import ApexConfig
from apex.envs import EnvSpec
from apex.exploration import epsilon_bands
from apex.metrics import MetricsWriter
from apex.model_store import BestParams
from apex.replay.dataset import make_dataset
from apex.replay.sharded import (
    ShardedPriorityUpdater,
    ShardedSampler,
    drain_datasets,
    shard_importance_weights,
)
from apex.replay.shards import shard_config, shard_name


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
        self._builder = builder = builder or get_builder(config)
        self._table = builder.table
        self._heartbeat = heartbeat
        lc = config.learner
        self._online = builder.make_network(config, spec, seed=lc.seed)
        self._target = builder.make_network(config, spec, seed=lc.seed)
        self._target.set_weights(self._online.get_weights())
        self._optimizer = Adam(
            list(self._online.weights),
            lc.learning_rate,
            epsilon=lc.adam_epsilon,
            final_learning_rate=lc.learning_rate_final,
            decay_steps=lc.learning_rate_decay_steps,
        )
        addresses = [replay_address] if isinstance(replay_address, str) else list(replay_address)
        if len(addresses) != int(config.replay.num_shards):
            raise ValueError(
                f"Learner: {len(addresses)} replay address(es) for "
                f"replay.num_shards = {config.replay.num_shards}"
            )
        self.num_shards = len(addresses)
        self._address = replay_address
        self.replay_clients = [reverb.Client(a) for a in addresses]
        self._client = self.replay_clients[0]
        self._signature = builder.item_signature(config, spec)
        # S > 1: the shards' batches come through the sampler (drainer threads
        # start on the first step) into a tf.function taking the batch, which
        # applies the input transform itself (fewer tensors cross Python per batch).
        self._transform = builder.input_transform(config, spec)
        self._datasets = [
            make_dataset(
                a,
                self._signature,
                lc.batch_size,
                num_workers=lc.num_sample_workers,
                prefetch=lc.prefetch_batches,
                in_flight_batches=lc.in_flight_batches,
                table=self._table,
                transform=self._transform if self.num_shards == 1 else None,
            )
            for a in addresses
        ]
        self._dataset = self._datasets[0]
        self._sampler: ShardedSampler | None = None
        self._shard_sgd_fn: Any = None
        if self.num_shards > 1:
            self._sampler = ShardedSampler(
                self._datasets, self.replay_clients, self._table, seed=lc.seed
            )
            spec_ = self._dataset.element_spec
            scalar = tf.TensorSpec([], tf.float64)
            self._shard_sgd_fn = tf.function(
                self._sgd_shard_batch, input_signature=[spec_.data, spec_.info, scalar, scalar]
            )
        # Made on the first step: an iterator starts sampling (and counting
        # samples in the rate limiter) as soon as it exists.
        self._iterator: Any = None
        self._sgd_fn: Any = None  # _sgd traced for self._sgd_iterator (see _run_sgd)
        self._sgd_iterator: Any = None
        self._updater = ShardedPriorityUpdater(
            self.replay_clients, merge=lc.priority_update_period, table=self._table
        )
        # Priority updates not acknowledged that a warning line named already,
        # and the keys each shard had been sent as of the previous row.
        self._unacked_warned = 0
        self._sent_at_last_row = [0] * self.num_shards
        self._coordinator = coordinator
        self._metrics = metrics
        self._beta = float(lc.importance_exponent)
        self._eps = float(config.replay.priority_epsilon)
        self.steps = 0
        self.first_step_time: float | None = None
        self._weights_cache: tuple[int, list[np.ndarray]] = (0, self._online.get_weights())
        # The best evaluated parameters: (return mean, version, weights), kept
        # next to the latest in every checkpoint (the evaluator offers them).
        # With a model store (model_store.enabled) the store keeps them, and
        # `best_source` (set by the node) gives its record for checkpoints.
        self._best = BestParams()
        self._best_lock = threading.Lock()
        self.best_source: Callable[[], dict[str, np.ndarray]] | None = None
        self._weights_wanted = False
        self._weights_cv = threading.Condition()
        self._training = False
        self._last: dict[str, float] = {}
        self._lags: list[np.ndarray] = []
        self._ages: list[np.ndarray] = []
        self._band_edges = tuple(config.logging.epsilon_bands)
        num_bands = len(self._band_edges) + 1
        self._band_counts = np.zeros(num_bands)
        self._band_priority = np.zeros(num_bands)
        self.last_update: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # The shard of each item of last_update (one batch is one shard's).
        self.last_shards: np.ndarray | None = None
        # S > 1: the importance weights the last step trained with, and its draw
        # (apex.replay.sharded.ShardBatch without the sample: shard, q, ready, N).
        self.last_weights: np.ndarray | None = None
        self.last_draw: Any = None
        self._error: Exception | None = None
        self._should_stop: Callable[[], bool] | None = None
        self.checkpointer: Any = None  # apex.checkpointing.RunCheckpointer, set by the node
        self.run_counters: dict[str, Any] = {}  # the coordinator's, as of the last report
        self._checkpoint_requests: list[tuple[str, threading.Event, list]] = []

    # ------------------------------------------------------------------ SGD
    def _importance_weights(self, info) -> tf.Tensor:
        size = tf.cast(info.table_size, tf.float64)
        w = tf.pow(size * info.probability, -self._beta)
        return tf.cast(w / tf.reduce_max(w), tf.float32)

    def _sgd(self, iterator):
        """One SGD step on the next batch of `iterator` (traced by _run_sgd)."""
        sample = next(iterator)
        return self._sgd_on(sample.data, sample.info, self._importance_weights(sample.info))

    def _sgd_shard_batch(self, data, info, q, total_size):
        """One SGD step on a shard's batch (S > 1; traced once: self._shard_sgd_fn):
        importance weights by apex.replay.sharded's rule, q_s of the draw and N
        the sum of every shard's latest known size (the table_size of its latest
        batch, or its server_info while its rate limiter holds it: ShardedSampler)."""
        weights = shard_importance_weights(info.probability, q, total_size, self._beta)
        if self._transform is not None:
            data = self._transform(data)
        out = self._sgd_on(data, info, weights)
        out["weights"] = weights
        return out

    def _sgd_on(self, data, info, weights):
        with tf.GradientTape() as tape:
            loss, priorities, q_mean = self._builder.loss(
                self._config, self._online, self._target, data, weights
            )
        variables = self._online.weights
        grads = tape.gradient(loss, variables)
        grads, grad_norm = tf.clip_by_global_norm(grads, self._config.learner.max_grad_norm)
        self._optimizer.apply(grads, variables)
        # Few outputs: each is one host copy per step (see step()).
        return {
            "keys": info.key,
            "priorities": priorities + self._eps,
            "sampled_priorities": info.priority,
            "scalars": tf.stack([loss, grad_norm, q_mean]),
            "provenance": tf.stack(
                [
                    tf.cast(data["version"], tf.float64),
                    tf.cast(data["insert_time"], tf.float64),
                    tf.cast(data["epsilon"], tf.float64),
                ],
                axis=1,
            ),
        }

    def _run_sgd(self, iterator) -> dict[str, tf.Tensor]:
        """One `_sgd` step on `iterator`, through a tf.function traced for it.

        The function takes no argument: it captures the iterator. Passing the
        iterator as an argument makes TF match its nested element spec against
        the trace on every call, which cost 17-20% of a step here (bench,
        batch 64). A new iterator (after the rate limiter held sampling past
        its timeout) costs one new trace, about 0.3 s.
        """
        if self._sgd_fn is None or self._sgd_iterator is not iterator:
            self._sgd_fn = tf.function(functools.partial(self._sgd, iterator))
            self._sgd_iterator = iterator
        return self._sgd_fn()

    @tf.function
    def _update_target(self):
        for t, o in zip(self._target.weights, self._online.weights):
            t.assign(o)

    def step(self) -> dict[str, float]:
        """One SGD step (blocks until the rate limiter lets a batch through)."""
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.TRAINING)
        shard = 0
        if self._sampler is not None:
            out, shard = self._step_shards()
        while self._sampler is None:
            try:
                if self._iterator is None:
                    self._iterator = iter(self._dataset)
                out = self._run_sgd(self._iterator)
                break
            except (tf.errors.OutOfRangeError, StopIteration):
                # The rate limiter held sampling past its timeout; start a new stream.
                self._iterator = iter(self._dataset)
                if self._should_stop is not None and self._should_stop():
                    raise _Stopped() from None
        self.steps += 1
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.IDLE)
        if self.first_step_time is None:
            self.first_step_time = time.time()
        if self.steps % self._config.learner.target_update_period == 0:
            self._update_target()
        if self._weights_wanted:
            with self._weights_cv:
                self._weights_cache = (self.steps, self._online.get_weights())
                self._weights_wanted = False
                self._weights_cv.notify_all()
        keys = out["keys"].numpy()
        prios = out["priorities"].numpy()
        self._updater.put(keys, prios, shard)
        self.last_update = (keys, out["sampled_priorities"].numpy(), prios)
        self.last_shards = np.full(len(keys), shard, np.int32)
        version, insert_time, epsilon = out["provenance"].numpy().T
        self._lags.append(self.steps - 1 - version)
        self._ages.append(time.time() - insert_time)
        bands = epsilon_bands(epsilon, self._band_edges)
        num_bands = len(self._band_counts)
        self._band_counts += np.bincount(bands, minlength=num_bands)
        self._band_priority += np.bincount(bands, weights=self.last_update[1], minlength=num_bands)
        loss, grad_norm, q_mean = out["scalars"].numpy().tolist()
        self._last = {"loss": loss, "grad_norm": grad_norm, "q_mean": q_mean}
        return self._last

    def _step_shards(self) -> tuple[dict[str, tf.Tensor], int]:
        """S > 1: one SGD step on the next batch of the sampler; (outputs, shard)."""
        batch = self._sampler.next(self._should_stop)
        if batch is None:
            raise _Stopped()
        out = self._shard_sgd_fn(
            batch.sample.data,
            batch.sample.info,
            tf.constant(batch.q, tf.float64),
            tf.constant(float(batch.total_size), tf.float64),
        )
        self.last_weights = out["weights"].numpy()
        self.last_draw = batch._replace(sample=None)
        return out, batch.shard

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Steps until should_stop() or config.stop.max_learner_steps.

        SGD runs on a daemon thread; this thread watches `should_stop` so a stop
        request is honoured within a fraction of a second even while a step
        waits for the rate limiter.
        """
        self._should_stop = should_stop
        self._updater.start()
        worker = threading.Thread(
            target=self._train_loop, args=(should_stop,), name="learner-sgd", daemon=True
        )
        worker.start()
        while worker.is_alive() and not should_stop():
            worker.join(0.2)
        worker.join(timeout=2.0)
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
        self._wait_for_min_size(should_stop)
        try:
            while not should_stop():
                if max_steps is not None and self.steps >= max_steps:
                    time.sleep(0.2)
                else:
                    self.step()
                now = time.time()
                if self.checkpointer is not None and self.checkpointer.due(now):
                    self.checkpointer.save(self)  # between two steps: weights are whole
                self._serve_checkpoint_requests()
                if now - last_t >= period:
                    self.report(now, (self.steps - last_steps) / (now - last_t))
                    last_t, last_steps = now, self.steps
        except _Stopped:
            pass
        except Exception as err:  # noqa: BLE001 - surfaced by run() on its own thread
            if not should_stop():
                self._error = err

    def _wait_for_min_size(self, should_stop: Callable[[], bool]) -> None:
        """Polls the table until it holds replay.min_size items (or a stop).

        Until then the rate limiter holds every sample; waiting here instead
        of in a sample spares one new iterator, and one new trace of the SGD
        step (_run_sgd), per rate-limiter timeout while actors fill the table.
        """
        if self._heartbeat is not None:
            self._heartbeat.enter(hb.TRAINING)
        # With S > 1 any shard that can serve will do: its own min_size.
        table, min_size = self._table, shard_config(self._config).replay.min_size
        while not should_stop():
            for client in self.replay_clients:
                try:
                    if client.server_info(timeout=2)[table].current_size >= min_size:
                        return
                except Exception:  # noqa: BLE001 - the first sample reports a missing server
                    return
            time.sleep(0.05)

    def drain(self, seconds: float, until: Callable[[], bool] | None = None) -> int:
        """Samples (without training) for at most `seconds`, or until `until()`;
        returns the batches drawn.

        Used at shutdown: the rate limiter blocks actors' inserts once the
        learner stops sampling, and an actor stuck in an insert cannot see the
        stop request nor close its writer. Sampling releases them. It uses a
        fresh iterator (the SGD thread may still hold the old one) and runs on a
        daemon thread so that a blocked sample cannot hold the caller.
        """
        end = time.time() + seconds
        count = [0]
        done = until or (lambda: False)
        if self.num_shards > 1:  # every shard's actors may wait on its rate limiter
            return drain_datasets(self._datasets, seconds, done)

        def loop() -> None:
            iterator = iter(self._dataset)
            while time.time() < end and not done():
                try:
                    next(iterator)
                    count[0] += 1
                except (tf.errors.OutOfRangeError, StopIteration):
                    iterator = iter(self._dataset)
                except Exception:  # noqa: BLE001 - the server is going down: nothing left to release
                    return

        thread = threading.Thread(target=loop, name="learner-drain", daemon=True)
        thread.start()
        thread.join(timeout=seconds + 0.2)
        return count[0]

    def start_priority_updates(self) -> None:
        """Starts the background priority sender (run() does it; tests call it)."""
        self._updater.start()

    def flush_priorities(self) -> None:
        """Blocks until every priority update so far reached Reverb (every shard)."""
        self._updater.flush()

    def report(self, now: float, rate: float | None) -> dict[str, Any]:
        row: dict[str, Any] = {
            "learner/steps": self.steps,
            "learner/learning_rate": self._optimizer.learning_rate(),
            "learner/priority_updates": self._updater.updates_sent,
            "learner/priority_update_calls": self._updater.calls,
        }
        if rate is not None:
            row["learner/steps_per_second"] = rate
        for k, v in self._last.items():
            row[f"learner/{k}"] = v
        if self._lags:
            lags = np.concatenate(self._lags)
            ages = np.concatenate(self._ages)
            self._lags, self._ages = [], []
            row["learner/policy_lag_p50_steps"] = float(np.percentile(lags, 50))
            row["learner/policy_lag_p90_steps"] = float(np.percentile(lags, 90))
            row["learner/policy_lag_max_steps"] = float(lags.max())
            row["learner/sample_age_p50_seconds"] = float(np.percentile(ages, 50))
            row["learner/sample_age_p90_seconds"] = float(np.percentile(ages, 90))
            row["learner/sample_age_max_seconds"] = float(ages.max())
        if self._band_counts.sum() > 0:
            counts = self._band_counts / self._band_counts.sum()
            prio = self._band_priority / max(self._band_priority.sum(), 1e-12)
            for b in range(len(counts)):
                row[f"learner/sample_share_band_{b}"] = float(counts[b])
                row[f"learner/priority_share_band_{b}"] = float(prio[b])
            self._band_counts[:] = 0
            self._band_priority[:] = 0
        if self._updater.calls:
            row["learner/priority_update_ms"] = (
                1000.0 * self._updater.seconds_in_calls / self._updater.calls
            )
        if self.num_shards > 1:
            self._report_shards(row)
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

    def _report_shards(self, row: dict[str, Any]) -> None:
        """Per-shard counters (S > 1), and one warning line when more priority
        updates went unacknowledged since the last row: counted, never dropped
        silently. Unacknowledged: a call that raised, or one that has not
        returned since the previous row (a call to a vanished server can hang)."""
        sent, acked, failed = self._updater.sent(), self._updater.acked(), self._updater.failed()
        for s in range(self.num_shards):
            row[f"learner/batches_shard_{s}"] = self._sampler.batches[s]
            row[f"learner/priority_updates_sent_shard_{s}"] = sent[s]
            row[f"learner/priority_updates_acked_shard_{s}"] = acked[s]
        row["learner/priority_updates_unacked"] = sum(sent) - sum(acked)
        stale = [
            max(failed[s], self._sent_at_last_row[s] - acked[s]) for s in range(self.num_shards)
        ]
        self._sent_at_last_row = sent
        if sum(stale) > self._unacked_warned:
            errors = self._updater.last_errors()
            where = ", ".join(
                f"{shard_name(s, self.num_shards)}: {stale[s]} keys "
                f"({errors[s] or 'no answer since the previous metrics row'})"
                for s in range(self.num_shards)
                if stale[s]
            )
            print(
                f"[apex] learner: priority updates not acknowledged by their shard: {where}",
                flush=True,
            )
        self._unacked_warned = sum(stale)

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
    def get_variables(self) -> tuple[int, list[np.ndarray], dict[str, float]]:
        """(version, weights, info): version = SGD steps done; info has max_priority.

        While the SGD thread runs, the weights are copied by that thread right
        after its next step (never half-applied); if no step completes within
        0.5 s (the learner waits for data) they are read directly.
        """
        info = {"max_priority": self._updater.max_priority}
        if self._training:
            target = self.steps
            with self._weights_cv:
                self._weights_wanted = True
                if self._weights_cv.wait_for(lambda: self._weights_cache[0] >= target, timeout=0.5):
                    version, weights = self._weights_cache
                    return version, weights, info
        version, weights = self.steps, self._online.get_weights()
        self._weights_cache = (version, weights)
        return version, weights, info

    # --------------------------------------------------------- best params
    def offer_best(self, return_mean: float, version: int, weights: list[np.ndarray]) -> bool:
        """The evaluator's result for the parameters of `version`: kept as the best
        if its evaluation mean is at least the best so far (a tie keeps the
        newer, more trained one; apex.model_store.BestParams). Returns whether
        it was kept."""
        shapes = [tuple(v.shape) for v in self._online.weights]
        with self._best_lock:
            return self._best.offer(return_mean, version, weights, shapes=shapes)

    def best(self) -> tuple[float, int] | None:
        """(return mean, version) of the best evaluated parameters, None before any."""
        with self._best_lock:
            return self._best.best()

    def best_variables(self) -> tuple[int, list[np.ndarray]] | None:
        """(version, weights) of the best evaluated parameters, None before any."""
        with self._best_lock:
            return self._best.best_variables()

    # ---------------------------------------------------------- checkpoints
    def _state_groups(self) -> dict[str, list]:
        return {
            "online": list(self._online.weights),
            "target": list(self._target.weights),
            "adam_m": self._optimizer.m,
            "adam_v": self._optimizer.v,
        }

    def get_state(self) -> dict[str, np.ndarray]:
        """Everything SGD needs to continue exactly: online and target weights,
        Adam's moments and step count, the learner step and the max priority."""
        state: dict[str, np.ndarray] = {"steps": np.asarray(self.steps, np.int64)}
        state["max_priority"] = np.asarray(self._updater.max_priority, np.float64)
        state["adam_iterations"] = self._optimizer.iterations.numpy()
        for prefix, variables in self._state_groups().items():
            for i, v in enumerate(variables):
                state[f"{prefix}/{i}"] = v.numpy()
        if self.best_source is not None:  # the model store's record (and its newest version)
            state.update(self.best_source())
        else:
            with self._best_lock:
                state.update(self._best.get_state())
        return state

    def save(self) -> dict[str, np.ndarray]:
        """acme.core.Saveable: the same as get_state()."""
        return self.get_state()

    def restore(self, state: dict[str, np.ndarray]) -> None:
        """acme.core.Saveable: the same as set_state()."""
        self.set_state(state)

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Restores `get_state()`'s output; ValueError names a missing or misshapen array."""
        for prefix, variables in self._state_groups().items():
            count = sum(1 for k in state if k.startswith(prefix + "/"))
            if count != len(variables):
                raise ValueError(
                    f"{prefix}: {count} arrays saved, the network has {len(variables)}"
                )
            for i, v in enumerate(variables):
                value = state[f"{prefix}/{i}"]
                if tuple(value.shape) != tuple(v.shape):
                    raise ValueError(f"{prefix}/{i}: saved shape {value.shape}, now {v.shape}")
                v.assign(value)
        self._optimizer.iterations.assign(int(state["adam_iterations"]))
        self.steps = int(state["steps"])
        self._updater.max_priority = float(state.get("max_priority", 0.0))
        self._weights_cache = (self.steps, self._online.get_weights())
        with self._best_lock:  # checkpoints before best params have none
            self._best.set_state(state, count=len(self._online.weights))

    def checkpoint_now(self, reason: str = "requested", timeout: float = 120.0) -> str:
        """Writes a run checkpoint now (between two SGD steps if training); its path."""
        if self.checkpointer is None:
            raise RuntimeError("this learner has no checkpointer (no run_dir)")
        if not self._training:
            return self.checkpointer.save(self, reason)
        done, result = threading.Event(), []
        self._checkpoint_requests.append((reason, done, result))
        if not done.wait(timeout):
            raise TimeoutError(f"no checkpoint within {timeout} s (the learner is not stepping)")
        if isinstance(result[0], Exception):
            raise result[0]
        return result[0]

    def _serve_checkpoint_requests(self) -> None:
        while self._checkpoint_requests:
            reason, done, result = self._checkpoint_requests.pop(0)
            try:
                result.append(self.checkpointer.save(self, reason))
            except Exception as err:  # noqa: BLE001 - handed to the caller
                result.append(err)
            done.set()

    def network_shapes(self) -> list[list[int]]:
        return [list(v.shape) for v in self._online.weights]

    @property
    def signature(self):
        return self._signature

    @property
    def replay_client(self) -> reverb.Client:
        """Shard 0's client (the only one with one server); all: replay_clients."""
        return self._client

    def close(self) -> None:
        """Stops the sampler's threads (S > 1), the priority updater and closes
        the metrics files (idempotent)."""
        if self._sampler is not None:
            self._sampler.close()
        self._updater.close()
        if self._metrics is not None:
            self._metrics.close()


class _Stopped(Exception):
    pass
