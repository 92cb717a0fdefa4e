"""Benchmark smoke test: the smallest run writes every field (no timing thresholds)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from device_watch import without_inductor

from skipdecode.experiments.benchmarks.bench import main

DECODE_FIELDS = {
    "prefill_ms",
    "decode_ms_per_step",
    "tokens_per_s",
    "decode_tokens_per_s",
    "layers_per_token",
}
SCHEDULE_FIELDS = {
    "theoretical_speedup",
    "measured_speedup",
    "ideal_speedup",
    "efficiency",
    "schedule",
}
SPLIT_FIELDS = {
    "full_step_ms",
    "non_layer_ms",
    "head_ms",
    "per_layer_ms",
    "non_layer_fraction",
    "overhead_fraction",
}


def test_decode_bench_writes_complete_json(tmp_path):
    main(
        [
            "--shapes",
            "tiny",
            "--batch-sizes",
            "2",
            "--prompt-len",
            "8",
            "--new-tokens",
            "6",
            "--repeats",
            "1",
            "--speedups",
            "2",
            "4",
            "--out",
            str(tmp_path),
            "--name",
            "smoke",
            "--allow-busy",  # a test's machine is shared: pytest runs two workers
        ]
    )
    record = json.loads((tmp_path / "smoke.json").read_text())
    assert (tmp_path / "smoke.md").read_text().startswith("| shape |")
    (cell,) = record["cells"]
    assert set(cell["variants"]) == {
        "transformers-generate",
        "skipdecode-full",
        "skipdecode-2x",
        "skipdecode-4x",
    }
    for name, row in cell["variants"].items():
        assert DECODE_FIELDS <= set(row), name
        assert all(math.isfinite(row[k]) and row[k] > 0 for k in DECODE_FIELDS), name
        if name.startswith("skipdecode"):
            assert SCHEDULE_FIELDS <= set(row), name
            assert row["efficiency"] == row["measured_speedup"] / row["ideal_speedup"]
    # tiny: 8 layers, 6 new tokens = 5 decode passes. 2x: budgets round(5 - 3 g / 6) for
    # g = 0..4 = 5, 5, 4, 4, 3 -> 21 / 5 = 4.2 layers per token; 4x: 2 layers at every pass.
    variants = cell["variants"]
    assert variants["skipdecode-full"]["layers_per_token"] == 8.0
    assert variants["skipdecode-2x"]["layers_per_token"] == pytest.approx(4.2)
    assert variants["skipdecode-2x"]["theoretical_speedup"] == pytest.approx(8 / 4.2)
    assert variants["skipdecode-4x"]["layers_per_token"] == 2.0
    assert variants["skipdecode-4x"]["theoretical_speedup"] == 4.0
    assert SPLIT_FIELDS <= set(cell["cost_split"])
    assert cell["load"]["measured"] and 0 <= cell["load"]["other_share"] <= 1  # the load beside
    assert record["provenance"]["packages"]["torch"].startswith("2.13")
    # the roofline floor is the larger of the bandwidth floor and the compute floor, each with
    # its own multiple (both columns in the table)
    for name, row in variants.items():
        bandwidth, compute = row["bandwidth_floor_ms"], row["compute_floor_ms"]
        assert row["floor_ms"] == max(bandwidth, compute), name
        assert row["bandwidth_floor_multiple"] == row["decode_ms_per_step"] / bandwidth
        assert row["compute_floor_multiple"] == row["decode_ms_per_step"] / compute
        above = row.get("efficiency", 0) > 1.02
        assert above == ("measured above ideal" in row.get("flag", "")), name
    assert "| x bandwidth floor | x compute floor |" in (tmp_path / "smoke.md").read_text()
    _audit_recomputes_from_raw(tmp_path, record)


def _audit_recomputes_from_raw(tmp_path: Path, record: dict) -> None:
    """Each variant keeps its timed calls' seconds; the audit's arithmetic gives the record's
    figures from them, and catches a second that moved."""
    from skipdecode.experiments.recompute.bench import check_bench

    bench = tmp_path / "results" / "bench"
    bench.mkdir(parents=True)
    for variant in record["cells"][0]["variants"].values():
        assert len(variant["raw"]["decode_s"]) == len(variant["raw"]["prefill_s"]) == 1
    (bench / "decode-smoke.json").write_text(json.dumps(record))
    (bench / "decode-smoke.md").write_text((tmp_path / "smoke.md").read_text())
    found = check_bench(tmp_path / "results")
    assert found.differences == [] and "decode variants without raw timings" not in str(
        found.skipped
    )
    from skipdecode.experiments.recompute.split import check_splits

    found = check_splits(tmp_path / "results")  # the split, what it predicts, the cell table
    assert found.differences == [] and found.checked > 10 and not found.skipped
    assert "| other load % |" in (bench / "decode-smoke.md").read_text()
    record["cells"][0]["variants"]["skipdecode-2x"]["raw"]["decode_s"][0] *= 1.01
    (bench / "decode-smoke.json").write_text(json.dumps(record))
    assert any(
        "skipdecode-2x decode_ms_per_step (raw)" in d
        for d in check_bench(tmp_path / "results").differences
    )


def test_train_bench_writes_complete_json(tmp_path):
    main(
        [
            "--mode",
            "train",
            "--shapes",
            "tiny",
            "--batch-sizes",
            "2",
            "--repeats",
            "1",
            "--speedups",
            "2",
            "--out",
            str(tmp_path),
            "--name",
            "train",
            "--allow-busy",  # a test's machine is shared: pytest runs two workers
        ]
    )
    (cell,) = json.loads((tmp_path / "train.json").read_text())["cells"]
    assert set(cell["variants"]) == {"full", "2x", "2x-masked"}
    assert cell["load"]["measured"] and 0 <= cell["load"]["other_share"] <= 1
    for row in cell["variants"].values():
        assert row["tokens_per_s"] > 0 and row["step_ms"] > 0
        assert len(row["step_s_per_repeat"]) == 1
    # the audit recomputes the record and its page from each repeat's seconds
    from skipdecode.experiments.recompute.bench import check_bench

    bench = tmp_path / "results" / "bench"
    bench.mkdir(parents=True)
    for suffix in (".json", ".md"):
        (bench / f"train-smoke{suffix}").write_text((tmp_path / f"train{suffix}").read_text())
    found = check_bench(tmp_path / "results")
    assert found.differences == [] and not found.skipped and found.checked == 3 * (3 + 3)
    page = bench / "train-smoke.md"
    page.write_text(page.read_text().replace("| 2x |", "| 3x |"))
    assert any("no row for tiny 2 2x" in d for d in check_bench(bench.parent).differences)


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
@pytest.mark.parametrize("compile", [False, True])
def test_speculative_bench_on_real_weights_writes_every_field(tmp_path, compile):
    """The lossless-mode benchmark on SmolLM2 chat prompts, EOS on: acceptance overall and per
    draft budget, the round's cost split, a chosen constant draft, and every speculative output
    checked against the full model's; on the eager and on the compiled path."""
    from ci import skip_unless_ci

    from skipdecode.experiments.benchmarks.bench_speculative import main as bench_speculative_main
    from skipdecode.models.assets import smollm2_dir

    try:
        path = smollm2_dir(create=False)
    except FileNotFoundError as err:
        skip_unless_ci(f"SmolLM2 not converted (make smollm2): {err}")
    bench_speculative_main(
        [
            f"--model={path}",
            "--batch-sizes",
            "2",
            "--ks",
            "2",
            "--new-tokens=6",
            "--repeats=1",
            "--prompts=3",
            "--draft-budgets",
            "6",
            "10",
            "--draft-vocabs",
            "4096",
            "--auto-off",
            f"--out={tmp_path}",
            "--name=spec",
            *(["--compile"] if compile else []),
        ]
    )
    result = json.loads((tmp_path / "spec.json").read_text())
    (cell,) = result["cells"]
    assert cell["compiled"] is compile and (cell["compile_s"] is not None) is compile
    if compile:  # the forms of the plain step's 2 rows and the verify pass's 2 x (k + 1)
        forms = cell["matmul_forms"]
        assert {2, 6} <= {f["rows"] for f in forms}
        assert {f["form"] for f in forms} <= {"weight-right", "weight-left"}
    else:
        assert cell["matmul_forms"] is None
    assert cell["batches"] == 2 and cell["stop_at_eos"] is True  # 3 prompts in batches of 2
    assert cell["load"]["measured"]
    rows = cell["variants"]
    assert set(rows) == {
        "skipdecode-full",
        "speculative-k2",
        "speculative-k2-b6",
        "speculative-k2-b10",
        "speculative-k2-vocab4096",
        "speculative-k2-auto",
    }
    assert all(r["identical_to_full"] for n, r in rows.items() if n != "skipdecode-full")
    assert sum(bool(rows[f"speculative-k2-b{b}"].get("chosen")) for b in (6, 10)) == 1
    assert set(rows["speculative-k2-b6"]["acceptance_by_budget"]) == {"6"}
    spec = rows["speculative-k2"]
    assert 0 <= spec["acceptance_rate"] <= 1 and spec["tokens_per_verify"] >= 1
    cost = spec["cost"]
    assert cost["drafts_per_round"] > 0 and 0 < cost["head_share_of_draft"] < 1
    assert cost["verify_per_round"] > 0 and cost["predicted_speedup"] > 0
    assert spec["speedup_vs_full"] > 0
    auto = rows["speculative-k2-auto"]  # its first round per batch is plain, decided or not
    assert auto["plain_rounds"] >= cell["batches"]
    assert 0 <= auto["turned_off"] + auto["started_off"] <= cell["batches"]
    table = (tmp_path / "spec.md").read_text()
    assert "| speculative-k2 |" in table and "speculative-k2-auto (off in " in table
    for row in rows.values():  # every repeat's seconds kept: the audit recomputes the medians
        assert len(row["decode_s_per_repeat"]) == 1
        assert all(len(b["decode_s_per_repeat"]) == 1 for b in row["per_batch"])
    from skipdecode.experiments.recompute.speculative import check_speculative

    (tmp_path / "results" / "bench").mkdir(parents=True)
    for suffix in (".json", ".md"):
        name = f"speculative-smoke{suffix}"
        (tmp_path / "results" / "bench" / name).write_text((tmp_path / f"spec{suffix}").read_text())
    found = check_speculative(tmp_path / "results")
    assert found.differences == [] and not found.skipped
    assert ("| compiled |" in table) is compile


