"""Spec-Bench, the speculative-decoding field's general workload, for the lossless mode.

The 480 questions of Spec-Bench (``workloads/spec_bench/question.jsonl``: hemingkx/Spec-Bench at
a fixed commit, Apache-2.0; ``SOURCE.md`` beside it) decoded as Spec-Bench's ``evaluation/eval.py``
does: one question at a time (batch 1), greedy, each turn in turn (MT-bench's second turn sees
the model's own first answer), the model's chat template, a warm-up on the first question, wall
time per turn. Methods: ``plain`` (skipdecode ``full``, the baseline) and ``speculative-k<k>``
for each ``k`` (the SkipDecode target plan at ``--draft-speedup`` as draft, or a constant
``--draft-budget`` b-layer plan, the shape a ``speculative_b8`` model is trained for; drafting
over the ``--draft-vocab`` most frequent tokens of a fine-tuned export's training targets;
``--auto-off`` adds the largest ``k`` turning itself off where it does not pay). Every
speculative turn is checked to be the plain turn, token for token. ``--compile``: every method
on the compiled decode path, its compiling left out of the wall time.

Writes, per method, ``<out>/<name>/<method>.jsonl`` in Spec-Bench's answer format
(``question_id``, ``category``, ``model_id``, ``choices[0]``: ``turns``, ``decoding_steps``,
``new_tokens``, ``wall_time``, ``accept_lengths``: tokens each decoding step produced), and
``<out>/<name>.json``/``.md``: per task (mt_bench, translation, summarization, qa,
math_reasoning, rag, overall) the mean accepted tokens per step, tokens per second (the mean
over questions of new tokens / wall time, as Spec-Bench's ``speed.py``) and the speedup over
plain.

Answers are kept as they are made (``<out>/<name>.partial/``, :mod:`.answer_journal`): a killed
run started again with the same arguments, package code (commits elsewhere do not count) and
machine skips the questions it finished (each question's methods run back to back in one
process, so its speedup pairs them still; the record counts them and keeps the first run's
provenance), and the results are written whole once every question is answered.

    python -m studies.spec_bench --per-task 10 --new-tokens 128 --ks 4
    python -m studies.spec_bench --model EXPORT --draft-budget 8 --compile
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from skipdecode.core.engine import SkipDecoder
from skipdecode.experiments.benchmarks.bench_tables import (
    add_run_options,
    load_bench_model,
    started_provenance,
    write_bench,
)
from skipdecode.experiments.benchmarks.bench_workloads import ranked_draft_vocab, trained_dataset
from skipdecode.experiments.benchmarks.spec_bench_tasks import TASKS, task_of
from skipdecode.io import write_text_atomic
from skipdecode.progress import progress
from skipdecode.provenance import package_code
from skipdecode.schedules import FullSchedule, Schedule, build_schedule

from .answer_journal import AnswerJournal

__all__ = [
    "HELD_OUT",
    "QUESTIONS",
    "TASKS",
    "load_questions",
    "run_spec_bench",
    "spec_bench_table",
    "summarize",
    "tokens_per_second",
    "main",
]

QUESTIONS = Path(__file__).parent / "workloads" / "spec_bench" / "question.jsonl"
#: The first 40 questions of each task are held out: ``self_distill`` trains on the rest.
HELD_OUT = 40


def load_questions(path: Path = QUESTIONS, per_task: int | None = None) -> list[dict[str, Any]]:
    """The questions in file order; ``per_task``: only the first N of each task."""
    questions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if per_task is None:
        return questions
    seen: dict[str, int] = {}
    kept = []
    for q in questions:
        task = task_of(q["category"])
        if seen.get(task, 0) < per_task:
            seen[task] = seen.get(task, 0) + 1
            kept.append(q)
    return kept


def _recorder(lengths: list[int]) -> Any:
    def record(view: Any) -> None:
        lengths.append(int(view.lengths[0]))

    return record


def _answer(
    dec: SkipDecoder, schedule: Schedule, question: dict[str, Any], new_tokens: int
) -> dict[str, Any]:
    """Every turn of one question: Spec-Bench's ``choices[0]`` plus the generated ids."""
    tok = dec.tokenizer
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    messages: list[dict[str, str]] = []
    choice: dict[str, Any] = {
        "index": 0, "turns": [], "decoding_steps": [], "new_tokens": [], "wall_time": [],
        "accept_lengths": [], "ids": [],
    }  # fmt: skip
    for turn in question["turns"]:
        messages.append({"role": "user", "content": turn})
        ids = tok.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"].to(dec.device)
        lengths: list[int] = []  # tokens generated after each round (speculative only)
        start = time.perf_counter()
        out = dec.generate(
            ids, schedule, new_tokens, torch.ones_like(ids), eos_token_id=eos,
            decode_texts=False, on_round=_recorder(lengths),
        )  # fmt: skip
        if ids.device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - start - out.stats.compile_seconds
        n = out.stats.generated_lengths[0]
        generated = out.generated_ids[0, :n].tolist()
        # tokens per decoding step: the prefill's one, then each round's (plain: one per step)
        steps = [1] + [b - a for a, b in zip([1, *lengths], lengths, strict=False)]
        if not lengths:
            steps = [1] * n
        text = tok.decode([t for t in generated if t not in eos], skip_special_tokens=True).strip()
        choice["turns"].append(text)
        choice["decoding_steps"].append(len(steps))
        choice["new_tokens"].append(n)
        choice["wall_time"].append(wall)
        choice["accept_lengths"].extend(steps)
        choice["ids"].append(generated)
        messages.append({"role": "assistant", "content": text})
    return choice


