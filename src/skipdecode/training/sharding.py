"""Sharded fine-tuning: FSDP2 (``torch.distributed.fsdp.fully_shard``) through Lightning's
``ModelParallelStrategy``, one shard unit per decoder layer and one root unit for the rest.

Why FSDP2 and not Lightning's ``FSDPStrategy`` (FSDP1): FSDP2 shards each parameter on its own
(a DTensor per parameter, no flat buffers), which PyTorch now recommends and develops, keeps the
parameters' names (a full state dict is an ordinary transformers state dict), mixes precision per
unit without a wrapper class, and runs on a CPU with gloo, so the same code that shards a 6.7B
model over eight GPUs is exercised by the default test suite with two CPU processes. Lightning's
``FSDPStrategy`` refuses a CPU accelerator.

The units follow how we run the model. Our layer loop calls the decoder layers directly (never
the transformers model's ``forward``), so each decoder layer is a unit of its own: it gathers its
shards when called and frees them after. The weights outside the layers (embeddings, final norm,
LM head, tied or not) belong to the root unit, a :class:`ShardRoot` whose ``forward`` runs the
schedule's loss: calling it gathers them for the pass and schedules their gradients'
reduce-scatter, which is what FSDP's hooks need to see. With ``activation_checkpointing`` the
layers recompute their activations in the backward pass (transformers' gradient checkpointing,
which its decoder layers apply when called directly, and which leaves the state dict's names
as they are).

Checkpoints are full state dicts (``save_distributed_checkpoint=False``): rank 0 writes one file
that exports as an ordinary transformers directory and loads on any device count; a run resumes
from it with the same global batch (devices x ``loader.batch_size``), which the data order needs.
Workers start by ``spawn`` (as ``trainer=ddp``): the script is not re-run, so Hydra makes one
output directory, also in multiruns; ``start_method: fork`` forks them from this process (nothing
re-imported: seconds instead of a re-import per worker, what the CPU tests use; Lightning refuses
it once CUDA is initialised); ``start_method: popen`` re-runs the script (Lightning's default);
where a cluster starts the processes (SLURM, torchrun) no launcher of these runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from pytorch_lightning.strategies import ModelParallelStrategy
from pytorch_lightning.strategies.launchers.multiprocessing import (
    _MultiProcessingLauncher,
    _WorkerOutput,
)
from pytorch_lightning.trainer.states import TrainerFn
from torch import nn

from .resumable import capture_rng, restore_rng

__all__ = ["FullWeightsLauncher", "ShardRoot", "ShardedStrategy", "shard_model"]

#: The compute dtype of each mixed Lightning precision ModelParallelStrategy accepts.
PARAM_DTYPES = {"bf16-mixed": torch.bfloat16}


class ShardedStrategy(ModelParallelStrategy):
    """``ModelParallelStrategy`` with data parallelism only (every device one FSDP shard), full
    checkpoints, the shard settings :func:`shard_model` reads, and a choice of launcher."""

    def __init__(
        self,
        start_method: str = "spawn",
        activation_checkpointing: bool = False,
        reshard_after_forward: bool = True,
        save_distributed_checkpoint: bool = False,
        **kwargs: Any,
    ):
        if start_method not in ("spawn", "fork", "popen"):
            raise ValueError(
                f"trainer.strategy.start_method={start_method!r} is not allowed: 'spawn' (workers "
                "started by torch.multiprocessing), 'fork' (workers forked from this process, "
                "nothing re-imported; not once CUDA is initialised) or 'popen' (the script re-run "
                "per worker)"
            )
        kwargs.setdefault("tensor_parallel_size", 1)
        super().__init__(save_distributed_checkpoint=save_distributed_checkpoint, **kwargs)
        self.start_method = start_method
        self.activation_checkpointing = activation_checkpointing
        self.reshard_after_forward = reshard_after_forward

    def _configure_launcher(self) -> None:
        assert self.cluster_environment is not None
        if self.start_method == "popen" or self.cluster_environment.creates_processes_externally:
            super()._configure_launcher()  # a cluster (SLURM, torchrun) starts the processes
            return
        self._launcher = FullWeightsLauncher(self, start_method=self.start_method)

    def setup_environment(self) -> None:
        """Processes and the device mesh, leaving the global random generators (CPU, numpy,
        Python; CUDA's where it was initialised) as they were: building the mesh draws from
        them, and a sharded run's data order and random plans then follow the same stream as a
        single-process run's."""
        if self._data_parallel_size == "auto":  # every process one data-parallel shard
            self._data_parallel_size = self.num_nodes * self.num_processes
        states = capture_rng()
        super().setup_environment()
        restore_rng(states)


class FullWeightsLauncher(_MultiProcessingLauncher):
    """Lightning's spawn launcher, handing the main process the trained weights as a full state
    dict (gathered from the shards) rather than rank 0's shards."""

    def _collect_rank_zero_results(self, trainer: Any, results: Any) -> Any:
        callback = trainer.checkpoint_callback
        best = getattr(callback, "best_model_path", None) if callback else None
        state = self._strategy.lightning_module_state_dict()  # collective: every rank
        if self._strategy.local_rank != 0:
            return None
        path = None
        if trainer.state.fn == TrainerFn.FITTING:
            path = os.path.join(tempfile.mkdtemp(), ".temp.ckpt")
            self._strategy.checkpoint_io.save_checkpoint(state, path)
        return _WorkerOutput(best, path, trainer.state, results, self.get_extra_results(trainer))


class ShardRoot(nn.Module):
    """The root shard unit: holds the model, and its ``forward`` runs ``fn(*args)`` (the
    schedule's loss on the model), so that FSDP gathers the root's weights for the pass."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def shard_model(
    model: nn.Module,
    layers: nn.ModuleList,
    mesh: Any,
    precision: str,
    activation_checkpointing: bool = False,
    reshard_after_forward: bool = True,
) -> ShardRoot:
    """Shard ``model`` in place over ``mesh``: each of ``layers`` a unit, the rest the root's;
    with a ``*-mixed`` precision the units compute in its 16-bit dtype and reduce gradients in
    float32. The root, whose call runs a function of the model sharded."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    dtype = PARAM_DTYPES.get(precision)
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    root = ShardRoot(model)
    fully_shard(root, mesh=mesh, mp_policy=policy)
    return root
