"""A cheaper head for drafted tokens: logits over a subset of the vocabulary.

Where the LM head is a large share of a step (Gemma 3 270M: half of a batch-1 step; SmolLM2:
28% of a 2x draft pass), a draft pass pays the whole head only to take an argmax. Drafting over
the ``N`` tokens most frequent in the training targets (FR-Spec's idea for EAGLE drafts) costs
``N / V`` of that head. The verify pass keeps the full head, so the output stays the full
model's: a token outside the subset is never proposed, and the full model emits it after the
last accepted proposal. Sampling stays exact too: the draft distribution is the softmax over
the subset (zero elsewhere), and speculative sampling is exact for any draft distribution.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from ..config import count
from .adapters import DecoderAdapter

__all__ = ["SubsetHead", "frequency_ranked_vocab"]


class SubsetHead:
    """The LM head restricted to ``vocab`` (token ids): logits ``(B, T, len(vocab))``, with the
    family's scaling and soft-capping; :meth:`tokens` maps subset indices back to token ids."""

    def __init__(self, adapter: DecoderAdapter, vocab: torch.Tensor):
        vocab = torch.as_tensor(vocab, dtype=torch.long)
        head = adapter.lm_head
        V = head.weight.shape[0]
        if vocab.ndim != 1 or len(vocab) == 0:
            raise ValueError(f"draft_vocab must be a non-empty list of token ids, got {vocab}")
        if int(vocab.min()) < 0 or int(vocab.max()) >= V:
            raise ValueError(f"draft_vocab holds ids outside the vocabulary [0, {V})")
        if len(torch.unique(vocab)) != len(vocab):
            raise ValueError("draft_vocab holds a token id twice")
        self.adapter = adapter
        self.vocab = vocab.to(head.weight.device)
        self.vocab_size = V
        with torch.no_grad():  # copied once per decoder call: a contiguous (N, D) matrix
            self.weight = head.weight.index_select(0, self.vocab).contiguous()
            bias = getattr(head, "bias", None)
            self.bias = None if bias is None else bias.index_select(0, self.vocab).contiguous()

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        inputs = self.adapter.head_input(hidden)
        return self.adapter.head_logits(inputs, self.weight, self.bias)

    def tokens(self, index: torch.Tensor) -> torch.Tensor:
        """Token ids of subset positions ``index``."""
        return self.vocab[index]

    def scatter(self, probs: torch.Tensor) -> torch.Tensor:
        """A distribution over the subset ``(..., N)`` as one over the vocabulary ``(..., V)``."""
        full = probs.new_zeros(*probs.shape[:-1], self.vocab_size)
        return full.index_copy_(-1, self.vocab, probs)


def frequency_ranked_vocab(
    sequences: Iterable[Sequence[int]], size: int, always: Sequence[int] = ()
) -> list[int]:
    """The ``size`` most frequent token ids of ``sequences`` (ties by id), with ``always``
    (e.g. the EOS ids) included first: the draft vocabulary."""
    count(size, "schedule.draft_vocab", 1)
    counts = Counter(int(t) for seq in sequences for t in seq)
    ranked = [int(t) for t in dict.fromkeys(always)]
    for token, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(ranked) >= size:
            break
        if token not in ranked:
            ranked.append(token)
    return ranked[:size]
