"""Which committed records say exactly what code made them.

A record (an evaluation's ``record.json``, a benchmark's JSON) carries its provenance: the
commit, and whether the checkout had uncommitted changes. A record from a clean commit, or from a
dirty one whose whole diff it keeps (``provenance.git.diff``, with ``diff_scope``: changed and
new files), can be reproduced from what it holds; one whose diff predates new files being kept
(no ``diff_scope``) lacks any module the run added; a dirty one without the diff cannot. Training
records (``metrics.json``) kept under ``results/`` are listed when they hold no provenance. Publishing and the benchmarks refuse to write the latter now
(:func:`skipdecode.provenance.require_recorded_diff`); this page lists the ones committed before
that, per results folder, and :func:`mark_pages` puts a mark on each one's own page, so that
their numbers are read as such. It also counts the code versions of each folder's clean records
(:data:`CODE_PATHS` at their commits): commits that differ only in results and docs are one code.

    python -m skipdecode.experiments.sweeps.audit results          # writes results/PROVENANCE.md
    python -m skipdecode.experiments.sweeps.audit results --check  # fails if the page is out of date
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...io import write_text_atomic
from ...provenance import diff_missing, machine
from .pending import pending_section

__all__ = [
    "AUDIT_PAGE",
    "NO_DIFF_MARK",
    "CODE_PATHS",
    "audit_page",
    "code_lookup",
    "commit_lookup",
    "mark_pages",
    "provenance_note",
    "records",
    "write_audit",
]

AUDIT_PAGE = "PROVENANCE.md"
#: What makes a record's numbers at its commit: the package, its configs and its pinned packages.
CODE_PATHS = ("src", "conf", "pyproject.toml")

#: The first line of a record's own page (``<stem>.md`` beside ``<stem>.json``) when the record
#: keeps no diff of the uncommitted changes it was written with.
NO_DIFF_MARK = "> **Provenance:** written from commit {commit} with uncommitted changes whose diff"
#: What a mark or a table's note says such numbers are.
UNRECOVERABLE = (
    "the numbers stand as measured, but the code that made them cannot be recovered exactly"
)
#: (path, provenance) of each record, as :func:`records` yields them.
Found = Iterable[tuple[Path, dict[str, Any]]]


def records(results: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every JSON file under ``results`` that holds a provenance (sorted by path)."""
    for path in sorted(results.rglob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("provenance"), dict):
            yield path, data["provenance"]


def _kind(prov: Mapping[str, Any], known: Callable[[str], bool]) -> int:
    """0 clean; 1 uncommitted with its whole diff; 2 with the diff of tracked files only (kept
    before new files were: a module the run added is not in it); 3 with no diff; 4 from a
    commit outside the checked-out history (a branch that never landed, or one whose commits
    landed only as copies: a fresh clone of the main branch lacks it)."""
    git = prov.get("git") or {}
    if git.get("commit") and not known(str(git["commit"])):
        return 4
    if diff_missing(dict(prov)):
        return 3
    if not git.get("dirty"):
        return 0
    return 1 if git.get("diff_scope") else 2


def commit_lookup(results: Path) -> Callable[[str], bool]:
    """Whether a commit is in the checked-out history of the repository holding ``results``: an
    ancestor of ``HEAD``, so the answer is the same in every clone of a branch, whatever other
    branches a clone holds (every commit counts as known when ``results`` is in no repository,
    as in a copy without its history)."""
    root = results.resolve().parent
    inside = subprocess.run(
        ["git", "rev-parse", "--git-dir"], cwd=root, capture_output=True, check=False
    )
    if inside.returncode:
        return lambda commit: True
    cache: dict[str, bool] = {}

    def known(commit: str) -> bool:
        if commit not in cache:
            found = subprocess.run(
                ["git", "merge-base", "--is-ancestor", commit, "HEAD"],
                cwd=root, capture_output=True, check=False,
            )  # fmt: skip
            cache[commit] = found.returncode == 0
        return cache[commit]

    return known


def code_lookup(results: Path) -> Callable[[str], str | None]:
    """A commit's code version: the git object names of its :data:`CODE_PATHS`, joined (``None``
    for a commit the repository holding ``results`` lacks, or outside a repository)."""
    root = results.resolve().parent
    cache: dict[str, str | None] = {}

    def code(commit: str) -> str | None:
        if commit not in cache:
            names = [f"{commit}:{path}" for path in CODE_PATHS]
            found = subprocess.run(
                ["git", "rev-parse", *names],
                cwd=root, capture_output=True, text=True, check=False,
            )  # fmt: skip
            cache[commit] = None if found.returncode else " ".join(found.stdout.split())
        return cache[commit]

    return code


