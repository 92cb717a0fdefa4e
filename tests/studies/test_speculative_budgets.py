"""The draft budget chosen from bench_speculative records of models trained per budget."""

from __future__ import annotations

import json

import pytest

from studies.speculative_budgets import (
    BudgetError,
    budgets_table,
    choose_budgets,
    load_budget_run,
    main,
)

ARGS = {"workload": "e2e-test", "prompts": "3", "batch_sizes": "[1, 8]", "ks": "[2, 3]",
        "new_tokens": "64", "draft_vocab": "4096", "repeats": "2", "compile": "True",
        "dtype": "float32", "device": "cpu"}  # fmt: skip


# a round of two draft passes: 2 x 0.2 + 1.5 + 0.01 + 0.03 = 1.94 full steps for 2 steps
COST = {"draft_pass": 0.2, "verify_per_round": 1.5, "accept_per_round": 0.01,
        "bookkeeping_per_round": 0.03, "steps_per_round": 2.0, "predicted_speedup": 2.0 / 1.94}  # fmt: skip


def _variant(full_s: list[float], spec_s: list[float], accepted: list[int], rounds: list[int]):
    per_batch = [
        {"decode_s": s, "steps": r, "tokens": a + r, "drafted": 2 * r, "accepted": a,
         "row_rounds": r}
        for s, a, r in zip(spec_s, accepted, rounds, strict=True)
    ]  # fmt: skip
    return {
        "speedup_vs_full": sum(full_s) / sum(spec_s),
        "acceptance_rate": sum(accepted) / (2 * sum(rounds)),
        "tokens_per_verify": (sum(accepted) + sum(rounds)) / sum(rounds),
        "identical_to_full": True,
        "cost": COST,
        "per_batch": per_batch,
    }


def _record(tmp_path, budget, speed, accepted, cpu="cpu", rounds=(5, 5, 5), k3=1.25, **args):
    """Batch 1 (three prompts) and batch 8 (one batch); ``speed`` scales k = 2's decode time,
    ``k3`` k = 3's (its speedup is 1 / k3)."""
    full_s = [1.0, 2.0, 3.0]
    cells = []
    for size, n in ((1, 3), (8, 1)):
        full, r = full_s[:n], list(rounds[:n])
        variants = {
            "skipdecode-full": {
                "ms_per_step_of_full": 40.0,
                "per_batch": [{"decode_s": s, "steps": 10, "tokens": 10} for s in full],
            },
            "speculative-k2": _variant(full, [s / speed for s in full], accepted[:n], r),
            "speculative-k3": _variant(full, [s * k3 for s in full], accepted[:n], r),
        }
        cells.append({"batch_size": size, "threads": 2, "variants": variants})
    path = tmp_path / f"b{budget}.json"
    record_args = {**ARGS, "draft_budget": str(budget), **args}
    record = {"args": record_args, "cells": cells, "provenance": {"device": {"cpu": cpu}}}
    path.write_text(json.dumps(record))
    return path


