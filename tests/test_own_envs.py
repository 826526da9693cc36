"""Bring your own env: env.imports and env.kwargs, observation encodings
(Discrete, Tuple, Dict, bool images) through actor -> replay -> learner for
both agents, targets from the env spec, fields that do not apply refused,
and real local_mp runs of a third-party-style env and of a small image."""

import json
import os

import gymnasium as gym
import numpy as np
import pytest
import reverb

from apex.config import ApexConfig
from apex.envs import make_env, prepare_env
from apex.errors import ConfigError
from tests.procs import ROOT, run_train

THIRD_PARTY = ("tests.thirdparty_envs",)


def config_for(env_id: str, agent: str = "apex_dqn", imports=(), **kwargs) -> ApexConfig:
    c = ApexConfig()
    c.agent = agent
    c.env.id = env_id
    c.env.imports = tuple(imports)
    c.env.kwargs = dict(kwargs)
    return c


# ------------------------------------------------------------ encodings
def test_discrete_observations_are_one_hot_uint8():
    c = config_for("CliffWalking-v1")
    spec = prepare_env(c).spec
    assert spec.observation_shape == (48,) and spec.observation_dtype == "uint8"
    env = make_env(c.env)
    obs, _ = env.reset(seed=0)
    raw = env.unwrapped.s  # CliffWalking's own state index (36 at the start)
    assert obs.dtype == np.uint8 and obs.sum() == 1 and obs[raw] == 1
    obs, *_ = env.step(0)  # up
    assert obs.sum() == 1 and obs[env.unwrapped.s] == 1


def test_tuple_observations_are_flattened_one_hots():
    c = config_for("Blackjack-v1")  # Tuple(Discrete(32), Discrete(11), Discrete(2))
    spec = prepare_env(c).spec
    assert spec.observation_shape == (45,) and spec.observation_dtype == "uint8"
    env = gym.make("Blackjack-v1")
    raw, _ = env.reset(seed=3)
    obs, _ = make_env(c.env).reset(seed=3)
    expected = np.zeros(45, np.uint8)
    expected[raw[0]] = expected[32 + raw[1]] = expected[43 + int(raw[2])] = 1
    np.testing.assert_array_equal(obs, expected)


def test_dict_observations_mix_leaves_into_float32():
    c = config_for("ThirdParty/DictCorridor-v0", imports=THIRD_PARTY, length=6)
    spec = prepare_env(c).spec
    # position one-hot (6) + flags (2) + progress (2), in the space's key order
    assert spec.observation_shape == (10,) and spec.observation_dtype == "float32"
    env = make_env(c.env)
    obs, _ = env.reset(seed=0)
    space = env.unwrapped.observation_space
    assert list(space.spaces) == ["flags", "position", "progress"]  # Gymnasium sorts a dict's keys
    parts = {"position": [1, 0, 0, 0, 0, 0], "flags": [1, 0], "progress": [0.0, 0.5]}
    expected = np.concatenate([np.asarray(parts[k], np.float32) for k in space.spaces])
    np.testing.assert_array_equal(obs, expected)


def test_bool_images_are_uint8_zero_one_with_scale_one():
    c = config_for("ThirdParty/TinyImage-v0", imports=THIRD_PARTY)
    prepared = prepare_env(c)
    spec = prepared.spec
    assert spec.observation_shape == (10, 10, 4) and spec.observation_dtype == "uint8"
    assert spec.observation_scale == 1.0
    obs, _ = make_env(c.env).reset(seed=0)
    assert obs.dtype == np.uint8 and set(np.unique(obs)) == {0, 1}
    # The env has no time limit: the user is told, and where to set one.
    assert prepared.episode_limit is None
    (warning,) = prepared.warnings
    assert "no time limit" in warning and "env.max_episode_steps" in warning


def test_pixel_images_keep_their_scale():
    c = config_for("ALE/Pong-v5")
    c.env.preprocessing = "atari"
    c.env.frame_stack = 4
    c.env.max_episode_steps = 100
    spec = prepare_env(c).spec
    assert spec.observation_shape == (4, 84, 84) and spec.observation_dtype == "uint8"
    assert spec.observation_scale == pytest.approx(1 / 255)


class _TextObservations(gym.Env):
    observation_space = gym.spaces.Text(8)
    action_space = gym.spaces.Discrete(2)


