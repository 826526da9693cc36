"""Environments: the only module of apex that imports gymnasium."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

from apex.config import EnvConfig
from apex.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the networks and the replay signature need to know about an env."""

    observation_shape: tuple[int, ...]
    observation_dtype: str
    num_actions: int


def make_env(config: EnvConfig, seed: int | None = None) -> gym.Env:
    """Makes one env and checks it fits a DQN agent; raises ConfigError otherwise."""
    kwargs = {}
    if config.max_episode_steps is not None:
        kwargs["max_episode_steps"] = config.max_episode_steps
    try:
        env = gym.make(config.id, **kwargs)
    except gym.error.Error as err:
        known = sorted(k for k in gym.registry if "/" not in k)[:12]
        raise ConfigError(
            "env.id", config.id, f"a registered Gymnasium id (e.g. {', '.join(known)}, ...): {err}"
        ) from None
    if not isinstance(env.action_space, gym.spaces.Discrete):
        env.close()
        raise ConfigError(
            "env.id",
            config.id,
            f"an env with a Discrete action space for a DQN agent, not {env.action_space}",
        )
    if not isinstance(env.observation_space, gym.spaces.Box):
        env.close()
        raise ConfigError(
            "env.id", config.id, f"an env with a Box observation space, not {env.observation_space}"
        )
    if seed is not None:
        env.action_space.seed(seed)
    return env


def env_spec(config: EnvConfig) -> EnvSpec:
    """Makes one env to read its spec."""
    env = make_env(config)
    try:
        return EnvSpec(
            observation_shape=tuple(env.observation_space.shape),
            observation_dtype="float32",
            num_actions=int(env.action_space.n),
        )
    finally:
        env.close()


def to_observation(obs: np.ndarray) -> np.ndarray:
    """The stored observation type (float32)."""
    return np.asarray(obs, dtype=np.float32)
