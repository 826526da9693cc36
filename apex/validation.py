"""`validate(config)`: runs before anything launches and raises a ConfigError
naming the first invalid field, its value and what would be valid. Generic
field rules are a table here; an agent's own checks are its builder's
`validate` (apex.agents), the rate limiter's are apex.planning's.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from apex.agents import get_builder
from apex.config.schema import (
    CONV_CHANNELS,
    EVALUATION_WEIGHTS,
    INFERENCE_MODES,
    INSERT_PRIORITIES,
    PREPROCESSING,
    TORSOS,
    VECTORIZATION,
    ApexConfig,
    ClusterConfig,
    EnvConfig,
    InferenceConfig,
    LearnerConfig,
    ModelStoreConfig,
    R2D2Config,
)
from apex.errors import ConfigError
from apex.planning import check_rate_limits
from apex.tracking import check_sinks


def _check(cond: bool, field: str, value: Any, valid: str) -> None:
    if not cond:
        raise ConfigError(field, value, valid)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Field rules: (dotted path, kind, optional). Kinds: "int>=0", "int>=1",
# "num>0", "num>=0", "num in [0,1]", "num". Optional fields may be None.
_RULES: tuple[tuple[str, str, bool], ...] = (
    ("env.max_episode_steps", "int>=1", True),
    ("env.frame_skip", "int>=1", False),
    ("env.screen_size", "int>=1", False),
    ("env.frame_stack", "int>=1", False),
    ("env.noop_max", "int>=0", False),
    ("env.sticky_action_probability", "num in [0,1]", False),
    ("r2d2.sequence_length", "int>=2", False),
    ("r2d2.sequence_period", "int>=1", False),
    ("r2d2.burn_in", "int>=0", False),
    ("r2d2.lstm_size", "int>=1", False),
    ("r2d2.priority_eta", "num in [0,1]", False),
    ("r2d2.value_rescaling_epsilon", "num>=0", False),
    ("replay.capacity", "int>=1", False),
    ("replay.min_size", "int>=1", False),
    ("replay.samples_per_insert", "num>0", False),
    ("replay.priority_exponent", "num in [0,1]", False),
    ("replay.n_step", "int>=1", False),
    ("replay.num_shards", "int>=1", False),
    ("replay.discount", "num in [0,1]", False),
    ("replay.constant_priority", "num>0", False),
    ("replay.priority_epsilon", "num>0", False),
    ("actor.num_actors", "int>=1", False),
    ("actor.envs_per_actor", "int>=1", False),
    ("actor.epsilon_base", "num in [0,1]", False),
    ("actor.epsilon_alpha", "num>=0", False),
    ("actor.params_update_period", "int>=1", False),
    ("actor.report_period_seconds", "num>0", False),
    ("actor.max_restarts", "int>=0", False),
    ("actor.restart_backoff_seconds", "num>=0", False),
    ("inference.max_batch", "int>=1", False),
    ("model_store.keep_last", "int>=1", False),
    ("model_store.push_period_steps", "int>=1", False),
    ("cluster.model_store_cpus", "num>=0", False),
    ("inference.max_wait_ms", "num>=0", False),
    ("inference.params_period_seconds", "num>0", False),
    ("inference.call_timeout_seconds", "num>0", False),
    ("env.fault_every", "int>=1", True),
    ("checkpoint.period_seconds", "num>0", True),
    ("checkpoint.keep", "int>=1", False),
    ("checkpoint.max_program_restarts", "int>=0", False),
    ("checkpoint.crash_loop_seconds", "num>=0", False),
    ("learner.batch_size", "int>=1", False),
    ("learner.learning_rate", "num>0", False),
    ("learner.learning_rate_final", "num>0", True),
    ("learner.learning_rate_decay_steps", "int>=1", False),
    ("learner.adam_epsilon", "num>0", False),
    ("learner.max_grad_norm", "num>0", False),
    ("learner.huber_delta", "num>0", False),
    ("learner.target_update_period", "int>=1", False),
    ("learner.importance_exponent", "num in [0,1]", False),
    ("learner.num_sample_workers", "int>=1", False),
    ("learner.in_flight_batches", "int>=1", False),
    ("learner.prefetch_batches", "int>=0", False),
    ("learner.priority_update_period", "int>=1", False),
    ("learner.steps_per_call", "int>=1", False),
    ("evaluation.episodes", "int>=1", False),
    ("evaluation.epsilon", "num in [0,1]", False),
    ("evaluation.period_seconds", "num>0", False),
    ("evaluation.max_episode_steps", "int>=1", True),
    ("evaluation.average_decay", "num in (0,1)", False),
    ("stop.max_actor_steps", "int>=1", True),
    ("stop.max_learner_steps", "int>=1", True),
    ("stop.max_wall_seconds", "num>0", True),
    ("logging.progress_period_seconds", "num>=0", False),
    ("logging.metrics_period_seconds", "num>0", False),
    ("logging.heartbeat_period_seconds", "num>=0", False),
    ("logging.stall_seconds", "num>0", False),
    ("cluster.learner_cpus", "num>=0", False),
    ("cluster.replay_cpus", "num>=0", False),
    ("cluster.coordinator_cpus", "num>=0", False),
    ("cluster.actor_cpus", "num>=0", False),
    ("cluster.learner_gpus", "num>=0", False),
    ("cluster.start_timeout_seconds", "num>0", False),
    ("cluster.actor_lost_after_seconds", "num>0", True),
    ("seed", "int>=0", False),
)

_KINDS: dict[str, tuple[Any, str]] = {
    "int>=0": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "int>=1": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "int>=2": (lambda v: _is_int(v) and v >= 2, "an integer >= 2"),
    "num>0": (lambda v: _is_num(v) and v > 0, "a number > 0"),
    "num>=0": (lambda v: _is_num(v) and v >= 0, "a number >= 0"),
    "num in [0,1]": (lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "num in (0,1)": (lambda v: _is_num(v) and 0 < v < 1, "a number in (0, 1), e.g. 0.999"),
    "num": (_is_num, "a number"),
}


# Fields that only mean something with env.preprocessing='atari'.
ATARI_ONLY = (
    "frame_skip",
    "screen_size",
    "frame_stack",
    "noop_max",
    "terminal_on_life_loss",
    "sticky_action_probability",
)
_MODULE_NAME = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_]*)?$"
)


def _check_env(c: ApexConfig) -> None:
    env = c.env
    _check(
        isinstance(env.imports, (tuple, list))
        and all(isinstance(m, str) and _MODULE_NAME.match(m) for m in env.imports),
        "env.imports",
        env.imports,
        "a tuple of module names, each optionally with ':function' to call once it is "
        "imported, e.g. ('my_envs',) or ('minatar.gym:register_envs',)",
    )
    _check(
        isinstance(env.kwargs, dict) and all(isinstance(k, str) for k in env.kwargs),
        "env.kwargs",
        env.kwargs,
        "a dict of keyword arguments for gymnasium.make, e.g. {'enable_wind': True}",
    )
    if "max_episode_steps" in env.kwargs:
        raise ConfigError(
            "env.kwargs",
            env.kwargs,
            "no 'max_episode_steps' key: set env.max_episode_steps instead",
        )
    if env.preprocessing != "atari":
        default = EnvConfig()
        for name in ATARI_ONLY:
            value = getattr(env, name)
            _check(
                value == getattr(default, name),
                f"env.{name}",
                value,
                f"{getattr(default, name)!r} (the default): it applies only with "
                "env.preprocessing='atari'; an env's own options go in env.kwargs",
            )
    target = c.evaluation.target_return
    _check(
        target is None or target == "auto" or _is_num(target),
        "evaluation.target_return",
        target,
        "a number, 'auto' (the env spec's reward_threshold) or None (no target)",
    )
    _check(
        c.learner.conv_channels in CONV_CHANNELS,
        "learner.conv_channels",
        c.learner.conv_channels,
        f"one of {list(CONV_CHANNELS)}",
    )


def _get(config: Any, path: str) -> Any:
    for name in path.split("."):
        config = getattr(config, name)
    return config


def _check_inference(c: ApexConfig) -> None:
    _check(
        isinstance(c.model_store.enabled, bool),
        "model_store.enabled",
        c.model_store.enabled,
        "True or False",
    )
    _check(
        c.evaluation.weights == "online" or not c.model_store.enabled,
        "evaluation.weights",
        c.evaluation.weights,
        "'online' with model_store.enabled=True (the store serves and keeps the "
        "online weights); 'average' needs model_store.enabled=False",
    )
    _check(
        c.actor.inference in INFERENCE_MODES,
        "actor.inference",
        c.actor.inference,
        f"one of {list(INFERENCE_MODES)}",
    )
    e = c.actor.envs_per_actor
    _check(
        c.inference.max_batch >= e,
        "inference.max_batch",
        c.inference.max_batch,
        f"at least actor.envs_per_actor ({e}): one actor's request of {e} observations "
        "is never split",
    )
    _check(
        c.inference.max_wait_ms <= 1000,
        "inference.max_wait_ms",
        c.inference.max_wait_ms,
        "a number of milliseconds in [0, 1000]",
    )
    _check(
        c.inference.call_timeout_seconds >= 1,
        "inference.call_timeout_seconds",
        c.inference.call_timeout_seconds,
        "a number of seconds >= 1 (a request may wait for a batch and a forward pass)",
    )


def validate(config: ApexConfig) -> None:
    """Raises ConfigError for the first invalid field; returns None if all are valid."""
    c = config
    _check(
        isinstance(c.env.id, str) and bool(c.env.id),
        "env.id",
        c.env.id,
        "a Gymnasium id such as 'CartPole-v1'",
    )
    builder = get_builder(c)  # ConfigError naming the registered agents
    _check_env(c)
    for path, choices in (
        ("env.preprocessing", PREPROCESSING),
        ("env.vectorization", VECTORIZATION),
        ("learner.torso", TORSOS),
        ("evaluation.weights", EVALUATION_WEIGHTS),
    ):
        _check(_get(c, path) in choices, path, _get(c, path), f"one of {list(choices)}")
    for path, kind, optional in _RULES:
        value = _get(c, path)
        if optional and value is None:
            continue
        ok, valid = _KINDS[kind]
        _check(ok(value), path, value, f"None or {valid}" if optional else valid)

    for path in ("cluster.learner_resource", "cluster.actor_resource"):
        value = _get(c, path)
        _check(
            value is None or (isinstance(value, str) and bool(value.strip())),
            path,
            value,
            "None or the name of a custom Ray resource, e.g. 'apex_learner'",
        )
    _check_inference(c)
    lost, period = c.cluster.actor_lost_after_seconds, c.logging.heartbeat_period_seconds
    _check(
        lost is None or period == 0 or lost >= 4 * period,
        "cluster.actor_lost_after_seconds",
        lost,
        f"None or at least 4 heartbeat periods (logging.heartbeat_period_seconds={period:g}): "
        "an actor renews its lease with each beat",
    )
    r, lr, s = c.replay, c.learner, c.stop
    _check(
        r.min_size <= r.capacity,
        "replay.min_size",
        r.min_size,
        f"at most replay.capacity ({r.capacity}), or the learner could never sample",
    )
    _check(
        r.insert_priority in INSERT_PRIORITIES,
        "replay.insert_priority",
        r.insert_priority,
        f"one of {list(INSERT_PRIORITIES)}",
    )
    _check(
        r.frame_storage in ("auto", "packed"),
        "replay.frame_storage",
        r.frame_storage,
        "one of ['auto', 'packed']",
    )
    _check(
        r.transition_layout in ("auto", "columns"),
        "replay.transition_layout",
        r.transition_layout,
        "one of ['auto', 'columns']",
    )
    _check(
        r.frame_compression in ("zstd", "lz4", "none"),
        "replay.frame_compression",
        r.frame_compression,
        "one of ['zstd', 'lz4', 'none']",
    )
    if r.port is not None:
        _check(
            _is_int(r.port) and 1 <= r.port <= 65535,
            "replay.port",
            r.port,
            "None or a port in [1, 65535]",
        )
    _check(
        isinstance(lr.hidden_sizes, (tuple, list))
        and len(lr.hidden_sizes) >= 1
        and all(_is_int(h) and h >= 1 for h in lr.hidden_sizes),
        "learner.hidden_sizes",
        lr.hidden_sizes,
        "a non-empty tuple of integers >= 1, e.g. (128, 128)",
    )
    if c.env.observation_indices is not None:
        _check(
            isinstance(c.env.observation_indices, (tuple, list))
            and len(c.env.observation_indices) >= 1
            and all(_is_int(i) and i >= 0 for i in c.env.observation_indices),
            "env.observation_indices",
            c.env.observation_indices,
            "None or a non-empty tuple of integers >= 0, e.g. (0, 2)",
        )
    builder.validate(c)  # the agent's own checks
    _check(
        lr.batch_size <= r.capacity,
        "learner.batch_size",
        lr.batch_size,
        f"at most replay.capacity ({r.capacity})",
    )
    if r.error_buffer is not None:
        _check(_is_num(r.error_buffer), "replay.error_buffer", r.error_buffer, "None or a number")
        need = max(2.0 * max(1.0, r.samples_per_insert), float(lr.batch_size))
        _check(
            r.error_buffer >= need,
            "replay.error_buffer",
            r.error_buffer,
            f"None or >= {need:g} (2 * max(1, samples_per_insert) and >= learner.batch_size); a smaller buffer "
            "makes the rate limiter block the learner in the middle of a batch",
        )
    check_rate_limits(c)
    _check(
        s.max_actor_steps is not None
        or s.max_learner_steps is not None
        or s.max_wall_seconds is not None
        or s.when_solved,
        "stop",
        "no limit",
        "at least one of stop.max_actor_steps, stop.max_learner_steps, stop.max_wall_seconds, stop.when_solved",
    )
    bands = c.logging.epsilon_bands
    _check(
        isinstance(bands, (tuple, list))
        and all(_is_num(b) and 0 < b < 1 for b in bands)
        and list(bands) == sorted(set(bands)),
        "logging.epsilon_bands",
        bands,
        "a tuple of increasing numbers in (0, 1), e.g. (0.01, 0.1), or ()",
    )
    _check(isinstance(c.run_dir, str), "run_dir", c.run_dir, "a path string")
    check_sinks(c.logging)


def _changed(section: Any, default: Any, names: tuple[str, ...] | None = None) -> list[str]:
    names = names or tuple(f.name for f in dataclasses.fields(section))
    return [n for n in names if getattr(section, n) != getattr(default, n)]


def unused_fields(config: ApexConfig, launcher: str = "local") -> list[str]:
    """Notes on fields set away from their defaults that this program does not use
    (the r2d2 section for a feed-forward agent, conv settings for an mlp torso,
    the cluster section for a local launch): said before launch, never dropped
    silently. Atari-only env fields for another env are refused by `validate`."""
    notes = []
    if not get_builder(config).recurrent:
        changed = _changed(config.r2d2, R2D2Config())
        if changed:
            notes.append(
                f"r2d2.{', r2d2.'.join(changed)} set, but agent={config.agent!r} is not "
                "recurrent: unused"
            )
    if config.learner.torso != "conv":
        changed = _changed(config.learner, LearnerConfig(), ("conv_layers", "conv_channels"))
        if changed:
            notes.append(
                f"learner.{', learner.'.join(changed)} set, but learner.torso="
                f"{config.learner.torso!r}: unused (conv_layers apply with torso='conv')"
            )
    if config.actor.inference != "central":
        changed = _changed(config.inference, InferenceConfig())
        if changed:
            notes.append(
                f"inference.{', inference.'.join(changed)} set, but actor.inference="
                f"{config.actor.inference!r}: unused (the knobs apply with 'central')"
            )
    if not config.model_store.enabled:
        changed = _changed(config.model_store, ModelStoreConfig(), ("enabled",))
        if changed:
            notes.append(
                f"model_store.{', model_store.'.join(changed)} set, but model_store.enabled "
                "is False: unused"
            )
    if launcher != "ray":
        changed = _changed(config.cluster, ClusterConfig())
        if changed:
            notes.append(
                f"cluster.{', cluster.'.join(changed)} set, but the launch is local: "
                "unused (the cluster section applies with --launcher=ray)"
            )
    return notes
