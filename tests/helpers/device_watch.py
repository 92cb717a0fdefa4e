"""Watch what decode code does to the device: which tensors an op writes in place, and every
host sync (an ``item``/``bool``/``int``/``tolist``/``nonzero`` that reads a device value)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from skipdecode.core import compiled as _compiled
from skipdecode.core import matmul_forms as _matmul_forms
from skipdecode.core import step_graphs as _step_graphs
from skipdecode.core.engine import SkipDecoder

SYNC_METHODS = ("item", "__bool__", "__int__", "tolist", "nonzero")


class Writes(TorchDispatchMode):
    """Every tensor an op writes in place (by storage address) while the mode is on."""

    def __init__(self):
        super().__init__()
        self.mutated: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = args[i] if i < len(args) else kwargs.get(arg.name)
                if isinstance(value, torch.Tensor):
                    self.mutated.add(value.untyped_storage().data_ptr())
        return func(*args, **kwargs)


class Syncs:
    """Host syncs made while :meth:`inside` is open (``names``: the methods called)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.names: list[str] = []
        self._depth = 0
        for name in SYNC_METHODS:
            original = getattr(torch.Tensor, name)

            def counted(tensor, *a, _original=original, _name=name, **k):
                if self._depth:
                    self.names.append(_name)
                return _original(tensor, *a, **k)

            monkeypatch.setattr(torch.Tensor, name, counted)

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1


def storages(tensors) -> set[int]:
    """The storage addresses of ``tensors``."""
    return {t.untyped_storage().data_ptr() for t in tensors}


def pool_storages(decoder) -> set[int]:
    """The storage addresses of every cache buffer in ``decoder``'s pool."""
    pool = decoder.pool
    return storages(t for shape in pool.shapes for bufs in pool.buffers(*shape) for t in bufs)


def uncompiled(dec, monkeypatch):
    """``dec`` with its compiled parts swapped for the plain functions they compile (what a
    recording runs, without compiling; the compiled parts are tested where they are built)."""
    compiled, graphs = dec.compiled, dec.compiled.steps
    if graphs is not None:  # whole-step graphs (compile_graph="step")
        monkeypatch.setattr(graphs, "_prologue", _step_graphs._prologue)
        monkeypatch.setattr(graphs, "_epilogue", _step_graphs._epilogue)
    monkeypatch.setattr(compiled, "_layer", _compiled._layer_step)
    monkeypatch.setattr(compiled, "_plan", _compiled._plan_step)
    monkeypatch.setattr(compiled, "_head", dec.adapter.head)
    monkeypatch.setattr(compiled, "_subset_head", _compiled._subset_logits)
    return dec


def uncompiled_steps(model, monkeypatch):
    """A whole-step decoder of ``model`` (``compile_graph="step"``) that records its steps and
    rounds from the plain functions (:func:`uncompiled`)."""
    return uncompiled(
        SkipDecoder(model, compile="reduce-overhead", compile_graph="step"), monkeypatch
    )


def without_inductor(monkeypatch):
    """``torch.compile`` through dynamo and AOT autograd to the eager kernels (``aot_eager``):
    the same graphs, guards, recompiles and fullgraph checks, without inductor generating and
    compiling C++ (seconds a graph on a CPU). The one-row reduction the matmul forms time
    (compiled when its module loads) runs the same way. For tests of what happens around the
    compiler; inductor's own kernels are tested in ``tests/core/test_compiled.py`` (layers,
    plans, heads, the lossless mode, the matmul pass), ``test_step_graphs.py`` (a step's
    prologue and epilogue) and ``test_device_rounds.py`` (the sync-free round)."""
    real = torch.compile

    def compile_(model=None, *, mode=None, options=None, backend="inductor", **kwargs):
        del mode, options, backend  # inductor's settings
        return real(model, backend="aot_eager", **kwargs)

    monkeypatch.setattr(torch, "compile", compile_)
    reduction = real(_matmul_forms._row_reduction, backend="aot_eager", dynamic=False)
    monkeypatch.setattr(_matmul_forms, "_compiled_row_reduction", reduction)
