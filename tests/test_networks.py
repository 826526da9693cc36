"""The numpy actor network mirrors the TF learner network; the loss is double-Q n-step."""

import numpy as np
import pytest
import tensorflow as tf

from apex.agents.dqn.losses import double_q_td, huber
from apex.agents.dqn.networks import QNetwork, numpy_q_values
from apex.agents.optim import Adam


@pytest.mark.parametrize("dueling", [False, True])
def test_numpy_forward_equals_tf_forward(dueling):
    net = QNetwork(4, 3, (16, 8), dueling=dueling, seed=3)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(
        numpy_q_values(net.get_weights(), obs, dueling), net(obs).numpy(), rtol=1e-5, atol=1e-5
    )


def test_double_q_td_uses_online_argmax_and_target_value():
    q_tm1 = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    action = tf.constant([1, 0])
    reward = tf.constant([1.0, 0.5])
    discount = tf.constant([0.9, 0.0])
    q_online = tf.constant([[0.0, 10.0], [10.0, 0.0]])  # argmax: 1, 0
    q_target = tf.constant([[5.0, 7.0], [100.0, 200.0]])
    td = double_q_td(q_tm1, action, reward, discount, q_online, q_target).numpy()
    # row 0: 1 + 0.9 * q_target[0, 1] - q_tm1[0, 1]; row 1 terminated: 0.5 - 3
    np.testing.assert_allclose(td, [1 + 0.9 * 7.0 - 2.0, 0.5 - 3.0])


def test_huber_is_quadratic_inside_and_linear_outside():
    np.testing.assert_allclose(huber(tf.constant([0.5, -2.0, 3.0]), 1.0).numpy(), [0.125, 1.5, 2.5])


def test_adam_matches_the_reference_update():
    v = tf.Variable([1.0, -1.0])
    opt = Adam([v], learning_rate=0.1)
    g = tf.constant([0.5, -2.0])
    opt.apply([g], [v])
    # First Adam step moves each coordinate by lr * sign(g) (up to epsilon).
    np.testing.assert_allclose(v.numpy(), [0.9, -0.9], rtol=1e-5)
    assert int(opt.iterations.numpy()) == 1


def test_adam_step_size_schedule_is_linear_then_constant_and_resumes():
    v = tf.Variable([0.0])
    opt = Adam([v], learning_rate=1.0, final_learning_rate=0.5, decay_steps=10)
    assert opt.learning_rate() == 1.0
    seen = []
    for _ in range(20):
        opt.apply([tf.constant([1.0])], [v])
        seen.append(opt.learning_rate())
    np.testing.assert_allclose(seen[4], 0.75)  # after 5 steps: halfway
    np.testing.assert_allclose(seen[9:], [0.5] * 11)  # reached at 10, constant after
    restored = Adam([tf.Variable([0.0])], 1.0, final_learning_rate=0.5, decay_steps=10)
    restored.iterations.assign(5)  # what a checkpoint restores
    np.testing.assert_allclose(restored.learning_rate(), 0.75)
    assert Adam([v], learning_rate=0.3).learning_rate() == 0.3  # no schedule: constant
