"""Discard a failed run's publication that never landed, so its rerun evaluates from a clean tree.

A sweep whose cells failed still publishes (``--publish ... --update``): the failed jobs become
rows of the results folder, uncommitted. Its rerun would then evaluate from a checkout with
uncommitted changes, and publishing refuses every record it makes (their
``provenance.git.dirty``). :func:`discard_failed_publication` puts the folder back as the commit
holds it before the rerun starts (``aggregate --restore DIR --discard-failed-publication``),
without loosening publishing's check. It discards only a folder that:

- is committed and has uncommitted changes that make a record dirty (changes to tracked files,
  staged or not; new files count only in a folder under the code folders), and its uncommitted
  job folders (new or changed) include a failed one: a failed publication. A job is failed as
  its row shows it: its ``cell.json`` status is not ``ok``, or its record is missing. A finished
  publication waiting for its commit is left as it is;
- holds nothing uncommitted but job folders and the folder's own pages (files directly in it,
  which publishing writes; a subfolder such as a search's is never discarded);
- is the checkout's only uncommitted work that makes a record dirty (no change to a tracked file
  elsewhere, no new file under the code folders: :func:`skipdecode.provenance.dirty_paths`, the
  rule every record's ``dirty`` flag follows), so that discarding it makes the tree clean;
- loses no finished evaluation: each finished job it holds has, byte for byte, its record in the
  cells directory, where the rerun finds it again (a publication whose finished jobs the rerun
  cannot find is refused with an error naming them).

Where it declines for the second or third reason it says why (nothing where there is no failed
publication); in a copy of a checkout checked against its manifest, or outside git, it does
nothing. Untracked files in the folder are deleted with the rest; ignored ones are kept.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ...io import read_json_or_none
from ...manifest import MANIFEST_ENV
from ...provenance import checkout_root, dirty_paths
from .identity import CELL_FILE, IDENTITY_FILE, portable_identity
from .publish import RECORD, PublishError, restored_source

__all__ = ["discard_failed_publication"]


def _git(args: list[str], cwd: Path) -> str:
    done = subprocess.run(
        ["git", "--literal-pathspecs", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise PublishError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout


def _uncommitted(root: Path, folder: Path) -> list[Path]:
    """Paths under ``folder`` (both relative to ``root``) that are new or have uncommitted
    changes; ignored files are not listed."""
    args = ["status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all"]
    out = _git([*args, "--", str(folder)], root)
    return [Path(entry[3:]) for entry in filter(None, out.split("\0"))]


def _status(job: Path) -> str | None:
    """A published job's status as its row says it: ``cell.json``'s, but failed where the cell
    finished and its record did not reach the folder (publishing's rule, ``table.py``: a
    missing record makes a finished cell a failed row)."""
    status = (read_json_or_none(job / CELL_FILE) or {}).get("status")
    return "failed" if status == "ok" and not (job / RECORD).is_file() else status


def _found_again(job: Path, cells_dir: Path) -> bool:
    """Whether the finished ``job``'s record is, byte for byte, where a rerun looks for it."""
    cell = read_json_or_none(job / CELL_FILE) or {}
    identity = read_json_or_none(job / IDENTITY_FILE)
    if not cell.get("source") or not (job / RECORD).is_file():
        return False
    where = restored_source(cell["source"], portable_identity(identity) if identity else None)
    record = cells_dir / where / RECORD
    return record.is_file() and record.read_bytes() == (job / RECORD).read_bytes()


def discard_failed_publication(published: str | Path, cells_dir: str | Path) -> tuple[list, str]:
    """Put ``published`` back as the commit holds it when it holds a failed run's uncommitted
    publication (see the module): returns the discarded jobs' names, or none and why not (empty
    when the folder holds no failed publication)."""
    published, cells_dir = Path(published).resolve(), Path(cells_dir)
    if os.environ.get(MANIFEST_ENV) or not published.is_dir():
        return [], ""  # a manifest copy's git directory (if any) is not the copy's history
    root = checkout_root(published)
    if root is None:
        return [], ""
    folder = published.relative_to(root.resolve())
    if not _git(["ls-tree", "HEAD", "--", str(folder)], root).strip():
        return [], ""  # never committed: its untracked files leave a record clean
    dirty = dirty_paths(root)
    if dirty is None:
        raise PublishError(f"git status failed in {root}")
    if not any(folder in p.parents for p in dirty):
        return [], ""
    inside = [p.relative_to(folder) for p in _uncommitted(root, folder)]
    names = {p.parts[0] for p in inside if (published / p.parts[0] / CELL_FILE).is_file()}
    status = {j: _status(published / j) for j in names}
    if all(s == "ok" for s in status.values()):
        return [], ""
    others = [str(folder / p) for p in inside if len(p.parts) > 1 and p.parts[0] not in status]
    others += [str(p) for p in dirty if folder not in p.parents]
    if others:
        return [], (
            f"{folder} holds a failed publication, but discarding it would not leave the tree "
            f"clean or would discard more: {', '.join(sorted(others)[:5])}"
        )
    lost = [
        j
        for j in sorted(status)
        if status[j] == "ok" and not _found_again(published / j, cells_dir)
    ]
    if lost:
        raise PublishError(
            f"{folder} holds an uncommitted publication with failed jobs, but its finished "
            f"job(s) {', '.join(lost)} have no identical record in {cells_dir}: discarding it "
            "would lose them; commit the folder (a rerun replaces its failed rows) or put "
            "those records back first"
        )
    _git(["restore", "--source=HEAD", "--staged", "--worktree", "--", str(folder)], root)
    _git(["clean", "-fdq", "--", str(folder)], root)
    if _uncommitted(root, folder):
        raise PublishError(f"{folder} still has uncommitted changes after the discard")
    return sorted(status), ""
