"""What the lossless-mode benchmark decodes: chat prompts, or the test inputs a model was
fine-tuned for.

``chat``: the first N of :data:`CHAT_PROMPTS` in the model's chat template (plain text for a
model without one), cycled to fill a batch larger than the workload. ``dataset``: the first N
test inputs of the dataset named in a fine-tuned export's ``skipdecode.json``, prompted exactly
as training and evaluation prompt them (``encode_prompt``, cut to the trained source length) and
batched by prompt length as the evaluation batches them; its draft vocabulary is ranked from the
training targets, as the evaluation ranks it (``schedule.draft_vocab``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CHAT_PROMPTS", "WORKLOADS", "Workload", "load_workload", "ranked_draft_vocab",
    "trained_dataset",
]  # fmt: skip

CHAT_PROMPTS = (
    "What is the capital of France?",
    "Write one sentence about a restaurant near the river that serves French food.",
    "List three primary colors.",
    "Explain what a cache is in one sentence.",
    "Give me a short tip for staying focused while studying.",
    "What is 12 times 7?",
    "Describe the ocean in two sentences.",
    "Name a famous painting and its painter.",
    "Why do leaves change color in autumn?",
    "Translate 'good morning' into Spanish.",
    "Suggest a name for a coffee shop.",
    "What does a compiler do?",
    "Write a haiku about rain.",
    "How many legs does a spider have?",
    "Summarize the plot of Cinderella in one sentence.",
    "What is photosynthesis?",
)
WORKLOADS = ("chat", "dataset")

Batches = list[tuple[torch.Tensor, torch.Tensor]]


class Workload:
    """A named list of prompts (token ids), batched left-padded, and the draft vocabulary that
    suits it."""

    def __init__(self, name: str, prompts: list[list[int]], pad_id: int, settings: dict | None):
        self.name, self.prompts, self.pad_id, self.settings = name, prompts, pad_id, settings
        self._vocabs: dict[int, list[int]] = {}  # ranked once per size, not per batch size

    def batches(self, batch_size: int) -> Batches:
        """Batches covering every prompt; a batch larger than the workload repeats prompts. A
        dataset's prompts are batched by length (the evaluation's order), chat ones in order."""
        from ...data.collate import left_pad
        from ...evaluation.inputs import batch_order

        order = list(range(len(self.prompts)))
        if self.settings is not None:
            (order,) = batch_order(self.prompts, len(self.prompts), by_length=True)
        count = max(1, math.ceil(len(order) / batch_size))
        out = []
        for b in range(count):
            at = [order[(b * batch_size + i) % len(order)] for i in range(batch_size)]
            rows = [self.prompts[i] for i in at]
            out.append(left_pad(rows, self.pad_id))
        return out

    def draft_vocab(self, tokenizer: Any, size: int) -> list[int]:
        """``size`` draft tokens (:func:`ranked_draft_vocab` of the workload's dataset)."""
        if size not in self._vocabs:
            self._vocabs[size] = ranked_draft_vocab(self.settings, tokenizer, size)
        return list(self._vocabs[size])


def ranked_draft_vocab(settings: dict | None, tokenizer: Any, size: int) -> list[int]:
    """``size`` draft tokens: the most frequent in the training targets of the dataset
    ``settings`` (a fine-tuned export's); without one, the tokenizer's first ids (a BPE
    vocabulary's merge order, a frequency proxy) after EOS."""
    if settings is not None:
        from ...evaluation.inputs import draft_vocabulary

        return draft_vocabulary(settings, tokenizer, size)
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return list(dict.fromkeys([*eos, *range(size)]))[:size]


def trained_dataset(model_dir: Path) -> dict | None:
    """The dataset settings a fine-tuned export in ``model_dir`` was trained on, else None."""
    from ...evaluation.inputs import dataset_settings

    meta_file = Path(model_dir) / "skipdecode.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    if not (meta.get("dataset") or {}).get("name"):
        return None
    return dataset_settings({}, meta)


def load_workload(name: str, tokenizer: Any, prompts: int, model_dir: Path) -> Workload:
    """The first ``prompts`` prompts of workload ``name`` (:data:`WORKLOADS`) for the model in
    ``model_dir``."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    pad = int(tokenizer.pad_token_id)
    if name == "chat":
        if not 1 <= prompts <= len(CHAT_PROMPTS):
            raise ValueError(f"--prompts={prompts}; allowed for chat: 1 to {len(CHAT_PROMPTS)}")
        chats = [_as_chat(tokenizer, CHAT_PROMPTS[i]) for i in range(prompts)]
        ids = [tokenizer(c)["input_ids"] for c in chats]
        return Workload(name, ids, pad, None)
    if name != "dataset":
        raise ValueError(f"--workload={name!r}; allowed: {', '.join(WORKLOADS)}")
    return _dataset_workload(tokenizer, prompts, model_dir, pad)


def _dataset_workload(tokenizer: Any, prompts: int, model_dir: Path, pad: int) -> Workload:
    from ...data.tasks import get_task
    from ...evaluation.inputs import encode_prompts, load_examples

    settings = trained_dataset(model_dir)
    if settings is None:
        raise ValueError(
            f"--workload=dataset needs a fine-tuned export whose skipdecode.json names its "
            f"dataset; {model_dir} has none (use --workload chat)"
        )
    if prompts < 1:
        raise ValueError(f"--prompts={prompts}; allowed: >= 1")
    task = get_task(settings["name"])
    examples = load_examples(settings, "test", prompts)[:prompts]
    max_source = int(settings.get("max_source_tokens") or task.max_source_tokens)
    ids, _ = encode_prompts(tokenizer, task, [ex.source for ex in examples], max_source)
    return Workload(f"{settings['name']}-test", ids, pad, settings)


def _as_chat(tokenizer: Any, prompt: str) -> str:
    """``prompt`` in the model's chat template; a base model without one (Gemma 3 270M) gets
    the prompt as plain text."""
    if not getattr(tokenizer, "chat_template", None):
        return prompt
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
