"""A throwaway git for tests that build a repository of their own."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path


def git_in(repo: Path, home: Path) -> Callable[..., str]:
    """``git(*args, cwd=repo)``, returning its stripped stdout: git with a throwaway identity and
    config (``home`` stands in for the user's home), LF and CRLF kept as is."""
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(home)}

    def git(*args: str, cwd: Path = repo) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.autocrlf=false",
             *args], cwd=cwd, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        return done.stdout.strip()

    return git
