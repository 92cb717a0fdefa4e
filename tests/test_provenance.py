"""Tests for skipdecode.provenance: what every record says about where it was made."""

from __future__ import annotations

import datetime as dt
import platform
import re
import shutil
from pathlib import Path

import pytest
import torch
from git_repo import git_in

from skipdecode.provenance import (
    PROVENANCE_PACKAGES,
    checkout_root,
    dirty_paths,
    machine,
    provenance,
)


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
    extra = {"diff", "diff_sha256", "diff_scope", "new_files"} if prov["git"]["dirty"] else set()
    assert set(prov["git"]) == {"commit", "dirty", "branch", "root"} | extra
    dev = prov["device"]
    assert dev["torch_threads"] == torch.get_num_threads()
    assert dev["cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # kernels' ISA
    assert dev["cuda_available"] == torch.cuda.is_available()
    assert isinstance(dev["device"], str | None)
    # the generation, where /proc/cpuinfo gives one: two CPUs of one name told apart
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file() and "cpu family" in cpuinfo.read_text():
        assert re.fullmatch(r"family \d+ model \d+( stepping \d+)?", dev["cpu_generation"])
    label = machine(dev)
    assert label.startswith(str(dev["cpu"])) and dev["cpu_capability"] in label
    ts = dt.datetime.fromisoformat(prov["timestamp_utc"].replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.timezone.utc) - ts).total_seconds()) < 60
    assert prov["timestamp_utc"].endswith("Z")


def test_a_machine_label_tells_two_cpus_of_one_name_apart_and_says_what_a_record_lacks():
    milan = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "cpu_generation": "family 25 model 1"}
    genoa = {**milan, "cpu_capability": "AVX512", "cpu_generation": "family 25 model 17"}
    assert machine(milan) == "AMD EPYC (AVX2; family 25 model 1)" != machine(genoa)
    older = {"cpu": "AMD EPYC", "cpu_capability": "AVX512"}  # before generations were kept
    assert machine(older) == "AMD EPYC (AVX512; generation not recorded)"
    assert machine({"cpu": "AMD EPYC"}) == (
        "AMD EPYC (instruction set not recorded; generation not recorded)"
    )
    gpu = {**genoa, "cuda_devices": [{"name": "NVIDIA H100 80GB HBM3"}]}
    assert machine(gpu) == "NVIDIA H100 80GB HBM3"


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_provenance_git_commit_and_dirty(tmp_path):
    git = git_in(tmp_path, home=tmp_path)

    git("init", "-q")
    (tmp_path / "f.txt").write_text("1")
    git("add", "f.txt")
    git("commit", "-q", "-m", "init")
    info = provenance(tmp_path)["git"]
    assert info["commit"] and len(info["commit"]) == 40
    assert info["dirty"] is False
    (tmp_path / "f.txt").write_text("2")
    assert provenance(tmp_path / "f.txt")["git"]["dirty"] is True  # a file inside the repo works


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_dirty_paths_names_what_makes_a_record_dirty(tmp_path):
    """Staged and unstaged changes to tracked files (a rename: both names) and new files under
    the code folders, by name (odd and non-ASCII names literal), relative to the checkout; a
    stray new file elsewhere is not among them, and the record's dirty flag says whether any is."""
    git = git_in(tmp_path, home=tmp_path)
    git("init", "-q")
    for name in ("a b.txt", "[x].txt", "results/r.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("1")
    git("add", ".")
    git("commit", "-q", "-m", "init")
    assert checkout_root(tmp_path / "results" / "r.json") == checkout_root(tmp_path)
    root = checkout_root(tmp_path)
    assert dirty_paths(root) == [] and provenance(tmp_path)["git"]["dirty"] is False
    (tmp_path / "notes.txt").write_text("not code")
    assert dirty_paths(root) == [] and provenance(tmp_path)["git"]["dirty"] is False
    (tmp_path / "a b.txt").write_text("2")
    (tmp_path / "[x].txt").write_text("2")
    git("add", "[x].txt")  # staged
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "café.py").write_text("y = 1\n")
    git("mv", "results/r.json", "results/moved.json")  # a staged rename: both names
    found = dirty_paths(root)
    assert sorted(found) == sorted(
        map(Path, ["[x].txt", "a b.txt", "results/r.json", "results/moved.json", "src/café.py"])
    )
    info = provenance(tmp_path)["git"]
    assert info["dirty"] is True and info["new_files"] == ["src/café.py"]
    assert "+y = 1" in info["diff"]  # the new file's own diff, found by its name
    assert checkout_root(tmp_path.parent) is None  # outside any checkout


