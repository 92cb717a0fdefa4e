"""Where skipdecode keeps its caches (converted models, trained tokenizers)."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path | None:
    """Nearest parent of this file that holds a pyproject.toml, or None (installed package)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    return None


def cache_dir() -> Path:
    """Cache root: ``$SKIPDECODE_CACHE``, else ``<repo>/.cache``, else ``~/.cache/skipdecode``.

    The directory is created if it does not exist.
    """
    env = os.environ.get("SKIPDECODE_CACHE")
    if env:
        path = Path(env).expanduser()
    else:
        root = repo_root()
        path = root / ".cache" if root is not None else Path.home() / ".cache" / "skipdecode"
    path.mkdir(parents=True, exist_ok=True)
    return path
