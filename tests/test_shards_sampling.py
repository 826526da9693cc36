"""The learner over S replay shards (apex.replay.shards, apex.replay.sharded):
real in-process Reverb servers, one per shard, each with the table of
shard_config(config).

The sampling rule under test: every batch comes whole from one shard, picked
uniformly among the shards with a batch ready; P(i) = q_s * p_i^alpha / M_s with
q_s = 1 / (shards ready at that draw); IS weight (N * P(i))^-beta over the batch
maximum, N the total size; priority updates go to the shard of each key.
"""

from __future__ import annotations

import numpy as np
import pytest
import reverb

from apex.agents import TRANSITIONS_TABLE, make_tables
from apex.envs import env_spec
from apex.learner import Learner
from apex.replay.priorities import importance_weights
from apex.replay.shards import shard_config, shard_of_actor
from apex.replay.tables import unpack_transitions
from apex.replay.writer import TransitionWriter
from tests.fakes import FakeVariableSource
from tools.replay_inspect.checkpoint_reader import iter_items

Z = 5.0  # sigmas: every frequency check allows Z standard deviations of its own count


@pytest.fixture
def shards(small_config):
    """start(S) -> addresses of S servers with shard_config(config)'s table."""
    servers: list[reverb.Server] = []

    def start(num_shards: int) -> list[str]:
        small_config.replay.num_shards = num_shards
        tables_config = shard_config(small_config)
        for _ in range(num_shards):
            servers.append(reverb.Server(make_tables(tables_config, env_spec(small_config.env))))
        return [f"localhost:{s.port}" for s in servers]

    start.servers = servers
    yield start
    for s in servers:
        s.stop()


def fill_by_actors(config, addresses: list[str], items_per_actor: int) -> None:
    """Actor i (real VectorActor on CartPole) writes to shard i % S."""
    from apex.agents.dqn.acting import VectorActor
    from apex.agents.dqn.networks import QNetwork

    weights = QNetwork(4, 2, config.learner.hidden_sizes, seed=1).get_weights()
    for actor_id in range(config.actor.num_actors):
        shard = shard_of_actor(actor_id, len(addresses))
        client = reverb.Client(addresses[shard])
        eps = np.full(config.actor.envs_per_actor, 0.5, np.float32)
        with TransitionWriter(client, TRANSITIONS_TABLE, actor_id, eps) as w:
            actor = VectorActor(config, actor_id, FakeVariableSource(weights, version=0), w)
            while actor.items_written < items_per_actor:
                actor.step()
            actor.close()


