"""Two Spec-Bench runs compared question by question: the measures are spec_bench's, the
interval is a paired bootstrap over questions, runs that differ are refused."""

from __future__ import annotations

import json

import pytest

from studies import spec_bench, spec_bench_compare

METHOD = "speculative-k2"
SETTINGS = {"per_task": "1", "new_tokens": "96", "draft_budget": "8", "draft_vocab": "4096"}
CATEGORIES = ["writing", "translation", "qa", "rag"]


def _answer(qid: int, turns: list[str], accept: list[int], wall: float) -> dict:
    choice = {
        "index": 0, "turns": turns, "decoding_steps": [len(accept)],
        "new_tokens": [sum(accept)], "wall_time": [wall], "accept_lengths": accept,
    }  # fmt: skip
    return {
        "question_id": qid, "category": CATEGORIES[qid], "model_id": "m", "choices": [choice],
        "identical_to_plain": True,
    }  # fmt: skip


def _run(accepts: list[list[int]], walls: list[float], plain: list[tuple[str, float]]) -> dict:
    """A run: plain answers (text, wall time) and the method's accepted lengths per step."""
    return {
        "plain": [_answer(i, [t], [1] * sum(accepts[i]), w) for i, (t, w) in enumerate(plain)],
        METHOD: [_answer(i, ["x"], a, w) for i, (a, w) in enumerate(zip(accepts, walls))],
        "settings": dict(SETTINGS),
    }


BASE = _run(
    [[1, 1, 2], [1, 1], [2, 1], [1, 1, 1, 1]], [0.5, 0.3, 0.4, 0.6],
    [("a", 0.4), ("b", 0.1), ("c", 0.6), ("d", 0.2)],
)  # fmt: skip
TUNED = _run(
    [[3, 3], [2, 1], [3], [2, 2]], [0.2, 0.2, 0.1, 0.3],
    [("a", 0.3), ("B", 0.5), ("c", 0.1), ("D", 0.2)],
)  # fmt: skip


def test_the_measures_are_spec_bench_s_and_the_interval_is_paired():
    result = spec_bench_compare.compare_runs(BASE, TUNED, METHOD, resamples=400)
    for run, side in ((BASE, "baseline"), (TUNED, "system")):
        answers = {"plain": run["plain"], METHOD: run[METHOD]}
        summary = {(r["method"], r["task"]): r for r in spec_bench.summarize(answers)}
        for name in ("mean_accepted_tokens", "speedup"):
            assert result["overall"][name][side] == pytest.approx(
                summary[(METHOD, "overall")][name]
            )
        for task in result["tasks"]:
            assert task["speedup"][side] == pytest.approx(
                summary[(METHOD, task["task"])]["speedup"]
            )
    overall = result["overall"]
    assert overall["mean_accepted_tokens"]["baseline"] == pytest.approx(13 / 11)
    assert overall["mean_accepted_tokens"]["system"] == pytest.approx(16 / 7)
    for m in overall.values():
        assert m["delta"] == pytest.approx(m["system"] - m["baseline"])
        # drawn within tasks: one question per task leaves nothing to resample
        assert m["ci95_low"] == pytest.approx(m["delta"]) == pytest.approx(m["ci95_high"])
    assert [t["task"] for t in result["tasks"]] == ["mt_bench", "translation", "qa", "rag"]
    for task in result["tasks"]:  # one question each: no task interval
        for m in (task["mean_accepted_tokens"], task["speedup"]):
            assert m["delta"] == pytest.approx(m["system"] - m["baseline"])
            assert m["ci95_low"] is None and m["ci95_high"] is None
    assert (result["plain_turns_alike"], result["plain_turns"]) == (2, 4)
    assert result["identical_to_plain"] is True
    # the same questions are drawn for both runs: a run against itself differs by exactly 0
    same = spec_bench_compare.compare_runs(BASE, BASE, METHOD, resamples=200)
    for m in same["overall"].values():
        assert (m["delta"], m["ci95_low"], m["ci95_high"]) == (0.0, 0.0, 0.0)
    assert spec_bench_compare.compare_runs(BASE, TUNED, METHOD, resamples=400) == result


def _repeated(run: dict, copies: int) -> dict:
    """``run`` with each question answered ``copies`` times under new ids (task kept), the
    second copy's method answers one accepted token longer at each step."""
    out = {"settings": run["settings"], "plain": [], METHOD: []}
    for c in range(copies):
        for method in ("plain", METHOD):
            for a in run[method]:
                choice = dict(a["choices"][0])
                if method == METHOD and c % 2:
                    choice["accept_lengths"] = [n + 1 for n in choice["accept_lengths"]]
                qid = a["question_id"] + 100 * c
                out[method].append({**a, "question_id": qid, "choices": [choice]})
    return out