class _BoxActions(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,))
    action_space = gym.spaces.Box(-1, 1, (1,))


@pytest.mark.parametrize(
    "env_id, entry, words",
    [
        ("ApexTest/TextObs-v0", _TextObservations, ["Text", "Box, Discrete"]),
        ("ApexTest/BoxActions-v0", _BoxActions, ["Discrete action space"]),
    ],
)
def test_spaces_apex_cannot_take_are_refused_by_name(env_id, entry, words):
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry)
    with pytest.raises(ConfigError) as err:
        prepare_env(config_for(env_id))
    assert err.value.field == "env.id"
    for word in words:
        assert word in str(err.value)


# ------------------------------------------------ actor -> replay -> learner
def _through_replay(c: ApexConfig):
    """An actor fills a real Reverb table of `c`; the learner takes 2 SGD steps on
    it. Returns (spec, a sampled item's observations, the learner's losses)."""
    from apex.agents import get_builder, make_network, make_tables, table_name
    from apex.exploration import slot_epsilons
    from apex.learner import Learner
    from apex.replay.tables import unpack_item
    from tests.fakes import FakeVariableSource

    c.actor.envs_per_actor = 2
    c.replay.capacity, c.replay.min_size, c.replay.error_buffer = 1000, 8, 1e7
    c.learner.batch_size, c.learner.hidden_sizes = 8, (16,)
    c.r2d2.sequence_length, c.r2d2.sequence_period, c.r2d2.burn_in = 6, 3, 2
    c.r2d2.lstm_size = 8
    spec = prepare_env(c).spec
    server = reverb.Server(make_tables(c, spec))
    try:
        address = f"localhost:{server.port}"
        client = reverb.Client(address)
        builder = get_builder(c)
        source = FakeVariableSource(make_network(c, spec, seed=0).get_weights(), version=1)
        eps = slot_epsilons(0, 2, 1, c.actor.epsilon_base, c.actor.epsilon_alpha)
        with builder.make_writer(client, 0, eps, 0, lambda: False) as writer:
            actor = builder.make_actor(c, 0, source, writer)
            while actor.items_written < 12:
                actor.step()
            actor.close()
        (s,) = client.sample(
            table_name(c), num_samples=1, emit_timesteps=False, unpack_as_table_signature=True
        )
        obs = np.asarray(unpack_item(s.data)["obs"])
        learner = Learner(c, spec, address)
        losses = [learner.step()["loss"] for _ in range(2)]
        learner.close()
        return spec, obs, losses
    finally:
        server.stop()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("agent", ["apex_dqn", "r2d2"])
@pytest.mark.parametrize(
    "env_id, imports, one_hots",
    [
        ("CliffWalking-v1", (), [(0, 48)]),  # Discrete
        ("Blackjack-v1", (), [(0, 32), (32, 11), (43, 2)]),  # Tuple of Discretes
        # Dict (keys in the space's order: flags, position, progress): MultiBinary(2),
        # Discrete(6), Box(2)
        ("ThirdParty/DictCorridor-v0", THIRD_PARTY, [(2, 6)]),
    ],
)
def test_encoded_observations_go_through_replay_to_the_learner(agent, env_id, imports, one_hots):
    c = config_for(env_id, agent, imports)
    if env_id == "CliffWalking-v1":
        c.env.max_episode_steps = 50  # no time limit of its own
    spec, obs, losses = _through_replay(c)
    # Stored in the compact dtype, with the encoded shape; an R2D2 item holds a
    # sequence of them.
    assert obs.dtype == np.dtype(spec.observation_dtype)
    assert obs.shape[-1] == spec.observation_shape[0]
    steps = obs.reshape(-1, spec.observation_shape[0])
    steps = steps[steps.any(axis=1)]  # an R2D2 sequence past its episode's end is zeros
    assert len(steps) >= 1
    for start, n in one_hots:  # every Discrete leaf is a one-hot in every stored step
        np.testing.assert_array_equal(steps[:, start : start + n].sum(axis=1), 1)
    assert all(np.isfinite(loss) for loss in losses)