def test_speculative_bench_prompts_a_model_without_a_chat_template_in_plain_text():
    from skipdecode.experiments.benchmarks.bench_workloads import CHAT_PROMPTS, load_workload

    class Plain:  # a base model's tokenizer: no chat template
        chat_template, pad_token_id, eos_token_id = None, 0, 2

        def __init__(self):
            self.texts = []

        def __call__(self, text):
            self.texts.append(text)
            return {"input_ids": [5] * (1 + len(self.texts))}

    tokenizer = Plain()
    workload = load_workload("chat", tokenizer, 2, Path("."))
    assert tokenizer.texts == list(CHAT_PROMPTS[:2])
    ((ids, mask),) = workload.batches(2)
    assert ids.tolist() == [[0, 5, 5], [5, 5, 5]] and mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    with pytest.raises(ValueError, match="--prompts=99; allowed for chat: 1 to 16"):
        load_workload("chat", tokenizer, 99, Path("."))


def test_speculative_bench_decodes_the_test_inputs_a_model_was_fine_tuned_for(tmp_path):
    """--workload dataset: the export's own test inputs, prompted as the evaluation prompts
    them, batched by length; constant draft and draft vocabulary (ranked from the training
    targets) for every variant; outputs the full model's."""
    from exports import make_exported_dir
    from transformers import AutoTokenizer

    from skipdecode.data import get_task
    from skipdecode.evaluation.inputs import (
        dataset_settings,
        draft_vocabulary,
        encode_prompts,
        load_examples,
    )
    from skipdecode.experiments.benchmarks.bench_speculative import main as bench_speculative_main
    from skipdecode.experiments.benchmarks.bench_workloads import load_workload

    model_dir = make_exported_dir(tmp_path / "export", num_layers=4)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    workload = load_workload("dataset", tokenizer, 5, model_dir)
    settings = dataset_settings({}, json.loads((model_dir / "skipdecode.json").read_text()))
    sources = [ex.source for ex in load_examples(settings, "test", 5)]
    expected, _ = encode_prompts(tokenizer, get_task("synthetic"), sources, 96)
    assert workload.name == "synthetic-test" and workload.prompts == expected
    lengths = [int(m.sum()) for _, mask in workload.batches(2) for m in mask]
    assert lengths[:5] == sorted(len(p) for p in expected)  # the evaluation's order
    assert workload.draft_vocab(tokenizer, 20) == draft_vocabulary(settings, tokenizer, 20)
    with pytest.raises(ValueError, match="needs a fine-tuned export"):
        load_workload("dataset", tokenizer, 5, tmp_path)

    bench_speculative_main(
        [
            f"--model={model_dir}",
            "--workload=dataset",
            "--prompts=5",
            "--batch-sizes",
            "2",
            "--ks",
            "2",
            "--draft-budget=2",
            "--draft-budgets",
            "3",
            "--draft-vocab=20",
            "--new-tokens=4",
            "--repeats=1",
            f"--out={tmp_path}",
            "--name=spec",
        ]
    )
    (cell,) = json.loads((tmp_path / "spec.json").read_text())["cells"]
    assert cell["workload"] == "synthetic-test" and cell["prompts"] == 5 and cell["batches"] == 3
    assert cell["draft"]["budgets"] == [2] and cell["draft_vocab"] == 20
    rows = cell["variants"]
    spec = rows["speculative-k2"]
    assert spec["identical_to_full"] and set(spec["acceptance_by_budget"]) == {"2"}
    assert set(rows["speculative-k2-b3"]["acceptance_by_budget"]) == {"3"}
    assert sum(bool(rows[n].get("chosen")) for n in ("speculative-k2", "speculative-k2-b3")) == 1
    per_batch = spec["per_batch"]  # what the interval over prompts resamples
    assert len(per_batch) == cell["batches"]
    assert sum(b["tokens"] for b in per_batch) == spec["tokens"]
    accepted, drafted = (sum(b[key] for b in per_batch) for key in ("accepted", "drafted"))
    assert accepted / drafted == pytest.approx(spec["acceptance_rate"])
    rounds = sum(b["row_rounds"] for b in per_batch)
    assert (accepted + rounds) / rounds == pytest.approx(spec["tokens_per_verify"])
    assert "drafted" not in rows["skipdecode-full"]["per_batch"][0]


