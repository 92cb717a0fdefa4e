"""The model's context: every family's limit read from its config, the checks and their message,
and decoding right up to the limit (the lossless mode's drafts included)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import ARCHS, left_padded_batch, tiny_family, tiny_opt

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


def _written_limit(model_type: str) -> tuple[int, str]:
    """What the tiny config of ``model_type`` writes, read here from its own fields."""
    arch = ARCHS[model_type]
    field = "n_positions" if "n_positions" in arch else "max_position_embeddings"
    return int(arch[field]), field


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_family_reads_its_context_from_its_config(model_type):
    model = tiny_family(model_type, L)
    limit = context_limit(model.config)
    assert SkipDecoder(model).adapter.max_positions == limit.positions
    positions, field = _written_limit(model_type)
    window = getattr(model.config, "sliding_window", None)
    windowed = bool(window) and (
        "sliding_attention" in (getattr(model.config, "layer_types", None) or [])
        or (
            getattr(model.config, "layer_types", None) is None
            and getattr(model.config, "use_sliding_window", True)
        )
    )
    if windowed and window < positions:
        assert limit == ContextLimit(window, f"sliding_window ({field} {positions})")
    else:
        assert limit == ContextLimit(positions, field)


def test_the_published_models_contexts():
    from skipdecode.models.assets import gemma3_dir, smollm2_dir
    from skipdecode.models.loading import config_context_limit

    for name, directory, expected in (
        ("smollm2", smollm2_dir, ContextLimit(8192, "max_position_embeddings")),
        (
            "gemma3",
            gemma3_dir,
            ContextLimit(512, "sliding_window (max_position_embeddings 32768)"),
        ),
    ):
        try:
            directory(create=False)
        except FileNotFoundError:
            continue  # the asset is not converted on this machine (make smollm2 / gemma3)
        cfg = {"source": "asset", "pretrained": name}
        assert config_context_limit(cfg) == expected


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
