"""Registry of tasks (``TaskSpec``) and ``load_split``, the one entry point for data.

Known datasets: ``synthetic`` (embedded, generated from the seed), ``e2e`` (local E2E CSVs or the
hub), ``reddit_tldr`` and ``cnn_dm`` (local JSON/JSONL/CSV/Parquet files or the hub).
Canonical split names are ``train``, ``validation`` and ``test`` (``val``/``valid`` accepted).
"""

from __future__ import annotations

import inspect
import logging
import random
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import synthetic
from .errors import DataConfigError, DataNotFoundError, EmptySplitError
from .examples import Example, group_by_source, limit_sources, pairs_to_examples
from .files import SUPPORTED_SUFFIXES, find_split_file, read_rows, require_columns

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
    "target_lengths",
]

logger = logging.getLogger(__name__)

SPLITS: tuple[str, ...] = ("train", "validation", "test")
_SPLIT_ALIASES: Mapping[str, str] = {"val": "validation", "valid": "validation"}


@dataclass(frozen=True)
class TaskSpec:
    """How a dataset is read and turned into prompts.

    The model sees ``prompt(source) + target_prefix + target``; ``prompt_template`` holds
    ``{source}`` exactly once, and the text after it (e.g. ``"\\nDescription:"``) is the suffix
    that source truncation always keeps.
    """

    name: str
    kind: str  # "data-to-text" or "summarization"
    prompt_template: str
    target_prefix: str
    max_source_tokens: int
    max_target_tokens: int
    source_field: str
    target_field: str
    hub_name: str | None = None
    hub_config: str | None = None
    hub_revision: str | None = None
    hub_splits: Mapping[str, str] = field(default_factory=dict, hash=False)
    local_files: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    splits: tuple[str, ...] = SPLITS
    description: str = ""

    def __post_init__(self) -> None:
        if self.prompt_template.count("{source}") != 1:
            raise ValueError(
                f"TaskSpec {self.name!r}: prompt_template must contain '{{source}}' exactly once, "
                f"got {self.prompt_template!r}"
            )

    @property
    def prompt_prefix(self) -> str:
        return self.prompt_template.partition("{source}")[0]

    @property
    def prompt_suffix(self) -> str:
        return self.prompt_template.partition("{source}")[2]

    def prompt(self, source: str) -> str:
        """The text the model is conditioned on, e.g. ``"<MR>\\nDescription:"``."""
        return self.prompt_prefix + source + self.prompt_suffix

    def full_text(self, source: str, target: str) -> str:
        """Prompt followed by the target, as seen in training."""
        return self.prompt(source) + self.target_prefix + target


_E2E_FILES: Mapping[str, str] = {
    "train": "devset.csv",
    "validation": "devset.csv",
    "test": "testset_w_refs.csv",
}
_SUMMARY_FILES: Mapping[str, tuple[str, ...]] = {
    "train": ("train",),
    "validation": ("validation", "valid", "val"),
    "test": ("test",),
}

