"""Byte-level BPE tokenizer for the from-scratch ``tiny`` model, trained on a split and cached.

The cache directory name is a hash of (dataset name, split, seed, vocab size, data fingerprint,
format version), so a change to any of them trains a new tokenizer. Directories are written
atomically (temporary directory + rename) and reload with ``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .datasets import TaskSpec
from .errors import DataConfigError
from .examples import Example

__all__ = [
    "PAD_TOKEN",
    "BOS_TOKEN",
    "EOS_TOKEN",
    "UNK_TOKEN",
    "SPECIAL_TOKENS",
    "training_texts",
    "data_fingerprint",
    "tokenizer_cache_key",
    "train_bpe_tokenizer",
    "get_or_train_tokenizer",
]

logger = logging.getLogger(__name__)

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)  # ids 0..3
_FORMAT_VERSION = 1
_META_FILE = "skipdecode_tokenizer.json"


def training_texts(examples: Iterable[Example], task: TaskSpec) -> list[str]:
    """Texts the tokenizer is trained on: each distinct prompt and each target (with prefix)."""
    prompts: dict[str, None] = {}
    targets: list[str] = []
    for example in examples:
        prompts.setdefault(task.prompt(example.source), None)
        targets.append(task.target_prefix + example.target)
    return [*prompts, *targets]


def data_fingerprint(texts: Sequence[str]) -> str:
    """SHA-256 over the training texts (order-sensitive)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def tokenizer_cache_key(
    dataset_name: str, split: str, seed: int, vocab_size: int, fingerprint: str
) -> str:
    """Directory name for a cached tokenizer: readable prefix + hash of every input."""
    payload = json.dumps(
        [dataset_name, split, seed, vocab_size, fingerprint, _FORMAT_VERSION], sort_keys=True
    )
    digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]
    return f"bpe-{dataset_name}-{split}-v{vocab_size}-{digest}"


def _check_vocab_size(vocab_size: int) -> None:
    minimum = 256 + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise DataConfigError(
            f"vocab_size={vocab_size} is too small for a byte-level BPE tokenizer; "
            f"allowed: >= {minimum} (256 bytes + {len(SPECIAL_TOKENS)} special tokens)"
        )


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE with ``<pad>``, ``<s>``, ``</s>``, ``<unk>`` (ids 0-3).

    ``tokenizer(text)`` prepends ``<s>`` (like OPT/Llama); EOS is appended by the collator.
    The vocabulary may stay below ``vocab_size`` when the data has too few distinct merges:
    size model embeddings with ``len(tokenizer)``.
    """
    _check_vocab_size(vocab_size)
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    bos_id = core.token_to_id(BOS_TOKEN)
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A $B",
        special_tokens=[(BOS_TOKEN, bos_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


def get_or_train_tokenizer(
    examples: Sequence[Example],
    task: TaskSpec,
    cache_dir: str | os.PathLike[str],
    *,
    dataset_name: str | None = None,
    split: str = "train",
    seed: int = 0,
    vocab_size: int = 4096,
    min_frequency: int = 2,
) -> PreTrainedTokenizerFast:
    """Load the cached tokenizer for these inputs, training and caching it on a miss.

    ``examples`` should be the training split; the returned tokenizer is always loaded from
    its cache directory (``tokenizer.name_or_path``), so fresh and cached runs match exactly.
    """
    _check_vocab_size(vocab_size)
    if not examples:
        raise DataConfigError("get_or_train_tokenizer needs at least one training example")
    name = dataset_name or task.name
    texts = training_texts(examples, task)
    fingerprint = data_fingerprint(texts)
    root = Path(cache_dir).expanduser()
    target = root / tokenizer_cache_key(name, split, seed, vocab_size, fingerprint)
    if not (target / _META_FILE).is_file():
        root.mkdir(parents=True, exist_ok=True)
        logger.info(
            "training a %d-token BPE tokenizer on %s/%s -> %s", vocab_size, name, split, target
        )
        tokenizer = train_bpe_tokenizer(texts, vocab_size=vocab_size, min_frequency=min_frequency)
        meta = {
            "dataset": name,
            "split": split,
            "seed": seed,
            "vocab_size": vocab_size,
            "actual_vocab_size": len(tokenizer),
            "min_frequency": min_frequency,
            "data_fingerprint": fingerprint,
            "num_texts": len(texts),
            "format_version": _FORMAT_VERSION,
        }
        _save_atomically(tokenizer, meta, target)
    return AutoTokenizer.from_pretrained(str(target))


def _save_atomically(tokenizer: PreTrainedTokenizerFast, meta: dict, target: Path) -> None:
    """Write into a sibling temporary directory, then rename it into place."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tokenizer.save_pretrained(str(staging))
        (staging / _META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / _META_FILE).is_file():  # not a concurrent writer's finished copy
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
