"""Agents: one folder per agent (networks / losses / acting / builder) and one
registry line here.

`get_builder(config)` is how the program, the learner, the planner and the
tools find what an agent supplies (apex.agents.builder.AgentBuilder). The
functions below ask `config.agent`'s builder; nothing under apex.agents
imports this registry back (the actors and the acting policy get their
agent's parts from their own folder), so it sits on top of the agents.

This module is also the face launch/, tools/, bench/ and a user's script
import the agents through (`from apex.agents import X`); modules inside apex
import the concrete modules under apex/agents instead. Importing it imports no
TensorFlow: the names marked (lazy, TF) are resolved on first use (a PEP 562
`__getattr__`) and import TensorFlow then.

The registry: what `config.agent` supplies
    BUILDERS, get_builder(config)    the builders; the agent's builder (ConfigError names
                                     the choices); AgentBuilder is their protocol
    table_name(config)               the Reverb table its program writes and samples
    item_signature(config, spec)     the signature of that table's items
    make_tables(config, spec)        the replay server's tables
    make_network(config, spec, seed) the Q-network (learner, tools)
    make_policy(config, spec)        the acting policy (evaluator, inference node, tools)
    TRANSITIONS_TABLE, SEQUENCES_TABLE   the tables of Ape-X DQN and R2D2
Networks
    check_torso(config, spec)        refuses a torso the observations cannot take (light)
    QNetwork, RecurrentQNetwork      (lazy, TF) the Ape-X DQN and R2D2 Q-networks
Actors
    VectorActor, RecurrentActor      (lazy, TF) the Ape-X DQN and R2D2 actors: E envs
                                     stepped as one batch, their steps to a replay writer

Example (a policy for a config, as the tools make one):

    from apex import ApexConfig, env_spec
    from apex.agents import get_builder, make_policy

    config = ApexConfig()
    spec = env_spec(config.env)
    print(get_builder(config).table)   # "transitions" for Ape-X DQN
    policy = make_policy(config, spec)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apex.agents.builder import AgentBuilder
from apex.agents.dqn.builder import TRANSITIONS_TABLE, ApexDQNBuilder
from apex.agents.layers import check_torso
from apex.agents.r2d2.builder import SEQUENCES_TABLE, R2D2Builder
from apex.config import ApexConfig
from apex.errors import ConfigError
from apex.lazy import lazy_names
from apex.specs import EnvSpec

if TYPE_CHECKING:  # pragma: no cover - typing only
    import reverb
    import tensorflow as tf

    from apex.agents.dqn.acting import VectorActor
    from apex.agents.dqn.networks import QNetwork
    from apex.agents.policy import ActingPolicy
    from apex.agents.r2d2.acting import RecurrentActor
    from apex.agents.r2d2.networks import RecurrentQNetwork

# The registry: config.agent -> builder. Adding an agent adds one line here.
BUILDERS: dict[str, AgentBuilder] = {
    b.name: b
    for b in (
        ApexDQNBuilder(),
        R2D2Builder(),
    )
}


def get_builder(config_or_name: Any) -> AgentBuilder:
    """The builder of `config.agent` (or of an agent name); ConfigError names the choices."""
    name = config_or_name if isinstance(config_or_name, str) else config_or_name.agent
    try:
        return BUILDERS[name]
    except (KeyError, TypeError):
        raise ConfigError("agent", name, f"one of {sorted(BUILDERS)}") from None


def table_name(config: ApexConfig) -> str:
    """The table a program of `config` writes and samples (its agent's builder's)."""
    return get_builder(config).table


def item_signature(config: ApexConfig, spec: EnvSpec) -> dict[str, tf.TensorSpec]:
    """The signature of the items of `config`'s table (its agent's builder's)."""
    return get_builder(config).item_signature(config, spec)


def make_tables(config: ApexConfig, spec: EnvSpec) -> list[reverb.Table]:
    """The replay server's tables for `config` (its agent's builder's make_tables)."""
    return get_builder(config).make_tables(config, spec)


def make_network(config: ApexConfig, spec: EnvSpec, seed: int = 0) -> tf.Module:
    """The Q-network of `config`'s agent (its builder's make_network)."""
    return get_builder(config).make_network(config, spec, seed=seed)


def make_policy(config: ApexConfig, spec: EnvSpec) -> ActingPolicy:
    """The acting policy of `config`'s agent (its builder's make_policy)."""
    return get_builder(config).make_policy(config, spec)


# The lazy names (TensorFlow): name -> the module that defines it.
_LAZY: dict[str, str] = {
    "QNetwork": "apex.agents.dqn.networks",
    "RecurrentQNetwork": "apex.agents.r2d2.networks",
    "RecurrentActor": "apex.agents.r2d2.acting",
    "VectorActor": "apex.agents.dqn.acting",
}


__getattr__, __dir__ = lazy_names(globals(), _LAZY)


__all__ = [
    "BUILDERS",
    "SEQUENCES_TABLE",
    "TRANSITIONS_TABLE",
    "AgentBuilder",
    "QNetwork",
    "RecurrentActor",
    "RecurrentQNetwork",
    "VectorActor",
    "check_torso",
    "get_builder",
    "item_signature",
    "make_network",
    "make_policy",
    "make_tables",
    "table_name",
]
