"""Progress bars: on a terminal, quiet otherwise, forced by the environment or a run's flag."""

from __future__ import annotations

import io
import sys

import pytest

from skipdecode.progress import ENV_VAR, progress, progress_enabled, progress_setting


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_follow_the_terminal_the_environment_and_the_flag(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not progress_enabled()  # not a TTY: quiet (logs, CI, background sweeps)
    items = [1, 2, 3]
    assert progress(items, "x") is items  # no wrapper at all
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert progress_enabled()
    assert list(progress(items, "counting")) == items
    assert "counting" in terminal.getvalue()  # a bar was drawn on stderr
    monkeypatch.setenv(ENV_VAR, "0")
    assert not progress_enabled()
    with progress_setting(True):  # a run's own flag wins over the environment
        assert progress_enabled()
        with progress_setting(None):  # unset: no change
            assert progress_enabled()
    assert not progress_enabled()
    assert progress_enabled(True) and not progress_enabled(False)  # the caller's flag wins
    monkeypatch.setenv(ENV_VAR, "maybe")
    with pytest.raises(ValueError, match=rf"{ENV_VAR}='maybe' is not allowed"):
        progress_enabled()
