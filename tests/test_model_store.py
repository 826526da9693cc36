"""The model store: versions, the best evaluated parameters, checkpoints, threads (no TF)."""

import threading

import numpy as np
import pytest

from apex.model_store import BestParams, ModelStore, NoParameters
from apex.roles import VariableSource
from apex.variables import VariableClient

SHAPES = [(4, 3), (3,)]


def weights_for(version):
    return [np.full(s, float(version), np.float32) for s in SHAPES]


def assert_weights_equal(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


def test_serves_the_best_version_after_the_policy_degrades():
    store = ModelStore(keep_last=20)
    returns = [120, 480, 500, 500, 374, 143, 130]
    versions = [100 * (i + 1) for i in range(10)]
    for v in versions:
        assert store.push(v, weights_for(v), {"max_priority": 2.0})
    kept = [store.offer_best(r, v) for r, v in zip(returns, versions, strict=False)]
    assert kept == [True, True, True, True, False, False, False]
    assert store.best() == (500.0, 400)
    version, best = store.best_variables()
    assert version == 400
    assert_weights_equal(best, weights_for(400))
    newest, weights, info = store.get_variables()
    assert newest == 1000 and info == {"max_priority": 2.0}
    assert_weights_equal(weights, weights_for(1000))
    assert store.last_eval() == (130.0, 700)
    assert isinstance(store, VariableSource)


def test_a_variable_client_pulls_from_the_store():
    store = ModelStore()
    store.push(3, weights_for(3), {"max_priority": 1.5})
    client = VariableClient(store, update_period=1, timeout=5.0)
    assert client.version == 3 and client.max_priority == 1.5
    assert_weights_equal(client.weights, weights_for(3))
    client.close()


def test_keep_last_drops_the_oldest():
    store = ModelStore(keep_last=3)
    for v in (1, 2, 3, 4, 5):
        store.push(v, weights_for(v))
    assert store.versions() == [3, 4, 5] and store.newest_version() == 5
    assert_weights_equal(store.get_version(3)[1], weights_for(3))
    with pytest.raises(KeyError, match=r"version 1 .*\[3, 4, 5\]"):
        store.get_version(1)
    with pytest.raises(KeyError, match=r"\[3, 4, 5\]"):
        store.offer_best(10.0, 1)
    assert store.best() is None and store.last_eval() is None
    assert store.offer_best(10.0, 1, weights_for(1))
    assert store.best() == (10.0, 1)
    assert_weights_equal(store.best_variables()[1], weights_for(1))


def test_late_and_duplicate_pushes_are_ignored():
    store = ModelStore()
    with pytest.raises(NoParameters, match="nothing was pushed"):
        store.get_variables()
    assert store.newest_version() is None and store.versions() == []
    assert store.push(10, weights_for(10))
    assert not store.push(10, weights_for(99))
    assert not store.push(5, weights_for(5))
    version, weights, _ = store.get_variables()
    assert version == 10 and store.versions() == [10]
    assert_weights_equal(weights, weights_for(10))
    assert store.stats()["model_store/pushes"] == 1


def test_stored_weights_are_copies_and_read_only():
    store = ModelStore()
    pushed = weights_for(1)
    store.push(1, pushed)
    pushed[0][:] = -1.0  # the learner reuses its buffers
    _, weights, info = store.get_variables()
    assert_weights_equal(weights, weights_for(1))
    with pytest.raises(ValueError):
        weights[0][0, 0] = 7.0
    info["x"] = 1.0
    weights.append(np.zeros(1))
    _, again, info_again = store.get_variables()
    assert len(again) == len(SHAPES) and info_again == {}


def test_offer_best_shape_mismatch_raises():
    store = ModelStore()
    store.push(1, weights_for(1))
    bad = [np.zeros((3, 4), np.float32), np.zeros(3, np.float32)]
    with pytest.raises(ValueError, match=r"\(4, 3\).*\(3, 4\)"):
        store.offer_best(1.0, 1, bad)
    assert store.best() is None
    with pytest.raises(ValueError, match="shapes"):
        BestParams().offer(1.0, 1, bad, shapes=SHAPES)


def test_best_params_tie_keeps_the_later_offer():
    best = BestParams()
    assert best.record() is None and best.get_state() == {}
    assert best.offer(5.0, 1, weights_for(1))
    assert best.offer(5.0, 2, weights_for(2))
    assert not best.offer(4.9, 3, weights_for(3))
    assert best.best() == (5.0, 2)
    assert best.record().return_mean == 5.0
    assert_weights_equal(best.best_variables()[1], weights_for(2))


# The keys apex.learner.Learner.get_state writes for its best params (read
# from apex/learner/state.py: "best_return_mean" float64, "best_version" int64, "best/<i>").
LEARNER_BEST_KEYS = {"best_return_mean", "best_version", "best/0", "best/1"}


def test_state_round_trip_keeps_best_and_newest():
    store = ModelStore()
    for v in (1, 2, 3):
        store.push(v, weights_for(v), {"max_priority": 3.5})
    store.offer_best(7.0, 2)
    state = store.get_state()
    assert {k for k in state if k.startswith("best")} == LEARNER_BEST_KEYS
    assert state["best_return_mean"].dtype == np.float64 and state["best_return_mean"].shape == ()
    assert state["best_version"].dtype == np.int64 and int(state["best_version"]) == 2
    assert int(state["store_version"]) == 3
    assert {k for k in state if k.startswith("store/")} == {"store/0", "store/1"}
    # As a checkpoint would: plain writable copies.
    saved = {k: np.array(v) for k, v in state.items()}

    resumed = ModelStore()
    resumed.set_state(saved)
    assert resumed.best() == (7.0, 2)
    assert_weights_equal(resumed.best_variables()[1], weights_for(2))
    version, weights, info = resumed.get_variables()
    assert version == 3 and info == {"max_priority": 3.5}
    assert_weights_equal(weights, weights_for(3))
    assert not resumed.push(3, weights_for(3))
    assert resumed.push(4, weights_for(4))

    best = BestParams()
    best.set_state(saved)
    assert best.best() == (7.0, 2)
    assert best.get_state().keys() == {k for k in state if k.startswith("best")}


def test_state_without_best_keys_leaves_no_best():
    store = ModelStore()
    store.push(1, weights_for(1))
    store.offer_best(1.0, 1)
    older = {"steps": np.asarray(5, np.int64), "online/0": np.zeros(3)}  # an older checkpoint
    store.set_state(older)
    assert store.best() is None and store.best_variables() is None
    assert store.versions() == []
    assert store.get_state() == {}
    assert "model_store/best_version" not in store.stats()


def test_pulls_per_second_uses_the_clock():
    now = [100.0]
    store = ModelStore(clock=lambda: now[0])
    store.push(1, weights_for(1))
    for _ in range(10):
        store.get_variables()
    now[0] = 102.0
    row = store.stats()
    assert row["model_store/pulls"] == 10 and row["model_store/pulls_per_second"] == 5.0
    assert row["model_store/newest_version"] == 1 and row["model_store/versions_held"] == 1
    assert row["model_store/bytes_held"] == sum(w.nbytes for w in weights_for(1))
    assert "model_store/best_return" not in row
    for _ in range(3):
        store.get_variables()
    now[0] = 106.0
    row = store.stats()
    assert row["model_store/pulls"] == 13 and row["model_store/pulls_per_second"] == 0.75
    assert store.stats()["model_store/pulls_per_second"] == 0.0  # no time passed
    store.offer_best(42.0, 1)
    row = store.stats()
    assert row["model_store/best_version"] == 1 and row["model_store/best_return"] == 42.0
    # The best shares the held version's arrays: not counted twice.
    assert row["model_store/bytes_held"] == sum(w.nbytes for w in weights_for(1))


@pytest.mark.timeout(60)
def test_concurrent_pushes_and_pulls():
    store = ModelStore(keep_last=2)
    store.push(0, weights_for(0))
    errors, seen = [], {}
    next_version = iter(range(1, 10**6))
    version_lock = threading.Lock()

    def pusher():
        for _ in range(300):
            with version_lock:
                v = next(next_version)
            store.push(v, weights_for(v))  # may arrive late: then ignored

    def puller(name):
        last = -1
        versions = []
        for i in range(500):
            version, weights, _ = store.get_variables()
            assert version >= last, (version, last)
            assert float(weights[1][0]) == version  # weights belong to their version
            last = version
            versions.append(version)
            if i % 50 == 0:
                store.offer_best(float(version), version, weights)
                store.stats()
        seen[name] = versions

    def run(fn, *args):
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(pusher,)) for _ in range(3)]
    threads += [threading.Thread(target=run, args=(puller, f"r{i}")) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(seen) == 5
    versions = store.versions()
    assert versions == sorted(versions) and 1 <= len(versions) <= 2
    assert store.stats()["model_store/pulls"] == 5 * 500
    best_return, best_version = store.best()
    assert best_return == best_version
