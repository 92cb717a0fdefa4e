"""The decimal numbers README's and ``docs/``' prose states, each found in a source its section
names, or worked out in place.

A section (a ``#`` heading and the text down to the next) names its sources: every path under
``results/`` it mentions, in a link, a code span, fenced code or plain text (shell braces and
globs expanded); a named path that does not exist is a difference. Every decimal number its
prose states (a digit after a point: ``2.28x``, ``1.58 ms``, ``32.73``, ``+0.32``, ``44.9%``)
must be one of them gives:

- printed by a Markdown or CSV page (a folder names every page under it), at the quoted digits or
  rounded to them from a printed number with more (half up or half to even); a number quoted
  with ``-`` (or ``−``) must be printed with it, one quoted with ``+`` or without a sign
  (``0.82 points lower``) may be printed either way;
- stored in a JSON record named by its own path, rounded to the quoted digits: as stored or
  times 100 (a score stored as a fraction is quoted in points, a share as a percentage), and
  with ``ms`` or ``GiB`` quoted right after the number, times 1,000 (seconds) or over 2^30
  (bytes).

A result worked out in place (``5 / (4 x 0.25 + 2.49) = 1.43x``: numbers joined by ``+ - x *
× /`` and brackets, ``=``, a decimal number) is recomputed instead: some value the expression
takes with each of its numbers anywhere within its rounding must round to it (a result quoted
with ``%`` is read over 100).

Not read: intervals with their point estimate (:mod:`.quotes` checks them whole), generated
blocks (checked cell by cell against their pages), code spans, fenced code, comments and link
targets, whole numbers (counts, steps, dates), and a number glued to a letter other than ``x``
or a unit above, or to another point (a model's size, ``OPT-6.7B``; a version, ``2.13.0``). A
section that states a decimal number and names no source is a difference: the reader cannot
tell where it comes from. What this cannot catch: a number is matched to a source, not to a
cell, so one copied from the wrong row of the right page passes, and a source holding many
numbers (a folder, a record of raw timings) gives more numbers by chance than one page does.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ..sweeps.excerpts import documents
from .findings import Findings
from .quotes import QUOTE

__all__ = ["check_prose", "expand", "stated_numbers", "worked_out"]

SOURCE = re.compile(r"(?<![\w\-.])(?:\.\./)*(results/[\w.\-{},*]+(?:/[\w.\-{},*]+)*/?)")
_DECIMAL = r"\d{1,3}(?:,\d{3})+\.\d+|\d+\.\d+"  # thousands may be separated by commas
#: The units a quoted number may carry, and the scales from a stored number to them.
UNITS = {"": (1.0, 100.0), "%": (1.0, 100.0), "ms": (1.0, 1000.0), "GiB": (1.0, 2.0**-30)}
#: A decimal number of the prose: its sign where one is written right before it, and its unit.
STATED = re.compile(
    rf"(?<![A-Za-z0-9.,_])([+\-\u2212]?)({_DECIMAL})(?!\d|\.\w|,\d)"
    r"(%|\s?ms\b|\s?GiB\b|(?![A-Za-wyz_]))"
)
_PRINTED = re.compile(rf"(?<![\w.])([+\-\u2212]?)({_DECIMAL})")
_CELL = re.compile(r"(?<![\w.])([+\-\u2212]?)(\d+\.\d+)")  # a CSV cell: commas split cells
_CODE = re.compile(r"`[^`]*`")  # code spans: commands, settings and paths, not results
_UNREAD = (_CODE, re.compile(r"\]\([^)]*\)"), re.compile(r"<!--.*?-->"), QUOTE, SOURCE)
_OPERAND = r"\(*\s*[\-\u2212]?\d+(?:\.\d+)?\s*\)*"
_OPERATOR = r"\s*(?:[+\-/*\u00d7\u2212]|\sx\s)\s*"
#: A result worked out in place: numbers joined by at least one operator, ``=``, a decimal.
WORKED = re.compile(
    rf"(?<![\w.])({_OPERAND}(?:{_OPERATOR}{_OPERAND})+)\s*=\s*([+\-\u2212]?\d+\.\d+)(%?)"
)
_ROUNDINGS = (ROUND_HALF_UP, ROUND_HALF_EVEN)

Span = tuple[float, float]


def _span(node: ast.AST, text: str) -> Span:
    """What an expression can be, each number in it read as rounded to its printed digits."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        literal = ast.get_source_segment(text, node) or ""
        half = 0.5 * 10 ** -len(literal.split(".")[1]) if "." in literal else 0.0
        return node.value - half, node.value + half
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        low, high = _span(node.operand, text)
        return -high, -low
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
    """The line without the results it works out in place, and each of them: (expression, the
    stated result, the result if some value the expression takes rounds to it, else the
    expression's middle value at the result's digits, or None where it is not arithmetic)."""
    found = []
    line = _CODE.sub(" ", line)
    for match in WORKED.finditer(line):
        expression, result, percent = match.group(1).strip(), match.group(2), match.group(3)
        while expression.count("(") > expression.count(")") and expression.startswith("("):
            expression = expression[1:].strip()
        text = expression.replace("\u2212", "-").replace("\u00d7", "*").replace(" x ", " * ")
        try:
            low, high = _span(ast.parse(text, mode="eval").body, text)
        except (SyntaxError, ValueError):
            found.append((expression, result, None))
            continue
        scale = 100.0 if percent else 1.0
        places = len(result.split(".")[1])
        half = 0.5 * 10**-places
        value = float(result.replace("\u2212", "-"))
        right = low * scale <= value + half and value - half <= high * scale
        found.append(
            (expression, result, result if right else f"{(low + high) * scale / 2:.{places}f}")
        )
    return WORKED.sub(lambda m: m.group(1), line), found


