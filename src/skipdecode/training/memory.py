"""A memory plan before launch: the bytes per device a fine-tuning run needs, from its config.

The plan counts what a run keeps on each device (``MemoryPlan``), in bytes:

- **weights, gradients, optimizer states**: per parameter, by precision (Lightning's ``*-mixed``
  keeps float32 weights and gradients; ``*-true`` keeps them in that dtype) and optimizer
  (AdamW: two moments in the weights' dtype; SGD with momentum: one); a sharded strategy
  (``FSDP``, full sharding) divides them by the device count and adds the gathered units, two
  decoder layers' weights in the compute dtype (the one computing and the one prefetched);
- **activations**: what the backward pass reads, per decoder layer ``34 s b h`` bytes in 16-bit
  (Korthikanti et al., 2022, with attention that keeps no score matrix, as SDPA; twice that in
  float32), or with activation checkpointing the layer inputs (``2 s b h`` each) plus one layer
  recomputed; and the head's logits, ``s b V`` in the compute dtype plus float32 logits and
  their gradient for the loss. ``s`` is the longest training sequence (what the largest batch
  pads to), ``b`` the per-device batch;
- **transient**: the compute-dtype copy of one layer's weights under autocast.

It is printed when a run starts, written into the run's record (``run_info.json``), and checked
against the visible devices before any weight is loaded: a plan that cannot fit is refused with
the fix named. ``python -m skipdecode.training.memory experiment=... [--devices N --gib G]`` prints
a plan without loading anything; ``--grid`` prints every ``paper_opt*`` cell. What the allocator
reserves beyond this (fragmentation, its block rounding) and the CUDA context are not counted.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..config import flag
from ..models.shapes import SHAPES, build_random_model

__all__ = [
    "MemoryPlan",
    "MemoryPlanError",
    "ModelSizes",
    "device_count",
    "experiment_plan",
    "model_sizes",
    "plan_memory",
    "require_fit",
]

GIB = 2**30
#: Bytes per parameter of (weights, gradients) and of the compute dtype, by Lightning precision.
PRECISIONS: dict[str, tuple[int, int, int]] = {
    "32-true": (4, 4, 4),
    "32": (4, 4, 4),
    "bf16-mixed": (4, 4, 2),
    "16-mixed": (4, 4, 2),
    "bf16-true": (2, 2, 2),
    "16-true": (2, 2, 2),
}
#: Optimizer states per parameter, in units of the weights' bytes.
OPTIMIZER_STATES = {"AdamW": 2, "Adam": 2, "SGD": 1}


class MemoryPlanError(RuntimeError):
    """A run whose plan does not fit the devices it would run on."""


@dataclass(frozen=True)
class ModelSizes:
    """What the plan needs to know of a model."""

    params: int
    layer_params: int  # the largest decoder layer's
    hidden: int
    layers: int
    vocab: int


def model_sizes(model: torch.nn.Module) -> ModelSizes:
    """Sizes of a built model (a meta-device one will do)."""
    from ..core.adapters import get_adapter

    adapter = get_adapter(model)
    seen: set[int] = set()
    params = sum(p.numel() for p in model.parameters() if not (id(p) in seen or seen.add(id(p))))
    config = model.config
    return ModelSizes(
        params=params,
        layer_params=max(sum(p.numel() for p in layer.parameters()) for layer in adapter.layers),
        hidden=int(config.hidden_size),
        layers=adapter.num_layers,
        vocab=int(config.vocab_size),
    )


def shape_sizes(shape: str) -> ModelSizes:
    """Sizes of a named real shape (:data:`~skipdecode.models.shapes.SHAPES`), built on the meta
    device: nothing is allocated, nothing is downloaded."""
    return model_sizes(build_random_model(shape, device="meta"))


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device of one training run (module doc)."""

    model: str
    params: int
    precision: str
    optimizer: str
    strategy: str  # "single" | "ddp" | "fsdp"
    devices: int
    batch: int  # per device
    seq_len: int
    checkpointing: bool
    weights: int
    gradients: int
    optimizer_states: int
    activations: int
    transient: int

    @property
    def total(self) -> int:
        parts = (self.weights, self.gradients, self.optimizer_states, self.activations)
        return sum(parts) + self.transient

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}

    def describe(self) -> str:
        gib = {k: v / GIB for k, v in self.as_dict().items() if isinstance(v, int) and v > 2**20}
        return (
            f"memory plan ({self.model}, {self.params / 1e9:.3f}B parameters, {self.precision}, "
            f"{self.optimizer}, {self.strategy} on {self.devices} device(s), batch {self.batch} x "
            f"{self.seq_len} tokens, activation checkpointing {'on' if self.checkpointing else 'off'}"
            f"): per device {gib['total']:.2f} GiB = weights {gib.get('weights', 0):.2f} + "
            f"gradients {gib.get('gradients', 0):.2f} + optimizer {gib.get('optimizer_states', 0):.2f}"
            f" + activations {gib.get('activations', 0):.2f} + transient {gib.get('transient', 0):.2f}"
        )


