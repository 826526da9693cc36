"""Q-values for actors and the evaluator, from the learner's flat weight list:
the generic acting policy over an agent's network, and an actor's own copy of it.

MLP torsos run in numpy (20x faster than a small-batch tf.function here);
conv torsos run in a local TF copy of the network. Recurrent policies carry
an (h, c) state per env slot. What differs between agents (the network, its
numpy step, the state an episode starts from) is the agent's `ActingNetwork`,
defined in its networks module and handed on by its builder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from apex import compat
from apex.config import ApexConfig
from apex.specs import EnvSpec
from apex.variables import VariableClient

State = tuple[np.ndarray, np.ndarray]
# One numpy forward step: (weights, observations [E, ...], state or None) -> (q [E, A], state or None).
NumpyStep = Callable[[Sequence[np.ndarray], np.ndarray, "State | None"], tuple[np.ndarray, Any]]


@dataclasses.dataclass(frozen=True)
class ActingNetwork:
    """An agent's Q-network as an acting policy runs it (apex.agents.dqn.networks.ACTING,
    apex.agents.r2d2.networks.ACTING; the builder's `acting_network`).

    Attributes:
      recurrent: whether the policy carries a state per env slot.
      make_network: (config, spec, seed) -> the TF module (a conv torso's copy;
        the learner's online and target nets).
      numpy_step: config -> its forward step in numpy, for MLP torsos.
      initial_state: (config, batch_size) -> the state an episode starts from
        (None for a feed-forward network).
    """

    recurrent: bool
    make_network: Callable[[ApexConfig, EnvSpec, int], tf.Module]
    numpy_step: Callable[[ApexConfig], NumpyStep]
    initial_state: Callable[[ApexConfig, int], State | None]


class ActingPolicy:
    """q, state = policy(obs, state): Q-values [E, A] of a batch of observations.

    Call set_weights() with the learner's weights before the first call.
    apex.agents.make_policy(config, spec) makes the one of `config`'s agent.
    """

    def __init__(self, network: ActingNetwork, config: ApexConfig, spec: EnvSpec):
        self.recurrent = network.recurrent
        self._initial_state = network.initial_state
        self._config = config
        self._weights: list[np.ndarray] | None = None
        self._net: tf.Module | None = None
        self._np_step = network.numpy_step(config)
        if config.learner.torso != "mlp":
            compat.share_function_rendezvous()  # a tf.function call per step: TF 2.8's leak
            self._net = network.make_network(config, spec, 0)
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
        return self._initial_state(self._config, batch_size)

    def __call__(self, obs: np.ndarray, state: State | None = None):
        if self._net is not None:
            if self.recurrent:
                q, (h, c) = self._tf_step(obs, state)
                return q.numpy(), (h.numpy(), c.numpy())
            return self._tf_step(obs).numpy(), None
        assert self._weights is not None, "set_weights() first"
        return self._np_step(self._weights, obs, state)


class LocalQ:
    """An actor's own network: pulls parameters every `update_period` env steps
    (apex.variables.VariableClient) and runs its batch locally. The other Q-value
    source of an actor is apex.inference.client.RemoteQ (central inference).

    Args:
      policy: the ActingPolicy it runs.
      variable_source: a VariableSource (apex.roles).
      update_period: env steps between two parameter pulls (actor.params_update_period).
      should_stop: checked while waiting for the first parameters.
    """

    def __init__(
        self,
        policy: ActingPolicy,
        variable_source: Any,
        update_period: int,
        should_stop: Callable[[], bool] | None = None,
    ):
        self._variables = VariableClient(variable_source, update_period, should_stop=should_stop)
        self._policy = policy
        self.recurrent = policy.recurrent

    @property
    def version(self) -> int:
        return self._variables.version

    @property
    def max_priority(self) -> float | None:
        return self._variables.max_priority

    @property
    def num_updates(self) -> int:
        return self._variables.num_updates

    def sync(self, env_steps: int) -> bool:
        """Loads newly arrived weights; True if the network changed."""
        self._variables.maybe_update(env_steps)
        if not self._variables.changed:
            return False
        self._policy.set_weights(self._variables.weights)
        self._variables.changed = False
        return True

    def initial_state(self, batch_size: int) -> State | None:
        return self._policy.initial_state(batch_size)

    def __call__(self, obs: np.ndarray, state: State | None = None):
        """(q, new state, version) of a batch of observations."""
        q, new_state = self._policy(obs, state)
        return q, new_state, self._variables.version

    def close(self) -> None:
        self._variables.close()
