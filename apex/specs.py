"""What an env looks like to apex, without gymnasium: the EnvSpec the networks and
the replay signatures are made from, and the stored observation type.

apex.envs makes specs from real envs (`spec_of`, `env_spec`); everything below
the envs (replay, agents) names them from here.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the networks and the replay signature need to know about an env."""

    observation_shape: tuple[int, ...]
    observation_dtype: str
    num_actions: int
    observation_scale: float = 1.0
    """What the conv torso multiplies observations by: 1/255 for uint8 pixels,
    1 for 0/1 images (booleans, one-hot) and float observations."""


def to_observation(obs: np.ndarray) -> np.ndarray:
    """The stored observation type: uint8 images stay uint8, the rest is float32."""
    obs = np.asarray(obs)
    return obs if obs.dtype == np.uint8 else obs.astype(np.float32)
