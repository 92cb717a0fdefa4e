"""Extractive reference points for summarization results: what copying one sentence of the
source scores on the same inputs, against the same references and in the same conventions as
the folder's cells.

SciTLDR's paper sets its learned systems beside extractive ones. Its table cannot be read
offline here, so the extractive systems that need no training are computed from the data:

- ``lead-1``: the source's first sentence;
- ``oracle (dataset label)``: the sentence the data file labels as its oracle (SciTLDR's
  ``source_labels``, one a row; the paper's extractive upper bound);
- ``oracle (best here)``: per input, the sentence with the highest ROUGE-1 F against the
  input's references as the *max* convention scores it (first on ties): the most one copied
  sentence can score on this page.

Each is scored as :mod:`.summaries` scores the cells: ROUGE-1/2/L F in both conventions, corpus
BLEU with the cells' settings, and BERTScore F1 with the cells' settings where the cells have it.
Full decoding is compared with each: full - reference point, with the two-level paired
bootstrap (seeds and inputs drawn), the t-interval over the per-seed differences, and what they
decide (:func:`~.summaries.decided`).

The sources are read from the data files (``--data-dir``; default: the dataset's folder in
``../shared/data`` beside the repository). Every evaluated input must be the source of a row
there, or nothing is written. Each reference point's outputs and per-input scores are kept in
``extractive.jsonl.gz`` (each row names its input by a hash of the input and its references);
a later run reuses them for the inputs they were scored on, so the pages are rebuilt from
committed files (BERTScore on a CPU differs in the ninth decimal from run to run) and without
the data; ``--rescore`` scores again. Writes ``extractive.jsonl.gz``, ``extractive.csv`` and
``extractive.md`` into the folder, each whole or not at all.

    python -m skipdecode.experiments.sweeps.extractive results/scitldr_smollm2 [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...data.errors import DataConfigError
from ...data.loaders import rows_by_source
from ...data.tasks import get_task
from ...evaluation.metrics import compute_all
from ...evaluation.record import metric_settings, per_input_scores
from ...io import (
    plain_or_gzipped,
    read_json_or_none,
    read_jsonl,
    write_jsonl_gz_atomic,
    write_text_atomic,
)
from ...paths import repo_root
from .seeds import mean_ci95
from .summaries import (
    LABELS,
    QUALITY,
    ROUGE_KEYS,
    delta_columns,
    deltas_table,
    interval_text,
    markdown_table,
    paired_deltas,
    summary_cells,
)
from .table import csv_text

log = logging.getLogger(__name__)

__all__ = [
    "EXTRACTIVE_CSV",
    "EXTRACTIVE_MD",
    "EXTRACTIVE_SCORES",
    "POINTS",
    "extractive_outputs",
    "write_extractive",
]

EXTRACTIVE_CSV = "extractive.csv"
EXTRACTIVE_MD = "extractive.md"
EXTRACTIVE_SCORES = "extractive.jsonl.gz"
LEAD, LABELLED, BEST = "lead-1", "oracle (dataset label)", "oracle (best here)"
#: The reference points, in the order the page shows them.
POINTS = (LEAD, LABELLED, BEST)
_LABEL_FIELD = "source_labels"


def _sentences(row: Mapping[str, Any], field: str, where: str) -> list[str]:
    value = row.get(field)
    sentences = [" ".join(str(s).split()) for s in value] if isinstance(value, list) else []
    if not any(sentences):
        raise DataConfigError(
            f"{where}: field {field!r} holds {type(value).__name__} {str(value)[:60]!r}; "
            "extractive reference points need a non-empty list of sentences (SciTLDR's layout)"
        )
    return sentences


def _best_sentence(sentences: Sequence[str], references: Sequence[str], scorer: Any) -> int:
    r1 = [max(scorer.score(r, s)["rouge1"].fmeasure for r in references) for s in sentences]
    return max(range(len(r1)), key=lambda i: (r1[i], -i))


def extractive_outputs(
    inputs: Sequence[str],
    references: Sequence[Sequence[str]],
    rows: Mapping[str, Mapping[str, Any]],
    source_field: str,
    where: str,
    use_stemmer: bool = True,
) -> dict[str, list[str]]:
    """Each reference point's output per input (module doc); the dataset-label oracle only
    where every row has one label. An input that is no row's source is an error."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=use_stemmer)
    out: dict[str, list[str]] = {LEAD: [], LABELLED: [], BEST: []}
    for text, group in zip(inputs, references, strict=True):
        row = rows.get(text)
        if row is None:
            raise DataConfigError(
                f"{where}: no row's {source_field!r} is the evaluated input {text[:80]!r}...; "
                "point --data-dir at the files the cells were evaluated on"
            )
        sentences = _sentences(row, source_field, where)
        out[LEAD].append(sentences[0])
        out[BEST].append(sentences[_best_sentence(sentences, group, scorer)])
        labels = row.get(_LABEL_FIELD)
        if isinstance(labels, list) and len(labels) == len(sentences) and sum(labels) == 1:
            out[LABELLED].append(sentences[labels.index(1)])
    if len(out[LABELLED]) != len(inputs):
        del out[LABELLED]
    return out


