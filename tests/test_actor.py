"""The vector actor: one batched forward pass per step, n-step items with provenance."""

import numpy as np

from apex.agents.dqn.acting import VectorActor
from apex.agents.dqn.networks import QNetwork, numpy_q_values
from apex.exploration import slot_epsilons
from tests.fakes import FakeVariableSource, RecordingWriter
from tests.procs import wait_until


def versioned_source(hidden, **kwargs) -> FakeVariableSource:
    """Fixed weights; the version goes up by one per call (a training learner)."""
    weights = QNetwork(4, 2, hidden, seed=0).get_weights()
    return FakeVariableSource(weights, version=None, info={"max_priority": 9.0}, **kwargs)


def test_actor_writes_nstep_items_with_actor_td_priorities_and_provenance(small_config):
    src = versioned_source(small_config.learner.hidden_sizes)
    writer = RecordingWriter()
    actor = VectorActor(small_config, 0, src, writer)
    for _ in range(300):
        actor.step()
    assert actor.env_steps == 300 * small_config.actor.envs_per_actor
    items = sum(len(p) for _, p in writer.batches)
    assert items == actor.items_written
    # Every env step eventually becomes exactly one transition: at most n-1 pending per slot.
    assert actor.env_steps - items <= small_config.actor.envs_per_actor * (
        small_config.replay.n_step - 1
    )
    for batch, prios in writer.batches:
        np.testing.assert_allclose(
            prios,
            np.abs(actor.priority_td(batch)) + small_config.replay.priority_epsilon,
            rtol=1e-5,
        )
        assert set(batch["slot"].tolist()) <= set(range(small_config.actor.envs_per_actor))
        allowed = np.array([0.0, 0.99, 0.99**2, 0.99**3])
        assert np.all(
            np.isclose(batch["discount"][:, None], allowed[None, :], atol=1e-6).any(axis=1)
        )
    assert actor.episodes > 0


def test_actor_td_matches_its_own_q_values(small_config):
    """td = R + discount * max_a Q(next_obs) - Q(obs, action), all with the acting weights."""
    small_config.actor.params_update_period = 10**9  # keep one set of weights
    src = versioned_source(small_config.learner.hidden_sizes)
    writer = RecordingWriter()
    actor = VectorActor(small_config, 0, src, writer)
    for _ in range(60):
        actor.step()
    w = src.weights
    batch, _ = writer.batches[-1]
    q = numpy_q_values(w, batch["obs"])
    q_next = numpy_q_values(w, batch["next_obs"]).max(axis=1)
    expected = batch["reward"] + batch["discount"] * q_next - q[np.arange(len(q)), batch["action"]]
    np.testing.assert_allclose(actor.priority_td(batch), expected, rtol=1e-4, atol=1e-4)


def test_actor_keeps_acting_while_a_parameter_pull_is_pending_and_tags_items_with_versions(
    small_config,
):
    """The first pull blocks (version 1); later pulls are asynchronous: while the
    learner has not answered, the actor keeps stepping on the weights it has;
    once the answer arrives, later items carry the newer version. Per env slot,
    in acting order, the version never goes back."""
    small_config.actor.params_update_period = 40
    src = versioned_source(small_config.learner.hidden_sizes, hold_after=1)
    writer = RecordingWriter()
    actor = VectorActor(small_config, 0, src, writer)
    steps = 0

    def step_until(condition):
        nonlocal steps
        actor.step()
        steps += 1
        return condition()

    # The second pull is issued after 40 env steps and held by the source.
    wait_until(lambda: step_until(src.held.is_set), 60, "the actor to request new parameters", 0)
    for _ in range(100):  # held the whole time: step() never waits for the pull
        actor.step()
    assert src.held.is_set() and src.calls == 2
    assert {int(v) for b, _ in writer.batches for v in b["version"]} == {1}
    src.hold_after = None
    src.release.set()
    wait_until(
        lambda: step_until(lambda: int(writer.batches[-1][0]["version"].max()) >= 3),
        60,
        "items acted with version 3 (two pulls answered)",
        0,
    )
    versions = np.concatenate([b["version"] for b, _ in writer.batches])
    slots = np.concatenate([b["slot"] for b, _ in writer.batches])
    assert versions[0] == 1 and set(versions.tolist()) <= set(range(1, src.calls + 1))
    for slot in range(small_config.actor.envs_per_actor):
        # Rows of one slot come out oldest first (NStepAccumulator), so this is acting order.
        assert np.all(np.diff(versions[slots == slot]) >= 0), slot


def test_actor_uses_its_slice_of_the_epsilon_ladder(small_config):
    small_config.actor.num_actors = 3
    actor = VectorActor(
        small_config, 1, versioned_source(small_config.learner.hidden_sizes), RecordingWriter()
    )
    np.testing.assert_array_equal(actor.epsilons, slot_epsilons(1, 4, 3, 0.4, 7.0))


def test_heartbeat_says_inserting_while_the_actor_writes_and_acting_after(small_config):
    """The doctor's view of an actor (apex.heartbeat.Heartbeat.follow): a beat taken
    during an insert says INSERTING since the insert began; after it, ACTING since it ended."""
    from apex import heartbeat as hb

    beat = hb.Heartbeat(None, "actor_0", period=0)  # beats only when asked
    seen = []

    class BeatingWriter(RecordingWriter):
        def write(self, batch, priorities):
            seen.append(beat.beat())  # what a beat sent from the heartbeat thread now says
            super().write(batch, priorities)

    actor = VectorActor(
        small_config,
        0,
        versioned_source(small_config.learner.hidden_sizes),
        BeatingWriter(),
        heartbeat=beat,
    )
    beat.enter(hb.ACTING)  # as the actor node does once its actor is made
    before = beat.beat()
    assert before["state"] == hb.ACTING and before["state_since"] == beat.since  # no insert yet
    while not seen:
        actor.step()
    assert seen[0]["state"] == hb.INSERTING
    assert seen[0]["state_since"] <= seen[0]["time"]
    after = beat.beat()
    assert after["state"] == hb.ACTING and after["state_since"] >= seen[0]["state_since"]
    beat.enter(hb.WAITING_PARAMS)  # the node's own states are reported as they are
    assert beat.beat()["state"] == hb.WAITING_PARAMS
