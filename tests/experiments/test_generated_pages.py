"""The GPU decode and training pages, the cost-split pages and README's generated tables are
written from committed records, and the benchmark rows the docs quote are rows of those pages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from skipdecode.experiments.benchmarks.gpu_page import (
    COMPOSITE_NOTE,
    UNTRAINED_NOTE,
    gpu_page,
    readme_table,
    step_targets,
    write_gpu_page,
)
from skipdecode.experiments.benchmarks.gpu_train_page import train_page
from skipdecode.experiments.benchmarks.split_page import SPLIT_RECORDS, split_page
from skipdecode.experiments.sweeps.readme import (
    BLOCKS,
    block_markers,
    headline_table,
    readme_blocks,
    summaries_table,
    write_readme,
)

ROOT = Path(__file__).resolve().parents[2]


def test_readme_tables_are_the_ones_make_docs_writes():
    """No number in README's tables is typed: each block equals what make docs writes."""
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert set(blocks) == set(BLOCKS)
    for name, text in blocks.items():
        assert text == "\n" + BLOCKS[name](ROOT / "results"), name
    headline = headline_table(ROOT / "results")
    assert headline.splitlines()[2].startswith("| full |")  # full first, then by speedup


def test_summaries_block_puts_full_first_on_the_summaries_page_scale(tmp_path):
    """README's summarization block: full, SkipDecode by target, then the other methods; ROUGE
    from the CSV's 0-1 scale to the page's x100, each interval from its own columns."""
    assert summaries_table(tmp_path) is None  # no record, no block
    folder = tmp_path / "scitldr_smollm2"
    folder.mkdir()
    columns = ["schedule", "method", "seeds", "measured_speedup_decode", "measured_speedup_e2e"]
    columns += [f"rougeL_max{s}" for s in ("", "_ci95_low", "_ci95_high")]
    columns += [f"rougeL_max_delta{s}" for s in ("", "_ci95_low", "_ci95_high")]
    columns += ["rougeL_max_decided"]
    columns += [f"bertscore_f1_delta{s}" for s in ("", "_ci95_low", "_ci95_high")]
    rows = [
        "unified_2x,unified skip,1,1.9,1.3,0.3173,,,-0.0372,-0.0497,-0.026,lower (inputs only),-0.04,-0.05,-0.03",
        "target_3x,skipdecode,1,3.2,1.7,0.2986,,,-0.056,-0.0687,-0.044,lower (inputs only),-0.08,-0.09,-0.07",
        "full,full,1 2 3,1.0,1.0,0.3494,0.3384,0.3605,,,,,,,",
    ]  # fmt: skip
    (folder / "summaries.csv").write_text("\n".join([",".join(columns), *rows]) + "\n")
    lines = summaries_table(tmp_path).splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| full", "| target_3x", "| unified_2x"]
    assert lines[2] == "| full | full | 1 2 3 | 1.00x | 1.00x | 34.94 [33.84, 36.05] |  |  |  |"
    assert lines[4] == (
        "| unified_2x | unified skip | 1 | 1.90x | 1.30x | 31.73 | -3.72 [-4.97, -2.60] "
        "| lower (inputs only) | -0.0400 [-0.0500, -0.0300] |"
    )


def _cell(batch: int, full: float, peer: float, tokens_equal: bool) -> dict:
    def row(ms: float, **extra) -> dict:
        return {"decode_ms_per_step": ms, "bandwidth_floor_multiple": ms / 0.1, **extra}

    return {
        "shape": "s", "batch_size": batch, "cudagraph_skips": 0,
        "graphs_compiled_while_timed": 0, "graphs_recorded_while_timed": 0,
        "variants": {
            "transformers-generate-compiled": row(peer),
            "skipdecode-full-graphs": row(
                full, speedup_vs_transformers_generate_compiled=peer / full,
                tokens_equal="skipdecode-full-compiled", tokens_equal_reference=tokens_equal,
            ),
            "lossless-k2-b10-graphs": row(
                full / 2, speedup_vs_transformers_generate_compiled=2 * peer / full,
                tokens_per_round_cpu=2.0,
            ),
        },
    }  # fmt: skip


