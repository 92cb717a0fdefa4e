"""How a decoder runs its decode passes, in one object that checks itself.

``DecodeOptions`` holds the execution settings every entry point shares (the evaluation's
``eval.cache``/``eval.compile``/``eval.compile_graph``, the benchmarks' ``--compile`` and
``--plan-graphs``, ``SkipDecoder``'s arguments), each default written once, here. Building one
checks every rule between them, with errors that name the setting as the caller spells it
(``names``): an unknown cache or graph kind, a compile mode torch does not have, plan graphs
without compiling, compiling without the preallocated cache.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .compiled import COMPILE_GRAPHS, COMPILE_MODES

__all__ = [
    "CACHE_KINDS",
    "CLI_NAMES",
    "CONFIG_NAMES",
    "AUTO",
    "CUDA_GRAPH_MODE",
    "DEFAULTS",
    "DecodeOptions",
    "DecodeOptionsError",
]

#: The torch.compile mode whose graphs are captured and replayed as CUDA graphs.
CUDA_GRAPH_MODE = "reduce-overhead"
#: ``compile``'s value that picks the fastest exact path for the device (core.auto).
AUTO = "auto"
#: The KV cache a decoder allocates: preallocated to the decode's capacity, or grown per pass.
CACHE_KINDS = ("static", "dynamic")


class DecodeOptionsError(ValueError):
    """Decode options that contradict each other or name an unknown kind."""


#: How the evaluation config and the benchmarks' command lines spell each setting.
CONFIG_NAMES = {k: f"eval.{k}" for k in ("cache", "compile", "compile_graph")}
CLI_NAMES = {"cache": "--cache", "compile": "--compile", "compile_graph": "--plan-graphs"}


@dataclass(frozen=True)
class DecodeOptions:
    """``cache``: one of :data:`CACHE_KINDS`; ``compile``: ``False`` (the eager loop, the
    reference), ``True`` (torch.compile's default mode) or a mode of
    :data:`~skipdecode.core.compiled.COMPILE_MODES`; ``compile_graph``: what one compiled graph
    covers (:data:`~skipdecode.core.compiled.COMPILE_GRAPHS`: one layer step replayed for any
    plan, or all of a pass's layers, one graph per layer set). ``names``: how the caller spells
    each setting, for errors (:data:`CONFIG_NAMES`, :data:`CLI_NAMES`); not part of the value."""

    cache: str = "static"
    compile: bool | str = False
    compile_graph: str = "layer"
    names: Mapping[str, str] | None = field(default=None, compare=False, repr=False)
    # set by resolved(): what "auto" chose and why (None: chosen by the caller)
    chosen_because: str | None = field(default=None, compare=False)

    def _name(self, key: str) -> str:
        return (self.names or {}).get(key, key)

    def __post_init__(self) -> None:
        cache, compile_, graph = (self._name(k) for k in ("cache", "compile", "compile_graph"))
        if self.cache not in CACHE_KINDS:
            raise DecodeOptionsError(
                f"{cache}: {self.cache!r} is not allowed; choose one of {list(CACHE_KINDS)}"
            )
        if not isinstance(self.compile, bool) and self.compile not in (*COMPILE_MODES, AUTO):
            raise DecodeOptionsError(
                f"{compile_}: {self.compile!r} is not allowed; false, true, {AUTO!r} (the "
                f"fastest exact path for the device) or a torch.compile mode {list(COMPILE_MODES)}"
            )
        if self.compile == AUTO and self.compile_graph != "layer":
            raise DecodeOptionsError(
                f"{graph}: {self.compile_graph!r} with {compile_}={AUTO!r}, which chooses the "
                f"graphs itself; leave {graph} at 'layer' or choose {compile_} yourself"
            )
        if self.compile_graph not in COMPILE_GRAPHS:
            raise DecodeOptionsError(
                f"{graph}: {self.compile_graph!r} is not allowed; choose one of "
                f"{list(COMPILE_GRAPHS)}"
            )
        if self.compile_graph != "layer" and not self.compile:
            raise DecodeOptionsError(
                f"{graph}: {self.compile_graph!r} is a kind of compiled graph, and {compile_} is "
                f"{self.compile!r}; allowed with {compile_}=true (or {graph}=layer)"
            )
        if self.compile_graph == "step" and self.compile != CUDA_GRAPH_MODE:
            raise DecodeOptionsError(
                f"{graph}: 'step' records the whole decode step as a CUDA graph and {compile_} is "
                f"{self.compile!r}; allowed with {compile_}={CUDA_GRAPH_MODE!r}"
            )
        if self.compile and self.cache != "static":
            raise DecodeOptionsError(
                f"{compile_}: {self.compile!r} needs {cache}='static' (the compiled step writes "
                f"the preallocated cache in place), not {self.cache!r}"
            )

    def resolved(self, device: Any, num_layers: int) -> DecodeOptions:
        """These options with ``compile="auto"`` replaced by what it picks for a model of
        ``num_layers`` layers on ``device`` (:func:`~skipdecode.core.auto.auto_choice`)."""
        if self.compile != AUTO:
            return self
        from .auto import auto_choice

        compile_, graph, why = auto_choice(device, num_layers)
        return DecodeOptions(self.cache, compile_, graph, self.names, f"auto: {why}")

    @property
    def cuda_graphs(self) -> bool:
        """Whether the decode passes replay CUDA graphs (torch.compile's ``reduce-overhead``):
        the decoder then keeps its caches in a pool at fixed addresses (core.pool)."""
        return self.compile == CUDA_GRAPH_MODE

    @property
    def compile_mode(self) -> str | None:
        """The torch.compile mode of the decode passes, or None on the eager loop."""
        if not self.compile:
            return None
        return "default" if self.compile is True else str(self.compile)

    def as_dict(self) -> dict[str, Any]:
        """The options as a record holds them (and, where ``auto`` chose them, why)."""
        out = {"cache": self.cache, "compile": self.compile, "compile_graph": self.compile_graph}
        if self.chosen_because is not None:
            out["chosen_because"] = self.chosen_because
        return out

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None) -> DecodeOptions:
        """From the evaluation config's ``eval`` node: its ``cache``, ``compile`` and
        ``compile_graph``, each absent or null one at its default."""
        node = node or {}
        given = {k: node.get(k) for k in ("cache", "compile", "compile_graph")}
        return cls(**{k: v for k, v in given.items() if v is not None}, names=CONFIG_NAMES)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DecodeOptions:
        """From a benchmark's ``--compile`` and ``--plan-graphs``, or ``--step-graphs`` (the
        CUDA-graph path with whole-step graphs and sync-free rounds)."""
        if getattr(args, "step_graphs", False):
            return cls(compile=CUDA_GRAPH_MODE, compile_graph="step", names=CLI_NAMES)
        return cls(
            compile=bool(getattr(args, "compile", False)),
            compile_graph="plan" if getattr(args, "plan_graphs", False) else "layer",
            names=CLI_NAMES,
        )


#: Every setting at its default: the one place each default is written.
DEFAULTS = DecodeOptions()
