"""The decoder families skipdecode runs, and what each needs beyond the common shape.

Most transformers 5 causal LMs share one shape: ``<ForCausalLM>.<base>`` holds a token
embedding, a list of decoder layers, a final norm and (for RoPE models) ``rotary_emb``; the LM
head sits on the outer model. The generic adapter (:mod:`.adapters`) reads those parts from the
model; a :class:`Family` only names where a family keeps them and the few things its forward does
between embedding and head that are not inside a layer (an embedding multiplier, learned
positions, a logit divisor or soft-cap). Everything a family does *inside* its layers (q/k norms,
post-norms, fused or Conv1D projections, partial rotary, parallel residuals, attention soft-caps,
mixture-of-experts MLPs, residual and attention multipliers) runs as the model's own code.

A model type that is not listed but has the common shape is accepted after a check that the
generic path reproduces the model's own logits on a short input (:func:`.adapters.get_adapter`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Family", "FAMILIES", "families_table"]


@dataclass(frozen=True)
class Family:
    """Where a family keeps its parts and what its forward adds around the layers."""

    base: str = "model"  # attribute of the *ForCausalLM holding the decoder stack
    embed_tokens: str = "embed_tokens"
    layers: str = "layers"
    norm: str = "norm"
    head: str = "lm_head"  # attribute of the *ForCausalLM
    positions: str | None = None  # learned absolute position embedding (GPT-2: "wpe")
    embedding_multiplier: str | None = None  # config attribute multiplying the embeddings
    logit_divisor: str | None = None  # config attribute dividing the logits
    logit_softcap: str | None = None  # config attribute: logits = cap * tanh(logits / cap)
    attention: str | None = None  # the attention implementation the family needs, if one
    handling: str = "common shape"  # what this family needed (docs/FAMILIES.md table)


FAMILIES: dict[str, Family] = {
    "llama": Family(handling="RoPE (incl. Llama 3 rope scaling, inside rotary_emb), GQA"),
    "qwen2": Family(handling="as Llama; sliding window only where `use_sliding_window`"),
    "qwen3": Family(handling="as Llama; q/k norms inside attention"),
    "mistral": Family(handling="as Llama; sliding window: lengths up to the window"),
    "mixtral": Family(handling="MoE MLPs (router outputs recorded by hooks, not returned)"),
    "qwen3_moe": Family(handling="MoE MLPs; q/k norms"),
    "gemma": Family(handling="embedding scaled by sqrt(hidden) inside its embedding module"),
    "gemma2": Family(
        logit_softcap="final_logit_softcapping",
        attention="eager",
        handling="final logit soft-cap; attention soft-cap (eager attention); alternating "
        "sliding/global layers: lengths up to the window",
    ),
    "gemma3_text": Family(
        logit_softcap="final_logit_softcapping",
        handling="rotary per layer type (local/global); sliding/global layers: lengths up to "
        "the window; q/k norms; final logit soft-cap when set",
    ),
    "phi3": Family(handling="fused qkv and gate/up projections inside the layer"),
    "olmo2": Family(handling="post-norms and q/k norms inside the layer"),
    "gpt_neox": Family(
        base="gpt_neox",
        embed_tokens="embed_in",
        norm="final_layer_norm",
        handling="parallel residual, partial rotary; layers take `layer_past`",
    ),
    "gpt2": Family(
        base="transformer",
        embed_tokens="wte",
        layers="h",
        norm="ln_f",
        positions="wpe",
        handling="learned positions (wpe), Conv1D projections, no rotary",
    ),
    "granite": Family(
        embedding_multiplier="embedding_multiplier",
        logit_divisor="logits_scaling",
        handling="embedding multiplier, logits divided by logits_scaling; residual and "
        "attention multipliers inside the layer",
    ),
    "opt": Family(
        base="model",
        handling="own adapter: learned positions (offset 2), optional project_in/out, pre- or "
        "post-norm",
    ),
}


def families_table() -> str:
    """The table of supported model types in docs/FAMILIES.md (a test keeps it equal to this)."""
    lines = ["| `model_type` | what it needs |", "|---|---|"]
    for name, family in sorted(FAMILIES.items()):
        lines.append(f"| `{name}` | {family.handling} |")
    return "\n".join(lines) + "\n"