def _code_section(clean: Mapping[str, list[str]], code: Callable[[str], str | None]) -> list[str]:
    """The page's section on the code versions of each folder's clean records (``clean``: folder
    -> the commits of its clean records, one per record)."""
    lines = [
        "## Code versions of each folder's clean records",
        "",
        "A code version is what a commit holds in "
        + ", ".join(f"`{p}`" for p in CODE_PATHS)
        + ": commits that differ only in results and docs are one code version, so a folder "
        "whose clean records share one was made by one code. The CPU can still change a "
        "cell's outputs; each record names it.",
        "",
        "| folder | clean records | commits | code versions |",
        "|---|---|---|---|",
    ]
    for folder, commits in sorted(clean.items()):
        versions = {code(c) for c in commits}
        shown = "unknown" if None in versions else len(versions)
        lines.append(f"| {folder} | {len(commits)} | {len(set(commits))} | {shown} |")
    return lines


def _machine_section(machines: Mapping[str, Mapping[str, int]]) -> list[str]:
    """The page's section on the machines of each folder's records (``machines``: folder ->
    machine label -> records)."""
    lines = [
        "## Machines of each folder's records",
        "",
        "Each record names the machine it ran on (`provenance.device`): the GPU, or the CPU with "
        "the instruction set of torch's kernels and the CPU's generation (family, model, "
        "stepping). Two CPUs of one name can differ in both; another instruction set rounds "
        "otherwise, so a cell trained or decoded again on it can write other text, and its "
        "times are another machine's. Records older than a field say it is not recorded.",
        "",
        "| folder | machine | records |",
        "|---|---|---|",
    ]
    for folder, labels in sorted(machines.items()):
        lines += [f"| {folder} | {label} | {n} |" for label, n in sorted(labels.items())]
    return lines


