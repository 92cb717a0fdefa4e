"""The package's shape, enforced: rooms import downward only, no import cycles, no private names
across modules, every module says what it owns, and no module grows past its size budget.

Every ``import`` counts, including those inside functions: a lazy import that dodges a cycle is
still a cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "skipdecode"

#: Rooms from the bottom of the data flow to the top; a module may import its own room and the
#: rooms below it. ``shared`` is the top-level utility modules every room may use.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("shared",),  # arguments, config, io, locks, manifest, paths, progress, provenance
    ("core",),
    ("schedules", "models", "data"),
    ("training",),
    ("evaluation",),
    ("experiments",),
    ("entry",),  # the package root and the thin `python -m skipdecode.<x>` modules
)
SHARED = {"arguments", "config", "io", "locks", "manifest", "paths", "progress", "provenance"}
ENTRY = {
    "__init__",
    "train",
    "evaluate",
    "sweep",
    "aggregate",
    "bench",
    "dashboard",
    "audit",
    "search",
}
#: Modules allowed past 400 lines, and why.
LONG_MODULES = {
    "data/synthetic.py": "the synthetic task's grammar tables",
}
MAX_LINES = 400
#: No function or method longer than this many lines (signature and docstring included).
MAX_FUNCTION_LINES = 80
#: Functions still past it, to be split (this list only shrinks; a new long function fails).
LONG_FUNCTIONS: dict[str, set[str]] = {}


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["skipdecode", *parts])


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "entry"
    if len(parts) == 2 and parts[1] in ENTRY:
        return "entry"
    if len(parts) == 2 and parts[1] in SHARED:
        return "shared"
    return parts[1]


def _rank(room: str) -> int:
    for i, rooms in enumerate(LAYERS):
        if room in rooms:
            return i
    raise AssertionError(f"room {room!r} is not in LAYERS: place it in the data flow")


def _imports(module: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported skipdecode module, names taken from it, line) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("skipdecode"):
                    out.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("skipdecode"):
                out.append((target, [a.name for a in node.names], node.lineno))
    return out


def _resolve(target: str, name: str, modules: dict[str, Path]) -> str:
    """``from target import name``: the module it reaches (a submodule, or target itself)."""
    sub = f"{target}.{name}"
    return sub if sub in modules else target


def _graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for target, names, _ in _imports(module, path):
            for reached in [_resolve(target, n, modules) for n in names] or [target]:
                if reached in modules and reached != module:
                    graph[module].add(reached)
    return graph


def find_cycle(root: Path = PACKAGE) -> list[str] | None:
    """One import cycle among the package's modules, or None."""
    graph = _graph(root)
    # A package's __init__ re-exporting its own submodules is not a cycle of the design.
    edges = {
        m: {t for t in ts if not (m != "skipdecode" and t.startswith(m + "."))}
        for m, ts in graph.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def upward_imports(root: Path = PACKAGE) -> list[str]:
    """Imports from a room into a room above it in the data flow."""
    modules = _modules(root)
    wrong = []
    for module, path in modules.items():
        for target, names, line in _imports(module, path):
            for reached in [_resolve(target, n, modules) for n in names] or [target]:
                if reached not in modules:
                    continue
                src, dst = _room(module), _room(reached)
                if src != dst and _rank(dst) > _rank(src):
                    wrong.append(
                        f"{path.relative_to(root)}:{line} ({src}) imports {reached} ({dst})"
                    )
    return wrong


def private_imports(root: Path = PACKAGE) -> list[str]:
    """``from x import _name`` where ``x`` is another module."""
    modules = _modules(root)
    leaks = []
    for module, path in modules.items():
        for target, names, line in _imports(module, path):
            for name in names:
                if name.startswith("_") and _resolve(target, name, modules) != module:
                    leaks.append(f"{path.relative_to(root)}:{line} imports {target}.{name}")
    return leaks


def studies_imports(root: Path = PACKAGE) -> list[str]:
    """Every import of the ``studies`` folder from the package (it may only go the other way)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            found += [
                f"{path.relative_to(root)}:{node.lineno} imports {n}"
                for n in names
                if n == "studies" or n.startswith("studies.")
            ]
    return found


def test_the_package_never_imports_the_studies():
    wrong = studies_imports()
    assert not wrong, "the package imports the studies:\n" + "\n".join(wrong)


def test_no_import_cycles():
    cycle = find_cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_point_down_the_data_flow():
    wrong = upward_imports()
    assert not wrong, "imports that point up the data flow:\n" + "\n".join(wrong)


def test_no_private_names_cross_modules():
    leaks = private_imports()
    assert not leaks, "private names imported across modules:\n" + "\n".join(leaks)


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_module_has_docstring_and_fits(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{path.relative_to(PACKAGE)} has no module docstring"
    rel = str(path.relative_to(PACKAGE))
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if rel not in LONG_MODULES:
        assert lines <= MAX_LINES, f"{rel} has {lines} lines (> {MAX_LINES}); split it or state why"


def long_functions(root: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module path: {function names}}`` of every function over :data:`MAX_FUNCTION_LINES`."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    found.setdefault(str(path.relative_to(root)), set()).add(node.name)
    return found


def test_no_function_grows_past_its_budget():
    found = long_functions()
    new = {m: names - LONG_FUNCTIONS.get(m, set()) for m, names in found.items()}
    new = {m: sorted(n) for m, n in new.items() if n}
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines (split them): {new}"
    fixed = {m: sorted(n - found.get(m, set())) for m, n in LONG_FUNCTIONS.items()}
    fixed = {m: n for m, n in fixed.items() if n}
    assert not fixed, f"now within {MAX_FUNCTION_LINES} lines: remove from LONG_FUNCTIONS {fixed}"


def test_architecture_checks_see_planted_violations(tmp_path):
    """A small package with a cycle, an upward import and a private import is caught."""
    root = tmp_path / "skipdecode"
    (root / "core").mkdir(parents=True)
    (root / "experiments").mkdir()
    (root / "__init__.py").write_text('"""x"""\n')
    (root / "core" / "__init__.py").write_text('"""x"""\n')
    (root / "experiments" / "__init__.py").write_text('"""x"""\n')
    (root / "core" / "a.py").write_text("from ..experiments.b import run\n")  # upward
    (root / "experiments" / "b.py").write_text(
        "def run():\n    from skipdecode.core.a import _hidden\n"  # private, and a cycle
    )
    assert find_cycle(root) == [
        "skipdecode.core.a",
        "skipdecode.experiments.b",
        "skipdecode.core.a",
    ]
    assert upward_imports(root) == [
        "core/a.py:1 (core) imports skipdecode.experiments.b (experiments)"
    ]
    assert private_imports(root) == ["experiments/b.py:2 imports skipdecode.core.a._hidden"]
    (root / "core" / "c.py").write_text("def f():\n    from studies.spec_bench import x\n")
    assert studies_imports(root) == ["core/c.py:2 imports studies.spec_bench"]
    (root / "core" / "d.py").write_text("def long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert long_functions(root) == {"core/d.py": {"long"}}


def test_decoding_and_evaluating_import_neither_lightning_nor_the_compiler():
    """Lightning is imported where a model trains (or a ``.ckpt`` is exported), torch's
    compiler where a decoder compiles: an evaluation of an exported model, a decode on the
    eager path and the CLIs' ``--help`` start without either (about 4 s of imports here)."""
    code = (
        "import sys, skipdecode.core.engine, skipdecode.evaluation.evaluate\n"
        "print(sorted(m for m in ('pytorch_lightning', 'torch._inductor', 'torch._dynamo')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]