# ------------------------------------------------------------ targets
@pytest.mark.parametrize(
    "env_id, target",
    [
        ("CartPole-v1", 475.0),
        ("Acrobot-v1", -100.0),
        pytest.param("LunarLander-v3", 200.0, marks=pytest.mark.slow),  # Box2D's import
    ],
)
def test_the_target_follows_the_env_spec(env_id, target):
    c = config_for(env_id)
    assert c.evaluation.target_return == "auto"
    prepare_env(c)
    assert c.evaluation.target_return == target


def test_an_explicit_target_is_kept_and_clipped_rewards_have_none():
    c = config_for("Acrobot-v1")
    c.evaluation.target_return = -80.0
    prepare_env(c)
    assert c.evaluation.target_return == -80.0
    c = config_for("CartPole-v1")
    c.env.clip_rewards = True
    prepare_env(c)
    assert c.evaluation.target_return is None


def test_when_solved_without_a_target_is_refused():
    c = config_for("CliffWalking-v1")  # no reward_threshold in its spec
    c.stop.when_solved = True
    with pytest.raises(ConfigError) as err:
        prepare_env(c)
    assert err.value.field == "stop.when_solved"
    assert "reward_threshold" in str(err.value) and "evaluation.target_return" in str(err.value)
    c = config_for("CliffWalking-v1")
    c.stop.when_solved = True
    c.evaluation.target_return = -13.0  # a target of the user's own
    prepare_env(c)
    assert c.evaluation.target_return == -13.0


# ----------------------------------------------- imports, kwargs, bad input
def _load(*overrides: str):
    from launch.train import load_and_prepare

    return load_and_prepare(
        os.path.join(ROOT, "configs", "apex_cartpole.py"),
        [tuple(o.split("=", 1)) for o in overrides],
    )


def test_an_import_can_name_a_register_function():
    import tests.thirdparty_envs as module

    gym.registry.pop("ThirdParty/Corridor-v0", None)  # as if the import had not registered it
    with pytest.raises(ConfigError):
        prepare_env(config_for("ThirdParty/Corridor-v0", imports=["tests.thirdparty_envs"]))
    calls = []
    module.count_and_register = lambda: (calls.append(1), module.register())
    try:
        c = config_for(
            "ThirdParty/Corridor-v0", imports=["tests.thirdparty_envs:count_and_register"]
        )
        prepare_env(c)
        prepare_env(c)
        assert calls == [1]  # once per process
    finally:
        del module.count_and_register


def test_imports_and_kwargs_come_from_the_command_line():
    config, prepared = _load(
        "env.id=ThirdParty/Corridor-v0",
        "env.imports=tests.thirdparty_envs",
        "env.kwargs={'length': 4, 'num_actions': 3}",
    )
    assert config.env.imports == ("tests.thirdparty_envs",)
    assert config.env.kwargs == {"length": 4, "num_actions": 3}
    assert prepared.spec.num_actions == 3  # the kwargs reached the env
    assert config.evaluation.target_return == 0.9
    # The env's module belongs to no installed package; gymnasium made it.
    assert prepared.packages["tests"] is None and "gymnasium" in prepared.packages
    config, prepared = _load("env.id=LunarLander-v3", 'env.kwargs={"enable_wind": true}')
    assert config.env.kwargs == {"enable_wind": True}  # JSON is taken too
    assert {"Box2D", "gymnasium", "pygame"} <= set(prepared.packages)


@pytest.mark.parametrize(
    "overrides, field, words",
    [
        (["env.imports=no_such_envs_module"], "env.imports", ["no_such_envs_module", "PYTHONPATH"]),
        (["env.imports=('bad name',)"], "env.imports", ["module names"]),
        (["env.kwargs={'pole_length': 2}"], "env.kwargs", ["pole_length"]),
        (["env.kwargs=[1, 2]"], "env.kwargs", ["dict literal"]),
        (["env.kwargs={'max_episode_steps': 9}"], "env.kwargs", ["env.max_episode_steps"]),
        (["env.id=MinAtar/Breakout-v1"], "env.id", ["env.imports", "'module:function'"]),
        (["env.imports=tests.thirdparty_envs:nope"], "env.imports", ["no 'nope'"]),
        (["env.frame_stack=4"], "env.frame_stack", ["preprocessing='atari'", "env.kwargs"]),
        (["env.sticky_action_probability=0.25"], "env.sticky_action_probability", ["atari"]),
        (["env.noop_max=0"], "env.noop_max", ["atari"]),
        (["evaluation.target_return=high"], "evaluation.target_return", ["'auto'"]),
        (
            ["env.id=ThirdParty/TinyImage-v0", "env.imports=tests.thirdparty_envs"]
            + ["learner.torso=conv"],
            "learner.conv_layers",
            ["(10, 10, 4)", "layer 2", "small"],
        ),
    ],
)
def test_bad_env_settings_are_refused_before_launch(overrides, field, words):
    with pytest.raises(ConfigError) as err:
        _load(*overrides)
    assert err.value.field == field
    for word in words:
        assert word in str(err.value), str(err.value)


