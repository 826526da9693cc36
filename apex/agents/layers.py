"""Network pieces shared by the feed-forward and the recurrent Q-networks.

Weights are flat lists of arrays so that a learner can ship them to actors as
they are and actors can run them in numpy (MLP torsos) or in a local TF module
(conv torsos). Torso layouts:
  mlp:  [W_1, b_1, ..., W_k, b_k]                        (dense, ReLU)
  conv: [K_1, c_1, K_2, c_2, K_3, c_3, W_1, b_1, ...]    (Nature DQN convs, then dense)
Head layouts (on top of a feature vector):
  plain:   [W_out, b_out];  dueling: [W_v, b_v, W_a, b_a]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

# Nature DQN (Mnih et al. 2015): (filters, kernel, stride).
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int, shape=None) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape or (fan_in, fan_out)).astype(np.float32)


def _image_layout(obs_shape: Sequence[int]) -> tuple[int, int, int]:
    """(channels, height, width) of an image observation: (H, W) or (C, H, W)."""
    if len(obs_shape) == 2:
        return 1, int(obs_shape[0]), int(obs_shape[1])
    if len(obs_shape) == 3:
        return int(obs_shape[0]), int(obs_shape[1]), int(obs_shape[2])
    raise ValueError(f"a conv torso needs (H, W) or (C, H, W) observations, got {obs_shape}")


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1  # VALID padding


def torso_weights(
    kind: str, obs_shape: Sequence[int], hidden_sizes: Sequence[int], rng: np.random.Generator
) -> tuple[list[np.ndarray], int]:
    """Initial torso weights and the size of the feature vector they produce."""
    weights: list[np.ndarray] = []
    if kind == "conv":
        c, h, w = _image_layout(obs_shape)
        for filters, k, s in NATURE_CONVS:
            weights.append(glorot(rng, k * k * c, k * k * filters, (k, k, c, filters)))
            weights.append(np.zeros(filters, np.float32))
            c, h, w = filters, _conv_out(h, k, s), _conv_out(w, k, s)
        size = c * h * w
    elif kind == "mlp":
        size = int(np.prod(obs_shape))
    else:
        raise ValueError(f"torso {kind!r}: expected 'mlp' or 'conv'")
    for width in hidden_sizes:
        weights.append(glorot(rng, size, width))
        weights.append(np.zeros(width, np.float32))
        size = width
    return weights, size


def num_torso_arrays(kind: str, hidden_sizes: Sequence[int]) -> int:
    return 2 * len(hidden_sizes) + (2 * len(NATURE_CONVS) if kind == "conv" else 0)


def torso_tf(kind: str, weights: Sequence[tf.Variable], obs: tf.Tensor) -> tf.Tensor:
    """Features [B, D] of observations [B, ...] (uint8 images are scaled to [0, 1])."""
    i = 0
    if kind == "conv":
        x = tf.cast(obs, tf.float32) / 255.0
        if x.shape.rank == 3:  # [B, H, W] -> [B, H, W, 1]
            x = x[..., None]
        else:  # [B, C, H, W] (stacked frames) -> NHWC, the layout TF's CPU kernels take
            x = tf.transpose(x, [0, 2, 3, 1])
        for _, _, stride in NATURE_CONVS:
            x = tf.nn.relu(tf.nn.conv2d(x, weights[i], stride, "VALID") + weights[i + 1])
            i += 2
        # Flatten in (C, H, W) order so that numpy and TF agree on the dense weights.
        x = tf.reshape(tf.transpose(x, [0, 3, 1, 2]), [tf.shape(x)[0], -1])
    else:
        x = tf.reshape(tf.cast(obs, tf.float32), [tf.shape(obs)[0], -1])
    while i < len(weights):
        x = tf.nn.relu(tf.matmul(x, weights[i]) + weights[i + 1])
        i += 2
    return x


def torso_np(weights: Sequence[np.ndarray], obs: np.ndarray) -> np.ndarray:
    """The MLP torso in numpy (float32)."""
    x = np.asarray(obs, np.float32).reshape(len(obs), -1)
    for i in range(0, len(weights), 2):
        x = x @ weights[i] + weights[i + 1]
        np.maximum(x, 0.0, out=x)
    return x


def head_weights(
    size: int, num_actions: int, dueling: bool, rng: np.random.Generator
) -> list[np.ndarray]:
    out = []
    for width in (1, num_actions) if dueling else (num_actions,):
        out += [glorot(rng, size, width), np.zeros(width, np.float32)]
    return out


def head_tf(weights: Sequence[tf.Variable], x: tf.Tensor, dueling: bool) -> tf.Tensor:
    if dueling:
        v = tf.matmul(x, weights[0]) + weights[1]
        a = tf.matmul(x, weights[2]) + weights[3]
        return v + a - tf.reduce_mean(a, axis=-1, keepdims=True)
    return tf.matmul(x, weights[0]) + weights[1]


def head_np(weights: Sequence[np.ndarray], x: np.ndarray, dueling: bool) -> np.ndarray:
    if dueling:
        v = x @ weights[0] + weights[1]
        a = x @ weights[2] + weights[3]
        return v + a - a.mean(axis=-1, keepdims=True)
    return x @ weights[0] + weights[1]
