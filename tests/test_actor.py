"""The vector actor: one batched forward pass per step, n-step items with provenance."""

import time

import numpy as np

from apex.agents.dqn.acting import VectorActor
from apex.agents.dqn.networks import QNetwork, numpy_q_values
from apex.exploration import slot_epsilons


class RecordingWriter:
    def __init__(self):
        self.batches = []

    def write(self, batch, priorities):
        self.batches.append((batch, np.asarray(priorities)))


class VersionedSource:
    """A variable source whose version goes up by one per call."""

    def __init__(self, hidden):
        self.net = QNetwork(4, 2, hidden, seed=0)
        self.calls = 0

    def get_variables(self):
        self.calls += 1
        return self.calls, self.net.get_weights(), {"max_priority": 9.0}


def test_actor_writes_nstep_items_with_actor_td_priorities_and_provenance(small_config):
    src = VersionedSource(small_config.learner.hidden_sizes)
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
            prios, np.abs(batch["td"]) + small_config.replay.priority_epsilon, rtol=1e-5
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
    src = VersionedSource(small_config.learner.hidden_sizes)
    writer = RecordingWriter()
    actor = VectorActor(small_config, 0, src, writer)
    for _ in range(60):
        actor.step()
    w = src.net.get_weights()
    batch, _ = writer.batches[-1]
    q = numpy_q_values(w, batch["obs"])
    q_next = numpy_q_values(w, batch["next_obs"]).max(axis=1)
    expected = batch["reward"] + batch["discount"] * q_next - q[np.arange(len(q)), batch["action"]]
    np.testing.assert_allclose(batch["td"], expected, rtol=1e-4, atol=1e-4)


def test_actor_pulls_new_parameters_without_stalling_and_records_versions(small_config):
    small_config.actor.params_update_period = 40
    src = VersionedSource(small_config.learner.hidden_sizes)
    writer = RecordingWriter()
    actor = VectorActor(small_config, 0, src, writer)
    for _ in range(200):
        actor.step()
        time.sleep(0.001)
    versions = np.concatenate([b["version"] for b, _ in writer.batches])
    assert versions.min() == 1 and versions.max() > 1  # acted first with v1, then newer
    assert np.all(np.diff(versions) >= 0) or len(set(versions.tolist())) > 1
    assert src.calls > 2


def test_actor_uses_its_slice_of_the_epsilon_ladder(small_config):
    small_config.actor.num_actors = 3
    actor = VectorActor(
        small_config, 1, VersionedSource(small_config.learner.hidden_sizes), RecordingWriter()
    )
    np.testing.assert_array_equal(actor.epsilons, slot_epsilons(1, 4, 3, 0.4, 7.0))
