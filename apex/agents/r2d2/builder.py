"""R2D2's builder: overlapping sequences with stored LSTM state, a recurrent
Q-network, burn-in and value-rescaled n-step targets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apex.agents.builder import AgentBuilder
from apex.errors import ConfigError

SEQUENCES_TABLE = "sequences"


class R2D2Builder(AgentBuilder):
    """R2D2 (Kapturowski et al. 2019): prioritized sequences of
    `r2d2.sequence_length` steps every `r2d2.sequence_period`, stored recurrent
    state, burn-in, eta-mixed sequence priorities."""

    name = "r2d2"
    table = SEQUENCES_TABLE
    item_unit = "sequences"
    recurrent = True

    def env_steps_per_item(self, config) -> float:
        return float(config.r2d2.sequence_period)

    def trained_steps_per_item(self, config) -> float:
        q = config.r2d2
        return float(q.sequence_length - q.burn_in)

    def validate(self, config) -> None:
        q = config.r2d2
        if q.sequence_period > q.sequence_length:
            raise ConfigError(
                "r2d2.sequence_period",
                q.sequence_period,
                f"at most r2d2.sequence_length ({q.sequence_length}); a larger period skips steps",
            )
        if q.burn_in >= q.sequence_length - 1:
            raise ConfigError(
                "r2d2.burn_in",
                q.burn_in,
                f"less than r2d2.sequence_length - 1 ({q.sequence_length - 1}), so that some "
                "steps are trained",
            )

    def item_signature(self, config, spec):
        from apex.replay.tables import (  # TensorFlow: not on import
            frame_sequence_signature,
            sequence_signature,
            sequence_stores_frames,
        )

        q = config.r2d2
        if sequence_stores_frames(config, spec):  # each observation stored once
            return frame_sequence_signature(
                spec,
                q.sequence_length,
                q.lstm_size,
                q.sequence_period,
                config.replay.frame_compression,
            )
        return sequence_signature(spec, q.sequence_length, q.lstm_size)

    def input_transform(self, config, spec) -> Callable[[dict], dict]:
        """Sequences of the frame layout back to sequence_signature's fields
        (apex.replay.tables.unpack_sequences); packed ones pass as they are."""
        import tensorflow as tf  # not on import: validation and planning stay light

        from apex.replay.tables import unpack_sequences  # TensorFlow: not on import

        obs = ((config.r2d2.sequence_length, *spec.observation_shape), spec.observation_dtype)
        return lambda data: unpack_sequences(data, tf, obs)

    def make_writer(self, client, actor_id, epsilons, slot_offset, should_stop):
        from apex.replay.writer import SequenceWriter  # Reverb: not on import

        return SequenceWriter(
            client,
            self.table,
            actor_id,
            epsilons,
            slot_offset=slot_offset,
            should_stop=should_stop,
        )

    def acting_network(self):
        from apex.agents.r2d2.networks import ACTING  # TensorFlow: not on import

        return ACTING

    def make_actor(self, config, actor_id, variable_source, writer, **kwargs: Any):
        from apex.agents.r2d2.acting import RecurrentActor  # TensorFlow: not on import

        return RecurrentActor(config, actor_id, variable_source, writer, **kwargs)

    def loss(self, config, online, target, data, weights):
        from apex.agents.r2d2.losses import r2d2_loss  # TensorFlow: not on import

        return r2d2_loss(online, target, data, weights, config)
