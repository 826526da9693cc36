"""The rate-limit planner: what the replay and learner settings mean together
(the launch line), and the refusals of settings under which the rate limiter
would never let the learner or the actors through. Per-agent quantities (env
steps per item, trained steps per item, the item's unit) come from the agent's
builder (apex.agents), never from a switch on its name.
"""

from __future__ import annotations

from apex.agents import get_builder
from apex.config import ApexConfig, effective_error_buffer
from apex.errors import ConfigError
from apex.replay.shards import actors_of_shard, shard_config, shard_rule


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
    """The replay and learner settings read together, as the launch line states them.

    With replay.num_shards S > 1 every number is a shard's (each shard has its
    own table and rate limiter, apex.replay.shards.shard_config), prefixed with
    "S shards (actor i writes to shard i % S), each: "."""
    num_shards = int(config.replay.num_shards)
    if num_shards == 1:
        return _plan(config, "learner starts at", "their inserts wait", "its samples wait")
    return f"{num_shards} shards ({shard_rule(num_shards)}), each: " + _plan(
        shard_config(config),
        "learner samples a shard from",
        "their inserts to it wait",
        "its samples of that shard wait (it samples another shard meanwhile)",
    )


def _plan(config: ApexConfig, starts: str, inserts_wait: str, samples_wait: str) -> str:
    r, lc = config.replay, config.learner
    spi = float(r.samples_per_insert)
    buffer = effective_error_buffer(r, lc.batch_size)
    per_item = env_steps_per_item(config)
    unit = get_builder(config).item_unit
    return (
        f"{starts} {r.min_size:,} {unit} (~{r.min_size * per_item:,.0f} env steps); "
        f"then {spi:g} samples per insert = {spi / lc.batch_size:.3g} SGD steps per item, "
        f"each env step used ~{env_step_replay_ratio(config):.3g} times; actors may run "
        f"~{buffer / spi:,.0f} items ahead of that ratio (error buffer {buffer:g}) before "
        f"{inserts_wait}, and the learner as far behind before {samples_wait}"
    )


def check_rate_limits(c: ApexConfig) -> None:
    """Refuses settings under which the rate limiter would never let the learner
    (or the actors) through; with replay.num_shards > 1, of any shard."""
    r, s = c.replay, c.stop
    per_item = env_steps_per_item(c)
    if int(r.num_shards) > 1:
        check_shards(c)
    elif s.max_actor_steps is not None:
        items = s.max_actor_steps / per_item
        if items < r.min_size:
            raise ConfigError(
                "replay.min_size",
                r.min_size,
                f"at most the {items:,.0f} items that stop.max_actor_steps={s.max_actor_steps:,} "
                "env steps can insert, or the program stops before the learner samples once",
            )


def check_shards(c: ApexConfig) -> None:
    """The refusals of `check_rate_limits` and `validate` applied to each shard of
    replay.num_shards > 1 (apex.replay.shards: a shard holds capacity // S items,
    min_size ceil(min_size / S), error_buffer / S; actor i writes to shard i % S)."""
    r, lc, s = c.replay, c.learner, c.stop
    num, actors = int(r.num_shards), int(c.actor.num_actors)
    if num > actors:
        raise ConfigError(
            "replay.num_shards",
            num,
            f"at most actor.num_actors ({actors}): actor i writes to shard i % num_shards, so "
            "a shard without an actor would never reach its min_size",
        )
    if r.port is not None and int(r.port) + num - 1 > 65535:
        raise ConfigError(
            "replay.port",
            r.port,
            f"None or a port in [1, {65536 - num}]: shard s listens on replay.port + s",
        )
    shard = shard_config(c).replay
    each = f"replay.capacity // replay.num_shards = {r.capacity:,} // {num}"
    if lc.batch_size > shard.capacity:
        raise ConfigError(
            "learner.batch_size",
            lc.batch_size,
            f"at most a shard's capacity, {each} = {shard.capacity:,} (every batch comes whole "
            "from one shard)",
        )
    if shard.min_size > shard.capacity:
        raise ConfigError(
            "replay.min_size",
            r.min_size,
            f"a shard's min_size, ceil(replay.min_size / {num}) = {shard.min_size:,}, at most a "
            f"shard's capacity, {each} = {shard.capacity:,}, or the learner could never sample it",
        )
    if r.error_buffer is not None:
        need = max(2.0 * max(1.0, r.samples_per_insert), float(lc.batch_size))
        if shard.error_buffer < need:
            raise ConfigError(
                "replay.error_buffer",
                r.error_buffer,
                f"None or >= {need * num:g}: each shard's buffer, replay.error_buffer / {num} "
                f"= {shard.error_buffer:g}, must be >= {need:g} (2 * max(1, samples_per_insert) "
                "and >= learner.batch_size), or its rate limiter blocks the learner in the "
                "middle of a batch",
            )
    if s.max_actor_steps is not None:
        # Actors step alike: shard s gets the share of env steps of its actors.
        fewest = min(len(actors_of_shard(i, actors, num)) for i in range(num))
        items = s.max_actor_steps / env_steps_per_item(c) * fewest / actors
        if items < shard.min_size:
            raise ConfigError(
                "replay.min_size",
                r.min_size,
                f"a shard's min_size, ceil(replay.min_size / {num}) = {shard.min_size:,}, at "
                f"most the {items:,.0f} items that the {fewest} of {actors} actors writing to "
                f"a shard (actor i writes to shard i % {num}) insert in "
                f"stop.max_actor_steps={s.max_actor_steps:,} env steps, or the program stops "
                "before the learner samples that shard once",
            )
