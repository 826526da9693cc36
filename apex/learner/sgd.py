"""The SGD step: the online and target networks, Adam, and one body that
trains on a batch with its importance weights (apex.replay.priorities owns
their rule), whichever way the batch arrives."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from apex.agents.builder import AgentBuilder
from apex.agents.optim import Adam
from apex.config import ApexConfig
from apex.replay.priorities import importance_weights
from apex.specs import EnvSpec

# Every function of the step is traced without AutoGraph: its Python has no
# control flow on tensors (k and the layers are Python values; the target copy
# is a select), and AutoGraph's conversion of every called function was half of
# the trace: the 4 inlined steps of CartPole's default took 1.98 s of CPU to
# trace with it and 0.94 s without, one step 1.08 s and 0.31 s (this machine).
# The trace is on the path to the learner's first SGD step.
_function = functools.partial(tf.function, autograph=False)


class SGDStep:
    """The networks, the optimizer and the SGD step on prioritized batches.

    One body (`_train`) for every layout: the importance weights
    (N * q * probability) ** -beta over the batch's maximum, the builder's loss
    weighted by them, clipped gradients, Adam, and the step's outputs. The
    batch reaches it in one of two ways, each traced once:

    - `on_iterator(iterator)`: one replay server; the traced function captures
      the dataset's iterator and takes the batch from it inside the graph
      (q = 1, N = each item's table_size);
    - `on_batch(sample, q, total_size)`: S > 1 shards; the sampler's batch
      crosses as arguments of `batch_spec` (apex.replay.sharded: q the shard's
      pick probability, N the total size over the shards).

    Data arrive as the loss reads them: the input transform is the dataset's
    (apex.learner.sampling).

    Each step returns a few tensors (each one host copy per step): keys,
    priorities (new, + replay.priority_epsilon), sampled_priorities, scalars
    (loss, grad_norm, q_mean), provenance ([B, 3]: version, insert_time,
    epsilon) and weights (the importance weights it trained with).
    """

    def __init__(
        self,
        config: ApexConfig,
        builder: AgentBuilder,
        spec: EnvSpec,
        batch_spec: Any = None,
    ):
        lc = config.learner
        self._config = config
        self._builder = builder
        self.online = builder.make_network(config, spec, seed=lc.seed)
        self.target = builder.make_network(config, spec, seed=lc.seed)
        self.target.set_weights(self.online.get_weights())
        self.optimizer = Adam(
            list(self.online.weights),
            lc.learning_rate,
            epsilon=lc.adam_epsilon,
            final_learning_rate=lc.learning_rate_final,
            decay_steps=lc.learning_rate_decay_steps,
        )
        self._beta = float(lc.importance_exponent)
        self._eps = float(config.replay.priority_epsilon)
        self._target_period = int(lc.target_update_period)
        # The math of one step, XLA-compiled with learner.jit_compile (the
        # iterator's next() cannot be compiled: it stays in the outer function).
        jit = bool(lc.jit_compile)
        self._math = _function(self._train, jit_compile=True) if jit else self._train
        # k = 1: _train_next traced with self._iterator captured (`_captured`:
        # (iterator, function), set once traced) ...
        self._iterator: Any = None
        self._captured: tuple[Any, Any] | None = None
        # ... or with the iterator as an argument (`_one_fn`), traced before
        # the first batch by prepare_in_background: what the first steps run.
        self._one_ready: threading.Event | None = None
        self._one_traced = False
        self._capture = True  # steps_per_call 1: the captured form is traced too
        self._tracers: list[threading.Thread] = []  # the threads tracing (join_traces)
        self._stopping = threading.Event()
        # _train_next with the iterator as an argument, traced once per k: k = 1
        # (the first steps) in a tf.function of its own, so that its calls do not
        # wait on the lock TF holds while it traces the k-step one on a thread.
        self._one_fn = _function(self._train_next)
        self._k_fn = _function(self._train_next)
        self._batch_fn: Any = None
        if batch_spec is not None:
            scalar = tf.TensorSpec([], tf.float64)
            self._batch_fn = _function(
                self._train,
                input_signature=[batch_spec.data, batch_spec.info, scalar, scalar],
                jit_compile=jit or None,
            )

    def _train(self, data, info, q, size) -> dict[str, tf.Tensor]:
        """One SGD step on a batch: P(i) = q * info.probability (q None: 1)."""
        probability = info.probability if q is None else q * info.probability
        weights = tf.cast(importance_weights(probability, size, self._beta, xp=tf), tf.float32)
        with tf.GradientTape() as tape:
            loss, priorities, q_mean = self._builder.loss(
                self._config, self.online, self.target, data, weights
            )
        variables = self.online.weights
        grads = tape.gradient(loss, variables)
        grads, grad_norm = tf.clip_by_global_norm(grads, self._config.learner.max_grad_norm)
        self.optimizer.apply(grads, variables)
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
            "weights": weights,
        }

    def _train_next(self, iterator, k: int = 1, steps: Any = None) -> dict[str, tf.Tensor]:
        """k steps on k batches of `iterator`; k > 1 also copies the target
        network after each step whose number (steps + i + 1) is a multiple of
        learner.target_update_period, and returns the k batches' keys,
        priorities, sampled priorities, provenance and weights concatenated in
        step order, and the last step's scalars."""
        # Every batch first: a sampling timeout (OutOfRangeError) then leaves
        # the variables as they were, and the caller retries the whole call.
        samples = [next(iterator) for _ in range(k)]
        outs = []
        with tf.control_dependencies(tf.nest.flatten(samples) if k > 1 else []):
            for i, sample in enumerate(samples):
                outs.append(self._math(sample.data, sample.info, None, sample.info.table_size))
                if k > 1:
                    due = tf.equal(tf.math.floormod(steps + (i + 1), self._target_period), 0)
                    # A select, not tf.cond: a cond's branch functions went
                    # missing in node processes forked by the zygote ("Op type
                    # not registered 'cond_true_N'"), and this costs one
                    # elementwise op per weight.
                    for t, o in zip(self.target.weights, self.online.weights):
                        t.assign(tf.where(due, o, t))
        if k == 1:
            return outs[0]
        merged = {key: tf.concat([o[key] for o in outs], 0) for key in outs[0] if key != "scalars"}
        merged["scalars"] = outs[-1]["scalars"]
        return merged

    def on_iterator(self, iterator, k: int = 1, steps: int = 0) -> dict[str, tf.Tensor]:
        """k SGD steps (learner.steps_per_call) on the next k batches of
        `iterator` (one replay server), in one call; `steps`: the steps done
        before (k > 1 copies the target network inside the call; with k = 1
        the caller does, update_target).

        The function takes the iterator as an argument (`_k_fn`, `_one_fn`): traced once per
        k for every iterator of the dataset, and before the first batch exists
        (`prepare_in_background`; the k inlined steps take 1-1.5 s to trace here,
        one step ~0.3 s). With k = 1 that costs TF a match of the iterator's
        nested element spec against the trace on every call, 17-20% of a step
        here (bench, batch 64): with learner.steps_per_call = 1 a function that
        captures the iterator is traced beside it, on a thread, for each new
        iterator (one after the rate limiter held sampling past its timeout), and
        runs once traced.
        """
        # From a NumPy scalar, not a Python int: TF caches the tensor of every
        # Python number it converts, forever (its scalar cache), so a new step
        # count per call grew the learner's heap by ~450 B a call (~1.1 MB per
        # 10k steps at k=4 in a soak).
        if k > 1:
            return self._k_fn(iterator, k, tf.constant(np.int64(steps)))
        if self._iterator is not iterator:
            self._iterator = iterator
            self._captured = None
            if self._capture and self._one_ready is not None:
                self._trace_captured(iterator)
        captured = self._captured
        if captured is not None and captured[0] is iterator:
            return captured[1]()
        if self._one_ready is not None:
            self._one_ready.wait()  # traced while the table filled: a wait only at the start
            if self._one_traced:
                return self._one_fn(iterator, 1, tf.constant(np.int64(steps)))
        # Not prepared (a caller of on_iterator alone), or that trace failed: the
        # captured form, traced here (a failure raises here).
        fn = _function(functools.partial(self._train_next, iterator, 1))
        self._captured = (iterator, fn)
        return fn()

    def _trace_captured(self, iterator: Any) -> None:
        """Traces the function that captures `iterator` on a daemon thread; it
        replaces the argument form in on_iterator once traced."""

        if self._stopping.is_set():
            return  # stopping (join_traces): the argument form goes on

        def trace() -> None:
            fn = _function(functools.partial(self._train_next, iterator, 1))
            try:
                fn.get_concrete_function()
            except Exception:  # noqa: BLE001 - the argument form goes on
                return
            if self._iterator is iterator:
                self._captured = (iterator, fn)

        self._start_tracer(trace, "learner-trace-captured")

    def prepare(self, element_spec: Any, k: int) -> None:
        """Traces the k-step function (iterator as an argument) for iterators of
        batches of `element_spec`, before any batch exists (start-up)."""
        fn = self._one_fn if k == 1 else self._k_fn
        fn.get_concrete_function(tf.data.IteratorSpec(element_spec), k, tf.TensorSpec([], tf.int64))

    def prepare_in_background(
        self, element_spec: Any, k: int, after_first_step: threading.Event | None = None
    ) -> threading.Event:
        """Traces on a daemon thread, in this order: the one-step function the
        first steps run (on_iterator with k = 1, the iterator as an argument),
        then, with k > 1 and once `after_first_step` is set (if given), the k-step
        function. Returns the event set when the k-step function is traced (or
        its trace failed: the first k-step call then traces again and raises);
        until then the learner trains one step per call.

        So the first SGD step waits only for the one-step trace, made while the
        actors fill the table, and the k-step trace (~3x its CPU) takes no CPU
        from the path to the first step (start-up).
        """
        ready = threading.Event()
        one = threading.Event()
        self._one_ready = one
        self._capture = k <= 1

        def trace() -> None:
            try:
                self.prepare(element_spec, 1)
                self._one_traced = True
            except Exception:  # noqa: BLE001 - on_iterator traces the captured form and raises
                pass
            finally:
                one.set()
            try:
                if k > 1:
                    while after_first_step is not None and not after_first_step.wait(0.2):
                        if self._stopping.is_set():
                            return  # stopped before the first step: no trace to make
                    if not self._stopping.is_set():
                        self.prepare(element_spec, k)
            except Exception:  # noqa: BLE001 - the foreground call traces again and raises
                pass
            finally:
                ready.set()

        self._start_tracer(trace, "learner-trace")
        return ready

    def _start_tracer(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._tracers = [t for t in self._tracers if t.is_alive()] + [thread]
        thread.start()

    def join_traces(self, timeout: float) -> bool:
        """At a stop: starts no new trace and waits (at most `timeout` s) for the
        one in progress; True if none is left. A node process then never ends
        while a thread is inside TensorFlow's tracing (a learner stopped right
        after its first step, mid-way through the k-step trace, once stayed past
        the stop window after its final checkpoint)."""
        self._stopping.set()
        deadline = time.monotonic() + timeout
        for thread in list(self._tracers):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._tracers)

    def on_batch(self, sample: Any, q: float, total_size: int) -> dict[str, tf.Tensor]:
        """One step on a sharded sampler's batch (S > 1; needs `batch_spec`)."""
        return self._batch_fn(
            sample.data,
            sample.info,
            tf.constant(np.float64(q)),  # NumPy scalars: see on_iterator
            tf.constant(np.float64(total_size)),
        )

    def _copy_target(self) -> tf.Tensor:
        for t, o in zip(self.target.weights, self.online.weights):
            t.assign(o)
        return tf.constant(True)

    @_function
    def update_target(self) -> None:
        """Copies the online weights into the target network."""
        self._copy_target()
