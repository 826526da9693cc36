"""The layers the feed-forward and the recurrent Q-networks are made of (torso,
LSTM core, head: weights, TF and numpy forms), and the whole numpy forward step
actors run for MLP torsos (`forward_np`).

Weights are flat lists of arrays so that a learner can ship them to actors as
they are and actors can run them in numpy (MLP torsos) or in a local TF module
(conv torsos). Torso layouts:
  mlp:  [W_1, b_1, ..., W_k, b_k]                        (dense, ReLU)
  conv: [K_1, c_1, ..., K_n, c_n, W_1, b_1, ...]         (n convs, then dense)
Conv kernels are [k, k, C_in, filters] whatever the observation's channel
layout, and the last conv's output is flattened in (C, H, W) order, so the
same weights serve a channels-first and a channels-last network.
LSTM core layout (on top of a feature vector of size D, H units):
  [W_lstm [D + H, 4H], b_lstm [4H]], gates (input, forget, cell, output)
Head layouts (on top of a feature vector):
  plain:   [W_out, b_out];  dueling: [W_v, b_v, W_a, b_a]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from apex.config.schema import CONV_CHANNELS, CONV_PRESETS
from apex.errors import ConfigError

# TensorFlow only where a TF forward pass is built (torso_tf, head_tf): launch.train
# checks the torso (check_torso) before any launch, and refusing a config must not
# cost TensorFlow's import (4 s of CPU).
if TYPE_CHECKING:
    import tensorflow as tf

    from apex.config.schema import ApexConfig, LearnerConfig
    from apex.specs import EnvSpec

# Nature DQN (Mnih et al. 2015): (filters, kernel, stride).
NATURE_CONVS = CONV_PRESETS["nature"]

ConvLayer = tuple[int, int, int]
# Where an image observation's channels are, once resolved: (C, H, W), (H, W, C),
# or 'none' for a 2-D (H, W) observation (one channel).
CHANNEL_LAYOUTS = ("first", "last", "none")
_LAYOUT_WORDS = {"first": "channels first", "last": "channels last", "none": "one channel"}


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int, shape=None) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape or (fan_in, fan_out)).astype(np.float32)


# --- conv configuration ------------------------------------------------------


def conv_layer_specs(conv_layers: Any) -> list[ConvLayer]:
    """The (filters, kernel, stride) of each conv layer of `learner.conv_layers`:
    a preset name from CONV_PRESETS or a non-empty sequence of 3 positive ints
    per layer. Raises ConfigError('learner.conv_layers', ...) otherwise."""
    if isinstance(conv_layers, str):
        if conv_layers in CONV_PRESETS:
            return [tuple(layer) for layer in CONV_PRESETS[conv_layers]]
    elif isinstance(conv_layers, (tuple, list)) and conv_layers:
        if all(
            isinstance(layer, (tuple, list))
            and len(layer) == 3
            and all(_is_positive_int(v) for v in layer)
            for layer in conv_layers
        ):
            return [tuple(int(v) for v in layer) for layer in conv_layers]
    presets = ", ".join(repr(p) for p in CONV_PRESETS)
    raise ConfigError(
        "learner.conv_layers",
        conv_layers,
        f"a preset ({presets}) or a non-empty tuple of (filters, kernel, stride) "
        "per layer, each a positive int, e.g. ((16, 3, 1),)",
    )


def _is_positive_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0


def channel_layout(conv_channels: str, obs_shape: Sequence[int]) -> str:
    """'first' (C, H, W), 'last' (H, W, C) or 'none' (2-D (H, W): one channel) for
    `learner.conv_channels` and an observation shape. 'auto' takes the smaller of
    the first and last axis as the channels (last on a tie). Raises ConfigError
    for an unknown setting or an observation that is not 2-D or 3-D."""
    if conv_channels not in CONV_CHANNELS:
        raise ConfigError("learner.conv_channels", conv_channels, f"one of {CONV_CHANNELS}")
    shape = tuple(int(d) for d in obs_shape)
    if len(shape) == 2:
        return "none"
    if len(shape) != 3:
        raise ConfigError(
            "learner.torso",
            "conv",
            f"'mlp' for observation shape {shape}: a conv torso needs 2-D (H, W) or "
            "3-D (C, H, W or H, W, C) image observations",
        )
    if conv_channels == "auto":
        return "first" if shape[0] < shape[2] else "last"
    return conv_channels


def resolve_conv(learner: LearnerConfig, obs_shape: Sequence[int]) -> tuple[list[ConvLayer], str]:
    """(conv layers, channel layout) of a LearnerConfig for an observation shape:
    conv_layer_specs(learner.conv_layers), channel_layout(learner.conv_channels, ...)."""
    return (
        conv_layer_specs(learner.conv_layers),
        channel_layout(learner.conv_channels, obs_shape),
    )


def image_layout(obs_shape: Sequence[int], channels: str) -> tuple[int, int, int]:
    """(channels, height, width) of an image observation in a resolved layout."""
    shape = tuple(int(d) for d in obs_shape)
    if channels == "none" and len(shape) == 2:
        return 1, shape[0], shape[1]
    if channels == "first" and len(shape) == 3:
        return shape
    if channels == "last" and len(shape) == 3:
        return shape[2], shape[0], shape[1]
    raise ValueError(f"observation shape {shape} does not have channel layout {channels!r}")


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1  # VALID padding


def check_conv_fits(
    conv_layers: Any, conv_channels: str, obs_shape: Sequence[int]
) -> tuple[list[ConvLayer], str]:
    """The resolved (conv layers, channel layout), or ConfigError naming the first
    layer that does not fit the observation (its input smaller than its kernel)."""
    specs = conv_layer_specs(conv_layers)
    channels = channel_layout(conv_channels, obs_shape)
    shape = tuple(int(d) for d in obs_shape)
    _, h, w = image_layout(shape, channels)
    for index, (filters, k, s) in enumerate(specs, start=1):
        if h < k or w < k:
            raise ConfigError(
                "learner.conv_layers",
                conv_layers,
                f"conv layers that fit the observation: layer {index} ({filters}, {k}, {s}) "
                f"needs at least {k}x{k} input, gets {h}x{w} (observation {shape}, "
                f"{_LAYOUT_WORDS[channels]}); {_suggestion(shape, channels)}",
            )
        h, w = _conv_out(h, k, s), _conv_out(w, k, s)
    return specs, channels


def _suggestion(shape: tuple[int, ...], channels: str) -> str:
    _, h, w = image_layout(shape, channels)
    for name, preset in CONV_PRESETS.items():
        size_h, size_w, fits = h, w, True
        for _, k, s in preset:
            if size_h < k or size_w < k:
                fits = False
                break
            size_h, size_w = _conv_out(size_h, k, s), _conv_out(size_w, k, s)
        if fits:
            return f"try conv_layers={name!r}"
    return "use fewer layers, smaller kernels or strides"


def check_torso(config: ApexConfig, spec: EnvSpec) -> None:
    """Refuses, before launch, a conv torso that cannot run on `spec`'s observations:
    raises ConfigError for a bad learner.conv_layers or learner.conv_channels, an
    observation that is not 2-D or 3-D, or a layer that does not fit. An mlp torso
    is not checked."""
    lc = config.learner
    if lc.torso != "conv":
        return
    check_conv_fits(lc.conv_layers, lc.conv_channels, spec.observation_shape)


# --- torso weights and forward passes ---------------------------------------


def torso_weights(
    kind: str,
    obs_shape: Sequence[int],
    hidden_sizes: Sequence[int],
    rng: np.random.Generator,
    conv_layers: Sequence[ConvLayer] = NATURE_CONVS,
    channels: str = "first",
) -> tuple[list[np.ndarray], int]:
    """Initial torso weights and the size of the feature vector they produce.

    `conv_layers` and `channels` (resolved: see check_conv_fits) matter only for
    kind='conv'; check_conv_fits first to get a ConfigError for a stack that
    does not fit, rather than a negative size here."""
    weights: list[np.ndarray] = []
    if kind == "conv":
        c, h, w = image_layout(obs_shape, channels)
        for filters, k, s in conv_layers:
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


def num_torso_arrays(kind: str, hidden_sizes: Sequence[int], conv_layers: Any = "nature") -> int:
    """How many arrays of the flat weight list are the torso's (`conv_layers`:
    learner.conv_layers, a preset name or layers; used for kind='conv' only)."""
    convs = len(conv_layer_specs(conv_layers)) if kind == "conv" else 0
    return 2 * len(hidden_sizes) + 2 * convs


def torso_tf(
    kind: str,
    weights: Sequence[tf.Variable],
    obs: tf.Tensor,
    conv_layers: Sequence[ConvLayer] = NATURE_CONVS,
    channels: str = "first",
    scale: float = 1.0,
) -> tf.Tensor:
    """Features [B, D] of observations [B, ...].

    A conv torso multiplies the observations by `scale` (EnvSpec.observation_scale:
    1/255 for uint8 pixels), as a division by 1/scale: for 1/255 that is exactly
    the x / 255.0 of float32 pixels, where a multiplication by float32(1/255)
    differs in the last bit for about half of the 256 values.
    """
    import tensorflow as tf  # not on import: the config checks here stay light

    i = 0
    if kind == "conv":
        x = tf.cast(obs, tf.float32)
        if scale != 1.0:
            x = x / (1.0 / scale)
        if channels == "none":  # [B, H, W] -> [B, H, W, 1]
            x = x[..., None]
        elif channels == "first":  # [B, C, H, W] -> NHWC, the layout TF's CPU kernels take
            x = tf.transpose(x, [0, 2, 3, 1])
        for _, _, stride in conv_layers:
            x = tf.nn.relu(tf.nn.conv2d(x, weights[i], stride, "VALID") + weights[i + 1])
            i += 2
        # Flatten in (C, H, W) order, whatever the input layout: one dense layout.
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


def lstm_weights(size: int, units: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Initial LSTM core weights on features of `size`; the forget bias starts at 1."""
    bias = np.zeros(4 * units, np.float32)
    bias[units : 2 * units] = 1.0
    return [glorot(rng, size + units, 4 * units), bias]


