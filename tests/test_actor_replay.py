"""Each shipped config's actor writes items a real Reverb table of that config
accepts, and its evaluator's policy runs (conv torsos in TF, MLP in numpy)."""

import os

import numpy as np
import pytest
import reverb

from apex.agents import make_network, make_policy, make_tables, table_name
from apex.config import load_config_file
from apex.envs import env_spec
from apex.evaluation import evaluate
from apex.exploration import slot_epsilons
from apex.replay.tables import unpack_item
from apex.replay.writer import SequenceWriter, TransitionWriter
from tests.fakes import FakeVariableSource

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ["apex_cartpole.py", "r2d2_cartpole_masked.py", "apex_atari.py", "r2d2_atari.py"]


def source(config, spec) -> FakeVariableSource:
    """The config's network's initial weights, at version 3."""
    return FakeVariableSource(make_network(config, spec, seed=0).get_weights(), version=3)


def shrunk(name):
    c = load_config_file(os.path.join(ROOT, "configs", name))
    c.actor.envs_per_actor = 2
    c.replay.capacity = 1000
    c.replay.min_size = 1
    c.replay.error_buffer = 1e7
    if c.agent == "r2d2":
        c.r2d2.sequence_length, c.r2d2.sequence_period, c.r2d2.burn_in = 8, 4, 2
        c.r2d2.lstm_size = 16
    if c.learner.torso == "conv":
        c.learner.hidden_sizes = (32,)
    return c


@pytest.mark.parametrize("name", CONFIGS)
def test_actor_items_fit_the_table_and_carry_provenance(name):
    from apex.agents.dqn.acting import VectorActor
    from apex.agents.r2d2.acting import RecurrentActor

    c = shrunk(name)
    spec = env_spec(c.env)
    server = reverb.Server(make_tables(c, spec))
    try:
        client = reverb.Client(f"localhost:{server.port}")
        eps = slot_epsilons(1, 2, c.actor.num_actors, c.actor.epsilon_base, c.actor.epsilon_alpha)
        writer_class = SequenceWriter if c.agent == "r2d2" else TransitionWriter
        actor_class = RecurrentActor if c.agent == "r2d2" else VectorActor
        with writer_class(client, table_name(c), 1, eps, slot_offset=2) as writer:
            actor = actor_class(c, 1, source(c, spec), writer)
            while actor.items_written < 4:
                actor.step()
            actor.close()
        table = table_name(c)
        info = client.server_info()[table]
        assert info.current_size == actor.items_written
        (s,) = client.sample(
            table, num_samples=1, emit_timesteps=False, unpack_as_table_signature=True
        )
        data = unpack_item(s.data)  # the stored columns, by field name
        assert int(data["actor"]) == 1 and int(data["slot"]) in (2, 3)
        assert int(data["version"]) == 3
        assert float(data["epsilon"]) in [pytest.approx(float(e)) for e in eps]
        assert np.asarray(data["obs"]).dtype == np.dtype(spec.observation_dtype)
        assert s.info.priority > 0
    finally:
        server.stop()


@pytest.mark.parametrize("name", CONFIGS)
def test_evaluation_runs_the_policy_of_each_config(name):
    c = shrunk(name)
    c.env.max_episode_steps = 30 if c.env.preprocessing == "atari" else None
    spec = env_spec(c.env)
    policy = make_policy(c, spec)
    policy.set_weights(source(c, spec).weights)
    returns = evaluate(c, policy, episodes=2, epsilon=0.0, seed=0)
    assert returns.shape == (2,) and np.all(np.isfinite(returns))
