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
        from apex.replay.tables import (
            frame_transition_signature,
            stores_frames,
            transition_signature,
        )

        if stores_frames(config, spec):  # each frame stored once (issue 16)
            return frame_transition_signature(spec, config.replay.frame_compression)
        return transition_signature(spec)

    def input_transform(self, config, spec) -> Callable[[dict], dict]:
        import tensorflow as tf

        from apex.replay.tables import unpack_transitions

        obs = (tuple(spec.observation_shape), spec.observation_dtype)
        return functools.partial(unpack_transitions, xp=tf, obs=obs)

    def make_writer(self, client, actor_id, epsilons, slot_offset, should_stop):
        from apex.replay.writer import TransitionWriter

        return TransitionWriter(
            client,
            actor_id,
            epsilons,
            slot_offset=slot_offset,
            table=self.table,
            should_stop=should_stop,
        )

    def make_network(self, config, spec, seed: int = 0):
        from apex.agents.dqn.networks import QNetwork

        lc = config.learner
        return QNetwork(
            spec.observation_shape,
            spec.num_actions,
            lc.hidden_sizes,
            dueling=lc.dueling,
            seed=seed,
            torso=lc.torso,
            conv_layers=lc.conv_layers,
            conv_channels=lc.conv_channels,
            observation_scale=spec.observation_scale,
        )

    def make_actor(self, config, actor_id, variable_source, writer, **kwargs: Any):
        from apex.agents.dqn.acting import VectorActor

        return VectorActor(config, actor_id, variable_source, writer, **kwargs)

    def loss(self, config, online, target, data, weights):
        from apex.agents.dqn.losses import dqn_loss

        return dqn_loss(online, target, data, weights, config.learner.huber_delta)