def test_speculative_bench_drafts_with_the_warm_up_it_is_given(tmp_path, capsys, monkeypatch):
    """--draft-warmup: the bottom layers of every constant draft (the shape a model was trained
    with); one that leaves no top layer, or shapes no draft, is refused by name before anything
    runs."""
    from exports import make_exported_dir

    from skipdecode.experiments.benchmarks import bench_speculative
    from skipdecode.experiments.benchmarks.bench_speculative import main as bench_speculative_main

    drafts = []
    build = bench_speculative.build_schedule
    monkeypatch.setattr(
        bench_speculative,
        "build_schedule",
        lambda cfg, *a: drafts.append(cfg["draft"]) or build(cfg, *a),
    )

    model_dir = make_exported_dir(tmp_path / "export", num_layers=4)
    common = [f"--model={model_dir}", "--workload=dataset", "--prompts=2", "--batch-sizes", "2"]
    common += ["--ks", "2", "--new-tokens=3", "--repeats=1", f"--out={tmp_path}"]
    with pytest.raises(SystemExit):
        bench_speculative_main([*common, "--draft-budget=3", "--draft-warmup=3", "--name=bad"])
    err = capsys.readouterr().err
    assert "--draft-warmup: 3 is not allowed (1 to one less than the smallest" in err
    with pytest.raises(SystemExit):
        bench_speculative_main([*common, "--draft-warmup=2", "--name=bad"])
    assert "--draft-warmup: 2 shapes constant drafts, and none is asked for" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "bad.json").exists() and drafts == []
    bench_speculative_main(
        [*common, "--draft-budget=3", "--draft-budgets", "3", "--draft-warmup=2", "--name=w2"]
    )
    (cell,) = json.loads((tmp_path / "w2.json").read_text())["cells"]
    assert cell["draft"] == {"name": "budgets", "budgets": [3], "warmup_layers": 2}
    assert drafts == [{"name": "budgets", "budgets": [3], "warmup_layers": 2}] * 2  # k2, k2-b3
    for name in ("speculative-k2", "speculative-k2-b3"):
        row = cell["variants"][name]
        assert row["identical_to_full"] and set(row["acceptance_by_budget"]) == {"3"}