def unrecorded_training_runs(results: Path) -> list[Path]:
    """Training records (``metrics.json`` of a run kept under ``results/``) that hold no
    provenance: written before training runs recorded theirs."""
    out = []
    for path in sorted(results.rglob("metrics.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "run_info" not in data and "memory_plan" in data:
            if not isinstance(data.get("provenance"), dict):
                out.append(path)
    return out


def audit_page(results: Path, found: Found | None = None) -> str:
    """The page: counts per folder, then the records whose diff is partial or missing, and the
    training records without provenance (``found``: the records, read from ``results`` when not
    given)."""
    counts: dict[str, list[int]] = {}  # folder -> records per kind (_kind)
    listed: dict[int, list[tuple[str, str | None]]] = {2: [], 3: [], 4: []}
    clean: dict[str, list[str]] = {}  # folder -> the commit of each clean record
    machines: dict[str, Counter[str]] = {}  # folder -> machine label -> records
    known = commit_lookup(results)
    for path, prov in records(results) if found is None else found:
        rel = path.relative_to(results)
        folder = rel.parts[0] if len(rel.parts) > 1 else "."
        kind = _kind(prov, known)
        counts.setdefault(folder, [0, 0, 0, 0, 0])[kind] += 1
        machines.setdefault(folder, Counter())[machine(prov.get("device") or {})] += 1
        if kind == 0 and (prov.get("git") or {}).get("commit"):
            clean.setdefault(folder, []).append(str(prov["git"]["commit"]))
        if kind in listed:
            listed[kind].append((rel.as_posix(), (prov.get("git") or {}).get("commit")))
    training = [p.relative_to(results).as_posix() for p in unrecorded_training_runs(results)]
    lines = [
        "# Provenance of the committed records",
        "",
        "Generated by `python -m skipdecode.experiments.sweeps.audit results`; do not edit. A record from "
        "a clean commit, or from a checkout with uncommitted changes whose whole diff it keeps "
        "(changed files and files the run added), says exactly what code made it. Records kept "
        "before new files went into the diff keep the tracked files' changes only: a module the "
        "run added is missing from it, so their code is their commit, that diff and files nobody "
        "can recover. The records listed last keep no diff at all: their numbers stand as "
        "measured, but the code that made them is their commit plus changes nobody can recover. "
        "Publishing and the benchmarks now refuse to write such records.",
        "",
        "| folder | clean commit | uncommitted, whole diff kept | uncommitted, diff of tracked "
        "files only | uncommitted, no diff | commit outside the history |",
        "|---|---|---|---|---|---|",
        *(
            f"| {f} | {c[0]} | {c[1]} | {c[2]} | {c[3]} | {c[4]} |"
            for f, c in sorted(counts.items())
        ),
        "",
        *_code_section(clean, code_lookup(results)),
        "",
        *_machine_section(machines),
        "",
        f"## Records whose diff lacks the files the run added ({len(listed[2])})",
        "",
    ]
    lines += [f"- `{p}` (commit {str(c)[:12]})" for p, c in listed[2]] or ["None."]
    lines += ["", f"## Records without their diff ({len(listed[3])})", ""]
    lines += [f"- `{p}` (commit {str(c)[:12]})" for p, c in listed[3]] or ["None."]
    lines += ["", f"## Records from commits outside the history ({len(listed[4])})", ""]
    lines += [
        "Written from a commit that is not an ancestor of this one (a branch that never landed,"
        " or landed as copies): a clone of this branch cannot check it out.",
        "",
    ]
    lines += [f"- `{p}` (commit {str(c)[:12]})" for p, c in listed[4]] or ["None."]
    lines += [
        "",
        f"## Training records without provenance ({len(training)})",
        "",
        "Written before a training run recorded its commit (`metrics.json` now keeps "
        "`provenance`): what code trained them is not recorded.",
        "",
    ]
    lines += [f"- `{p}`" for p in training] or ["None."]
    return "\n".join([*lines, "", *pending_section(results)]) + "\n"


def _marked(text: str, commit: str) -> str:
    mark = (
        NO_DIFF_MARK.format(commit=commit)
        + f" the record does not keep: {UNRECOVERABLE} (`results/PROVENANCE.md`).\n\n"
    )
    head = NO_DIFF_MARK.split("{commit}")[0]
    if text.startswith(head):  # marked before: replace the mark and the blank line after it
        text = text.split("\n", 2)[2] if text.count("\n") >= 2 else ""
    return mark + text


def mark_pages(results: Path, found: Found | None = None) -> list[Path]:
    """Put the provenance mark on the page of every record without its diff (a ``.md`` of the
    same stem beside the JSON); returns the pages whose text changed."""
    changed = []
    for path, prov in records(results) if found is None else found:
        page = path.with_suffix(".md")
        if not diff_missing(prov) or not page.is_file():
            continue
        text = page.read_text(encoding="utf-8")
        new = _marked(text, str((prov.get("git") or {}).get("commit"))[:12])
        if new != text:
            write_text_atomic(page, new)
            changed.append(page)
    return changed


def write_audit(results: Path) -> list[Path]:
    """Write ``results/PROVENANCE.md`` and mark the pages of the records without their diff,
    reading every record once; returns the pages whose mark changed."""
    found = list(records(results))
    write_text_atomic(results / AUDIT_PAGE, audit_page(results, found))
    return mark_pages(results, found)


def _job_number(job: str) -> tuple[int, str]:
    return (int(job), "") if job.isdigit() else (1 << 30, job)


def provenance_note(cells: Sequence[Mapping[str, Any]]) -> str:
    """The line a table carries under it when some of its cells were evaluated from a checkout
    with uncommitted changes whose diff the record does not keep (``""`` when none was)."""
    jobs = sorted((str(row["job"]) for row in cells if row.get("no_diff")), key=_job_number)
    if not jobs:
        return ""
    one = len(jobs) == 1
    return (
        f"\n{'Job' if one else 'Jobs'} {', '.join(jobs)} ({len(jobs)} of {len(cells)}) "
        f"{'was' if one else 'were'} written from a checkout with uncommitted changes and "
        f"{'keeps' if one else 'keep'} no diff (`results/PROVENANCE.md`): {UNRECOVERABLE}.\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("results", type=Path, help="the results folder (results/)")
    p.add_argument("--check", action="store_true", help="fail if the committed page differs")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        p.error(f"results: {str(args.results)!r} is not a directory")
    target = args.results / AUDIT_PAGE
    if args.check:
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current != audit_page(args.results):
            print(
                f"{target} is out of date: run python -m skipdecode.experiments.sweeps.audit results"
            )
            return 1
        return 0
    marked_pages = write_audit(args.results)
    print(f"wrote {target}")
    for marked in marked_pages:
        print(f"marked {marked}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
