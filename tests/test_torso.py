"""The configurable conv torso: presets and explicit layers, channel layouts,
observation scaling, the pre-launch fit check, and the Nature DQN case unchanged."""

import numpy as np
import pytest
import tensorflow as tf

from apex.agents import layers, make_network, make_policy
from apex.agents.dqn.networks import QNetwork
from apex.agents.r2d2.networks import RecurrentQNetwork
from apex.config import ApexConfig
from apex.envs import EnvSpec
from apex.errors import ConfigError

MINATAR = EnvSpec(
    observation_shape=(10, 10, 4), observation_dtype="uint8", num_actions=3, observation_scale=1.0
)


def conv_config(conv_layers="nature", conv_channels="auto", agent="apex_dqn") -> ApexConfig:
    c = ApexConfig()
    c.agent = agent
    c.learner.torso = "conv"
    c.learner.conv_layers = conv_layers
    c.learner.conv_channels = conv_channels
    c.learner.hidden_sizes = (32,)
    c.r2d2.lstm_size = 8
    return c


def minatar_batch(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=(batch, 10, 10, 4)).astype(bool)


# --- the resolver -------------------------------------------------------------


@pytest.mark.parametrize(
    "conv_layers, expected",
    [
        ("nature", [(32, 8, 4), (64, 4, 2), (64, 3, 1)]),
        ("small", [(16, 3, 1)]),
        (((8, 3, 1), (16, 2, 2)), [(8, 3, 1), (16, 2, 2)]),
        ([[8, 3, 1]], [(8, 3, 1)]),  # as read back from JSON
    ],
)
def test_resolver_takes_presets_and_explicit_layers(conv_layers, expected):
    lc = conv_config(conv_layers).learner
    assert layers.resolve_conv(lc, (4, 84, 84)) == (expected, "first")


@pytest.mark.parametrize(
    "shape, conv_channels, expected",
    [
        ((4, 84, 84), "auto", "first"),
        ((10, 10, 4), "auto", "last"),
        ((84, 84, 4), "auto", "last"),
        ((3, 10, 3), "auto", "last"),  # a tie: last
        ((84, 84), "auto", "none"),
        ((84, 84), "first", "none"),  # 2-D: one channel whatever the setting
        ((10, 10, 4), "first", "first"),  # explicit settings override auto-detection
        ((4, 84, 84), "last", "last"),
    ],
)
def test_resolver_finds_the_channel_axis(shape, conv_channels, expected):
    lc = conv_config("small", conv_channels).learner
    assert layers.resolve_conv(lc, shape)[1] == expected


def test_num_torso_arrays_follows_the_configured_layers():
    assert layers.num_torso_arrays("conv", (32,), "nature") == 8
    assert layers.num_torso_arrays("conv", (32,), "small") == 4
    assert layers.num_torso_arrays("conv", (32, 16), ((8, 3, 1), (8, 3, 1))) == 8
    assert layers.num_torso_arrays("mlp", (32, 16), "nature") == 4
    net = QNetwork((10, 10, 4), 3, (32,), torso="conv", conv_layers="small")
    assert net._num_torso == layers.num_torso_arrays("conv", (32,), "small")


# --- check_torso ----------------------------------------------------------------


def test_check_torso_refuses_nature_on_minatar_naming_layer_shape_and_preset():
    with pytest.raises(ConfigError) as e:
        layers.check_torso(conv_config("nature"), MINATAR)
    assert e.value.field == "learner.conv_layers"
    message = str(e.value)
    # Layer 1 (8x8 kernel, stride 4) fits 10x10 and leaves 1x1, too small for layer 2.
    assert "layer 2 (64, 4, 2) needs at least 4x4 input, gets 1x1" in message
    assert "(10, 10, 4)" in message and "channels last" in message
    assert "conv_layers='small'" in message


def test_check_torso_names_layer_1_when_the_image_is_smaller_than_its_kernel():
    with pytest.raises(ConfigError) as e:
        layers.check_torso(conv_config("nature"), EnvSpec((6, 6, 2), "uint8", 3))
    message = str(e.value)
    assert "layer 1 (32, 8, 4) needs at least 8x8 input, gets 6x6" in message
    assert "(observation (6, 6, 2), channels last)" in message
    assert "conv_layers='small'" in message


