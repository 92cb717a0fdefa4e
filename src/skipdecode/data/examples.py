"""The uniform record type shared by every task, and grouping of references by source."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..config import count


@dataclass(frozen=True)
class Example:
    """One (source, target) pair plus every known reference for that source.

    Training uses one Example per (source, reference) pair with ``target`` that reference;
    evaluation uses ``group_by_source`` to get one Example per source with all references.
    """

    source: str
    target: str
    references: tuple[str, ...]
    # False: the target was cut at a length limit (a model's answer that had not ended), so
    # training gives it no EOS
    complete: bool = True


def pairs_to_examples(source: str, references: Iterable[str]) -> list[Example]:
    """One training Example per reference of ``source``, each carrying all references."""
    refs = tuple(dict.fromkeys(references))
    return [Example(source=source, target=ref, references=refs) for ref in refs]


def group_by_source(examples: Iterable[Example]) -> list[Example]:
    """One Example per unique source (first-seen order) holding every reference seen for it.

    ``target`` is the first reference; references are de-duplicated, order kept.
    """
    grouped: dict[str, dict[str, None]] = {}
    for example in examples:
        refs = grouped.setdefault(example.source, {})
        refs.setdefault(example.target, None)
        for ref in example.references:
            refs.setdefault(ref, None)
    return [
        Example(source=source, target=next(iter(refs)), references=tuple(refs))
        for source, refs in grouped.items()
    ]


def check_limit(limit: object, setting: str = "limit") -> int | None:
    """``limit`` as a count of sources: null or an integer >= 0 (``2.5`` or ``"4"`` is refused,
    named by ``setting``, never read as "no limit")."""
    return count(limit, setting, 0, "every input")


def limit_sources(examples: list[Example], limit: int | None) -> list[Example]:
    """Keep the examples of the first ``limit`` distinct sources (all their references)."""
    if check_limit(limit) is None:
        return examples
    kept: set[str] = set()
    out = []
    for example in examples:
        if example.source not in kept:
            if len(kept) == limit:
                continue
            kept.add(example.source)
        out.append(example)
    return out
