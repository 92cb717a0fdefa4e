"""Discard a failed run's publication that never landed, so its rerun evaluates from a clean tree.

A sweep whose cells failed still publishes (``--publish ... --update``): the failed jobs become
rows of the results folder, uncommitted. Its rerun would then evaluate from a checkout with
uncommitted changes, and publishing refuses every record it makes (their
``provenance.git.dirty``). :func:`discard_failed_publication` puts the folder back as the commit
holds it before the rerun starts (``aggregate --restore DIR --discard-failed-publication``),
without loosening publishing's check:

- only when the folder holds a publication that is not committed and that holds a failed job (a
  job whose ``cell.json`` status is not ``ok``): anything else is left as it is;
- only when the folder's changes are the checkout's only uncommitted changes to tracked files
  (discarding them makes the tree clean; otherwise the rerun is dirty anyway and publishing says
  so);
- never losing a finished evaluation: each finished job of the discarded publication must have
  its record in the cells directory, where the rerun finds it again and publishes it again;
  otherwise nothing is discarded and the error names the jobs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ...io import read_json_or_none
from .identity import CELL_FILE, IDENTITY_FILE, portable_identity
from .publish import RECORD, PublishError, restored_source

__all__ = ["discard_failed_publication"]


def _git(args: list[str], cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise PublishError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout


def _changed(folder: Path, root: Path, untracked: bool) -> list[Path]:
    """Paths (relative to ``root``) with uncommitted changes, within ``folder`` or everywhere."""
    args = ["status", "--porcelain=v1", "-z", "--no-renames"]
    args.append(f"--untracked-files={'all' if untracked else 'no'}")
    out = _git([*args, "--", str(folder.relative_to(root))], root)
    return [Path(entry[3:]) for entry in filter(None, out.split("\0"))]


def _unfinished_record(job: Path, cells_dir: Path) -> bool:
    """Whether the finished ``job`` lacks its evaluation record in ``cells_dir``."""
    cell = read_json_or_none(job / CELL_FILE) or {}
    identity = read_json_or_none(job / IDENTITY_FILE)
    source = cell.get("source")
    if not source:
        return True
    where = restored_source(source, portable_identity(identity) if identity else None)
    return not (cells_dir / where / RECORD).is_file()


def discard_failed_publication(published: str | Path, cells_dir: str | Path) -> list[str]:
    """Put ``published`` back as the commit holds it when it holds a failed run's uncommitted
    publication (see the module); returns the discarded jobs' names (empty: nothing discarded)."""
    published, cells_dir = Path(published).resolve(), Path(cells_dir)
    if not published.is_dir():
        return []
    root = Path(_git(["rev-parse", "--show-toplevel"], published).strip())
    if not _changed(published, root, untracked=False):  # a first publication changes nothing
        return []  # tracked: the rerun's tree is as clean as it was
    inside = _changed(published, root, untracked=True)
    anywhere = _changed(root, root, untracked=False)
    folder = published.relative_to(root)
    if any(folder not in p.parents for p in anywhere):
        return []
    jobs = sorted({folder / p.relative_to(folder).parts[0] for p in inside if len(p.parts) > 1})
    jobs = [j for j in jobs if (root / j / CELL_FILE).is_file()]
    status = {j: (read_json_or_none(root / j / CELL_FILE) or {}).get("status") for j in jobs}
    if not any(s != "ok" for s in status.values()):
        return []
    lost = [j.name for j in jobs if status[j] == "ok" and _unfinished_record(root / j, cells_dir)]
    if lost:
        raise PublishError(
            f"{published} holds an uncommitted publication with failed jobs, but its finished "
            f"job(s) {', '.join(lost)} have no evaluation record in {cells_dir}: discarding it "
            "would lose them; commit the folder (the rerun replaces the failed rows) or restore "
            "those records first"
        )
    _git(["checkout", "HEAD", "--", str(folder)], root)
    _git(["clean", "-fdq", "--", str(folder)], root)
    return [j.name for j in jobs]
