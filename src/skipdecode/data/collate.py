"""Tokenisation and batching for training (right padding) and generation (left padding).

Sequences are ``[BOS] prompt(source) | target_prefix + target [EOS]``; prompt and target are
tokenised separately (no special tokens) and BOS/EOS are added here, for any tokenizer.
Length limits:

* ``max_source_tokens`` bounds the whole prompt (BOS + template + source); the source text is
  cut so that the template's suffix (e.g. ``"\\nDescription:"``) always stays.
* ``max_target_tokens`` bounds target ids including EOS. Longer targets are counted in a
  ``TruncationReport`` and, per ``on_long_target``, cut to the limit (losing EOS), dropped,
  or rejected with an error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from ..core.loss import IGNORE_INDEX
from .datasets import TaskSpec
from .errors import DataConfigError, TargetTooLongError
from .examples import Example

__all__ = [
    "LongTargetPolicy",
    "EncodedExample",
    "TruncationReport",
    "encode_prompt",
    "encode_example",
    "encode_examples",
    "TrainCollator",
]

logger = logging.getLogger(__name__)

LongTargetPolicy = Literal["truncate", "drop", "error"]
LONG_TARGET_POLICIES: tuple[str, ...] = ("truncate", "drop", "error")


@dataclass(frozen=True)
class EncodedExample:
    """Token ids of one example; ``target_length`` is the length before any truncation."""

    prompt_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    example: Example
    target_length: int
    source_truncated: bool = False

    @property
    def target_truncated(self) -> bool:
        return self.target_length > len(self.target_ids)

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.target_ids)


@dataclass(frozen=True)
class TruncationReport:
    """What length limits did to a set of examples; callers log ``summary()``."""

    total: int
    long_targets: int
    dropped: int
    truncated_sources: int
    max_target_length: int
    max_target_tokens: int
    max_source_tokens: int
    policy: str

    @property
    def fraction(self) -> float:
        """Share of examples whose target exceeded ``max_target_tokens``."""
        return self.long_targets / self.total if self.total else 0.0

    def summary(self) -> str:
        return (
            f"{self.long_targets}/{self.total} targets ({self.fraction:.1%}) longer than "
            f"max_target_tokens={self.max_target_tokens} (longest {self.max_target_length} "
            f"tokens incl. EOS; policy {self.policy!r}, dropped {self.dropped}); "
            f"{self.truncated_sources} sources cut to max_source_tokens={self.max_source_tokens}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fraction": self.fraction}


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _bos(tokenizer: Any, add_bos: bool) -> list[int]:
    return [tokenizer.bos_token_id] if add_bos and tokenizer.bos_token_id is not None else []


def encode_prompt(
    tokenizer: Any, source: str, task: TaskSpec, max_source_tokens: int, *, add_bos: bool = True
) -> tuple[list[int], bool]:
    """Prompt ids (``[BOS] + prompt(source)``) within ``max_source_tokens``; and whether cut.

    Untruncated prompts are tokenised as one string, exactly as ``tokenizer(prompt)`` would.
    Long sources are cut at the token level, decoded and re-tokenised inside the template.
    """
    bos = _bos(tokenizer, add_bos and task.add_bos)
    ids = _ids(tokenizer, task.prompt(source))
    if len(bos) + len(ids) <= max_source_tokens:
        return bos + ids, False
    if not task.cut_source:
        raise DataConfigError(
            f"a {task.name!r} prompt of {len(bos) + len(ids)} tokens exceeds "
            f"max_source_tokens={max_source_tokens}; task {task.name!r} never cuts a prompt "
            f"(its tail would be lost); allowed: max_source_tokens >= the longest prompt, or "
            f"leave long prompts out of the data"
        )
    source_ids = _ids(tokenizer, source)
    keep = len(source_ids) - (len(bos) + len(ids) - max_source_tokens)
    while keep > 0:
        kept_text = tokenizer.decode(
            source_ids[:keep], skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        ids = _ids(tokenizer, task.prompt(kept_text))
        excess = len(bos) + len(ids) - max_source_tokens
        if excess <= 0:
            return bos + ids, True
        keep -= excess
    empty = len(bos) + len(_ids(tokenizer, task.prompt("")))
    raise DataConfigError(
        f"max_source_tokens={max_source_tokens} cannot hold the prompt template of task "
        f"{task.name!r} ({empty} tokens with an empty source); allowed: > {empty}"
    )


def encode_example(
    tokenizer: Any,
    example: Example,
    task: TaskSpec,
    max_source_tokens: int,
    max_target_tokens: int,
    *,
    add_bos: bool = True,
) -> EncodedExample:
    """Prompt ids and target ids (``target_prefix + target`` + EOS unless the example is not
    ``complete``), cut to the limits."""
    if tokenizer.eos_token_id is None:
        raise DataConfigError("the tokenizer has no eos_token; set one before encoding targets")
    if max_target_tokens < 1:
        raise DataConfigError(f"max_target_tokens={max_target_tokens} must be >= 1")
    prompt_ids, source_truncated = encode_prompt(
        tokenizer, example.source, task, max_source_tokens, add_bos=add_bos
    )
    eos = [tokenizer.eos_token_id] if example.complete else []  # a cut answer has not ended
    target_ids = _ids(tokenizer, task.target_prefix + example.target) + eos
    return EncodedExample(
        prompt_ids=tuple(prompt_ids),
        target_ids=tuple(target_ids[:max_target_tokens]),
        example=example,
        target_length=len(target_ids),
        source_truncated=source_truncated,
    )


def encode_examples(
    tokenizer: Any,
    examples: Sequence[Example],
    task: TaskSpec,
    max_source_tokens: int | None = None,
    max_target_tokens: int | None = None,
    *,
    on_long_target: LongTargetPolicy = "truncate",
    add_bos: bool = True,
) -> tuple[list[EncodedExample], TruncationReport]:
    """Encode a split and apply ``on_long_target``; limits default to the TaskSpec's.

    The report always counts long targets, whatever the policy. ``"error"`` raises
    ``TargetTooLongError`` naming ``max_target_tokens``, its value and the longest target.
    """
    if on_long_target not in LONG_TARGET_POLICIES:
        raise DataConfigError(
            f"on_long_target={on_long_target!r} is unknown; allowed: "
            f"{', '.join(LONG_TARGET_POLICIES)}"
        )
    if max_source_tokens is None:
        max_source_tokens = task.max_source_tokens
    if max_target_tokens is None:
        max_target_tokens = task.max_target_tokens
    encoded = [
        encode_example(tokenizer, ex, task, max_source_tokens, max_target_tokens, add_bos=add_bos)
        for ex in examples
    ]
    long_ones = [item for item in encoded if item.target_truncated]
    longest = max(encoded, key=lambda item: item.target_length, default=None)
    kept = (
        [item for item in encoded if not item.target_truncated]
        if (on_long_target == "drop")
        else encoded
    )
    report = TruncationReport(
        total=len(encoded),
        long_targets=len(long_ones),
        dropped=len(encoded) - len(kept),
        truncated_sources=sum(item.source_truncated for item in encoded),
        max_target_length=longest.target_length if longest else 0,
        max_target_tokens=max_target_tokens,
        max_source_tokens=max_source_tokens,
        policy=on_long_target,
    )
    if long_ones and on_long_target == "error":
        assert longest is not None
        raise TargetTooLongError(
            f"{len(long_ones)}/{len(encoded)} targets exceed max_target_tokens="
            f"{max_target_tokens}; the longest has {longest.target_length} tokens incl. EOS "
            f"({longest.example.target[:80]!r}...). Raise max_target_tokens to at least "
            f"{longest.target_length}, or set on_long_target to 'truncate' or 'drop'"
        )
    if report.long_targets or report.truncated_sources:
        logger.warning("task %s: %s", task.name, report.summary())
    return kept, report


# --------------------------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------------------------


def _pad_id(tokenizer: Any, pad_id: int | None) -> int:
    if pad_id is not None:
        return pad_id
    for candidate in (
        getattr(tokenizer, "pad_token_id", None),
        getattr(tokenizer, "eos_token_id", None),
    ):
        if candidate is not None:
            return candidate
    raise DataConfigError("no pad id: pass pad_id, or use a tokenizer with a pad or eos token")


class TrainCollator:
    """Right-padded teacher-forcing batches: ``[prompt, target, pad]``.

    Returns ``input_ids``, ``attention_mask``, ``labels`` (B, T) and ``prompt_lengths`` (B,).
    ``labels`` are aligned with input positions (HF convention: the loss shifts them) and are
    -100 on prompt and padding.
    """

    def __init__(
        self,
        tokenizer: Any = None,
        pad_id: int | None = None,
        pad_to_multiple_of: int | None = None,
    ) -> None:
        self.pad_id = _pad_id(tokenizer, pad_id)
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, batch: Sequence[EncodedExample]) -> dict[str, torch.Tensor]:
        if not batch:
            raise ValueError("TrainCollator got an empty batch")
        width = max(len(item) for item in batch)
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
        for row, item in enumerate(batch):
            prompt_len, total = len(item.prompt_ids), len(item)
            input_ids[row, :total] = torch.tensor(item.prompt_ids + item.target_ids)
            attention_mask[row, :total] = 1
            labels[row, prompt_len:total] = torch.tensor(item.target_ids)
        prompt_lengths = torch.tensor([len(item.prompt_ids) for item in batch], dtype=torch.long)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "prompt_lengths": prompt_lengths,
        }


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists as one left-padded batch: ``(input_ids, attention_mask)``, both ``(B, T)``."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        if ids:
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
    return input_ids, attention_mask
