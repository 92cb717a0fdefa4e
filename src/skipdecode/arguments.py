"""Types for command-line options that refuse a value out of range by the option's name.

``type=at_least(1)`` makes argparse answer ``argument --repeats: 0 is not allowed (an integer
>= 1)`` before anything loads, where the value would otherwise fail deep inside a run (an empty
list's first item) or, worse, be read as something else (``-1`` jobs as "every core").
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["at_least", "fraction"]


def _number(text: str, kind: type) -> Any:
    what = "an integer" if kind is int else "a number"
    try:
        return kind(text), what
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def at_least(minimum: float, kind: type = int) -> Callable[[str], Any]:
    """A ``kind`` number ``>= minimum``."""

    def parse(text: str) -> Any:
        value, what = _number(text, kind)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is not allowed ({what} >= {minimum:g})")
        return value

    parse.__name__ = kind.__name__  # argparse's own messages name the kind
    return parse


def fraction(text: str) -> float:
    """A number in (0, 1]."""
    value, _ = _number(text, float)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not allowed (a number in (0, 1])")
    return value
