"""A failed run's uncommitted publication is discarded before its rerun (so the rerun evaluates
from a clean tree), and only then: never a finished half waiting for its commit, never beside
other uncommitted work, never at the cost of a finished evaluation."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
from exports import make_fake_sweep
from git_repo import git_in

from skipdecode.experiments.sweeps import aggregate as aggregate_cli
from skipdecode.experiments.sweeps.aggregate import aggregate
from skipdecode.experiments.sweeps.identity import IDENTITY_FILE, identity_hash
from skipdecode.experiments.sweeps.publish import PublishError, publish
from skipdecode.experiments.sweeps.unlanded import discard_failed_publication

TABLES = functools.partial(aggregate, plots=False)  # the pages without their plots: faster


def _landed(tmp_path: Path):
    """A repository whose commit holds a published folder (and a code file)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = git_in(repo, home=tmp_path / "home")
    git("init", "-q")
    sweep = make_fake_sweep(tmp_path / "sweep")
    out = publish(sweep, repo / "results" / "fake", TABLES)
    (repo / "code.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "landed")
    return repo, git, sweep, out


def _publish_rerun(tmp_path: Path, sweep: Path, out: Path, failed: bool) -> Path:
    """A rerun's publication (``--update``): a new cell that finished, its evaluation in the
    cells directory, and (``failed``) one that failed; returns the cells directory."""
    cells, rerun = tmp_path / "cells", tmp_path / "rerun"
    identity = {"model": {"name": "tiny"}, "schedule": {"name": "target_3x"}, "seed": 1}
    # the folder a rerun looks in is named by the identity's hash, not by the published source
    eval_dir = cells / f"tiny__synthetic__target_3x__{identity_hash(identity)}" / "eval-1"
    shutil.copytree(sweep / "cells" / "target_4x" / "eval", eval_dir)
    (eval_dir.parent / IDENTITY_FILE).write_text(json.dumps(identity))
    base = json.loads((sweep / "0" / "cell.json").read_text())
    jobs = [{"schedule": "target_3x", "cell_id": "id9", "status": "ok",
             "record": str(eval_dir / "record.json"), "cell_dir": str(eval_dir.parent)}]  # fmt: skip
    if failed:
        jobs.append({"schedule": "target_6x", "cell_id": "id10", "status": "failed",
                     "error": "RuntimeError: no space left on device", "record": None})  # fmt: skip
    for num, change in enumerate(jobs):
        (rerun / str(num)).mkdir(parents=True)
        (rerun / str(num) / "cell.json").write_text(json.dumps(base | change))
    publish(rerun, out, TABLES, update=True)
    return cells


def _finished_record(cells: Path) -> Path:
    (record,) = cells.glob("tiny__synthetic__target_3x__*/eval-1/record.json")
    return record


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
    assert "(job(s) 5, 6; a failed run's" in capsys.readouterr().out
    assert git("status", "--porcelain", "--untracked-files=all") == ""
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == committed
    # the finished evaluation is still where the rerun finds it; nothing left to discard
    assert _finished_record(cells).is_file()
    assert discard_failed_publication(out, cells) == ([], "")


def test_a_finished_cell_whose_record_went_missing_is_a_failed_row_and_is_discarded(tmp_path):
    """A cell that finished but whose record is gone when the run publishes: its ``cell.json``
    says ok, publishing writes a failed row, and the discard treats it as failed."""
    repo, git, sweep, out = _landed(tmp_path)
    cells = _publish_rerun(tmp_path, sweep, out, failed=False)
    git("add", "-A")
    git("commit", "-qm", "the rerun's finished cell landed")
    committed = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    record = _finished_record(cells)
    kept = record.read_bytes()
    record.unlink()  # the next run finds the cell finished but not its record
    rerun = tmp_path / "rerun"
    publish(rerun, out, TABLES, update=True)
    assert json.loads((out / "5" / "cell.json").read_text())["status"] == "ok"
    assert "failed" in (out / "cells.csv").read_text() and not (out / "5" / "record.json").exists()
    record.write_bytes(kept)  # no finished evaluation is lost by the discard
    assert discard_failed_publication(out, cells) == (["5"], "")
    assert git("status", "--porcelain", "--untracked-files=all") == ""
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == committed


def test_a_staged_failed_publication_is_discarded_whole(tmp_path, monkeypatch):
    repo, git, sweep, out = _landed(tmp_path)
    committed = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    cells = _publish_rerun(tmp_path, sweep, out, failed=True)
    git("add", "-A")
    monkeypatch.chdir(tmp_path)  # the folder given relative to where the command runs
    assert discard_failed_publication(Path("repo/results/fake"), cells)[0] == ["5", "6"]
    assert git("status", "--porcelain", "--untracked-files=all") == ""
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == committed


def test_a_publication_never_committed_and_a_manifest_copy_are_left_alone(tmp_path, monkeypatch):
    repo, git, sweep, out = _landed(tmp_path)
    cells = _publish_rerun(tmp_path, sweep, out, failed=True)
    before = git("status", "--porcelain", "--untracked-files=all")
    monkeypatch.setenv("SKIPDECODE_TREE_MANIFEST", str(tmp_path / "manifest.json"))
    assert discard_failed_publication(out, cells) == ([], "")
    monkeypatch.delenv("SKIPDECODE_TREE_MANIFEST")
    assert git("status", "--porcelain", "--untracked-files=all") == before
    fresh = publish(tmp_path / "rerun", repo / "results" / "new", TABLES)
    assert discard_failed_publication(fresh, cells) == ([], "")
    assert (fresh / "1" / "cell.json").is_file()


def test_a_finished_publication_waiting_for_its_commit_is_kept(tmp_path):
    repo, git, sweep, out = _landed(tmp_path)
    cells = _publish_rerun(tmp_path, sweep, out, failed=False)
    before = git("status", "--porcelain", "--untracked-files=all")
    assert before and discard_failed_publication(out, cells) == ([], "")
    assert git("status", "--porcelain", "--untracked-files=all") == before


@pytest.mark.parametrize("other", ["code.py", "src/new.py", "results/fake/search/front.csv"])
def test_nothing_is_discarded_beside_other_uncommitted_work(tmp_path, other):
    """A change elsewhere (tracked, or a new code file) leaves the rerun dirty whatever the folder
    holds; a subfolder that is not a job's is another tool's work."""
    repo, git, sweep, out = _landed(tmp_path)
    cells = _publish_rerun(tmp_path, sweep, out, failed=True)
    (repo / other).parent.mkdir(parents=True, exist_ok=True)
    (repo / other).write_text("x = 2\n")
    before = git("status", "--porcelain", "--untracked-files=all")
    discarded, why_not = discard_failed_publication(out, cells)
    assert discarded == [] and other in why_not
    assert git("status", "--porcelain", "--untracked-files=all") == before


@pytest.mark.parametrize("record", ["missing", "another"])
def test_a_discard_that_would_lose_a_finished_evaluation_is_refused(tmp_path, record):
    repo, git, sweep, out = _landed(tmp_path)
    cells = _publish_rerun(tmp_path, sweep, out, failed=True)
    if record == "missing":
        _finished_record(cells).unlink()
    else:  # not the record published: the rerun would not publish this job again
        _finished_record(cells).write_text("{}")
    before = git("status", "--porcelain", "--untracked-files=all")
    with pytest.raises(PublishError, match=r"finished job\(s\) 5 have no identical record"):
        discard_failed_publication(out, cells)
    assert git("status", "--porcelain", "--untracked-files=all") == before


def test_the_discard_is_asked_for_with_restore_only(tmp_path):
    with pytest.raises(SystemExit):
        aggregate_cli.main([str(tmp_path), "--discard-failed-publication"])
