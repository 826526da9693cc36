"""The learner against a real in-process Reverb server filled with real CartPole transitions."""

import threading

import numpy as np
import pytest
import reverb

from apex.agents import TRANSITIONS_TABLE
from apex.envs import env_spec
from apex.learner import Learner
from apex.replay.writer import TransitionWriter
from tests.fakes import FakeVariableSource
from tests.procs import wait_until


def fill(address, config, n):
    from apex.agents.dqn.acting import VectorActor
    from apex.agents.dqn.networks import QNetwork

    client = reverb.Client(address)
    learner_like = FakeVariableSource(
        QNetwork(4, 2, config.learner.hidden_sizes, seed=1).get_weights(), version=0
    )
    with TransitionWriter(
        client, TRANSITIONS_TABLE, 0, np.full(config.actor.envs_per_actor, 0.5, np.float32)
    ) as w:
        actor = VectorActor(config, 0, learner_like, w)
        while actor.items_written < n:
            actor.step()
        actor.close()
    return client


@pytest.mark.timeout(120)
def test_learner_steps_update_priorities_and_versions(reverb_server, small_config):
    address = f"localhost:{reverb_server.port}"
    client = fill(address, small_config, 400)
    learner = Learner(small_config, env_spec(small_config.env), address)
    learner.start_priority_updates()
    v0, w0, _ = learner.get_variables()
    assert v0 == 0
    for _ in range(5):
        metrics = learner.step()
    assert learner.steps == 5 and np.isfinite(metrics["loss"])
    keys, sampled_prios, new_prios = learner.last_update
    learner.flush_priorities()
    assert not np.allclose(sampled_prios, new_prios)  # the learner's |TD| differs from the actor's
    # The table now holds the learner's priorities for those keys.
    sent = dict(zip(keys.tolist(), new_prios.tolist()))
    seen = {}
    for s in client.sample(TRANSITIONS_TABLE, num_samples=2000, emit_timesteps=False):
        k = int(s.info.key)
        if k in sent:
            seen[k] = s.info.priority
    assert seen, "none of the updated keys was sampled back"
    for k, p in seen.items():
        assert p == pytest.approx(sent[k], rel=1e-5)
    # Versions: get_variables answers with the step count and new weights after a step.
    learner.step()
    v1, w1, info = learner.get_variables()
    assert v1 == 6
    assert any(not np.array_equal(a, b) for a, b in zip(w0, w1))
    assert info["max_priority"] > 0
    learner.close()


@pytest.mark.timeout(120)
def test_policy_lag_is_reported_for_sampled_batches(reverb_server, small_config):
    address = f"localhost:{reverb_server.port}"
    fill(address, small_config, 200)
    learner = Learner(small_config, env_spec(small_config.env), address)
    for _ in range(3):
        learner.step()
    row = learner.report(0.0, None)
    # Items were acted with version 0; the learner sampled them at versions 0, 1, 2.
    assert row["learner/policy_lag_max_steps"] == 2.0
    assert row["learner/steps"] == 3
    learner.close()


def test_best_parameters_are_kept_next_to_the_latest_and_survive_a_checkpoint(
    reverb_server, small_config
):
    """The evaluator offers each evaluation's weights; the learner keeps the best
    (a tie keeps the newer), and get_state/set_state carry it."""
    from apex.evaluation import Evaluator

    address = f"localhost:{reverb_server.port}"
    learner = Learner(small_config, env_spec(small_config.env), address)
    assert learner.best() is None and "best_version" not in learner.get_state()
    w = learner.get_variables()[1]
    w2 = [x + 1.0 for x in w]
    assert learner.offer_best(120.0, 3, w)
    assert not learner.offer_best(80.0, 4, w2)  # worse: the best stays
    assert learner.best() == (120.0, 3)
    assert learner.offer_best(120.0, 5, w2)  # a tie keeps the newer
    version, best_w = learner.best_variables()
    assert version == 5
    for a, b in zip(best_w, w2):
        np.testing.assert_array_equal(a, b)
    state = learner.get_state()
    assert int(state["best_version"]) == 5 and float(state["best_return_mean"]) == 120.0

    restored = Learner(small_config, env_spec(small_config.env), address)
    from acme import core as acme_core

    assert isinstance(restored, acme_core.Saveable)  # Acme's save()/restore() are the same
    restored.restore(learner.save())
    assert restored.best() == (120.0, 5)
    for a, b in zip(restored.best_variables()[1], w2):
        np.testing.assert_array_equal(a, b)

    # The evaluator offers only results at least as good as the learner's best.
    small_config.evaluation.episodes = 1
    evaluator = Evaluator(small_config, FakeVariableSource(w, version=9), best_sink=restored)
    row = evaluator.evaluate_once()  # a random policy: far below 120 on CartPole
    assert row["evaluator/return_mean"] < 120.0
    assert restored.best() == (120.0, 5)
    fresh = Learner(small_config, env_spec(small_config.env), address)
    Evaluator(small_config, FakeVariableSource(w, version=9), best_sink=fresh).evaluate_once()
    assert fresh.best()[1] == 9  # nothing was kept before: the first result is the best