def write_items(address: str, priorities: list[float], first_id: int) -> None:
    """One item per priority; item j's reward is first_id + j (its identity)."""
    n = len(priorities)
    batch = {
        "obs": np.zeros((n, 4), np.float32),
        "next_obs": np.zeros((n, 4), np.float32),
        "action": np.zeros(n, np.int32),
        "reward": np.arange(first_id, first_id + n, dtype=np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "slot": np.zeros(n, np.int64),
        "version": np.zeros(n, np.int64),
    }
    with TransitionWriter(
        reverb.Client(address), TRANSITIONS_TABLE, 0, np.zeros(1, np.float32)
    ) as w:
        w.write(batch, np.asarray(priorities, np.float64))


def table_priorities(address: str) -> dict[int, float]:
    """key -> priority of every item of the shard (its checkpoint: no sampling)."""
    path = reverb.Client(address).checkpoint()
    return {it.key: it.priority for it in iter_items(path, TRANSITIONS_TABLE, decode=False)}


# ------------------------------------------------------------------ routing


@pytest.mark.timeout(240)
@pytest.mark.parametrize("num_shards", [2, 3])
def test_priority_updates_go_to_the_shard_that_holds_each_key(shards, small_config, num_shards):
    addresses = shards(num_shards)
    small_config.actor.num_actors = num_shards
    small_config.learner.priority_update_period = 1  # one mutate_priorities call per batch
    fill_by_actors(small_config, addresses, 120)
    before = [table_priorities(a) for a in addresses]
    for s in range(num_shards):
        assert len(before[s]) >= 120
        for t in range(s):
            assert not set(before[s]) & set(before[t]), "shards share a key: the test cannot tell"

    learner = Learner(small_config, env_spec(small_config.env), addresses)
    assert learner.num_shards == num_shards and len(learner.replay_clients) == num_shards
    assert learner.replay_client is learner.replay_clients[0]
    learner.start_priority_updates()
    newest: list[dict[int, float]] = [{} for _ in addresses]  # per shard: key -> last sent
    expected_sent = [0] * num_shards
    batches = [0] * num_shards
    steps, largest = 0, 0.0
    while steps < 30 or min(batches) == 0:  # every shard serves, all but surely in 30
        learner.step()
        steps += 1
        assert steps < 300
        keys, _, prios = learner.last_update
        shard = int(learner.last_shards[0])
        assert (learner.last_shards == shard).all() and len(learner.last_shards) == len(keys)
        assert learner.last_draw.shard == shard
        batches[shard] += 1
        expected_sent[shard] += len(set(keys.tolist()))
        newest[shard].update(zip(keys.tolist(), prios.tolist()))
        largest = max(largest, float(prios.max()))
    learner.flush_priorities()
    after = [table_priorities(a) for a in addresses]

    for s in range(num_shards):
        assert set(newest[s]) <= set(before[s]), f"shard {s} was said to serve keys it lacks"
        for key, p_before in before[s].items():
            if key in newest[s]:  # updated on its own shard, to the newest value sent
                assert after[s][key] == pytest.approx(newest[s][key], rel=1e-5)
                assert after[s][key] != pytest.approx(p_before, rel=1e-9)
            else:  # no other shard's update landed here
                assert after[s][key] == p_before
    row = learner.report(0.0, None)
    for s in range(num_shards):
        assert row[f"learner/batches_shard_{s}"] == batches[s]
        assert row[f"learner/priority_updates_sent_shard_{s}"] == expected_sent[s]
        assert row[f"learner/priority_updates_acked_shard_{s}"] == expected_sent[s]
    assert row["learner/priority_updates_unacked"] == 0
    assert row["learner/priority_updates"] == sum(expected_sent)
    # max_seen insertions use the max over every shard.
    assert learner.get_variables()[2]["max_priority"] == pytest.approx(largest)
    learner.close()


# ------------------------------------------------------------ distribution


def _check_frequencies(config, addresses, prios_by_shard, num_batches: int) -> list[float]:
    """Draws `num_batches` batches through the learner's sampler and checks the
    shard picks and every item's count against the rule, each within Z of its
    own standard deviation (moments from the recorded ready set of every draw).
    Returns each shard's expected share of items."""
    alpha = config.replay.priority_exponent
    batch_size = config.learner.batch_size
    learner = Learner(config, env_spec(config.env), addresses)
    sampler = learner._sampler  # the learner's own; no SGD: the priorities stay put
    num_shards = len(addresses)
    pick = np.zeros((num_batches, num_shards))  # P(shard s at draw t) by the rule
    item_counts = [np.zeros(len(p)) for p in prios_by_shard]
    shard_counts = np.zeros(num_shards)
    for t in range(num_batches):
        batch = sampler.next()
        assert batch.q == 1.0 / len(batch.ready) and batch.shard in batch.ready
        pick[t, list(batch.ready)] = batch.q
        shard_counts[batch.shard] += 1
        data = unpack_transitions({k: v.numpy() for k, v in batch.sample.data.items()})
        ids = data["reward"].astype(int) - 1000 * batch.shard
        item_counts[batch.shard] += np.bincount(ids, minlength=len(prios_by_shard[batch.shard]))
    learner.close()

    mean, var = pick.sum(0), (pick * (1 - pick)).sum(0)
    for s in range(num_shards):
        assert abs(shard_counts[s] - mean[s]) <= Z * np.sqrt(var[s]), (s, shard_counts, mean)
    for s, prios in enumerate(prios_by_shard):
        pi = np.asarray(prios) ** alpha
        pi /= pi.sum()  # p_i^alpha / M_s
        ps = pick[:, s]
        # count_i = sum over draws of Binomial(B, pi) when shard s is picked, else 0
        exp = ps.sum() * batch_size * pi
        var_i = (
            ps.sum() * batch_size * pi * (1 - pi) + (ps * (1 - ps)).sum() * (batch_size * pi) ** 2
        )
        z = np.abs(item_counts[s] - exp) / np.sqrt(var_i)
        assert (z <= Z).all(), (s, item_counts[s], exp)
    return list(shard_counts / num_batches)


def _single_table_probabilities(config, all_prios: list[float]) -> dict[float, float]:
    """priority -> Reverb's probability in one table holding every item."""
    config.replay.num_shards = 1
    server = reverb.Server(make_tables(config, env_spec(config.env)))
    try:
        address = f"localhost:{server.port}"
        write_items(address, all_prios, 0)
        client = reverb.Client(address)
        out: dict[float, float] = {}
        for s in client.sample(TRANSITIONS_TABLE, num_samples=400, emit_timesteps=False):
            out[float(s.info.priority)] = float(s.info.probability)
            assert int(s.info.table_size) == len(all_prios)
        return out
    finally:
        server.stop()


def _check_learner_weights(config, addresses, num_steps: int, single=None) -> None:
    """The weights the learner trains with = (N * q_s * p_i^alpha / M_s)^-beta / max,
    with q_s and N of the draw; with `single` (priority -> one table's
    probability), also = one table's weights for the same items."""
    alpha, beta = config.replay.priority_exponent, config.learner.importance_exponent
    masses = []
    for a in addresses:
        masses.append(sum(p**alpha for p in table_priorities(a).values()))
    learner = Learner(config, env_spec(config.env), addresses)  # no updater: priorities stay
    for _ in range(num_steps):
        learner.step()
        draw = learner.last_draw
        _, sampled, _ = learner.last_update
        p_item = draw.q * sampled**alpha / masses[draw.shard]
        expected = (draw.total_size * p_item) ** -beta
        np.testing.assert_allclose(learner.last_weights, expected / expected.max(), rtol=1e-5)
        np.testing.assert_allclose(
            learner.last_weights, importance_weights(p_item, draw.total_size, beta), rtol=1e-5
        )
        if single is not None:
            one = np.array([single[float(p)] for p in sampled])
            if draw.q == 0.5:  # both shards ready: P(i) is one table's exactly
                np.testing.assert_allclose(p_item, one, rtol=1e-5)
            np.testing.assert_allclose(
                learner.last_weights, importance_weights(one, draw.total_size, beta), rtol=1e-5
            )
    learner.close()


@pytest.mark.timeout(300)
def test_equal_mass_sampling_is_one_tables_prioritized_sampling(shards, small_config):
    small_config.replay.min_size = 8
    addresses = shards(2)
    prios = [0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0]
    for s, a in enumerate(addresses):
        write_items(a, prios, 1000 * s)  # the same multiset: M_0 = M_1
    shares = _check_frequencies(small_config, addresses, [prios, prios], 600)
    assert min(shares) > 0
    single = _single_table_probabilities(small_config, prios + prios)
    small_config.replay.num_shards = 2
    _check_learner_weights(small_config, addresses, 6, single)


@pytest.mark.timeout(300)
def test_unequal_mass_sampling_picks_shards_uniformly(shards, small_config):
    """Shard 1 holds 10x the priorities: one table would draw 80% of its items
    from it (10^0.6 / (1 + 10^0.6)); the rule draws ~50% (whatever is ready)."""
    small_config.replay.min_size = 8
    addresses = shards(2)
    low = [0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0]
    high = [10 * p for p in low]
    write_items(addresses[0], low, 0)
    write_items(addresses[1], high, 1000)
    num_batches = 600
    shares = _check_frequencies(small_config, addresses, [low, high], num_batches)
    one_table = 10**0.6 / (1 + 10**0.6)
    # The test tells the two apart: one table's share is far outside Z sigmas.
    sd = np.sqrt(one_table * (1 - one_table) / num_batches)
    assert abs(shares[1] - one_table) > Z * sd
    _check_learner_weights(small_config, addresses, 6)


# ---------------------------------------------------------------- no stall


@pytest.mark.timeout(240)
def test_a_shard_below_min_size_does_not_stall_the_learner(shards, small_config):
    addresses = shards(2)  # per-shard min_size 32
    low = [float(p) for p in range(1, 41)]
    write_items(addresses[0], low, 0)  # 40 >= 32: can serve
    write_items(addresses[1], [1.0] * 5, 1000)  # 5 < 32: held by its rate limiter
    alpha, beta = small_config.replay.priority_exponent, small_config.learner.importance_exponent
    mass = sum(p**alpha for p in low)
    learner = Learner(small_config, env_spec(small_config.env), addresses)
    for _ in range(5):
        learner.step()
        draw = learner.last_draw
        assert draw.shard == 0 and draw.ready == (0,) and draw.q == 1.0
        assert draw.total_size == 45  # N counts the held shard too
        sampled = learner.last_update[1]
        expected = (45 * sampled**alpha / mass) ** -beta
        np.testing.assert_allclose(learner.last_weights, expected / expected.max(), rtol=1e-5)
    assert learner.report(0.0, None)["learner/batches_shard_1"] == 0
    # Once shard 1 can serve, it is picked too.
    write_items(addresses[1], [1.0] * 40, 1005)
    steps = 0
    while learner.last_draw.shard != 1:
        learner.step()
        steps += 1
        assert steps < 5000, "shard 1 never served after reaching its min_size"
    # N: shard 1's size as its batch was sampled (from its min_size 32 on: the
    # rate limiter lets samples through while the items still arrive).
    assert 40 + 32 <= learner.last_draw.total_size <= 85
    learner.close()


# ------------------------------------------------------------ unacked updates


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_updates_to_a_gone_shard_are_counted_and_warned_and_sampling_goes_on(
    shards, small_config, capsys
):
    addresses = shards(2)
    small_config.actor.num_actors = 2
    fill_by_actors(small_config, addresses, 100)
    learner = Learner(small_config, env_spec(small_config.env), addresses)
    steps = 0
    while min(learner._sampler.batches) == 0:  # updates queue up: the sender is not started
        learner.step()
        steps += 1
        assert steps < 40
    shards.servers[1].stop()
    learner.start_priority_updates()
    learner.flush_priorities()
    row = learner.report(0.0, None)
    sent0, sent1 = (row[f"learner/priority_updates_sent_shard_{s}"] for s in (0, 1))
    assert sent0 > 0 and row["learner/priority_updates_acked_shard_0"] == sent0
    assert sent1 > 0 and row["learner/priority_updates_acked_shard_1"] == 0
    assert row["learner/priority_updates_unacked"] == sent1
    # One line names the shard: at once when the call raised (Reverb 0.7 answers
    # the first call to a stopped server so), else a row later (no answer).
    learner.report(0.0, None)
    warnings = [ln for ln in capsys.readouterr().out.splitlines() if "not acknowledged" in ln]
    assert len(warnings) == 1 and f"replay_1: {sent1} keys" in warnings[0]
    # The learner goes on: shard 1's batches already drawn drain, then shard 0 serves.
    before = learner.steps
    for _ in range(20):
        learner.step()
    assert learner.steps == before + 20
    learner.close()


@pytest.mark.timeout(120)
def test_a_learner_waiting_on_held_shards_honours_a_stop(shards, small_config):
    """Every shard below its min_size: run() returns once asked to stop, and the
    sampler's wait checks the stop request too."""
    addresses = shards(2)
    for s, a in enumerate(addresses):
        write_items(a, [1.0] * 5, 1000 * s)
    learner = Learner(small_config, env_spec(small_config.env), addresses)
    asked = []
    assert learner._sampler.next(lambda: asked.append(1) or len(asked) >= 3) is None
    assert len(asked) == 3 and learner._sampler.batches == [0, 0]
    calls = []
    learner.run(lambda: calls.append(1) or len(calls) >= 20)
    assert learner.steps == 0


def test_the_stop_drain_survives_a_shard_that_cannot_be_reached():
    """A shard cut off at the stop (issue 31's netns bench): making its
    iterator raises; the drain thread returns quietly, the others drain."""
    import threading

    import tensorflow as tf

    from apex.replay.sharded import drain_datasets

    class Unreachable:
        def __iter__(self):
            raise tf.errors.InternalError(None, None, "Socket closed")

    crashes = []
    hook = threading.excepthook
    threading.excepthook = crashes.append
    try:
        reachable = tf.data.Dataset.range(5)
        drawn = drain_datasets([reachable, Unreachable()], 2.0, lambda: False)
    finally:
        threading.excepthook = hook
    assert crashes == []
    assert drawn >= 5  # the reachable shard was drained (its dataset ends and restarts)


def test_a_shard_started_again_elsewhere_is_sampled_updated_and_counted_there(shards, small_config):
    """Learner.move_shard (what the learner node does when the coordinator says a
    shard moved): the batches of that shard come from the new server, its
    priority updates land there, and the per-shard counts carry on."""
    addresses = shards(2)
    small_config.actor.num_actors = 2
    small_config.learner.priority_update_period = 1
    fill_by_actors(small_config, addresses, 100)
    learner = Learner(small_config, env_spec(small_config.env), addresses)
    learner.start_priority_updates()
    steps = 0
    while min(learner._sampler.batches) == 0:
        learner.step()
        steps += 1
        assert steps < 40
    learner.flush_priorities()
    before = learner.report(0.0, None)
    shards.servers[1].stop()  # the old copy is gone
    moved = reverb.Server(make_tables(shard_config(small_config), env_spec(small_config.env)))
    try:
        new_address = f"localhost:{moved.port}"
        fill_by_actors(small_config, [addresses[0], new_address], 100)
        new_keys = set(table_priorities(new_address))
        learner.move_shard(1, new_address)
        assert learner.replay_clients[1].server_address == new_address
        from_new = []
        while len(from_new) < 3:
            learner.step()
            steps += 1
            assert steps < 400
            keys, _, prios = learner.last_update
            if learner.last_draw.shard == 1:
                assert set(keys.tolist()) <= new_keys, "a batch of shard 1 from its old copy"
                from_new.append(dict(zip(keys.tolist(), prios.tolist())))
        learner.flush_priorities()
        after = table_priorities(new_address)
        for update in from_new[-1:]:  # the newest values sent landed on the new copy
            for key, p in update.items():
                assert after[key] == pytest.approx(p, rel=1e-5)
        row = learner.report(0.0, None)
        assert row["learner/batches_shard_1"] >= before["learner/batches_shard_1"] + 3
        sent = row["learner/priority_updates_sent_shard_1"]
        assert sent > before["learner/priority_updates_sent_shard_1"]
        assert row["learner/priority_updates_acked_shard_1"] == sent
    finally:
        learner.close()
        moved.stop()
