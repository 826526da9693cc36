"""apex: replay-centric distributed off-policy RL (Ape-X DQN, R2D2) on Reverb + Launchpad.

The library never reads flags and never launches; `launch/` does. The names a
user needs first:

    from apex import ApexConfig, ConfigError, validate
    config = ApexConfig()
    config.actor.num_actors = 4
    validate(config)  # raises ConfigError naming the field, the value and what is valid
"""

from apex.config import ApexConfig, apply_override, load_config_file, validate
from apex.errors import ApexError, ConfigError

__version__ = "0.1.0"

__all__ = [
    "ApexConfig",
    "ApexError",
    "ConfigError",
    "apply_override",
    "load_config_file",
    "validate",
    "__version__",
]
