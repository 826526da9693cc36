"""The small error hierarchy of apex. Every error names what was wrong."""

from __future__ import annotations

from typing import Any


class ApexError(Exception):
    """Base class of every error apex raises on purpose."""


class ConfigError(ApexError, ValueError):
    """A configuration value is invalid.

    Example:
        >>> raise ConfigError('replay.capacity', -1, 'an integer >= 1')
        ConfigError: replay.capacity=-1 is invalid: expected an integer >= 1
    """

    def __init__(self, field: str, value: Any, valid: str):
        self.field = field
        self.value = value
        self.valid = valid
        super().__init__(f"{field}={value!r} is invalid: expected {valid}")