TASKS: Mapping[str, TaskSpec] = {
    "synthetic": TaskSpec(
        name="synthetic",
        kind="data-to-text",
        prompt_template="{source}\nDescription:",
        target_prefix=" ",
        max_source_tokens=96,
        max_target_tokens=96,
        source_field="mr",
        target_field="ref",
        description="E2E-shaped restaurant descriptions generated from the seed (embedded).",
    ),
    "e2e": TaskSpec(
        name="e2e",
        kind="data-to-text",
        prompt_template="{source}\nDescription:",
        target_prefix=" ",
        max_source_tokens=128,
        max_target_tokens=128,
        source_field="mr",
        target_field="ref",
        hub_name="tuetschek/e2e_nlg",
        # The hub repo's main branch is a loading script, which datasets>=4 refuses;
        # its automatic Parquet export has the same splits and fields.
        hub_revision="refs/convert/parquet",
        hub_splits={"train": "train", "validation": "validation", "test": "test"},
        local_files={split: (name,) for split, name in _E2E_FILES.items()},
        description="E2E NLG challenge: restaurant MRs to text, several references per MR.",
    ),
    "reddit_tldr": TaskSpec(
        name="reddit_tldr",
        kind="summarization",
        prompt_template="{source}\nTL;DR:",
        target_prefix=" ",
        max_source_tokens=512,
        max_target_tokens=64,
        source_field="prompt",
        target_field="label",
        hub_name="CarperAI/openai_summarize_tldr",
        hub_splits={"train": "train", "validation": "valid", "test": "test"},
        local_files=_SUMMARY_FILES,
        description="Reddit TL;DR (OpenAI filtered): Reddit post to one-line summary.",
    ),
    "cnn_dm": TaskSpec(
        name="cnn_dm",
        kind="summarization",
        prompt_template="{source}\nTL;DR:",
        target_prefix=" ",
        max_source_tokens=512,
        max_target_tokens=128,
        source_field="article",
        target_field="highlights",
        hub_name="abisee/cnn_dailymail",
        hub_config="3.0.0",
        hub_splits={"train": "train", "validation": "validation", "test": "test"},
        local_files=_SUMMARY_FILES,
        description="CNN/DailyMail 3.0.0: news article to highlight sentences.",
    ),
}


def available_datasets() -> tuple[str, ...]:
    return tuple(TASKS)


def get_task(name: str) -> TaskSpec:
    """The ``TaskSpec`` of a dataset; the error lists the known names."""
    try:
        return TASKS[name]
    except KeyError:
        raise DataConfigError(
            f"unknown dataset name={name!r}; known datasets: {', '.join(TASKS)}"
        ) from None


def resolve_split(spec: TaskSpec, split: str) -> str:
    """Canonical split name (``val``/``valid`` -> ``validation``)."""
    canonical = _SPLIT_ALIASES.get(split, split)
    if canonical not in spec.splits:
        raise DataConfigError(
            f"unknown split={split!r} for dataset {spec.name!r}; allowed: {', '.join(spec.splits)}"
        )
    return canonical


# --------------------------------------------------------------------------------------------
# Text cleaning
# --------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    """Collapse all whitespace (including newlines) to single spaces."""
    return " ".join(text.split())


def _strip_tldr(text: str) -> str:
    """Drop a trailing ``TL;DR:`` (CarperAI prompts end with it; the template adds it back)."""
    text = text.strip()
    if text.endswith("TL;DR:"):
        text = text[: -len("TL;DR:")].rstrip()
    return text


_SOURCE_CLEANERS: Mapping[str, Callable[[str], str]] = {
    "synthetic": str.strip,
    "e2e": str.strip,
    "reddit_tldr": _strip_tldr,
    "cnn_dm": str.strip,
}
_TARGET_CLEANERS: Mapping[str, Callable[[str], str]] = {
    "synthetic": str.strip,
    "e2e": str.strip,
    "reddit_tldr": _one_line,
    "cnn_dm": _one_line,
}


def _rows_to_examples(
    spec: TaskSpec,
    rows: Iterable[Mapping[str, Any]],
    source_field: str,
    target_field: str,
    origin: str,
) -> list[Example]:
    """Group rows by source into Examples (one per pair), skipping rows with blank fields."""
    clean_source, clean_target = _SOURCE_CLEANERS[spec.name], _TARGET_CLEANERS[spec.name]
    references: dict[str, list[str]] = {}
    skipped = 0
    for row in rows:
        source, target = row.get(source_field), row.get(target_field)
        source = clean_source(str(source)) if source is not None else ""
        target = clean_target(str(target)) if target is not None else ""
        if not source or not target:
            skipped += 1
            continue
        references.setdefault(source, []).append(target)
    if skipped:
        logger.warning(
            "%s: skipped %d row(s) with an empty %r or %r",
            origin,
            skipped,
            source_field,
            target_field,
        )
    return [ex for source, refs in references.items() for ex in pairs_to_examples(source, refs)]


