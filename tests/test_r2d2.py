"""R2D2 pieces: value rescaling, n-step sequence targets against a plain loop,
numpy vs TF agreement, eta priorities, the recurrent network, and burn-in
steps that receive no gradient."""

import numpy as np
import pytest
import tensorflow as tf

from apex.agents.r2d2 import acting, losses
from apex.agents.r2d2.losses import sequence_loss
from apex.agents.r2d2.networks import RecurrentQNetwork, numpy_recurrent_step
from apex.config import ApexConfig


@pytest.mark.parametrize("eps", [0.0, 1e-3, 1e-2])
def test_rescaling_round_trips_over_a_wide_range(eps):
    x = np.concatenate([-np.logspace(-6, 6, 200), [0.0], np.logspace(-6, 6, 200)])
    h = acting.rescale_np(x, eps)
    np.testing.assert_allclose(acting.unrescale_np(h, eps), x, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(acting.rescale_np(acting.unrescale_np(x, eps), eps), x, rtol=1e-7)
    # h squashes: |h(x)| < |x| for |x| > 1; TF and numpy agree.
    assert np.all(np.abs(h[np.abs(x) > 1]) < np.abs(x[np.abs(x) > 1]))
    xt = tf.constant(x, tf.float64)
    np.testing.assert_allclose(losses.rescale_tf(xt, eps).numpy(), h, rtol=1e-9)
    np.testing.assert_allclose(
        losses.unrescale_tf(tf.constant(h), eps).numpy(), x, rtol=1e-7, atol=1e-9
    )
    np.testing.assert_allclose(acting.rescale_np(np.array([3.0]), 0.0), [1.0])  # sqrt(4) - 1


def reference_td(q, q_target, action, reward, discount, mask, n, rescale, eps):
    """Per-step loops, written independently of the vectorised forms."""
    b, t_len, _ = q.shape
    h = (lambda x: acting.rescale_np(x, eps)) if rescale else (lambda x: x)
    hinv = (lambda x: acting.unrescale_np(x, eps)) if rescale else (lambda x: x)
    td = np.zeros((b, t_len))
    valid = np.zeros((b, t_len))
    for i in range(b):
        for t in range(t_len):
            g, d, k = 0.0, 1.0, 0
            while k < n:
                j = t + k
                if j >= t_len or not mask[i, j]:
                    break
                has_next = j + 1 < t_len and mask[i, j + 1]
                if not has_next and discount[i, j] != 0:
                    break  # truncated: no observation to bootstrap from
                g += d * reward[i, j]
                d *= discount[i, j]
                k += 1
                if d == 0:
                    break
            if k == 0:
                continue
            jb = min(t + k, t_len - 1)
            boot = q_target[i, jb, np.argmax(q[i, jb])]
            td[i, t] = h(g + d * hinv(boot)) - q[i, t, action[i, t]]
            valid[i, t] = 1
    return td, valid


def random_batch(rng, b=6, t_len=9, a=3):
    q = rng.normal(size=(b, t_len, a))
    q_target = rng.normal(size=(b, t_len, a))
    action = rng.integers(0, a, size=(b, t_len))
    reward = rng.normal(size=(b, t_len))
    discount = np.full((b, t_len), 0.97)
    mask = np.ones((b, t_len))
    # Row 1: terminates at step 4; row 2: truncated after step 5; row 3: terminal at the last step.
    discount[1, 4] = 0
    mask[1, 5:] = 0
    mask[2, 6:] = 0
    discount[3, -1] = 0
    return q, q_target, action, reward, discount, mask


@pytest.mark.parametrize("n,rescale", [(1, False), (3, True), (5, True), (12, False)])
def test_sequence_td_matches_plain_loop_and_tf(n, rescale):
    rng = np.random.default_rng(n)
    q, qt, action, reward, discount, mask = random_batch(rng)
    ref_td, ref_valid = reference_td(q, qt, action, reward, discount, mask, n, rescale, 1e-3)
    td, valid = acting.sequence_td_np(
        q, action, reward, discount, mask, n, rescale, 1e-3, q_target=qt
    )
    np.testing.assert_array_equal(valid, ref_valid)
    np.testing.assert_allclose(td, ref_td, rtol=1e-9, atol=1e-12)
    # Edges: the last step of a full row has no target, a terminal last step has one.
    assert valid[0, -1] == 0 and valid[3, -1] == 1
    assert valid[1, 4] == 1 and valid[1, 5:].sum() == 0  # terminal step trained, padding not
    assert valid[2, 5] == 0 and valid[2, 4] == 1  # truncated: last real step has no next obs
    f32 = lambda x: tf.constant(x, tf.float32)  # noqa: E731
    td_tf, valid_tf = losses.sequence_td_tf(
        f32(q), f32(qt), tf.constant(action, tf.int32), f32(reward), f32(discount), f32(mask),
        n, rescale, 1e-3,
    )  # fmt: skip
    np.testing.assert_array_equal(valid_tf.numpy(), valid)
    np.testing.assert_allclose(td_tf.numpy(), td, rtol=1e-4, atol=1e-4)


def test_eta_priority_formula():
    td = np.array([[1.0, -3.0, 2.0, 100.0], [0.5, 0.5, 0.0, 0.0]])
    weight = np.array([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    got = acting.sequence_priorities_np(td, weight, 0.9)
    np.testing.assert_allclose(got, [0.9 * 3 + 0.1 * 2.0, 0.9 * 0.5 + 0.1 * 0.5])
    got_tf = losses.sequence_priorities_tf(tf.constant(td), tf.constant(weight), 0.9)
    np.testing.assert_allclose(got_tf.numpy(), got)


def test_train_mask_burn_in_and_episode_start():
    valid = np.ones((2, 6))
    got = acting.train_mask_np(valid, np.array([0, 5]), burn_in=2, skip_at_start=True)
    np.testing.assert_array_equal(got, [[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    got = acting.train_mask_np(valid, np.array([0, 5]), burn_in=2, skip_at_start=False)
    np.testing.assert_array_equal(got, [[0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    tf_got = losses.train_mask_tf(tf.constant(valid, tf.float32), tf.constant([0, 5]), 2, True)
    np.testing.assert_array_equal(tf_got.numpy(), [[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])


@pytest.mark.parametrize("dueling", [False, True])
def test_recurrent_network_step_unroll_and_numpy_agree(dueling):
    net = RecurrentQNetwork((3,), 2, (8,), lstm_size=5, dueling=dueling, seed=1)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 7, 3)).astype(np.float32)
    h0 = rng.normal(size=(4, 5)).astype(np.float32)
    c0 = rng.normal(size=(4, 5)).astype(np.float32)
    unrolled = net.unroll(tf.constant(obs), (tf.constant(h0), tf.constant(c0))).numpy()
    state_tf = (tf.constant(h0), tf.constant(c0))
    state_np = (h0, c0)
    for t in range(7):
        q_tf, state_tf = net.step(tf.constant(obs[:, t]), state_tf)
        q_np, state_np = numpy_recurrent_step(net.get_weights(), obs[:, t], state_np, 2, dueling)
        np.testing.assert_allclose(q_tf.numpy(), unrolled[:, t], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(q_np, unrolled[:, t], rtol=1e-4, atol=1e-5)
    # The state matters: another start state gives other Q-values.
    other = net.unroll(tf.constant(obs), net.initial_state(4)).numpy()
    assert np.abs(other[:, 0] - unrolled[:, 0]).max() > 1e-3


def burn_in_batch(config, start_steps):
    rng = np.random.default_rng(3)
    b, t_len = len(start_steps), config.r2d2.sequence_length
    return {
        "obs": tf.constant(rng.normal(size=(b, t_len, 2)), tf.float32),
        "action": tf.constant(rng.integers(0, 2, size=(b, t_len)), tf.int32),
        "reward": tf.ones([b, t_len]),
        "discount": tf.fill([b, t_len], 0.99),
        "mask": tf.ones([b, t_len]),
        "state_h": tf.constant(rng.normal(size=(b, 6)), tf.float32),
        "state_c": tf.constant(rng.normal(size=(b, 6)), tf.float32),
        "start_step": tf.constant(start_steps, tf.int32),
    }


@pytest.mark.parametrize("skip", [True, False])
def test_burn_in_steps_receive_no_gradient(skip):
    c = ApexConfig()
    c.agent = "r2d2"
    c.r2d2.sequence_length, c.r2d2.burn_in, c.r2d2.lstm_size = 8, 3, 6
    c.r2d2.skip_burn_in_at_episode_start = skip
    c.replay.n_step = 2
    online = RecurrentQNetwork((2,), 2, (32,), 6, seed=0)
    target = RecurrentQNetwork((2,), 2, (32,), 6, seed=1)
    data = burn_in_batch(c, [40, 0])  # row 0: mid-episode; row 1: starts its episode
    with tf.GradientTape() as tape:
        tape.watch([data["obs"], data["state_h"], data["state_c"]])
        loss, _, train, _ = sequence_loss(online, target, data, tf.ones([2]), c)
    g_obs, g_h, g_c = tape.gradient(loss, [data["obs"], data["state_h"], data["state_c"]])
    g = np.abs(g_obs.numpy()).sum(axis=-1)  # [B, T]
    # Mid-episode row: burn-in observations and the stored state get exactly zero gradient.
    np.testing.assert_array_equal(g[0, :3], 0.0)
    assert np.all(g[0, 3:-1] > 0)
    assert np.all(g_h.numpy()[0] == 0) and np.all(g_c.numpy()[0] == 0)
    if skip:  # the episode-start row trains from step 0 and its state is exact
        assert np.all(g[1, :3] > 0)
        np.testing.assert_array_equal(train.numpy()[1, :3], 1.0)
    else:
        np.testing.assert_array_equal(g[1, :3], 0.0)
    # The target network receives no gradient at all.
    with tf.GradientTape() as tape:
        loss, *_ = sequence_loss(online, target, data, tf.ones([2]), c)
    assert all(gr is None for gr in tape.gradient(loss, target.weights))
