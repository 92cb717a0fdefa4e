"""A commit's file manifest: what lets a copy of a checkout say in its records which commit it
runs, and whether any tracked file differs from it, without trusting the copy's git directory (a
device machine gets the working tree, and a git directory there can be a stale snapshot: one
recorded an earlier commit with a diff that left out the files added since).

    python -m skipdecode.manifest write .device/tree.json     # here, on a clean checkout
    SKIPDECODE_TREE_MANIFEST=.device/tree.json <command>      # there: provenance checks the copy

The manifest holds the commit, the branch and each tracked file's git blob id; checking it hashes
every listed file of the copy the way git does (``blob <size>\\0<bytes>``, SHA-1). A copy whose
files all match is recorded as that commit, clean; any other copy as dirty, with the files that
differ (no diff: the copy has none to take), which publishing then refuses.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

from .io import read_record, write_json_atomic

__all__ = ["MANIFEST_ENV", "blob_id", "check_manifest", "write_manifest"]

#: The environment variable naming the manifest a copy is checked against.
MANIFEST_ENV = "SKIPDECODE_TREE_MANIFEST"


def _git(args: list[str], root: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True
    ).stdout


def blob_id(path: Path) -> str:
    """The git blob id of a file (of a symbolic link: of its target's name, as git stores it)."""
    data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_manifest(root: Path, out: Path) -> dict[str, Any]:
    """The manifest of ``root``'s checked-out commit, written to ``out``; a checkout whose
    tracked files differ from its commit is refused (the manifest would not describe it)."""
    root = Path(_git(["rev-parse", "--show-toplevel"], root).strip())
    if _git(["status", "--porcelain", "--untracked-files=no"], root).strip():
        raise ValueError(
            f"{root} has uncommitted changes to tracked files; a manifest describes a commit: "
            "commit (or stash) them first"
        )
    files = {}
    for line in _git(["ls-tree", "-r", "-z", "HEAD"], root).split("\0"):
        if not line:
            continue
        meta, path = line.split("\t", 1)
        _, kind, sha = meta.split()
        if kind == "blob":  # submodules (commits) are not files of this checkout
            files[path] = sha
    manifest = {
        "commit": _git(["rev-parse", "HEAD"], root).strip(),
        "branch": _git(["symbolic-ref", "--short", "-q", "HEAD"], root).strip() or None,
        "files": files,
    }
    write_json_atomic(out, manifest)
    return manifest


def check_manifest(manifest: Path, root: Path) -> dict[str, Any]:
    """Provenance's git fields for the copy at ``root``, from ``manifest``: its commit, and dirty
    unless every listed file is present with the listed blob id (``changed``: those that are
    not)."""
    m = read_record(manifest)

    def differs(path: Path, sha: str) -> bool:
        present = path.is_file() or path.is_symlink()
        return not present or blob_id(path) != sha

    changed = sorted(path for path, sha in m["files"].items() if differs(root / path, sha))
    info: dict[str, Any] = {
        "commit": m["commit"],
        "dirty": bool(changed),
        "branch": m.get("branch"),
        "root": str(root),
        "source": f"manifest {manifest}",
    }
    if changed:  # no diff to keep: publishing refuses such a record
        info.update(changed=changed[:100], diff=None)
    return info


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    w = sub.add_parser("write", help="the manifest of this checkout's commit")
    w.add_argument("out", type=Path)
    c = sub.add_parser("check", help="check a copy against a manifest")
    c.add_argument("manifest", type=Path)
    c.add_argument("--root", type=Path, default=Path("."))
    args = p.parse_args(argv)
    try:
        if args.verb == "write":
            m = write_manifest(Path("."), args.out)
            print(f"wrote {args.out}: commit {m['commit'][:12]}, {len(m['files'])} files")
        else:
            info = check_manifest(args.manifest, args.root)
            state = "dirty: " + ", ".join(info["changed"]) if info["dirty"] else "clean"
            print(f"commit {info['commit'][:12]}: {state}")
    except (ValueError, subprocess.CalledProcessError) as e:
        p.error(str(e))


if __name__ == "__main__":
    main()