def test_check_torso_names_the_first_layer_that_does_not_fit():
    with pytest.raises(
        ConfigError, match=r"layer 2 \(32, 5, 1\) needs at least 5x5 input, gets 4x4"
    ):
        layers.check_torso(conv_config(((16, 3, 2), (32, 5, 1))), MINATAR)


def test_check_torso_accepts_stacks_that_fit():
    layers.check_torso(conv_config("small"), MINATAR)
    atari = EnvSpec((4, 84, 84), "uint8", 6, observation_scale=1 / 255)
    layers.check_torso(conv_config("nature"), atari)
    layers.check_torso(conv_config("nature"), EnvSpec((84, 84), "uint8", 6, 1 / 255))


@pytest.mark.parametrize("bad", ["huge", (), ((16, 3),), ((0, 3, 1),), ((16, 3, True),), 16])
def test_check_torso_refuses_bad_conv_layers(bad):
    with pytest.raises(ConfigError) as e:
        layers.check_torso(conv_config(bad), MINATAR)
    assert e.value.field == "learner.conv_layers"
    assert "'nature'" in str(e.value) and "'small'" in str(e.value)


def test_check_torso_refuses_bad_channels_and_non_image_observations():
    with pytest.raises(ConfigError) as e:
        layers.check_torso(conv_config("small", "middle"), MINATAR)
    assert e.value.field == "learner.conv_channels"
    with pytest.raises(ConfigError) as e:
        layers.check_torso(conv_config("small"), EnvSpec((4,), "float32", 2))
    assert e.value.field == "learner.torso" and "(4,)" in str(e.value)


def test_check_torso_ignores_mlp_torsos():
    c = conv_config("huge", "middle")
    c.learner.torso = "mlp"
    layers.check_torso(c, EnvSpec((4,), "float32", 2))


def test_networks_refuse_a_stack_that_does_not_fit_with_a_config_error():
    with pytest.raises(ConfigError, match="layer 2"):
        QNetwork((10, 10, 4), 3, (32,), torso="conv")
    with pytest.raises(ConfigError, match="layer 2"):
        RecurrentQNetwork((10, 10, 4), 3, (32,), 8, torso="conv", conv_layers="nature")


# --- forward passes ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [bool, np.uint8])
def test_q_network_on_channels_last_minatar_images(dtype):
    net = make_network(conv_config("small"), MINATAR, seed=1)
    assert net.channels == "last"
    q = net(minatar_batch(5).astype(dtype)).numpy()
    assert q.shape == (5, 3) and np.isfinite(q).all()


@pytest.mark.parametrize("dtype", [bool, np.uint8])
def test_recurrent_q_network_on_channels_last_minatar_images(dtype):
    net = make_network(conv_config("small", agent="r2d2"), MINATAR, seed=1)
    assert isinstance(net, RecurrentQNetwork) and net.channels == "last"
    q, (h, c) = net.step(minatar_batch(5).astype(dtype), net.initial_state(5))
    assert q.shape == (5, 3) and h.shape == (5, 8) and np.isfinite(q.numpy()).all()
    seq = minatar_batch(2 * 3).astype(dtype).reshape(2, 3, 10, 10, 4)
    q_seq = net.unroll(tf.constant(seq), net.initial_state(2)).numpy()
    assert q_seq.shape == (2, 3, 3) and np.isfinite(q_seq).all()


def test_channels_last_and_first_networks_agree_on_transposed_inputs():
    last = QNetwork((10, 10, 4), 3, (32,), torso="conv", conv_layers="small", conv_channels="last")
    first = QNetwork(
        (4, 10, 10), 3, (32,), torso="conv", conv_layers="small", conv_channels="first", seed=7
    )
    first.set_weights(last.get_weights())  # one weight layout for both
    obs = np.random.default_rng(2).integers(0, 256, size=(6, 10, 10, 4)).astype(np.uint8)
    np.testing.assert_allclose(
        first(np.transpose(obs, (0, 3, 1, 2))).numpy(), last(obs).numpy(), rtol=1e-6, atol=1e-6
    )


