"""CUDA graphs for the decode passes: one graph per (layer, shapes), captured once and replayed
for whichever layers a plan runs.

Why our own capture and not inductor's (``torch.compile(mode="reduce-overhead")``): the compiled
layer step is one function called with every layer's weights. Inductor's CUDA-graph trees treat
the weights as static inputs, so a new set of weight addresses re-records, and a tree records a
new node for every new sequence of calls: a skip schedule's plans (bottom warm-up layers, then
the top of a shrinking budget) would record a graph per layer per plan prefix, and past the
re-record limit run without graphs (as we read inductor's ``cudagraph_trees``; not measured).
Here each layer's step is captured once per shape (batch, tokens per pass, cache capacity) with
its own weights and its own cache buffers, and any plan replays the captured layers in order:
no recompiling, no re-recording, one graph launch per active layer plus the head's. With
``graph="plan"`` (few distinct layer sets) a set's layers are one graph.

Static buffers. A graph reads and writes the addresses it was recorded with, so every pass of
one shape goes through the same tensors (:class:`StaticPass`): the hidden states (each layer's
graph reads them and writes its output back in place), the cache position, the attention mask
and the layers' keyword arguments (position ids, rotary tables). A pass copies its inputs into
them (a handful of small device copies), replays, and reads the hidden states back. The KV
buffers come from the decoder's pool (:mod:`~skipdecode.core.pool`) at fixed addresses; a
replay checks that the cache hands it the buffers it was recorded with.

Capturing a step: its inputs are saved, it runs once on the capture stream (compiling the first
layer of a kind and shape, and initializing whatever the kernels load lazily), the inputs are
restored, and the step is recorded; the replay then computes the pass. The run before recording
writes the same keys and values the replay writes.

Off a GPU there is no graph: the same code runs with every recorded step called on its static
buffers instead of replayed (what a replay computes), which is how the tests check this module on
a CPU.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

__all__ = ["Recorder", "Recordings", "StaticHead", "StaticPass", "check_buffers"]


def check_buffers(
    given: Sequence[torch.Tensor], recorded: Sequence[torch.Tensor], what: str
) -> None:
    """Refuse a replay whose cache buffers are not the tensors ``what`` was recorded with."""
    if any(a is not b for a, b in zip(given, recorded, strict=True)):
        raise RuntimeError(
            f"the cache's buffers for {what} are not the ones its CUDA graph was recorded with; "
            "on the CUDA-graph path the cache comes from the decoder's pool "
            "(SkipDecoder.new_cache)"
        )


class Recordings:
    """Recorded steps by key, each with the cache buffers it was recorded with: at most
    ``limit``, the least recently used dropped first; ``recorded`` counts recordings (dropped
    ones included), ``evicted`` the dropped ones."""

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"recording limit {limit!r} is not allowed: an integer >= 1")
        self.limit = limit
        self.graphs: OrderedDict[Any, tuple[Callable[[], Any], tuple[torch.Tensor, ...]]] = (
            OrderedDict()
        )
        self.recorded = 0
        self.evicted = 0

    def replay(
        self,
        key: Any,
        buffers: tuple[torch.Tensor, ...],
        record: Callable[[], Callable[[], Any]],
        what: str,
    ) -> None:
        """Replay the recording of ``key`` (``record()`` makes it first), after checking it
        reads ``buffers`` (``what``: how an error names it)."""
        known = self.graphs.get(key)
        if known is None:
            known = self.graphs[key] = (record(), buffers)
            self.recorded += 1
            if len(self.graphs) > self.limit:
                self.graphs.popitem(last=False)
                self.evicted += 1
        else:
            self.graphs.move_to_end(key)
        replay, recorded = known
        check_buffers(buffers, recorded, what)
        replay()


class Recorder:
    """Records functions of static buffers as CUDA graphs on one device (on a CPU: keeps them to
    call), all graphs in one memory pool; ``captures`` counts them."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.pool = torch.cuda.graph_pool_handle() if self.cuda else None
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.captures = 0

    def record(self, step: Callable[[], Any], restore: Sequence[torch.Tensor]) -> Callable[[], Any]:
        """Run ``step`` once on the capture stream (the first run of a compiled function
        compiles it), put back the static tensors in ``restore`` it overwrote, and record it:
        the replay, not yet run. The run writes the same cache entries the replay will."""
        saved = [t.clone() for t in restore]
        if self.stream is None:
            step()
            for t, s in zip(restore, saved, strict=True):
                t.copy_(s)
            self.captures += 1
            return step
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            step()
            for t, s in zip(restore, saved, strict=True):
                t.copy_(s)
        self.stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            graph.capture_begin(pool=self.pool)
            try:
                step()
            except BaseException:
                try:  # end the capture, but report the step's error, not the capture's
                    graph.capture_end()
                except RuntimeError:
                    pass
                raise
            graph.capture_end()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        self.captures += 1
        return graph.replay


