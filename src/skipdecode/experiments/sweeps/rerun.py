"""Published cells trained and evaluated again from the current commit, so their records keep
raw timings.

A record written before raw timings were kept gives its decode speedup only from the rounds it
kept and no end-to-end speedup (docs/METRICS.md), and a published cell keeps its record, not its
trained model: the way to a record that keeps them is to train and evaluate the cell again. For
each published job this runs the sweep command its ``cell.json`` recorded (its overrides) under
the sweep name ``rerun_<folder>_<job>`` with ``sweep.reuse=false`` (no checkpoint resumed, no
evaluation restored), checks that the rerun is the cell it replaces (the same cell id and evaluation folder:
the same training and evaluation configs) and writes the outputs it published (outputs that
either side did not keep count as differing; where the code that trains or decodes a
cell changed since, or the CPU did, the same config can write other text: another CPU's kernels
round otherwise and training carries that into other weights; such a rerun is published only
beside a rerun of every job of its folder, so one table never mixes two codes, or with
``--outputs-may-differ``; the refusal names both CPUs where they differ), publishes the reruns
into their folder with ``--update`` (each replaces the job of the same model, dataset, schedule,
seed, evaluated steps and training config; publishing's dirty and busy checks apply) and
rewrites every generated page (``make docs``; ``--no-pages`` leaves that to the end of a chain of
reruns). ``--commit`` publishes and commits each job as its rerun finishes, so a long chain that
stops keeps what it finished. A job whose rerun already finished is not run again, so an
interrupted command resumes where it stopped::

    python -m skipdecode.experiments.sweeps.rerun results/scitldr_smollm2/1 results/scitldr_smollm2/3
    python -m skipdecode.experiments.sweeps.rerun results/e2e_smollm2/e2e_smollm2_seeds-1 --dry-run
    python -m skipdecode.experiments.sweeps.rerun --commit --no-pages results/e2e_gemma3/{1,2,3}

``--pending`` lists, folder by folder, the published jobs whose record publishes a measured
speedup without the raw timings it comes from (what ``make audit`` counts as not recomputable),
each folder's rerun command and the machines its records ran on beside them (a rerun belongs on
the folder's machine: another one writes other outputs and times); a folder whose rerun must be
whole (its code changed since) is rerun with every job. It then lists the benchmark records
(``results/bench/``) whose variants are timed without the seconds they come from, with the
machine each ran on and the command it ran (a benchmark is rerun by running that command
again, on a quiet machine of the same kind)::

    python -m skipdecode.experiments.sweeps.rerun --pending results
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...evaluation.record import RECORD_FILE
from ...io import read_json_or_none
from ...provenance import checkout_root, machine
from .cell_outputs import cell_generations
from .identity import CELL_FILE
from .pending import print_pending
from .publish import evaluation_folder

__all__ = [
    "Rerun",
    "RerunError",
    "plan_rerun",
    "rerun",
    "rerun_and_commit",
]

SWEEPS = Path("outputs/sweep")


class RerunError(RuntimeError):
    """A job that cannot be rerun as asked."""


@dataclass(frozen=True)
class Rerun:
    """One published job and the sweep that trains and evaluates it again."""

    job: Path
    cell_id: str
    recorded: tuple[str, ...]  # the job's sweep overrides, less its sweep name and reuse

    @property
    def folder(self) -> Path:
        return self.job.parent

    @property
    def name(self) -> str:
        return f"rerun_{self.folder.name}_{self.job.name}"

    @property
    def overrides(self) -> tuple[str, ...]:
        return (*self.recorded, f"sweep.name={self.name}", "sweep.reuse=false")

    def sweep_dir(self, sweeps: Path = SWEEPS) -> Path:
        return sweeps / self.name


def plan_rerun(job: Path) -> Rerun:
    """The rerun of a published job folder (``results/<folder>/<job>``), from its cell.json."""
    cell = read_json_or_none(job / CELL_FILE)
    if cell is None:
        raise RerunError(f"job {str(job)!r}: no readable {CELL_FILE} (a published job folder?)")
    if cell.get("status") != "ok" or not cell.get("cell_id"):
        raise RerunError(
            f"job {str(job)!r}: status {cell.get('status')!r}, cell id {cell.get('cell_id')!r}; "
            "only a finished cell with its id can be rerun and checked"
        )
    overrides = [str(o) for o in cell.get("overrides") or []]
    if not any(o.startswith("experiment=") for o in overrides):
        raise RerunError(
            f"job {str(job)!r}: its cell.json records no sweep command (overrides {overrides}); "
            "rerun it with the command its results folder's README or Makefile target names"
        )
    kept = tuple(o for o in overrides if not o.startswith(("sweep.name=", "sweep.reuse=")))
    return Rerun(job, str(cell["cell_id"]), kept)


def _finished(run: Rerun, sweeps: Path) -> dict | None:
    cells = [read_json_or_none(p) for p in sorted(run.sweep_dir(sweeps).glob(f"*/{CELL_FILE}"))]
    return next((c for c in cells if c and c.get("status") == "ok"), None)


def _outputs(record: Path) -> list | None:
    """The outputs of the generations beside an evaluation record, in input order (None: none
    kept)."""
    found = cell_generations({"record": str(record)})
    return None if found is None else [row.get("output") for row in found[0]]


def _machine(record: Path) -> str:
    """The machine a record ran on (:func:`skipdecode.provenance.machine`)."""
    return machine(((read_json_or_none(record) or {}).get("provenance") or {}).get("device") or {})


def _changed_outputs(run: Rerun, cell: dict) -> str | None:
    """How many of the published job's outputs its rerun writes otherwise, and on which CPUs
    both ran where they differ, or that either kept none (None: all alike)."""
    published = _outputs(run.job / RECORD_FILE)
    again = _outputs(Path(cell["record"])) if cell.get("record") else None
    if published is None or again is None:  # unknown is not alike
        kept = "the rerun" if published is not None else "the published job"
        return f"{run.job}: {kept} kept no outputs, so whether they differ is not known"
    differ = sum(a != b for a, b in zip(published, again)) + abs(len(published) - len(again))
    if not differ:
        return None
    before, now = _machine(run.job / RECORD_FILE), _machine(Path(cell["record"]))
    where = f" (published from {before}, rerun on {now})" if before != now else ""
    return f"{run.job}: {differ} of {len(published)} outputs differ{where}"


def _whole(folder: Path, runs: Sequence[Rerun]) -> bool:
    """Whether the reruns cover every published job of ``folder``."""
    published = {p.parent.name for p in folder.glob(f"*/{CELL_FILE}")}
    return published <= {r.job.name for r in runs if r.folder == folder}


def rerun(
    jobs: Sequence[Path],
    dry_run: bool = False,
    sweeps: Path = SWEEPS,
    say=print,
    outputs_may_differ: bool = False,
    pages: bool = True,
) -> list[list[str]]:
    """Rerun, check, publish and rewrite the pages (module doc; without ``pages``, publish only:
    a chain of reruns rewrites them once, with ``make docs``); returns the commands run (with
    ``dry_run``, the commands it would run, nothing run)."""
    runs = [plan_rerun(Path(j)) for j in jobs]
    ran: list[list[str]] = []

    def call(module: str, *args: str) -> None:
        cmd = [sys.executable, "-m", module, *args]
        say(shlex.join(["python", *cmd[1:]]))
        ran.append(cmd)
        if not dry_run and subprocess.run(cmd, check=False).returncode:
            raise RerunError(f"{shlex.join(cmd[1:])} failed")

    for run in runs:
        if _finished(run, sweeps) is not None:
            say(f"# {run.job}: its rerun finished in {run.sweep_dir(sweeps)}")
        else:
            call("skipdecode.sweep", "-m", *run.overrides)
    changed = []
    for run in runs if not dry_run else ():
        cell = _finished(run, sweeps)
        if cell is None:
            raise RerunError(f"{run.job}: the rerun in {run.sweep_dir(sweeps)} did not finish")
        if cell.get("cell_id") != run.cell_id:
            raise RerunError(
                f"{run.job}: the rerun trained cell {cell.get('cell_id')!r}, not the published "
                f"{run.cell_id!r} (its training config differs now); nothing published"
            )
        published = read_json_or_none(run.job / CELL_FILE) or {}
        evaluation = evaluation_folder(published), evaluation_folder(cell)
        if evaluation[0] and evaluation[0] != evaluation[1]:
            raise RerunError(
                f"{run.job}: the rerun evaluated as {evaluation[1]!r}, not the published "
                f"{evaluation[0]!r} (its evaluation config differs now); nothing published"
            )
        changed.append((run, _changed_outputs(run, cell)))
    partial = [why for r, why in changed if why and not _whole(r.folder, runs)]
    if partial and not outputs_may_differ:
        raise RerunError(
            "; ".join(partial) + ": outputs differ when the code that trains or decodes a cell "
            "changed since it was published, or the CPU did (its kernels round otherwise, and "
            "training carries that into other weights), so publishing part of a folder could "
            "put two codes or two machines' weights in one table; rerun every job of the folder "
            "(or pass --outputs-may-differ); nothing published"
        )
    for _, why in changed:
        if why:
            say(f"# {why} (published: every job of its folder reran, or --outputs-may-differ)")
    for folder in dict.fromkeys(r.folder for r in runs):
        names = [str(r.sweep_dir(sweeps)) for r in runs if r.folder == folder]
        call("skipdecode.aggregate", *names, "--publish", str(folder), "--update")
    for results in dict.fromkeys(r.folder.parent for r in runs) if pages else ():
        call("skipdecode.experiments.sweeps.pages", str(results))
    return ran


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )


def _checkout(path: Path) -> Path | None:
    """The top of the git checkout holding ``path``, resolved (None: in none)."""
    root = checkout_root(path)
    return root.resolve() if root else None


def rerun_and_commit(
    jobs: Sequence[Path], say=print, code: Path | None = None, **options
) -> list[list[str]]:
    """Rerun, check and publish one job at a time, committing each (its results tree, and
    README and docs when the pages are rewritten) as it finishes, so a chain of reruns that
    stops keeps what it finished; ``options`` as :func:`rerun`'s. A job published alone is not
    its whole folder, so one whose outputs differ needs ``outputs_may_differ``. The checkout
    holding the jobs must be the one whose code runs (``code``: this package's), or its
    records would name another commit than the one they are committed to."""
    ran: list[list[str]] = []
    running = _checkout(code or Path(__file__).resolve().parent)
    for job in map(Path, jobs):
        root = _checkout(job)
        if root is None or root != running:
            raise RerunError(
                f"job {str(job)!r}: it is in checkout {root}, but the code that would rerun it is "
                f"{running}'s; run from the checkout whose code you mean (PYTHONPATH=<it>/src); "
                "nothing run"
            )
        ran += rerun([job], say=say, **options)
        if options.get("dry_run"):
            continue
        pages = options.get("pages", True)
        paths = [job.resolve().parent.parent] + ([root / "README.md", root / "docs"] * pages)
        _git(root, "add", "-A", "--", *map(str, paths))
        if not _git(root, "diff", "--cached", "--quiet").returncode:
            say(f"# {job}: nothing new to commit")
            continue
        message = (
            f"{job} trained and evaluated again from a clean commit, raw timings kept (python -m "
            f"skipdecode.experiments.sweeps.rerun {job})"
        )
        done = _git(root, "commit", "-q", "-m", message)
        if done.returncode:
            raise RerunError(f"{job}: git commit failed: {(done.stderr or done.stdout).strip()}")
        say(f"# {job}: committed")
    return ran


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("jobs", nargs="*", type=Path, help="published job folders: results/<f>/<job>")
    p.add_argument(
        "--pending",
        type=Path,
        metavar="RESULTS",
        help="list the published jobs under RESULTS whose records lack raw timings; run nothing",
    )
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument(
        "--outputs-may-differ",
        action="store_true",
        help="publish reruns whose outputs differ from the published ones though other jobs of "
        "their folder are not rerun (two codes in one table)",
    )
    p.add_argument(
        "--no-pages",
        action="store_true",
        help="publish without rewriting the pages (a chain of reruns rewrites them once at its "
        "end: make docs)",
    )
    p.add_argument(
        "--commit",
        action="store_true",
        help="publish each job as its rerun finishes and commit it (a chain that stops keeps what "
        "it finished; a job whose outputs differ then needs --outputs-may-differ)",
    )
    args = p.parse_args(argv)
    if args.pending is not None:
        if not args.pending.is_dir():
            p.error(f"--pending: {str(args.pending)!r} is not a directory (a results tree)")
        print_pending(args.pending)
        return 0
    if not args.jobs:
        p.error("jobs: give published job folders (results/<folder>/<job>), or --pending RESULTS")
    try:
        (rerun_and_commit if args.commit else rerun)(
            args.jobs,
            dry_run=args.dry_run,
            outputs_may_differ=args.outputs_may_differ,
            pages=not args.no_pages,
        )
    except RerunError as e:
        p.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