def test_gpu_page_states_each_target_and_each_token_mismatch(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    assert "No CUDA-graph record yet" in gpu_page(bench)
    record = {
        "args": {"cuda_graphs": "True", "device": "cuda", "dtype": "bfloat16", "repeats": "10"},
        "cells": [_cell(1, 2.0, 3.0, True), _cell(8, 4.0, 3.0, False)],
        "provenance": {"git": {"commit": "abc", "dirty": False}, "device": {"device": "GPU"}},
    }
    (bench / "decode-gpu-smollm2-step.json").write_text(json.dumps(record))
    (bench / "decode-gpu-cpu.json").write_text(json.dumps({**record, "args": {"device": "cpu"}}))
    page = gpu_page(bench)
    assert "decode-gpu-cpu" not in page  # only CUDA-graph records on a GPU
    assert "skipdecode-full-graphs at batch 1: 1.50x (target 1.0x): met" in page
    assert "skipdecode-full-graphs at batch 8: 0.75x (target 1.0x): missed" in page
    assert "tokens differing from their reference at batch 8: skipdecode-full-graphs" in page
    assert "| skipdecode-full-graphs | 2.00 ms, 20.0x floor, **1.50x** |" in page
    # a time per token made of two devices' measurements is marked, judged against no target,
    # and left out of README with the reason
    assert "| lossless-k2-b10-graphs (composite: GPU round / CPU tokens per round) |" in page
    assert "lossless-k2-b10-graphs at batch 1: not measured (a composite" in page
    assert "lossless" not in readme_table(bench).split("\n\n")[1]
    assert readme_table(bench).rstrip().endswith(COMPOSITE_NOTE)
    start, end = block_markers("gpu")
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{start}\nold\n{end}\nrest\n")
    assert write_readme(readme, tmp_path) == "README.md: gpu"
    assert readme.read_text() == f"intro\n{start}\n{readme_table(bench)}{end}\nrest\n"
    write_gpu_page(tmp_path)
    assert (tmp_path / "bench" / "decode-gpu.md").read_text() == page


def test_gpu_page_says_which_records_keep_no_repeats_seconds(tmp_path):
    """A record timed before records kept each repeat's seconds says so where its numbers are
    printed; one that keeps them for every variant says nothing."""
    bench = tmp_path / "bench"
    bench.mkdir()
    cells = [_cell(1, 2.0, 3.0, True), _cell(8, 4.0, 3.0, True)]
    record = {
        "args": {"cuda_graphs": "True", "device": "cuda", "dtype": "bfloat16", "repeats": "10"},
        "cells": cells,
        "provenance": {"git": {"commit": "abc", "dirty": False}, "device": {"device": "GPU"}},
    }
    path = bench / "decode-gpu-smollm2-step.json"
    path.write_text(json.dumps(record))
    assert "keeps no repeat's seconds for 6 of its 6 variants" in gpu_page(bench)
    cells[1]["variants"] = {
        k: {**v, "raw": {"decode_s": [0.1]}} for k, v in cells[1]["variants"].items()
    }
    path.write_text(json.dumps(record))
    assert "keeps no repeat's seconds for 3 of its 6 variants" in gpu_page(bench)
    cells[0]["variants"] = {
        k: {**v, "raw": {"decode_s": [0.1]}} for k, v in cells[0]["variants"].items()
    }
    path.write_text(json.dumps(record))
    assert "repeat's seconds" not in gpu_page(bench)


def _step_cell(batch: int, ms: dict[str, float], **extra) -> dict:
    variants = {
        name: {"decode_ms_per_step": v, "bandwidth_floor_ms": 1.0} for name, v in ms.items()
    }
    for name in variants:
        if name.startswith("lossless-"):
            variants[name]["tokens_per_round"] = 1.0
    return {"batch_size": batch, "variants": variants, **extra}


def test_whole_step_targets_are_judged_from_the_numbers():
    """The whole-step targets: SmolLM2's ms a step and the ratios to the gpt-fast-style loop at
    batch 1, the OPT shapes' multiples of the full model's bandwidth floor at batch 1 and 8, and
    the lossless rows, never judged on random weights."""
    assert step_targets("smollm2-135m", [_step_cell(1, {"skipdecode-full-graphs": 1.0})]) == []
    timed = {
        "skipdecode-full-step": 0.9, "skipdecode-2x-step": 0.6,
        "transformers-loop-compiled": 1.0, "lossless-k2-b10-step": 1.8,
    }  # fmt: skip
    lines = step_targets("smollm2-135m", [_step_cell(1, timed)])
    assert lines == [
        "- skipdecode-full-step at batch 1: 0.90 ms (target 1.0 ms): met",
        "- skipdecode-2x-step at batch 1: 0.60 ms (target 0.55 ms): missed",
        "- skipdecode-full-step: 0.90x of the loop's time (target at most 1.05x): met",
        "- skipdecode-2x-step: 1.67x faster than the loop (target faster 1.8x): missed",
        "- lossless-k2-b10-step at batch 1: 0.50x our full path with 1.00 tokens a round "
        "measured in this run (target 1.2x with a trained draft): not judged, random weights "
        "accept no proposal; a trained draft's weights did not travel to this run",
    ]
    trained = step_targets("smollm2-135m", [_step_cell(1, timed)], random_weights=False)
    assert trained[-1] == (
        "- lossless-k2-b10-step at batch 1: 0.50x our full path with 1.00 tokens a round "
        "measured in this run (target 1.2x): missed"
    )
    del timed["transformers-loop-compiled"]
    failed = {"transformers-loop-compiled": "RuntimeError: overwritten\n  by a later run"}
    lines = step_targets("smollm2-135m", [_step_cell(1, timed, failed=failed)])
    assert lines[2] == (
        "- skipdecode-full-step against the gpt-fast-style loop (target at most 1.05x): not "
        "measured, the loop did not run (RuntimeError: overwritten by a later run)"
    )
    opt = [
        _step_cell(1, {"skipdecode-full-step": 1.2, "skipdecode-2x-step": 0.9}),
        _step_cell(8, {"skipdecode-full-step": 1.5, "skipdecode-2x-step": 1.1}),
    ]
    assert step_targets("opt-1.3b", opt) == [
        "- skipdecode-full-step at batch 1: 1.20x the bandwidth floor (target at most 1.3x): met",
        "- skipdecode-2x-step at batch 1: 0.90 ms against the full model's bandwidth floor "
        "1.00 ms (target below it): met",
        "- skipdecode-full-step at batch 8: 1.50x the bandwidth floor (target at most 1.3x): "
        "missed",
        "- skipdecode-2x-step at batch 8: 1.10 ms against the full model's bandwidth floor "
        "1.00 ms (target below it): missed",
    ]


def test_readme_leaves_out_lossless_rows_timed_on_random_weights(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    cell = _step_cell(1, {"skipdecode-full-step": 1.0, "lossless-k2-b10-step": 2.0})
    args = {"cuda_graphs": "True", "device": "cuda", "shapes": "['smollm2-135m']"}
    record = {"args": args, "cells": [cell]}
    (bench / "decode-gpu-smollm2-step.json").write_text(json.dumps(record))
    table = readme_table(bench)
    assert "| skipdecode-full-step |" in table and "| lossless" not in table
    assert table.rstrip().endswith(UNTRAINED_NOTE)
    # a record whose weights were trained (not the random-weight benchmark) keeps its rows
    del args["shapes"]
    (bench / "decode-gpu-smollm2-step.json").write_text(json.dumps(record))
    assert "| lossless-k2-b10-step |" in readme_table(bench)
    assert UNTRAINED_NOTE not in readme_table(bench)


def test_committed_gpu_page_is_the_one_make_docs_writes():
    results = ROOT / "results"
    assert (results / "bench" / "decode-gpu.md").read_text() == gpu_page(results / "bench")


def test_gpu_training_page_sets_each_plan_beside_its_measured_peak(tmp_path):
    """One row per run folder with a metrics.json: the plan, the busiest device's reserved and
    allocated peak, their ratio; a run without a measured peak says so; the committed page is
    what make docs writes."""
    gib = 2**30
    runs = {
        "sharded": {"total": 9 * gib, "strategy": "fsdp"},
        "plain": {"total": 4 * gib, "strategy": "single"},
    }
    for name, plan in runs.items():
        (tmp_path / name).mkdir()
        peak = (
            {"peak_reserved_bytes": 6 * gib, "allocated_bytes": [5 * gib], "plan_over_peak": 1.5}
            if name == "sharded"
            else None
        )
        record = {"memory_plan": plan, "device_peak": peak, "metrics": {"val/loss": 2.0}}
        (tmp_path / name / "metrics.json").write_text(json.dumps(record))
    (tmp_path / "not-a-run").mkdir()
    rows = [line for line in train_page(tmp_path).splitlines() if line.startswith("| `")]
    assert len(rows) == 2 and rows[0].startswith("| `plain`")
    assert "| 9.00 | 6.00 | 5.00 | 1.50 |" in rows[1]
    assert "| 4.00 | not measured | not measured |" in rows[0]
    results = ROOT / "results"
    committed = (results / "training" / "gpu-runs.md").read_text()
    assert committed == train_page(results / "training")


def test_committed_split_pages_are_the_ones_make_docs_writes():
    bench = ROOT / "results" / "bench"
    for name in SPLIT_RECORDS:
        record = json.loads((bench / f"{name}.json").read_text())
        page = (bench / f"{name}-split.md").read_text()
        assert page == split_page(record, name), name
    first = page.splitlines()[6]  # decode-cpu: opt-1.3b at batch 1, its columns from the record
    cell = record["cells"][0]
    split, rows = cell["cost_split"], cell["variants"]
    ceiling = split["full_step_ms"] / split["non_layer_ms"]
    generate, half = rows["transformers-generate"], rows["skipdecode-2x"]
    floor = rows["skipdecode-full"]["bandwidth_floor_ms"]
    assert (cell["shape"], cell["batch_size"]) == ("opt-1.3b", 1)
    assert first.startswith(
        f"| opt-1.3b | 1 | {split['full_step_ms']:.2f} | {generate['decode_ms_per_step']:.2f} "
        f"| {floor:.2f} |"
    )
    measured, ideal = half["measured_speedup"], half["ideal_speedup"]
    assert f"| {ceiling:.1f}x | {measured:.2f}x ({ideal:.2f}x) |" in first


def test_every_benchmark_row_the_docs_quote_is_a_row_of_a_results_page():
    """A table row in README or docs/ that starts with a model shape is copied from a page under
    results/ (written by a benchmark or by make docs), never typed."""
    shapes = r"(tiny|smollm2-135m|smollm2-135m-instruct|gemma3-270m|opt-1\.3b|opt-6\.7b)"
    rows = {
        line.strip()
        for page in (ROOT / "results").rglob("*.md")
        for line in page.read_text().splitlines()
        if line.startswith("|")
    }
    quoted = 0
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            if re.match(rf"^\| {shapes} \|", line):
                quoted += 1
                assert line.strip() in rows, f"{doc.name}:{n} is in no results page: {line[:80]}"
    assert quoted > 0


def test_a_records_own_table_is_rewritten_whole_with_errors_on_one_line(tmp_path):
    """``bench_tables RECORD.json``: a record's table again from its cells, a failed variant's
    error on its row's one line; a record of another tool is refused before anything is
    written."""
    from skipdecode.experiments.benchmarks.bench_tables import decode_table, rewrite_tables

    record = json.loads((ROOT / "results/bench/decode-gpu-smollm2-step.json").read_text())
    record["cells"][0]["failed"] = {"loop": "RuntimeError: one\n    two | three"}
    path = tmp_path / "decode-x.json"
    path.write_text(json.dumps(record))
    other = tmp_path / "speculative-x.json"
    other.write_text(json.dumps({"args": {}, "cells": []}))
    with pytest.raises(SystemExit, match="args.mode is None; only decode and train"):
        rewrite_tables([path, other])
    assert not path.with_suffix(".md").exists()
    rewrite_tables([path])
    table = path.with_suffix(".md").read_text()
    assert table == decode_table(record["cells"])
    assert "| loop: RuntimeError: one two \\| three |" in table
    assert all(line.startswith("|") for line in table.strip().splitlines() if line)
