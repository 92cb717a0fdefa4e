"""Distributed training strategies built from config (``conf/trainer/fsdp.yaml``)."""

from __future__ import annotations

from typing import Any

from ..models.loading import decoder_layer_classes

__all__ = ["fsdp_strategy"]


def fsdp_strategy(
    layer_cls: str | list[str], activation_checkpointing: bool = False, **kwargs: Any
) -> Any:
    """``FSDPStrategy`` whose auto-wrap policy names the decoder layer class (dotted names).

    Each decoder layer becomes one FSDP unit; our layer loop calls the layers directly, so they
    gather and free their shards one at a time. With ``activation_checkpointing`` the same
    classes are checkpointed by the strategy (leave ``model.gradient_checkpointing`` off then).
    """
    from pytorch_lightning.strategies import FSDPStrategy

    classes = decoder_layer_classes(layer_cls)
    if activation_checkpointing:
        kwargs["activation_checkpointing_policy"] = classes
    return FSDPStrategy(auto_wrap_policy=classes, **kwargs)
