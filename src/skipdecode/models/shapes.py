"""Real model shapes with random weights, built from a config (no hub): what the benchmark times.

``build_random_model("opt-1.3b")`` gives an OPT-1.3B-shaped model with random weights; the decode
and training costs per layer are those of the real model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["Shape", "SHAPES", "build_random_model", "device_name", "random_prompts"]


@dataclass(frozen=True)
class Shape:
    family: str  # "opt" | "llama" | "gemma3"
    config: dict[str, Any]


SHAPES: dict[str, Shape] = {
    # the demo model (conf/model/tiny.yaml) with its synthetic-task tokenizer's 842 tokens
    "tiny": Shape(
        "opt",
        dict(
            hidden_size=192,
            ffn_dim=768,
            num_hidden_layers=8,
            num_attention_heads=4,
            word_embed_proj_dim=192,
            vocab_size=842,
            max_position_embeddings=512,
        ),
    ),
    "opt-125m": Shape(
        "opt",
        dict(
            hidden_size=768,
            ffn_dim=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            word_embed_proj_dim=768,
        ),
    ),
    "opt-350m": Shape(
        "opt",
        dict(
            hidden_size=1024,
            ffn_dim=4096,
            num_hidden_layers=24,
            num_attention_heads=16,
            word_embed_proj_dim=512,
            do_layer_norm_before=False,
        ),
    ),
    "opt-1.3b": Shape(
        "opt",
        dict(
            hidden_size=2048,
            ffn_dim=8192,
            num_hidden_layers=24,
            num_attention_heads=32,
            word_embed_proj_dim=2048,
        ),
    ),
    "opt-6.7b": Shape(
        "opt",
        dict(
            hidden_size=4096,
            ffn_dim=16384,
            num_hidden_layers=32,
            num_attention_heads=32,
            word_embed_proj_dim=4096,
        ),
    ),
    "smollm2-135m": Shape(
        "llama",
        dict(
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            vocab_size=49152,
            max_position_embeddings=8192,
            rope_theta=100000.0,
            tie_word_embeddings=True,
            rms_norm_eps=1e-5,
        ),
    ),
    # Gemma 3 270M (conf/model/gemma3-270m.yaml): 18 layers (a global layer after every five
    # sliding-window ones), one KV head, and a 262,144-token vocabulary: the head dominates
    "gemma3-270m": Shape(
        "gemma3",
        dict(
            hidden_size=640,
            intermediate_size=2048,
            num_hidden_layers=18,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            query_pre_attn_scalar=256,
            vocab_size=262144,
            max_position_embeddings=32768,
            sliding_window=512,
            layer_types=[
                "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)
            ],
            hidden_activation="gelu_pytorch_tanh",
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
        ),
    ),
}


def build_random_model(
    shape: str, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> nn.Module:
    """A randomly initialised model of a named real shape (sdpa attention, eval mode)."""
    from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

    if shape not in SHAPES:
        raise ValueError(f"shape={shape!r} is not known; choose one of {sorted(SHAPES)}")
    spec = SHAPES[shape]
    if spec.family == "opt":
        cfg = OPTConfig(
            **{"vocab_size": 50272, "max_position_embeddings": 2048, "dropout": 0.0, **spec.config}
        )
        cls = OPTForCausalLM
    elif spec.family == "gemma3":
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig

        cfg = Gemma3TextConfig(**spec.config)
        cls = Gemma3ForCausalLM
    elif spec.family == "llama":
        cfg = LlamaConfig(**spec.config)
        cls = LlamaForCausalLM
    else:  # a shape of another family needs its config class here, never a Llama in disguise
        raise ValueError(f"shape {shape!r}: family={spec.family!r}; allowed: opt, llama, gemma3")
    cfg._attn_implementation = "sdpa"
    # seeded for the same weights on every call, on a forked stream: the caller's random state
    # (a training run's seed, when its memory plan sizes the shape) is left as it was
    where = torch.device(device)
    cuda = [where.index or 0] if where.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        torch.manual_seed(0)
        with where:
            model = cls(cfg)
    return model.to(dtype).eval()


def random_prompts(
    batch: int, prompt_len: int, vocab: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random prompts of ``prompt_len`` token ids (seeded: every call the same) and
    their all-ones attention mask."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, vocab, (batch, prompt_len), generator=g)
    return ids.to(device), torch.ones_like(ids).to(device)


def device_name(dev: torch.device) -> str:
    """The GPU's name, or ``cpu (<processor>)``: what a benchmark record names as its device."""
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    import platform

    return f"cpu ({platform.processor() or platform.machine()})"
