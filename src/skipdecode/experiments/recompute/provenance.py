"""Each record's provenance checked against the repository.

A record from a clean commit in the checked-out history (an ancestor of ``HEAD``) passes; one
from a commit outside it (a branch that never landed, or landed only as copies) passes only while
``results/PROVENANCE.md`` lists it. One that keeps its whole diff (``diff_scope``) passes when
the diff applies to its commit: ``git apply --cached --check`` on a temporary index read from
that commit, so no work tree is touched. One whose diff is partial (tracked files only) or
missing passes only while ``results/PROVENANCE.md`` is up to date, which lists it as such. A
published cell (``cell.json``) must not say its training resumed from a checkpoint when its sweep
ran with ``sweep.reuse=false``, which deletes every checkpoint first.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ...io import read_json_or_none
from ..sweeps.audit import AUDIT_PAGE, audit_page, commit_lookup, records
from .findings import Findings

__all__ = ["check_provenance", "diff_applies"]


def _git(args: list[str], root: Path, env: Mapping[str, str] | None = None, stdin: str = ""):
    return subprocess.run(
        ["git", *args], cwd=root, input=stdin, capture_output=True, text=True, check=False,
        env={**os.environ, **(env or {})}, timeout=60,
    )  # fmt: skip


def diff_applies(root: Path, commit: str, diff: str) -> tuple[bool, str]:
    """Whether ``diff`` applies to ``commit`` of the repository at ``root``, and git's words."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        read = _git(["read-tree", commit], root, env)
        if read.returncode:
            return False, f"commit {commit[:12]} is not in this clone ({read.stderr.strip()})"
        applied = _git(["apply", "--cached", "--check", "-"], root, env, diff + "\n")
        return applied.returncode == 0, applied.stderr.strip()


def _resume_it_forbade(cell: Mapping) -> bool:
    """Whether a published cell says it resumed a checkpoint that its overrides had deleted
    (``sweep.reuse=false``, and no checkpoint named with ``ckpt_path=``)."""
    overrides = [str(o).replace(" ", "").lstrip("+").lower() for o in cell.get("overrides") or ()]
    named = any(
        o.startswith("ckpt_path=") and o.split("=", 1)[1] not in ("null", "none", "", "last")
        for o in overrides
    )
    return bool(cell.get("train_resumed")) and "sweep.reuse=false" in overrides and not named


def check_provenance(results: Path, root: Path) -> Findings:
    """Every record under ``results`` (any JSON with a provenance)."""
    found = Findings("provenance")
    known = commit_lookup(results)
    for path, prov in records(results):
        git = prov.get("git") or {}
        commit = git.get("commit")
        where = str(path.relative_to(results))
        if not commit:
            found.skip("records from outside a git checkout")
            continue
        if not known(commit):
            found.skip("records from commits outside the history (listed on PROVENANCE.md)")
            continue
        if not git.get("dirty"):
            found.checked += 1
            continue
        if git.get("diff_scope") and isinstance(git.get("diff"), str):
            found.checked += 1
            ok, words = diff_applies(root, commit, git["diff"])
            if not ok:
                found.differences.append(
                    f"{where}: its diff does not apply to {commit[:12]}: {words}"
                )
            continue
        found.skip("records whose diff is partial or missing (listed on PROVENANCE.md)")
    for path in sorted(results.rglob("cell.json")):
        found.checked += 1
        cell = read_json_or_none(path)
        if not isinstance(cell, dict):
            found.differences.append(f"{path.relative_to(results)}: not a readable JSON object")
        elif _resume_it_forbade(cell):
            found.differences.append(
                f"{path.relative_to(results)}: train_resumed is true, but its sweep ran with "
                "sweep.reuse=false, which deletes the cell's checkpoints and trains from the start"
            )
    page = results / AUDIT_PAGE
    found.checked += 1
    if not page.is_file() or page.read_text(encoding="utf-8") != audit_page(results):
        found.differences.append(f"{AUDIT_PAGE} does not list the records as they are")
    return found
