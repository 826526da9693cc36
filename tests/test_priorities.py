"""Initial priorities, importance weights and asynchronous priority updates."""

import numpy as np
import pytest
import reverb

from apex.agents.acting import initial_priorities
from apex.replay.priorities import PriorityUpdater, importance_weights


def test_actor_td_priority_is_absolute_td_plus_epsilon():
    p = initial_priorities(np.array([-3.0, 0.0, 0.25]), "actor_td", epsilon=0.01)
    np.testing.assert_allclose(p, [3.01, 0.01, 0.26])


def test_max_seen_uses_the_learners_maximum_and_constant_before_any():
    td = np.array([5.0, -1.0])
    np.testing.assert_allclose(initial_priorities(td, "max_seen", max_seen=7.5), [7.5, 7.5])
    np.testing.assert_allclose(
        initial_priorities(td, "max_seen", max_seen=None, constant=2.0), [2.0, 2.0]
    )


def test_constant_priority_ignores_td():
    np.testing.assert_allclose(
        initial_priorities(np.array([9.0, -9.0]), "constant", constant=3.0), [3.0, 3.0]
    )


def test_unknown_policy_names_the_valid_ones():
    with pytest.raises(ValueError, match="'actor_td', 'max_seen', 'constant'"):
        initial_priorities(np.zeros(1), "loud")


def test_importance_weights_follow_schaul_and_are_max_normalised():
    probs = np.array([0.5, 0.25, 0.125])
    w = importance_weights(probs, 8, beta=0.5)
    raw = (8 * probs) ** -0.5
    np.testing.assert_allclose(w, raw / raw.max())
    assert w.max() == pytest.approx(1.0) and w[0] < w[1] < w[2]


def test_importance_weights_are_uniform_when_beta_is_zero():
    np.testing.assert_allclose(importance_weights(np.array([0.9, 0.1]), 2, beta=0.0), [1.0, 1.0])


@pytest.mark.parametrize("table_size", [8, np.array([8.0, 9.0, 10.0])], ids=["scalar", "per_item"])
def test_importance_weights_agree_in_tensorflow_and_numpy(table_size):
    """The learner's SGD step computes them traced (xp=tf): the same rule, to the bit."""
    import tensorflow as tf

    probs = np.array([0.5, 0.25, 0.125])
    traced = tf.function(lambda p, n: importance_weights(p, n, 0.4, xp=tf))
    w = traced(tf.constant(probs), tf.constant(table_size, tf.float64)).numpy()
    np.testing.assert_array_equal(w, importance_weights(probs, table_size, 0.4))
    assert w.dtype == np.float64


def test_priority_updater_counts_a_failed_call_as_sent_not_acked():
    """sent: keys handed to mutate_priorities calls; acked: those of calls that returned."""
    server = reverb.Server([reverb.Table.queue("t", 10)])
    updater = PriorityUpdater(reverb.Client(f"localhost:{server.port}"), merge=1, table="nope")
    updater.put(np.array([1, 2], np.uint64), np.array([1.0, 2.0]))
    updater.flush()  # not started: sent on this thread
    assert (updater.updates_sent, updater.updates_acked, updater.updates_failed) == (2, 0, 2)
    assert updater.last_error is not None
    server.stop()


def test_priority_updater_changes_priorities_in_reverb():
    server = reverb.Server(
        [
            reverb.Table(
                "t",
                reverb.selectors.Prioritized(1.0),
                reverb.selectors.Fifo(),
                100,
                reverb.rate_limiters.MinSize(1),
            )
        ]
    )
    client = reverb.Client(f"localhost:{server.port}")
    for i in range(10):
        client.insert(np.float32(i), priorities={"t": 1.0})
    keys = [s[0].info.key for s in client.sample("t", num_samples=50)]
    key = int(keys[0])
    updater = PriorityUpdater(client, merge=3, table="t")
    updater.start()
    updater.put(np.array([key], np.uint64), np.array([1e6]))
    updater.flush()
    # With alpha = 1 that item now holds ~1e6 / (1e6 + 9) of the mass.
    sampled = [int(s[0].info.key) for s in client.sample("t", num_samples=200)]
    assert sampled.count(key) >= 190
    assert updater.updates_sent == updater.updates_acked == 1 and updater.max_priority == 1e6
    updater.close()
    server.stop()
