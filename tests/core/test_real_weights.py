"""Real pretrained weights: SmolLM2-135M-Instruct (Llama family, 30 layers), converted offline."""

from __future__ import annotations

import pytest
import torch
from ci import skip_unless_ci

from skipdecode.core.engine import SkipDecoder
from skipdecode.schedules import FullSchedule, linear_for_speedup

PROMPTS = [
    "What is the capital of France?",
    "Write one sentence about a restaurant near the river that serves French food.",
    "List three primary colors.",
]


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skipdecode.models.assets import smollm2_dir

    try:
        path = smollm2_dir(create=False)
    except FileNotFoundError as err:
        skip_unless_ci(f"SmolLM2 not converted (make smollm2): {err}")
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    tok = AutoTokenizer.from_pretrained(path)
    chats = [
        tok.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in PROMPTS
    ]
    return model, tok, chats


def test_full_schedule_equals_transformers_generate_on_real_weights(smollm2):
    model, tok, chats = smollm2
    tok.padding_side = "left"
    enc = tok(chats, return_tensors="pt", padding=True)
    assert (enc["attention_mask"] == 0).any(), "prompts should differ in length"
    hf = model.generate(
        **enc,
        do_sample=False,
        max_new_tokens=24,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    out = SkipDecoder(model, tok).generate(
        chats,
        FullSchedule(30),
        max_new_tokens=24,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    n = hf.shape[1]
    assert torch.equal(out.sequences[:, :n], hf)
    assert (out.sequences[:, n:] == tok.pad_token_id).all()
    assert "Paris" in out.texts[0]


def test_linear_schedule_runs_on_real_weights_and_reports_speedup(smollm2):
    model, tok, chats = smollm2
    schedule = linear_for_speedup(30, 2, expected_length=24)
    out = SkipDecoder(model, tok).generate(chats, schedule, max_new_tokens=24, eos_token_id=[])
    st = out.stats
    assert st.decode_steps == 23 and st.budgets == [schedule.budget(g) for g in range(23)]
    assert 1.7 < st.theoretical_speedup < 2.4
    assert st.decode_seconds > 0 and len(out.texts) == 3


@pytest.mark.slow  # 16 s of the default suite; the lossless mode on tiny models of every family
# stays there (tests/core/test_speculative.py)
def test_speculative_decoding_is_the_full_models_output_on_real_weights(smollm2):
    """Lossless SkipDecode on SmolLM2 chat prompts (padded batch, EOS stops): token for token
    the full model's greedy output, for a SkipDecode draft and an early-exit draft."""
    from skipdecode.schedules import build_schedule

    model, tok, chats = smollm2
    decoder = SkipDecoder(model, tok)
    kwargs = dict(max_new_tokens=16, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    full = decoder.generate(chats, FullSchedule(30), **kwargs)
    # a decaying SkipDecode draft with k = 4, an early-exit draft with k = 2 (both drafts and
    # both draft lengths are also covered on tiny models of every family)
    for draft, k in (
        ({"name": "target", "target_speedup": 2, "expected_length": 16}, 4),
        ({"name": "early_exit", "exit_layers": 20}, 2),
    ):
        sched = build_schedule({"name": "speculative", "draft": draft, "k": k}, 30, 16)
        out = decoder.generate(chats, sched, **kwargs)
        assert torch.equal(out.generated_ids, full.generated_ids), (draft, k)
        assert out.texts == full.texts
        assert out.stats.speculation.accepted > 0


@pytest.mark.slow  # 22 s of the default suite; the compiled path at batch 1 on a tiny Llama
# stays there (tests/core/test_compiled.py)
def test_compiled_batch_of_one_equals_transformers_generate_on_real_weights(smollm2):
    """The compiled path at batch 1 (its matrix-vector products are reductions split across
    threads, core.compiled) decodes the real model's greedy tokens, logits within 1e-4."""
    model, tok, chats = smollm2
    enc = tok(chats[:1], return_tensors="pt")
    hf = model.generate(
        **enc, do_sample=False, max_new_tokens=24, pad_token_id=tok.pad_token_id, eos_token_id=None
    )
    kwargs = dict(max_new_tokens=24, eos_token_id=[], return_logits=True)
    eager = SkipDecoder(model, tok).generate(chats[:1], FullSchedule(30), **kwargs)
    out = SkipDecoder(model, tok, compile=True).generate(chats[:1], FullSchedule(30), **kwargs)
    assert out.stats.compiled
    assert torch.equal(out.sequences, hf) and torch.equal(out.sequences, eager.sequences)
    scale = float(eager.step_logits.abs().max())
    assert float((out.step_logits - eager.step_logits).abs().max()) <= 1e-4 * scale
    assert "Paris" in out.texts[0]
