"""AgentBuilder: everything an agent supplies to the program and the generic learner.

The program (launch/program.py), the generic learner (apex.learner), the
evaluator, the inference node and the rate-limit planner ask the agent's
builder; none of them switches on the agent's name. The builder owns the
agent's replay table (its name, its item signature: `make_tables`), its
writer, its network and what acting runs of it (`acting_network`), its actor
and its loss, the way Acme's builders make their replay tables. An agent is one
folder (`apex/agents/<name>/`: networks, losses, acting, builder) and one line
in the registry (`apex.agents.BUILDERS`); README "Adding an agent" walks
through it.

Builders are stateless and cheap to import: TensorFlow and Reverb are
imported inside the methods that need them (the only deferred imports here),
so config validation and the launcher's planning lines stay light.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from apex.config import ApexConfig
from apex.roles import ItemWriter, VariableSource
from apex.specs import EnvSpec

if TYPE_CHECKING:  # pragma: no cover - typing only
    import reverb
    import tensorflow as tf

    from apex.agents.policy import ActingNetwork, ActingPolicy


class AgentBuilder(abc.ABC):
    """The parts of one agent. Subclass it in `apex/agents/<name>/builder.py`.

    Attributes:
      name: the registry key, `config.agent`.
      table: the Reverb table the agent writes and samples.
      item_unit: what one item is, in words ('transitions', 'sequences').
      recurrent: whether the acting policy carries a state per env slot.
    """

    name: str = ""
    table: str = ""
    item_unit: str = "items"
    recurrent: bool = False

    # ------------------------------------------------------------ planning
    def env_steps_per_item(self, config: ApexConfig) -> float:
        """Env steps (per env slot) that yield one replay item."""
        return 1.0

    def trained_steps_per_item(self, config: ApexConfig) -> float:
        """Env steps of one item that the loss trains on (the replay ratio's factor)."""
        return 1.0

    def validate(self, config: ApexConfig) -> None:  # noqa: B027 - optional hook
        """Agent-specific config checks; raise apex.errors.ConfigError (field, value, valid)."""

    # -------------------------------------------------------------- replay
    @abc.abstractmethod
    def item_signature(self, config: ApexConfig, spec: EnvSpec) -> dict[str, tf.TensorSpec]:
        """The signature of one stored item."""

    def input_transform(self, config: ApexConfig, spec: EnvSpec) -> Callable[[dict], dict] | None:
        """Maps a sampled batch (tf) of `config`'s items on envs of `spec` to
        the named fields the loss reads (None: as stored). It is traced without
        AutoGraph (apex.replay.dataset): branch on Python values only."""
        return None

    def make_tables(self, config: ApexConfig, spec: EnvSpec) -> list[reverb.Table]:
        """The agent's replay tables: one prioritized FIFO table `table` of
        `item_signature` items (sized by the config of one shard)."""
        from apex.replay.tables import make_table  # Reverb and TF: not on import

        return [make_table(self.table, self.item_signature(config, spec), config)]

    @abc.abstractmethod
    def make_writer(
        self,
        client: Any,
        actor_id: int,
        epsilons: np.ndarray,
        slot_offset: int,
        should_stop: Callable[[], bool],
    ) -> ItemWriter:
        """The writer (a context manager) an actor writes its items to `table` through."""

    # ------------------------------------------------------------- network
    @abc.abstractmethod
    def acting_network(self) -> ActingNetwork:
        """The agent's network as acting runs it: the TF module, its numpy step
        for MLP torsos, the state an episode starts from (apex.agents.policy)."""

    def make_network(self, config: ApexConfig, spec: EnvSpec, seed: int = 0) -> tf.Module:
        """The Q-network (the learner's online and target nets, a conv actor's copy)."""
        return self.acting_network().make_network(config, spec, seed)

    def make_policy(self, config: ApexConfig, spec: EnvSpec) -> ActingPolicy:
        """The acting policy (the evaluator's, the inference node's, a trained policy's)."""
        from apex.agents.policy import ActingPolicy  # TensorFlow: not on import

        return ActingPolicy(self.acting_network(), config, spec)

    # --------------------------------------------------------------- roles
    @abc.abstractmethod
    def make_actor(
        self,
        config: ApexConfig,
        actor_id: int,
        variable_source: VariableSource,
        writer: ItemWriter,
        **kwargs: Any,
    ) -> Any:
        """The actor (apex.agents.acting.Actor) stepping `config.actor.envs_per_actor` envs."""

    @abc.abstractmethod
    def loss(
        self,
        config: ApexConfig,
        online: tf.Module,
        target: tf.Module,
        data: dict,
        weights: tf.Tensor,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """(loss, new priorities [B], mean Q) of a batch: the agent's part of the SGD step.

        `weights` [B] are the importance-sampling weights; the generic learner
        does sampling, gradients, clipping, the optimiser, the target network
        and priority updates.
        """
