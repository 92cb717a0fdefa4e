"""The lossless mode's rounds in the decode benchmark: host-driven (``-graphs``) and sync-free
(``-step``, :mod:`skipdecode.core.device_rounds`) on the CUDA-graph path.

A round is ``k`` draft passes through a constant plan of ``budget`` layers, then one verify pass
of every layer over ``k + 1`` positions. The time per token is the time a round takes over the
tokens a round yielded, both measured in the same run on the same device: with the model's own
weights, so a random-weight model (which accepts almost none of its draft's tokens) shows what
a round costs, and a trained model what it pays. Older records divided the round by a trained
draft's tokens per verify measured on a CPU (``--acceptance``); those rows say so and are never
shown as measurements.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ...core.engine import SkipDecoder
from ...schedules import build_schedule

__all__ = ["acceptance_of", "lossless_rows", "lossless_variants"]


def acceptance_of(path: Path, ks: tuple[int, ...], budget: int) -> dict[str, Any]:
    """Tokens per verify at each ``k`` from a lossless-mode benchmark record of a trained draft
    of ``budget`` layers (the mean over its batch sizes: acceptance does not depend on them),
    with where it came from."""
    record = json.loads(Path(path).read_text())
    args = record.get("args") or {}
    if str(args.get("draft_budget")) != str(budget):
        raise ValueError(
            f"--acceptance: {path} drafts with draft_budget={args.get('draft_budget')}; this "
            f"run's lossless rows draft with {budget} layers (--draft-budget)"
        )
    by_k: dict[int, list[float]] = {}
    for cell in record["cells"]:
        for name, row in cell["variants"].items():
            if name.startswith("speculative-k") and row.get("tokens_per_verify") is not None:
                by_k.setdefault(int(name.removeprefix("speculative-k")), []).append(
                    row["tokens_per_verify"]
                )
    missing = [k for k in ks if k not in by_k]
    if missing:
        raise ValueError(
            f"--acceptance: {path} has no tokens per verify for k = {missing}; it has "
            f"{sorted(by_k)}"
        )
    commit = ((record.get("provenance") or {}).get("git") or {}).get("commit")
    return {
        "record": str(path),
        "commit": commit,
        "model": args.get("model"),
        "tokens_per_verify": {k: statistics.mean(by_k[k]) for k in ks},
    }


def lossless_variants(
    decoder: SkipDecoder,
    ids: torch.Tensor,
    mask: torch.Tensor,
    new_tokens: int,
    ks: tuple[int, ...],
    budget: int,
    reference: str,
) -> dict[str, Callable[[], dict[str, Any]]]:
    """One variant per ``k``: the lossless mode with a constant draft of ``budget`` layers (the
    bottom one and the top ``budget - 1``) on ``decoder``; each run's decode seconds, rounds
    (its ``steps``) and tokens, and whether its tokens equal ``reference``'s (set later)."""
    L = decoder.num_layers
    draft = {"name": "budgets", "budgets": [budget], "warmup_layers": 1}
    variants = {}
    for k in ks:
        schedule = build_schedule({"name": "speculative", "draft": draft, "k": k}, L, new_tokens)

        def run(schedule=schedule, k=k) -> dict[str, Any]:
            out = decoder.generate(ids, schedule, new_tokens, mask, eos_token_id=[])
            spec = out.stats.speculation
            assert spec is not None
            return {
                "prefill_s": out.stats.prefill_seconds,
                "decode_s": out.stats.decode_seconds,
                "compile_s": out.stats.compile_seconds,
                "steps": spec.rounds,
                # tokens a round yields, measured here: the steps full needs per round
                "tokens_per_round": (new_tokens - 1) / max(spec.rounds, 1),
                "layers_per_token": float(k * budget + L),  # a round; per token later
                "generated": out.generated_ids,
                "reference": reference,
            }

        variants[f"lossless-k{k}-b{budget}{_suffix(decoder)}"] = run
    return variants


def lossless_rows(rows: dict[str, dict[str, Any]], acceptance: dict[str, Any] | None) -> None:
    """A lossless row's measured ms per round kept as such, and its ms per token in the column
    every other row's ms per step is in: from the tokens its own rounds yielded (measured where
    the time is), or, where ``acceptance`` is given (older records' composite), from the CPU's
    tokens per verify."""
    for name, r in rows.items():
        if not name.startswith("lossless-k"):
            continue
        k = int(name.removeprefix("lossless-k").split("-")[0])
        r["ms_per_round"] = r["decode_ms_per_step"]
        r["ms_per_round_q1"], r["ms_per_round_q3"] = r.pop("decode_ms_q1"), r.pop("decode_ms_q3")
        for key in ("tokens_per_s", "decode_tokens_per_s"):  # random weights' acceptance
            r.pop(key, None)
        if acceptance is None:  # measured: this run's rounds on this device
            tpr = r["tokens_per_round"]
            r["decode_ms_per_step"] = r["ms_per_round"] / tpr
            r["layers_per_token"] = r["layers_per_token"] / tpr
            r["flag"] = (
                f"per token: {r['ms_per_round']:.2f} ms a round / {tpr:.2f} tokens a round, "
                "both measured in this run"
            )
            continue
        tpv = acceptance["tokens_per_verify"][k]
        r["tokens_per_round_cpu"] = tpv
        r["decode_ms_per_step"] = r["ms_per_round"] / tpv
        r["layers_per_token"] = r["layers_per_token"] / tpv
        r["flag"] = (
            f"per token: {r['ms_per_round']:.2f} ms a round / {tpv:.2f} tokens a round (the "
            "trained draft's, measured on the CPU)"
        )


def _suffix(decoder: SkipDecoder) -> str:
    if decoder.options.compile_graph == "step":
        return "-step"  # sync-free rounds (core.device_rounds)
    if decoder.options.cuda_graphs:
        return "-graphs"
    return "-compiled" if decoder.compiled is not None else ""
