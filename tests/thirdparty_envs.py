"""A stand-in for a third-party env package: its envs exist only once this
module is imported (as MinAtar's do through its register function), so a run
names it in `env.imports`. Every env is small and learnable in seconds:

  ThirdParty/Corridor-v0       walk right along a corridor of `length` cells
                               (kwarg, default 6) to a reward of 1; Box obs
  ThirdParty/DictCorridor-v0   the same, observed as a Dict: Discrete position,
                               MultiBinary flags, a Box of two floats
  ThirdParty/TinyImage-v0      the same corridor drawn in a (10, 10, 4) bool
                               image, channels last, and no time limit (MinAtar's
                               shape and its lack of one)

Each has a reward_threshold of 0.9 in its spec: a greedy walk to the goal returns 1.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

PREFIX = "ThirdParty"


class Corridor(gym.Env):
    """Cells 0..length-1; actions 0 = left, 1 = right (2 = stay, with three actions)."""

    def __init__(self, length: int = 6, num_actions: int = 2):
        if int(length) < 2:
            raise ValueError(f"length={length}: a corridor needs at least 2 cells")
        self.length = int(length)
        self.action_space = gym.spaces.Discrete(int(num_actions))
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self._pos = 0

    def _obs(self):
        return np.array([self._pos / (self.length - 1), 1.0], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = 0
        return self._obs(), {}

    def step(self, action):
        if int(action) == 1:
            self._pos += 1
        elif int(action) == 0:
            self._pos = max(0, self._pos - 1)
        done = self._pos >= self.length - 1
        return self._obs(), float(done), done, False, {}


class DictCorridor(Corridor):
    def __init__(self, length: int = 6):
        super().__init__(length)
        self.observation_space = gym.spaces.Dict(
            {
                "position": gym.spaces.Discrete(self.length),
                "flags": gym.spaces.MultiBinary(2),
                "progress": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
            }
        )

    def _obs(self):
        return {
            "position": self._pos,
            "flags": np.array([self._pos == 0, self._pos >= self.length - 2], np.int8),
            "progress": np.array([self._pos / (self.length - 1), 0.5], np.float32),
        }


class TinyImage(Corridor):
    """The corridor of 10 cells as a MinAtar-like (10, 10, 4) bool image: channel 0
    holds the agent, channel 1 the goal; actions left, right, stay."""

    def __init__(self):
        super().__init__(length=10, num_actions=3)
        self.observation_space = gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)

    def _obs(self):
        image = np.zeros((10, 10, 4), np.bool_)
        image[5, self._pos, 0] = True
        image[5, self.length - 1, 1] = True
        return image


def register() -> None:
    """Registers the envs (what a package's register function does)."""
    for name, entry, limit in (
        ("Corridor-v0", Corridor, 40),
        ("DictCorridor-v0", DictCorridor, 40),
        ("TinyImage-v0", TinyImage, None),
    ):
        env_id = f"{PREFIX}/{name}"
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry, max_episode_steps=limit, reward_threshold=0.9)


register()
