"""General training data for the lossless mode: a chat model's own greedy answers.

The lossless mode's output is the full model's, so its draft should predict what the full model
says. Offline there is no general instruction data, so the training data are the model's own
greedy answers (self-distillation) to Spec-Bench questions it is not evaluated on: the questions
at index ``--from-index`` and later within each task (the first 40 of each task stay held out;
``spec_bench --per-task N`` with N <= 40 evaluates only those). Each turn is a prompt in the
model's chat template (MT-bench's second turn sees the model's own first answer, as Spec-Bench
decodes it) and the answer decoded greedily with every layer, in batches by prompt length.
Prompts longer than ``--max-prompt-tokens`` are left out (a chat prompt cannot be cut without
losing its tail), and so are the later turns of their question; both are counted.

Writes ``<out>/train.jsonl`` and ``<out>/validation.jsonl`` (the turns of every
``--validation-every``-th question, so no answer of a validation question appears in a training
prompt; fields ``prompt``, ``response``, ``question_id``, ``category``, ``turn``, ``finished``:
whether the answer ended with EOS within ``--new-tokens``; the ``chat`` dataset trains an
unfinished answer without EOS) and ``<out>/distill.json`` (settings, counts per task, what was
left out), each written whole. ``conf/dataset/chat.yaml`` trains on them.

    python -m studies.self_distill --out outputs/data/spec_bench_distill
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from skipdecode.core.engine import SkipDecoder
from skipdecode.io import write_json_atomic, write_jsonl_atomic
from skipdecode.progress import progress
from skipdecode.schedules import FullSchedule

from .spec_bench import HELD_OUT, load_questions, task_of

__all__ = ["distill", "questions_from", "split_by_question", "main"]


def questions_from(questions: Sequence[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """The questions at position ``index`` and later within their task (file order)."""
    seen: dict[str, int] = {}
    kept = []
    for q in questions:
        task = task_of(q["category"])
        if seen.get(task, 0) >= index:
            kept.append(q)
        seen[task] = seen.get(task, 0) + 1
    return kept


def _render(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _decode_batch(
    dec: SkipDecoder, rows: Sequence[list[int]], new_tokens: int
) -> list[tuple[str, bool]]:
    """Greedy answers (text, ended with EOS) to tokenized chat prompts, decoded as one batch."""
    from skipdecode.data.collate import left_pad

    tok = dec.tokenizer
    ids, mask = left_pad(list(rows), int(tok.pad_token_id))
    eos = [tok.eos_token_id]
    out = dec.generate(
        ids.to(dec.device), FullSchedule(dec.num_layers), new_tokens, mask.to(dec.device),
        eos_token_id=eos, decode_texts=False,
    )  # fmt: skip
    answers = []
    for row in range(len(rows)):
        n = out.stats.generated_lengths[row]
        generated = out.generated_ids[row, :n].tolist()
        finished = bool(generated) and generated[-1] in eos
        text = tok.decode([t for t in generated if t not in eos], skip_special_tokens=True)
        answers.append((text.strip(), finished))
    return answers


def distill(
    model: torch.nn.Module,
    tokenizer: Any,
    questions: Sequence[dict[str, Any]],
    new_tokens: int,
    max_prompt_tokens: int,
    batch_size: int,
    show_progress: bool | None = None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Examples (one per answered turn, in question order) and what was left out, per reason
    and task: ``long_prompt`` (over ``max_prompt_tokens``), ``after_long_prompt`` (a later turn
    of such a question), ``empty_answer``."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    dec = SkipDecoder(model, tokenizer)
    chats: dict[str, list[dict[str, str]]] = {q["question_id"]: [] for q in questions}
    examples: dict[tuple[str, int], dict[str, Any]] = {}
    left_out: dict[str, dict[str, int]] = {}

    def leave_out(reason: str, question: dict[str, Any]) -> None:
        counts = left_out.setdefault(reason, {})
        task = task_of(question["category"])
        counts[task] = counts.get(task, 0) + 1

    turns = max(len(q["turns"]) for q in questions)
    for turn in range(turns):
        pending = []  # (question, rendered prompt, its ids) whose earlier turns were all answered
        for q in questions:
            qid = q["question_id"]
            if turn >= len(q["turns"]):
                continue
            if len(chats[qid]) != 2 * turn:
                leave_out("after_long_prompt", q)
                continue
            chats[qid].append({"role": "user", "content": q["turns"][turn]})
            prompt = _render(tokenizer, chats[qid])
            prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            if len(prompt_ids) > max_prompt_tokens:
                leave_out("long_prompt", q)
                continue
            pending.append((q, prompt, prompt_ids))
        pending.sort(key=lambda item: len(item[1]))
        batches = [pending[i : i + batch_size] for i in range(0, len(pending), batch_size)]
        for batch in progress(batches, f"turn {turn + 1} batches", enabled=show_progress):
            answers = _decode_batch(dec, [ids for _, _, ids in batch], new_tokens)
            for (q, prompt, _), (text, finished) in zip(batch, answers, strict=True):
                qid = q["question_id"]
                chats[qid].append({"role": "assistant", "content": text})
                examples[(qid, turn)] = {
                    "prompt": prompt, "response": text, "question_id": qid,
                    "category": q["category"], "turn": turn, "finished": finished,
                }  # fmt: skip
    order = {q["question_id"]: i for i, q in enumerate(questions)}
    ordered = sorted(examples.values(), key=lambda e: (order[e["question_id"]], e["turn"]))
    for e in ordered:
        if not e["response"]:
            leave_out("empty_answer", {"category": e["category"]})
    return [e for e in ordered if e["response"]], left_out


def split_by_question(
    examples: Sequence[dict[str, Any]], every: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, validation)``: validation holds every turn of every ``every``-th question (in
    the order the questions first appear)."""
    position: dict[Any, int] = {}
    for e in examples:
        position.setdefault(e["question_id"], len(position))
    held = {q for q, i in position.items() if i % every == every - 1}
    return (
        [e for e in examples if e["question_id"] not in held],
        [e for e in examples if e["question_id"] in held],
    )


