"""Summarization results: ROUGE in SciTLDR's two conventions, and how much of the decode
speedup survives end to end where prompts are long.

For every finished cell of a summarization dataset in a results folder (published, or a sweep's
output folder), ROUGE-1, ROUGE-2 and ROUGE-L F are recomputed from the cell's committed
generations in both of SciTLDR's multi-reference conventions (``max``: per input the reference
with the best ROUGE-1 and that reference's scores; ``mean``: the mean over an input's references;
:data:`~skipdecode.evaluation.metrics.text.ROUGE_CONVENTIONS`), with the stemming the cell's
record used. Per results row (the seeds of one schedule):

- quality: the mean over seeds [95% t-interval over seeds; none with one seed] of each ROUGE
  figure, BLEU and BERTScore F1;
- against ``full`` of the same seeds: the difference with the two-level paired bootstrap (inputs
  and seeds drawn, :func:`~skipdecode.evaluation.metrics.bootstrap.paired_bootstrap`) and the
  t-interval over the per-seed differences, and what they decide (:func:`decided`: lower or
  higher only where every interval excludes 0);
- speed (:mod:`skipdecode.evaluation.generation`): the paper's theoretical speedup over every
  input, then over the timed batches (``long_prompts``) the layer speedup the batches reached,
  the measured decode speedup, the end-to-end speedup the layer counts predict, the measured
  one, and the prefill's share of the wall time of full and of the schedule. Full's own row is
  over every batch, decoded to its own EOS; a schedule's row is over its timed batches, where
  full decodes as many steps as the schedule ran, so the two rows' prefill shares differ.

Writes ``summaries.csv`` (one line per results row) and ``summaries.md`` into the folder, each
whole or not at all. ROUGE is on SciTLDR's 0-100 scale.

    python -m skipdecode.experiments.sweeps.summaries results/scitldr_smollm2
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...data.tasks import TASKS
from ...evaluation.metrics.bootstrap import SystemPair, paired_bootstrap
from ...evaluation.metrics.text import ROUGE_CONVENTIONS, rouge
from ...io import read_json_or_none, write_text_atomic
from .cell_outputs import cell_generations
from .seeds import SEED_GROUP, mean_ci95, mean_ci95_every, results_order
from .table import collect, csv_text, num, page_command

log = logging.getLogger(__name__)

__all__ = [
    "is_summarization",
    "LABELS",
    "QUALITY",
    "ROUGE_KEYS",
    "SUMMARIES_CSV",
    "SUMMARIES_MD",
    "decided",
    "delta_columns",
    "deltas_table",
    "interval_text",
    "markdown_table",
    "paired_deltas",
    "summary_cells",
    "summary_rows",
]

SUMMARIES_CSV = "summaries.csv"
SUMMARIES_MD = "summaries.md"
_TYPES = ("rouge1", "rouge2", "rougeL")
#: Per-input ROUGE F of each convention: ``rouge1_max`` ... ``rougeL_mean``.
ROUGE_KEYS = tuple(f"{t}_{c}" for c in ROUGE_CONVENTIONS for t in _TYPES)
QUALITY = (*ROUGE_KEYS, "bleu", "bertscore_f1")
SPEED = (
    "theoretical_speedup",
    "predicted_speedup_decode",
    "measured_speedup_decode",
    "predicted_speedup_e2e",
    "measured_speedup_e2e",
    "prefill_share_baseline",
    "prefill_share",
)
LABELS = {
    **{f"{t}_{c}": f"R{t[5:]} {c}" for c in ROUGE_CONVENTIONS for t in _TYPES},
    "bleu": "BLEU",
    "bertscore_f1": "BERT-F",
    "theoretical_speedup": "theoretical (all inputs)",
    "predicted_speedup_decode": "reached (layers, timed)",
    "measured_speedup_decode": "measured decode",
    "predicted_speedup_e2e": "predicted e2e",
    "measured_speedup_e2e": "measured e2e",
    "prefill_share_baseline": "prefill share (full)",
    "prefill_share": "prefill share (schedule)",
}
#: The differences shown with their per-seed t-interval and what the intervals decide.
_SEED_T = ("rougeL_max", "bertscore_f1")
_SCALE = {**dict.fromkeys(ROUGE_KEYS, 100.0), "bleu": 1.0, "bertscore_f1": 1.0}
_DIGITS = {**dict.fromkeys(ROUGE_KEYS, 2), "bleu": 2, "bertscore_f1": 4}


def is_summarization(dataset: Any) -> bool:
    task = TASKS.get(str(dataset))
    return task is not None and task.kind == "summarization"


def _cell_scores(cell: dict[str, Any]) -> dict[str, Any] | None:
    """The cell's outputs, references, per-input scores and speed fields (None: unreadable)."""
    found = cell_generations(cell)
    record = read_json_or_none(cell.get("record") or "")
    if found is None or record is None:
        return None
    rows, bleu_settings = found
    outputs = [str(r.get("output", "")) for r in rows]
    references = [[str(x) for x in r.get("references", [])] for r in rows]
    settings = ((record.get("quality") or {}).get("rouge") or {}).get("settings") or {}
    scored = rouge(
        outputs,
        references,
        types=_TYPES,
        use_stemmer=bool(settings.get("use_stemmer", True)),
        per_example=True,
    )
    per_input = {k: list(scored["per_example"][k]["f"]) for k in ROUGE_KEYS}
    if rows and all("bertscore_f1" in (r.get("scores") or {}) for r in rows):
        per_input["bertscore_f1"] = [float(r["scores"]["bertscore_f1"]) for r in rows]
    speed = record.get("speed") or {}
    long_prompts = speed.get("long_prompts") or {}
    values = {k: sum(v) / len(v) if v else None for k, v in per_input.items()}
    values["bleu"] = num(cell.get("bleu"))
    for k in SPEED:  # the measured speedups as the tables publish them (the cell's row)
        values[k] = cell.get(k) if k.startswith("measured_") else long_prompts.get(k, speed.get(k))
    return {
        "outputs": outputs,
        "references": references,
        "inputs": [r.get("input") for r in rows],
        "per_input": per_input,
        "bleu_settings": bleu_settings,
        **values,
    }


