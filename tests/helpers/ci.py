"""Skips that must not hide a broken CI: under ``CI=true`` they fail instead."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def skip_unless_ci(reason: str) -> None:
    """``pytest.skip(reason)`` on a developer machine; ``pytest.fail`` in CI, where the asset
    is prepared by ``make test`` and its absence is a failure."""
    if in_ci():
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)