def _scored(
    outputs: list[str],
    full: Mapping[str, Any],
    metrics: Mapping[str, Any],
    per_input: Mapping[str, list[float]] | None = None,
) -> dict[str, Any]:
    """A reference point scored by the evaluation's own metrics with the settings ``full`` (a
    :func:`~.summaries.summary_cells` cell) recorded (``metrics``, its concrete
    ``eval.metrics``), in the shape of such a cell; with ``per_input`` (stored scores) only
    corpus BLEU is computed."""
    settings = dict(metrics)
    if per_input is not None or "bertscore_f1" not in full["per_input"]:
        settings["bertscore"] = False
    if per_input is not None:
        settings["rouge"] = False
    quality = compute_all(outputs, full["references"], settings, prefix="eval.metrics")
    if per_input is None:
        per_input = per_input_scores(quality)
    per_input = {k: list(per_input[k]) for k in (*ROUGE_KEYS, "bertscore_f1") if k in per_input}
    values: dict[str, Any] = {k: sum(v) / len(v) for k, v in per_input.items()}
    values["bleu"] = quality["bleu"]["score"]
    return {
        "outputs": outputs,
        "references": full["references"],
        "inputs": full["inputs"],
        "per_input": per_input,
        "bleu_settings": quality["bleu"]["settings"],
        **values,
    }


def _input_keys(full: Mapping[str, Any]) -> list[str]:
    return [
        hashlib.sha256(json.dumps([text, refs]).encode("utf-8")).hexdigest()[:16]
        for text, refs in zip(full["inputs"], full["references"], strict=True)
    ]


def _stored(rows: Sequence[Mapping[str, Any]], full: Mapping[str, Any]) -> dict | None:
    """The stored outputs and per-input scores of each reference point of ``full``'s (dataset,
    model), or None where they are missing or were scored on other inputs."""
    keys = _input_keys(full)
    points: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if (row.get("dataset"), row.get("model")) == (full["dataset"], full["model"]):
            points.setdefault(str(row.get("system")), []).append(row)
    if not points:
        return None
    out = {}
    for point, members in points.items():
        members = sorted(members, key=lambda r: r.get("index", 0))
        if [r.get("input_sha256") for r in members] != keys:
            log.info("extractive: %s was scored on other inputs; scoring again", point)
            return None
        scores = {k: [r["scores"][k] for r in members] for k in members[0]["scores"]}
        out[point] = ([str(r["output"]) for r in members], scores)
    return out


def _stored_rows(group: Mapping[str, Any], full: Mapping[str, Any]) -> list[dict[str, Any]]:
    keys = _input_keys(full)
    return [
        {
            "dataset": full["dataset"],
            "model": full["model"],
            "system": point,
            "index": i,
            "input_sha256": keys[i],
            "output": cell["outputs"][i],
            "scores": {k: v[i] for k, v in cell["per_input"].items()},
        }
        for point, cell in group.items()
        for i in range(len(keys))
    ]


def _data_dir(dataset: str, data_dir: Path | None) -> Path:
    if data_dir is not None:
        return data_dir
    root = repo_root()
    if root is None:
        raise DataConfigError("--data-dir is not set and there is no repository to find ../shared")
    return root.parent / "shared" / "data" / dataset


