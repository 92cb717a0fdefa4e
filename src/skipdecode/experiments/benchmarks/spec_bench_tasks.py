"""Spec-Bench's six tasks, and the task of a question's category (its ``speed.py``: MT-bench's
eight categories count as one task). Shared by the study that runs the benchmark
(``studies.spec_bench``) and the audit that recomputes its pages
(:mod:`skipdecode.experiments.recompute.spec_bench`)."""

from __future__ import annotations

__all__ = ["MT_BENCH", "TASKS", "task_of"]

MT_BENCH = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
)
TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


def task_of(category: str) -> str:
    """The Spec-Bench task a question of ``category`` belongs to."""
    return "mt_bench" if category in MT_BENCH else category
