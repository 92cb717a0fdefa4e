"""A cell's output statistics (length and degeneracy) for the tables.

Records written since the statistics exist carry them (``record["outputs"]``, computed from
the generations with their recorded token counts). For older records they are computed here
from the committed ``generations.jsonl``; the share of outputs that hit ``max_new_tokens`` then
needs each output's token count, which those files lack: it is recounted by re-encoding the
output with the model's own tokenizer when that tokenizer is on this machine (an offline asset
such as SmolLM2; the counts are then stored beside the record, :data:`RECOUNT_FILE`, so that a
clone without that tokenizer regenerates the same pages), counting an output as capped when it
re-encodes to at least ``max_new_tokens - 1`` tokens (the decoded text was stripped of
surrounding whitespace, which can drop one token; an output ending at EOS one token earlier is
miscounted by this rule).
Without the tokenizer or the stored counts the share stays empty.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...evaluation.metrics.outputs import OUTPUT_STATS, output_statistics
from ...io import plain_or_gzipped, read_json_or_none, write_json_atomic
from .sources import read_generations

log = logging.getLogger(__name__)

__all__ = ["cell_generations", "cell_output_stats"]


def cell_generations(cell: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The cell's generation rows (input order) and its BLEU settings, or None if unreadable."""
    record = read_json_or_none(cell.get("record") or "")
    if not record:
        return None
    name = (record.get("files") or {}).get("generations", "generations.jsonl")
    path = plain_or_gzipped(Path(str(cell["record"])).parent / name)
    if not path.is_file():
        return None
    rows = sorted(read_generations(path), key=lambda r: r.get("index", 0))
    bleu = ((record.get("quality") or {}).get("bleu") or {}).get("settings") or {}
    return rows, bleu


@functools.lru_cache(maxsize=4)
def _tokenizer(model_cfg_key: tuple) -> Any | None:
    from ...models.loading import ModelConfigError, pretrained_path

    cfg = dict(model_cfg_key)
    if cfg.get("source") not in ("asset", "local"):
        return None  # a tokenizer trained in the run, or one on the hub: not here
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(pretrained_path(cfg))
    except (ModelConfigError, OSError) as e:
        log.info("no tokenizer to recount output tokens (%s)", e)
        return None


#: Beside an older record: its outputs' token counts as the model's tokenizer re-encodes them, so
#: that a clone without that tokenizer regenerates the same pages.
RECOUNT_FILE = "output_tokens.json"


def _recounted(rows: list[dict[str, Any]], cell: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``rows`` with ``generated_tokens`` recounted by the tokenizer of the model the cell
    fine-tuned (its ``identity.json``; see module doc): read from :data:`RECOUNT_FILE` beside
    the record, or counted where the tokenizer is on this machine and stored there."""
    folder = Path(str(cell["record"])).parent
    stored = read_json_or_none(folder / RECOUNT_FILE) or {}
    counts = stored.get("generated_tokens")
    if not (isinstance(counts, list) and len(counts) == len(rows)):
        identity = read_json_or_none(folder / "identity.json") or {}
        model = identity.get("model") or {}
        key = tuple(sorted((k, str(v)) for k, v in model.items() if k in ("source", "pretrained")))
        tok = _tokenizer(key)
        if tok is None:
            return rows
        counts = [len(tok(r["output"], add_special_tokens=False)["input_ids"]) for r in rows]
        write_json_atomic(
            folder / RECOUNT_FILE,
            {
                "generated_tokens": counts,
                "rule": "each output (input order) re-encoded without special tokens; EOS not "
                "counted (cell_outputs module doc)",
                "tokenizer": dict(key),
            },
        )
    return [
        {**r, "generated_tokens": n + 1, "ended": True, "recounted": True}
        for r, n in zip(rows, counts, strict=True)
    ]


def cell_output_stats(cell: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """The cell's output statistics: the record's own, or computed from its generations."""
    stats = record.get("outputs")
    if isinstance(stats, Mapping) and all(k in stats for k in OUTPUT_STATS):
        return dict(stats)
    found = cell_generations(cell)
    if found is None:
        return {}
    rows, bleu = found
    max_new = (record.get("generation") or {}).get("max_new_tokens")
    if max_new and rows and "generated_tokens" not in rows[0]:
        rows = _recounted(rows, cell)
        if rows and rows[0].get("recounted"):  # capped: re-encodes to >= max_new - 1 tokens
            rows = [{**r, "ended": r["generated_tokens"] - 1 < int(max_new) - 1} for r in rows]
    return output_statistics(rows, bleu, int(max_new) if max_new else None)
