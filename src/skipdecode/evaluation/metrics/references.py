"""Metric inputs: one hypothesis per example, each with its own list of references."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MetricSettingError", "normalize_references", "ref_count_summary"]


class MetricSettingError(ValueError):
    """A metric setting (or its input) is invalid or cannot be satisfied in this environment."""


# --------------------------------------------------------------------------------------------
# inputs


def normalize_references(
    hypotheses: Sequence[str], references: Sequence[Sequence[str] | str], *, where: str = "metric"
) -> tuple[list[str], list[list[str]]]:
    """Validate inputs and return ``(hypotheses, references)`` as lists; a str ref becomes ``[ref]``."""
    if isinstance(hypotheses, str) or not isinstance(hypotheses, Sequence):
        raise MetricSettingError(
            f"{where}: hypotheses must be a list of str, got {type(hypotheses).__name__}"
        )
    if isinstance(references, str) or not isinstance(references, Sequence):
        raise MetricSettingError(
            f"{where}: references must be a list of lists of str (one list per hypothesis), "
            f"got {type(references).__name__}"
        )
    if len(hypotheses) != len(references):
        raise MetricSettingError(
            f"{where}: got {len(hypotheses)} hypotheses but {len(references)} reference lists; "
            "there must be exactly one list of references per hypothesis"
        )
    if len(hypotheses) == 0:
        raise MetricSettingError(f"{where}: hypotheses is empty; at least one example is needed")
    hyps: list[str] = []
    for i, h in enumerate(hypotheses):
        if not isinstance(h, str):
            raise MetricSettingError(
                f"{where}: hypotheses[{i}] is {type(h).__name__}, allowed: str (use '' for no output)"
            )
        hyps.append(h)
    refs: list[list[str]] = []
    for i, r in enumerate(references):
        group = [r] if isinstance(r, str) else r
        if not isinstance(group, Sequence) or len(group) == 0:
            raise MetricSettingError(
                f"{where}: references[{i}] must be a non-empty list of str, got {r!r}"
            )
        for j, s in enumerate(group):
            if not isinstance(s, str):
                raise MetricSettingError(
                    f"{where}: references[{i}][{j}] is {type(s).__name__}, allowed: str"
                )
        refs.append(list(group))
    return hyps, refs


def ref_count_summary(refs: list[list[str]]) -> dict[str, int]:
    counts = [len(r) for r in refs]
    return {"min": min(counts), "max": max(counts)}
