"""Metrics sinks: what the run's metrics files hold reaches Weights & Biases
(offline) and MLflow (a local file store) with TensorBoard's tags and steps; the
config as parameters, the summary as final values; a second life of the run
goes on in the same runs without sending a row twice."""

import json
import os

import pytest

from apex import ApexConfig, ConfigError, MetricSinks, validate
from apex.config import to_dict
from apex.metrics import MetricsWriter
from apex.tracking import MetricsTail, metric_key
from tests.sink_readers import mlflow_history, mlflow_runs, wandb_offline


def _run_dir(tmp_path, **logging):
    config = ApexConfig()
    for k, v in logging.items():
        setattr(config.logging, k, v)
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(to_dict(config), f)
    return config, run_dir


def _rows(run_dir, steps, *, start=0):
    learner = MetricsWriter(run_dir, "learner", step_key="learner/steps", tensorboard=False)
    actor = MetricsWriter(run_dir, "actor_0", step_key="actor/env_steps", tensorboard=False)
    for i in range(start, start + steps):
        learner.write({"time": 1000.0 + i, "learner/steps": 10 * i, "learner/loss": 1.0 / (i + 1)})
        actor.write({"time": 1000.5 + i, "actor/env_steps": 100 * i, "actor/episodes": i})
    learner.close()
    actor.close()


def test_the_tail_yields_whole_rows_once_with_their_step(tmp_path):
    _, run_dir = _run_dir(tmp_path)
    _rows(run_dir, 3)
    tail = MetricsTail(run_dir)
    rows = list(tail.rows())
    learner = [r for r in rows if r[0] == "learner"]
    assert [(r[2], r[3]["learner/loss"]) for r in learner] == [(0, 1.0), (10, 0.5), (20, 1 / 3)]
    with open(os.path.join(run_dir, "metrics", "learner.csv"), "a") as f:
        f.write("1003.000,30,learner/loss,0.25\n1003.000,30,learner/st")  # a row being written
    assert [(r[0], r[2], r[3]) for r in tail.rows()] == [("learner", 30, {"learner/loss": 0.25})]
    with open(os.path.join(run_dir, "metrics", "learner.csv"), "a") as f:
        f.write("eps,30\n")
    again = MetricsTail(run_dir, tail.offsets)  # a new life from the saved offsets
    assert [(r[2], r[3]) for r in again.rows()] == [(30, {"learner/steps": 30.0})]
    assert metric_key("learner", "learner/loss") == "learner/loss"
    assert metric_key("actor_0", "actor/episodes") == "actor_0/actor/episodes"


@pytest.mark.parametrize(
    "sink", [pytest.param("wandb", id="sink_package_missing"), pytest.param("mlflow", id="mlflow")]
)
def test_a_sink_without_its_package_is_refused_naming_the_field_and_the_extra(monkeypatch, sink):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == sink else real(name, *a)
    )
    config = ApexConfig()
    setattr(config.logging, sink, True)
    with pytest.raises(ConfigError) as err:
        validate(config)
    assert err.value.field == f"logging.{sink}"
    assert f"pip install -e '.[{sink}]'" in str(err.value)


@pytest.mark.timeout(120)
def test_wandb_offline_and_mlflow_get_the_rows_params_and_summary_across_two_lives(tmp_path):
    config, run_dir = _run_dir(tmp_path, wandb=True, mlflow=True, group="grid-1")
    uri = "file:" + os.path.join(run_dir, "mlruns")
    _rows(run_dir, 3)
    sinks = MetricSinks.start(config, run_dir)
    sinks.close({"learner_steps": 20, "stop_reason": "restart", "nested": {"a": 1}}, 1)
    _rows(run_dir, 2, start=3)  # the next life writes on
    sinks = MetricSinks.start(config, run_dir)
    sinks.close({"learner_steps": 40, "stop_reason": "max_learner_steps"}, 0)

    [run] = mlflow_runs(uri)  # one MLflow run, both lives in it
    assert run.info.status == "FINISHED" and run.data.tags["apex.group"] == "grid-1"
    assert json.loads(run.data.params["learner.batch_size"]) == config.learner.batch_size
    assert run.data.metrics["summary/learner_steps"] == 40.0
    assert run.data.tags["apex.summary.stop_reason"] == "max_learner_steps"
    loss = mlflow_history(uri, run.info.run_id, "learner/loss")
    assert loss == [(10 * i, 1.0 / (i + 1)) for i in range(5)]  # every row once
    episodes = mlflow_history(uri, run.info.run_id, "actor_0/actor/episodes")
    assert episodes == [(100 * i, float(i)) for i in range(5)]

    lives = wandb_offline(run_dir)
    assert len(lives) == 2 and lives[0]["id"] == lives[1]["id"]
    assert {life["group"] for life in lives} == {"grid-1"}
    assert lives[0]["config"]["learner"]["batch_size"] == config.learner.batch_size
    sent = [
        (h["learner/step"], h["learner/loss"])
        for life in lives
        for h in life["history"]
        if "learner/loss" in h
    ]
    assert sent == [(10 * i, 1.0 / (i + 1)) for i in range(5)]
    assert lives[0]["summary"]["summary/nested.a"] == 1
    assert lives[1]["summary"]["summary/learner_steps"] == 40
