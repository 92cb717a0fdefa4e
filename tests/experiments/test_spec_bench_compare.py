"""Two Spec-Bench runs compared question by question: the measures are spec_bench's, the
interval is a paired bootstrap over questions, mismatched runs are refused."""

from __future__ import annotations

import json

import pytest

from skipdecode.experiments import spec_bench, spec_bench_compare


def _answer(qid: int, category: str, turns: list[str], accept: list[int], wall: float) -> dict:
    choice = {
        "index": 0, "turns": turns, "decoding_steps": [len(accept)],
        "new_tokens": [sum(accept)], "wall_time": [wall], "accept_lengths": accept,
    }  # fmt: skip
    return {
        "question_id": qid, "category": category, "model_id": "m", "choices": [choice],
        "identical_to_plain": True,
    }  # fmt: skip


def _run(accepts: list[list[int]], walls: list[float], plain_turns: list[str]) -> dict:
    cats = ["writing", "translation", "qa", "rag"]
    plain = [
        _answer(i, cats[i], [plain_turns[i]], [1] * sum(a), sum(a) / 10.0)
        for i, a in enumerate(accepts)
    ]
    spec = [_answer(i, cats[i], ["x"], a, w) for i, (a, w) in enumerate(zip(accepts, walls))]
    return {"plain": plain, "speculative-k2": spec}


BASE = _run([[1, 1, 2], [1, 1], [2, 1], [1, 1, 1, 1]], [0.5, 0.3, 0.4, 0.6], ["a", "b", "c", "d"])
TUNED = _run([[3, 3], [2, 1], [3], [2, 2]], [0.2, 0.2, 0.1, 0.3], ["a", "B", "c", "D"])


def test_the_measures_are_spec_bench_s_and_the_interval_holds_the_difference():
    result = spec_bench_compare.compare_runs(BASE, TUNED, "speculative-k2", resamples=400)
    rows = {(r["method"], r["task"]): r for r in spec_bench.summarize(TUNED)}
    tuned = rows[("speculative-k2", "overall")]
    overall = result["overall"]
    assert overall["mean_accepted_tokens"]["system"] == pytest.approx(tuned["mean_accepted_tokens"])
    assert overall["speedup"]["system"] == pytest.approx(tuned["speedup"])
    assert overall["mean_accepted_tokens"]["baseline"] == pytest.approx(13 / 11)
    assert overall["mean_accepted_tokens"]["system"] == pytest.approx(16 / 7)
    for m in overall.values():
        assert m["delta"] == pytest.approx(m["system"] - m["baseline"])
        assert m["ci95_low"] <= m["delta"] <= m["ci95_high"]
    assert [t["task"] for t in result["tasks"]] == ["mt_bench", "translation", "qa", "rag"]
    qa = {t["task"]: t for t in result["tasks"]}["qa"]
    assert qa["system"]["mean_accepted_tokens"] == pytest.approx(3.0)
    assert (result["plain_turns_alike"], result["plain_turns"]) == (2, 4)


def test_runs_of_different_questions_or_a_missing_method_are_refused(tmp_path):
    fewer = {name: rows[:3] for name, rows in TUNED.items()}
    with pytest.raises(spec_bench_compare.SpecBenchCompareError, match="different questions"):
        spec_bench_compare.compare_runs(BASE, fewer, "speculative-k2")
    (tmp_path / "plain.jsonl").write_text(json.dumps(BASE["plain"][0]) + "\n")
    with pytest.raises(spec_bench_compare.SpecBenchCompareError, match=r"--method.*\['plain'\]"):
        spec_bench_compare.load_run(tmp_path, "speculative-k4")


def test_main_writes_the_table_and_record(tmp_path):
    for name, run in (("base", BASE), ("tuned", TUNED)):
        (tmp_path / name).mkdir()
        for method, rows in run.items():
            lines = "".join(json.dumps(r) + "\n" for r in rows)
            (tmp_path / name / f"{method}.jsonl").write_text(lines)
    spec_bench_compare.main(
        [str(tmp_path / "base"), str(tmp_path / "tuned"), "--method", "speculative-k2",
         "--resamples", "50", "--out", str(tmp_path), "--name", "cmp"]
    )  # fmt: skip
    record = json.loads((tmp_path / "cmp.json").read_text())
    assert record["questions"] == 4 and record["settings"]["resamples"] == 50
    table = (tmp_path / "cmp.md").read_text()
    assert "| mean accepted tokens per step | 1.18 | 2.29 |" in table
    assert "Plain turns answered alike by both models: 2 of 4." in table
