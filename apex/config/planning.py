"""The rate-limit planner: what the replay and learner settings mean together
(the launch line), and the refusals of settings under which the rate limiter
would never let the learner or the actors through. Per-agent quantities (env
steps per item, trained steps per item, the item's unit) come from the agent's
builder (apex.agents), never from a switch on its name.
"""

from __future__ import annotations

from apex.agents import get_builder
from apex.config.schema import ApexConfig, ReplayConfig
from apex.errors import ConfigError


def effective_error_buffer(replay: ReplayConfig, batch_size: int) -> float:
    """The rate limiter's error buffer: the configured one, or a safe default."""
    if replay.error_buffer is not None:
        return float(replay.error_buffer)
    spi = max(1.0, replay.samples_per_insert)
    return float(max(10 * batch_size, replay.min_size * spi * 0.5, 4 * spi))


def env_step_replay_ratio(config: ApexConfig) -> float:
    """How many times the learner trains on each env step, on average, at the
    target samples_per_insert: SPI for Ape-X (one item per env step); for R2D2
    SPI x trained steps per sequence (L - burn_in) / new env steps per sequence (P)."""
    b = get_builder(config)
    spi = float(config.replay.samples_per_insert)
    return spi * b.trained_steps_per_item(config) / b.env_steps_per_item(config)


def env_steps_per_item(config: ApexConfig) -> float:
    """Env steps (per env slot) that yield one replay item: 1 for Ape-X's
    transitions, r2d2.sequence_period for R2D2's sequences."""
    return float(get_builder(config).env_steps_per_item(config))


def rate_limit_plan(config: ApexConfig) -> str:
    """The replay and learner settings read together, as the launch line states them."""
    r, lc = config.replay, config.learner
    spi = float(r.samples_per_insert)
    buffer = effective_error_buffer(r, lc.batch_size)
    per_item = env_steps_per_item(config)
    unit = get_builder(config).item_unit
    return (
        f"learner starts at {r.min_size:,} {unit} (~{r.min_size * per_item:,.0f} env steps); "
        f"then {spi:g} samples per insert = {spi / lc.batch_size:.3g} SGD steps per item, "
        f"each env step used ~{env_step_replay_ratio(config):.3g} times; actors may run "
        f"~{buffer / spi:,.0f} items ahead of that ratio (error buffer {buffer:g}) before "
        "their inserts wait, and the learner as far behind before its samples wait"
    )


def check_rate_limits(c: ApexConfig) -> None:
    """Refuses settings under which the rate limiter would never let the learner
    (or the actors) through."""
    r, s = c.replay, c.stop
    per_item = env_steps_per_item(c)
    if s.max_actor_steps is not None:
        items = s.max_actor_steps / per_item
        if items < r.min_size:
            raise ConfigError(
                "replay.min_size",
                r.min_size,
                f"at most the {items:,.0f} items that stop.max_actor_steps={s.max_actor_steps:,} "
                "env steps can insert, or the program stops before the learner samples once",
            )
