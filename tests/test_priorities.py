"""Initial priorities, importance weights and asynchronous priority updates."""

import numpy as np
import pytest
import reverb

from apex.replay.priorities import PriorityUpdater, importance_weights, initial_priorities


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
    assert updater.updates_sent == 1 and updater.max_priority == 1e6
    updater.close()
    server.stop()
