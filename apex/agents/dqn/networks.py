"""The Q-network: a TF module for the learner and a numpy mirror for actors.

Actors act with numpy (measured 20x faster than a batch-1 tf.function on this
machine); both sides share one weight layout, a flat list of arrays:
  [W_1, b_1, ..., W_L, b_L, W_out, b_out]            (plain head)
  [W_1, b_1, ..., W_L, b_L, W_v, b_v, W_a, b_a]       (dueling head)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf


class QNetwork(tf.Module):
    """MLP Q-network: obs [B, ...] -> Q [B, num_actions]."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden_sizes: Sequence[int],
        dueling: bool = False,
        seed: int = 0,
        name: str = "q_network",
    ):
        super().__init__(name=name)
        self.dueling = dueling
        self.num_actions = num_actions
        rng = np.random.default_rng(seed)
        sizes = [obs_dim, *hidden_sizes]
        self.weights: list[tf.Variable] = []

        def dense(fan_in: int, fan_out: int, scale: float = 1.0) -> None:
            limit = scale * np.sqrt(6.0 / (fan_in + fan_out))  # Glorot uniform
            w = rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)
            self.weights.append(tf.Variable(w))
            self.weights.append(tf.Variable(np.zeros(fan_out, np.float32)))

        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            dense(fan_in, fan_out)
        if dueling:
            dense(sizes[-1], 1)
            dense(sizes[-1], num_actions)
        else:
            dense(sizes[-1], num_actions)

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        x = tf.reshape(tf.cast(obs, tf.float32), [tf.shape(obs)[0], -1])
        w = self.weights
        num_hidden = (len(w) - (4 if self.dueling else 2)) // 2
        for i in range(num_hidden):
            x = tf.nn.relu(tf.matmul(x, w[2 * i]) + w[2 * i + 1])
        k = 2 * num_hidden
        if self.dueling:
            v = tf.matmul(x, w[k]) + w[k + 1]
            a = tf.matmul(x, w[k + 2]) + w[k + 3]
            return v + a - tf.reduce_mean(a, axis=1, keepdims=True)
        return tf.matmul(x, w[k]) + w[k + 1]

    def get_weights(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        for v, a in zip(self.weights, weights):
            v.assign(a)


def numpy_q_values(
    weights: Sequence[np.ndarray], obs: np.ndarray, dueling: bool = False
) -> np.ndarray:
    """The same forward pass as QNetwork.__call__, in numpy (float32)."""
    x = np.asarray(obs, np.float32).reshape(len(obs), -1)
    num_hidden = (len(weights) - (4 if dueling else 2)) // 2
    for i in range(num_hidden):
        x = x @ weights[2 * i] + weights[2 * i + 1]
        np.maximum(x, 0.0, out=x)
    k = 2 * num_hidden
    if dueling:
        v = x @ weights[k] + weights[k + 1]
        a = x @ weights[k + 2] + weights[k + 3]
        return v + a - a.mean(axis=1, keepdims=True)
    return x @ weights[k] + weights[k + 1]