# --------------------------------------------------------------------------------------------
# Loaders (one per dataset; keyword-only options are the dataset's extra settings)
# --------------------------------------------------------------------------------------------


def _check_data_dir(spec: TaskSpec, data_dir: str | Path, expected: str) -> Path:
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise DataNotFoundError(
            f"dataset {spec.name!r}: data_dir={str(data_dir)!r} is not an existing directory "
            f"(resolved to {str(path.resolve())!r}). Expected a directory with {expected}. "
            f"Set data_dir to that directory, or to null to load hub_name={spec.hub_name!r}."
        )
    return path


def _load_hub(
    spec: TaskSpec,
    split: str,
    hub_name: str | None,
    hub_config: str | None,
    hub_revision: str | None,
    source_field: str,
    target_field: str,
) -> list[Example]:
    import datasets  # imported lazily: slow, and only needed for the hub path

    name = hub_name or spec.hub_name
    if name is None:
        raise DataConfigError(f"dataset {spec.name!r} has no hub source; set data_dir")
    hub_split = spec.hub_splits.get(split, split)
    where = (
        f"hub_name={name!r} (config={hub_config!r}, split={hub_split!r}, revision={hub_revision!r})"
    )
    try:
        dataset = datasets.load_dataset(name, hub_config, split=hub_split, revision=hub_revision)
    except Exception as error:  # noqa: BLE001 - re-raised with the settings that led here
        raise DataConfigError(
            f"dataset {spec.name!r}: could not load {where}: {type(error).__name__}: {error}. "
            f"Without network access set data_dir to a local copy "
            f"(expected files: {dict(spec.local_files) or 'see the TaskSpec'})."
        ) from error
    missing = [c for c in (source_field, target_field) if c not in dataset.column_names]
    if missing:
        raise DataConfigError(
            f"dataset {spec.name!r}: {where} lacks column(s) {missing}; columns found: "
            f"{dataset.column_names}; columns needed: {[source_field, target_field]}"
        )
    rows = (
        {source_field: source, target_field: target}
        for source, target in zip(dataset[source_field], dataset[target_field], strict=True)
    )  # column-wise: much faster than iterating rows of a large Arrow table
    return _rows_to_examples(spec, rows, source_field, target_field, where)


def _load_synthetic(
    spec: TaskSpec,
    split: str,
    *,
    data_dir: str | Path | None,
    hub_name: str | None,
    seed: int,
    num_train: int = 1500,
    num_validation: int = 100,
    num_test: int = 200,
    min_refs: int = 3,
    max_refs: int = 5,
) -> list[Example]:
    if data_dir is not None or hub_name is not None:
        logger.warning(
            "dataset 'synthetic' is generated from the seed; ignoring data_dir=%r and hub_name=%r",
            data_dir,
            hub_name,
        )
    config = synthetic.SyntheticConfig(num_train, num_validation, num_test, min_refs, max_refs)
    return [
        example
        for source, refs in synthetic.generate_split(split, seed, config)
        for example in pairs_to_examples(source, refs)
    ]


def _split_by_source(
    examples: list[Example], split: str, seed: int, validation_fraction: float
) -> list[Example]:
    """Deterministically divide one file's sources into train and validation (disjoint)."""
    if not 0.0 < validation_fraction < 1.0:
        raise DataConfigError(
            f"validation_fraction={validation_fraction!r} must be in (0, 1) when train and "
            "validation read the same file (see split_files)"
        )
    sources = sorted({ex.source for ex in examples})
    random.Random(f"skipdecode-split-{seed}").shuffle(sources)
    n_validation = max(1, round(validation_fraction * len(sources)))
    validation = set(sources[:n_validation])
    want_validation = split == "validation"
    return [ex for ex in examples if (ex.source in validation) == want_validation]


