"""skipdecode.locks: a run directory held by a live process refuses a second one, clearly; a
killed holder leaves no stale claim."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from skipdecode.locks import LOCK_FILE, DirectoryBusyError, claim_dir

HOLD = (
    "import sys, time\n"
    "from skipdecode.locks import claim_dir\n"
    "with claim_dir(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(120)\n"
)


def _holder(directory: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_process_is_refused_and_a_killed_holder_releases(tmp_path):
    proc = _holder(tmp_path / "run")
    try:
        with pytest.raises(DirectoryBusyError, match=rf"run.*in use by process {proc.pid} on "):
            with claim_dir(tmp_path / "run"):
                pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    with claim_dir(tmp_path / "run") as held:  # the kernel dropped the dead holder's lock
        assert (held / LOCK_FILE).read_text().startswith('{"pid": ' + str(os.getpid()))
    with claim_dir(tmp_path / "run"):  # released after the block, taken again
        pass


def test_waiting_claim_gets_the_directory_once_the_holder_exits(tmp_path):
    proc = _holder(tmp_path / "run")
    try:
        with pytest.raises(DirectoryBusyError):  # a short wait runs out while it is held
            with claim_dir(tmp_path / "run", wait_s=0.3):
                pass
        threading.Timer(0.5, proc.kill).start()  # the holder goes away while we wait
        with claim_dir(tmp_path / "run", wait_s=60) as held:
            assert proc.poll() is not None
            assert (held / LOCK_FILE).read_text().startswith('{"pid": ' + str(os.getpid()))
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_training_refuses_a_run_dir_in_use(tmp_path, monkeypatch):
    from train_utils import make_cfg

    from skipdecode.training import train as train_module

    def trained(*args, **kwargs):
        raise AssertionError("began training in a directory another process holds")

    monkeypatch.setattr(train_module, "_train", trained)  # refused up front, before any of it
    proc = _holder(tmp_path / "run")
    try:
        with pytest.raises(DirectoryBusyError, match=rf"training run directory .*run.* {proc.pid}"):
            train_module.train(make_cfg(tmp_path / "run", ["+trainer.fast_dev_run=1"]))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def test_distributed_workers_share_their_rank_zero_claim(tmp_path, monkeypatch):
    with claim_dir(tmp_path / "run") as held:
        claim = (held / LOCK_FILE).read_text()
        with pytest.raises(DirectoryBusyError):  # not a worker: a second claim is refused
            with claim_dir(tmp_path / "run"):
                pass
        monkeypatch.setenv("LOCAL_RANK", "1")
        with claim_dir(tmp_path / "run") as worker:  # a launcher's worker of the same run
            assert worker == held
        assert (held / LOCK_FILE).read_text() == claim  # rank 0's claim left as it was
        monkeypatch.delenv("LOCAL_RANK")
        with pytest.raises(DirectoryBusyError):  # and still held by rank 0
            with claim_dir(tmp_path / "run"):
                pass