def test_the_fastest_budget_is_chosen_and_compared_prompt_by_prompt(tmp_path):
    runs = [
        load_budget_run(_record(tmp_path, 10, 1.2, [4, 5, 6])),  # the same figures as 8
        load_budget_run(_record(tmp_path, 6, 0.9, [1, 2, 3])),
        load_budget_run(_record(tmp_path, 8, 1.2, [4, 5, 6])),
    ]  # given out of order: the result lists budgets in order
    result = choose_budgets(runs, resamples=200)
    assert result["budgets"] == [6, 8, 10]
    one, eight = result["batches"]
    assert one["chosen"] == {"draft": "8", "budget": 8, "k": 2}  # 1.2x; ties: smaller budget
    assert [(r["budget"], r["k"]) for r in one["rows"]] == [
        (6, 2), (6, 3), (8, 2), (8, 3), (10, 2), (10, 3)
    ]  # fmt: skip
    assert eight["chosen"]["budget"] == 8 and "against_chosen" not in eight
    # identical per-prompt figures differ by exactly zero in every paired draw
    same = one["against_chosen"]["10"]
    for name in ("tokens_per_verify", "speedup"):
        assert {key: same[name][key] for key in ("delta", "ci95_low", "ci95_high")} == {
            "delta": 0.0, "ci95_low": 0.0, "ci95_high": 0.0
        }  # fmt: skip
    six = one["against_chosen"]["6"]
    # pooled over all three prompts: (15 + 15) / 15 - (6 + 15) / 15 tokens per verify
    assert six["tokens_per_verify"]["delta"] == pytest.approx(30 / 15 - 21 / 15)
    assert six["speedup"]["delta"] == pytest.approx(1.2 - 0.9)
    assert six["tokens_per_verify"]["ci95_low"] > 0 and six["speedup"]["ci95_low"] > 0
    for iv in (six["tokens_per_verify"], six["speedup"]):
        assert iv["ci95_low"] <= iv["delta"] <= iv["ci95_high"]
    assert six["speedup"]["k"] == 2  # 6's own best k (0.9x against 0.8x at k = 3)
    table = budgets_table(result)
    assert "| 1 | 8 | 2 (chosen) |" in table and "| 6 | +0.600 [" in table
    assert "(k = 2) |" in table
    # measured; 2 steps a round got, 1.5 x 1.94 needed for 1.5x; 3 / 1.94 at full acceptance
    assert "| 1.20x | 2.00 / 2.91 | 1.55x | 40.00 | True |" in table
    assert "| 2.00 / 2.91 | 1.87x |" in table  # k = 3: 4 steps for 3 x 0.2 + 1.54
    assert [r["ceiling"] for r in one["rows"][:2]] == pytest.approx([3 / 1.94, 4 / 2.14])
    assert "steps a round: got / for 1.5x | ceiling (all accepted) |" in table
    two = choose_budgets(runs, resamples=10, goal=2.0)["batches"][0]["rows"][0]
    assert two["steps_for_goal"] == pytest.approx(2 * 1.94)
    assert two["ceiling"] == pytest.approx(3 / 1.94)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"new_tokens": "32"}, "new_tokens='32' where"),
        ({"compile": "False"}, "compile='False' where"),
        ({"draft_budget": "6"}, r"drafts \['6', '6'\]; allowed: each once .*--labels"),
    ],
)
def test_runs_that_differ_in_more_than_the_budget_are_refused(tmp_path, change, message):
    first = load_budget_run(_record(tmp_path, 6, 1.0, [1, 2, 3]))
    (tmp_path / "other").mkdir()
    other = load_budget_run(_record(tmp_path / "other", 8, 1.0, [1, 2, 3], **change))
    with pytest.raises(BudgetError, match=message):
        choose_budgets([first, other])


def test_a_run_without_a_draft_budget_and_a_lone_run_are_refused(tmp_path, capsys):
    path = _record(tmp_path, 6, 1.0, [1, 2, 3], draft_budget="None")
    with pytest.raises(BudgetError, match="draft_budget='None'; allowed: a run with"):
        load_budget_run(path)
    lone = load_budget_run(_record(tmp_path, 8, 1.0, [1, 2, 3]))
    with pytest.raises(BudgetError, match="1 run"):
        choose_budgets([lone])
    with pytest.raises(BudgetError, match="resamples=0"):
        choose_budgets([lone, lone], resamples=0)
    with pytest.raises(BudgetError, match=r"goal=1\.0; allowed: a speedup > 1"):
        choose_budgets([lone, lone], goal=1.0)
    with pytest.raises(SystemExit) as err:
        main([str(path), str(tmp_path / "b8.json"), f"--out={tmp_path}"])
    assert err.value.code == 2 and "draft_budget='None'" in capsys.readouterr().err
    assert not (tmp_path / "speculative-budgets.json").exists()


def test_the_cli_writes_the_table_and_the_record(tmp_path):
    paths = [_record(tmp_path, b, s, [2, 2, 2]) for b, s in ((6, 1.1), (8, 1.0))]
    main([*map(str, paths), "--resamples=50", f"--out={tmp_path}", "--name=choice"])
    result = json.loads((tmp_path / "choice.json").read_text())
    assert result["budgets"] == [6, 8] and result["batches"][0]["chosen"]["budget"] == 6
    assert (tmp_path / "choice.md").read_text() == budgets_table(result)