def test_an_evaluation_gives_way_to_a_stop_within_an_episode(small_config):
    """A stop request cuts an evaluation short between two env steps: nothing is
    reported, nothing is counted (an Atari episode can outlast the stop window)."""
    from apex.evaluation import Evaluator

    small_config.evaluation.episodes = 2
    from apex.agents.dqn.networks import QNetwork

    w = QNetwork(4, 2, small_config.learner.hidden_sizes, seed=0).get_weights()
    asked = []

    def stop_on_third_step() -> bool:
        asked.append(1)
        return len(asked) >= 3

    evaluator = Evaluator(small_config, FakeVariableSource(w, version=1))
    assert evaluator.evaluate_once(stop_on_third_step) is None
    assert len(asked) == 3 and evaluator.evaluations == 0
    assert evaluator.evaluate_once()["evaluator/evaluations"] == 1


def constant_batches(address, config, n):
    """(spec, builder, a dataset repeating one sampled batch) after `n` items are
    written: the same batch for every step, so two SGD steps can be compared."""
    import tensorflow as tf

    from apex.agents import get_builder
    from apex.replay.dataset import make_dataset

    fill(address, config, n)
    spec, builder = env_spec(config.env), get_builder(config)
    ds = make_dataset(
        address,
        builder.item_signature(config, spec),
        config.learner.batch_size,
        table=builder.table,
        transform=builder.input_transform(config, spec),
    )
    return spec, builder, tf.data.Dataset.from_tensors(next(iter(ds))).repeat()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("jit", [False, True])
