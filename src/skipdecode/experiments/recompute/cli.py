"""``python -m skipdecode.audit [results]`` (``make audit``): run every check, print what each
checked and every difference, and exit 1 on any difference (0 when everything recomputes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .bench import check_bench
from .budget import check_budget
from .deltas import check_deltas
from .drafts import check_drafts
from .e2e_suite import check_e2e_suite
from .findings import Findings
from .matched import check_matched
from .prose import check_prose
from .provenance import check_provenance
from .quotes import check_quotes
from .reach import check_reach
from .search import check_search
from .spec_bench import check_spec_bench
from .speculative import check_speculative
from .speeds import check_speeds
from .split import check_splits
from .summaries import check_summaries
from .tables import check_tables
from .training import check_training

__all__ = ["audit", "main"]


def _evaluation_records(results: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(results.rglob("record.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(record, dict) and isinstance(record.get("speed"), dict):
            out.append((path.relative_to(results), record))
    return out


def audit(results: Path, root: Path) -> list[Findings]:
    """Every check over the results folder ``results`` of the repository at ``root``."""
    return [
        check_provenance(results, root),
        check_speeds(_evaluation_records(results)),
        check_tables(results),
        check_matched(results),
        check_search(results),
        check_e2e_suite(results),
        check_summaries(results),
        check_deltas(results),
        check_budget(results),
        check_bench(results),
        check_splits(results),
        check_speculative(results),
        check_drafts(results),
        check_spec_bench(results),
        check_training(results),
        check_reach(results),
        check_quotes(results, root),
        check_prose(root),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="?", type=Path, default=Path("results"))
    args = p.parse_args(argv)
    if not args.results.is_dir():
        p.error(f"results: {str(args.results)!r} is not a directory")
    findings = audit(args.results, args.results.resolve().parent)
    for f in findings:
        print("\n".join(f.report()))
    failed = sum(len(f.differences) for f in findings)
    print(
        f"audit: {'FAILED, ' + str(failed) + ' differences' if failed else 'every number recomputes'}"
    )
    return 1 if failed else 0
