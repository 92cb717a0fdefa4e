"""``load_split``, the one entry point for data, and target-length statistics.

The task registry lives in :mod:`.tasks`, the per-dataset loaders in :mod:`.loaders`.
"""

from __future__ import annotations

import inspect
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import DataConfigError, EmptySplitError
from .examples import Example, group_by_source, limit_sources
from .loaders import LOADERS
from .tasks import SPLITS, TASKS, TaskSpec, available_datasets, get_task, resolve_split

__all__ = [
    "Example",
    "TaskSpec",
    "TASKS",
    "SPLITS",
    "available_datasets",
    "dataset_options",
    "get_task",
    "load_split",
    "group_by_source",
    "median_target_length",
    "resolve_split",
    "target_lengths",
]

_COMMON_ARGS = ("spec", "split", "data_dir", "hub_name", "seed")


def dataset_options(name: str) -> tuple[str, ...]:
    """The extra keyword settings ``load_split`` accepts for dataset ``name``."""
    get_task(name)
    parameters = inspect.signature(LOADERS[name]).parameters
    return tuple(p for p in parameters if p not in _COMMON_ARGS)


def load_split(
    name: str,
    split: str,
    *,
    data_dir: str | Path | None = None,
    hub_name: str | None = None,
    seed: int = 0,
    limit: int | None = None,
    **kwargs: Any,
) -> list[Example]:
    """Examples of one split: one per (source, reference) pair, each with all references.

    ``data_dir`` selects local files (it wins over the hub); without it the hub dataset
    ``hub_name`` (default from the TaskSpec) is loaded. ``seed`` drives the synthetic data and
    the train/validation split of E2E's devset. ``limit`` keeps the first ``limit`` distinct
    sources. Extra keyword settings per dataset: see ``dataset_options(name)``.
    """
    spec = get_task(name)
    split = resolve_split(spec, split)
    allowed = dataset_options(name)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise DataConfigError(
            f"dataset {name!r} got unknown setting(s) {unknown}; allowed: "
            f"{', '.join(('data_dir', 'hub_name', 'seed', 'limit', *allowed))}"
        )
    examples = LOADERS[name](spec, split, data_dir=data_dir, hub_name=hub_name, seed=seed, **kwargs)
    examples = limit_sources(examples, limit)
    if not examples:
        origin = (
            f"data_dir={str(data_dir)!r}"
            if data_dir is not None
            else (f"hub_name={hub_name or spec.hub_name!r}" if name != "synthetic" else f"{kwargs}")
        )
        raise EmptySplitError(
            f"dataset {name!r} split {split!r} is empty (from {origin}, limit={limit!r}); "
            "check the files and the split settings"
        )
    return examples


# --------------------------------------------------------------------------------------------
# Lengths
# --------------------------------------------------------------------------------------------


def target_lengths(
    examples: Iterable[Example],
    tokenizer: Any,
    *,
    task: TaskSpec | None = None,
    include_eos: bool = True,
) -> list[int]:
    """Token counts of ``target_prefix + target`` (+1 for EOS), as the model generates them."""
    prefix = task.target_prefix if task is not None else " "
    texts = [prefix + ex.target for ex in examples]
    if not texts:
        return []
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [len(ids) + int(include_eos) for ids in encoded]


def median_target_length(
    examples: Iterable[Example],
    tokenizer: Any,
    *,
    task: TaskSpec | None = None,
    include_eos: bool = True,
) -> int:
    """Median target length in tokens (rounded half up); used to build schedules."""
    lengths = target_lengths(examples, tokenizer, task=task, include_eos=include_eos)
    if not lengths:
        raise EmptySplitError("median_target_length needs at least one example")
    return int(statistics.median(lengths) + 0.5)
