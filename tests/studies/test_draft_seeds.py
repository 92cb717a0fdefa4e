"""Two drafts compared over training seeds (draft_seeds): the seed-aware interval."""

from __future__ import annotations

import json

import pytest

from studies.draft_seeds import compare_over_seeds, main
from studies.speculative_budgets import BudgetError, load_budget_run

ARGS = {"workload": "e2e-test", "prompts": "3", "batch_sizes": "[1]", "ks": "[2]",
        "new_tokens": "64", "draft_vocab": "4096", "repeats": "1", "compile": "True",
        "dtype": "float32", "device": "cpu", "draft_budget": "10"}  # fmt: skip


def _record(path, accepted, rounds=(5, 5, 5), **args):
    """A batch-1 acceptance run over three inputs: ``accepted`` tokens of ``rounds`` each."""
    per_batch = [
        {"decode_s": 1.0, "steps": r, "tokens": a + r, "accepted": a, "row_rounds": r}
        for a, r in zip(accepted, rounds, strict=True)
    ]
    variants = {
        "skipdecode-full": {"ms_per_step_of_full": 40.0, "per_batch": per_batch},
        "speculative-k2": {"speedup_vs_full": 1.0, "per_batch": per_batch},
    }
    record = {"args": {**ARGS, **args}, "cells": [{"batch_size": 1, "variants": variants}]}
    path.write_text(json.dumps(record))
    return path


def test_the_interval_draws_seeds_as_well_as_inputs(tmp_path):
    # first: seed 1 accepts 3 more tokens an input than second (every input: +0.6 a verify),
    # seed 2 the same as second's seed 2, so the seeds disagree and the interval must say so
    first = [_record(tmp_path / "a1.json", [4, 5, 6]), _record(tmp_path / "a2.json", [1, 2, 3])]
    second = [_record(tmp_path / "b1.json", [1, 2, 3]), _record(tmp_path / "b2.json", [1, 2, 3])]
    result = compare_over_seeds(
        [load_budget_run(p) for p in first], [load_budget_run(p) for p in second], resamples=400
    )
    assert result["tokens_per_verify"] == {"first": [2.0, 1.4], "second": [1.4, 1.4]}
    assert result["per_seed_difference"] == pytest.approx([0.6, 0.0])
    # a draw's mean over its drawn seeds is 0, 0.3 or 0.6 (both seed 2, one each, both seed 1)
    assert result["difference"] == pytest.approx({"delta": 0.3, "ci95_low": 0.0, "ci95_high": 0.6})
    t = result["t_interval_over_seeds"]  # 0.3 +- t(0.975, 1) x 0.424 / sqrt(2)
    assert t["delta"] == pytest.approx(0.3) and t["ci95_low"] == pytest.approx(0.3 - 3.8119, 1e-3)
    main(
        ["--first", *map(str, first), "--second", *map(str, second), "--names", "deep", "even",
         "--resamples", "400", "--out", str(tmp_path), "--name", "seeds"]
    )  # fmt: skip
    table = (tmp_path / "seeds.md").read_text()
    assert (
        "| seed | deep | even | difference |" in table and "| 1 | 2.000 | 1.400 | +0.600 |" in table
    )
    assert "deep minus even: +0.300 [+0.000, +0.600]" in table
    assert json.loads((tmp_path / "seeds.json").read_text())["names"] == ["deep", "even"]


def test_unpaired_or_unlike_runs_are_refused(tmp_path, capsys):
    one = load_budget_run(_record(tmp_path / "a.json", [1, 2, 3]))
    two = load_budget_run(_record(tmp_path / "b.json", [1, 2, 3]))
    with pytest.raises(BudgetError, match="2 and 1 runs; allowed: the same number of seeds"):
        compare_over_seeds([one, two], [one])
    other = load_budget_run(_record(tmp_path / "c.json", [1, 2, 3], new_tokens="32"))
    with pytest.raises(
        BudgetError, match="new_tokens='32' where .* has '64'; allowed: runs of one"
    ):
        compare_over_seeds([one, two], [one, other])
    with pytest.raises(BudgetError, match="no batch-1 speculative-k3"):
        compare_over_seeds([one, two], [one, two], k=3)
    with pytest.raises(SystemExit):
        main(["--first", str(tmp_path / "a.json"), "--second", str(tmp_path / "nope.json")])
    assert "no such record" in capsys.readouterr().err
