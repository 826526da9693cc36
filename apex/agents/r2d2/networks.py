"""The recurrent Q-network: torso -> LSTM -> (dueling) head (the layers:
apex.agents.layers).

One weight list serves the learner (TF, unrolled over sequences), the actors
and the evaluator (one step at a time; numpy for MLP torsos: layers.forward_np):
  [torso arrays..., W_lstm [D + H, 4H], b_lstm [4H], head arrays...]
Gates are ordered (input, forget, cell, output); the forget bias starts at 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from apex.agents import layers
from apex.agents.policy import ActingNetwork

State = tuple[np.ndarray, np.ndarray]


class RecurrentQNetwork(tf.Module):
    """Q-network with an LSTM core: (obs, state) -> (Q, next state).

    Args:
      obs_shape: one observation's shape.
      num_actions: size of the Discrete action space.
      hidden_sizes: dense ReLU layers of the torso (after the convs for 'conv').
      lstm_size: LSTM units H.
      dueling: value + advantage head.
      torso: 'mlp' or 'conv'.
      conv_layers, conv_channels, observation_scale: the conv torso's, as in
        apex.agents.dqn.networks.QNetwork.

    Raises ConfigError when the conv layers do not fit the observation.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        hidden_sizes: Sequence[int],
        lstm_size: int,
        dueling: bool = False,
        seed: int = 0,
        torso: str = "mlp",
        name: str = "recurrent_q_network",
        conv_layers: str | Sequence[tuple[int, int, int]] = "nature",
        conv_channels: str = "auto",
        observation_scale: float = 1.0,
    ):
        super().__init__(name=name)
        obs_shape = tuple(obs_shape)
        self.torso = torso
        self.dueling = dueling
        self.lstm_size = int(lstm_size)
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
        arrays += layers.lstm_weights(size, self.lstm_size, rng)
        arrays += layers.head_weights(self.lstm_size, num_actions, dueling, rng)
        self.weights: list[tf.Variable] = [tf.Variable(a) for a in arrays]

    def initial_state(self, batch_size: int) -> tuple[tf.Tensor, tf.Tensor]:
        zeros = tf.zeros([batch_size, self.lstm_size])
        return zeros, zeros

    def unroll(
        self,
        obs: tf.Tensor,
        state: tuple[tf.Tensor, tf.Tensor],
        burn_in: int = 0,
        keep_gradient: tf.Tensor | None = None,
    ) -> tf.Tensor:
        """Q-values [B, T, A] of observation sequences [B, T, ...] from `state`.

        After the first `burn_in` steps the state is cut from the gradient
        (tf.stop_gradient) in every row, except rows where `keep_gradient` [B]
        is True: there the burn-in steps are trained like the others.
        """
        k = self._num_torso
        w = self.weights
        batch, steps = tf.shape(obs)[0], obs.shape[1]
        flat = tf.reshape(obs, tf.concat([[batch * steps], tf.shape(obs)[2:]], 0))
        feats = self._torso(w[:k], flat)
        d = feats.shape[-1]
        w_x, w_h, b = w[k][:d], w[k][d:], w[k + 1]
        # The input projection of every step in one matmul; only h @ W_h is sequential.
        xw = tf.reshape(tf.matmul(feats, w_x) + b, [batch, steps, 4 * self.lstm_size])
        h, c = state
        outputs = []
        for t in range(steps):
            if t == burn_in and burn_in > 0:
                keep = keep_gradient if keep_gradient is not None else tf.zeros([batch], tf.bool)
                h = tf.where(keep[:, None], h, tf.stop_gradient(h))
                c = tf.where(keep[:, None], c, tf.stop_gradient(c))
            h, c = layers.lstm_tf(xw[:, t], h, c, w_h)
            outputs.append(h)
        out = tf.stack(outputs, axis=1)  # [B, T, H]
        q = layers.head_tf(w[k + 2 :], tf.reshape(out, [-1, self.lstm_size]), self.dueling)
        return tf.reshape(q, [batch, steps, self.num_actions])

    def step(self, obs: tf.Tensor, state: tuple[tf.Tensor, tf.Tensor]):
        """(Q [B, A], next state) of one step."""
        k = self._num_torso
        w = self.weights
        feats = self._torso(w[:k], obs)
        d = feats.shape[-1]
        h, c = layers.lstm_tf(tf.matmul(feats, w[k][:d]) + w[k + 1], *state, w[k][d:])
        return layers.head_tf(w[k + 2 :], h, self.dueling), (h, c)

    def _torso(self, weights: Sequence[tf.Variable], obs: tf.Tensor) -> tf.Tensor:
        return layers.torso_tf(
            self.torso, weights, obs, self.conv_layers, self.channels, self.observation_scale
        )

    def get_weights(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        for v, a in zip(self.weights, weights):
            v.assign(a)


def numpy_recurrent_step(
    weights: Sequence[np.ndarray],
    obs: np.ndarray,
    state: State,
    num_torso_arrays: int,
    dueling: bool = False,
) -> tuple[np.ndarray, State]:
    """RecurrentQNetwork.step with an MLP torso, in numpy (float32): layers.forward_np."""
    return layers.forward_np(weights, obs, state, num_torso_arrays, dueling)


def zero_state(batch_size: int, lstm_size: int) -> State:
    """The recurrent state an episode starts from: (h, c) zeros [batch, lstm_size]."""
    zeros = np.zeros((batch_size, lstm_size), np.float32)
    return zeros, zeros.copy()


def make_network(config: Any, spec: Any, seed: int = 0) -> RecurrentQNetwork:
    """The RecurrentQNetwork of `config` for envs of `spec` (apex.specs.EnvSpec)."""
    lc = config.learner
    return RecurrentQNetwork(
        spec.observation_shape,
        spec.num_actions,
        lc.hidden_sizes,
        config.r2d2.lstm_size,
        dueling=lc.dueling,
        seed=seed,
        torso=lc.torso,
        conv_layers=lc.conv_layers,
        conv_channels=lc.conv_channels,
        observation_scale=spec.observation_scale,
    )


# What the acting policy runs (apex.agents.policy.ActingPolicy): an (h, c) per env slot.
ACTING = ActingNetwork(
    recurrent=True,
    make_network=make_network,
    numpy_step=layers.numpy_step,
    initial_state=lambda config, batch_size: zero_state(batch_size, config.r2d2.lstm_size),
)
