"""Test-only Gymnasium envs that crash the evaluator, and only it, with a real
ValueError. Importing this module registers them (a program's node processes
import it through --config.env.imports="('tests.crashing_envs',)", with the
repository root on PYTHONPATH).

The evaluator seeds its episodes from config.seed + 10_000_000 (+ 1000 per
evaluation: apex.evaluation.Evaluator.evaluate_once); actors seed below that.

  ApexTest/EvalCrash-v0       reset raises for every seed >= 10_000_000: the
                              first evaluation fails
  ApexTest/EvalCrashLater-v0  reset raises for seeds >= 10_002_000: the first
                              two evaluations (seed 0) succeed, the third fails

Both: observations Box(4,) float32, Discrete(2) actions, reward 1 per step,
episodes of 50 steps (the registered time limit).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

EVAL_SEED_BASE = 10_000_000
EPISODE_STEPS = 50


class EvalCrashEnv(gym.Env):
    """Raises ValueError at a reset with a seed >= `crash_from_seed`."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, crash_from_seed: int = EVAL_SEED_BASE):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._crash_from = int(crash_from_seed)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None and seed >= self._crash_from:
            raise ValueError(f"evaluation seed {seed} refused by ApexTest/EvalCrash (a test env)")
        super().reset(seed=seed)
        return self.np_random.uniform(-1.0, 1.0, 4).astype(np.float32), {}

    def step(self, action: int):
        obs = self.np_random.uniform(-1.0, 1.0, 4).astype(np.float32)
        return obs, 1.0, False, False, {}


def _register() -> None:
    if "ApexTest/EvalCrash-v0" not in gym.registry:
        gym.register(
            "ApexTest/EvalCrash-v0",
            entry_point=EvalCrashEnv,
            max_episode_steps=EPISODE_STEPS,
        )
    if "ApexTest/EvalCrashLater-v0" not in gym.registry:
        gym.register(
            "ApexTest/EvalCrashLater-v0",
            entry_point=EvalCrashEnv,
            max_episode_steps=EPISODE_STEPS,
            kwargs={"crash_from_seed": EVAL_SEED_BASE + 2000},
        )


_register()
