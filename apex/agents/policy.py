"""Q-values for actors and the evaluator, from the learner's flat weight list.

MLP torsos run in numpy (20x faster than a small-batch tf.function here);
conv torsos run in a local TF copy of the network. Recurrent policies carry
an (h, c) state per env slot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from apex.agents import get_builder, layers
from apex.agents.dqn.networks import numpy_q_values
from apex.agents.r2d2.networks import numpy_recurrent_step
from apex.config import ApexConfig
from apex.envs import EnvSpec
from apex.inference import zero_state

State = tuple[np.ndarray, np.ndarray]


def make_network(config: ApexConfig, spec: EnvSpec, seed: int = 0) -> tf.Module:
    """The Q-network of `config`'s agent (its builder's make_network)."""
    return get_builder(config).make_network(config, spec, seed=seed)


class ActingPolicy:
    """q, state = policy(obs, state): Q-values [E, A] of a batch of observations.

    Call set_weights() with the learner's weights before the first call.
    """

    def __init__(self, config: ApexConfig, spec: EnvSpec):
        self.recurrent = get_builder(config).recurrent
        self._dueling = config.learner.dueling
        self._lstm_size = config.r2d2.lstm_size
        lc = config.learner
        self._num_torso = layers.num_torso_arrays(lc.torso, lc.hidden_sizes, lc.conv_layers)
        self._weights: list[np.ndarray] | None = None
        self._net: tf.Module | None = None
        if config.learner.torso != "mlp":
            self._net = make_network(config, spec)
            if self.recurrent:
                self._tf_step = tf.function(self._net.step)
            else:
                self._tf_step = tf.function(self._net.__call__)

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        if self._net is not None:
            self._net.set_weights(weights)
        else:
            self._weights = [np.asarray(w, np.float32) for w in weights]

    def initial_state(self, batch_size: int) -> State | None:
        return zero_state(batch_size, self._lstm_size) if self.recurrent else None

    def __call__(self, obs: np.ndarray, state: State | None = None):
        if self._net is not None:
            if self.recurrent:
                q, (h, c) = self._tf_step(obs, state)
                return q.numpy(), (h.numpy(), c.numpy())
            return self._tf_step(obs).numpy(), None
        assert self._weights is not None, "set_weights() first"
        if self.recurrent:
            return numpy_recurrent_step(self._weights, obs, state, self._num_torso, self._dueling)
        return numpy_q_values(self._weights, obs, self._dueling), None
