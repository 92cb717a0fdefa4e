"""A failed run's uncommitted publication is discarded before its rerun (so the rerun evaluates
from a clean tree), and only then: never a finished half waiting for its commit, never beside
other uncommitted work, never at the cost of a finished evaluation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from exports import make_fake_sweep
from git_repo import git_in

from skipdecode.experiments.sweeps import aggregate as aggregate_cli
from skipdecode.experiments.sweeps.aggregate import aggregate
from skipdecode.experiments.sweeps.publish import PublishError, publish
from skipdecode.experiments.sweeps.unlanded import discard_failed_publication


def _landed(tmp_path: Path):
    """A repository whose commit holds a published folder (and a code file)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = git_in(repo, home=tmp_path / "home")
    git("init", "-q")
    sweep = make_fake_sweep(tmp_path / "sweep")
    out = publish(sweep, repo / "results" / "fake", aggregate)
    (repo / "code.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "landed")
    return repo, git, sweep, out


def _publish_rerun(tmp_path: Path, sweep: Path, out: Path, failed: bool) -> Path:
    """A rerun's publication (``--update``): a new cell that finished, its evaluation in the
    cells directory, and (``failed``) one that failed; returns the cells directory."""
    cells, rerun = tmp_path / "cells", tmp_path / "rerun"
    eval_dir = cells / "tiny__synthetic__target_3x__id9" / "eval-1"
    shutil.copytree(sweep / "cells" / "target_4x" / "eval", eval_dir)
    base = json.loads((sweep / "0" / "cell.json").read_text())
    jobs = [{"schedule": "target_3x", "cell_id": "id9", "status": "ok",
             "record": str(eval_dir / "record.json"), "cell_dir": str(eval_dir.parent)}]  # fmt: skip
    if failed:
        jobs.append({"schedule": "target_6x", "cell_id": "id10", "status": "failed",
                     "error": "RuntimeError: no space left on device", "record": None})  # fmt: skip
    for num, change in enumerate(jobs):
        (rerun / str(num)).mkdir(parents=True)
        (rerun / str(num) / "cell.json").write_text(json.dumps(base | change))
    publish(rerun, out, aggregate, update=True)
    return cells


def test_a_failed_runs_publication_is_discarded_and_the_tree_is_clean_again(tmp_path, capsys):
    repo, git, sweep, out = _landed(tmp_path)
    committed = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    cells = _publish_rerun(tmp_path, sweep, out, failed=True)
    assert git("status", "--porcelain", "--untracked-files=no")  # the rerun would be dirty
    jobs = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/cell.json")}
    assert {k: (v["schedule"], v["status"]) for k, v in jobs.items() if int(k) >= 5} == {
        "5": ("target_3x", "ok"), "6": ("target_6x", "failed")}  # fmt: skip

    aggregate_cli.main(["--restore", str(out), "--cells-dir", str(cells),
                        "--discard-failed-publication"])  # fmt: skip
    assert "discarded the uncommitted publication of job(s) 5, 6" in capsys.readouterr().out
    assert git("status", "--porcelain", "--untracked-files=all") == ""
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == committed
    # the finished evaluation is still where the rerun finds it; nothing left to discard
    assert (cells / "tiny__synthetic__target_3x__id9" / "eval-1" / "record.json").is_file()
    assert discard_failed_publication(out, cells) == []


def test_a_finished_publication_waiting_for_its_commit_is_kept(tmp_path):
    repo, git, sweep, out = _landed(tmp_path)
    cells = _publish_rerun(tmp_path, sweep, out, failed=False)
    before = git("status", "--porcelain", "--untracked-files=all")
    assert before and discard_failed_publication(out, cells) == []
    assert git("status", "--porcelain", "--untracked-files=all") == before


def test_nothing_is_discarded_beside_other_uncommitted_work(tmp_path):
    repo, git, sweep, out = _landed(tmp_path)
    cells = _publish_rerun(tmp_path, sweep, out, failed=True)
    (repo / "code.py").write_text("x = 2\n")
    before = git("status", "--porcelain", "--untracked-files=all")
    assert discard_failed_publication(out, cells) == []
    assert git("status", "--porcelain", "--untracked-files=all") == before


def test_a_discard_that_would_lose_a_finished_evaluation_is_refused(tmp_path):
    repo, git, sweep, out = _landed(tmp_path)
    cells = _publish_rerun(tmp_path, sweep, out, failed=True)
    shutil.rmtree(cells / "tiny__synthetic__target_3x__id9")
    before = git("status", "--porcelain", "--untracked-files=all")
    with pytest.raises(PublishError, match=r"finished job\(s\) 5 have no evaluation record"):
        discard_failed_publication(out, cells)
    assert git("status", "--porcelain", "--untracked-files=all") == before


def test_the_discard_is_asked_for_with_restore_only(tmp_path):
    with pytest.raises(SystemExit):
        aggregate_cli.main([str(tmp_path), "--discard-failed-publication"])
