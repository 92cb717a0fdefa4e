"""Records describe the model that ran, not the config group's random-weight architecture."""

from __future__ import annotations

from tiny_models import tiny_llama

from skipdecode.models.loading import described_model


def test_a_pretrained_models_record_drops_the_random_weight_arch():
    model = tiny_llama(4)
    group = {
        "name": "smollm2-135m",
        "source": "asset",
        "pretrained": "smollm2",
        "arch": {"model_type": "llama", "hidden_size": 999},  # used only with source=random
        "tokenizer": {"vocab_size": 1024},
    }
    described = described_model(group, model)
    assert "arch" not in described and "tokenizer" not in described
    assert described["name"] == "smollm2-135m" and described["source"] == "asset"
    ran = described["ran"]
    assert ran["hidden_size"] == model.config.hidden_size != 999
    assert ran["num_hidden_layers"] == 4 and ran["model_type"] == "llama"
    assert ran["num_parameters"] == sum(p.numel() for p in model.parameters())
    scratch = described_model({**group, "source": "scratch"}, model)
    assert scratch["arch"] == group["arch"]  # a model built from its arch keeps it
