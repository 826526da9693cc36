"""Config validation and overrides: bad input names the field, the value and what is valid."""

import os
import subprocess
import sys

import pytest

from apex.config import ApexConfig, apply_override, effective_error_buffer, load_config_file
from apex.errors import ConfigError
from apex.validation import validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "name",
    sorted(
        f
        for f in os.listdir(os.path.join(ROOT, "configs"))
        if f.endswith(".py") and not f.startswith("_")
    ),
)
def test_default_and_shipped_configs_are_valid(name):
    validate(ApexConfig())
    validate(load_config_file(os.path.join(ROOT, "configs", name)))


@pytest.mark.parametrize(
    "path,value,fragment",
    [
        ("replay.capacity", "0", "replay.capacity=0 is invalid: expected an integer >= 1"),
        ("replay.min_size", "-5", "replay.min_size=-5"),
        ("replay.priority_exponent", "1.5", "a number in [0, 1]"),
        ("replay.insert_priority", "loudest", "one of ['actor_td', 'max_seen', 'constant']"),
        ("replay.n_step", "0", "replay.n_step=0"),
        ("replay.discount", "1.2", "replay.discount=1.2"),
        ("actor.num_actors", "0", "actor.num_actors=0"),
        ("actor.envs_per_actor", "-1", "actor.envs_per_actor=-1"),
        ("learner.batch_size", "0", "learner.batch_size=0"),
        ("learner.learning_rate", "0", "learner.learning_rate=0.0"),
        ("learner.hidden_sizes", "()", "learner.hidden_sizes=()"),
        ("evaluation.episodes", "0", "evaluation.episodes=0"),
        ("stop.max_wall_seconds", "-1", "stop.max_wall_seconds=-1.0"),
        ("agent", "r3d3", "agent='r3d3' is invalid: expected one of ['apex_dqn', 'r2d2']"),
        ("env.preprocessing", "nes", "one of ['none', 'atari']"),
        ("learner.torso", "resnet", "one of ['mlp', 'conv']"),
        ("env.observation_indices", "(-1,)", "a non-empty tuple of integers >= 0"),
        (
            "r2d2.sequence_length",
            "1",
            "r2d2.sequence_length=1 is invalid: expected an integer >= 2",
        ),
        ("r2d2.priority_eta", "2", "a number in [0, 1]"),
    ],
)
def test_invalid_values_name_field_value_and_what_is_valid(path, value, fragment):
    c = ApexConfig()
    apply_override(c, path, value)
    with pytest.raises(ConfigError) as err:
        validate(c)
    assert fragment in str(err.value)
    assert err.value.field == path


def test_min_size_above_capacity_is_refused_with_the_capacity_named():
    c = ApexConfig()
    c.replay.capacity, c.replay.min_size = 100, 1000
    with pytest.raises(
        ConfigError, match=r"replay.min_size=1000 .* at most replay.capacity \(100\)"
    ):
        validate(c)


@pytest.mark.parametrize(
    "path,value,fragment",
    [
        ("r2d2.sequence_period", "100", "at most r2d2.sequence_length (80)"),
        ("r2d2.burn_in", "79", "less than r2d2.sequence_length - 1 (79)"),
    ],
)
def test_r2d2_sequence_settings_are_checked_together(path, value, fragment):
    c = ApexConfig()
    c.agent = "r2d2"
    apply_override(c, path, value)
    with pytest.raises(ConfigError) as err:
        validate(c)
    assert fragment in str(err.value) and err.value.field == path


def test_error_buffer_smaller_than_a_batch_is_refused():
    c = ApexConfig()
    c.replay.error_buffer = 10.0
    with pytest.raises(ConfigError, match=r"replay.error_buffer=10.0 .* >= 64"):
        validate(c)


def test_auto_error_buffer_covers_a_batch():
    c = ApexConfig()
    assert effective_error_buffer(c.replay, c.learner.batch_size) >= c.learner.batch_size


def test_no_stop_criterion_is_refused():
    c = ApexConfig()
    c.stop.max_actor_steps = c.stop.max_learner_steps = c.stop.max_wall_seconds = None
    with pytest.raises(ConfigError, match="at least one of"):
        validate(c)


def test_overrides_parse_by_field_type():
    c = ApexConfig()
    apply_override(c, "actor.num_actors", "8")
    apply_override(c, "learner.hidden_sizes", "(64, 32)")
    apply_override(c, "stop.when_solved", "true")
    apply_override(c, "stop.max_learner_steps", "None")
    apply_override(c, "replay.error_buffer", "500")
    assert (c.actor.num_actors, c.learner.hidden_sizes, c.stop.when_solved) == (8, (64, 32), True)
    assert c.stop.max_learner_steps is None and c.replay.error_buffer == 500.0


@pytest.mark.parametrize(
    "path,value,fragment",
    [
        (
            "actor.num_actorz",
            "3",
            "'actor' has: envs_per_actor, epsilon_alpha, epsilon_base, inference, max_restarts",
        ),
        (
            "actr.num_actors",
            "3",
            "the config has: actor, agent, checkpoint, cluster, env, evaluation",
        ),
        ("actor", "3", "is a section with"),
        ("actor.num_actors", "many", "actor.num_actors='many' is invalid: expected an integer"),
        ("stop.when_solved", "maybe", "a boolean"),
        ("learner.hidden_sizes", "[[", "a tuple literal"),
    ],
)
def test_malformed_overrides_are_refused_by_name(path, value, fragment):
    with pytest.raises(ConfigError) as err:
        apply_override(ApexConfig(), path, value)
    assert fragment in str(err.value)


def test_missing_config_file_is_refused():
    with pytest.raises(ConfigError, match="--config='nope.py'"):
        load_config_file("nope.py")


@pytest.mark.cli
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--config.replay.capacity=0"], "replay.capacity=0 is invalid"),
        (
            ["--config.env.id=NoSuchEnv-v0"],
            "env.id='NoSuchEnv-v0' is invalid: expected a registered Gymnasium id",
        ),
        (["--config.env.id=Pendulum-v1"], "Discrete action space"),
        (
            ["--config.run_dir=/proc/apex-cannot-write-here"],
            "run_dir='/proc/apex-cannot-write-here' is invalid",
        ),
    ],
)
def test_entry_point_refuses_bad_input_before_launch(args, fragment, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "launch.train", "--config=configs/apex_cartpole.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "[apex] launching" not in proc.stdout  # nothing was launched


@pytest.mark.cli
@pytest.mark.timeout(120)
def test_a_taken_replay_port_is_refused_before_launch(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "launch.train",
                "--config=configs/apex_cartpole.py",
                f"--config.replay.port={port}",
                f"--config.run_dir={tmp_path / 'run'}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=110,
        )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"replay.port={port} is invalid: expected a free port; it is in use" in proc.stderr
    assert "[apex] launching" not in proc.stdout


def test_env_step_replay_ratio():
    from apex.planning import env_step_replay_ratio

    c = ApexConfig()
    assert env_step_replay_ratio(c) == 4.0
    r2d2 = load_config_file(os.path.join(ROOT, "configs", "r2d2_cartpole_masked.py"))
    # samples/insert 2 sequences x (20 - 10 trained steps) / 10 new steps per sequence
    assert env_step_replay_ratio(r2d2) == pytest.approx(2.0)
