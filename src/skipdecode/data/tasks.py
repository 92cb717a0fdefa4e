"""The task registry: how each dataset is read and turned into prompts (``TaskSpec``).

Known datasets: ``synthetic`` (embedded, generated from the seed), ``e2e`` (local E2E CSVs or the
hub), ``scitldr`` (local SciTLDR-A files), ``reddit_tldr`` and ``cnn_dm`` (local
JSON/JSONL/CSV/Parquet files or the hub; any summarization data of the same shape), ``chat``
(local files of prompts already in a model's chat template and their answers).
Canonical split names are ``train``, ``validation`` and ``test`` (``val``/``valid`` accepted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import DataConfigError

__all__ = ["TaskSpec", "TASKS", "SPLITS", "available_datasets", "get_task", "resolve_split"]

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
    kind: str  # "data-to-text", "summarization" or "chat"
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
    # BLEU casing of the dataset's official evaluation (E2E's script runs mteval-v13a without -c:
    # case-insensitive); ``eval.metrics.bleu.lowercase`` overrides it
    bleu_lowercase: bool = False
    bleu_convention: str = "sacrebleu defaults (case-sensitive, 13a)"
    # a source that carries its own start tokens (a rendered chat template) gets no BOS, and is
    # never cut (cutting it would lose the template's tail, the assistant header)
    add_bos: bool = True
    cut_source: bool = True

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
_SCITLDR_FILES: Mapping[str, tuple[str, ...]] = {
    "train": ("train",),
    "validation": ("dev", "validation", "valid", "val"),
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
        bleu_lowercase=True,
        bleu_convention="E2E challenge script (mteval-v13a, case-insensitive, 13a tokenization)",
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
        bleu_lowercase=True,
        bleu_convention="E2E challenge script (mteval-v13a, case-insensitive, 13a tokenization)",
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
    "scitldr": TaskSpec(
        name="scitldr",
        kind="summarization",
        # A plain-text instruction (no chat markup, so every model family reads the same prompt);
        # the fine-tune teaches the answer's form. Cutting the abstract keeps the "TL;DR:" tail.
        prompt_template="Summarize the paper abstract below in one sentence.\n\n"
        "Abstract: {source}\n\nTL;DR:",
        target_prefix=" ",
        max_source_tokens=512,
        max_target_tokens=64,
        source_field="source",  # a list of sentences (joined with spaces) or one string
        target_field="target",  # a list of references or one string
        local_files=_SCITLDR_FILES,
        description="SciTLDR-A (Cachola et al., 2020): a computer-science abstract to a "
        "one-sentence TLDR; one reference per train row, several per dev and test row.",
    ),
    "chat": TaskSpec(
        name="chat",
        kind="chat",
        prompt_template="{source}",
        target_prefix="",
        max_source_tokens=384,
        max_target_tokens=128,
        source_field="prompt",
        target_field="response",
        local_files={split: _SUMMARY_FILES[split] for split in ("train", "validation")},
        splits=("train", "validation"),
        add_bos=False,
        cut_source=False,
        description="Chat turns: a prompt already in the model's chat template and its answer "
        "(e.g. the model's own answers, written by studies/self_distill.py); training only.",
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
