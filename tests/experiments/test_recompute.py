"""``make audit``: the committed records recompute, and each planted defect is caught."""

from __future__ import annotations

import csv
import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
from git_repo import git_in

from skipdecode.evaluation.speed import paired_speedups
from skipdecode.experiments.recompute.bench import check_bench
from skipdecode.experiments.recompute.cli import audit, main
from skipdecode.experiments.recompute.findings import Findings, csv_rows
from skipdecode.experiments.recompute.speeds import check_speeds, recomputed_speeds
from skipdecode.experiments.sweeps.aggregate import aggregate
from skipdecode.experiments.sweeps.audit import write_audit
from skipdecode.experiments.sweeps.excerpts import table_cells
from skipdecode.experiments.sweeps.pending import lacks_raw_timings

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
    cells = folder / "e2e_gemma3" / "cells.csv"
    _edit_csv(cells, 0, "bleu", "99.0")
    _edit_csv(cells, 1, "train_seconds", "1.0")  # not its cell.json's
    _edit_csv(cells, 2, "eval_seconds", "2.0")  # not its record's timing_s
    page = folder / "e2e_gemma3" / "cells.md"
    text = page.read_text()
    assert "\nIts 7 trainings took " in text  # the folder's time line
    page.write_text(text.replace(" trainings took ", " trainings took 1"))
    found = _differences(folder)
    assert any("cells.csv job" in d and "bleu" in d for d in found)
    assert any("cells.csv job" in d and "train_seconds '1.0'" in d for d in found)
    assert any("cells.csv job" in d and "eval_seconds '2.0'" in d for d in found)
    assert any("cells.md" in d and "its time line" in d for d in found)


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


def test_a_cell_that_says_it_resumed_a_checkpoint_its_sweep_deleted_is_caught(folder):
    cell = folder / "e2e_gemma3" / "0" / "cell.json"
    data = json.loads(cell.read_text())
    data["overrides"] = [o for o in data["overrides"] if not o.startswith("sweep.reuse=")]
    data["train_resumed"] = True  # resumed: allowed while the sweep reused its cells
    cell.write_text(json.dumps(data))
    assert _differences(folder) == []
    data["overrides"] = [*data["overrides"], "sweep.reuse=False"]  # deleted them first
    cell.write_text(json.dumps(data))
    found = _differences(folder)
    assert len(found) == 1 and "0/cell.json: train_resumed is true" in found[0], found
    data["overrides"] = [*data["overrides"], "ckpt_path=/ckpts/step80.ckpt"]  # named: resumed
    cell.write_text(json.dumps(data))
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


def test_a_record_under_the_paired_definition_is_checked_by_it():
    """Rounds (4/1, 6/2, 5/3): the point is their median, 3.0, inside their range; the ratio of
    summed medians (2.5) is a defect under the definition the record states."""
    record = _raw_record([1.0, 2.0, 3.0], [4.0, 6.0, 5.0], 3.0)
    pooled = 1.0  # every prefill took a second, on both sides
    e2e = [(pooled + b) / (pooled + d) for b, d in ((4, 1), (6, 2), (5, 3))]
    record["speed"]["measured_speedup_e2e"] = sorted(e2e)[1]
    record["speed"]["timing"].update(
        definition="median of paired rounds; prefill pooled", measured_speedup_e2e_per_repeat=e2e
    )
    assert check_speeds([(Path("paired"), record)]).differences == []
    record["speed"]["measured_speedup_decode"] = 2.5  # the older definition's figure
    found = check_speeds([(Path("paired"), record)]).differences
    assert found == ["paired: measured_speedup_decode 2.5 != 3.0"]
    record["speed"]["measured_speedup_decode"] = 3.0
    record["speed"]["raw"]["batches"][0]["base_prefill"] = [2.0, 2.0, 2.0]  # full's slower prefill
    pooled = 1.5  # the same work: the median of both sides' six prefills
    e2e = [(pooled + b) / (pooled + d) for b, d in ((4, 1), (6, 2), (5, 3))]
    record["speed"]["timing"]["measured_speedup_e2e_per_repeat"] = e2e
    record["speed"]["long_prompts"]["prefill_share_baseline"] = 2 / (2 + 5)
    per_side = (5 + 2) / (2 + 1)  # each side's own prefill: the defect the pooled median removes
    record["speed"]["measured_speedup_e2e"] = per_side
    found = check_speeds([(Path("paired"), record)]).differences
    assert found == [f"paired: measured_speedup_e2e {per_side!r} != {sorted(e2e)[1]!r}"]


