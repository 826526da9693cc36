"""Environments: masked observations, Atari preprocessing, refusals."""

import numpy as np
import pytest

from apex.config import EnvConfig
from apex.envs import env_spec, make_env
from apex.errors import ConfigError


def test_masked_cartpole_keeps_position_and_angle_only():
    cfg = EnvConfig(id="CartPole-v1", observation_indices=(0, 2))
    full = make_env(EnvConfig(id="CartPole-v1"))
    masked = make_env(cfg)
    o_full, _ = full.reset(seed=3)
    o_masked, _ = masked.reset(seed=3)
    np.testing.assert_array_equal(o_masked, o_full[[0, 2]])
    for _ in range(5):
        o_full, *_ = full.step(1)
        o_masked, *_ = masked.step(1)
    np.testing.assert_array_equal(o_masked, o_full[[0, 2]])
    assert env_spec(cfg).observation_shape == (2,)


def test_observation_index_out_of_range_is_refused():
    with pytest.raises(ConfigError, match=r"env.observation_indices.*each in \[0, 3\]"):
        make_env(EnvConfig(id="CartPole-v1", observation_indices=(0, 7)))


@pytest.mark.parametrize("stack,shape", [(1, (84, 84)), (4, (4, 84, 84))])
def test_atari_preprocessing_shapes_and_dtype(stack, shape):
    cfg = EnvConfig(id="ALE/Pong-v5", preprocessing="atari", frame_stack=stack, clip_rewards=True)
    spec = env_spec(cfg)
    assert spec.observation_shape == shape and spec.observation_dtype == "uint8"
    assert spec.num_actions == 6
    env = make_env(cfg)
    obs, _ = env.reset(seed=0)
    assert obs.shape == shape and obs.dtype == np.uint8
    rewards = []
    for _ in range(300):
        obs, r, term, trunc, _ = env.step(env.action_space.sample())
        rewards.append(r)
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    assert obs.max() > obs.min()  # a real screen, not a blank frame
    env.close()


def test_atari_preprocessing_on_a_non_ale_id_is_refused():
    with pytest.raises(ConfigError, match="an ALE id such as 'ALE/Pong-v5'"):
        make_env(EnvConfig(id="CartPole-v1", preprocessing="atari"))


def test_continuous_actions_are_refused():
    with pytest.raises(ConfigError, match="Discrete action space"):
        make_env(EnvConfig(id="Pendulum-v1"))