class StaticPass:
    """The static inputs and recorded steps of one pass shape (batch, tokens, capacity): the
    hidden states ``(B, T, D)``, the cache position ``(T,)``, the mask and the layers' keyword
    arguments, and one recorded step per layer (or per layer set)."""

    def __init__(
        self,
        hidden: torch.Tensor,
        kwargs: dict[str, Any],
        position: torch.Tensor,
        mask: torch.Tensor,
    ):
        self.hidden = hidden.clone()
        self.kwargs = tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, kwargs)
        self.position = position.clone()
        self.mask = mask.clone()
        tensors, self._others = _leaves(self.kwargs)  # non-tensors: fixed in the recordings
        self._inputs = [self.hidden, self.position, self.mask, *tensors]
        self.steps: dict[Any, tuple[Callable[[], Any], tuple[torch.Tensor, ...]]] = {}

    def load(
        self,
        hidden: torch.Tensor,
        kwargs: dict[str, Any],
        position: torch.Tensor,
        mask: torch.Tensor,
    ) -> None:
        """Copy one pass's inputs into the static buffers."""
        tensors, others = _leaves(kwargs)
        given = [hidden, position, mask, *tensors]
        if len(given) != len(self._inputs) or others != self._others:
            raise ValueError(
                f"the pass's inputs ({len(given)} tensors, other arguments "
                f"{others}) are not those its graphs were recorded with "
                f"({len(self._inputs)} tensors, {self._others})"
            )
        for dst, src in zip(self._inputs, given, strict=True):
            if src.shape != dst.shape or src.dtype != dst.dtype:
                raise ValueError(
                    f"a pass input of shape {tuple(src.shape)} ({src.dtype}) where its graphs "
                    f"read {tuple(dst.shape)} ({dst.dtype})"
                )
            dst.copy_(src)

    def replay(
        self,
        key: Any,
        buffers: tuple[torch.Tensor, ...],
        step: Callable[[], torch.Tensor],
        recorder: Recorder,
    ) -> torch.Tensor:
        """Replay the step recorded under ``key`` (a layer or a layer set), or record it first:
        ``step`` computes new hidden states from the static ones, writing the cache ``buffers``
        (checked to be the ones it was recorded with). The static hidden states, updated."""
        known = self.steps.get(key)
        if known is None:

            def into_hidden() -> torch.Tensor:
                return self.hidden.copy_(step())

            known = (recorder.record(into_hidden, [self.hidden]), buffers)
            self.steps[key] = known
        replay, recorded = known
        check_buffers(buffers, recorded, repr(key))
        replay()
        return self.hidden


class StaticHead:
    """The head (final norm, LM head) of one shape ``(B, T)``, recorded on first use."""

    def __init__(self, head: Callable[[torch.Tensor], torch.Tensor], recorder: Recorder):
        self.head, self.recorder = head, recorder
        self.input: torch.Tensor | None = None
        self.logits: torch.Tensor | None = None
        self.replay: Callable[[], Any] | None = None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of ``hidden``: a copy, since the next replay overwrites the static ones."""
        if self.replay is None:
            static_in = self.input = hidden.clone()
            static_out = self.logits = self.head(static_in).clone()

            def into_logits() -> torch.Tensor:
                return static_out.copy_(self.head(static_in))

            self.replay = self.recorder.record(into_logits, [])
        assert self.input is not None and self.logits is not None
        self.input.copy_(hidden)
        self.replay()
        return self.logits.clone()


def _leaves(tree: Any) -> tuple[list[torch.Tensor], list[Any]]:
    """``tree``'s tensors and its other leaves, each in order."""
    leaves, _ = tree_flatten(tree)
    tensors = [v for v in leaves if isinstance(v, torch.Tensor)]
    return tensors, [v for v in leaves if not isinstance(v, torch.Tensor)]
