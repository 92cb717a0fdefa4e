"""The lossless mode with a cheaper draft head (a vocabulary subset): drafts score only the
subset's tokens, the verify pass keeps the whole head, so the output stays the full model's."""

from __future__ import annotations

import pytest
import torch
from test_speculative import (
    L,
    N,
    _eos_mid_generation,
    _expected,
    _tiny_vocab_model,
    speculative,
)
from tiny_models import FAMILIES, PAD, left_padded_batch, tiny_family

from skipdecode.core.engine import SkipDecoder
from skipdecode.core.subset_head import SubsetHead, frequency_ranked_vocab
from skipdecode.schedules import FullSchedule, ScheduleError, SpeculativeSchedule, build_schedule


@pytest.mark.parametrize("family", ["llama", "opt", "gemma2", "granite", "gpt2"])
def test_subset_logits_are_the_full_heads_columns(family):
    """Soft-capping (gemma2), logit scaling (granite), a tied head (gpt2) included."""
    decoder = SkipDecoder(tiny_family(family, num_layers=2))
    width = getattr(decoder.model.config, "hidden_size", None) or decoder.model.config.n_embd
    hidden = torch.randn(3, 2, width)
    vocab = torch.tensor([7, 0, 31, 5])
    with torch.no_grad():
        full = decoder.adapter.head(hidden)
        sub = SubsetHead(decoder.adapter, vocab)(hidden)
    torch.testing.assert_close(sub, full[..., vocab], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_output_with_a_draft_vocabulary_is_the_full_models(family):
    decoder = SkipDecoder(FAMILIES[family](num_layers=L))
    ids, mask = left_padded_batch([5, 11, 3, 8, 6])
    eos = _eos_mid_generation(decoder, ids, mask)
    full = decoder.generate(ids, FullSchedule(L), N, mask, stop_at_eos=False, decode_texts=False)
    # the full model's own frequent tokens, so that drafts can be accepted
    vocab = frequency_ranked_vocab(full.generated_ids.tolist(), 12, always=[eos])
    assert vocab[0] == eos and len(vocab) <= 12
    seen = []
    sched = speculative("target_2x", 3).with_draft_vocab(vocab)
    for stop in (False, True):
        kwargs = dict(stop_at_eos=stop, eos_token_id=eos, pad_token_id=PAD, decode_texts=False)
        ref = decoder.generate(ids, FullSchedule(L), N, mask, **kwargs)
        out = decoder.generate(ids, sched, N, mask, on_round=seen.append, **kwargs)
        assert torch.equal(out.generated_ids, ref.generated_ids), stop
    counts = out.stats.speculation
    assert counts.drafted > 0 and counts.accepted > 0
    assert out.schedule["draft_vocab"] == len(vocab)


def test_drafts_propose_only_subset_tokens(monkeypatch):
    import skipdecode.core.draft_verify as spec_module

    proposed = []
    original = spec_module.accept_greedy

    def spy(block, n_proposed, full):
        for row, n in zip(block.tolist(), n_proposed.tolist(), strict=True):
            proposed.extend(row[:n])
        return original(block, n_proposed, full)

    monkeypatch.setattr(spec_module, "accept_greedy", spy)
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    ids, mask = left_padded_batch([4, 7])
    vocab = [3, 9, 17, 21]
    decoder.generate(ids, speculative().with_draft_vocab(vocab), N, mask, stop_at_eos=False)
    assert proposed and set(proposed) <= set(vocab)


def test_sampling_with_a_draft_vocabulary_follows_the_full_models_distribution():
    from scipy.stats import chisquare

    model = _tiny_vocab_model()  # 6 tokens; the draft may propose only 3 of them
    rows = 6000
    ids = torch.tensor([[1, 2, 3]]).repeat(rows, 1)
    draft = build_schedule({"name": "early_exit", "exit_layers": 1}, 4)
    sched = SpeculativeSchedule(draft, k=2, draft_vocab=[1, 2, 4])
    out = SkipDecoder(model).generate(
        ids, sched, 3, do_sample=True, seed=7, stop_at_eos=False, decode_texts=False
    )
    gen = out.generated_ids
    assert 0 < out.stats.speculation.accepted < out.stats.speculation.drafted
    with torch.no_grad():
        for pos in (1, 2):
            contexts = torch.cat([ids, gen[:, :pos]], 1)
            full_p = model(contexts).logits[:, -1].float().softmax(-1)
            observed = torch.bincount(gen[:, pos], minlength=6).double()
            assert chisquare(observed, _expected(full_p, rows)).pvalue > 1e-3, pos
            assert set(gen[:, pos].tolist()) - {1, 2, 4}  # tokens outside the subset appear


def test_frequency_ranking_and_bad_settings():
    assert frequency_ranked_vocab([[5, 5, 2], [2, 5, 9]], 3, always=[1]) == [1, 5, 2]
    assert frequency_ranked_vocab([[4, 4]], 5) == [4]  # fewer distinct tokens than asked
    with pytest.raises(
        ValueError, match=r"schedule\.draft_vocab=0 is not allowed; allowed: an integer >= 1"
    ):
        frequency_ranked_vocab([[1]], 0)
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        SubsetHead(decoder.adapter, torch.tensor([1, 10**6]))
    with pytest.raises(ValueError, match="twice"):
        SubsetHead(decoder.adapter, torch.tensor([1, 1]))
    sized = speculative(draft_vocab=64)
    assert sized.describe()["draft_vocab"] == 64
    with pytest.raises(ScheduleError, match="draft_vocab=64 names a size"):
        sized.speculation()
    with pytest.raises(ScheduleError, match="draft_vocab"):
        speculative(draft_vocab=0)
