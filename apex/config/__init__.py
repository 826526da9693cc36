"""apex configs: dataclasses (schema), validation, the rate-limit planner and
file loading with dotted overrides.

A config file is a Python file with `get_config() -> ApexConfig`. Entry points
load it with `load_config_file` and apply `--config.a.b=value` overrides with
`apply_override`; `validate` runs before anything launches and raises a
`ConfigError` naming the field, the value and what would be valid.

    schema.py      the dataclasses: every field, its default, what it means
    validation.py  validate(): field rules, cross-field checks, the agent's own
    planning.py    the rate limiter read as a plan; refusals of dead settings
    overrides.py   load_config_file, apply_override, to_dict, config_from_dict

Example:
    >>> cfg = ApexConfig()
    >>> apply_override(cfg, 'actor.num_actors', '4')
    >>> validate(cfg)
    >>> cfg.actor.num_actors
    4
"""

from apex.config.overrides import apply_override, config_from_dict, load_config_file, to_dict
from apex.config.planning import (
    check_rate_limits,
    effective_error_buffer,
    env_step_replay_ratio,
    env_steps_per_item,
    rate_limit_plan,
)
from apex.config.schema import (
    INSERT_PRIORITIES,
    PREPROCESSING,
    TORSOS,
    ActorConfig,
    ApexConfig,
    CheckpointConfig,
    ClusterConfig,
    EnvConfig,
    EvaluationConfig,
    InferenceConfig,
    LearnerConfig,
    LoggingConfig,
    ModelStoreConfig,
    R2D2Config,
    ReplayConfig,
    StopConfig,
)
from apex.config.validation import unused_fields, validate

__all__ = [
    "INSERT_PRIORITIES",
    "PREPROCESSING",
    "TORSOS",
    "ActorConfig",
    "ApexConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "EnvConfig",
    "EvaluationConfig",
    "InferenceConfig",
    "LearnerConfig",
    "LoggingConfig",
    "ModelStoreConfig",
    "R2D2Config",
    "ReplayConfig",
    "StopConfig",
    "apply_override",
    "check_rate_limits",
    "config_from_dict",
    "effective_error_buffer",
    "env_step_replay_ratio",
    "env_steps_per_item",
    "load_config_file",
    "rate_limit_plan",
    "to_dict",
    "unused_fields",
    "validate",
]