def test_the_paired_definition_puts_the_point_inside_its_interval():
    """Record 7's defect (a point from summed medians outside the rounds' spread) cannot happen:
    the writer's point is the rounds' median, the audit's arithmetic agrees with it."""
    batches = [
        {"decode": [1.0, 3.0, 3.0], "base_decode": [1.0, 3.0, 2.0],
         "prefill": [2.0, 4.0, 3.0], "base_prefill": [5.0, 1.0, 6.0]},
        {"decode": [3.0, 4.0, 1.0], "base_decode": [4.0, 3.0, 2.0],
         "prefill": [1.0, 1.0, 1.0], "base_prefill": [1.0, 1.0, 1.0]},
    ]  # fmt: skip
    paired = paired_speedups(batches)
    low, high = paired["measured_speedup_decode_spread"]
    assert low <= paired["measured_speedup_decode"] <= high
    assert paired["prefill_seconds_pooled"] == 3.5 + 1.0  # median of six, per batch
    older = sum(statistics.median(b["base_decode"]) for b in batches) / sum(
        statistics.median(b["decode"]) for b in batches
    )
    assert older == 5.0 / 6.0 and (low, high) == (6.0 / 7.0, 1.25)  # summed medians: outside
    raw = {"batches": [{**b, "timed": True} for b in batches]}
    assert recomputed_speeds(raw)["paired"] == {
        k: paired[k] for k in ("measured_speedup_decode", "measured_speedup_e2e")
    }


#: What a record written before raw timings were kept lacked: its rounds' seconds, the rounds'
#: end-to-end ratios and the statement of how prefill was pooled.
LATER_TIMING_FIELDS = (
    "measured_speedup_e2e_per_repeat", "measured_speedup_e2e_spread", "definition", "prefill",
    "prefill_seconds_pooled",
)  # fmt: skip


def _written_before_raw_timings(folder: Path) -> tuple[int, dict[str, str], dict]:
    """Turn the first schedule record with raw timings into one written before they were kept
    (the rounds' decode ratios and the written speedups stay), rebuild the folder's tables and
    the provenance page, and return its index and row in ``cells.csv`` and the record."""
    sweep = folder / "e2e_gemma3"
    for row in csv_rows(sweep / "cells.csv"):
        path = sweep / row["job"] / "record.json"
        record = json.loads(path.read_text())
        if record["speed"].get("raw") and record["speed"].get("timing"):  # not full's own
            break
    else:
        pytest.fail("no schedule record with raw timings to plant an older one from")
    speed = record["speed"]
    del speed["raw"]
    for field in LATER_TIMING_FIELDS:
        del speed["timing"][field]
    assert lacks_raw_timings(record)
    path.write_text(json.dumps(record, indent=2))
    aggregate(sweep, plots=False)
    write_audit(folder)  # the provenance page lists it
    rows = csv_rows(sweep / "cells.csv")
    index = next(i for i, r in enumerate(rows) if r["job"] == row["job"])
    return index, rows[index], record


def test_a_table_publishes_the_rounds_median_of_a_record_without_raw_timings(folder):
    """An older record keeps its rounds' ratios but no raw seconds: its cell shows their median
    and no end-to-end speedup; a cell showing the written point, or the written end-to-end
    figure, is a difference."""
    index, row, record = _written_before_raw_timings(folder)
    cells, job = folder / "e2e_gemma3" / "cells.csv", row["job"]
    rounds = record["speed"]["timing"]["measured_speedup_decode_per_repeat"]
    assert float(row["measured_speedup_decode"]) == statistics.median(rounds)
    assert row["measured_speedup_e2e"] == ""
    assert _differences(folder) == []
    written = record["speed"]["measured_speedup_e2e"]
    _edit_csv(cells, index, "measured_speedup_e2e", repr(written))
    assert f"e2e_gemma3/cells.csv job {job}: measured_speedup_e2e '{written!r}' != None" in (
        _differences(folder)
    )
    _edit_csv(cells, index, "measured_speedup_e2e", "")
    _edit_csv(
        cells,
        index,
        "measured_speedup_decode",
        repr(record["summary"]["measured_speedup_decode"] + 0.01),
    )
    assert any("measured_speedup_decode" in d for d in _differences(folder))


def test_a_kept_diff_that_does_not_apply_to_its_commit_is_caught(tmp_path):
    repo = tmp_path / "repo"
    (repo / "results" / "r").mkdir(parents=True)

    git = git_in(repo, home=tmp_path)
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


