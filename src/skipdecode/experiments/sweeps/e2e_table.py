"""E2E's own metric suite for results tables, beside published systems on the same test set.

For every finished E2E cell of a results folder (published, or a sweep's output folder), the
suite of :mod:`skipdecode.evaluation.metrics.e2e` (BLEU, NIST, METEOR, ROUGE-L, CIDEr as
the challenge's script computes them) on the cell's committed generations; per results row the
mean over seeds with its 95% t-interval (training-seed variation: no interval with one seed) and
the per-seed difference from ``full`` of the same seed with its t-interval (BLEU's beside the
scores, every metric's in a second table). Writes
``e2e_suite.csv`` (one line per cell) and ``e2e_suite.md`` into the folder, each whole or not at
all. A cell's scores are cached by the hash of its outputs and references (METEOR takes ~10 s a
cell on 2 cores).

    python -m skipdecode.experiments.sweeps.e2e_table results/e2e_smollm2 results/e2e_gemma3
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...evaluation.metrics.e2e import E2E_METRICS, e2e_suite_many, require_java
from ...io import read_json_or_none, write_json_atomic, write_text_atomic
from ...paths import cache_dir
from .cell_outputs import cell_generations
from .seeds import SEED_GROUP, mean_ci95
from .table import collect, csv_text, page_command

log = logging.getLogger(__name__)

__all__ = ["PUBLISHED_SYSTEMS", "E2E_SUITE_CSV", "E2E_SUITE_MD", "suite_cells", "write_e2e_suite"]

E2E_SUITE_CSV = "e2e_suite.csv"
E2E_SUITE_MD = "e2e_suite.md"
_KEYS = [k for k, _ in E2E_METRICS]
_DIGITS = {"bleu": 2, "nist": 3, "meteor": 2, "rouge_l": 2, "cider": 3}

#: Published systems on the E2E test set (630 inputs), scored with the challenge's script:
#: (system, BLEU, NIST, METEOR, ROUGE-L, CIDEr, source). They trained on E2E's training split
#: (42,061 pairs) and decode with beam search; the cells here fine-tune on the development
#: split (4,672 pairs, the split available offline) and decode greedily.
PUBLISHED_SYSTEMS: tuple[tuple[str, float, float, float, float, float, str], ...] = (
    (
        "TGen (the challenge's baseline; seq2seq, beam search, reranker)",
        65.93, 8.6094, 44.83, 68.50, 2.2338,
        "Dušek, Novikova & Rieser, Findings of the E2E NLG Challenge, INLG 2018",
    ),
    (
        "GPT-2 Medium (355M), full fine-tune",
        68.2, 8.62, 46.2, 71.0, 2.47,
        "Hu et al., LoRA, ICLR 2022, Table 3 (from Li & Liang, Prefix-Tuning, 2021)",
    ),
    (
        "GPT-2 Medium + LoRA (0.35M trained)",
        70.4, 8.85, 46.8, 71.8, 2.53,
        "Hu et al., LoRA, ICLR 2022, Table 3",
    ),
)  # fmt: skip


def _cache_key(outputs: Sequence[str], references: Sequence[Sequence[str]]) -> str:
    blob = json.dumps([list(outputs), [list(r) for r in references]], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def suite_cells(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The finished E2E cells of ``rows`` (:func:`~.table.collect`), each with its suite."""
    cells = [
        dict(r)
        for r in rows
        if r.get("status") == "ok" and r.get("dataset") == "e2e" and r.get("record")
    ]
    store = cache_dir() / "e2e_suite"
    pending: dict[str, tuple[list[str], list[list[str]]]] = {}
    for cell in cells:
        found = cell_generations(cell)
        if found is None:
            log.warning("E2E suite: cell %s has no readable generations; left out", cell.get("job"))
            cell["status"] = "no generations"
            continue
        outputs = [str(g.get("output", "")) for g in found[0]]
        references = [[str(x) for x in g.get("references", [])] for g in found[0]]
        cell["_key"] = _cache_key(outputs, references)
        cached = read_json_or_none(store / f"{cell['_key']}.json")
        if cached is None:
            pending[cell["_key"]] = (outputs, references)
    by_refs: dict[str, dict[str, list[str]]] = {}  # one suite run per reference set
    refs_of: dict[str, list[list[str]]] = {}
    for key, (outputs, references) in pending.items():
        ref_key = _cache_key([], references)
        by_refs.setdefault(ref_key, {})[key] = outputs
        refs_of[ref_key] = references
    for ref_key, systems in by_refs.items():
        log.info("E2E suite: %d cell(s) on %d inputs", len(systems), len(refs_of[ref_key]))
        for key, scores in e2e_suite_many(systems, refs_of[ref_key]).items():
            write_json_atomic(store / f"{key}.json", scores)
    for cell in cells:
        if "_key" in cell:
            cell.update(read_json_or_none(store / f"{cell.pop('_key')}.json") or {})
    return [c for c in cells if c.get("status") == "ok"]


