"""What an evaluation's speed is measured against: the ``full`` schedule on the same model and
path (``eval.speed.baseline``), and the decoders a user would otherwise run on the same weights
(``eval.speed.references``), timed on the same batches for the same number of tokens.

References (each greedy, EOS off, on the evaluated model's own weights):

* ``loop``: the gpt-fast-style compiled one-token loop (:mod:`..core.fast_loop`; CUDA graphs
  on a GPU). One loop per (rows, cache length), the cache length
  rounded up to a multiple of :data:`CACHE_BUCKET` so batches share compiled shapes (its
  attention spans the bucket, masked, as gpt-fast's spans its maximum length);
* ``generate``: transformers' ``generate``, eager;
* ``generate_compiled``: ``generate`` with a static cache and its own ``torch.compile``.

A shape a reference has not run yet (the loop: rows and bucketed cache length; compiled
``generate``: rows and cache length; eager ``generate``: its first call) runs once untimed first
(compiling and recording graphs); those seconds are kept apart (``first_run_seconds``), never
counted as decoding. The record gives each reference's measured decode speedup by the baseline's
own definition (:func:`.speed.paired_speedups`), round by round; its end-to-end speedup adds each
side's own prefill (a reference's prefill is its own code, not the same work).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..core.compiled import RECOMPILE_LIMIT
from ..core.costs import transformers_generate_seconds
from ..core.fast_loop import FastLoop
from ..schedules import FullSchedule, Schedule

__all__ = ["CACHE_BUCKET", "REFERENCES", "References", "speed_settings"]

#: The references ``eval.speed.references`` may name.
REFERENCES = ("loop", "generate", "generate_compiled")
#: The loop's cache lengths are rounded up to a multiple of this (fewer compiled shapes).
CACHE_BUCKET = 64


class References:
    """The references of one evaluation, each timed by :meth:`time` (module docstring).
    ``compiled``: the loop's step compiled (off only for tests of the plumbing)."""

    def __init__(self, model: Any, names: Sequence[str], pad_id: int, compiled: bool = True):
        self.model, self.names, self.pad_id, self.compiled = model, tuple(names), pad_id, compiled
        self.device = next(model.parameters()).device
        self._loops: dict[tuple[int, int], Any] = {}
        self._seen: set[tuple[Any, ...]] = set()
        self.first_run_seconds: dict[str, float] = dict.fromkeys(self.names, 0.0)
        # one loop per shape shares one code object, and compiled generate recompiles its call
        # per shape: past dynamo's default 8 recompiles either would run eager, silently
        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(limit, RECOMPILE_LIMIT)

    def _shape(self, name: str, rows: int, width: int, n: int) -> tuple[Any, ...]:
        """What a reference compiles or records per (see the module docstring)."""
        if name == "loop":
            return (name, rows, -(-(width + n) // CACHE_BUCKET) * CACHE_BUCKET)
        return (name, rows, width + n) if name == "generate_compiled" else (name,)

    def _run(self, name: str, ids: torch.Tensor, mask: torch.Tensor, n: int) -> tuple[float, float]:
        if name == "loop":
            _, rows, length = self._shape(name, *ids.shape, n)
            loop = self._loops.get((rows, length))
            if loop is None:
                loop = FastLoop(self.model, rows, length, compiled=self.compiled)
                self._loops[(rows, length)] = loop
            _, prefill, decode = loop.generate(ids, mask, n)
            return prefill, decode
        return transformers_generate_seconds(
            self.model, ids, mask, n, self.pad_id, compiled=name == "generate_compiled"
        )

    def time(self, name: str, ids: torch.Tensor, mask: torch.Tensor, n: int) -> tuple[float, float]:
        """(prefill, decode) seconds of ``name`` generating ``n`` tokens for the batch (moved to
        the model's device); a shape it has not run yet runs once untimed first."""
        ids, mask = ids.to(self.device), mask.to(self.device)
        shape = self._shape(name, *ids.shape, n)
        if shape not in self._seen:
            start = time.perf_counter()
            self._run(name, ids, mask, n)
            self.first_run_seconds[name] += time.perf_counter() - start
            self._seen.add(shape)
        return self._run(name, ids, mask, n)


def speed_settings(
    speed_cfg: Mapping[str, Any], schedule: Schedule, decoder: Any
) -> tuple[str | None, Schedule | None, References | None]:
    """From ``eval.speed``: the baseline as recorded (``'full'``, ``'self'`` where the schedule
    is ``full`` itself, or None), the schedule to time against (None: no timed baseline), and
    the references to time on ``decoder``'s model (None: none). The values were checked by
    :func:`~skipdecode.evaluation.settings.check_eval_settings` before anything loaded."""
    baseline = speed_cfg.get("baseline")
    base_schedule = None
    if baseline == "full":
        if schedule.describe().get("name") == "full":
            baseline = "self"
        else:
            base_schedule = FullSchedule(decoder.num_layers)
    names = speed_cfg.get("references") or []
    if not names:
        return baseline, base_schedule, None
    pad_id = decoder.tokenizer.pad_token_id
    return baseline, base_schedule, References(decoder.model, dict.fromkeys(names), pad_id)
