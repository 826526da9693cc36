"""apex configs: the dataclasses (schema) and file loading with dotted overrides.

A config file is a Python file with `get_config() -> ApexConfig`. Entry points
load it with `load_config_file` and apply `--config.a.b=value` overrides with
`apply_override`. Checking a config (`apex.validate`) and reading its rate
limiter as a plan (apex.planning) consult the agents' builders, so they live
above the agents, in apex.validation and apex.planning.

    schema.py      the dataclasses: every field, its default, what it means
    overrides.py   load_config_file, apply_override, to_dict, config_from_dict

Example:
    >>> cfg = ApexConfig()
    >>> apply_override(cfg, 'actor.num_actors', '4')
    >>> cfg.actor.num_actors
    4
"""

from apex.config.overrides import apply_override, config_from_dict, load_config_file, to_dict
from apex.config.schema import (
    INFERENCE_MODES,
    INSERT_PRIORITIES,
    PREPROCESSING,
    TORSOS,
    VECTORIZATION,
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
    effective_error_buffer,
)

__all__ = [
    "INFERENCE_MODES",
    "INSERT_PRIORITIES",
    "PREPROCESSING",
    "VECTORIZATION",
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
    "config_from_dict",
    "effective_error_buffer",
    "load_config_file",
    "to_dict",
]