def expand(source: str) -> list[str]:
    """A named source's paths: each ``{a,b}`` read as either (shell braces)."""
    match = re.search(r"\{([^{}]*)\}", source)
    if not match:
        return [source]
    head, tail = source[: match.start()], source[match.end() :]
    return [path for part in match.group(1).split(",") for path in expand(head + part + tail)]


def stated_numbers(line: str) -> list[tuple[str, str]]:
    """The decimal numbers a line of prose states: (the number, signed as written with ``−``
    read as ``-``; its unit, one of :data:`UNITS`)."""
    for pattern in _UNREAD:
        line = pattern.sub(" ", line)
    return [
        ((sign + digits).replace("\u2212", "-"), unit.strip())
        for sign, digits, unit in STATED.findall(line)
    ]


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


def _rounded(values: Iterable[str], places: int) -> set[str]:
    """Every value (a decimal string) rounded to ``places`` decimals, half up and half to even."""
    step = Decimal(1).scaleb(-places)
    out = set()
    for value in values:
        try:
            exact = Decimal(value)
        except InvalidOperation:
            continue
        if exact.is_finite():
            out.update(str(exact.quantize(step, rounding=r)) for r in _ROUNDINGS)
    return out


class _Source:
    """What one named source prints and stores, with its roundings made once per digits."""

    def __init__(self, printed: set[str], stored: list[float]) -> None:
        self.printed = printed  # as printed: '-' kept, '+' and commas dropped
        self.stored = stored
        self._at: dict[tuple[int, str], set[str]] = {}

    def _at_places(self, places: int, unit: str) -> set[str]:
        if (places, unit) not in self._at:
            longer = [p for p in self.printed if len(p.split(".")[1]) > places]
            scaled = [repr(v * s) for v in self.stored for s in UNITS[unit]]
            self._at[places, unit] = _rounded([*longer, *scaled], places)
        return self._at[places, unit]

    def states(self, number: str, unit: str) -> bool:
        """Whether ``number`` (signed as the prose quotes it) is printed or stored here."""
        digits = number.lstrip("+-").replace(",", "")
        sign = number[0] if number[0] in "+-" else ""
        wanted = {"-": {"-" + digits}, "+": {digits}, "": {digits, "-" + digits}}[sign]
        places = len(digits.split(".")[1])
        return bool(wanted & self.printed or wanted & self._at_places(places, unit))


