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


class InjectedFault(RuntimeError):
    """Raised by envs with EnvConfig.fault_every set (fault-tolerance tests)."""


class FaultInjection(gym.Wrapper):
    """Raises InjectedFault on every `every`-th step of this env."""

    def __init__(self, env: gym.Env, every: int):
        super().__init__(env)
        self._every = int(every)
        self._steps = 0

    def step(self, action):
        self._steps += 1
        if self._steps % self._every == 0:
            raise InjectedFault(
                f"injected fault at step {self._steps} (env.fault_every={self._every})"
            )
        return self.env.step(action)


def _register_ale() -> None:
    try:
        import ale_py
    except ImportError:
        raise ConfigError(
            "env.id",
            "ALE/...",
            "an installed ale-py for Atari ids: pip install -e '.[atari]' (scripts/setup.sh does)",
        ) from None
    gym.register_envs(ale_py)


def _make_atari(config: EnvConfig, kwargs: dict) -> gym.Env:
    _register_ale()
    # Frame skipping and max-pooling happen in AtariPreprocessing, so the
    # emulator itself must not skip.
    env = gym.make(
        config.id,
        frameskip=1,
        repeat_action_probability=config.sticky_action_probability,
        **kwargs,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=config.noop_max,
        frame_skip=config.frame_skip,
        screen_size=config.screen_size,
        terminal_on_life_loss=config.terminal_on_life_loss,
        grayscale_obs=True,
        scale_obs=False,  # uint8 in replay: 4x smaller than float32
    )
    if config.frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, config.frame_stack)
    return env


def make_env(config: EnvConfig, seed: int | None = None, faults: bool = False) -> gym.Env:
    """Makes one env and checks it fits a DQN agent; raises ConfigError otherwise.

    `faults`: apply config.fault_every (actors' envs only; the evaluator's never fail).
    """
    kwargs = {}
    if config.max_episode_steps is not None:
        kwargs["max_episode_steps"] = config.max_episode_steps
    try:
        if config.preprocessing == "atari":
            if not config.id.startswith("ALE/"):
                raise ConfigError(
                    "env.id",
                    config.id,
                    "an ALE id such as 'ALE/Pong-v5' with preprocessing='atari'",
                )
            env = _make_atari(config, kwargs)
        else:
            if config.id.startswith("ALE/"):
                _register_ale()
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
    if config.observation_indices is not None:
        dim = int(np.prod(env.observation_space.shape))
        bad = [i for i in config.observation_indices if i >= dim]
        if len(env.observation_space.shape) != 1 or bad:
            env.close()
            raise ConfigError(
                "env.observation_indices",
                config.observation_indices,
                f"indices into the flat observation of {config.id} (shape "
                f"{env.observation_space.shape}): each in [0, {dim - 1}]",
            )
        keep = np.asarray(config.observation_indices, np.int64)
        space = env.observation_space
        env = gym.wrappers.TransformObservation(
            env,
            lambda obs: obs[keep],
            gym.spaces.Box(space.low[keep], space.high[keep], dtype=space.dtype),
        )
    if config.clip_rewards:
        env = gym.wrappers.ClipReward(env, -1.0, 1.0)
    if faults and config.fault_every is not None:
        env = FaultInjection(env, config.fault_every)
    if seed is not None:
        env.action_space.seed(seed)
    return env


def spec_of(env: gym.Env) -> EnvSpec:
    """The spec of an env made by make_env."""
    return EnvSpec(
        observation_shape=tuple(env.observation_space.shape),
        observation_dtype="uint8" if env.observation_space.dtype == np.uint8 else "float32",
        num_actions=int(env.action_space.n),
    )


def env_spec(config: EnvConfig) -> EnvSpec:
    """Makes one env to read its spec."""
    env = make_env(config)
    try:
        return spec_of(env)
    finally:
        env.close()


def to_observation(obs: np.ndarray) -> np.ndarray:
    """The stored observation type: uint8 images stay uint8, the rest is float32."""
    obs = np.asarray(obs)
    return obs if obs.dtype == np.uint8 else obs.astype(np.float32)