def _load_e2e(
    spec: TaskSpec,
    split: str,
    *,
    data_dir: str | Path | None,
    hub_name: str | None,
    seed: int,
    split_files: Mapping[str, str] | None = None,
    validation_fraction: float = 0.1,
    hub_revision: str | None = None,
) -> list[Example]:
    if data_dir is None:
        return _load_hub(
            spec,
            split,
            hub_name,
            None,
            hub_revision if hub_revision is not None else spec.hub_revision,
            "meaning_representation",
            "human_reference",
        )
    files = dict(_E2E_FILES)
    for key, value in (split_files or {}).items():
        resolve_split(spec, key)  # validates the key
        files[_SPLIT_ALIASES.get(key, key)] = value
    directory = _check_data_dir(
        spec,
        data_dir,
        f"the E2E CSVs {sorted(set(files.values()))} (columns mr,ref; mapping split_files={files})",
    )
    path = directory / files[split]
    if not path.is_file():
        raise DataNotFoundError(
            f"dataset 'e2e' split {split!r}: file {str(path)!r} does not exist. "
            f"data_dir={str(data_dir)!r} should contain {files[split]!r} (columns mr,ref); "
            f"change split_files={files} to read another file for this split"
        )
    rows = read_rows(path)
    require_columns(rows, ("mr", "ref"), path)
    examples = _rows_to_examples(spec, rows, "mr", "ref", str(path))
    if split in ("train", "validation") and files["train"] == files["validation"]:
        examples = _split_by_source(examples, split, seed, validation_fraction)
    return examples


def _load_summaries(
    spec: TaskSpec,
    split: str,
    *,
    data_dir: str | Path | None,
    hub_name: str | None,
    seed: int,
    split_files: Mapping[str, str] | None = None,
    source_field: str | None = None,
    target_field: str | None = None,
    hub_config: str | None = None,
    hub_revision: str | None = None,
) -> list[Example]:
    source_field = source_field or spec.source_field
    target_field = target_field or spec.target_field
    if data_dir is None:
        return _load_hub(
            spec,
            split,
            hub_name,
            hub_config if hub_config is not None else spec.hub_config,
            hub_revision if hub_revision is not None else spec.hub_revision,
            source_field,
            target_field,
        )
    candidates = {split: list(names) for split, names in spec.local_files.items()}
    for key, value in (split_files or {}).items():
        candidates[resolve_split(spec, key)] = [value]
    layout = {
        s: [n if Path(n).suffix else f"{n}{{{','.join(SUPPORTED_SUFFIXES)}}}" for n in c]
        for s, c in candidates.items()
    }
    directory = _check_data_dir(
        spec, data_dir, f"one file per split {layout} with fields {source_field},{target_field}"
    )
    path = find_split_file(
        directory,
        candidates[split],
        f"Dataset {spec.name!r} split {split!r} needs a file with fields "
        f"{source_field},{target_field}; set split_files={{{split!r}: 'FILE'}} to name it.",
    )
    rows = read_rows(path)
    require_columns(rows, (source_field, target_field), path)
    return _rows_to_examples(spec, rows, source_field, target_field, str(path))


_Loader = Callable[..., list[Example]]
_LOADERS: Mapping[str, _Loader] = {
    "synthetic": _load_synthetic,
    "e2e": _load_e2e,
    "reddit_tldr": _load_summaries,
    "cnn_dm": _load_summaries,
}
_COMMON_ARGS = ("spec", "split", "data_dir", "hub_name", "seed")


def dataset_options(name: str) -> tuple[str, ...]:
    """The extra keyword settings ``load_split`` accepts for dataset ``name``."""
    get_task(name)
    parameters = inspect.signature(_LOADERS[name]).parameters
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
    examples = _LOADERS[name](
        spec, split, data_dir=data_dir, hub_name=hub_name, seed=seed, **kwargs
    )
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