# ------------------------------------------------------- real programs
def _summary_and_versions(run_dir: str) -> tuple[dict, dict]:
    with open(os.path.join(run_dir, "versions.json")) as f:
        versions = json.load(f)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    return versions, config


@pytest.mark.integration
@pytest.mark.learning
@pytest.mark.timeout(400)
def test_a_third_party_env_with_kwargs_trains_through_env_imports(tmp_path):
    run_dir = str(tmp_path / "run")
    _, s, _ = run_train(
        run_dir,
        "--config.env.id=ThirdParty/Corridor-v0",
        "--config.env.imports=tests.thirdparty_envs",
        "--config.env.kwargs={'length': 5, 'num_actions': 3}",
        "--config.actor.num_actors=1",
        "--config.actor.envs_per_actor=4",
        "--config.replay.min_size=200",
        "--config.stop.when_solved=true",
        "--config.stop.max_actor_steps=200000",
        "--config.stop.max_wall_seconds=None",
        "--config.checkpoint.period_seconds=None",
        timeout=380,
    )
    assert s["stop_reason"] == "solved" and s["target_return"] == 0.9, s
    assert s["eval_return_mean"] >= 0.9
    versions, config = _summary_and_versions(run_dir)
    assert versions["env_packages"]["tests"] is None
    assert versions["env_packages"]["gymnasium"] == versions["packages"]["gymnasium"]
    assert config["env"]["kwargs"] == {"length": 5, "num_actions": 3}
    # num_actions=3 reached every process's env: the trained head has 3 outputs.
    with open(os.path.join(s["checkpoint"]["path"], "manifest.json")) as f:
        assert json.load(f)["network_shapes"][-1] == [3]


@pytest.mark.integration
@pytest.mark.learning
@pytest.mark.timeout(400)
def test_a_small_image_env_trains_with_the_small_conv_preset(tmp_path):
    run_dir = str(tmp_path / "run")
    out, s, _ = run_train(
        run_dir,
        "--config.env.id=ThirdParty/TinyImage-v0",
        "--config.env.imports=tests.thirdparty_envs",
        "--config.env.max_episode_steps=60",
        "--config.learner.torso=conv",
        "--config.learner.conv_layers=small",
        "--config.learner.hidden_sizes=(64,)",
        "--config.actor.num_actors=1",
        "--config.actor.envs_per_actor=4",
        "--config.replay.min_size=200",
        "--config.evaluation.episodes=2",
        "--config.stop.when_solved=true",
        "--config.stop.max_actor_steps=200000",
        "--config.stop.max_wall_seconds=None",
        "--config.checkpoint.period_seconds=None",
        timeout=380,
    )
    assert s["stop_reason"] == "solved" and s["eval_return_mean"] >= 0.9, s
    _, config = _summary_and_versions(run_dir)
    assert config["learner"]["conv_layers"] == "small"


def test_fields_this_program_does_not_use_are_named_before_launch():
    from apex.validation import unused_fields

    c = ApexConfig()
    assert unused_fields(c) == []  # the defaults say nothing
    c.r2d2.lstm_size = 64
    c.learner.conv_layers = "small"
    c.cluster.actor_cpus = 2.0
    notes = unused_fields(c)
    assert [n.split(" ")[0] for n in notes] == [
        "r2d2.lstm_size",
        "learner.conv_layers",
        "cluster.actor_cpus",
    ]
    assert "agent='apex_dqn' is not recurrent" in notes[0]
    c.agent, c.learner.torso = "r2d2", "conv"
    assert unused_fields(c, launcher="ray") == []