def _plan_graphs_args(model_dir, tmp_path) -> list[str]:
    """The speculative benchmark's arguments for plan graphs on the model at ``model_dir``."""
    common = [f"--model={model_dir}", "--workload=dataset", "--prompts=2", "--batch-sizes", "2"]
    common += ["--ks", "2", "--new-tokens=3", "--repeats=1", f"--out={tmp_path}"]
    return [*common, "--draft-budget=3", "--plan-graphs"]


def test_speculative_bench_refuses_plan_graphs_without_compile(tmp_path, capsys):
    """Refused while its options are read, before any model loads (none is written here)."""
    from skipdecode.experiments.benchmarks.bench_speculative import main as bench_speculative_main

    with pytest.raises(SystemExit):
        bench_speculative_main([*_plan_graphs_args(tmp_path / "absent", tmp_path), "--name=bad"])
    assert (
        "--plan-graphs: 'plan' is a kind of compiled graph, and --compile is False; allowed with --compile=true"
        in (capsys.readouterr().err)
    )
    assert not (tmp_path / "bad.json").exists()


@pytest.mark.slow  # compiles three plan graphs; their tokens against eager: tests/core/test_compiled.py
def test_speculative_bench_on_plan_graphs_keeps_the_full_models_output(tmp_path):
    """--plan-graphs: each pass's layers one compiled graph (the full step, the constant draft,
    the verify pass); the output stays the full model's."""
    from exports import make_exported_dir

    from skipdecode.experiments.benchmarks.bench_speculative import main as bench_speculative_main

    common = _plan_graphs_args(make_exported_dir(tmp_path / "export", num_layers=4), tmp_path)
    bench_speculative_main([*common, "--compile", "--name=plan"])
    (cell,) = json.loads((tmp_path / "plan.json").read_text())["cells"]
    assert cell["compiled"] and cell["compile_graph"] == "plan" and cell["compile_s"] > 0
    assert cell["variants"]["speculative-k2"]["identical_to_full"]
    assert "| compiled, plan graphs | 2 | speculative-k2 |" in (tmp_path / "plan.md").read_text()