def summary_cells(folder: str | Path, summarization_only: bool = True) -> list[dict[str, Any]]:
    """The folder's finished summarization cells (every finished cell without
    ``summarization_only``: ROUGE's conventions score any references), as
    :func:`~.table.collect` rows with their scores (:func:`_cell_scores`); a cell without
    readable generations is left out, and said."""
    cells = []
    for row in collect(folder):
        if row.get("status") != "ok":
            continue
        if summarization_only and not is_summarization(row.get("dataset")):
            continue
        scores = _cell_scores(dict(row))
        if scores is None:
            log.warning("summaries: cell %s has no readable generations; left out", row["job"])
            continue
        cells.append({**row, **scores})
    return cells


def paired_deltas(
    cells: Sequence[Mapping[str, Any]], full: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Against full of the same seeds: the two-level bootstrap and the per-seed t-interval."""
    matched = [c for c in cells if str(c.get("seed")) in full]
    matched = [c for c in matched if c["inputs"] == full[str(c.get("seed"))]["inputs"]]
    out: dict[str, Any] = {"delta_seeds": " ".join(sorted(str(c.get("seed")) for c in matched))}
    if not matched:
        return out
    pairs = [
        SystemPair(
            system=c["outputs"],
            baseline=full[str(c.get("seed"))]["outputs"],
            system_scores=c["per_input"],
            baseline_scores=full[str(c.get("seed"))]["per_input"],
        )
        for c in matched
    ]
    boot = paired_bootstrap(
        pairs, matched[0]["references"], bleu_settings=matched[0]["bleu_settings"], metrics=QUALITY
    )
    for m in QUALITY:
        diffs = [
            c[m] - full[str(c.get("seed"))][m]
            for c in matched
            if num(c.get(m)) is not None and num(full[str(c.get("seed"))].get(m)) is not None
        ]
        seed_mean, low, high = mean_ci95(diffs)
        d = boot.get(m) or {}
        out[f"{m}_delta"] = d.get("delta", seed_mean)
        out[f"{m}_delta_ci95"] = (d.get("ci95_low"), d.get("ci95_high")) if d else (None, None)
        out[f"{m}_delta_seed_ci95"] = (low, high)
    return out


def summary_rows(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (dataset, model, schedule) over its seeds, full first (module doc)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for cell in cells:
        groups.setdefault(tuple(cell.get(k) for k in SEED_GROUP), []).append(cell)
    rows = []
    for key, members in groups.items():
        row: dict[str, Any] = dict(zip(SEED_GROUP, key, strict=True))
        row["seeds"] = " ".join(sorted(str(c.get("seed")) for c in members))
        for m in QUALITY:
            row[m] = mean_ci95([c.get(m) for c in members])
        for m in SPEED:
            row[m] = mean_ci95_every([c.get(m) for c in members])
        same = ("dataset", "model", "train_steps")  # full as trained for as many steps
        full = {
            str(c.get("seed")): c
            for c in cells
            if c.get("method") == "full" and all(c.get(k) == row[k] for k in same)
        }
        if key[3] != "full" and full:
            row.update(paired_deltas(members, full))
        rows.append(row)
    return sorted(rows, key=results_order)


def decided(row: Mapping[str, Any], metric: str) -> str:
    """What a row's intervals against full decide for ``metric``.

    ``lower`` or ``higher`` only where the bootstrap's interval and, with two or more seeds, the
    per-seed t-interval both exclude 0 on that side; otherwise ``undecided``. With one seed only
    the inputs are drawn, and the answer says so. Empty without the bootstrap's interval.
    """
    boot = row.get(f"{metric}_delta_ci95")
    if not boot or any(num(x) is None for x in boot):
        return ""
    seed = row.get(f"{metric}_delta_seed_ci95")
    intervals = [boot] + ([seed] if seed and all(num(x) is not None for x in seed) else [])
    if all(high < 0 for _, high in intervals):
        text = "lower"
    elif all(low > 0 for low, _ in intervals):
        text = "higher"
    else:
        return "undecided"
    return text if len(intervals) > 1 else f"{text} (inputs only)"


def delta_columns(row: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """A row's CSV columns for its difference in ``metric``: the difference, both intervals'
    ends and what they decide."""
    out: dict[str, Any] = {f"{metric}_delta": row.get(f"{metric}_delta")}
    for kind in ("", "_seed"):
        low, high = row.get(f"{metric}_delta{kind}_ci95") or (None, None)
        out[f"{metric}_delta{kind}_ci95_low"], out[f"{metric}_delta{kind}_ci95_high"] = low, high
    out[f"{metric}_decided"] = decided(row, metric)
    return out


def interval_text(value: Any, bounds: Any, metric: str, sign: bool = False) -> str:
    """``value`` (a number, or a (mean, low, high) tuple) on the metric's page scale, with
    ``[low, high]`` from the tuple or from ``bounds`` where both ends are numbers."""
    mean = value[0] if isinstance(value, tuple) else value
    low, high = (value[1], value[2]) if isinstance(value, tuple) else (bounds or (None, None))
    if num(mean) is None:
        return ""
    scale, digits = _SCALE[metric], _DIGITS[metric]
    spec = f"{'+' if sign else ''}.{digits}f"
    text = format(mean * scale, spec)
    if num(low) is not None and num(high) is not None:
        text += f" [{format(low * scale, spec)}, {format(high * scale, spec)}]"
    return text


def markdown_table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(cells) + " |" for cells in lines),
    ]


def _speed(value: tuple | None, share: bool = False) -> str:
    mean = value[0] if value else None
    if num(mean) is None:
        return ""
    return f"{100 * mean:.1f}%" if share else f"{mean:.2f}x"


_UNPAIRED = "No other schedule's cells pair with full's here (the same seeds and steps)."


def deltas_table(rows: Sequence[Mapping[str, Any]], label: Sequence[str]) -> list[str]:
    """Against full: each difference with its intervals, and what they decide (a sentence
    instead where no schedule's cells pair with full's)."""
    paired = [r for r in rows if r["method"] != "full" and r.get("delta_seeds")]
    if not paired:
        return [_UNPAIRED]
    delta_metrics = ("rouge1_max", "rouge2_max", "rougeL_max", "rougeL_mean", "bleu",
                     "bertscore_f1")  # fmt: skip
    return markdown_table(
        [*label, "paired seeds"]
        + [f"Δ{LABELS[m]} [seeds x inputs]" for m in delta_metrics]
        + [f"Δ{LABELS[m]} [per-seed t]" for m in _SEED_T]
        + [f"{LABELS[m]}: decided" for m in _SEED_T],
        [
            [str(r[k]) for k in label]
            + [str(r.get("delta_seeds", ""))]
            + [
                interval_text(r.get(f"{m}_delta"), r.get(f"{m}_delta_ci95"), m, True)
                for m in delta_metrics
            ]
            + [
                interval_text(r.get(f"{m}_delta"), r.get(f"{m}_delta_seed_ci95"), m, True)
                for m in _SEED_T
            ]
            + [decided(r, m) for m in _SEED_T]
            for r in paired
        ],
    )


def format_summaries(rows: Sequence[Mapping[str, Any]]) -> str:
    stepped = any(r.get("train_steps") not in (None, "") for r in rows)
    label = ["model", "schedule", "method", *(["train_steps"] if stepped else []), "seeds"]
    quality = markdown_table(
        [*label, *(LABELS[m] for m in QUALITY)],
        [
            [str(r[k]) for k in label] + [interval_text(r[m], None, m) for m in QUALITY]
            for r in rows
        ],
    )
    deltas = deltas_table(rows, label)
    speed = markdown_table(
        [*label, *(LABELS[m] for m in SPEED)],
        [
            [str(r[k]) for k in label]
            + [_speed(r[m], share=m.startswith("prefill")) for m in SPEED]
            for r in rows
        ],
    )
    return "\n".join(
        [
            "# Summarization: ROUGE in SciTLDR's conventions, and the speedup end to end",
            "",
            "Generated by `python -m skipdecode.experiments.sweeps.summaries` from the cells' records and",
            "generations; do not edit. ROUGE F x100 (rouge-score, Porter stemming): *max* scores",
            "each input against the reference with the best ROUGE-1 (that reference's R2 and RL),",
            "*mean* averages over an input's references. Mean over seeds [95% t-interval over",
            "seeds; none with one seed].",
            "",
            *quality,
            "",
            "## Against full",
            "",
            "Difference from full of the same seeds: two-level paired bootstrap (inputs and seeds",
            "drawn) and, with two or more seeds, the t-interval over the per-seed differences.",
            "*Decided* says lower or higher only where every interval shown excludes 0 (with one",
            "seed only the inputs are drawn, and it says so); where an interval holds 0, undecided.",
            "",
            *deltas,
            "",
            "## Where prompts are long",
            "",
            "The paper's theoretical speedup (layers per generated token, every input); then, over",
            "the timed batches, the layer speedup the batches reached (L x decode passes / layers",
            "run: a pass costs the same however many rows are still live), the measured decode",
            "speedup, the end-to-end (prefill + decode) speedup the layer counts predict from full's",
            "own prefill and decode times, the measured end-to-end speedup, and the prefill's share",
            "of the wall time. On a schedule's row full decodes the timed batches for as many steps",
            "as the schedule ran; full's own row is over all its batches, decoded to its own EOS,",
            "so its prefill share is not the one a schedule's row compares with. Means over seeds,",
            "a speed's only where every seed has it (a record written before raw timings were",
            "kept gives no measured end-to-end speedup: docs/METRICS.md).",
            "",
            *speed,
            "",
        ]
    )


def _csv_row(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: row.get(k) for k in (*SEED_GROUP, "seeds", "delta_seeds")}
    for m in (*QUALITY, *SPEED):
        mean, low, high = row.get(m) or (None, None, None)
        out.update({m: mean, f"{m}_ci95_low": low, f"{m}_ci95_high": high})
    for m in QUALITY:
        out.update(delta_columns(row, m))
    return out


def write_summaries(folder: str | Path) -> dict[str, Path] | None:
    """Write ``summaries.csv`` and ``summaries.md`` into ``folder``; None without cells."""
    folder = Path(folder)
    rows = summary_rows(summary_cells(folder))
    if not rows:
        return None
    lines = [_csv_row(r) for r in rows]
    return {
        "csv": write_text_atomic(folder / SUMMARIES_CSV, csv_text(lines, list(lines[0]))),
        "markdown": write_text_atomic(folder / SUMMARIES_MD, format_summaries(rows)),
    }


def main(argv: list[str] | None = None) -> None:
    page_command(__doc__, argv, write_summaries, "no cells")


if __name__ == "__main__":
    main()
