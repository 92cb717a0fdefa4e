"""Sample outputs beside a published table: ``samples.md``.

For the first ``n`` inputs of the evaluated split (by input index), the input, its references and
every schedule's output (the lowest seed's cell of each schedule, in the results table's order).
Built from the cells' ``generations.jsonl`` files, like the tables, so it is never edited by hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...io import write_text_atomic
from .cell_outputs import cell_generations
from .seeds import SEED_GROUP

__all__ = ["SAMPLES_FILE", "format_samples", "write_samples"]

SAMPLES_FILE = "samples.md"


def _first_seed_cells(
    cells: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    ok = [c for c in cells if c.get("status") == "ok" and c.get("record")]
    chosen = []
    for row in results:  # one results row per group of seeds (see .seeds)
        same = [c for c in ok if all(c.get(k) == row.get(k) for k in SEED_GROUP)]
        if same:
            chosen.append(min(same, key=lambda c: str(c.get("seed"))))
    return chosen


def _rows(cell: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    found = cell_generations(cell)
    return {int(r.get("index", i)): r for i, r in enumerate(found[0])} if found else {}


def format_samples(
    cells: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]], n: int = 5
) -> str | None:
    """The markdown, or None when no cell has generations."""
    chosen = [(c, _rows(c)) for c in _first_seed_cells(cells, results)]
    chosen = [(c, rows) for c, rows in chosen if rows]
    if not chosen:
        return None
    indices = sorted(set().union(*(rows.keys() for _, rows in chosen)))[:n]
    lines = [
        "# Sample outputs",
        "",
        f"The first {len(indices)} evaluated inputs; per schedule, the output of its lowest "
        "seed's cell. Generated from the cells' generations.jsonl by the aggregate code.",
        *_degeneracy(chosen),
    ]
    for index in indices:
        first = next(rows[index] for _, rows in chosen if index in rows)
        lines += ["", f"## Input {index}", "", f"`{first.get('input', '')}`", "", "References:"]
        lines += [f"- {ref}" for ref in first.get("references", [])]
        lines += ["", "| schedule | method | seed | output |", "|---|---|---|---|"]
        for cell, rows in chosen:
            out = rows.get(index, {}).get("output", "")
            text = str(out).replace("|", "\\|").replace("\n", " ")
            lines.append(
                f"| {cell.get('schedule')} | {cell.get('method')} | {cell.get('seed')} | {text} |"
            )
    return "\n".join(lines) + "\n"


def _degeneracy(chosen: list[tuple[Mapping[str, Any], dict[int, dict[str, Any]]]]) -> list[str]:
    """Per schedule: distinct outputs, outputs that hit the token cap, and the output it writes
    most often, with how many inputs got it (a collapsed model writes one sentence for many)."""
    lines = [
        "",
        "## Repeated outputs",
        "",
        "| schedule | seed | distinct outputs | capped | most frequent output | inputs |",
        "|---|---|---|---|---|---|",
    ]
    for cell, rows in chosen:
        outputs = [str(r.get("output", "")) for r in rows.values()]
        top, count = Counter(outputs).most_common(1)[0]
        capped = cell.get("capped_share")
        lines.append(
            f"| {cell.get('schedule')} | {cell.get('seed')} | {len(set(outputs))} / "
            f"{len(outputs)} | {'' if capped is None else f'{capped:.1%}'} | "
            f"{top.replace('|', chr(92) + '|').replace(chr(10), ' ')} | {count} |"
        )
    return lines


def write_samples(
    cells: Sequence[Mapping[str, Any]],
    results: Sequence[Mapping[str, Any]],
    out_dir: str | Path,
    n: int = 5,
) -> Path | None:
    text = format_samples(cells, results, n)
    return None if text is None else write_text_atomic(Path(out_dir) / SAMPLES_FILE, text)
