"""The gpt-fast-style baseline loop decodes what transformers' greedy generate decodes."""

from __future__ import annotations

import pytest
import torch
from tiny_models import PAD, left_padded_batch, tiny_llama, tiny_opt

from skipdecode.experiments.benchmarks.fast_loop import FastLoop


@pytest.mark.parametrize("make", [tiny_llama, tiny_opt], ids=["llama", "opt"])
def test_the_loop_gives_generates_tokens_call_after_call(make):
    model = make(4)
    ids, mask = left_padded_batch([5, 9, 7])
    n = 10
    expected = model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=n,
        min_new_tokens=n, eos_token_id=None, pad_token_id=PAD,
    )[:, ids.shape[1]:]  # fmt: skip
    loop = FastLoop(model, batch_size=3, max_len=ids.shape[1] + n, compiled=False)
    for _ in range(2):  # the one static cache, reset between calls
        tokens, prefill, decode = loop.generate(ids, mask, n)
        assert torch.equal(tokens, expected) and prefill > 0 and decode > 0
    with pytest.raises(ValueError, match=f"built for batch 3 and {ids.shape[1] + n} positions"):
        loop.generate(ids, mask, n + 1)


def test_the_loop_copies_each_token_out_before_the_next_step():
    """On a GPU a step replays a CUDA graph that writes its token into one static buffer; the
    next replay takes a graph's own output as an input in place (no copy) and may write its
    output first, so a loop that feeds that buffer back reads its own overwritten token (the
    first GPU run stopped there: "accessing tensor output of CUDAGraphs that has been
    overwritten"). Here the step behaves so: it writes its output buffer before reading."""
    model = tiny_llama(4)
    ids, mask = left_padded_batch([5, 9, 7])
    n = 8
    loop = FastLoop(model, batch_size=3, max_len=ids.shape[1] + n, compiled=False)
    expected, _, _ = loop.generate(ids, mask, n)
    static = torch.zeros(3, 1, dtype=torch.long)
    one_token = loop._step

    def replay(token, position, column):
        static.fill_(PAD)  # the output written first: an input aliasing it is gone
        static.copy_(one_token(token, position, column))
        return static

    loop._step = replay
    tokens, _, _ = loop.generate(ids, mask, n)
    assert torch.equal(tokens, expected)
