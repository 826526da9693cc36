"""The learner against a real in-process Reverb server filled with real CartPole transitions."""

import numpy as np
import pytest
import reverb

from apex.envs import env_spec
from apex.learner import Learner
from apex.replay.tables import TRANSITIONS_TABLE
from apex.replay.writer import TransitionWriter
from tests.fakes import FakeVariableSource


def fill(address, config, n):
    from apex.agents.dqn.acting import VectorActor
    from apex.agents.dqn.networks import QNetwork

    client = reverb.Client(address)
    learner_like = FakeVariableSource(
        QNetwork(4, 2, config.learner.hidden_sizes, seed=1).get_weights(), version=0
    )
    with TransitionWriter(client, 0, np.full(config.actor.envs_per_actor, 0.5, np.float32)) as w:
        actor = VectorActor(config, 0, learner_like, w)
        while actor.items_written < n:
            actor.step()
        actor.close()
    return client


@pytest.mark.timeout(120)
def test_learner_steps_update_priorities_and_versions(reverb_server, small_config):
    address = f"localhost:{reverb_server.port}"
    client = fill(address, small_config, 400)
    learner = Learner(small_config, env_spec(small_config.env), address)
    learner.start_priority_updates()
    v0, w0, _ = learner.get_variables()
    assert v0 == 0
    for _ in range(5):
        metrics = learner.step()
    assert learner.steps == 5 and np.isfinite(metrics["loss"])
    keys, sampled_prios, new_prios = learner.last_update
    learner.flush_priorities()
    assert not np.allclose(sampled_prios, new_prios)  # the learner's |TD| differs from the actor's
    # The table now holds the learner's priorities for those keys.
    sent = dict(zip(keys.tolist(), new_prios.tolist()))
    seen = {}
    for s in client.sample(TRANSITIONS_TABLE, num_samples=2000, emit_timesteps=False):
        k = int(s.info.key)
        if k in sent:
            seen[k] = s.info.priority
    assert seen, "none of the updated keys was sampled back"
    for k, p in seen.items():
        assert p == pytest.approx(sent[k], rel=1e-5)
    # Versions: get_variables answers with the step count and new weights after a step.
    learner.step()
    v1, w1, info = learner.get_variables()
    assert v1 == 6
    assert any(not np.array_equal(a, b) for a, b in zip(w0, w1))
    assert info["max_priority"] > 0
    learner.close()


@pytest.mark.timeout(120)
def test_policy_lag_is_reported_for_sampled_batches(reverb_server, small_config):
    address = f"localhost:{reverb_server.port}"
    fill(address, small_config, 200)
    learner = Learner(small_config, env_spec(small_config.env), address)
    for _ in range(3):
        learner.step()
    row = learner.report(0.0, None)
    # Items were acted with version 0; the learner sampled them at versions 0, 1, 2.
    assert row["learner/policy_lag_max_steps"] == 2.0
    assert row["learner/steps"] == 3
    learner.close()