def main(argv: list[str] | None = None) -> None:
    from skipdecode.experiments.benchmarks.bench_tables import load_bench_model

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True, help="folder for the data files")
    p.add_argument("--model", type=Path, default=None, help="model dir (default: SmolLM2)")
    p.add_argument(
        "--from-index", type=int, default=HELD_OUT, help="first question of each task used"
    )
    p.add_argument("--new-tokens", type=int, default=128, help="answer length limit per turn")
    p.add_argument("--max-prompt-tokens", type=int, default=384)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--validation-every", type=int, default=12)
    p.add_argument("--limit", type=int, default=None, help="only the first N questions")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    args = p.parse_args(argv)
    for name in ("new_tokens", "max_prompt_tokens", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: {getattr(args, name)} is not allowed (>= 1)")
    if args.from_index < 0:
        p.error(f"--from-index: {args.from_index} is not allowed (>= 0)")
    if args.limit is not None and args.limit < 1:
        p.error(f"--limit: {args.limit} is not allowed (>= 1, or leave it out)")
    questions = questions_from(load_questions(), args.from_index)[: args.limit]
    if not 2 <= args.validation_every <= len(questions):
        p.error(
            f"--validation-every: {args.validation_every} with {len(questions)} questions "
            f"(--from-index {args.from_index}, --limit {args.limit}) leaves no training or no "
            f"validation question; allowed: 2 to the number of questions"
        )
    model, tokenizer, path = load_bench_model(args.model, "float32", args.device)
    if not getattr(tokenizer, "chat_template", None):
        p.error(f"--model: {path} has no chat template; self-distillation needs a chat model")
    examples, left_out = distill(
        model, tokenizer, questions, args.new_tokens, args.max_prompt_tokens, args.batch_size,
        args.progress,
    )  # fmt: skip
    train, validation = split_by_question(examples, args.validation_every)
    if not train or not validation:
        p.error(
            f"{len(examples)} answered turns cannot fill both splits (the rest were left out: "
            f"{left_out}); raise --max-prompt-tokens or --limit"
        )
    counts: dict[str, int] = {}
    for e in examples:
        counts[task_of(e["category"])] = counts.get(task_of(e["category"]), 0) + 1
    write_jsonl_atomic(args.out / "train.jsonl", train)
    write_jsonl_atomic(args.out / "validation.jsonl", validation)
    summary = {
        "args": {k: str(v) for k, v in vars(args).items()}, "model": str(path),
        "questions": len(questions), "train": len(train), "validation": len(validation),
        "examples_per_task": counts, "left_out": left_out,
        "finished": sum(e["finished"] for e in examples),
    }  # fmt: skip
    write_json_atomic(args.out / "distill.json", summary)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
