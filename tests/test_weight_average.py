"""evaluation.weights='average': the learner keeps an exponential moving average
of its online weights, the evaluator plays it and keeps it as the best, every
checkpoint holds it and `apex policy export` takes it; summary.json and
policy.json say which weights."""

import os

import numpy as np
import pytest
import tensorflow as tf

from apex import checkpointing
from apex import trained_policy as tp
from apex.envs import env_spec
from apex.learner import Learner
from apex.learner.averaging import WeightAverage
from tests.test_learner import fill


def test_the_average_blends_decay_to_the_power_of_the_steps_and_restores():
    online = [tf.Variable(np.zeros((2, 3), np.float32)), tf.Variable(np.ones(3, np.float32))]
    avg = WeightAverage(online, 0.9)
    np.testing.assert_array_equal(avg.get_weights()[1], np.ones(3))  # starts as the online
    online[0].assign(np.full((2, 3), 10.0, np.float32))
    online[1].assign(np.full(3, 3.0, np.float32))
    avg.update(1)
    np.testing.assert_allclose(avg.get_weights()[0], np.full((2, 3), 1.0), rtol=1e-6)
    np.testing.assert_allclose(avg.get_weights()[1], np.full(3, 0.9 + 0.3), rtol=1e-6)
    avg.update(2)  # two SGD steps in one call at the same online weights
    np.testing.assert_allclose(avg.get_weights()[0], 10 - 9 * 0.9**2, rtol=1e-6)

    state = avg.get_state()
    assert sorted(state) == ["average/0", "average/1"]
    other = WeightAverage(online, 0.9)
    assert other.set_state(state)
    np.testing.assert_array_equal(other.get_weights()[0], state["average/0"])
    assert not other.set_state({})  # a checkpoint without one: from the online weights
    np.testing.assert_array_equal(other.get_weights()[0], online[0].numpy())
    with pytest.raises(ValueError, match=r"average/1: saved shape \(4,\)"):
        other.set_state({"average/0": state["average/0"], "average/1": np.zeros(4)})


@pytest.mark.timeout(120)
def test_sgd_steps_move_the_average_and_the_online_learner_serves_none(reverb_server, small_config):
    address = f"localhost:{reverb_server.port}"
    fill(address, small_config, 300)
    online_only = Learner(small_config, env_spec(small_config.env), address)
    with pytest.raises(ValueError, match="evaluation.weights='average'"):
        online_only.get_variables("average")
    assert not any(k.startswith("average/") for k in online_only.get_state())
    online_only.close()

    small_config.evaluation.weights = "average"
    small_config.evaluation.average_decay = 0.5
    learner = Learner(small_config, env_spec(small_config.env), address)
    _, before, _ = learner.get_variables("average")
    learner.step()
    version, online, _ = learner.get_variables()
    avg_version, avg, _ = learner.get_variables("average")
    assert version == avg_version == 1
    for a, b, o in zip(avg, before, online):  # one step: half the old, half the new
        np.testing.assert_allclose(a, 0.5 * b + 0.5 * o, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(a, o) for a, o in zip(avg, online))
    state = learner.get_state()
    for i, a in enumerate(avg):
        np.testing.assert_array_equal(state[f"average/{i}"], a)
    resumed = Learner(small_config, env_spec(small_config.env), address)
    resumed.set_state(state)
    for a, b in zip(resumed.get_variables("average")[1], avg):
        np.testing.assert_array_equal(a, b)
    learner.close()
    resumed.close()


def test_the_evaluator_plays_the_average_and_export_names_it(reverb_server, small_config, tmp_path):
    """The evaluator's row is of the average (as the learner serves it), the best
    kept is the average, and export --which=best|average|latest takes the
    average, the average and the online weights, saying which in policy.json."""
    from apex.evaluation import Evaluator
    from apex.metrics import MetricsWriter
    from apex.run_dir import prepare_run_dir

    c = small_config
    c.evaluation.weights = "average"
    c.evaluation.episodes = 1
    c.logging.tensorboard = False
    run_dir = prepare_run_dir(str(tmp_path / "run"), c)
    learner = Learner(c, env_spec(c.env), f"localhost:{reverb_server.port}")
    metrics = MetricsWriter(run_dir, "evaluator", "evaluator/evaluations", tensorboard=False)
    evaluator = Evaluator(c, learner, metrics=metrics, best_sink=learner)
    for v in learner._online.weights:  # online weights far from the average's
        v.assign(v + 1.0)
    learner.steps = 4
    average = learner.get_variables("average")[1]
    online = learner.get_variables()[1]
    row = evaluator.evaluate_once()
    metrics.close()
    assert row["evaluator/param_version"] == 4
    version, best = learner.best_variables()
    assert version == 4
    for a, b in zip(best, average):
        np.testing.assert_array_equal(a, b)

    manifest = checkpointing.make_manifest(c, learner.signature, learner.network_shapes())
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "DONE").touch()
    checkpointing.write(
        run_dir, 4, learner.get_state(), {"learner_steps": 4}, manifest, str(replay), keep=2
    )
    learner.close()
    expected = {"best": average, "average": average, "latest": online}
    for which, weights in expected.items():
        meta = tp.export(run_dir, str(tmp_path / which), which)
        with np.load(os.path.join(tmp_path, which, tp.WEIGHTS_FILE)) as data:
            for i, w in enumerate(weights):
                np.testing.assert_array_equal(data[f"arr_{i}"], w)
        assert meta["source"]["which"] == which
    assert tp.export(run_dir, str(tmp_path / "b2"), "best")["source"]["parameters"] == (
        "the best evaluated: average of the online weights (decay 0.999 per SGD step)"
    )
    latest = tp.export(run_dir, str(tmp_path / "l2"), "latest")
    assert (
        latest["source"]["parameters"] == "at the checkpoint: online weights (the learner's latest)"
    )
    assert latest["eval_return"] is None  # the evaluation of version 4 was of the average
    assert (
        tp.export(run_dir, str(tmp_path / "a2"), "average")["eval_return"]
        == (row["evaluator/return_mean"])
    )