def run_spec_bench(
    model: torch.nn.Module,
    tokenizer: Any,
    questions: Sequence[dict[str, Any]],
    ks: Sequence[int] = (4,),
    draft_speedup: float = 2.0,
    new_tokens: int = 1024,
    auto_off: bool = False,
    show_progress: bool | None = None,
    draft_budget: int | None = None,
    draft_vocab: Sequence[int] | None = None,
    compile: bool = False,
    journal: AnswerJournal | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Answers per method (Spec-Bench's format, plus ``identical_to_plain``), methods
    interleaved question by question after a warm-up on the first question left to answer.
    ``draft_budget``: a constant draft plan of that many layers instead of the target plan;
    ``draft_vocab``: the token ids every speculative method drafts over; ``compile``: the
    compiled decode path; ``journal``: keeps each question's answers as they are made and
    supplies those of an earlier, killed run with the same settings."""
    dec = SkipDecoder(model, tokenizer, compile=compile)
    L = dec.num_layers
    draft: dict[str, Any] = {
        "name": "target", "target_speedup": draft_speedup, "expected_length": new_tokens
    }  # fmt: skip
    if draft_budget is not None:
        draft = {"name": "budgets", "budgets": [draft_budget], "warmup_layers": 1}
    methods: dict[str, Schedule] = {"plain": FullSchedule(L)}
    for k in ks:
        methods[f"speculative-k{k}"] = build_schedule(
            {"name": "speculative", "draft": draft, "k": k}, L, new_tokens
        )
    if auto_off:
        methods[f"speculative-k{max(ks)}-auto"] = build_schedule(
            {"name": "speculative", "draft": draft, "k": max(ks), "auto_off": True}, L, new_tokens
        )
    if draft_vocab is not None:
        for method, schedule in methods.items():
            if method != "plain":
                methods[method] = schedule.with_draft_vocab(list(draft_vocab))  # type: ignore[attr-defined]
    held = (
        {q["question_id"]: journal.answers(q["question_id"]) for q in questions} if journal else {}
    )
    left = [q for q in questions if held.get(q["question_id"]) is None]
    for schedule in methods.values() if left else ():  # warm-up
        _answer(dec, schedule, left[0], new_tokens)
    answers: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for q in progress(questions, "Spec-Bench questions", enabled=show_progress):
        made = held.get(q["question_id"])
        if made is None:
            made = _answer_every_method(dec, methods, q, new_tokens)
            if journal is not None:
                journal.add(q["question_id"], made)
        for method in methods:
            answers[method].append(made[method])
    return answers


def _answer_every_method(
    dec: SkipDecoder, methods: dict[str, Schedule], question: dict[str, Any], new_tokens: int
) -> dict[str, dict[str, Any]]:
    """One question's answer per method, each checked against the first (plain) method's."""
    made, plain = {}, None
    for method, schedule in methods.items():
        choice = _answer(dec, schedule, question, new_tokens)
        ids = choice.pop("ids")
        plain = ids if plain is None else plain
        made[method] = {
            "question_id": question["question_id"],
            "category": question["category"],
            "model_id": method,
            "choices": [choice],
            "identical_to_plain": ids == plain,
        }
    return made


def tokens_per_second(choice: dict[str, Any]) -> float:
    """One answer's speed (``choices[0]``): its new tokens over its wall time, every turn."""
    return sum(choice["new_tokens"]) / sum(choice["wall_time"])


def summarize(answers: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per method and task: Spec-Bench's mean accepted tokens, tokens/s and speedup."""

    def speeds(rows: list[dict[str, Any]]) -> list[float]:
        return [tokens_per_second(r["choices"][0]) for r in rows]

    out = []
    for method, rows in answers.items():
        for task in (*TASKS, "overall"):
            mine = [r for r in rows if task == "overall" or task_of(r["category"]) == task]
            if not mine:
                continue
            ids = {r["question_id"] for r in mine}
            base = [r for r in answers["plain"] if r["question_id"] in ids]
            accepted = [a for r in mine for a in r["choices"][0]["accept_lengths"]]
            tps, base_tps = statistics.fmean(speeds(mine)), statistics.fmean(speeds(base))
            out.append(
                {
                    "method": method,
                    "task": task,
                    "questions": len(mine),
                    "new_tokens": sum(sum(r["choices"][0]["new_tokens"]) for r in mine),
                    "mean_accepted_tokens": statistics.fmean(accepted),
                    "tokens_per_second": tps,
                    "speedup": tps / base_tps,
                    "identical_to_plain": all(r["identical_to_plain"] for r in mine),
                }
            )
    return out


def spec_bench_table(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        "| method | task | questions | new tokens | mean accepted tokens | tokens/s | speedup "
        "| identical to plain |\n|---|---|---|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['method']} | {r['task']} | {r['questions']} | {r['new_tokens']} "
        f"| {r['mean_accepted_tokens']:.2f} | {r['tokens_per_second']:.1f} | {r['speedup']:.2f}x "
        f"| {r['identical_to_plain']} |\n"
        for r in rows
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", type=Path, default=None, help="model dir (default: SmolLM2)")
    p.add_argument("--ks", nargs="+", type=int, default=[4])
    p.add_argument("--draft-speedup", type=float, default=2.0)
    p.add_argument("--new-tokens", type=int, default=1024, help="per turn (Spec-Bench: 1024)")
    p.add_argument("--per-task", type=int, default=None, help="the first N questions of each task")
    p.add_argument("--auto-off", action="store_true", help="also the largest k with auto_off")
    p.add_argument("--draft-budget", type=int, default=None, help="constant b-layer draft plan")
    p.add_argument(
        "--draft-vocab", type=int, default=None,
        help="draft over the N tokens most frequent in training targets (--draft-vocab-data)",
    )  # fmt: skip
    p.add_argument(
        "--draft-vocab-data", type=Path, default=None,
        help="a chat data folder (self_distill) whose training answers rank the draft "
        "vocabulary (default: the export's training data; the tokenizer's first ids without)",
    )  # fmt: skip
    p.add_argument("--compile", action="store_true", help="the compiled decode path")
    add_run_options(p, name="spec-bench", load=False)  # no cells timed under a load
    args = p.parse_args(argv)
    started = started_provenance(p)
    for name, values in (("--ks", args.ks), ("--new-tokens", [args.new_tokens])):
        for v in values:
            if v < 1:
                p.error(f"{name}: {v} is not allowed (an integer >= 1)")
    for name, value in (("--draft-budget", args.draft_budget), ("--draft-vocab", args.draft_vocab)):
        if value is not None and value < 1:
            p.error(f"{name}: {value} is not allowed (an integer >= 1, or leave it out)")
    if args.per_task is not None and args.per_task < 1:
        p.error(f"--per-task: {args.per_task} is not allowed (an integer >= 1, or leave it out)")
    model, tokenizer, path = load_bench_model(args.model, args.dtype, args.device)
    L = model.config.num_hidden_layers
    if args.draft_budget is not None and not 2 <= args.draft_budget < L:
        p.error(
            f"--draft-budget: {args.draft_budget} is not allowed (2 to {L - 1} layers: the "
            f"warm-up layer and at least one top layer, fewer than all)"
        )
    trained = trained_dataset(path)
    if trained is not None and trained["name"] == "chat":
        if args.per_task is None or args.per_task > HELD_OUT:
            p.error(
                f"--per-task: {args.per_task} is not allowed for a model fine-tuned on Spec-Bench "
                f"answers (self_distill trains on index {HELD_OUT}+ of each task); allowed: 1 "
                f"to {HELD_OUT}"
            )
    questions = load_questions(per_task=args.per_task)
    vocab, vocab_from = None, None
    if args.draft_vocab is not None:
        if args.draft_vocab_data is not None:
            trained = {"name": "chat", "data_dir": str(args.draft_vocab_data)}
        vocab = ranked_draft_vocab(trained, tokenizer, args.draft_vocab)
        vocab_from = (
            f"training answers of {trained.get('data_dir')}"
            if trained is not None
            else "the tokenizer's first ids"
        )
    # what the answers and their timings depend on: a killed run resumes only with the same
    # arguments (not where they go or how progress shows), package code and machine
    ignored = ("out", "name", "progress", "no_transformers")
    settings = {k: v for k, v in vars(args).items() if k not in ignored}
    settings["code"] = package_code()
    device = started.get("device") or {}
    settings["machine"] = {
        "device": device.get("device"), "torch_threads": device.get("torch_threads"),
        "torch": (started.get("packages") or {}).get("torch"), "env": started.get("env"),
    }  # fmt: skip
    try:
        journal = AnswerJournal(args.out / f"{args.name}.partial", settings, started)
    except ValueError as err:
        p.error(str(err))
    resumed = sum(1 for q in questions if journal.answers(q["question_id"]) is not None)
    answers = run_spec_bench(
        model, tokenizer, questions, args.ks, args.draft_speedup, args.new_tokens,
        args.auto_off, args.progress, args.draft_budget, vocab, args.compile, journal,
    )  # fmt: skip
    rows = summarize(answers)
    folder = args.out / args.name
    folder.mkdir(parents=True, exist_ok=True)
    for method, items in answers.items():
        write_text_atomic(folder / f"{method}.jsonl", "".join(json.dumps(a) + "\n" for a in items))
    payload = {
        "args": vars(args), "model": str(path), "questions": len(questions), "rows": rows,
        "draft_vocab_from": vocab_from, "draft_vocab_size": len(vocab) if vocab else None,
        "resumed_questions": resumed,  # answered (and timed) by an earlier, killed run
        "journal_started": journal.started if resumed else None,  # that run's provenance
    }  # fmt: skip
    write_bench(args.out, args.name, payload, spec_bench_table(rows), started)
    journal.remove()


if __name__ == "__main__":
    main()
