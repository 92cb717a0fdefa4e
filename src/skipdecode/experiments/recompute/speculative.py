"""The lossless-mode benchmark's records and pages recomputed from their counts and seconds.

Own arithmetic on every ``results/bench/speculative-*.json`` record of the benchmark (one with
``cells``): in each cell, every variant's speedup over the full model (and over transformers'
``generate`` where the record states one) is the full model's decode seconds (older records: ms
per token) over the variant's; its ms per full-model step is its decode seconds over the full
model's decode steps (summed over batches); its acceptance is the accepted drafts over the
drafted ones and its tokens per verify the accepted drafts plus the row rounds over the row
rounds, both summed over batches; its round's predicted speedup is the steps a round advances
over the round's summed phases, its draft pass the draft phases over the drafts a round, and
the head's share of it; where a variant keeps each repeat's seconds
(``decode_s_per_repeat``, whole workload and per batch), its decode seconds are their median.
Then the record's own page (``speculative-*.md``): each row, found by model, path, batch and
variant, prints those figures at the printed digits and names the variant as the page does (the
chosen draft, an auto-off variant's batches off), every variant appears once, the ``exact``
column says whether its output was the full model's.

The pages a study builds from these records (the draft comparisons) are recomputed by
:mod:`.drafts`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .findings import Findings, check_rows, tables_of
from .tables import median

__all__ = ["check_speculative"]

_COUNTS = ("accepted", "drafted", "row_rounds")
#: The page columns the benchmark writes today (older pages have fewer, and other names).
_CURRENT = (
    "acceptance", "by draft budget", "tokens/verify", "drafts/round", "draft pass (head share)",
    "verify", "accept + bookkeeping", "predicted", "measured vs full", "ms/step of full", "exact",
)  # fmt: skip
_OWN_PHASES = ("steps_per_round", "drafts_per_round")


def _time_key(full: Mapping[str, Any]) -> str:
    """The record's time figure: decode seconds, or (older records) ms per token."""
    return "decode_s" if "decode_s" in full else "ms_per_token"


def _check_variant(
    where: str, r: Mapping[str, Any], variants: Mapping[str, Any], found: Findings
) -> None:
    full = variants["skipdecode-full"]
    key = _time_key(full)
    found.compare(where, "speedup_vs_full", r.get("speedup_vs_full"), full[key] / r[key])
    if "speedup_vs_transformers" in r and "transformers-generate" in variants:
        peer = variants["transformers-generate"][key]
        found.compare(where, "speedup_vs_transformers", r["speedup_vs_transformers"], peer / r[key])
    if full.get("per_batch"):
        steps = sum(b["steps"] for b in full["per_batch"])
        found.compare(
            where,
            "ms_per_step_of_full",
            r.get("ms_per_step_of_full"),
            1000 * r[key] / max(steps, 1),
        )
    if "decode_s_per_repeat" in r:
        found.compare(where, "decode_s (median)", r["decode_s"], median(r["decode_s_per_repeat"]))
        for i, b in enumerate(r.get("per_batch") or []):
            found.compare(
                where, f"batch {i} decode_s", b["decode_s"], median(b["decode_s_per_repeat"])
            )
    elif key == "decode_s":
        found.skip(
            "speculative variants without each repeat's seconds (written before they were kept)"
        )
    batches = r.get("per_batch") or []
    if batches and "drafted" in batches[0]:
        accepted, drafted, rounds = (sum(b[k] for b in batches) for k in _COUNTS)
        found.compare(
            where,
            "acceptance_rate",
            r.get("acceptance_rate"),
            accepted / drafted if drafted else None,
        )
        found.compare(
            where,
            "tokens_per_verify",
            r.get("tokens_per_verify"),
            (accepted + rounds) / rounds if rounds else None,
        )
    cost = r.get("cost")
    if cost:
        total = sum(v for k, v in cost.items() if k.endswith("_per_round") and k not in _OWN_PHASES)
        found.compare(
            where,
            "predicted_speedup",
            cost.get("predicted_speedup"),
            cost["steps_per_round"] / total if total else None,
        )
        drafts, layers, head = (
            cost[k] for k in ("drafts_per_round", "draft_layers_per_round", "draft_head_per_round")
        )
        found.compare(
            where,
            "draft_pass",
            cost.get("draft_pass"),
            (layers + head) / drafts if drafts else None,
        )
        share = head / (layers + head) if drafts and layers + head else None
        found.compare(where, "head_share_of_draft", cost.get("head_share_of_draft"), share)


