"""What an audit check found: one line per difference, and counts of what it checked; and how
the checks read what they check (a CSV's rows, a page's tables, a page row by row)."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sweeps.excerpts import page_tables

__all__ = [
    "Findings",
    "check_rows",
    "close",
    "csv_rows",
    "heading_block",
    "printed_as",
    "tables_beside",
    "tables_of",
]

#: Relative tolerance of a recomputed number against the published one (float arithmetic in
#: another order; printed pages are compared at their printed digits instead).
RELATIVE = 1e-9


def close(a: Any, b: Any, relative: float = RELATIVE) -> bool:
    """Whether two published values agree: both empty, or numbers within ``relative``."""
    if a in (None, "") and b in (None, ""):
        return True
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    if math.isnan(x) and math.isnan(y):
        return True
    return math.isclose(x, y, rel_tol=relative, abs_tol=1e-12)


_NUMBER = re.compile(r"-?\d+(?:\.(\d+))?")


def printed_as(printed: str, values: list[Any]) -> bool:
    """Whether a page cell prints exactly ``values`` (None: nothing), each at its own digits."""
    shown = [v for v in values if v is not None]
    found = list(_NUMBER.finditer(printed))
    if len(found) != len(shown):
        return False
    return all(f"{float(v):.{len(m.group(1) or '')}f}" == m.group(0) for m, v in zip(found, shown))


@dataclass
class Findings:
    """One check's counts (``checked``, ``skipped`` with why) and its differences."""

    name: str
    checked: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def compare(
        self, where: str, what: str, published: Any, recomputed: Any, relative: float = RELATIVE
    ) -> None:
        self.checked += 1
        if not close(published, recomputed, relative):
            self.differences.append(f"{where}: {what} {published!r} != {recomputed!r}")

    def report(self) -> list[str]:
        lines = [f"{self.name}: {self.checked} numbers checked, {len(self.differences)} differ"]
        lines += [f"  skipped ({n}): {why}" for why, n in sorted(self.skipped.items())]
        lines += [f"  DIFFERS {d}" for d in self.differences]
        return lines


def heading_block(text: str, level: int, title: str) -> str:
    """The part of a Markdown page under the heading ``title`` of ``level`` (``##``: 2), up to
    the next heading of that level ("" where there is no such heading)."""
    marks = "#" * level
    start = text.find(f"\n{marks} {title}\n")
    if start < 0:
        return ""
    end = text.find(f"\n{marks} ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def check_rows(
    found: Findings,
    where: str,
    table: tuple[list[str], list[list[str]]],
    expected: Mapping[tuple[str, ...], Mapping[str, Any]],
    key: Callable[[dict[str, str]], tuple[str, ...]],
) -> None:
    """Each row of a page's ``table`` (header, rows) is one of ``expected``, found by ``key`` of
    its cells by column, and prints that row's figures: a list of numbers at the digits the page
    prints them, a text as it is (a column the page lacks is a difference; names starting with
    ``_`` are not columns). Every expected row appears once."""
    header, rows = table
    seen: set[tuple[str, ...]] = set()
    for row in rows:
        printed = dict(zip(header, row))
        k = key(printed)
        label = f"{where} {' '.join(k)}"
        if k in seen or k not in expected:
            found.differences.append(f"{label}: a row its record does not give once")
            continue
        seen.add(k)
        for column, want in expected[k].items():
            if column.startswith("_"):
                continue
            found.checked += 1
            shown = printed.get(column)
            if shown is None:
                found.differences.append(f"{label}: no column {column!r}")
            elif (shown != want) if isinstance(want, str) else not printed_as(shown, want):
                found.differences.append(f"{label}: {column} {shown!r} != {want!r}")
    for k in sorted(set(expected) - seen):
        found.differences.append(f"{where}: no row for {' '.join(k)}")


def csv_rows(path: Path) -> list[dict[str, str]]:
    """A CSV's rows, by column."""
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def tables_of(page: Path) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of ``page`` (none where there is no such page)."""
    return page_tables(page.read_text(encoding="utf-8")) if page.is_file() else []


def tables_beside(path: Path, found: Findings) -> list[tuple[list[str], list[list[str]]]]:
    """Every table of a benchmark record's own page (its name with ``.md``); a record with no
    such page, or one without a table, is a difference."""
    tables = tables_of(path.with_suffix(".md"))
    if not tables:
        found.differences.append(f"bench/{path.name}: no page with a table beside it")
    return tables
