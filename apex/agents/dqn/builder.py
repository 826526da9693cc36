"""Ape-X DQN's builder: n-step transitions, a (dueling) Q-network, double-Q loss."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from apex.agents.builder import AgentBuilder

TRANSITIONS_TABLE = "transitions"


class ApexDQNBuilder(AgentBuilder):
    """Ape-X DQN (Horgan et al. 2018): prioritized n-step transitions with initial
    priorities from the actors, double-Q targets, Huber loss."""

    name = "apex_dqn"
    table = TRANSITIONS_TABLE
    item_unit = "transitions"
    recurrent = False

    def item_signature(self, config, spec):
        from apex.replay.tables import (  # TensorFlow: not on import
            frame_transition_signature,
            row_signature,
            stores_frames,
            stores_rows,
            transition_signature,
        )

        if stores_frames(config, spec):  # each frame stored once
            return frame_transition_signature(spec, config.replay.frame_compression)
        if stores_rows(config, spec):  # one column per item
            return row_signature(spec)
        return transition_signature(spec)

    def input_transform(self, config, spec) -> Callable[[dict], dict]:
        import tensorflow as tf  # not on import: validation and planning stay light

        from apex.replay.tables import unpack_transitions  # TensorFlow: not on import

        obs = (tuple(spec.observation_shape), spec.observation_dtype)
        return functools.partial(unpack_transitions, xp=tf, obs=obs)

    def make_writer(self, client, actor_id, epsilons, slot_offset, should_stop):
        from apex.replay.writer import TransitionWriter  # Reverb: not on import

        return TransitionWriter(
            client,
            self.table,
            actor_id,
            epsilons,
            slot_offset=slot_offset,
            should_stop=should_stop,
        )

    def acting_network(self):
        from apex.agents.dqn.networks import ACTING  # TensorFlow: not on import

        return ACTING

    def make_actor(self, config, actor_id, variable_source, writer, **kwargs: Any):
        from apex.agents.dqn.acting import VectorActor  # TensorFlow: not on import

        return VectorActor(config, actor_id, variable_source, writer, **kwargs)

    def loss(self, config, online, target, data, weights):
        from apex.agents.dqn.losses import dqn_loss  # TensorFlow: not on import

        return dqn_loss(online, target, data, weights, config.learner.huber_delta)
