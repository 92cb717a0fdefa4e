"""What the published records lack to be recomputed: the evaluation records that publish a
measured speedup without the raw timings it comes from, and the benchmark records whose variants
are timed without their raw seconds (what ``make audit`` skips), with the command that runs each
again (``python -m skipdecode.experiments.sweeps.rerun --pending results`` prints them)."""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ...evaluation.record import RECORD_FILE
from ...evaluation.speed import own_baseline
from ...io import read_json_or_none
from ...provenance import machine
from ..benchmarks.bench_timing import variants_without_raw
from .identity import CELL_FILE

__all__ = [
    "bench_command", "folder_machines", "lacks_raw_timings", "natural_order", "pending",
    "pending_benchmarks", "pending_section", "print_pending",
]  # fmt: skip


def lacks_raw_timings(record: dict) -> bool:
    """Whether a record publishes a measured speedup over another schedule without the raw
    timings it comes from (its own baseline's speedups are 1 by definition)."""
    speed = record.get("speed") or {}
    measured = speed.get("measured_speedup_decode") is not None
    return measured and not speed.get("raw") and not own_baseline(speed)


def natural_order(path: Path) -> tuple:
    """Sort key that puts job ``3`` before ``10``."""
    return tuple(
        (0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", str(path))
    )


def pending(results: Path) -> dict[Path, list[Path]]:
    """The folders under ``results`` (a results tree or one folder) holding an evaluation record
    that lacks the raw timings of a speedup it publishes, by folder, in natural order."""
    found: dict[Path, list[Path]] = {}
    for path in sorted(results.glob(f"**/{RECORD_FILE}"), key=natural_order):
        record = read_json_or_none(path)
        if record is not None and lacks_raw_timings(record):
            found.setdefault(path.parent.parent, []).append(path.parent)
    return found


def folder_machines(folder: Path) -> dict[str, int]:
    """How many of ``folder``'s job records ran on each machine
    (:func:`skipdecode.provenance.machine`), most first."""
    provs = [
        (read_json_or_none(p) or {}).get("provenance") for p in folder.glob(f"*/{RECORD_FILE}")
    ]
    counts = Counter(machine(prov.get("device") or {}) for prov in provs if isinstance(prov, dict))
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def bench_command(argv: Sequence[str]) -> str:
    """The command a benchmark record's ``argv`` ran, as ``python -m <module> ...`` where its
    script is a module of the package (else ``python <script> ...``, as recorded)."""
    script, *args = argv
    module = re.search(r"(?:^|/)src/(skipdecode/.+)\.py$", script)
    head = ["-m", module.group(1).replace("/", ".")] if module else [script]
    return shlex.join(["python", *head, *args])


def pending_benchmarks(results: Path) -> list[tuple[Path, int, str, str]]:
    """The benchmark records under ``results/bench`` with variants timed without their raw
    seconds: (record, how many variants, the device it ran on, the command it ran)."""
    found = []
    for path in sorted((results / "bench").glob("*.json"), key=natural_order):
        record = read_json_or_none(path)
        if not isinstance(record, dict) or not isinstance(record.get("provenance"), dict):
            continue
        missing = variants_without_raw(record)
        if missing:
            prov = record["provenance"]
            argv = prov.get("argv") or ["(not recorded)"]
            found.append((path, missing, machine(prov.get("device") or {}), bench_command(argv)))
    return found


def print_pending(results: Path, say=print) -> None:
    """List what :func:`pending` and :func:`pending_benchmarks` find under ``results``, each
    folder with the command that reruns its jobs (and, where only part of it is pending, the
    command for every job: what a rerun whose outputs differ needs)."""
    for folder, jobs in pending(results).items():
        say(f"{folder}: {len(jobs)} without raw timings: {' '.join(j.name for j in jobs)}")
        machines = folder_machines(folder)
        if machines:  # a rerun on another machine writes another machine's outputs and times
            say("  its records ran on: " + "; ".join(f"{m} ({n})" for m, n in machines.items()))
        if all((j / CELL_FILE).is_file() for j in jobs):
            say(f"  python -m skipdecode.experiments.sweeps.rerun {' '.join(map(str, jobs))}")
            every = sorted((c.parent for c in folder.glob(f"*/{CELL_FILE}")), key=natural_order)
            if every != jobs:  # refused where code or CPU changed since: the whole folder
                say(
                    "  (where their outputs differ now, every job of the folder: python -m "
                    f"skipdecode.experiments.sweeps.rerun {' '.join(map(str, every))})"
                )
        else:
            say(f"  (no {CELL_FILE}: not a sweep's job; rerun with the command its page names)")
    for path, missing, device, command in pending_benchmarks(results):
        say(f"{path}: {missing} variants without raw seconds, measured on {device}")
        say(f"  {command}")


def pending_section(results: Path) -> list[str]:
    """The provenance page's section on what :func:`pending` and :func:`pending_benchmarks` find:
    each record whose published speedups do not recompute from raw timings."""
    jobs = [j for found in pending(results).values() for j in found]
    benchmarks = pending_benchmarks(results)
    count = len(jobs) + len(benchmarks)
    lines = [
        f"## Records whose speedups do not recompute from raw timings ({count})",
        "",
        "Timed before records kept each round's or repeat's seconds, their speedups stand as "
        "measured and `make audit` cannot recompute them from raw timings: an evaluation's "
        "tables print the median of the decode rounds it kept and no end-to-end speedup, a "
        "benchmark's pages the ratios of its kept medians (which the audit checks). Each is "
        "recomputable once it is timed again (`python -m skipdecode.experiments.sweeps.rerun "
        "--pending results` prints each one's command).",
        "",
    ]
    lines += [f"- `{(j / RECORD_FILE).relative_to(results).as_posix()}`" for j in jobs]
    lines += [
        f"- `{path.relative_to(results).as_posix()}` ({missing} variant{'s' * (missing != 1)}; "
        f"{device})"
        for path, missing, device, _ in benchmarks
    ]
    return lines if jobs or benchmarks else [*lines, "None."]
