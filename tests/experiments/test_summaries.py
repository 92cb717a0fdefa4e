"""Summarization: a tiny offline sweep on SciTLDR trains, evaluates against every reference and
records where long prompts leave the speedup; the summaries stage scores ROUGE in SciTLDR's
conventions and compares with full over seeds."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from exports import write_published_cell
from offline_env import offline_env
from rouge_score import rouge_scorer
from verdicts import verdict_from_columns

from skipdecode.experiments.sweeps.summaries import decided, write_summaries

ROOT = Path(__file__).resolve().parents[2]
SCITLDR = ROOT.parent / "shared" / "data" / "scitldr"

#: Each input's references in the cells :func:`_cell` writes.
REFS = [["we propose a new model for parsing", "a parser that is fast"], ["a study of loss"]]

TINY_SCITLDR = [
    "model=tiny",
    "dataset=scitldr",
    f"dataset.data_dir={SCITLDR}",
    "trainer=cpu",
    "logger=csv",
    "eval=fast",
    "model.arch.hidden_size=32",
    "model.arch.word_embed_proj_dim=32",
    "model.arch.ffn_dim=64",
    "model.tokenizer.vocab_size=300",
    "dataset.limit_train=24",
    "dataset.limit_validation=4",
    # the tiny model holds 512 positions; its 300-token vocabulary spells an abstract long
    "dataset.max_source_tokens=96",
    "dataset.max_target_tokens=24",
    "loader.batch_size=4",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "module.validate_full=false",
    "eval.limit=6",
    "eval.generation.batch_size=3",
    "eval.generation.max_new_tokens=8",
]


@pytest.mark.skipif(not (SCITLDR / "test.jsonl").is_file(), reason="no SciTLDR files")
def test_tiny_scitldr_sweep_scores_every_reference_and_the_long_prompt_speed(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "skipdecode.sweep",
        "-m",
        *TINY_SCITLDR,
        "schedule=full,target_2x",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"sweep.cells_dir={tmp_path / 'cells'}",
        f"paths.log_dir={tmp_path / 'logs'}",
    ]
    env = offline_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = tmp_path / "sweep"
    records, folders = {}, {}
    for cell_file in sweep.glob("*/cell.json"):
        cell = json.loads(cell_file.read_text())
        assert cell["status"] == "ok", cell
        records[cell["schedule"]] = json.loads(Path(cell["record"]).read_text())
        folders[cell["schedule"]] = Path(cell["record"]).parent
    two, full = records["target_2x"], records["full"]
    generations = folders["target_2x"] / two["files"]["generations"]
    gens = [json.loads(line) for line in generations.open()]
    test_rows = [json.loads(line) for line in (SCITLDR / "test.jsonl").open()][:6]
    assert [len(g["references"]) for g in gens] == [len(set(r["target"])) for r in test_rows]
    assert {"rouge1_max", "rougeL_mean"} <= set(gens[0]["scores"])
    # the prediction from the layer counts uses full's own timed prefill and decode seconds
    lp, base = two["speed"]["long_prompts"], two["speed"]["baseline"]
    p, d = base["prefill_seconds"], base["decode_seconds"]
    assert lp["predicted_speedup_e2e"] == pytest.approx(
        (p + d) / (p + d / lp["predicted_speedup_decode"]), rel=1e-12
    )
    assert lp["predicted_speedup_decode"] > 1.0 and 0.0 < lp["prefill_share"] < 1.0
    assert lp["prefill_share_baseline"] == pytest.approx(p / (p + d), rel=1e-12)
    assert full["speed"]["long_prompts"]["predicted_speedup_e2e"] == 1.0
    assert two["summary"]["predicted_speedup_e2e"] == lp["predicted_speedup_e2e"]

    paths = write_summaries(sweep)
    rows = {r["schedule"]: r for r in csv.DictReader(paths["csv"].open())}
    assert set(rows) == {"full", "target_2x"}
    for key in ("rouge1_max", "rouge2_max", "rougeL_mean"):  # recomputed as the evaluation did
        assert float(rows["target_2x"][key]) == pytest.approx(two["summary"][key], abs=1e-12)
    assert rows["target_2x"]["delta_seeds"] == str(two["config"]["seed"])
    assert "| tiny | target_2x | skipdecode |" in paths["markdown"].read_text()


def _cell(
    folder: Path,
    job: int,
    schedule: str,
    seed: int,
    outputs: list[str],
    dataset: str = "scitldr",
    steps: int | None = None,
) -> None:
    """A finished SciTLDR (or ``dataset``) cell as a published sweep holds it (evaluated after
    ``steps`` fine-tuning steps, where given)."""
    rows = [
        {"index": i, "input": f"abstract {i}", "references": REFS[i], "output": out, "scores": {}}
        for i, out in enumerate(outputs)
    ]
    record = {
        "summary": {"bleu": 10.0 * seed},
        "quality": {"bleu": {"settings": {"tokenize": "13a"}}, "rouge": {"settings": {}}},
        "speed": {
            "theoretical_speedup": 1.8 if schedule != "full" else 1.0,
            "batch_speedup": 3.0 if schedule != "full" else 1.0,  # every batch: not shown
            "long_prompts": {
                "prefill_share": 0.25,
                "predicted_speedup_decode": 2.0 if schedule != "full" else 1.0,
                "predicted_speedup_e2e": 1.5,
            },
        },
    }
    cell = {
        "dataset": dataset,
        "model": "smollm2-135m",
        "schedule": schedule,
        "method": "full" if schedule == "full" else "skipdecode",
        "target_speedup": 1.0 if schedule == "full" else 2.0,
        "seed": seed,
        **({"train_steps": steps} if steps is not None else {}),
    }
    write_published_cell(folder / str(job), rows, record, cell)


def _budget_folder(folder: Path, outputs: dict[tuple[str, int], list[str]]) -> None:
    """A budget folder on SciTLDR: for seeds 1 and 2, a cell of each (schedule, steps) of
    ``outputs`` whose record counts BLEU as the evaluation does, and its ``cells.csv``."""
    from skipdecode.evaluation.metrics.text import bleu
    from skipdecode.experiments.sweeps.steps import with_steps
    from skipdecode.experiments.sweeps.table import COLUMNS, collect, csv_text

    job = 0
    for seed in (1, 2):
        for (schedule, steps), out in outputs.items():
            _cell(folder, job, schedule, seed, out, steps=steps)
            record = json.loads((folder / str(job) / "record.json").read_text())
            record["summary"]["bleu"] = bleu(out, REFS)["score"]  # as the evaluation counts it
            (folder / str(job) / "record.json").write_text(json.dumps(record))
            job += 1
    cells = collect(folder)
    (folder / "cells.csv").write_text(csv_text(cells, with_steps(COLUMNS, cells)))


def test_summaries_score_both_conventions_and_difference_from_full(tmp_path):
    full_out = ["we propose a fast parser", "a study of the loss"]
    two_out = ["a new model", "a study of loss"]
    for seed in (1, 2):
        _cell(tmp_path, 2 * seed, "full", seed, full_out)
        _cell(tmp_path, 2 * seed + 1, "target_2x", seed, two_out)
    paths = write_summaries(tmp_path)
    rows = {r["schedule"]: r for r in csv.DictReader(paths["csv"].open())}
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)

    def expected(outputs: list[str], t: str, convention: str) -> float:
        per = []
        for out, group in zip(outputs, REFS, strict=True):
            s = [scorer.score(r, out) for r in group]
            if convention == "max":
                best = max(range(len(s)), key=lambda i: (s[i]["rouge1"].fmeasure, -i))
                per.append(s[best][t].fmeasure)
            else:
                per.append(sum(x[t].fmeasure for x in s) / len(s))
        return sum(per) / len(per)

    for t in ("rouge1", "rouge2", "rougeL"):
        for c in ("max", "mean"):
            got = float(rows["target_2x"][f"{t}_{c}"])
            assert got == pytest.approx(expected(two_out, t, c), abs=1e-12)
            delta = float(rows["target_2x"][f"{t}_{c}_delta"])
            assert delta == pytest.approx(got - expected(full_out, t, c), abs=1e-12)
    two = rows["target_2x"]
    # identical outputs for both seeds: a zero-width interval over seeds, and the bootstrap's
    # interval holds the observed difference
    assert float(two["rougeL_max_delta_seed_ci95_low"]) == pytest.approx(
        float(two["rougeL_max_delta"])
    )
    assert (
        float(two["rougeL_max_delta_ci95_low"])
        <= float(two["rougeL_max_delta"])
        <= float(two["rougeL_max_delta_ci95_high"])
    )
    assert two["delta_seeds"] == "1 2" and rows["full"]["delta_seeds"] == ""
    # the reached layer speedup is the timed batches' one, beside the paper's per-token figure
    assert float(two["predicted_speedup_decode"]) == 2.0 and float(two["prefill_share"]) == 0.25
    assert float(two["theoretical_speedup"]) == 1.8 and "batch_speedup" not in two
    md = paths["markdown"].read_text()
    assert "| smollm2-135m | target_2x | skipdecode | 1 2 |" in md and "25.0%" in md
    assert "| 1.80x | 2.00x |" in md and "3.00x" not in md
    assert "| RL max: decided | BERT-F: decided |" in md
    verdict = rows["target_2x"]["rougeL_max_decided"]
    assert verdict == verdict_from_columns(rows["target_2x"], "rougeL_max") != ""


def test_a_scitldr_budget_sets_each_step_against_full_at_that_step_in_rouge_l_max(tmp_path):
    """A budget folder on SciTLDR: a schedule's cells after each number of steps are set
    against full's after as many (never full's at another step), the budget page reads
    SciTLDR's ROUGE-L max from ``summaries.csv``, and ``make audit`` recomputes both pages and
    catches a budget number changed by hand."""
    from skipdecode.evaluation.metrics.text import rouge
    from skipdecode.experiments.recompute.budget import check_budget
    from skipdecode.experiments.recompute.summaries import check_summaries
    from skipdecode.experiments.sweeps.budget import write_budget
    from skipdecode.experiments.sweeps.table import csv_text

    outputs = {
        ("full", 1): ["we propose a fast parser", "a study of the loss"],
        ("full", 2): ["we propose a new model for parsing", "a study of loss"],
        ("target_2x", 1): ["a new model", "a study"],
        ("target_2x", 2): ["we propose a new parser", "a study of loss"],
    }
    folder = tmp_path / "results" / "scitldr_budget"
    _budget_folder(folder, outputs)
    write_summaries(folder)
    paths = write_budget(folder, plot=False)

    def rl_max(out: list[str]) -> float:
        scored = rouge(out, REFS, types=("rouge1", "rougeL"), per_example=True)
        return sum(scored["per_example"]["rougeL_max"]["f"]) / len(out)

    budget = {r["train_steps"]: r for r in csv.DictReader(paths["csv"].open())}
    assert set(budget) == {"1", "2"} and {r["metric"] for r in budget.values()} == {"ROUGE-L max"}
    for steps in (1, 2):
        delta = 100 * (rl_max(outputs[("target_2x", steps)]) - rl_max(outputs[("full", steps)]))
        other = 100 * (rl_max(outputs[("target_2x", steps)]) - rl_max(outputs[("full", 3 - steps)]))
        assert float(budget[str(steps)]["delta"]) == pytest.approx(delta, abs=1e-9) != other
        assert budget[str(steps)]["delta_seeds"] == "1 2"
    assert "| target_2x | skipdecode | 2 | 1 2 |" in (folder / "summaries.md").read_text()
    assert "from the folder's `summaries.csv`" in paths["md"].read_text()

    for check in (check_summaries, check_budget):
        found = check(folder.parent)
        assert found.differences == [] and found.checked > 10, found.differences
    rows = list(csv.DictReader(paths["csv"].open()))
    rows[1]["delta"] = str(float(rows[1]["delta"]) + 0.5)
    paths["csv"].write_text(csv_text(rows, list(rows[0])))
    assert any("budget.csv target_2x 2" in d and "delta" in d
               for d in check_budget(folder.parent).differences)  # fmt: skip


def test_a_budget_folder_with_only_full_says_nothing_is_paired_and_writes_no_budget_page(tmp_path):
    """Half a budget study (full after each number of steps, no other schedule yet): the
    summaries say that nothing pairs with full instead of an empty table, no budget page is
    written, and the audit recomputes what is there."""
    from skipdecode.experiments.recompute.summaries import check_summaries
    from skipdecode.experiments.sweeps.budget import write_budget

    folder, out = tmp_path / "results" / "scitldr_budget", ["we propose a fast parser", "a study"]
    _budget_folder(folder, {("full", 1): out, ("full", 2): out})
    md = write_summaries(folder)["markdown"].read_text()
    against = md.split("## Against full")[1].split("##")[0]
    assert "No other schedule's cells pair with full's here" in against and "|" not in against
    assert "| smollm2-135m | full | full | 2 | 1 2 |" in md
    assert write_budget(folder, plot=False) is None
    found = check_summaries(folder.parent)
    assert found.differences == [] and found.checked > 10, found.differences


def test_decided_needs_every_interval_to_exclude_zero():
    m = "rougeL_max"
    both_below = {f"{m}_delta_ci95": (-0.04, -0.01), f"{m}_delta_seed_ci95": (-0.05, -0.02)}
    assert decided(both_below, m) == "lower"
    # the inputs decide but the seeds do not: the data do not decide
    seeds_hold_zero = {f"{m}_delta_ci95": (-0.04, -0.01), f"{m}_delta_seed_ci95": (-0.06, 0.01)}
    assert decided(seeds_hold_zero, m) == "undecided"
    assert decided({f"{m}_delta_ci95": (0.01, 0.03), f"{m}_delta_seed_ci95": (0.0, 0.02)}, m) == (
        "undecided"
    )
    assert decided({f"{m}_delta_ci95": (0.01, 0.03), f"{m}_delta_seed_ci95": (0.005, 0.02)}, m) == (
        "higher"
    )
    # one seed: only the inputs were drawn, and the answer says so
    one_seed = {f"{m}_delta_ci95": (0.01, 0.03), f"{m}_delta_seed_ci95": (None, None)}
    assert decided(one_seed, m) == "higher (inputs only)"
    assert decided({f"{m}_delta_ci95": (None, None)}, m) == "" and decided({}, m) == ""


def test_one_model_page_sets_each_schedule_beside_its_own_fine_tune(tmp_path):
    """The budget-randomized model under target_2x against the target_2x fine-tunes: paired by
    seed, Δ = one model - per schedule, both sides' measured speeds."""
    from skipdecode.experiments.sweeps.one_model import write_one_model

    own, one = tmp_path / "results" / "per_schedule", tmp_path / "results" / "randomized"
    _cell(own, 0, "full", 1, ["we propose a fast parser", "a study of the loss"])
    _cell(own, 1, "target_2x", 1, ["a new model", "a study of loss"])
    _cell(own, 2, "target_2x", 2, ["a new model", "a study of loss"])
    _cell(one, 0, "full", 1, ["we propose a fast parser", "a study of the loss"])
    _cell(one, 1, "target_2x", 1, ["a parser that is fast", "a study of loss"])
    paths = write_one_model(one, own, label="results/per_schedule")
    rows = {r["schedule"]: r for r in csv.DictReader(paths["csv"].open())}
    two = rows["target_2x"]
    assert two["seeds"] == "1" and two["per_schedule_seeds"] == "1 2"
    assert two["delta_seeds"] == "1"  # only seed 1 pairs: an inputs-only interval
    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)

    def rl_max(outputs: list[str]) -> float:
        per = []
        for out, group in zip(outputs, REFS, strict=True):
            s = [scorer.score(r, out) for r in group]
            best = max(range(len(s)), key=lambda i: (s[i]["rouge1"].fmeasure, -i))
            per.append(s[best]["rougeL"].fmeasure)
        return sum(per) / len(per)

    mine, theirs = (
        rl_max(["a parser that is fast", "a study of loss"]),
        rl_max(["a new model", "a study of loss"]),
    )
    assert float(two["rougeL_max"]) == pytest.approx(mine, abs=1e-12)
    assert float(two["per_schedule_rougeL_max"]) == pytest.approx(theirs, abs=1e-12)
    assert float(two["rougeL_max_delta"]) == pytest.approx(mine - theirs, abs=1e-12)
    assert two["rougeL_max_decided"] == verdict_from_columns(two, "rougeL_max")
    md = paths["md"].read_text()
    assert md.startswith("# One budget-randomized model against one fine-tune per schedule")
    assert "| full | 1 / 1 |" in md and "| target_2x | 1 / 1 2 |" in md
    from skipdecode.experiments.sweeps.pages import PARTS

    assert PARTS["one_model"](one) == "one model"  # make docs: the same bytes again
    assert paths["md"].read_text() == md