def _groups(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per results row (the seeds of one schedule), full first, in the cells' order."""
    order: list[tuple] = []
    for c in cells:
        key = tuple(c.get(k) for k in SEED_GROUP)
        if key not in order:
            order.append(key)
    order.sort(key=lambda k: (k[0], k[1], k[3] != "full"))
    rows = []
    for key in order:
        seeds = [c for c in cells if tuple(c.get(k) for k in SEED_GROUP) == key]
        full = {
            str(c.get("seed")): c
            for c in cells
            if c.get("method") == "full" and (c.get("dataset"), c.get("model")) == key[:2]
        }
        row: dict[str, Any] = dict(zip(SEED_GROUP, key, strict=True))
        row["seeds"] = " ".join(sorted(str(c.get("seed")) for c in seeds))
        row["paired"] = " ".join(
            sorted(str(c.get("seed")) for c in seeds if str(c.get("seed")) in full)
        )
        for m in _KEYS:
            row[m] = mean_ci95([c[m] for c in seeds])
            deltas = [
                c[m] - full[str(c.get("seed"))][m] for c in seeds if str(c.get("seed")) in full
            ]
            row[f"{m}_delta"] = mean_ci95(deltas) if key[3] != "full" and deltas else None
        rows.append(row)
    return rows


def _fmt(value: tuple | None, digits: int, sign: bool = False) -> str:
    if value is None or value[0] is None:
        return ""
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    mean, low, high = value
    return f.format(mean) + ("" if low is None else f" [{f.format(low)}, {f.format(high)}]")


def format_e2e_suite(cells: Sequence[Mapping[str, Any]]) -> str:
    labels = [label for _, label in E2E_METRICS]
    header = ["model", "schedule", "method", "seeds", *labels, "ΔBLEU vs full [per-seed t CI]"]
    lines = [
        "E2E test set (630 inputs), the challenge's own metrics (tuetschek/e2e-metrics "
        "`measure_scores.py -p`: mteval BLEU and NIST, pycocoevalcap METEOR 1.5, ROUGE-L and "
        "CIDEr). Mean over seeds [95% t-interval over seeds; none with one seed]. This ROUGE-L is "
        "the COCO one (LCS F-measure, beta 1.2, PTB tokens), not the rouge-score ROUGE-L of "
        "results.md. Generated by skipdecode.experiments.sweeps.e2e_table.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    rows = _groups(cells)
    for row in rows:
        values = [_fmt(row[m], _DIGITS[m]) for m in _KEYS]
        delta = _fmt(row["bleu_delta"], 2, sign=True)
        lines.append(
            f"| {row['model']} | {row['schedule']} | {row['method']} | {row['seeds']} | "
            + " | ".join(values)
            + f" | {delta} |"
        )
    lines += [
        "",
        "Difference from full of the same seed, every metric: mean over the seeds both have "
        "[95% t-interval over the per-seed differences; none with one seed].",
        "",
        "| model | schedule | paired seeds | " + " | ".join(f"Δ{label}" for label in labels) + " |",
        "|---|---|---|" + "---|" * len(labels),
    ]
    for row in rows:
        if row["method"] != "full":
            deltas = [_fmt(row[f"{m}_delta"], _DIGITS[m], sign=True) for m in _KEYS]
            lines.append(
                f"| {row['model']} | {row['schedule']} | {row['paired']} | "
                + " | ".join(deltas)
                + " |"
            )
    lines += [
        "",
        "Published systems on the same test set (trained on E2E's 42k-pair training split with "
        "beam search; the cells above fine-tune on the 4.7k-pair development split and decode "
        "greedily):",
        "",
        "| system | " + " | ".join(labels) + " | source |",
        "|---|" + "---|" * len(labels) + "---|",
    ]
    for name, *scores, source in PUBLISHED_SYSTEMS:
        lines.append(f"| {name} | " + " | ".join(str(s) for s in scores) + f" | {source} |")
    return "\n".join(lines) + "\n"


def write_e2e_suite(folder: str | Path) -> dict[str, Path] | None:
    """Write ``e2e_suite.csv`` and ``e2e_suite.md`` into ``folder``; None without E2E cells."""
    folder = Path(folder)
    cells = suite_cells(collect(folder))
    if not cells:
        return None
    columns = ["dataset", "model", "schedule", "method", "seed", *_KEYS, "job", "cell_id"]
    return {
        "csv": write_text_atomic(folder / E2E_SUITE_CSV, csv_text(cells, columns)),
        "markdown": write_text_atomic(folder / E2E_SUITE_MD, format_e2e_suite(cells)),
    }


def main(argv: list[str] | None = None) -> None:
    page_command(
        __doc__, argv, write_e2e_suite, "no E2E cells",
        require=lambda: require_java("skipdecode.experiments.sweeps.e2e_table"),
    )  # fmt: skip


if __name__ == "__main__":
    main()
