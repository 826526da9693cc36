"""The feed-forward Q-network: a TF module for the learner and a numpy mirror
for actors with MLP torsos.

Actors act with numpy (measured 20x faster than a batch-1 tf.function on this
machine: apex.agents.layers.forward_np); both sides share one weight layout, a
flat list of arrays: the torso's (apex.agents.layers), then the head's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from apex.agents import layers
from apex.agents.policy import ActingNetwork


class QNetwork(tf.Module):
    """Q-network: obs [B, ...] -> Q [B, num_actions].

    Args:
      obs_shape: one observation's shape (an int means a flat vector).
      num_actions: size of the Discrete action space.
      hidden_sizes: dense ReLU layers after the input (mlp) or the convs (conv).
      dueling: value + advantage head.
      torso: 'mlp' or 'conv' (convolutions over images, then the dense layers).
      conv_layers: the conv torso's layers: a preset name of
        apex.config.CONV_PRESETS or (filters, kernel, stride) per layer.
      conv_channels: 'auto', 'first' (C, H, W) or 'last' (H, W, C).
      observation_scale: what a conv torso multiplies observations by
        (EnvSpec.observation_scale: 1/255 for uint8 pixels).

    Raises ConfigError when the conv layers do not fit the observation.
    """

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        num_actions: int,
        hidden_sizes: Sequence[int],
        dueling: bool = False,
        seed: int = 0,
        torso: str = "mlp",
        name: str = "q_network",
        conv_layers: str | Sequence[tuple[int, int, int]] = "nature",
        conv_channels: str = "auto",
        observation_scale: float = 1.0,
    ):
        super().__init__(name=name)
        obs_shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.dueling = dueling
        self.torso = torso
        self.num_actions = num_actions
        self.conv_layers: list[tuple[int, int, int]] = []
        self.channels = "none"
        if torso == "conv":
            self.conv_layers, self.channels = layers.check_conv_fits(
                conv_layers, conv_channels, obs_shape
            )
        self.observation_scale = float(observation_scale)
        rng = np.random.default_rng(seed)
        arrays, size = layers.torso_weights(
            torso, obs_shape, hidden_sizes, rng, self.conv_layers, self.channels
        )
        self._num_torso = len(arrays)
        arrays += layers.head_weights(size, num_actions, dueling, rng)
        self.weights: list[tf.Variable] = [tf.Variable(a) for a in arrays]

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        k = self._num_torso
        x = layers.torso_tf(
            self.torso,
            self.weights[:k],
            obs,
            self.conv_layers,
            self.channels,
            self.observation_scale,
        )
        return layers.head_tf(self.weights[k:], x, self.dueling)

    def get_weights(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        for v, a in zip(self.weights, weights):
            v.assign(a)


def numpy_q_values(
    weights: Sequence[np.ndarray], obs: np.ndarray, dueling: bool = False
) -> np.ndarray:
    """The same forward pass as QNetwork.__call__ with an MLP torso, in numpy
    (float32): layers.forward_np."""
    k = len(weights) - (4 if dueling else 2)
    return layers.forward_np(weights, obs, None, k, dueling)[0]


def make_network(config: Any, spec: Any, seed: int = 0) -> QNetwork:
    """The QNetwork of `config` for envs of `spec` (apex.specs.EnvSpec)."""
    lc = config.learner
    return QNetwork(
        spec.observation_shape,
        spec.num_actions,
        lc.hidden_sizes,
        dueling=lc.dueling,
        seed=seed,
        torso=lc.torso,
        conv_layers=lc.conv_layers,
        conv_channels=lc.conv_channels,
        observation_scale=spec.observation_scale,
    )


# What the acting policy runs (apex.agents.policy.ActingPolicy): no state.
ACTING = ActingNetwork(
    recurrent=False,
    make_network=make_network,
    numpy_step=layers.numpy_step,
    initial_state=lambda config, batch_size: None,
)