def _printed(page: Path) -> Iterator[str]:
    text = page.read_text(encoding="utf-8", errors="replace")
    if page.suffix == ".csv":
        found = (m for row in csv.reader(io.StringIO(text)) for c in row for m in _CELL.findall(c))
    else:
        found = iter(_PRINTED.findall(text))
    for sign, digits in found:
        yield ("-" if sign in ("-", "\u2212") else "") + digits.replace(",", "")


class _Sources:
    """What each named source under the repository root prints and stores, read once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._read: dict[str, _Source | None] = {}

    def __getitem__(self, named: str) -> _Source | None:
        """The source, or None where the name matches no path."""
        if named not in self._read:
            self._read[named] = self._source(named)
        return self._read[named]

    def _source(self, named: str) -> _Source | None:
        try:
            paths = sorted({p for pattern in expand(named) for p in self.root.glob(pattern)})
        except ValueError:  # a pattern glob cannot read ('**' inside a name)
            return None
        if not paths:
            return None
        printed: set[str] = set()
        stored: list[float] = []
        for path in paths:
            if path.is_dir():
                pages = [p for p in sorted(path.rglob("*")) if p.suffix in (".md", ".csv")]
            else:
                pages = [path] if path.suffix in (".md", ".csv") else []
            for page in pages:
                printed.update(_printed(page))
            if path.suffix == ".json" and path.is_file():
                stored += _numbers(json.loads(path.read_text(encoding="utf-8")))
        return _Source(printed, stored)


def _sections(text: str) -> Iterator[tuple[list[tuple[int, str]], list[tuple[int, str]]]]:
    """The document's sections: the numbered lines that may name sources (fenced code included:
    a command names what it writes) and the numbered prose lines (outside generated blocks,
    fenced code and comments)."""
    lines: list[tuple[int, str]] = []
    prose: list[tuple[int, str]] = []
    in_block = in_code = in_comment = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        elif in_code:
            lines.append((number, line))
        elif line.startswith("<!-- generated by make docs:"):
            in_block = True
        elif line.startswith("<!-- end:"):
            in_block = False
        elif in_comment or (line.lstrip().startswith("<!--") and "-->" not in line):
            in_comment = "-->" not in line
        elif not in_block:
            if line.startswith("#"):
                yield lines, prose
                lines, prose = [], []
            lines.append((number, line))
            prose.append((number, line))
    yield lines, prose


def _check_section(f: Findings, name: str, lines, prose, sources: _Sources) -> None:
    named: dict[str, int] = {}
    for number, line in lines:
        for path in SOURCE.findall(line):
            named.setdefault(path.rstrip(".,/"), number)
    for path, number in named.items():
        if sources[path] is None:
            f.differences.append(f"{name}:{number}: {path} is named, and no such path exists")
    found = [s for s in (sources[p] for p in sorted(named)) if s is not None]
    where = ", ".join(sorted(named))
    for number, line in prose:
        line, worked = worked_out(line)
        for expression, result, gives in worked:
            f.checked += 1
            if gives != result:
                f.differences.append(
                    f"{name}:{number}: {expression} = {result}, but the arithmetic gives "
                    f"{gives or 'nothing (not arithmetic)'}"
                )
        for stated, unit in stated_numbers(line):
            f.checked += 1
            if not named:
                f.differences.append(
                    f"{name}:{number}: {stated} is stated in a section that names no source "
                    "under results/"
                )
            elif not any(source.states(stated, unit) for source in found):
                f.differences.append(
                    f"{name}:{number}: {stated} is printed by none of its section's sources "
                    f"({where})"
                )


def check_prose(root: Path) -> Findings:
    """Every decimal number of README's and ``docs/``' prose against the sources its section
    names (module doc)."""
    f = Findings("stated in README and docs/ prose")
    sources = _Sources(root)
    for document in documents(root):
        name = str(document.relative_to(root))
        for lines, prose in _sections(document.read_text(encoding="utf-8")):
            _check_section(f, name, lines, prose, sources)
    return f
