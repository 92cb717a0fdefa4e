"""The gpt-fast-style baseline loop decodes what transformers' greedy generate decodes."""

from __future__ import annotations

import pytest
import torch
from tiny_models import PAD, left_padded_batch, tiny_llama, tiny_opt

from skipdecode.core.fast_loop import FastLoop


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
    """On a GPU a step replays a CUDA graph whose output lives in the graph's own memory; the
    next compiled call starts a new generation of graphs and that output is dead: torch raises
    ("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run",
    where the first GPU run stopped). Here the step behaves so: given the tensor it returned
    last time, it raises."""
    model = tiny_llama(4)
    ids, mask = left_padded_batch([5, 9, 7])
    n = 8
    loop = FastLoop(model, batch_size=3, max_len=ids.shape[1] + n, compiled=False)
    expected, _, _ = loop.generate(ids, mask, n)
    one_token = loop._step
    last: list[torch.Tensor] = []

    def replay(token, position, column):
        if last and token.data_ptr() == last[0].data_ptr():
            raise RuntimeError("accessing tensor output of CUDAGraphs that has been overwritten")
        last[:] = [one_token(token, position, column)]
        return last[0]

    loop._step = replay
    tokens, _, _ = loop.generate(ids, mask, n)
    assert torch.equal(tokens, expected)
