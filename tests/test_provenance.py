"""Tests for skipdecode.provenance: what every record says about where it was made."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import subprocess

import pytest
import torch

from skipdecode.provenance import PROVENANCE_PACKAGES, provenance


def test_provenance_fields():
    prov = provenance()
    for key in ("timestamp_utc", "git", "packages", "python", "platform", "device", "hostname"):
        assert key in prov, key
    assert set(PROVENANCE_PACKAGES) <= set(prov["packages"])
    for name in (
        "torch",
        "transformers",
        "pytorch-lightning",
        "sacrebleu",
        "rouge-score",
        "bert-score",
        "datasets",
        "hydra-core",
        "skipdecode",
    ):
        assert name in prov["packages"]
    assert prov["packages"]["torch"] == torch.__version__
    assert prov["python"]["version"] == platform.python_version()
    extra = {"diff", "diff_sha256"} if prov["git"]["dirty"] else set()
    assert set(prov["git"]) == {"commit", "dirty", "branch", "root"} | extra
    dev = prov["device"]
    assert dev["torch_threads"] == torch.get_num_threads()
    assert dev["cuda_available"] == torch.cuda.is_available()
    assert isinstance(dev["device"], str | None)
    ts = dt.datetime.fromisoformat(prov["timestamp_utc"].replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.timezone.utc) - ts).total_seconds()) < 60
    assert prov["timestamp_utc"].endswith("Z")


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_provenance_git_commit_and_dirty(tmp_path):
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}

    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    (tmp_path / "f.txt").write_text("1")
    git("add", "f.txt")
    git("commit", "-q", "-m", "init")
    info = provenance(tmp_path)["git"]
    assert info["commit"] and len(info["commit"]) == 40
    assert info["dirty"] is False
    (tmp_path / "f.txt").write_text("2")
    assert provenance(tmp_path / "f.txt")["git"]["dirty"] is True  # a file inside the repo works


def test_provenance_outside_git(tmp_path):
    info = provenance(tmp_path)["git"]
    assert info["commit"] is None