@pytest.mark.slow  # compiles the layer and plan graphs and transformers' generate: make test-slow
def test_decode_bench_times_the_full_schedule_on_plan_graphs(tmp_path):
    main(
        ["--shapes", "tiny", "--batch-sizes", "2", "--prompt-len", "8", "--new-tokens", "4",
         "--repeats", "1", "--speedups", "2", "--compile", "--plan-graphs", "--no-floor",
         "--out", str(tmp_path), "--name", "plan"]
    )  # fmt: skip
    (cell,) = json.loads((tmp_path / "plan.json").read_text())["cells"]
    assert cell["plan_graphs"] is True
    plan = cell["variants"]["skipdecode-full-compiled-plan"]
    assert plan["compiled"] and plan["compile_s"] > 0 and plan["layers_per_token"] == 8.0
    assert "skipdecode-2x-compiled-plan" not in cell["variants"]  # a graph per layer set
    assert plan["speedup_vs_transformers_generate_compiled"] > 0
    assert "| skipdecode-full-compiled-plan |" in (tmp_path / "plan.md").read_text()


def test_decode_bench_refuses_plan_graphs_without_compile(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--shapes", "tiny", "--plan-graphs", "--no-floor", "--out", str(tmp_path)])
    assert (
        "--plan-graphs: 'plan' is a kind of compiled graph, and --compile is False; allowed with --compile=true"
        in (capsys.readouterr().err)
    )
    assert not list(tmp_path.iterdir())  # refused before anything is written


@pytest.mark.parametrize(
    "option, value, refusal",
    [
        ("--repeats", "0", "argument --repeats: 0 is not allowed (an integer >= 1)"),
        ("--speedups", "0", "argument --speedups: 0 is not allowed (an integer >= 1)"),
        ("--new-tokens", "x", "argument --new-tokens: 'x' is not an integer"),
        ("--batch-sizes", "-2", "argument --batch-sizes: -2 is not allowed (an integer >= 1)"),
    ],
)
def test_decode_bench_refuses_a_count_out_of_range_by_option(
    tmp_path, capsys, option, value, refusal
):
    """Once ``--repeats 0`` crashed after the model was built (an empty list's first item)."""
    with pytest.raises(SystemExit):
        main(["--shapes", "tiny", option, value, "--no-floor", "--out", str(tmp_path)])
    assert refusal in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before anything is written


def test_capture_bench_times_the_cuda_graph_path_with_nothing_compiled_while_timed(
    tmp_path, monkeypatch
):
    """``--cuda-graphs`` (the dry run of make bench-gpu on a CPU): the ``-graphs`` variants
    beside the compiled ones (the eager path times the full schedule only), warmed up twice;
    the cell reports the graphs compiled and recorded while timed (none), the CUDA-graph skips
    (a CPU has no graphs: counted, not hidden), and each graph variant's tokens against the
    compiled path's, each whole-step variant's against the per-layer graphs'; the lossless rows
    (host-driven and sync-free) time a round, divide it by the tokens their own rounds yielded,
    and equal the full model's tokens. Compiled without inductor (``without_inductor``: a GPU's
    kernels are not a CPU's C++ anyway)."""
    without_inductor(monkeypatch)
    main(
        ["--shapes", "tiny", "--batch-sizes", "2", "--prompt-len", "8", "--new-tokens", "6",
         "--repeats", "1", "--speedups", "2", "--cuda-graphs", "--no-floor", "--compile",
         "--lossless-ks", "2", "--draft-budget", "4", "--profile",
         "--no-transformers", "--out", str(tmp_path), "--name", "graphs",
         "--allow-busy"]
    )  # fmt: skip
    (cell,) = json.loads((tmp_path / "graphs.json").read_text())["cells"]
    rows = cell["variants"]
    assert "skipdecode-2x" not in rows and "skipdecode-full" in rows
    graphs = rows["skipdecode-2x-graphs"]
    assert graphs["compiled"] and graphs["layers_per_token"] == pytest.approx(
        rows["skipdecode-2x-compiled"]["layers_per_token"]
    )
    assert graphs["tokens_equal"] == "skipdecode-2x-compiled" and graphs["tokens_equal_reference"]
    step = rows["skipdecode-2x-step"]
    assert step["tokens_equal"] == "skipdecode-2x-graphs" and step["tokens_equal_reference"]
    assert step["measured_speedup"] > 0 and "ideal_speedup" not in step
    for suffix in ("graphs", "step"):
        lossless = rows[f"lossless-k2-b4-{suffix}"]
        assert lossless["tokens_equal"] == f"skipdecode-full-{suffix}"
        assert lossless["tokens_equal_reference"]
        tpr = lossless["tokens_per_round"]
        assert 1 <= tpr <= 3 and lossless["ms_per_round"] > 0
        assert lossless["decode_ms_per_step"] == pytest.approx(lossless["ms_per_round"] / tpr)
    (costs_32, costs_256) = cell["step_graphs"]
    assert (costs_32["new_tokens"], costs_256["new_tokens"]) == (32, 256)
    assert costs_32["graphs_recorded"] == costs_32["plans"] > 1 and costs_32["graph"] == "step"
    assert cell["graphs_compiled_while_timed"] == 0
    assert cell["cudagraph_skips"] == 0 and isinstance(cell["cudagraph_skips"], int)  # counted
    assert cell["graphs_recorded_while_timed"] == 0 and cell["failed"] == {}
    # --profile: what a decode step adds, per step, on each profiled path (a CPU counts its
    # operators); a 2x step runs fewer of them than a full one, and the busy share is their time
    # over the step's timed median
    profiles = cell["step_profile"]
    assert set(profiles) == {"skipdecode-full-step", "skipdecode-2x-step", "skipdecode-full-graphs"}
    full, two = profiles["skipdecode-full-step"], profiles["skipdecode-2x-step"]
    assert full["unit"] == "cpu operators" and 0 < two["events_per_step"] < full["events_per_step"]
    assert full["timed_ms_per_step"] == rows["skipdecode-full-step"]["decode_ms_per_step"]
    assert full["busy_share"] == pytest.approx(
        full["device_us_per_step"] / (full["timed_ms_per_step"] * 1000)
    )
    assert full["host_per_step"]["graph_launches"] == 0 and full["top"][0]["per_step"] > 0
    table = (tmp_path / "graphs.md").read_text()
    assert "| CUDA-graph skips | graphs recorded while timed | failed |" in table
    assert "tokens a round, both measured in this run" in table
    # the audit recomputes every row from its kept seconds, the lossless rows included, and
    # every path's split (the graph paths' too) and the ideal speedups it predicts
    from skipdecode.experiments.recompute.bench import check_bench
    from skipdecode.experiments.recompute.split import check_splits

    bench = tmp_path / "results" / "bench"
    bench.mkdir(parents=True)
    (bench / "decode-graphs.json").write_text((tmp_path / "graphs.json").read_text())
    for check in (check_bench, check_splits):
        found = check(tmp_path / "results")
        assert found.differences == [] and found.checked > 20, check
        assert not any("raw" in why or "split" in why for why in found.skipped), found.skipped


def test_bench_lossless_time_per_token_from_the_cpu_acceptance_record(tmp_path):
    """The lossless rows divide the GPU's round by the trained draft's tokens per round from a
    CPU record of the same draft size; a record of another size, or without a k, is refused."""
    from skipdecode.experiments.benchmarks.bench_lossless import acceptance_of, lossless_rows

    record = Path("results/bench/speculative-budgets-b10.json")
    acc = acceptance_of(record, (2, 3), 10)
    assert acc["tokens_per_verify"][2] == pytest.approx(2.166, abs=1e-3)
    with pytest.raises(ValueError, match="draft_budget=10"):
        acceptance_of(record, (2,), 8)
    with pytest.raises(ValueError, match=r"k = \[7\]"):
        acceptance_of(record, (2, 7), 10)
    rows = {
        "lossless-k2-b10-graphs": {
            "decode_ms_per_step": 3.0, "decode_ms_q1": 2.9, "decode_ms_q3": 3.1,
            "layers_per_token": 50.0, "tokens_per_s": 1.0,
        }
    }  # fmt: skip
    lossless_rows(rows, acc)
    r = rows["lossless-k2-b10-graphs"]
    assert r["ms_per_round"] == 3.0 and r["decode_ms_per_step"] == pytest.approx(
        3.0 / 2.166, abs=1e-3
    )
    assert "tokens_per_s" not in r and "measured on the CPU" in r["flag"]


def test_a_benchmark_timed_on_a_busy_machine_is_named_and_refused_by_the_audit(
    tmp_path, monkeypatch, capsys
):
    """The second cell is timed while other processes use 60% of the CPUs: the run warns, naming
    the cell, the share and the threshold; the audit refuses the record in results/bench until
    its run says ``--allow-busy``, and a quiet record passes."""
    from skipdecode.evaluation import load as load_module
    from skipdecode.experiments.benchmarks import bench as bench_module
    from skipdecode.experiments.recompute.bench import check_bench

    shares = iter([0.0, 0.6, 0.0, 0.6, 0.0, 0.1])

    class SharedCpu(load_module.CpuLoad):
        def __exit__(self, *exc: object) -> None:
            super().__exit__(*exc)
            self.result = {**self.result, "measured": True, "other_share": next(shares)}

    monkeypatch.setattr(bench_module, "CpuLoad", SharedCpu)
    bench = tmp_path / "results" / "bench"
    argv = [
        "--shapes", "tiny", "--batch-sizes", "1", "2", "--prompt-len", "4", "--new-tokens", "3",
        "--repeats", "1", "--speedups", "2", "--no-transformers", "--no-floor",
        "--out", str(bench), "--name", "decode-busy", "--no-progress",
    ]  # fmt: skip

    def refusals() -> list[str]:
        return [d for d in check_bench(tmp_path / "results").differences if "--allow-busy" in d]

    main(argv)
    assert "warning: 1 cell(s) of decode-busy (tiny batch 2)" in capsys.readouterr().out
    assert [c["load"]["other_share"] for c in _record(bench)["cells"]] == [0.0, 0.6]
    (refused,) = refusals()
    assert "decode-busy.json tiny batch 2: timed while other processes used 60%" in refused
    main([*argv, "--allow-busy"])
    assert "warning" not in capsys.readouterr().out
    assert refusals() == []
    main(argv)  # quiet: 0% and 10%
    assert "warning" not in capsys.readouterr().out and refusals() == []


def _record(folder: Path) -> dict:
    return json.loads((folder / "decode-busy.json").read_text())


def test_a_peer_whose_decode_timed_at_zero_gives_no_speedups_and_is_flagged():
    """``generate``'s decode is its whole call less a one-token call; on a tiny model noise can
    make them equal. That peer gives no speedup (nothing to divide), and the row says why."""
    from skipdecode.experiments.benchmarks.bench_speedups import derive_speedups
    from skipdecode.schedules import FullSchedule

    rows = {
        "transformers-generate": {"decode_ms_per_step": 0.0, "layers_per_token": 8.0},
        "skipdecode-full": {"decode_ms_per_step": 2.0, "layers_per_token": 8.0},
    }
    derive_speedups(rows, {"skipdecode-full": FullSchedule(8)}, {}, 8, True)
    assert "speedup_vs_transformers_generate" not in rows["skipdecode-full"]
    assert "no speedups" in rows["transformers-generate"]["flag"]
    rows["transformers-generate"]["decode_ms_per_step"] = 3.0
    derive_speedups(rows, {"skipdecode-full": FullSchedule(8)}, {}, 8, True)
    assert rows["skipdecode-full"]["speedup_vs_transformers_generate"] == 1.5


def test_the_benchmarks_help_renders_with_the_busy_threshold():
    """argparse formats help strings with %: a bare percent sign in one breaks ``--help``."""
    from skipdecode.experiments.benchmarks.bench_args import bench_parser
    from skipdecode.experiments.benchmarks.bench_speculative_args import parser

    for p in (bench_parser("decode"), parser("lossless")):
        assert "more than 25% of the CPUs" in " ".join(p.format_help().split())
