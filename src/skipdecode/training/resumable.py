"""Exact resume: the training order and the random state continue where a killed run stopped.

A run killed at step k and resumed from its ``last.ckpt`` must train the model an uninterrupted
run trains. Two things would otherwise differ:

* **The data order.** A plain shuffled ``DataLoader`` draws a new permutation when the resumed
  run restarts the epoch, so the remaining steps see other batches. :class:`ResumableSampler`
  draws each epoch's permutation seed from the global generator exactly as torch's
  ``RandomSampler`` does (the same orders as before for a run that is never interrupted, given
  the same random stream), records it, and on resume replays that epoch's permutation from the
  first sample not yet trained on. The datamodule saves ``(epoch seed, samples trained)`` in the
  checkpoint (:func:`order_state`).
* **The random stream** (dropout, the next epochs' permutations). The checkpoint keeps the
  generators' states (:func:`capture_rng`), and the resumed run puts them back when training
  starts (:func:`restore_rng`). Validation must not consume random numbers in between (the
  resumed run skips the validation the killed run did right after its checkpoint), so the
  validation loaders have their own generator, and loaders never draw their worker seed from
  the global one.

On several devices (DDP, sharded) each device trains on its share of every global batch
(:class:`RankShare`, positions ``rank, rank + world, ...`` of the same order; Lightning's own
distributed sampler is off, ``trainer.use_distributed_sampler=false``), and the checkpoint
counts the samples of whole global batches: a run resumes with the same global batch
(devices x ``loader.batch_size``), and another global batch is refused, named.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

__all__ = ["ResumableSampler", "capture_rng", "restore_rng", "order_state", "draw_like_a_loader"]


def draw_like_a_loader() -> int:
    """One draw from the global generator, as a ``DataLoader`` iterator (its worker seed) or a
    ``RandomSampler`` (its epoch seed) takes it."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


class ResumableSampler(Sampler[int]):
    """A shuffled order per epoch, seeded from the global generator like ``RandomSampler``
    (after the draw a loader's iterator used to take, so existing runs keep their order), that
    can resume part-way through an epoch."""

    def __init__(self, size: int):
        if size <= 0:
            raise ValueError(f"ResumableSampler needs a non-empty dataset, got size={size}")
        self.size = size
        self.seed: int | None = None  # the current epoch's permutation seed
        self._resume: tuple[int, int] | None = None  # (seed, samples already trained)

    def resume(self, seed: int, trained: int) -> None:
        """The next epoch replays the permutation of ``seed`` from sample ``trained``."""
        if not 0 <= trained < self.size:
            raise ValueError(f"trained={trained} must be in [0, {self.size})")
        self._resume = (int(seed), int(trained))

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        if self._resume is not None:
            (self.seed, start), self._resume = self._resume, None
        else:
            draw_like_a_loader()  # the worker-seed draw a loader's iterator took before this one
            self.seed, start = draw_like_a_loader(), 0
        generator = torch.Generator().manual_seed(self.seed)
        yield from torch.randperm(self.size, generator=generator).tolist()[start:]


class RankShare(Sampler[int]):
    """One device's share of a sampler's order: positions ``rank, rank + world, ...``, the order
    padded with its first positions to a multiple of ``world`` (every device the same number of
    batches). Global batch ``k`` of ``world`` devices with ``b`` rows each is then the
    single-process batch ``k`` of ``world * b`` rows, in order: a run on more devices trains on
    the data a single-process run with the same global batch does."""

    def __init__(self, sampler: Sampler[int], rank: int, world: int):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not a device of {world}")
        self.sampler, self.rank, self.world = sampler, rank, world

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.world)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[int]:
        order = list(self.sampler)
        if not order:
            return
        order += order[: (-len(order)) % self.world]
        yield from order[self.rank :: self.world]


def order_state(sampler: ResumableSampler, batches_trained: int, batch_size: int) -> dict:
    """What the checkpoint keeps of the order: the epoch's seed and the samples trained
    (``batch_size``: the global batch, every device's rows)."""
    return {
        "seed": sampler.seed,
        "trained": min(batches_trained * batch_size, sampler.size),
        "size": sampler.size,
        "batch": batch_size,
    }


def capture_rng() -> dict[str, Any]:
    """The states of the global generators (torch CPU and CUDA, numpy, random), as tensors and
    plain numbers, so that a checkpoint holding them still loads with ``weights_only=True``."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": {"version": int(version), "internal": list(internal), "gauss": py_gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: Mapping[str, Any]) -> None:
    """Put back what :func:`capture_rng` took."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
