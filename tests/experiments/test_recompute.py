"""``make audit``: the committed records recompute, and each planted defect is caught."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from skipdecode.experiments.recompute.cli import audit, main
from skipdecode.experiments.recompute.speeds import check_speeds
from skipdecode.experiments.sweeps.audit import write_audit

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"


def _shallow() -> bool:
    out = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True
    )
    return out.returncode != 0 or out.stdout.strip() == "true"


@pytest.mark.skipif(_shallow(), reason="a shallow clone lacks the records' commits")
def test_the_committed_records_recompute(capsys):
    assert main([str(RESULTS)]) == 0
    out = capsys.readouterr().out
    assert "tables from records:" in out and out.rstrip().endswith("every number recomputes")


def _differences(results: Path) -> list[str]:
    return [d for f in audit(results, results.parent) for d in f.differences]


def _edit_csv(path: Path, row: int, column: str, value: str) -> None:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows[row][column] = value
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture
def folder(tmp_path) -> Path:
    """A copy of a published folder, outside any repository (its commits are not looked up)."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS / "e2e_gemma3", results / "e2e_gemma3")
    write_audit(results)
    assert _differences(results) == []
    return results


def test_a_cell_table_that_misreads_its_record_is_caught(folder):
    _edit_csv(folder / "e2e_gemma3" / "cells.csv", 0, "bleu", "99.0")
    found = _differences(folder)
    assert len(found) >= 1 and "cells.csv" in found[0] and "bleu" in found[0]


def test_a_mean_or_interval_over_seeds_that_does_not_recompute_is_caught(folder):
    _edit_csv(folder / "e2e_gemma3" / "results.csv", 0, "bleu_ci95_high", "60.0")
    found = _differences(folder)
    assert any("results.csv" in d and "bleu_ci95_high" in d for d in found)


def test_a_record_missing_from_the_provenance_page_is_caught(folder):
    record = folder / "e2e_gemma3" / "0" / "record.json"
    data = json.loads(record.read_text())
    data["provenance"]["git"] = {"commit": "0" * 40, "dirty": True}  # a diff nobody kept
    record.write_text(json.dumps(data))
    assert any("PROVENANCE.md" in d for d in _differences(folder))
    write_audit(folder)  # listed: disclosed, so the audit passes again
    assert _differences(folder) == []


def _raw_record(decode: list[float], base: list[float], published: float) -> dict:
    batch = {
        "timed": True, "decode": decode, "base_decode": base,
        "prefill": [1.0] * len(decode), "base_prefill": [1.0] * len(base),
    }  # fmt: skip
    return {
        "speed": {
            "raw": {"batches": [batch]},
            "measured_speedup_decode": published,
            "measured_speedup_e2e": (sorted(base)[1] + 1) / (sorted(decode)[1] + 1),
            "timing": {"measured_speedup_decode_per_repeat": [b / d for b, d in zip(base, decode)]},
            "long_prompts": {
                "prefill_share": 1 / (1 + sorted(decode)[1]),
                "prefill_share_baseline": 1 / (1 + sorted(base)[1]),
            },
        }
    }


def test_a_speedup_that_its_raw_timings_do_not_give_is_caught():
    right = _raw_record([1.0, 2.0, 3.0], [4.0, 6.0, 5.0], 5.0 / 2.0)
    assert check_speeds([(Path("right"), right)]).differences == []
    wrong = _raw_record([1.0, 2.0, 3.0], [4.0, 6.0, 5.0], 6.0 / 1.0)  # max over min, say
    found = check_speeds([(Path("wrong"), wrong)]).differences
    assert found == ["wrong: measured_speedup_decode 6.0 != 2.5"]


def test_a_kept_diff_that_does_not_apply_to_its_commit_is_caught(tmp_path):
    repo = tmp_path / "repo"
    (repo / "results" / "r").mkdir(parents=True)

    def git(*args):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=repo, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip

    git("init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-qm", "c")
    commit = git("rev-parse", "HEAD")
    good = "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2"
    bad = good.replace("-x = 1", "-x = 7")
    for name, diff in (("good", good), ("bad", bad)):
        git_info = {"commit": commit, "dirty": True, "diff": diff, "diff_scope": "whole"}
        (repo / "results" / "r" / f"{name}.json").write_text(
            json.dumps({"provenance": {"git": git_info}})
        )
    write_audit(repo / "results")
    found = _differences(repo / "results")
    assert len(found) == 1 and found[0].startswith("r/bad.json: its diff does not apply")