def test_recurrent_channels_last_and_first_agree_on_transposed_inputs():
    kw = dict(torso="conv", conv_layers=((8, 3, 1), (8, 2, 2)))
    last = RecurrentQNetwork((10, 10, 4), 3, (16,), 8, conv_channels="last", **kw)
    first = RecurrentQNetwork((4, 10, 10), 3, (16,), 8, conv_channels="first", seed=3, **kw)
    first.set_weights(last.get_weights())
    obs = minatar_batch(4)
    q_last, _ = last.step(obs, last.initial_state(4))
    q_first, _ = first.step(np.transpose(obs, (0, 3, 1, 2)), first.initial_state(4))
    np.testing.assert_allclose(q_first.numpy(), q_last.numpy(), rtol=1e-6, atol=1e-6)


def _old_nature_forward(weights, obs, dueling):
    """The Nature DQN forward pass as it was hard-coded before conv_layers existed."""
    x = tf.cast(obs, tf.float32) / 255.0
    x = tf.transpose(x, [0, 2, 3, 1])
    i = 0
    for _, _, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
        x = tf.nn.relu(tf.nn.conv2d(x, weights[i], stride, "VALID") + weights[i + 1])
        i += 2
    x = tf.reshape(tf.transpose(x, [0, 3, 1, 2]), [tf.shape(x)[0], -1])
    head = len(weights) - (4 if dueling else 2)
    while i < head:
        x = tf.nn.relu(tf.matmul(x, weights[i]) + weights[i + 1])
        i += 2
    return layers.head_tf(weights[head:], x, dueling)


@pytest.mark.parametrize("dueling", [False, True])
def test_default_atari_network_is_bit_identical_to_the_old_nature_forward(dueling):
    c = conv_config()  # nature, auto channels
    c.learner.dueling = dueling
    spec = EnvSpec((4, 84, 84), "uint8", 6, observation_scale=1 / 255)
    net = make_network(c, spec, seed=4)
    assert net.channels == "first" and net.conv_layers == list(layers.NATURE_CONVS)
    obs = np.random.default_rng(5).integers(0, 256, size=(2, 4, 84, 84)).astype(np.uint8)
    expected = _old_nature_forward(net.get_weights(), obs, dueling).numpy()
    np.testing.assert_array_equal(net(obs).numpy(), expected)


def test_scale_is_applied_exactly_as_dividing_by_255():
    pixels = np.arange(256, dtype=np.uint8).reshape(1, 16, 16)
    kernel = np.ones((1, 1, 1, 1), np.float32)
    weights = [tf.constant(kernel), tf.zeros(1)]
    got = layers.torso_tf("conv", weights, pixels, [(1, 1, 1)], "none", 1 / 255).numpy()
    expected = (tf.cast(pixels, tf.float32) / 255.0).numpy().reshape(1, -1)
    np.testing.assert_array_equal(got, expected)
    unscaled = layers.torso_tf("conv", weights, pixels, [(1, 1, 1)], "none", 1.0).numpy()
    np.testing.assert_array_equal(unscaled, pixels.reshape(1, -1).astype(np.float32))


# --- acting -------------------------------------------------------------------------


@pytest.mark.parametrize("agent", ["apex_dqn", "r2d2"])
def test_acting_policy_runs_a_small_conv_torso(agent):
    c = conv_config("small", agent=agent)
    policy = make_policy(c, MINATAR)
    assert policy._net._num_torso == 4  # its conv copy: 2 convs + 1 dense layer
    net = make_network(c, MINATAR, seed=2)
    policy.set_weights(net.get_weights())
    obs = minatar_batch(3, seed=1).astype(np.uint8)
    q, state = policy(obs, policy.initial_state(3))
    assert q.shape == (3, 3) and np.isfinite(q).all()
    if agent == "r2d2":
        expected, _ = net.step(obs, net.initial_state(3))
        assert state[0].shape == (3, 8)
    else:
        expected = net(obs)
        assert state is None
    np.testing.assert_allclose(q, expected.numpy(), rtol=1e-5, atol=1e-5)
