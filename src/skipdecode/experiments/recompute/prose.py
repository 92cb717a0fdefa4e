"""The decimal numbers README's and ``docs/``' prose states, each found in a source its section
names.

A section (a heading and the text down to the next heading) names its sources: every path under
``results/`` it mentions, in a link, a code span or plain text. Every decimal number its prose
states (a digit after a point: ``2.28x``, ``1.58 ms``, ``32.73``, ``+0.32``, ``44.9%``) must be
one of them prints:

- a Markdown or CSV page, the same digits (commas dropped); a folder names every page under it;
  a number quoted with a sign must be printed with that sign (``+`` read as none, ``−`` as
  ``-``), one quoted without (``0.82 points lower``) may be printed with either;
- a JSON record named by its own path: a number it stores that rounds to the quoted digits, as
  stored, times 100 (a share quoted as a percentage), times 1,000 (seconds quoted as
  milliseconds) or over 2^30 (bytes quoted in GiB).

Not read here: intervals with their point estimate (:mod:`.quotes` checks them whole), generated
blocks (checked cell by cell against their pages), code spans and link targets, whole numbers
(counts, steps, dates), and a number glued to a letter other than ``x`` or to another point (a
model's size, ``OPT-6.7B``; a version, ``2.13.0``). A section that states a decimal number and
names no source under ``results/`` is a difference: the reader cannot tell where it comes from.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sweeps.excerpts import documents
from .findings import Findings
from .quotes import QUOTE

__all__ = ["check_prose", "stated_numbers"]

SOURCE = re.compile(r"results/[\w./\-{},*]*[\w/}*]")
_DECIMAL = r"\d{1,3}(?:,\d{3})+\.\d+|\d+\.\d+"  # thousands may be separated by commas
#: A decimal number of the prose, with its sign where one is written right before it.
STATED = re.compile(rf"(?<![\w.,])([+\-\u2212]?)({_DECIMAL})(?!\d|\.\d|,\d|[A-Za-wyz_])")
_PRINTED = re.compile(rf"(?<![\w.])([+\-\u2212]?)({_DECIMAL})")
_CODE = re.compile(r"`[^`]*`")  # code spans: commands, settings and paths, not results
_UNREAD = (
    _CODE,
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"<!--.*?-->"),  # comments
    QUOTE,  # intervals with their point estimate
    SOURCE,
)
_SCALES = (1, 100, 1000, 2**-30)
#: A result worked out in place: an arithmetic expression, ``=`` and a decimal number.
_WORKED = re.compile(r"([\d.,()+\-/x ]*[\d)])\s*=\s*(\d+\.\d+)(?=x?\b|x)")
Span = tuple[float, float]


def _span(node: ast.AST, text: str) -> Span:
    """What an expression can be, each number in it read as rounded to its printed digits."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        literal = ast.get_source_segment(text, node) or ""
        half = 0.5 * 10 ** -len(literal.split(".")[1]) if "." in literal else 0.0
        return node.value - half, node.value + half
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        (a, b), (c, d) = _span(node.left, text), _span(node.right, text)
        if isinstance(node.op, ast.Add):
            return a + c, b + d
        if isinstance(node.op, ast.Sub):
            return a - d, b - c
        if isinstance(node.op, ast.Div):
            if c <= 0 <= d:
                raise ValueError("a divisor that may be 0")
            c, d = 1 / d, 1 / c
        corners = (a * c, a * d, b * c, b * d)
        return min(corners), max(corners)
    raise ValueError("not arithmetic")


def worked_out(line: str) -> tuple[str, list[tuple[str, str, str | None]]]:
    """The line without the results it works out in place (``5 / (4 x 0.25 + 2.49) = 1.43x``),
    and each of them: (expression, stated result, what the expression gives, or None where it
    is not arithmetic). The result is right when some value the expression can take, each of its
    numbers anywhere within its rounding, rounds to it."""
    found = []
    line = _CODE.sub(" ", line)
    for match in _WORKED.finditer(line):
        expression, result = re.sub(r"^[^\d(]+", "", match.group(1)), match.group(2)
        while expression.count("(") > expression.count(")") and expression.startswith("("):
            expression = expression[1:].strip()
        text = expression.replace(",", "").replace(" x ", " * ")
        try:
            low, high = _span(ast.parse(text, mode="eval").body, text)
        except (SyntaxError, ValueError):
            found.append((expression, result, None))
            continue
        places = len(result.split(".")[1])
        half = 0.5 * 10**-places
        right = low <= float(result) + half and float(result) - half <= high
        middle = f"{(low + high) / 2:.{places}f}"
        found.append((expression, result, result if right else middle))
    return _WORKED.sub(lambda m: m.group(1), line), found


