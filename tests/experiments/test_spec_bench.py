"""The Spec-Bench workload: the committed questions, Spec-Bench's answer format, exactness."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from skipdecode.experiments import spec_bench


def test_the_committed_questions_are_spec_bench_s():
    data = spec_bench.QUESTIONS.read_bytes()
    source = (spec_bench.QUESTIONS.parent / "SOURCE.md").read_text()
    assert hashlib.sha256(data).hexdigest() in source
    assert (spec_bench.QUESTIONS.parent / "LICENSE").read_text().startswith("Apache License")
    questions = spec_bench.load_questions()
    tasks = Counter(spec_bench.task_of(q["category"]) for q in questions)
    assert tasks == {task: 80 for task in spec_bench.TASKS}
    assert all(
        len(q["turns"]) == 2 for q in questions if spec_bench.task_of(q["category"]) == "mt_bench"
    )
    firsts = spec_bench.load_questions(per_task=2)
    assert Counter(spec_bench.task_of(q["category"]) for q in firsts) == {
        t: 2 for t in spec_bench.TASKS
    }
    assert firsts == [q for q in questions if q in firsts]  # file order kept


def test_answers_in_spec_bench_format_and_identical_to_plain():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skipdecode.models.assets import smollm2_dir

    try:
        path = smollm2_dir(create=False)
    except FileNotFoundError as err:
        pytest.skip(f"SmolLM2 not converted (make smollm2): {err}")
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    questions = [spec_bench.load_questions(per_task=1)[i] for i in (0, 1)]  # MT-bench, translation
    answers = spec_bench.run_spec_bench(model, tokenizer, questions, ks=(2,), new_tokens=10)
    assert set(answers) == {"plain", "speculative-k2"}
    for method, rows in answers.items():
        for q, row in zip(questions, rows, strict=True):
            choice = row["choices"][0]
            assert row["question_id"] == q["question_id"] and row["identical_to_plain"]
            assert len(choice["turns"]) == len(choice["wall_time"]) == len(q["turns"])
            # every decoding step's tokens add up to the new tokens
            assert sum(choice["accept_lengths"]) == sum(choice["new_tokens"]) > 0
            assert len(choice["accept_lengths"]) == sum(choice["decoding_steps"])
            if method == "plain":
                assert set(choice["accept_lengths"]) == {1}
    rows = {(r["method"], r["task"]): r for r in spec_bench.summarize(answers)}
    assert set(rows) == {(m, t) for m in answers for t in ("mt_bench", "translation", "overall")}
    assert rows["plain", "overall"]["speedup"] == pytest.approx(1.0)
    assert rows["speculative-k2", "overall"]["mean_accepted_tokens"] >= 1.0
    assert "| speculative-k2 | overall | 2 |" in spec_bench.spec_bench_table(list(rows.values()))