def test_a_searched_schedule_is_set_beside_the_cells_it_is_paired_with(tmp_path):
    """--pair searched=target_2x: the searched schedule's row compares with target_2x's
    per-schedule cells, says so, and make docs keeps the pairing (from the CSV)."""
    from skipdecode.experiments.sweeps.one_model import pairs_of, write_one_model
    from skipdecode.experiments.sweeps.pages import PARTS

    own, one = tmp_path / "results" / "per_schedule", tmp_path / "results" / "randomized"
    _cell(own, 0, "full", 1, ["we propose a fast parser", "a study of the loss"])
    _cell(own, 1, "target_2x", 1, ["a new model", "a study of loss"])
    _cell(one, 0, "full", 1, ["we propose a fast parser", "a study of the loss"])
    _cell(one, 1, "searched", 1, ["a parser that is fast", "a study of loss"])
    unpaired = write_one_model(one, own, label="results/per_schedule", pairs={})
    schedules = [r["schedule"] for r in csv.DictReader(unpaired["csv"].open())]
    assert schedules == ["full"]  # nothing to compare "searched" with: left out
    paths = write_one_model(one, own, label="results/per_schedule", pairs={"searched": "target_2x"})
    row = {r["schedule"]: r for r in csv.DictReader(paths["csv"].open())}["searched"]
    assert row["per_schedule"] == "target_2x" and row["per_schedule_seeds"] == "1"
    assert row["delta_seeds"] == "1" and row["rougeL_max_delta"] != ""
    md = paths["md"].read_text()
    assert "| searched (against target_2x) | 1 / 1 |" in md and "--pair searched=target_2x" in md
    assert pairs_of(one) == {"searched": "target_2x"}
    assert PARTS["one_model"](one) == "one model" and paths["md"].read_text() == md