def test_runs_of_one_budget_are_compared_by_their_labels(tmp_path, capsys):
    """Two trainings of one budget (references or the full model as the draft's target)."""
    (tmp_path / "distilled").mkdir()
    paths = [
        _record(tmp_path, 10, 1.1, [2, 2, 2]),
        _record(tmp_path / "distilled", 10, 1.3, [4, 5, 6]),
    ]
    labels = ["b10", "b10-distilled"]
    main([*map(str, paths), "--labels", *labels, "--resamples=50", f"--out={tmp_path}"])
    result = json.loads((tmp_path / "speculative-budgets.json").read_text())
    one = result["batches"][0]
    assert result["drafts"] == labels and result["budgets"] == [10, 10]
    assert one["chosen"] == {"draft": "b10-distilled", "budget": 10, "k": 2}
    assert set(one["against_chosen"]) == {"b10"}
    assert one["against_chosen"]["b10"]["speedup"]["delta"] == pytest.approx(1.3 - 1.1)
    assert "| 1 | b10-distilled | 2 (chosen) |" in budgets_table(result)
    with pytest.raises(SystemExit) as err:
        main([*map(str, paths), "--labels", "b10", f"--out={tmp_path / 'none'}"])
    assert err.value.code == 2 and "--labels gives 1 names for 2 records" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_measures_are_pooled_over_prompts_at_the_chosen_k_and_each_budgets_best_k(tmp_path):
    """Tokens per verify pooled (not a mean of per-prompt ratios), compared at the chosen k;
    speed against the other budget's own best k; the cost model's own pick recorded."""
    # budget 8: k = 3 is its fastest (1 / 0.8 = 1.25x); budget 6: k = 2 (1.1x), k = 3 0.5x
    fast = load_budget_run(_record(tmp_path, 8, 1.0, [6, 1, 1], rounds=(2, 5, 10), k3=0.8))
    slow = load_budget_run(_record(tmp_path, 6, 1.1, [1, 1, 1], rounds=(5, 5, 5), k3=2.0))
    fast["cells"][0]["variants"]["speculative-k2"]["cost"]["predicted_speedup"] = 2.0
    result = choose_budgets([fast, slow], resamples=100)
    one = result["batches"][0]
    assert one["chosen"] == {"draft": "8", "budget": 8, "k": 3}
    assert one["chosen_by_cost_model"] == {"draft": "8", "budget": 8, "k": 2}
    six = one["against_chosen"]["6"]
    # pooled: (8 + 17) / 17 - (3 + 15) / 15; a mean of per-prompt ratios would give another value
    assert six["tokens_per_verify"]["delta"] == pytest.approx(25 / 17 - 18 / 15)
    assert six["speedup"] == pytest.approx(
        {"delta": 1.25 - 1.1, "ci95_low": six["speedup"]["ci95_low"],
         "ci95_high": six["speedup"]["ci95_high"], "k": 2}
    )  # fmt: skip


def test_records_that_cannot_be_read_or_compared_are_refused(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(BudgetError, match="not a benchmark record"):
        load_budget_run(broken)
    old = _record(tmp_path, 6, 1.0, [1, 2, 3])
    record = json.loads(old.read_text())
    del record["cells"][0]["variants"]["speculative-k2"]["per_batch"]
    old.write_text(json.dumps(record))
    with pytest.raises(BudgetError, match="batch 1, speculative-k2 has no per_batch figures"):
        load_budget_run(old)
    here = load_budget_run(_record(tmp_path, 8, 1.0, [1, 2, 3]))
    (tmp_path / "elsewhere").mkdir()
    there = load_budget_run(_record(tmp_path / "elsewhere", 10, 1.0, [1, 2, 3], cpu="other"))
    with pytest.raises(BudgetError, match=r"machine \(cpu, threads per batch size\)"):
        choose_budgets([here, there])
