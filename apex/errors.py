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


class CheckpointError(ApexError):
    """A checkpoint (a run checkpoint, or the Reverb replay checkpoint inside one)
    is missing, incomplete, corrupt or does not fit the config. The one class the
    entry point and the tools catch; the subclasses say which."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint directory (or checkpointer root) does not exist."""


class IncompleteCheckpointError(CheckpointError):
    """The directory has no completion marker: half-written, or not a checkpoint at all."""


class UnknownTableError(CheckpointError, LookupError):
    """The replay checkpoint holds no table of that name."""


class CorruptCheckpointError(CheckpointError):
    """A file of the checkpoint does not parse (bad record, checksum, chunk, tensor)."""