def test_a_second_one_model_page_compares_with_another_folder_and_make_docs_keeps_both(tmp_path):
    """--page one_model_steps: the randomized model beside a second per-schedule folder (trained
    for fewer steps), written beside one_model.md; each page states both sides' training steps,
    and make docs rewrites both from their CSVs."""
    from skipdecode.experiments.sweeps.one_model import main
    from skipdecode.experiments.sweeps.pages import PARTS

    own, short, one = (tmp_path / "results" / n for n in ("per_schedule", "short", "randomized"))
    for folder, steps in ((own, 160), (short, 31), (one, 160)):
        _cell(folder, 0, "full", 1, ["we propose a fast parser", "a study of the loss"])
        _cell(folder, 1, "target_2x", 1, ["a new model", "a study of loss"])
        for record in folder.glob("*/record.json"):
            data = json.loads(record.read_text())
            data["train_meta"] = {"checkpoint": f"/x/checkpoints/best-step{steps}.ckpt"}
            record.write_text(json.dumps(data))
    main([str(one), "--against", str(own)])
    main([str(one), "--against", str(short), "--page", "one_model_steps"])
    first, second = (one / "one_model.md").read_text(), (one / "one_model_steps.md").read_text()
    assert "training steps: one model 160, per schedule 160" in first
    assert "training steps: one model 160, per schedule 31" in second
    assert "--page one_model_steps" in second and "--page" not in first
    assert PARTS["one_model"](one) == "one model (2 pages)"
    assert (one / "one_model_steps.md").read_text() == second
    with pytest.raises(SystemExit):
        main([str(one), "--against", str(own), "--page", "../elsewhere"])


