"""``make docs``: every generated results page rewritten from the committed records.

For each published sweep folder under ``results/`` (one with a ``results.md``) the pages the
pipeline writes are rebuilt from its cells' records and generations, nothing else:

- ``tables``: ``cells``/``results`` (CSV and Markdown), ``samples.md``, ``matched.md``
  (:mod:`.aggregate`; plots are left as published, since a PNG's bytes depend on the plotting
  library's version);
- ``summaries``: SciTLDR's ROUGE conventions and the long-prompt speed (:mod:`.summaries`), for
  summarization folders;
- ``extractive``: what one copied source sentence scores, and full against it
  (:mod:`.extractive`, from its committed per-input scores);
- ``reach``: target, planned and reached speedup (:mod:`.reach`; needs the model's tokenizer);
- ``e2e``: E2E's own metric suite (:mod:`.e2e_table`; needs Java, METEOR takes ~10 s a cell the
  first time);
- ``one_model``: a budget-randomized model against the per-schedule fine-tunes (:mod:`.one_model`,
  against the folder its CSV names);
- ``budget``: each schedule's difference from full against the fine-tuning steps both were
  evaluated at (:mod:`.budget`, where the folder publishes one);
- ``search``: a schedule search's page and CSV, with the command the page names
  (:mod:`~skipdecode.experiments.search.front`; the plot left as published), after
  ``one_model``, whose CSV it reads;

(``extractive``, ``reach`` and ``e2e`` where the folder publishes them: a tiny model trains its own tokenizer,
and the E2E suite scores E2E cells only)

then ``results/PROVENANCE.md`` and the provenance mark on the page of each record that keeps
no diff (:mod:`.audit`), the GPU decode page
(:mod:`~skipdecode.experiments.benchmarks.gpu_page`), the cost-split pages of the CPU decode
records (:mod:`~skipdecode.experiments.benchmarks.split_page`), the GPU training page
(:mod:`~skipdecode.experiments.benchmarks.gpu_train_page`), README's generated tables
(:mod:`.readme`) and the tables README and ``docs/`` copy from these pages (:mod:`.excerpts`). A part that cannot run here (no Java, no
tokenizer) is skipped and said, never half-written. On a clean clone the committed pages are
what this writes, so it leaves git clean; prose around the tables lives in ``docs/`` and cites
these pages.

    python -m skipdecode.experiments.sweeps.pages results [--only tables summaries]
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from ..benchmarks.gpu_page import write_gpu_page
from ..benchmarks.gpu_train_page import write_train_page
from ..benchmarks.split_page import write_split_pages
from .aggregate import aggregate
from .audit import AUDIT_PAGE, write_audit
from .excerpts import documents, write_excerpts
from .readme import write_readme
from .summaries import write_summaries

log = logging.getLogger(__name__)

__all__ = ["PARTS", "published_folders", "write_pages"]


def _tables(folder: Path) -> str:
    aggregate(folder, plots=False)
    return "tables"


def _summaries(folder: Path) -> str:
    return "summaries" if write_summaries(folder) else "summaries: no summarization cells"


def _extractive(folder: Path) -> str:
    from ...data.errors import DataConfigError
    from .extractive import EXTRACTIVE_MD, write_extractive

    if not (folder / EXTRACTIVE_MD).is_file():
        return "extractive: not published for this folder"
    try:
        write_extractive(folder)
    except DataConfigError as e:
        return f"extractive skipped ({e})"
    return "extractive"


def _reach(folder: Path) -> str:
    from ...models.loading import ModelConfigError
    from .reach import write_reach

    if not (folder / "reach.md").is_file():
        return "reach: not published for this folder"
    try:
        write_reach(folder)
    except (ModelConfigError, OSError, ValueError) as e:
        return f"reach skipped ({e})"
    return "reach"


def _e2e(folder: Path) -> str:
    from ...evaluation.metrics.e2e import require_java
    from .e2e_table import write_e2e_suite

    if not (folder / "e2e_suite.md").is_file():
        return "e2e suite: not published for this folder"
    try:
        require_java("make docs")
    except ValueError as e:
        return f"e2e suite skipped ({e})"
    write_e2e_suite(folder)
    return "e2e suite"


def _one_model(folder: Path) -> str:
    from .one_model import against_of, write_one_model

    pages = sorted(p.stem for p in folder.glob("one_model*.csv"))
    if not pages:
        return "one model: not published for this folder"
    root = folder.resolve().parent.parent  # the repository: the page names its folders from it
    for page in pages:
        against = against_of(folder, page)
        if against is None:
            raise ValueError(f"{folder / page}.csv has no rows: it names no per-schedule folder")
        write_one_model(folder, root / against, label=against, page=page)
    return "one model" + (f" ({len(pages)} pages)" if len(pages) > 1 else "")


def _budget(folder: Path) -> str:
    from .budget import write_budget

    if not (folder / "budget.md").is_file():
        return "budget: not published for this folder"
    write_budget(folder, plot=False)
    return "budget"


def _search(folder: Path) -> str:
    from ..search.front import rewrite_page

    root = folder.resolve().parent.parent  # the page names its folders from the repository
    page = rewrite_page((folder / "search").resolve().relative_to(root), root)
    return "search (plot left as published)" if page else "search: not published for this folder"


#: The parts of a folder's pages, in the order they are written.
PARTS: dict[str, Callable[[Path], str]] = {
    "tables": _tables,
    "summaries": _summaries,
    "extractive": _extractive,
    "reach": _reach,
    "e2e": _e2e,
    "one_model": _one_model,
    "budget": _budget,
    "search": _search,
}


def published_folders(results: Path) -> list[Path]:
    """The published sweep folders under ``results`` (each holds a ``results.md``)."""
    return sorted(p for p in results.iterdir() if (p / "results.md").is_file())


def write_pages(results: Path, only: Sequence[str] = tuple(PARTS)) -> list[str]:
    """Rewrite the pages of every published folder (``only`` these parts), then the provenance
    page; returns what was done, one line per folder."""
    done = []
    for folder in published_folders(results):
        parts = [PARTS[name](folder) for name in only]
        done.append(f"{folder.name}: {', '.join(parts)}")
    marked = write_audit(results)
    done.append(f"{AUDIT_PAGE}: provenance of every record")
    if marked:
        done.append(f"marked {len(marked)} pages of records without their diff")
    done.append(write_gpu_page(results))
    done += [
        f"{page.relative_to(results)}: where skipping pays" for page in write_split_pages(results)
    ]
    train = write_train_page(results)
    if train:
        done.append(train)
    root = results.resolve().parent
    readme = root / "README.md"
    if readme.is_file():
        done.append(write_readme(readme, results))
    for document in documents(root):
        written = write_excerpts(document, root)
        if written:
            done.append(written)
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("results", type=Path, help="the results folder (results/)")
    p.add_argument("--only", nargs="+", choices=list(PARTS), default=list(PARTS))
    args = p.parse_args(argv)
    if not args.results.is_dir():
        p.error(f"results: {str(args.results)!r} is not a directory")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for line in write_pages(args.results, args.only):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
