"""The model's context: every family's limit read from its config, the checks and their message,
and decoding right up to the limit (the lossless mode's drafts included)."""

from __future__ import annotations

import pytest
import torch
from ci import skip_unless_ci
from tiny_models import left_padded_batch, tiny_family, tiny_opt

from skipdecode import SkipDecoder
from skipdecode.core.context import (
    ContextError,
    ContextLimit,
    check_context,
    context_limit,
    evaluation_demand,
    training_demand,
)
from skipdecode.core.families import FAMILIES
from skipdecode.schedules import FullSchedule, build_schedule

L = 4


#: The tiny configs' limits, written out: 128 positions (gpt2 names its field ``n_positions``),
#: and the families whose tiny config attends through a 24-token window in some layer.
WINDOW = ContextLimit(24, "sliding_window (max_position_embeddings 128)")
EXPECTED = {"gpt2": ContextLimit(128, "n_positions"), "gemma2": WINDOW, "gemma3_text": WINDOW}
EXPECTED["mistral"] = WINDOW  # every layer windowed (no layer_types)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_family_reads_its_context_from_its_config(model_type):
    model = tiny_family(model_type, L)
    limit = context_limit(model.config)
    assert SkipDecoder(model).adapter.max_positions == limit.positions
    assert limit == EXPECTED.get(model_type, ContextLimit(128, "max_position_embeddings"))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("smollm2", ContextLimit(8192, "max_position_embeddings")),
        ("gemma3", ContextLimit(512, "sliding_window (max_position_embeddings 32768)")),
    ],
)
def test_the_published_models_contexts(name, expected):
    from skipdecode.models import assets
    from skipdecode.models.loading import config_context_limit

    try:
        getattr(assets, f"{name}_dir")(create=False)
    except FileNotFoundError as e:  # make smollm2 / gemma3; CI converts both, so there it fails
        skip_unless_ci(f"{name} is not converted on this machine: {e}")
    assert config_context_limit({"source": "asset", "pretrained": name}) == expected


def test_a_refusal_names_every_setting_the_limit_and_the_fixes():
    limit = ContextLimit(512, "max_position_embeddings")
    demands = [training_demand(512, 64), evaluation_demand(512, 100)]
    with pytest.raises(ContextError) as e:
        check_context(demands, limit, "tiny")
    text = str(e.value)
    assert "model=tiny runs 512 positions (max_position_embeddings)" in text
    assert "dataset.max_source_tokens=512 + dataset.max_target_tokens=64 = 576 tokens" in text
    assert "dataset.max_source_tokens=512 + eval.generation.max_new_tokens=100 = 612" in text
    # the prompt bound that fits both stages, and the rule that cuts instead
    assert "dataset.max_source_tokens=412 or less" in text
    assert "dataset.on_long_context=truncate" in text
    assert check_context(demands, limit, "tiny", "truncate") == {
        demands[0].use: 448,
        demands[1].use: 412,
    }
    fits = [training_demand(400, 64)]
    assert check_context(fits, limit, "tiny") == {fits[0].use: 400}
    with pytest.raises(
        ContextError, match=r"dataset.on_long_context='cut'; allowed: error, truncate"
    ):
        check_context(fits, limit, "tiny", "cut")
    # new tokens alone fill the context: no prompt bound can help, under either rule
    with pytest.raises(ContextError, match="eval.generation.max_new_tokens=600 = 700") as e:
        check_context([evaluation_demand(100, 600)], limit, "tiny", "truncate")
    assert "dataset.max_source_tokens=" not in str(e.value).split("Fixes:")[1]


@pytest.mark.parametrize("speculative", [False, True], ids=["full", "lossless"])
def test_decoding_reaches_the_last_position_and_one_more_is_refused(speculative):
    """OPT's learned positions are the table lookup that would fail past the context. The
    lossless mode drafts ``k`` tokens past the output's end; their positions need no room."""
    model = tiny_opt(L, max_position_embeddings=32)
    dec = SkipDecoder(model)
    ids, mask = left_padded_batch([7, 10])
    new = 32 - ids.shape[1]
    plain = dec.generate(ids, FullSchedule(L), new, mask, stop_at_eos=False)
    if speculative:
        cfg = {"name": "speculative", "k": 3, "draft": {"name": "early_exit", "exit_layers": 1}}
        schedule = build_schedule(cfg, L, 16)
        out = dec.generate(ids, schedule, new, mask, stop_at_eos=False)
        assert torch.equal(out.sequences, plain.sequences)  # lossless at the very end too
    else:
        schedule = FullSchedule(L)
    assert plain.generated_ids.shape[1] == new
    with pytest.raises(ContextError) as e:
        dec.generate(ids, schedule, new + 1, mask)
    text = str(e.value)
    assert "runs 32 positions (max_position_embeddings)" in text
    assert f"prompt length={ids.shape[1]} + max_new_tokens={new + 1} = 33 tokens" in text
    assert f"max_new_tokens={new} or less" in text and "truncate" not in text
