"""What a user types: every make target documented in the README as `make help` lists it, and
every console script installed with a --help that says what it does."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from offline_env import offline_env

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "skipdecode-train": "train",
    "skipdecode-evaluate": "evaluat",
    "skipdecode-sweep": "sweep",
    "skipdecode-aggregate": "table",
    "skipdecode-bench": "benchmark",
    "skipdecode-dashboard": "report",
}


def _make_targets() -> dict[str, str]:
    text = (ROOT / "Makefile").read_text()
    return dict(re.findall(r"^([a-zA-Z0-9_-]+):[^\n#]*## (.*)$", text, re.M))


def test_readme_lists_every_make_target_as_make_help_does():
    targets = _make_targets()
    assert {"test", "demo", "reproduce-cpu", "compare", "bench"} <= set(targets)
    readme = (ROOT / "README.md").read_text()
    documented = dict(re.findall(r"^\| `make ([a-zA-Z0-9_-]+)` \| (.*) \|$", readme, re.M))
    assert documented == {t: d.replace("|", "/") for t, d in targets.items()}


def test_readme_is_a_front_door_with_install_and_the_two_commands_on_the_first_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    first = "\n".join(lines[:40])
    assert "## Install and run" in first
    for command in ("make test", "make demo", "make reproduce-cpu"):
        assert re.search(rf"^{command}\s", first, re.M), command


def test_every_make_command_the_docs_name_is_a_target_and_every_study_exists():
    targets = set(_make_targets())
    studies = {p.stem for p in (ROOT / "studies" / "conf").glob("*.yaml")}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        # a command may wrap onto the next line: `make\nstudy NAME=...`
        for target in re.findall(r"`make\s+([a-zA-Z0-9][a-zA-Z0-9_-]*)", text):
            assert target in targets, f"{page.name}: `make {target}` is no make target"
        for name in re.findall(r"`make\s+study\s+NAME=([a-zA-Z0-9_]+)", text):
            assert name in studies, f"{page.name}: study {name!r} is not in studies/conf/"


def _entry_points() -> dict[str, str]:
    """pyproject's console scripts: name -> ``module:function``."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^(skipdecode-[a-z]+) = "([a-z_.]+:[a-z_]+)"', section, re.M))


def test_pyproject_installs_every_console_script():
    assert set(_entry_points()) == set(SCRIPTS)


def test_every_entry_point_help_says_what_it_does():
    points = _entry_points()
    code = (
        "import contextlib, importlib, io, json, sys\n"
        "out = {}\n"
        "for name, target in json.loads(sys.argv[1]).items():\n"
        "    module, func = target.split(':')\n"
        "    sys.argv = [name, '--help']\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            getattr(importlib.import_module(module), func)()\n"
        "            code = 0\n"
        "        except SystemExit as e:\n"
        "            code = e.code or 0\n"
        "    out[name] = [code, buf.getvalue()]\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(points)],
        capture_output=True,
        text=True,
        timeout=300,
        env=offline_env(PYTHONPATH=str(ROOT / "src")),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    helps = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(helps) == set(SCRIPTS)
    for script, (code_, text) in helps.items():
        assert code_ == 0, (script, text[-2000:])
        assert SCRIPTS[script] in text.lower(), (script, text[:2000])


def test_installed_console_script_runs():
    """The installed wrapper itself (pip writes the same shim for each script)."""
    exe = shutil.which("skipdecode-aggregate", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("skipdecode-aggregate is not installed in this environment (pip install -e .)")
    proc = subprocess.run(
        [exe, "--help"], capture_output=True, text=True, timeout=300, env=offline_env()
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert SCRIPTS["skipdecode-aggregate"] in proc.stdout.lower(), proc.stdout[:2000]