def _path(cell: Mapping[str, Any]) -> str:
    if not cell.get("compiled"):
        return "eager"
    return "compiled, plan graphs" if cell.get("compile_graph") == "plan" else "compiled"


def _label(name: str, r: Mapping[str, Any], cell: Mapping[str, Any]) -> str:
    """The variant as its page names it: the chosen constant draft marked, an auto-off variant
    with the batches it was off in."""
    label = name + (" (chosen)" if r.get("chosen") else "")
    if name.endswith("-auto"):
        off = r.get("turned_off", 0) + r.get("started_off", 0)
        label += f" (off in {off}/{cell['batches']} batches)"
    return label


def _printed(r: Mapping[str, Any]) -> dict[str, Any]:
    """Each page column's figures (a list, printed in order) or text, for variant ``r``."""
    cost = r.get("cost") or {}
    share = cost.get("head_share_of_draft")
    other = cost["accept_per_round"] + cost["bookkeeping_per_round"] if cost else None
    budgets = [
        x
        for b, v in (r.get("acceptance_by_budget") or {}).items()
        if v is not None
        for x in (int(b), v)
    ]
    exact = r.get("identical_to_full")
    return {
        "acceptance": [r.get("acceptance_rate")],
        "by draft budget": budgets,
        "tokens/verify": [r.get("tokens_per_verify")],
        "drafts/round": [cost.get("drafts_per_round")],
        "draft pass (head share)": [cost.get("draft_pass"), None if share is None else 100 * share],
        "verify": [cost.get("verify_per_round")],
        "accept + bookkeeping": [other],
        "predicted": [cost.get("predicted_speedup")],
        "measured vs full": [r.get("speedup_vs_full")],
        "vs full": [r.get("speedup_vs_full")],
        "vs transformers": [r.get("speedup_vs_transformers")],
        "ms/step of full": [r.get("ms_per_step_of_full")],
        "ms/token": [r.get("ms_per_token")],
        "layers/token": [r.get("layers_per_token")],
        "exact": "" if exact is None else str(exact),
    }


def _check_page(path: Path, record: Mapping[str, Any], found: Findings) -> None:
    page = path.with_suffix(".md")
    tables = tables_of(page)
    table = next((t for t in tables if {"batch", "variant"} <= set(t[0])), None)
    if table is None:
        found.differences.append(f"bench/{path.name}: no page with a variant table beside it")
        return
    header = table[0]
    keys = [k for k in ("model", "path", "batch") if k in header]
    expected: dict[tuple[str, ...], Mapping[str, Any]] = {}
    for cell in record["cells"]:
        at = {
            "model": Path(cell["model"]).name,
            "path": _path(cell),
            "batch": str(cell["batch_size"]),
        }
        for name, r in cell["variants"].items():  # the columns of its layout, all of today's
            current = "measured vs full" in header
            printed = {
                c: v for c, v in _printed(r).items() if c in header or c in _CURRENT and current
            }
            printed["variant"] = _label(name, r, cell)
            expected[(*(at[k] for k in keys), name)] = printed
    check_rows(
        found, f"bench/{page.name}", table, expected,
        lambda row: (*(row.get(k, "") for k in keys), row.get("variant", "").split(" (")[0]),
    )  # fmt: skip


def check_speculative(results: Path) -> Findings:
    """Every lossless-mode benchmark record's derived figures and its own page's rows."""
    found = Findings("lossless benchmarks from their counts and seconds")
    for path in sorted((results / "bench").glob("speculative-*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record.get("cells"), list):
            continue  # a page a study builds from these records (.drafts)
        for cell in record["cells"]:
            variants = cell["variants"]
            for name, r in variants.items():
                _check_variant(
                    f"bench/{path.name} batch {cell['batch_size']} {name}", r, variants, found
                )
        _check_page(path, record, found)
    return found
