"""PROVENANCE.md counts a record's commit as known only when it is in the checked-out history,
so the page is the same in every clone of a branch, whatever other branches a clone holds."""

from __future__ import annotations

import json

from git_repo import git_in

from skipdecode.experiments.sweeps.audit import audit_page


def test_a_record_from_a_branch_that_landed_only_as_a_copy_is_outside_the_history(tmp_path):
    """A record names a commit of a side branch whose change reached main by cherry-pick: the
    commit exists in this clone but not in main's history, so a clone of main alone would lack
    it. It is listed as outside the history until main merges the branch."""
    repo = tmp_path / "repo"
    (repo / "results" / "study").mkdir(parents=True)
    git = git_in(repo, home=tmp_path)
    git("init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    git("add", ".")
    git("commit", "-qm", "base")
    base = git("rev-parse", "HEAD")
    git("checkout", "-qb", "side")
    (repo / "b.txt").write_text("b\n")
    git("add", ".")
    git("commit", "-qm", "side")
    side = git("rev-parse", "HEAD")
    git("checkout", "-q", "main")
    (repo / "c.txt").write_text("c\n")  # main moved on, so the copy gets a commit of its own
    git("add", ".")
    git("commit", "-qm", "main")
    git("cherry-pick", side)

    def record(name, commit):
        data = {"provenance": {"git": {"commit": commit, "dirty": False}}}
        (repo / "results" / "study" / f"{name}.json").write_text(json.dumps(data))

    record("from_main", base)
    record("from_side", side)
    page = audit_page(repo / "results")
    assert "| study | 1 | 0 | 0 | 0 | 1 |" in page
    outside = page.split("## Records from commits outside the history (1)")[1].split("##")[0]
    assert f"- `study/from_side.json` (commit {side[:12]})" in outside
    assert "from_main" not in outside

    git("merge", "-q", "-s", "ours", "--no-ff", "side", "-m", "keep side's commit")
    page = audit_page(repo / "results")
    assert "| study | 2 | 0 | 0 | 0 | 0 |" in page
    assert "## Records from commits outside the history (0)" in page
