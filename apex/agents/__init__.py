"""Agents: one folder per agent (networks / losses / acting / builder) and one
registry line here.

`get_builder(config)` is how the program, the learner, the tables and the
planner find what an agent supplies (apex.agents.builder.AgentBuilder).
Importing this package does not import TensorFlow.
"""

from __future__ import annotations

from typing import Any

from apex.agents.builder import AgentBuilder
from apex.agents.dqn.builder import ApexDQNBuilder
from apex.agents.r2d2.builder import R2D2Builder
from apex.errors import ConfigError

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


__all__ = ["AgentBuilder", "BUILDERS", "get_builder"]