def _points(
    first: Mapping[str, Any], data_dir: Path | None, stored: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each reference point of ``first``'s (dataset, model), scored in the shape of a cell: from
    the stored scores where they are for these inputs, else from the data files."""
    dataset = str(first["dataset"])
    record = read_json_or_none(first.get("record") or "") or {}
    recorded = ((record.get("config") or {}).get("eval") or {}).get("metrics") or {}
    metrics = metric_settings(recorded, get_task(dataset))
    kept = _stored(stored, first)
    if kept is not None:
        return {p: _scored(texts, first, metrics, scores) for p, (texts, scores) in kept.items()}
    split = str((record.get("dataset") or {}).get("split") or "test")
    directory = _data_dir(dataset, data_dir)
    rows = rows_by_source(dataset, split, directory)
    outputs = extractive_outputs(
        first["inputs"],
        first["references"],
        rows,
        get_task(dataset).source_field,
        f"data_dir={str(directory)!r}",
        use_stemmer=bool((metrics.get("rouge") or {}).get("use_stemmer", True)),
    )
    return {point: _scored(texts, first, metrics) for point, texts in outputs.items()}


def _group_rows(
    fulls: list[Mapping[str, Any]], points: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The page's rows of one (dataset, model): each reference point with full against it,
    then full over its seeds."""
    first = fulls[0]
    dataset, model = str(first["dataset"]), str(first["model"])
    out = []
    for point, cell in points.items():
        row: dict[str, Any] = {"dataset": dataset, "model": model, "system": point}
        row.update({m: cell.get(m) for m in QUALITY})
        row.update(paired_deltas(fulls, {str(f.get("seed")): cell for f in fulls}))
        out.append(row)
    seeds = " ".join(sorted(str(f.get("seed")) for f in fulls))
    full = {"dataset": dataset, "model": model, "system": "full", "seeds": seeds}
    full.update({m: mean_ci95([f.get(m) for f in fulls]) for m in QUALITY})
    return [*out, full]


def format_extractive(rows: Sequence[Mapping[str, Any]], inputs: int) -> str:
    label = ["model", "system"]
    quality = markdown_table(
        [*label, "seeds", *(LABELS[m] for m in QUALITY)],
        [
            [str(r[k]) for k in label]
            + [str(r.get("seeds", ""))]
            + [interval_text(r.get(m), None, m) for m in QUALITY]
            for r in rows
        ],
    )
    deltas = deltas_table(
        [{**r, "method": "reference"} for r in rows if r["system"] != "full"], label
    )
    return "\n".join(
        [
            "# Summarization: extractive reference points",
            "",
            "Generated by `python -m skipdecode.experiments.sweeps.extractive` from the cells'",
            "generations and the data files; do not edit. One copied source sentence, scored",
            f"on the cells' {inputs} inputs against the same references in the same conventions",
            "(`summaries.md`): *lead-1* (the first sentence), *oracle (dataset label)* (the",
            "sentence the data labels as its oracle), *oracle (best here)* (per input the",
            "sentence with the best ROUGE-1 under the *max* convention). Full: mean over seeds",
            "[95% t-interval over seeds]. SciTLDR's published table (its learned systems decode",
            "with beam search; ours decode greedily) is not reachable offline; its oracle row is",
            "the dataset-label oracle, scored there with files2rouge and here with rouge-score.",
            "",
            *quality,
            "",
            "## Full against each reference point",
            "",
            "Δ is full - reference point, over full's seeds: two-level paired bootstrap (inputs",
            "and seeds drawn) and the t-interval over the per-seed differences. *Decided* says",
            "lower or higher only where every interval shown excludes 0.",
            "",
            *deltas,
            "",
        ]
    )


def _csv_row(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: row.get(k) for k in ("dataset", "model", "system", "seeds")}
    for m in QUALITY:
        value = row.get(m)
        out[m] = value[0] if isinstance(value, tuple) else value
        out.update(delta_columns(row, m))
    return out


def write_extractive(
    folder: str | Path, data_dir: str | Path | None = None, rescore: bool = False
) -> dict[str, Path] | None:
    """Write ``extractive.jsonl.gz``, ``extractive.csv`` and ``extractive.md`` into ``folder``
    (module doc); None without full cells of a summarization dataset."""
    folder = Path(folder)
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for cell in summary_cells(folder):
        if cell.get("method") == "full":
            groups.setdefault((cell.get("dataset"), cell.get("model")), []).append(cell)
    if not groups:
        return None
    scores_file = plain_or_gzipped(folder / EXTRACTIVE_SCORES)
    stored = read_jsonl(scores_file) if scores_file.is_file() and not rescore else []
    directory = Path(data_dir) if data_dir is not None else None
    rows, kept = [], []
    for fulls in groups.values():
        points = _points(fulls[0], directory, stored)
        kept += _stored_rows(points, fulls[0])
        rows += _group_rows(fulls, points)
    inputs = len(next(iter(groups.values()))[0]["inputs"])
    lines = [_csv_row(r) for r in rows]
    write_jsonl_gz_atomic(folder / EXTRACTIVE_SCORES, kept)
    return {
        "scores": folder / EXTRACTIVE_SCORES,
        "csv": write_text_atomic(folder / EXTRACTIVE_CSV, csv_text(lines, list(lines[0]))),
        "markdown": write_text_atomic(folder / EXTRACTIVE_MD, format_extractive(rows, inputs)),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("folders", nargs="+", type=Path, help="results folders (published or sweeps)")
    p.add_argument("--data-dir", type=Path, default=None, help="the dataset's files")
    p.add_argument(
        "--rescore", action="store_true", help="score again even where stored scores exist"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for folder in args.folders:
        if not folder.is_dir():
            p.error(f"folders: {str(folder)!r} is not a directory")
        try:
            paths = write_extractive(folder, args.data_dir, args.rescore)
        except DataConfigError as e:
            p.error(str(e))
        print(f"{folder}: " + (", ".join(map(str, paths.values())) if paths else "no full cells"))


if __name__ == "__main__":
    main()