def test_one_model_page_decides_on_bleu_where_the_task_is_not_summarization(tmp_path):
    """E2E cells: the page is written (its own summaries never are) and decides on BLEU."""
    from skipdecode.experiments.sweeps.one_model import write_one_model
    from skipdecode.experiments.sweeps.summaries import summary_cells

    own, one = tmp_path / "results" / "per_schedule", tmp_path / "results" / "randomized"
    for folder, second in ((own, "a new model"), (one, "a parser that is fast")):
        _cell(folder, 0, "full", 1, ["we propose a fast parser", "a study"], dataset="e2e")
        _cell(folder, 1, "target_2x", 1, [second, "a study of loss"], dataset="e2e")
    assert summary_cells(one) == [] and len(summary_cells(one, summarization_only=False)) == 2
    md = write_one_model(one, own, label="results/per_schedule")["md"].read_text()
    assert "| ΔBLEU [per-seed t] | BLEU: decided |" in md and "RL max: decided" not in md


def test_a_speed_is_averaged_over_seeds_only_where_every_seed_has_it():
    from skipdecode.experiments.sweeps.seeds import summarize_seeds

    labels = {"dataset": "d", "model": "m", "schedule": "s", "method": "skipdecode"}
    cells = [
        {**labels, "status": "ok", "seed": 1, "measured_speedup_decode": 2.0},
        {**labels, "status": "ok", "seed": 2, "measured_speedup_decode": 2.2},
    ]
    cells[0]["measured_speedup_e2e"], cells[1]["measured_speedup_e2e"] = None, 1.3
    (row,) = summarize_seeds(cells)
    assert row["seeds"] == "1 2" and row["measured_speedup_decode"] == pytest.approx(2.1)
    assert row["measured_speedup_e2e"] is None  # not seed 2's figure under seeds 1 and 2