def test_a_benchmark_speedup_or_a_gpu_page_cell_that_does_not_recompute_is_caught(tmp_path):
    """The decode records' speedups are ratios of their own ms per step, and the GPU page prints
    them at its digits: a record's speedup nudged, or a page cell changed, is a difference."""
    results = tmp_path / "results"
    (results / "bench").mkdir(parents=True)
    for path in (RESULTS / "bench").glob("decode-*"):
        if path.is_file():
            shutil.copy(path, results / "bench" / path.name)
    assert check_bench(results).differences == []
    record = results / "bench" / "decode-cpu.json"
    data = json.loads(record.read_text())
    variant = data["cells"][0]["variants"]["skipdecode-2x"]
    variant["measured_speedup"] *= 1.01
    record.write_text(json.dumps(data))
    found, page_cell = check_bench(results).differences  # the record, then its page's cell
    assert "decode-cpu.json" in found and "skipdecode-2x measured_speedup" in found
    assert page_cell.startswith("bench/decode-cpu.md opt-1.3b 1 skipdecode-2x: measured")
    variant["measured_speedup"] /= 1.01
    record.write_text(json.dumps(data))
    page = results / "bench" / "decode-gpu.md"
    text = page.read_text()
    cell = next(
        line.split("|")[2].strip()
        for line in text.splitlines()
        if line.startswith("| skipdecode-2x-graphs |")
    )
    page.write_text(text.replace(cell, cell.replace("**", "**9", 1), 1))
    (found,) = check_bench(results).differences
    assert found.startswith("bench/decode-gpu.md") and "skipdecode-2x-graphs" in found


def test_a_benchmark_page_cell_that_its_record_does_not_print_is_caught(tmp_path):
    """A benchmark's own page prints its record's figures at their digits (the tables in docs
    excerpt these pages): a changed quartile, a lost cell or an invented one is a difference."""
    results = tmp_path / "results"
    (results / "bench").mkdir(parents=True)
    for suffix in (".json", ".md"):
        name = "decode-smollm2-cpu-compiled" + suffix
        shutil.copy(RESULTS / "bench" / name, results / "bench" / name)
    assert check_bench(results).differences == []
    page = results / "bench" / "decode-smollm2-cpu-compiled.md"
    text = page.read_text()
    columns = table_cells(next(line for line in text.splitlines() if line.startswith("| shape |")))
    row = next(line for line in text.splitlines() if line.startswith(f"| {_EAGER_GENERATE_B1} |"))
    cells = table_cells(row)
    assert _row(cells) == row  # the page's own layout, rebuilt
    median, q1, q3 = re.findall(r"[\d.]+", cells[columns.index("decode ms/step [IQR]")])
    assert cells[columns.index("vs compiled generate")] and not cells[columns.index("theor.")]
    for column, value in (
        ("decode ms/step [IQR]", f"{median} [{q1}, {float(q3) + 0.01:.2f}]"),  # a quartile moved
        ("vs compiled generate", ""),  # a cell lost
        ("theor.", "1.00"),  # a cell invented
    ):
        planted = list(cells)
        planted[columns.index(column)] = value
        page.write_text(text.replace(row, _row(planted), 1))
        (found,) = check_bench(results).differences
        assert found.startswith("bench/decode-smollm2-cpu-compiled.md smollm2-135m 1 ")
        assert f": {column} " in found
    lines = text.splitlines(keepends=True)
    row = next(i for i, line in enumerate(lines) if "| skipdecode-2x-compiled |" in line)
    page.write_text("".join(lines[:row] + lines[row + 1 :]))  # a variant the page lost
    assert check_bench(results).differences == [
        "bench/decode-smollm2-cpu-compiled.md: no row for smollm2-135m 1 skipdecode-2x-compiled"
    ]
    page.write_text("".join(lines[: row + 1] + lines[row:]))  # printed twice
    (found,) = check_bench(results).differences
    assert found.endswith("skipdecode-2x-compiled: a row its record does not give once")
    page.write_text(text)
    name = "decode-gpu-smollm2-h100-b32"  # a page of today's layout must keep every column
    for suffix in (".json", ".md"):
        shutil.copy(RESULTS / "bench" / f"{name}{suffix}", results / "bench" / f"{name}{suffix}")
    today = results / "bench" / f"{name}.md"
    cut = [
        x[: x.rstrip().rstrip("|").rindex("|") + 1] + "\n" if x[0] == "|" else x
        for x in today.read_text().splitlines(keepends=True)
    ]
    today.write_text("".join(cut))  # without its last column, the flag
    assert any("no column 'flag'" in d for d in check_bench(results).differences)


