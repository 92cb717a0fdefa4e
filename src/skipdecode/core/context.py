"""The model's context: every length a configuration can produce, checked before any work.

A stage feeds the model sequences whose longest length its settings bound:

* training: ``dataset.max_source_tokens + dataset.max_target_tokens`` (the prompt, BOS and
  template included, then the target with its EOS);
* evaluation, calibration and the lossless mode: ``dataset.max_source_tokens +
  eval.generation.max_new_tokens`` (the lossless mode's drafted tokens past the output's end
  are never read, and their positions are clamped to the model's last: they need no room).

Each bound is checked against the positions the model runs in this engine
(:func:`context_limit`: ``max_position_embeddings``, ``n_positions`` or the sliding window) before a weight is trained or a batch decoded. ``dataset.on_long_context``
says what happens when a bound exceeds it:

* ``error`` (the default): refused, with one message naming each setting and value, the model's
  limit and the fixes;
* ``truncate``: each stage cuts its prompts to the context less what it adds (the target, or the
  new tokens), with the dataset's own rule (the source's end dropped, the template's tail such as
  ``"TL;DR:"`` kept); the cut prompts are counted in the record as any other truncation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTEXT_RULES",
    "ContextError",
    "Demand",
    "check_context",
    "context_record",
    "ContextLimit",
    "context_limit",
    "context_rule",
    "evaluation_demand",
    "training_demand",
]

#: ``dataset.on_long_context``: refuse a configuration that can exceed the context, or cut prompts
CONTEXT_RULES: tuple[str, ...] = ("error", "truncate")
SOURCE_SETTING = "dataset.max_source_tokens"


class ContextError(ValueError):
    """A configuration can produce sequences longer than the model's context."""


@dataclass(frozen=True)
class ContextLimit:
    """How many positions a model runs in this engine, and the config field that says so."""

    positions: int
    source: str  # e.g. "max_position_embeddings", "sliding_window (max_position_embeddings 32768)"


def context_limit(config: Any) -> ContextLimit:
    """The positions a model of ``config`` (a transformers config) runs in this engine, for every
    family: ``max_position_embeddings`` (GPT-2: ``n_positions``), or the sliding window where a
    family attends through one: one attention mask serves every layer, and windowed attention
    equals full attention only while the sequence fits the window."""
    config = getattr(config, "text_config", None) or config
    field = "max_position_embeddings"
    field = (getattr(config, "attribute_map", None) or {}).get(field, field)  # GPT-2: n_positions
    limit = getattr(config, field, None)
    if not limit:
        raise ContextError(
            f"model_type={getattr(config, 'model_type', None)!r}: its config gives no context "
            f"length ({field})"
        )
    window = _sliding_window(config, getattr(config, "layer_types", None))
    if window and window < int(limit):
        return ContextLimit(int(window), f"sliding_window ({field} {int(limit)})")
    return ContextLimit(int(limit), field)


def _sliding_window(config: Any, layer_types: list[str] | None) -> int | None:
    """The attention window the model applies anywhere, or None for full attention only."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    if layer_types is not None:
        return int(window) if "sliding_attention" in layer_types else None
    return int(window) if getattr(config, "use_sliding_window", True) else None


@dataclass(frozen=True)
class Demand:
    """The longest sequence one stage can feed the model: the prompt bound plus what follows it.

    ``source`` is the prompt's bound (setting name, value); ``rest`` what the stage adds after
    the prompt (the target, the new tokens), each as (setting name, value)."""

    use: str
    source: tuple[str, int]
    rest: tuple[tuple[str, int], ...]

    @property
    def length(self) -> int:
        return self.source[1] + self.reserved

    @property
    def reserved(self) -> int:
        return sum(value for _, value in self.rest)

    def sum_text(self) -> str:
        parts = " + ".join(f"{name}={value}" for name, value in (self.source, *self.rest))
        return f"{parts} = {self.length} tokens"


def context_rule(value: Any, setting: str = "dataset.on_long_context") -> str:
    """The rule ``value`` names (null: ``error``), or a :class:`ContextError` naming the setting."""
    rule = "error" if value is None else value
    if rule not in CONTEXT_RULES:
        raise ContextError(
            f"{setting}={value!r}; allowed: {', '.join(CONTEXT_RULES)} (null: error)"
        )
    return str(rule)


def training_demand(max_source_tokens: int, max_target_tokens: int) -> Demand:
    return Demand(
        "training sequences",
        (SOURCE_SETTING, int(max_source_tokens)),
        (("dataset.max_target_tokens", int(max_target_tokens)),),
    )


def evaluation_demand(
    max_source_tokens: int, max_new_tokens: int, setting: str = "eval.generation.max_new_tokens"
) -> Demand:
    return Demand(
        "evaluation prompts + new tokens (calibration and the lossless mode included)",
        (SOURCE_SETTING, int(max_source_tokens)),
        ((setting, int(max_new_tokens)),),
    )


def check_context(
    demands: Sequence[Demand],
    limit: ContextLimit,
    model: str,
    rule: str | None = "error",
    rule_setting: str | None = "dataset.on_long_context",
) -> dict[str, int]:
    """The prompt bound each stage runs with (``use`` -> tokens): its own where it fits the
    context; where it does not, a :class:`ContextError` (rule ``error``) or the context less what
    the stage adds (rule ``truncate``). A stage that adds the whole context or more is refused
    under either rule. ``rule_setting``: the setting a refusal offers to switch to ``truncate``
    (None: none to offer, as for API calls)."""
    rule = context_rule(rule, rule_setting or "rule")
    over = [d for d in demands if d.length > limit.positions]
    no_room = [d for d in over if d.reserved >= limit.positions]
    if over and (rule == "error" or no_room):
        refused = over if rule == "error" else no_room
        raise ContextError(
            _message(refused, limit, model, rule_setting if rule == "error" else None)
        )
    return {
        d.use: d.source[1] if d.length <= limit.positions else limit.positions - d.reserved
        for d in demands
    }


def context_record(
    demand: Demand, limit: ContextLimit, rule: str | None, fitted: int
) -> dict[str, Any]:
    """What a stage's check found, for its record: the limit and where it comes from, the rule,
    the longest sequence its settings allow, and the prompt bound it runs with."""
    return {
        "positions": limit.positions,
        "source": limit.source,
        "rule": rule or "error",
        "longest_sequence": demand.length,
        "max_source_tokens": fitted,
    }


def _message(
    over: Sequence[Demand], limit: ContextLimit, model: str, rule_setting: str | None
) -> str:
    lines = [
        f"model={model} runs {limit.positions} positions ({limit.source}), and this "
        "configuration can feed it longer sequences:"
    ]
    lines += [f"  - {d.use}: {d.sum_text()}" for d in over]
    room = [d for d in over if d.reserved < limit.positions]
    most: dict[str, int] = {}  # per prompt setting, the largest value every stage can run
    for d in room:
        most[d.source[0]] = min(
            most.get(d.source[0], limit.positions), limit.positions - d.reserved
        )
    fixes = [f"{name}={value} or less" for name, value in most.items()]
    for d in over:
        for name, value in d.rest:
            other = d.source[1] + d.reserved - value
            if other < limit.positions:
                fixes.append(f"{name}={limit.positions - other} or less")
    fixes.append("a model with a longer context")
    if rule_setting and room:
        fixes.append(
            f"{rule_setting}=truncate (each stage cuts its prompts so that the prompt and what "
            "follows it fit; the cut prompts are counted in the record)"
        )
    return "\n".join(lines) + "\nFixes: " + "; ".join(dict.fromkeys(fixes))