def expand(source: str) -> list[str]:
    """A named source's paths: ``{a,b}`` read as either (shell braces), innermost first."""
    match = re.search(r"\{([^{}]*)\}", source)
    if not match:
        return [source]
    head, tail = source[: match.start()], source[match.end() :]
    return [path for part in match.group(1).split(",") for path in expand(head + part + tail)]


def stated_numbers(line: str) -> list[str]:
    """The decimal numbers a line of prose states, signs as written (``−`` read as ``-``)."""
    for pattern in _UNREAD:
        line = pattern.sub(" ", line)
    return [(sign + digits).replace("\u2212", "-") for sign, digits in STATED.findall(line)]


def _numbers(data: Any) -> Iterator[float]:
    if isinstance(data, bool):
        return
    if isinstance(data, (int, float)):
        yield float(data)
    elif isinstance(data, dict):
        for value in data.values():
            yield from _numbers(value)
    elif isinstance(data, list):
        for value in data:
            yield from _numbers(value)


@dataclass
class _Source:
    printed: set[str]  # signed as printed ('' or '-'), commas dropped
    stored: list[float]

    def states(self, number: str) -> bool:
        """Whether ``number``, as the prose quotes it, is printed or stored here."""
        sign = number[0] if number[0] in "+-" else ""
        digits = number.lstrip("+-").replace(",", "")
        wanted = {"-": {"-" + digits}, "+": {digits}, "": {digits, "-" + digits}}[sign]
        if wanted & self.printed:
            return True
        places = len(digits.split(".")[1])
        longer = (float(p) for p in self.printed if len(p.split(".")[1]) > places)
        candidates = [*(v * s for v in self.stored for s in _SCALES), *longer]
        return any(f"{value:.{places}f}" in wanted for value in candidates)


class _Sources:
    """What each path under the repository root prints and stores, read once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._read: dict[str, _Source] = {}

    def __getitem__(self, path: str) -> _Source:
        if path not in self._read:
            self._read[path] = self._source(path)
        return self._read[path]

    def _source(self, named: str) -> _Source:
        """A named source: a page, a record, a folder (every page under it) or a glob of them."""
        source = _Source(set(), [])
        for path in sorted(p for pattern in expand(named) for p in self.root.glob(pattern)):
            if path.is_dir():
                pages = [p for p in sorted(path.rglob("*")) if p.suffix in (".md", ".csv")]
            else:
                pages = [path] if path.suffix in (".md", ".csv") else []
            for page in pages:
                text = page.read_text(encoding="utf-8", errors="replace")
                for sign, digits in _PRINTED.findall(text):
                    signed = "-" if sign in ("-", "\u2212") else ""
                    source.printed.add(signed + digits.replace(",", ""))
            if path.suffix == ".json" and path.is_file():
                source.stored += _numbers(json.loads(path.read_text(encoding="utf-8")))
        return source


def _sections(text: str) -> Iterator[tuple[list[str], list[tuple[int, str]]]]:
    """The document's sections, each as the sources its lines name (fenced code included: a
    command names what it writes) and its numbered prose lines (outside generated blocks and
    fenced code)."""
    named: list[str] = []
    prose: list[tuple[int, str]] = []
    in_block = in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        elif in_code:
            named += SOURCE.findall(line)
        elif line.startswith("<!-- generated by make docs:"):
            in_block = True
        elif line.startswith("<!-- end:"):
            in_block = False
        elif not in_block:
            if line.startswith("#"):
                yield named, prose
                named, prose = [], []
            named += SOURCE.findall(line)
            prose.append((number, line))
    yield named, prose


def check_prose(root: Path) -> Findings:
    """Every decimal number of README's and ``docs/``' prose against the sources its section
    names."""
    f = Findings("stated in README and docs/ prose")
    sources = _Sources(root)
    for document in documents(root):
        name = str(document.relative_to(root))
        for sources_named, section in _sections(document.read_text(encoding="utf-8")):
            named = sorted({path.rstrip("/") for path in sources_named})
            for number, line in section:
                line, worked = worked_out(line)
                for expression, result, gives in worked:
                    f.checked += 1
                    if gives != result:
                        f.differences.append(
                            f"{name}:{number}: {expression} = {result}, but the arithmetic gives "
                            f"{gives or 'nothing (not arithmetic)'}"
                        )
                for stated in stated_numbers(line):
                    f.checked += 1
                    if not named:
                        f.differences.append(
                            f"{name}:{number}: {stated} is stated in a section that names no "
                            "source under results/"
                        )
                    elif not any(sources[path].states(stated) for path in named):
                        f.differences.append(
                            f"{name}:{number}: {stated} is printed by none of its section's "
                            f"sources ({', '.join(named)})"
                        )
    return f