def test_a_training_page_cell_that_its_run_does_not_give_is_caught(tmp_path):
    from skipdecode.experiments.recompute.training import check_training

    shutil.copytree(RESULTS / "training", tmp_path / "training")
    assert check_training(tmp_path).differences == []
    page = tmp_path / "training" / "gpu-runs.md"
    page.write_text(page.read_text().replace("| 4.31 |", "| 4.30 |", 1))
    differences = check_training(tmp_path).differences
    assert (
        len(differences) == 1 and "shard-gpu-smollm2: plan GiB '4.30' != '4.31'" in differences[0]
    )


def test_a_reach_page_that_its_records_do_not_give_is_caught(folder):
    reach_csv = folder / "e2e_gemma3" / "reach.csv"
    _edit_csv(reach_csv, 1, "reached", "1.9")
    found = _differences(folder)
    assert found and "reach.csv job 1: reached '1.9'" in found[0]


def test_a_reach_row_missing_is_caught(folder):
    lines = (folder / "e2e_gemma3" / "reach.csv").read_text().splitlines(keepends=True)
    (folder / "e2e_gemma3" / "reach.csv").write_text("".join(lines[:1] + lines[2:]))
    found = _differences(folder)
    assert "e2e_gemma3/reach.csv: no row for finished cell 0" in found
    assert "e2e_gemma3/reach.md: 7 rows, reach.csv 6" in found


def test_a_misprinted_reach_cell_or_a_planted_plan_is_caught(folder):
    page = folder / "e2e_gemma3" / "reach.md"
    page.write_text(page.read_text().replace("| 2.15x |", "| 2.16x |", 1))
    assert _differences(folder) == ["e2e_gemma3/reach.md job 1: cell '2.16x' != '2.15x'"]
    lossless = [r for r in csv.DictReader((folder / "e2e_gemma3" / "reach.csv").open())]
    row = next(i for i, r in enumerate(lossless) if r["method"] == "speculative")
    _edit_csv(folder / "e2e_gemma3" / "reach.csv", row, "planned", "1.5")
    assert any(
        f"job {lossless[row]['job']}: planned '1.5' != ''" in d for d in _differences(folder)
    )


def test_a_planned_speedup_that_the_budgets_do_not_give_is_caught(folder):
    from skipdecode.experiments.recompute.reach import check_reach

    if check_reach(folder).skipped:
        pytest.skip("Gemma 3's tokenizer is not on this machine (make gemma3)")
    _edit_csv(folder / "e2e_gemma3" / "reach.csv", 1, "planned", "2.08")
    _edit_csv(folder / "e2e_gemma3" / "reach.csv", 1, "test_references", "2.1541")
    found = [d for d in check_reach(folder).differences if "reach.csv" in d]
    assert [d.split(":")[1].split("'")[0].strip() for d in found] == ["planned", "test_references"]


def test_a_speed_mean_over_some_of_a_rows_seeds_is_caught(tmp_path):
    """A row's speed is the mean over all of its seeds or nothing: a results or summary page
    printing one seed's end-to-end figure under two seeds' labels is a difference."""
    from skipdecode.experiments.recompute.summaries import _check_means
    from skipdecode.experiments.recompute.tables import GROUP, _check_results

    labels = dict.fromkeys(GROUP, "x")
    cells = [
        {**labels, "status": "ok", "seed": "1", "measured_speedup_e2e": "1.3"},
        {**labels, "status": "ok", "seed": "2", "measured_speedup_e2e": ""},
    ]
    for printed, differs in (("1.3", True), ("", False)):
        with (tmp_path / "results.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[*GROUP, "n_seeds", "measured_speedup_e2e"])
            writer.writeheader()
            writer.writerow({**labels, "n_seeds": "2", "measured_speedup_e2e": printed})
        found = Findings("tables")
        _check_results(tmp_path, cells, found)
        assert any("measured_speedup_e2e" in d for d in found.differences) is differs
        found = Findings("summaries")
        summary = [
            {"seed": c["seed"], "measured_speedup_e2e": float(e2e) if e2e else None}
            for c in cells
            for e2e in [c["measured_speedup_e2e"]]
        ]
        _check_means({"seeds": "1 2", "measured_speedup_e2e": printed}, summary, found, "row")
        assert any("measured_speedup_e2e" in d for d in found.differences) is differs


#: The eager ``generate`` row at batch 1 of the compiled benchmark's page: its timed figures, its
#: speedup over compiled ``generate``, and no schedule columns.
_EAGER_GENERATE_B1 = "smollm2-135m | 1 | transformers-generate"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"
