"""BERTScore added here to published cells that were evaluated without it.

A GPU machine lent to a run has no BERTScore model (MiniLM does not travel with the run's
inputs), so its cells are evaluated with ``eval.metrics.bertscore.enabled=false`` and published
there (``python -m skipdecode.aggregate ... --publish $OUT/<name>``); back on this machine, with
the folder copied under ``results/``:

    python -m skipdecode.experiments.sweeps.rescore results/<name> [...]

scores every job whose record has no BERTScore from its own generations, as the evaluation
would have (its config's ``eval.metrics.bertscore`` with ``enabled`` on, made concrete the same
way: the local MiniLM, per-input F1): the record gains ``quality.bertscore`` and the summary's
``bertscore_*``, each generation row its ``bertscore_f1``, and ``quality.computed_apart`` says
which metrics were computed where (this machine, these versions and commit, when), apart from
the run that generated the outputs, whose provenance the record keeps. Per job the generations are
written first and the record last, each whole, so a job stopped midway is scored again; a job
that has BERTScore is left as it is. Then the folder is packed again; ``make docs`` rewrites its
pages from the scored records.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ...evaluation.metrics import compute_all
from ...evaluation.record import metric_settings, per_input_scores, summarize
from ...io import read_json_or_none, write_json_atomic, write_jsonl_gz_atomic
from ...provenance import provenance
from .publish import GZIPPED, RECORD
from .sources import pack_folder, read_generations

__all__ = ["RescoreError", "rescore_folder"]


class RescoreError(ValueError):
    """A folder or job that cannot be scored (named, with what is allowed)."""


def _settings(record: dict[str, Any], where: Path) -> dict[str, Any]:
    """The record's own BERTScore settings, switched on and made concrete as an evaluation makes
    them (MiniLM's local directory and layer, per-input scores)."""
    metrics = ((record.get("config") or {}).get("eval") or {}).get("metrics") or {}
    section = metrics.get("bertscore")
    if not isinstance(section, dict):
        raise RescoreError(
            f"{where}: config eval.metrics.bertscore is {section!r}; a mapping of BERTScore "
            "settings is needed to score as the evaluation would"
        )
    task = SimpleNamespace(kind="", bleu_lowercase=False, bleu_convention="")
    return metric_settings({"bertscore": {**section, "enabled": True}}, task)["bertscore"]


def _where() -> dict[str, Any]:
    prov = provenance()
    keep = ("timestamp_utc", "git", "packages", "device", "hostname")
    return {k: prov.get(k) for k in keep}


def rescore_job(job: Path) -> bool:
    """Add BERTScore to one published job; False where its record has it already."""
    record = read_json_or_none(job / RECORD)
    if not isinstance(record, dict) or record.get("status") != "ok":
        return False
    quality = record.setdefault("quality", {})
    if "bertscore" in quality:
        return False
    if not (job / GZIPPED).is_file():
        raise RescoreError(f"{job}: no {GZIPPED}; BERTScore is scored from a job's outputs")
    rows = read_generations(job / GZIPPED)
    if len(rows) != (record.get("dataset") or {}).get("num_inputs"):
        raise RescoreError(
            f"{job}: {len(rows)} generation rows for a record of "
            f"{(record.get('dataset') or {}).get('num_inputs')} inputs; they must match"
        )
    settings = _settings(record, job)
    scored = compute_all(
        [r["output"] for r in rows],
        [list(r["references"]) for r in rows],
        {"bertscore": settings},
        prefix="eval.metrics",
    )
    f1 = per_input_scores(scored)["bertscore_f1"]
    for row, value in zip(rows, f1, strict=True):
        row.setdefault("scores", {})["bertscore_f1"] = value
    write_jsonl_gz_atomic(job / GZIPPED, rows)
    quality["bertscore"] = scored["bertscore"]
    quality.setdefault("computed_apart", {})["bertscore"] = {**_where(), "settings": settings}
    added = {k: v for k, v in summarize(scored, {}).items() if k.startswith("bertscore_")}
    record["summary"] = {**record.get("summary", {}), **added}  # the rest as the run wrote it
    write_json_atomic(job / RECORD, record)  # last: a job is scored once its record says so
    return True


def rescore_folder(folder: str | Path) -> list[str]:
    """Score every job of a published folder that lacks BERTScore and pack the folder again;
    returns the jobs scored."""
    folder = Path(folder)
    jobs = sorted(p.parent for p in folder.glob(f"*/{RECORD}"))
    if not folder.is_dir() or not jobs:
        raise RescoreError(
            f"{folder}: not a published results folder (no <job>/{RECORD} in it); give "
            "results/<name> as python -m skipdecode.aggregate --publish wrote it"
        )
    done = [job.name for job in jobs if rescore_job(job)]
    pack_folder(folder)  # also a job a stopped run left unpacked; nothing where all are packed
    return done


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="published folders (results/<name>)")
    args = p.parse_args(argv)
    for folder in args.folders:
        try:
            done = rescore_folder(folder)
        except RescoreError as e:
            p.error(str(e))
        print(f"{folder}: BERTScore added to {len(done)} jobs {' '.join(done)}".rstrip())
    print("then: make docs (the pages from the scored records)")


if __name__ == "__main__":
    main()