def test_a_kept_diff_recreates_changed_and_new_code_files(tmp_path):
    """A new module the run imported is in the diff: applied to the commit in a fresh clone, the
    diff gives back the tree the run had (a stray file outside the code folders is not kept)."""
    repo, clone = tmp_path / "repo", tmp_path / "clone"
    repo.mkdir()
    git = git_in(repo, home=tmp_path)

    git("init", "-q")
    (repo / "src").mkdir()
    (repo / "src" / "a.py").write_text("x = 1\n")
    git("add", ".")
    git("commit", "-q", "-m", "init")
    (repo / "src" / "a.py").write_text("x = 2\nfrom b import y\n")
    (repo / "src" / "b.py").write_text("y = 3\n")
    (repo / "notes.txt").write_text("not code\n")
    info = provenance(repo)["git"]
    assert info["dirty"] is True and info["new_files"] == ["src/b.py"]
    assert info["diff_scope"].startswith("tracked files and new files")
    git("clone", "-q", str(repo), str(clone), cwd=tmp_path)
    (clone / "run.diff").write_text(info["diff"] + "\n")
    git("apply", "run.diff", cwd=clone)
    for name in ("src/a.py", "src/b.py"):
        assert (clone / name).read_text() == (repo / name).read_text()
    assert not (clone / "notes.txt").exists()


def test_a_kept_diff_of_a_crlf_file_applies(tmp_path):
    """A changed file with CRLF line ends (a training run's metrics.csv) is kept byte for byte:
    the diff applies to the commit and gives the file back (LF endings would not apply)."""
    repo, clone = tmp_path / "repo", tmp_path / "clone"
    repo.mkdir()
    git = git_in(repo, home=tmp_path)

    git("init", "-q")
    (repo / "metrics.csv").write_bytes(b"step,loss\r\n0,2.7\r\n9,5.3\r\n")
    git("add", ".")
    git("commit", "-q", "-m", "init")
    (repo / "metrics.csv").write_bytes(b"step,loss\r\n0,2.7\r\n9,5.4\r\n")
    info = provenance(repo)["git"]
    assert "9,5.4\r" in info["diff"]
    git("clone", "-q", "-c", "core.autocrlf=false", str(repo), str(clone), cwd=tmp_path)
    (clone / "run.diff").write_bytes(info["diff"].encode() + b"\n")
    git("apply", "run.diff", cwd=clone)
    assert (clone / "metrics.csv").read_bytes() == (repo / "metrics.csv").read_bytes()


def test_provenance_outside_git(tmp_path):
    info = provenance(tmp_path)["git"]
    assert info["commit"] is None


def test_a_copy_without_git_is_recorded_from_its_commit_manifest(tmp_path, monkeypatch):
    """A device machine gets the working tree (its .git, if any, may be stale): the manifest
    written from the clean commit here says which commit the copy runs, clean while every file
    matches, dirty (with the files that differ and no diff, so publishing refuses) once one does
    not; set, it wins over a git directory in the copy."""
    from skipdecode.manifest import write_manifest
    from skipdecode.provenance import _git_info, diff_missing

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (repo / "src" / "a.py").write_text("A = 1\n")
    git = git_in(repo, home=tmp_path)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "c")
    manifest = write_manifest(repo, tmp_path / "tree.json")
    head = git("rev-parse", "HEAD")
    assert manifest["commit"] == head and set(manifest["files"]) == {"pyproject.toml", "src/a.py"}

    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    monkeypatch.setenv("SKIPDECODE_TREE_MANIFEST", str(tmp_path / "tree.json"))
    info = _git_info(copy / "src")
    assert info["commit"] == head and info["dirty"] is False and info["root"] == str(copy)
    (copy / "src" / "a.py").write_text("A = 2\n")
    info = _git_info(copy / "src")
    assert info["dirty"] is True and info["changed"] == ["src/a.py"]
    assert diff_missing({"git": info})

    stale = tmp_path / "stale"  # a copy whose .git is an older snapshot
    shutil.copytree(repo, stale)
    git("commit", "-q", "--amend", "-m", "other", cwd=stale)
    info = _git_info(stale / "src")
    assert info["commit"] == head and info["dirty"] is False

    (repo / "src" / "a.py").write_text("A = 3\n")  # a manifest describes a commit
    with pytest.raises(ValueError, match="uncommitted changes"):
        write_manifest(repo, tmp_path / "again.json")