def test_tasks_with_enough_questions_get_their_own_paired_interval():
    n = spec_bench_compare.TASK_INTERVAL_MIN_QUESTIONS
    base, tuned = _repeated(BASE, n), _repeated(TUNED, n)
    result = spec_bench_compare.compare_runs(base, tuned, METHOD, resamples=300)
    assert [t["questions"] for t in result["tasks"]] == [n] * 4
    for task in result["tasks"]:
        for m in (task["mean_accepted_tokens"], task["speedup"]):
            assert m["ci95_low"] <= m["delta"] <= m["ci95_high"]
        assert task["mean_accepted_tokens"]["ci95_low"] < task["mean_accepted_tokens"]["ci95_high"]
    # paired within the task: a run against itself differs by exactly 0 in every draw
    same = spec_bench_compare.compare_runs(base, base, METHOD, resamples=100)
    for m in (same["overall"], *same["tasks"]):
        for name in ("mean_accepted_tokens", "speedup"):
            assert (m[name]["delta"], m[name]["ci95_low"], m[name]["ci95_high"]) == (0, 0, 0)
    table = spec_bench_compare.compare_table(result, ("base", "tuned"))
    qa = result["tasks"][2]["mean_accepted_tokens"]
    assert (
        f"| qa | {n} | {qa['baseline']:.3f} | {qa['system']:.3f} | {qa['delta']:+.3f} "
        f"[{qa['ci95_low']:+.3f}, {qa['ci95_high']:+.3f}] |"
    ) in table


def test_runs_that_cannot_be_compared_are_refused():
    error = spec_bench_compare.SpecBenchCompareError
    fewer = {**TUNED, METHOD: TUNED[METHOD][:3]}
    with pytest.raises(error, match=r"different questions: only the baseline holds \[3\]"):
        spec_bench_compare.compare_runs(BASE, fewer, METHOD)
    longer = {**TUNED, "settings": {**SETTINGS, "new_tokens": "128"}}
    with pytest.raises(error, match=r"different settings \{'new_tokens': \('96', '128'\)\}"):
        spec_bench_compare.compare_runs(BASE, longer, METHOD)
    with pytest.raises(error, match=r"--resamples: 0; allowed: an integer >= 1"):
        spec_bench_compare.compare_runs(BASE, TUNED, METHOD, resamples=0)
    no_plain = {**TUNED, "plain": TUNED["plain"][1:]}
    with pytest.raises(error, match=r"system: plain.jsonl lacks questions \[0\]"):
        spec_bench_compare.compare_runs(BASE, no_plain, METHOD)


def _write(folder, run) -> None:
    folder.mkdir()
    for method in ("plain", METHOD):
        (folder / f"{method}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in run[method]))
    record = {"args": run["settings"]}
    (folder.parent / f"{folder.name}.json").write_text(json.dumps(record))


def test_main_writes_the_table_and_record_and_names_what_is_missing(tmp_path, capsys):
    _write(tmp_path / "base", BASE)
    _write(tmp_path / "tuned", TUNED)
    args = [str(tmp_path / "base"), str(tmp_path / "tuned"), "--out", str(tmp_path)]
    spec_bench_compare.main([*args, "--method", METHOD, "--resamples", "50", "--name", "cmp"])
    record = json.loads((tmp_path / "cmp.json").read_text())
    assert record["questions"] == 4 and record["settings"]["resamples"] == 50
    table = (tmp_path / "cmp.md").read_text()
    assert "| mean accepted tokens per step | 1.182 | 2.286 | +1.104 [+1.104, +1.104] |" in table
    assert "| qa | 1 | 1.500 | 3.000 | +1.500 | " in table
    assert "Plain turns answered alike by both models: 2 of 4." in table
    with pytest.raises(SystemExit) as exit_info:
        spec_bench_compare.main([*args, "--method", "speculative-k4"])
    assert exit_info.value.code == 2
    assert "--method: " in capsys.readouterr().err
    (tmp_path / "tuned" / "plain.jsonl").unlink()
    with pytest.raises(spec_bench_compare.SpecBenchCompareError, match=r"system: .*no plain"):
        spec_bench_compare.load_run(tmp_path / "tuned", METHOD, "system")


def test_one_run_against_its_own_plain_decoding_per_task_with_intervals(tmp_path):
    result = spec_bench_compare.method_intervals(BASE, METHOD, resamples=300)
    answers = {"plain": BASE["plain"], METHOD: BASE[METHOD]}
    summary = {r["task"]: r for r in spec_bench.summarize(answers) if r["method"] == METHOD}
    assert [t["task"] for t in result["tasks"]] == [
        "mt_bench", "translation", "qa", "rag", "overall"
    ]  # fmt: skip
    for t in result["tasks"]:
        assert t["questions"] == summary[t["task"]]["questions"]
        for name in ("mean_accepted_tokens", "speedup"):
            m = t[name]
            assert m["value"] == pytest.approx(summary[t["task"]][name])
            assert m["ci95_low"] <= m["value"] <= m["ci95_high"]
            if t["questions"] == 1:  # one question: every draw is that question
                assert m["ci95_low"] == pytest.approx(m["ci95_high"])
    overall = result["tasks"][-1]
    assert overall["mean_accepted_tokens"]["value"] == pytest.approx(13 / 11)
    # overall draws keep one question of each task (the run's design), so every draw's
    # speedup is the observed one: one question per task leaves nothing to resample
    assert overall["speedup"]["ci95_low"] == pytest.approx(overall["speedup"]["ci95_high"])
    _write(tmp_path / "base", BASE)
    spec_bench_compare.main(
        [str(tmp_path / "base"), "--method", METHOD, "--out", str(tmp_path), "--name", "one",
         "--resamples", "50"]
    )  # fmt: skip
    table = (tmp_path / "one.md").read_text()
    assert "| overall | 4 | 1.182 [" in table and "turn identical to the plain turn: True" in table
    assert json.loads((tmp_path / "one.json").read_text())["run"] == str(tmp_path / "base")
    with pytest.raises(SystemExit):
        spec_bench_compare.main([str(tmp_path / "base"), "--method", METHOD, "--labels", "a", "b"])
