"""Data-layer exceptions; messages name the setting, the value and what is allowed."""

from __future__ import annotations


class DataConfigError(ValueError):
    """A data setting has a value that cannot work (unknown name, bad option, ...)."""


class DataNotFoundError(DataConfigError, FileNotFoundError):
    """A configured data directory or file does not exist."""


class MissingColumnsError(DataConfigError):
    """A data file lacks the columns (fields) the task needs."""


class EmptySplitError(DataConfigError):
    """A split resolved to zero examples."""


class TargetTooLongError(DataConfigError):
    """A target exceeds ``max_target_tokens`` under ``on_long_target='error'``."""
