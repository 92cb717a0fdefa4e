"""One loader per dataset: local files or the hub -> ``Example`` rows of one split.

Each loader takes ``(spec, split, data_dir, hub_name, seed, **options)``; its extra keyword
parameters are the dataset's options (``datasets.dataset_options``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from . import synthetic
from .errors import DataConfigError, DataNotFoundError
from .examples import Example, pairs_to_examples
from .files import SUPPORTED_SUFFIXES, find_split_file, read_rows, require_columns
from .tasks import TaskSpec, get_task, resolve_split

__all__ = ["LOADERS", "rows_by_source"]

logger = logging.getLogger(__name__)


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


#: How each dataset's sources and references are cleaned (a dataset not listed: stripped).
_SOURCE_CLEANERS: Mapping[str, Callable[[str], str]] = {
    "synthetic": str.strip,
    "e2e": str.strip,
    "scitldr": _one_line,
    "reddit_tldr": _strip_tldr,
    "cnn_dm": str.strip,
}
_TARGET_CLEANERS: Mapping[str, Callable[[str], str]] = {
    "synthetic": str.strip,
    "e2e": str.strip,
    "scitldr": _one_line,
    "reddit_tldr": _one_line,
    "cnn_dm": _one_line,
}


def _source_text(value: Any) -> str:
    """A source field as one text: a list (SciTLDR's sentences) joined with spaces."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return " ".join(str(part) for part in value if part is not None)
    return str(value)


def _target_texts(value: Any) -> list[str]:
    """A reference field as its references: a list of them (SciTLDR's dev and test rows), or
    one string (a file may repeat a source on several rows, one reference each)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(part) for part in value if part is not None]
    return [str(value)]


def _rows_to_examples(
    spec: TaskSpec,
    rows: Iterable[Mapping[str, Any]],
    source_field: str,
    target_field: str,
    origin: str,
) -> list[Example]:
    """Group rows by source into Examples (one per pair), skipping rows with blank fields.

    A source may be a list of sentences and a reference field a list of references (see
    :func:`_source_text`, :func:`_target_texts`)."""
    clean_source, clean_target = (
        _SOURCE_CLEANERS.get(spec.name, str.strip),
        _TARGET_CLEANERS.get(spec.name, str.strip),
    )
    references: dict[str, list[str]] = {}
    skipped = 0
    for row in rows:
        source = clean_source(_source_text(row.get(source_field)))
        targets = [t for t in map(clean_target, _target_texts(row.get(target_field))) if t]
        if not source or not targets:
            skipped += 1
            continue
        references.setdefault(source, []).extend(targets)
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
    files = {s: names[0] for s, names in spec.local_files.items()}
    for key, value in (split_files or {}).items():
        files[resolve_split(spec, key)] = value  # validates the key
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


def _split_candidates(
    spec: TaskSpec, split_files: Mapping[str, str] | None
) -> dict[str, list[str]]:
    """Per split, the file names to look for: the task's own, or the one ``split_files``
    names (its keys validated as split names)."""
    candidates = {split: list(names) for split, names in spec.local_files.items()}
    for key, value in (split_files or {}).items():
        candidates[resolve_split(spec, key)] = [value]
    return candidates


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
    candidates = _split_candidates(spec, split_files)
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
    require_columns(
        rows,
        (source_field, target_field),
        path,
        f"set dataset.options.source_field (now {source_field!r}) and "
        f"dataset.options.target_field (now {target_field!r}) to the file's field names",
    )
    return _rows_to_examples(spec, rows, source_field, target_field, str(path))


def rows_by_source(
    name: str, split: str, data_dir: str | Path, split_files: Mapping[str, str] | None = None
) -> dict[str, Mapping[str, Any]]:
    """A local summarization split's file rows, each under the source text its loader makes of
    it (the key an evaluated input's ``input`` holds); a source on several rows keeps its first.
    Extractive reference points read the source's sentences and labels from them."""
    spec = get_task(name)
    directory = _check_data_dir(spec, data_dir, f"the {split} file with field {spec.source_field}")
    path = find_split_file(
        directory,
        _split_candidates(spec, split_files)[resolve_split(spec, split)],
        f"Set split_files={{{split!r}: 'FILE'}} to name it.",
    )
    rows = read_rows(path)
    require_columns(rows, (spec.source_field,), path)
    clean = _SOURCE_CLEANERS.get(spec.name, str.strip)
    out: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        out.setdefault(clean(_source_text(row.get(spec.source_field))), row)
    return out


def _load_chat(
    spec: TaskSpec,
    split: str,
    *,
    data_dir: str | Path | None,
    hub_name: str | None,
    seed: int,
    split_files: Mapping[str, str] | None = None,
) -> list[Example]:
    """One example per row: ``prompt`` kept as written (a rendered chat template ends with the
    assistant header's newline), ``response`` stripped, ``finished`` (optional, default true)
    false for an answer cut at a length limit, which then trains without EOS."""
    if data_dir is None:
        raise DataConfigError(
            "dataset 'chat' has no hub source; set data_dir to a folder with train and "
            "validation .jsonl files (fields prompt, response, finished), e.g. from "
            "`python -m studies.self_distill`"
        )
    candidates = _split_candidates(spec, split_files)
    directory = _check_data_dir(spec, data_dir, "train and validation files (prompt, response)")
    path = find_split_file(
        directory, candidates[split], f"Set split_files={{{split!r}: 'FILE'}} to name it."
    )
    rows = read_rows(path)
    require_columns(rows, (spec.source_field, spec.target_field), path)
    examples, skipped = [], 0
    for row in rows:
        prompt, answer = (
            row.get(spec.source_field) or "",
            (row.get(spec.target_field) or "").strip(),
        )
        if not prompt.strip() or not answer:
            skipped += 1
            continue
        finished = row.get("finished", True)
        if isinstance(finished, str):  # a CSV cell
            finished = finished.strip().lower() not in ("false", "0", "no", "")
        complete = bool(finished)
        examples.append(Example(prompt, answer, (answer,), complete))
    if skipped:
        logger.warning("%s: skipped %d row(s) with an empty prompt or response", path, skipped)
    return examples


_Loader = Callable[..., list[Example]]
LOADERS: Mapping[str, _Loader] = {
    "synthetic": _load_synthetic,
    "e2e": _load_e2e,
    "scitldr": _load_summaries,
    "reddit_tldr": _load_summaries,
    "cnn_dm": _load_summaries,
    "chat": _load_chat,
}
