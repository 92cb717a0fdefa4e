"""Killing a child job the way a scheduler or the OOM killer does, at a chosen moment."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable


def kill_group_when(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float) -> None:
    """SIGKILL ``proc``'s whole process group once ``ready()`` holds (polled); fails if the job
    ends first or ``timeout`` seconds pass. ``proc`` must be started with
    ``start_new_session=True`` (its own group, so its helpers, e.g. W&B's service, die too)."""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None and not ready():
            time.sleep(0.3)
        assert proc.poll() is None, "the job ended before it could be killed"
        assert time.time() < deadline, f"the job was not ready to be killed in {timeout} s"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