def lstm_tf(
    xw: tf.Tensor, h: tf.Tensor, c: tf.Tensor, w_h: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """One LSTM step (h, c) from the input projection xw = x @ W_x + b [B, 4H]
    and the state's weights w_h = W_lstm[D:]."""
    import tensorflow as tf  # not on import: the config checks here stay light

    z = xw + tf.matmul(h, w_h)
    i, f, g, o = tf.split(z, 4, axis=-1)
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
    return tf.sigmoid(o) * tf.tanh(c), c


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # no overflow warnings for large |x|


def lstm_np(
    x: np.ndarray, state: tuple[np.ndarray, np.ndarray], w: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step in numpy (float32): the new (h, c) from features x [B, D]."""
    d = x.shape[1]
    h, c = state
    z = x @ w[:d] + h @ w[d:] + b
    i, f, g, o = np.split(z, 4, axis=1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    h = _sigmoid(o) * np.tanh(c)
    return h, c


def head_weights(
    size: int, num_actions: int, dueling: bool, rng: np.random.Generator
) -> list[np.ndarray]:
    out = []
    for width in (1, num_actions) if dueling else (num_actions,):
        out += [glorot(rng, size, width), np.zeros(width, np.float32)]
    return out


def head_tf(weights: Sequence[tf.Variable], x: tf.Tensor, dueling: bool) -> tf.Tensor:
    import tensorflow as tf  # not on import: the config checks here stay light

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


def forward_np(
    weights: Sequence[np.ndarray],
    obs: np.ndarray,
    state: tuple[np.ndarray, np.ndarray] | None,
    num_torso: int,
    dueling: bool,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """(Q [B, A], new state) of a Q-network with an MLP torso, in numpy (float32):
    the torso (its first `num_torso` arrays), then with a `state` (h, c) the LSTM
    core, then the head; the new state is None without one. What actors and the
    evaluator run for MLP torsos (apex.agents.policy.ActingNetwork.numpy_step):
    QNetwork.__call__ (state None) and RecurrentQNetwork.step, in one place."""
    k = num_torso
    x = torso_np(weights[:k], obs)
    if state is None:
        return head_np(weights[k:], x, dueling), None
    h, c = lstm_np(x, state, weights[k], weights[k + 1])
    return head_np(weights[k + 2 :], h, dueling), (h, c)


def numpy_step(config: Any) -> Callable[..., Any]:
    """forward_np for `config`'s network: step(weights, obs, state) -> (q, state)
    (the acting network's numpy step of both agents)."""
    lc = config.learner
    num_torso = num_torso_arrays(lc.torso, lc.hidden_sizes, lc.conv_layers)
    return functools.partial(forward_np, num_torso=num_torso, dueling=lc.dueling)
