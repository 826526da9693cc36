"""Agent builders: the registry is the one place an agent is named. A third
agent registered there is accepted by validation, drives the planner, and
trains in a real program (test_mt) with its own table and its own loss."""

from __future__ import annotations

import numpy as np
import pytest

from apex.agents import BUILDERS, get_builder
from apex.agents.dqn.builder import ApexDQNBuilder
from apex.config import ApexConfig
from apex.errors import ConfigError
from apex.planning import rate_limit_plan
from apex.validation import validate

MARK_PRIORITY = 3.25  # every priority MyDQNBuilder's loss returns


class MyDQNBuilder(ApexDQNBuilder):
    """Ape-X DQN with its own table, a stated env-step cost per item, its own
    config check, and a loss whose priorities are a constant (recognisable)."""

    name = "my_dqn"
    table = "my_transitions"
    item_unit = "widgets"

    def env_steps_per_item(self, config) -> float:
        return 2.0

    def validate(self, config) -> None:
        if config.learner.dueling:
            raise ConfigError("learner.dueling", True, "False for my_dqn")

    def loss(self, config, online, target, data, weights):
        import tensorflow as tf

        loss, priorities, q = super().loss(config, online, target, data, weights)
        return loss, tf.fill(tf.shape(priorities), MARK_PRIORITY), q


@pytest.fixture
def my_dqn(monkeypatch):
    monkeypatch.setitem(BUILDERS, MyDQNBuilder.name, MyDQNBuilder())
    c = ApexConfig()
    c.agent = MyDQNBuilder.name
    c.learner.dueling = False
    return c


def test_an_unregistered_agent_is_refused_naming_the_registered_ones():
    c = ApexConfig()
    c.agent = "my_dqn"
    with pytest.raises(ConfigError, match=r"agent='my_dqn' is invalid: expected one of \["):
        validate(c)
    assert set(BUILDERS) == {"apex_dqn", "r2d2"}


def test_a_registered_agent_is_validated_by_its_builder_and_drives_the_planner(my_dqn):
    validate(my_dqn)
    assert get_builder(my_dqn).table == "my_transitions"
    plan = rate_limit_plan(my_dqn)
    min_size = my_dqn.replay.min_size
    assert f"learner starts at {min_size:,} widgets (~{2 * min_size:,} env steps)" in plan
    my_dqn.learner.dueling = True
    with pytest.raises(ConfigError, match="learner.dueling=True is invalid: expected False"):
        validate(my_dqn)


def test_the_item_signature_and_tables_come_from_the_builder(my_dqn):
    from apex.agents import make_tables, table_name
    from apex.envs import env_spec

    assert table_name(my_dqn) == "my_transitions"
    (table,) = make_tables(my_dqn, env_spec(my_dqn.env))
    assert table.name == "my_transitions"


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_registered_agent_trains_in_a_program_with_its_table_and_its_loss(my_dqn, tmp_path):
    import launchpad as lp
    from absl.testing import absltest

    from launch.nodes import LearnerNode
    from launch.program import make_program
    from launch.testing import launch_stepped
    from tests.procs import threads_now, wait_no_threads_left, wait_until

    c = my_dqn
    c.actor.num_actors = 1
    c.actor.envs_per_actor = 4
    c.replay.capacity = 10_000
    c.replay.min_size = 100
    c.replay.error_buffer = 1e7  # the learner is stepped by hand
    c.learner.batch_size = 32
    c.learner.hidden_sizes = (16, 16)
    c.evaluation.episodes = 1
    c.logging.progress_period_seconds = 0
    c.stop.max_wall_seconds = 3600
    validate(c)
    before = threads_now()
    case = absltest.TestCase()
    case.setUp()
    try:
        program = make_program(c, run_dir=str(tmp_path))
        replay_node = [
            n for n in program.get_all_nodes() if isinstance(n, lp.MultiThreadingColocation)
        ][0].nodes[0]
        learner = launch_stepped(program, case, LearnerNode)
        replay = replay_node.create_handle().dereference()
        wait_until(
            lambda: replay.server_info()["my_transitions"].current_size >= c.replay.min_size,
            240,
            "the actor to fill the builder's table",
        )
        for _ in range(5):
            learner.step()
        assert learner.get_steps() == 5
        keys, _, sent = learner.last_priority_update()
        assert len(keys) == c.learner.batch_size
        # The builder's loss ran: its priorities, plus the replay's priority epsilon.
        np.testing.assert_allclose(sent, MARK_PRIORITY + c.replay.priority_epsilon, rtol=1e-6)
    finally:
        case.doCleanups()
    # The cleanups closed everything the program started in this process.
    wait_no_threads_left(before)