def test_several_steps_per_call_train_as_the_same_steps_one_by_one(
    reverb_server, small_config, jit
):
    """learner.steps_per_call = 4 (and jit_compile) on 8 constant batches, a new
    iterator for each call: the weights, the target copies (period 3, across
    calls) and the priorities are those of 8 one-step calls."""
    import tensorflow as tf

    from apex.learner.sgd import SGDStep

    small_config.learner.target_update_period = 3
    small_config.learner.jit_compile = jit
    spec, builder, const = constant_batches(f"localhost:{reverb_server.port}", small_config, 200)
    one, four = (SGDStep(small_config, builder, spec) for _ in range(2))
    it, prios_one = iter(const), []
    for s in range(8):
        prios_one.append(one.on_iterator(it)["priorities"].numpy())
        if (s + 1) % 3 == 0:
            one.update_target()
    # A call whose iterator ends mid-call (a sampling timeout) changes nothing.
    with pytest.raises(tf.errors.OutOfRangeError):
        four.on_iterator(iter(const.take(2)), 4, 0)
    prios_four = []
    for steps in (0, 4):
        # A new iterator per call, as after the rate limiter held sampling past
        # its timeout: a new trace, the old one dropped, and still no error.
        import gc

        out = four.on_iterator(iter(const), 4, steps)
        gc.collect()
        assert out["keys"].shape[0] == 4 * small_config.learner.batch_size
        prios_four.append(out["priorities"].numpy())
    np.testing.assert_allclose(np.concatenate(prios_four), np.concatenate(prios_one), rtol=1e-5)
    for a, b in zip(
        one.online.weights + one.target.weights, four.online.weights + four.target.weights
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert int(four.optimizer.iterations.numpy()) == 8


@pytest.mark.timeout(120)
def test_a_call_of_several_steps_counts_each_step(reverb_server, small_config):
    address = f"localhost:{reverb_server.port}"
    fill(address, small_config, 200)
    small_config.learner.steps_per_call = 4
    small_config.stop.max_learner_steps = 6
    learner = Learner(small_config, env_spec(small_config.env), address)
    learner.step()
    assert learner.steps == 4 and len(learner.last_update[0]) == 4 * 32
    learner.step()  # 2 steps left before max_learner_steps
    assert learner.steps == 6 and len(learner.last_update[0]) == 2 * 32
    row = learner.report(0.0, None)
    assert row["learner/steps"] == 6
    assert row["learner/policy_lag_max_steps"] == 5.0  # items of version 0, trained by steps 1..6
    learner.close()


@pytest.mark.timeout(180)
def test_the_first_steps_do_not_wait_for_the_trace_of_several(reverb_server, small_config):
    """steps_per_call = 4 under run(): one step per call until the 4-step
    function is traced on its own thread, then 4 per call; every step counted."""
    address = f"localhost:{reverb_server.port}"
    fill(address, small_config, 200)
    small_config.learner.steps_per_call = 4
    learner = Learner(small_config, env_spec(small_config.env), address)
    calls: list[int] = []
    on_iterator = learner._sgd.on_iterator

    def counted(iterator, k=1, steps=0):
        out = on_iterator(iterator, k, steps)
        calls.append(k)
        return out

    learner._sgd.on_iterator = counted
    learner.run(lambda: len(calls) >= 3 and calls[-3:] == [4, 4, 4])
    assert calls[-1] == 4 and set(calls) <= {1, 4}
    first = calls.index(4)
    assert all(k == 4 for k in calls[first:])  # never back to one step per call
    assert learner.steps == sum(calls)
    assert len(learner.last_update[0]) == 4 * 32


@pytest.mark.timeout(180)
def test_the_first_step_runs_a_function_traced_before_any_batch_and_the_k_step_trace_waits_for_it(
    reverb_server, small_config
):
    """prepare_in_background: the one-step function (the iterator an argument)
    is traced before a batch is drawn, the first steps run it without a new
    trace, and the 4-step function is traced only once the first step is done
    (start-up, issue 27); the steps train as those of an SGDStep never prepared."""
    import threading

    from apex.learner.sgd import SGDStep

    spec, builder, const = constant_batches(f"localhost:{reverb_server.port}", small_config, 200)
    prepared, plain = (SGDStep(small_config, builder, spec) for _ in range(2))
    first = threading.Event()
    ready = prepared.prepare_in_background(const.element_spec, 4, first)
    wait_until(lambda: prepared._one_ready.is_set(), 120, "the one-step trace", 0.02)
    assert prepared._one_fn.experimental_get_tracing_count() == 1
    assert not ready.is_set() and prepared._k_fn.experimental_get_tracing_count() == 0
    it, it_plain = iter(const), iter(const)
    for _ in range(3):
        a = prepared.on_iterator(it, 1, 0)["priorities"].numpy()
        b = plain.on_iterator(it_plain, 1, 0)["priorities"].numpy()
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert prepared._one_fn.experimental_get_tracing_count() == 1  # no trace on the way
    assert prepared._captured is None  # steps_per_call 4: the captured form is never traced
    assert not ready.is_set() and prepared._k_fn.experimental_get_tracing_count() == 0
    first.set()
    assert ready.wait(120), "hang guard: the 4-step trace"
    assert prepared._k_fn.experimental_get_tracing_count() == 1
    prepared.on_iterator(it, 4, 3)
    assert prepared._k_fn.experimental_get_tracing_count() == 1  # the call used that trace
    for x, y in zip(prepared.online.weights[:1], plain.online.weights[:1]):
        assert not np.allclose(x.numpy(), y.numpy())  # 4 more steps: it trained on


@pytest.mark.timeout(180)
def test_one_step_per_call_moves_to_the_captured_iterator_once_it_is_traced(
    reverb_server, small_config
):
    """steps_per_call 1: the first steps run the prepared argument form, and a
    function capturing the iterator is traced beside it and then runs."""

    from apex.learner.sgd import SGDStep

    spec, builder, const = constant_batches(f"localhost:{reverb_server.port}", small_config, 100)
    sgd = SGDStep(small_config, builder, spec)
    ready = sgd.prepare_in_background(const.element_spec, 1)
    assert ready.wait(120), "hang guard: the one-step trace"
    it = iter(const)
    sgd.on_iterator(it, 1, 0)  # starts the captured trace
    wait_until(lambda: sgd._captured is not None, 120, "the captured trace", 0.02)
    assert sgd._captured[0] is it
    before = int(sgd.optimizer.iterations.numpy())
    out = sgd.on_iterator(it, 1, 1)
    assert out["keys"].shape[0] == small_config.learner.batch_size
    assert int(sgd.optimizer.iterations.numpy()) == before + 1
    assert sgd._one_fn.experimental_get_tracing_count() == 1


@pytest.mark.timeout(180)
def test_a_stop_before_the_first_step_ends_the_trace_thread_without_the_k_step_trace(
    reverb_server, small_config
):
    """join_traces (the learner's stop): the thread waiting for the first step to
    trace the 4-step function ends without tracing it, so no thread is left
    inside TensorFlow's tracing when the node process ends."""
    from apex.agents import get_builder
    from apex.learner.sgd import SGDStep

    spec, builder = env_spec(small_config.env), get_builder(small_config)
    learner = Learner(small_config, spec, f"localhost:{reverb_server.port}")
    sgd = SGDStep(small_config, builder, spec)
    ready = sgd.prepare_in_background(learner._batches.element_spec, 4, threading.Event())
    assert sgd.join_traces(timeout=120.0), "hang guard: a trace thread is still alive"
    assert ready.is_set() and sgd._one_traced
    assert sgd._k_fn.experimental_get_tracing_count() == 0
    learner.close()
