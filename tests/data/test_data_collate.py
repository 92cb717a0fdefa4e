"""Data layer: encoding with length limits, truncation reports, training and generation batches."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skipdecode.data import (
    DataConfigError,
    EncodedExample,
    Example,
    TargetTooLongError,
    TrainCollator,
    encode_example,
    encode_examples,
    encode_prompt,
    get_or_train_tokenizer,
    get_task,
    load_split,
    target_lengths,
)

TASK = get_task("synthetic")


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return load_split("synthetic", "train", num_train=150, num_validation=10, num_test=10)


@pytest.fixture(scope="module")
def tok(examples, tmp_path_factory):
    return get_or_train_tokenizer(examples, TASK, tmp_path_factory.mktemp("tok"), vocab_size=512)


def ids_of(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_encode_example_layout(tok, examples):
    item = encode_example(tok, examples[0], TASK, max_source_tokens=96, max_target_tokens=96)
    assert (
        list(item.prompt_ids) == tok(TASK.prompt(examples[0].source))["input_ids"]
    )  # = BOS + prompt
    assert item.prompt_ids[0] == tok.bos_token_id
    suffix = ids_of(tok, TASK.prompt_suffix)
    assert list(item.prompt_ids[-len(suffix) :]) == suffix
    assert list(item.target_ids) == ids_of(tok, " " + examples[0].target) + [tok.eos_token_id]
    assert item.target_length == len(item.target_ids) and not item.target_truncated
    assert not item.source_truncated


def test_long_source_is_cut_keeping_the_suffix(tok):
    example = Example(
        "name[The Eagle], " + ", ".join(f"near[Burger King {i}]" for i in range(40)), "x", ("x",)
    )
    prompt_ids, cut = encode_prompt(tok, example.source, TASK, max_source_tokens=40)
    assert cut and len(prompt_ids) <= 40 and len(prompt_ids) >= 35
    text = tok.decode(prompt_ids, skip_special_tokens=True)
    assert text.startswith("name[The Eagle], near[Burger King 0]") and text.endswith(
        "\nDescription:"
    )
    with pytest.raises(
        DataConfigError, match="max_source_tokens=3 cannot hold the prompt template"
    ):
        encode_prompt(tok, example.source, TASK, max_source_tokens=3)


def test_truncation_report_counts_and_policies(tok, examples):
    lengths = target_lengths(examples, tok, task=TASK)
    limit = sorted(lengths)[len(lengths) // 2]
    expected_long = sum(length > limit for length in lengths)
    assert expected_long > 0

    kept, report = encode_examples(tok, examples, TASK, max_target_tokens=limit)
    assert (
        report.long_targets == expected_long and report.dropped == 0 and len(kept) == len(examples)
    )
    assert report.total == len(examples) and report.max_target_length == max(lengths)
    assert report.fraction == pytest.approx(expected_long / len(examples))
    assert all(len(item.target_ids) <= limit for item in kept)
    cut = [item for item in kept if item.target_truncated]
    assert len(cut) == expected_long and all(
        item.target_ids[-1] != tok.eos_token_id for item in cut
    )
    assert (
        f"{expected_long}/{len(examples)}" in report.summary()
        and report.as_dict()["long_targets"] == expected_long
    )

    kept, report = encode_examples(
        tok, examples, TASK, max_target_tokens=limit, on_long_target="drop"
    )
    assert report.long_targets == report.dropped == expected_long
    assert len(kept) == len(examples) - expected_long and not any(i.target_truncated for i in kept)

    with pytest.raises(TargetTooLongError) as info:
        encode_examples(tok, examples, TASK, max_target_tokens=limit, on_long_target="error")
    message = str(info.value)
    assert f"max_target_tokens={limit}" in message and f"{max(lengths)} tokens" in message
    assert f"{expected_long}/{len(examples)}" in message

    with pytest.raises(DataConfigError, match="on_long_target='cut'.*truncate, drop, error"):
        encode_examples(tok, examples, TASK, on_long_target="cut")


def test_no_truncation_under_task_defaults(tok, examples):
    kept, report = encode_examples(tok, examples, TASK)
    assert report.long_targets == 0 and report.truncated_sources == 0 and len(kept) == len(examples)
    assert report.max_target_tokens == TASK.max_target_tokens


def test_train_collator_batch(tok, examples):
    items, _ = encode_examples(tok, examples[:5], TASK)
    batch = TrainCollator(tok, pad_id=tok.pad_token_id)(items)
    width = max(len(item) for item in items)
    assert (
        batch["input_ids"].shape
        == batch["labels"].shape
        == batch["attention_mask"].shape
        == (5, width)
    )
    assert batch["prompt_lengths"].tolist() == [len(item.prompt_ids) for item in items]
    for row, item in enumerate(items):
        p, n = len(item.prompt_ids), len(item)
        assert batch["input_ids"][row, :n].tolist() == list(item.prompt_ids + item.target_ids)
        assert (batch["input_ids"][row, n:] == tok.pad_token_id).all()
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (width - n)
        assert (batch["labels"][row, :p] == -100).all() and (batch["labels"][row, n:] == -100).all()
        assert batch["labels"][row, p:n].tolist() == list(item.target_ids)
    assert all(t.dtype == torch.long for t in batch.values())


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=6),
    st.sampled_from([None, 8]),
)
def test_train_collator_invariants(shapes, multiple):
    items = [
        EncodedExample(
            tuple(range(10, 10 + p)), tuple(range(50, 50 + t)), Example("s", "t", ("t",)), t
        )
        for p, t in shapes
    ]
    batch = TrainCollator(pad_id=0, pad_to_multiple_of=multiple)(items)
    width = batch["input_ids"].shape[1]
    assert width >= max(p + t for p, t in shapes) and (multiple is None or width % multiple == 0)
    assert batch["attention_mask"].sum(1).tolist() == [p + t for p, t in shapes]
    assert (batch["labels"] != -100).sum(1).tolist() == [t for _, t in shapes]
    assert ((batch["labels"] != -100) <= batch["attention_mask"].bool()).all()
