"""Committed results copied into a test's own ``results/`` folder, laid out as in the repository
(records name other records by ``results/<folder>/...``), for checks to run on and defects to be
planted in."""

from __future__ import annotations

import shutil
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "results"


def published_copy(tmp_path: Path, *paths: str) -> Path:
    """``tmp_path/results`` holding a copy of each of ``paths`` (files or folders, relative to
    the committed ``results/``)."""
    results = tmp_path / "results"
    for path in paths:
        target = results / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if (RESULTS / path).is_dir():
            shutil.copytree(RESULTS / path, target)
        else:
            shutil.copy(RESULTS / path, target)
    return results
