"""The Spec-Bench workload: the committed questions, Spec-Bench's answer format, exactness."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter

import pytest
import torch
from ci import skip_unless_ci

from skipdecode.experiments.benchmarks.bench_workloads import ranked_draft_vocab
from skipdecode.schedules import build_schedule
from skipdecode.schedules.speculative import SpeculativeSchedule
from studies import self_distill, spec_bench


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


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skipdecode.models.assets import smollm2_dir

    try:
        path = smollm2_dir(create=False)
    except FileNotFoundError as err:
        skip_unless_ci(f"SmolLM2 not converted (make smollm2): {err}")
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    return model, AutoTokenizer.from_pretrained(path)


def test_the_distillation_questions_are_the_ones_the_benchmark_holds_out():
    questions = spec_bench.load_questions()
    held_out = spec_bench.load_questions(per_task=40)
    later = self_distill.questions_from(questions, 40)
    assert Counter(spec_bench.task_of(q["category"]) for q in later) == {
        t: 40 for t in spec_bench.TASKS
    }
    ids = {q["question_id"] for q in later}
    assert ids.isdisjoint(q["question_id"] for q in held_out)
    assert len(ids) + len(held_out) == len(questions)


def test_validation_holds_every_turn_of_its_questions():
    examples = [
        {"question_id": q, "turn": t} for q, turns in ((7, 2), (3, 1), (9, 2)) for t in range(turns)
    ]
    train, validation = self_distill.split_by_question(examples, 2)
    assert validation == [{"question_id": 3, "turn": 0}]
    assert train == [e for e in examples if e["question_id"] != 3]
    train, validation = self_distill.split_by_question(examples, 3)
    assert [e["question_id"] for e in validation] == [9, 9]


def test_self_distillation_answers_each_turn_in_the_chat_template(smollm2):
    model, tokenizer = smollm2
    questions = [spec_bench.load_questions(per_task=1)[i] for i in (0, 1)]  # MT-bench, translation
    examples, left_out = self_distill.distill(model, tokenizer, questions, 4, 384, 2)
    assert left_out == {}
    assert [(e["question_id"], e["turn"]) for e in examples] == [
        (questions[0]["question_id"], 0), (questions[0]["question_id"], 1),
        (questions[1]["question_id"], 0),
    ]  # fmt: skip
    first, second, single = examples
    assert not first["finished"] and first["response"]  # 4 tokens do not end an answer
    messages = [
        {"role": "user", "content": questions[0]["turns"][0]},
        {"role": "assistant", "content": first["response"]},
        {"role": "user", "content": questions[0]["turns"][1]},
    ]
    assert second["prompt"] == tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    # the answer is what plain greedy decoding of that prompt says
    answers = spec_bench.run_spec_bench(model, tokenizer, [questions[1]], ks=(), new_tokens=4)
    assert single["response"] == answers["plain"][0]["choices"][0]["turns"][0]
    # a prompt over the limit is left out, and so are the later turns that would follow it
    examples, left_out = self_distill.distill(model, tokenizer, questions, 4, 10, 2)
    assert examples == []
    assert left_out == {
        "long_prompt": {"mt_bench": 1, "translation": 1}, "after_long_prompt": {"mt_bench": 1}
    }  # fmt: skip


def test_answers_in_spec_bench_format_and_identical_to_plain(smollm2, monkeypatch):
    model, tokenizer = smollm2
    questions = [spec_bench.load_questions(per_task=1)[i] for i in (0, 1)]  # MT-bench, translation
    # a constant 8-layer draft over a 512-token head (the shape speculative_b8 trains)
    vocab = ranked_draft_vocab(None, tokenizer, 512)
    built = []

    def build(cfg, *args):
        built.append(cfg)
        return build_schedule(cfg, *args)

    monkeypatch.setattr(spec_bench, "build_schedule", build)
    with_vocab = SpeculativeSchedule.with_draft_vocab
    vocabs = []
    monkeypatch.setattr(
        SpeculativeSchedule,
        "with_draft_vocab",
        lambda s, ids: vocabs.append(ids) or with_vocab(s, ids),
    )
    answers = spec_bench.run_spec_bench(
        model, tokenizer, questions, ks=(2,), new_tokens=10, draft_budget=8, draft_vocab=vocab
    )
    assert [c["draft"]["budgets"] for c in built] == [[8]] and vocabs == [vocab]
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
            else:  # rounds of up to k + 1 tokens
                assert max(choice["accept_lengths"]) <= 3
    rows = {(r["method"], r["task"]): r for r in spec_bench.summarize(answers)}
    assert set(rows) == {(m, t) for m in answers for t in ("mt_bench", "translation", "overall")}
    assert rows["plain", "overall"]["speedup"] == pytest.approx(1.0)
    assert rows["speculative-k2", "overall"]["mean_accepted_tokens"] >= 1.0
    assert "| speculative-k2 | overall | 2 |" in spec_bench.spec_bench_table(list(rows.values()))


def test_a_draft_budget_outside_the_model_is_refused_by_name(smollm2, capsys):
    with pytest.raises(SystemExit):
        spec_bench.main(["--draft-budget", "1", "--out", "unused"])
    assert "--draft-budget: 1 is not allowed (2 to 29 layers" in capsys.readouterr().err


def _fake_answers(monkeypatch, calls, fail_at=None):
    """``_answer`` without decoding: records (method's k, question id); raises at ``fail_at``."""

    def answer(dec, schedule, question, new_tokens):
        if question["question_id"] == fail_at:
            raise KeyboardInterrupt  # the run is killed while answering this question
        calls.append(question["question_id"])
        n = len(question["turns"])
        return {
            "index": 0, "turns": ["an answer"] * n, "decoding_steps": [2] * n,
            "new_tokens": [2] * n, "wall_time": [0.5] * n, "accept_lengths": [1, 1] * n,
            "ids": [7, 8],
        }  # fmt: skip

    monkeypatch.setattr(spec_bench, "_answer", answer)


def test_a_killed_run_resumes_from_its_journal_and_refuses_other_settings(
    smollm2, monkeypatch, tmp_path
):
    from studies.answer_journal import AnswerJournal

    model, tokenizer = smollm2
    questions = spec_bench.load_questions(per_task=1)[:3]
    ids = [q["question_id"] for q in questions]
    settings = {"ks": [2], "new_tokens": 4}
    folder = tmp_path / "run.partial"
    calls: list = []
    _fake_answers(monkeypatch, calls, fail_at=ids[1])
    with pytest.raises(KeyboardInterrupt):
        spec_bench.run_spec_bench(
            model, tokenizer, questions, ks=(2,), journal=AnswerJournal(folder, settings)
        )
    with open(folder / "answers.jsonl", "a") as f:
        f.write('{"question_id": ')  # a line the kill cut off
    calls.clear()
    _fake_answers(monkeypatch, calls)
    journal = AnswerJournal(folder, settings)
    assert journal.answers(ids[0]) is not None and journal.answers(ids[1]) is None
    answers = spec_bench.run_spec_bench(model, tokenizer, questions, ks=(2,), journal=journal)
    # the warm-up (both methods) on the first question left, then only the questions left
    assert calls == [ids[1]] * 2 + [ids[1]] * 2 + [ids[2]] * 2
    assert [a["question_id"] for a in answers["speculative-k2"]] == ids
    lines = (folder / "answers.jsonl").read_text().splitlines()
    assert [json.loads(line)["question_id"] for line in lines] == ids
    with pytest.raises(ValueError, match=r"new_tokens: 4 there, 8 now"):
        AnswerJournal(folder, {"ks": [2], "new_tokens": 8})
    journal.remove()
    assert not folder.exists()


def test_main_writes_the_results_whole_and_then_drops_its_journal(smollm2, monkeypatch, tmp_path):
    """The results once every question is answered, the journal removed, and the provenance of
    the code the run started with (not of whatever is checked out when it ends)."""
    from skipdecode import provenance

    calls: list = []
    _fake_answers(monkeypatch, calls)
    argv = ["--per-task", "1", "--ks", "2", "--new-tokens", "4", "--out", str(tmp_path)]
    stamps = []
    write_bench = spec_bench.write_bench

    def write_late(*args, **kwargs):  # the record is written a second after the run started
        time.sleep(1.1)
        stamps.append(provenance.provenance()["timestamp_utc"])
        return write_bench(*args, **kwargs)

    monkeypatch.setattr(spec_bench, "write_bench", write_late)
    spec_bench.main([*argv, "--name", "sb", "--no-progress"])
    (started_before_write,) = stamps
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sb", "sb.json", "sb.md"]
    record = json.loads((tmp_path / "sb.json").read_text())
    assert record["questions"] == 6 and record["resumed_questions"] == 0
    assert record["journal_started"] is None
    assert record["provenance"]["timestamp_utc"] < started_before_write  # taken at the start
    assert len((tmp_path / "sb" / "speculative-k2.jsonl").read_text().splitlines()) == 6
    # killed at the third question: the journal keeps two, with the code and machine they need
    questions = spec_bench.load_questions(per_task=1)
    _fake_answers(monkeypatch, calls, fail_at=questions[2]["question_id"])
    with pytest.raises(KeyboardInterrupt):
        spec_bench.main([*argv, "--name", "killed", "--no-progress"])
    settings = json.loads((tmp_path / "killed.partial" / "settings.json").read_text())
    assert settings["code"] == provenance.package_code() and settings["code"]["tree"]
    assert settings["machine"]["torch_threads"] == torch.get_num_threads()
    assert "out" not in settings and settings["per_task"] == 1
    _fake_answers(monkeypatch, calls)
    spec_bench.main([*argv, "--name", "killed", "--no-progress"])
    record = json.loads((tmp_path / "killed.json").read_text())
    assert record["resumed_questions"] == 2 and record["journal_started"]["timestamp_utc"]
    assert not (tmp_path / "killed.partial").exists()


def test_a_journal_drops_only_a_cut_last_line_and_refuses_other_damage(tmp_path):
    from studies.answer_journal import AnswerJournal

    folder = tmp_path / "run.partial"
    journal = AnswerJournal(folder, {"ks": [2]}, started={"timestamp_utc": "t0"})
    journal.add(1, {"plain": {"question_id": 1}})
    journal.add(2, {"plain": {"question_id": 2}})
    assert AnswerJournal(folder, {"ks": [2]}).started == {"timestamp_utc": "t0"}
    with pytest.raises(ValueError, match=r"ks: \[2\] there, \[2, 3\] now; new_tokens: "
                       r"'\(not set\)' there, 4 now"):  # fmt: skip
        AnswerJournal(folder, {"ks": [2, 3], "new_tokens": 4})
    answers = folder / "answers.jsonl"
    first, second = answers.read_text().splitlines()
    answers.write_text(f'{first}\n{{"question_id": 3, "answ\n{second}\n')  # damage mid-file
    with pytest.raises(ValueError, match=r"answers.jsonl line 2 is not a journal entry"):
        AnswerJournal(folder, {"ks": [2]})
    answers.write_text(f'{first}\n{{"question_id": 3}}\n')  # whole JSON, not an entry
    with pytest.raises(ValueError, match=r"line 2 is not a journal entry \(KeyError"):
        AnswerJournal(folder, {"ks": [2]})
    (folder / "settings.json").unlink()
    with pytest.raises(ValueError, match=r"has no settings.json beside it"):
        AnswerJournal(folder, {"ks": [2]})