def plan_memory(
    sizes: ModelSizes,
    *,
    model: str,
    precision: str,
    optimizer: str,
    strategy: str,
    devices: int,
    batch: int,
    seq_len: int,
    checkpointing: bool,
) -> MemoryPlan:
    """The plan of one run (module doc); unknown precisions and optimizers are named."""
    if precision not in PRECISIONS:
        raise MemoryPlanError(f"trainer.precision={precision!r}: allowed {sorted(PRECISIONS)}")
    if optimizer not in OPTIMIZER_STATES:
        raise MemoryPlanError(
            f"optimizer={optimizer!r} has no known state size; allowed {sorted(OPTIMIZER_STATES)}"
        )
    w, g, compute = PRECISIONS[precision]
    shards = devices if strategy == "fsdp" else 1
    s, b, h = seq_len, batch, sizes.hidden
    per_layer = 34 * s * b * h * (compute // 2)  # 16-bit formula, doubled in float32
    if checkpointing:
        layers = sizes.layers * 2 * s * b * h * (compute // 2) + per_layer
    else:
        layers = sizes.layers * per_layer
    head = s * b * sizes.vocab * (compute + 4 + 4)  # logits, float32 logits and their gradient
    gathered = 2 * sizes.layer_params * compute if strategy == "fsdp" else 0
    return MemoryPlan(
        model=model,
        params=sizes.params,
        precision=precision,
        optimizer=optimizer,
        strategy=strategy,
        devices=devices,
        batch=batch,
        seq_len=seq_len,
        checkpointing=checkpointing,
        weights=sizes.params * w // shards + gathered,
        gradients=sizes.params * g // shards,
        optimizer_states=sizes.params * w * OPTIMIZER_STATES[optimizer] // shards,
        activations=layers + head,
        transient=sizes.layer_params * compute if compute != w else 0,
    )


def require_fit(plan: MemoryPlan, device_bytes: int, where: str) -> None:
    """Refuse a plan over ``device_bytes``, naming the fixes that would bring it under."""
    if plan.total <= device_bytes:
        return
    fixes = []
    if plan.strategy != "fsdp":
        fixes.append("trainer=fsdp with more devices (shards weights, gradients and optimizer)")
    else:
        fixes.append(f"more devices than {plan.devices} (trainer.devices)")
    if not plan.checkpointing:
        fixes.append("activation checkpointing (model.gradient_checkpointing=true)")
    if plan.batch > 1:
        fixes.append(f"a smaller batch than {plan.batch} (loader.batch_size, with "
                     "trainer.accumulate_grad_batches to keep the global batch)")  # fmt: skip
    raise MemoryPlanError(
        f"{plan.describe()}; that is over the {device_bytes / GIB:.1f} GiB of {where}. "
        f"Fixes: {'; '.join(fixes)}."
    )


def strategy_of(trainer: Mapping[str, Any]) -> str:
    """``single`` | ``ddp`` | ``fsdp`` from a trainer config node."""
    target = str((trainer.get("strategy") or {}).get("_target_", trainer.get("strategy") or ""))
    if "fsdp" in target.lower() or target.endswith("ShardedStrategy"):
        return "fsdp"
    return "ddp" if "ddp" in target.lower() else "single"


def config_sizes(model_cfg: Mapping[str, Any], vocab: int | None = None) -> ModelSizes | None:
    """Sizes of the model a config names, without its weights: a named real shape (the paper's
    OPT sizes, SmolLM2, Gemma 3) on the meta device, a scratch/random architecture from its
    ``arch``, or a local/asset model from its ``config.json``; None where neither is known."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from ..models.loading import ModelConfigError, pretrained_path

    name, source = str(model_cfg.get("name")), model_cfg.get("source")
    if name in SHAPES and source not in ("scratch", "random"):
        return shape_sizes(name)
    try:
        if source in ("scratch", "random"):
            arch = dict(model_cfg.get("arch") or {})
            config = AutoConfig.for_model(arch.pop("model_type"), **arch)
            if vocab:
                config.vocab_size = vocab
        else:
            config = AutoConfig.from_pretrained(pretrained_path(model_cfg))
    except (ModelConfigError, OSError, KeyError, ValueError):
        return None
    with torch.device("meta"):
        return model_sizes(AutoModelForCausalLM.from_config(config))


def device_count(trainer: Mapping[str, Any], hardware: Mapping[str, Any] | None) -> int:
    """The devices a run trains on: ``trainer.devices``, or where that takes every visible one
    (-1, "auto"), the visible GPUs, else the ``hardware`` the experiment is planned for."""
    devices = trainer.get("devices", 1)
    if isinstance(devices, int) and devices > 0:
        return devices
    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return int((hardware or {}).get("devices") or 1)


def plan_run(
    model_cfg: Mapping[str, Any],
    trainer: Mapping[str, Any],
    optimizer: Mapping[str, Any],
    batch: int,
    seq_len: int,
    vocab: int | None = None,
    hardware: Mapping[str, Any] | None = None,
) -> MemoryPlan | None:
    """The plan of a training config (``model``, ``trainer``, ``optimizer`` nodes, the per-device
    ``batch``, the longest sequence, and the ``hardware`` an experiment names where its trainer
    takes every visible device); None where the model's sizes are unknown."""
    sizes = config_sizes(model_cfg, vocab)
    if sizes is None:
        return None
    strategy = strategy_of(trainer)
    devices = device_count(trainer, hardware)
    fsdp_ckpt = bool((trainer.get("strategy") or {}).get("activation_checkpointing", False))
    return plan_memory(
        sizes,
        model=str(model_cfg.get("name")),
        precision=str(trainer.get("precision", "32-true")),
        optimizer=str(optimizer.get("_target_", "torch.optim.AdamW")).rsplit(".", 1)[-1],
        strategy=strategy,
        devices=devices,
        batch=batch,
        seq_len=seq_len,
        checkpointing=flag(
            model_cfg.get("gradient_checkpointing", False), "model.gradient_checkpointing"
        )
        or fsdp_ckpt,
    )


def check_devices(plan: MemoryPlan, accelerator: str) -> str:
    """Refuse a GPU run whose plan does not fit the visible devices (:func:`require_fit`);
    returns what was checked (for the log and the record)."""
    if accelerator not in ("gpu", "cuda", "auto"):
        return f"not checked: accelerator {accelerator!r}"
    if not torch.cuda.is_available():
        return "not checked: no CUDA device visible here (the plan is for the run's GPUs)"
    props = torch.cuda.get_device_properties(0)
    require_fit(plan, props.total_memory, f"{props.name} (device 0)")
    return f"fits {props.name}: {props.total_memory / GIB:.1f} GiB"


def experiment_plan(experiment: str, overrides: list[str]) -> tuple[dict[str, Any], MemoryPlan]:
    """Compose ``experiment`` (the training config) and plan it at its configured lengths."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from ..config import config_dir, register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        composed = compose(
            "train", overrides=["paths.output_dir=.", f"experiment={experiment}", *overrides]
        )
    cfg = {
        k: OmegaConf.to_container(composed[k], resolve=True)
        for k in ("model", "trainer", "optimizer", "loader")
    }
    hardware = composed.get("hardware")
    hardware = OmegaConf.to_container(hardware) if hardware is not None else None
    data = OmegaConf.to_container(composed.dataset, resolve=False)
    seq = int(data.get("max_source_tokens") or 0) + int(data.get("max_target_tokens") or 0)
    plan = plan_run(
        cfg["model"], cfg["trainer"], cfg["optimizer"], cfg["loader"]["batch_size"], seq,
        hardware=hardware,
    )  # fmt: skip
    if plan is None:
        raise MemoryPlanError(f"experiment={experiment}: the model's sizes are not known offline")
    return cfg, plan


def paper_grid() -> list[str]:
    """The paper grid's experiments (``conf/experiment/paper_opt*``), by name."""
    from ..config import config_dir

    return sorted(f.stem for f in (config_dir() / "experiment").glob("paper_opt*"))


#: The plan's columns in the grid tables (:func:`plan_cells`).
PLAN_HEADER = "strategy | devices | batch x tokens | checkpointing | GiB per device"


def plan_cells(plan: MemoryPlan, gib: float) -> str:
    """A plan's cells in a Markdown table row (:data:`PLAN_HEADER`, then whether it fits)."""
    fits = "yes" if plan.total <= gib * GIB else "no"
    return (
        f"{plan.strategy} | {plan.devices} | {plan.batch} x {plan.seq_len} | "
        f"{'on' if plan.checkpointing else 'off'} | {plan.total / GIB:.1f} | {fits}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m skipdecode.training.memory",
        description="Plan a training run's memory per device, offline and without weights "
        "(at the dataset's configured maximum lengths).",
    )
    p.add_argument("experiments", nargs="*", help="experiment names (conf/experiment/)")
    p.add_argument("--grid", action="store_true", help="every paper_opt* experiment")
    p.add_argument("--gib", type=float, default=80.0, help="memory of one device (default 80)")
    p.add_argument("--override", action="append", default=[], help="a Hydra override")
    args = p.parse_args(argv)
    names = list(args.experiments) + (paper_grid() if args.grid else [])
    if not names:
        p.error("give experiment names or --grid")
    print(f"| experiment | {PLAN_HEADER} | fits {args.gib:g} GiB |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        _, plan = experiment_plan(name, args.override)
        print(f"| {name} | {plan_cells(plan, args.gib)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
