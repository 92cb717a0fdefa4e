"""The chat dataset: prompts already in a model's chat template, kept whole, with no BOS added."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ci import skip_unless_ci

from skipdecode.data import DataConfigError, encode_example, encode_prompt, get_task, load_split

MESSAGES = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from skipdecode.models.assets import smollm2_dir

    try:
        return AutoTokenizer.from_pretrained(smollm2_dir(create=False))
    except FileNotFoundError as err:
        skip_unless_ci(f"SmolLM2 not converted (make smollm2): {err}")


def write_chat(directory: Path, prompt: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for split in ("train", "validation"):
        row = {"prompt": prompt, "response": " Blue. ", "question_id": 1}
        (directory / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    return directory


def test_a_chat_example_is_the_chat_template_s_ids_then_the_answer_and_eos(tok, tmp_path):
    prompt = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("assistant\n") and tok.bos_token_id is not None
    (example,) = load_split("chat", "train", data_dir=write_chat(tmp_path, prompt))
    assert example.source == prompt  # the assistant header's newline is kept
    assert example.target == "Blue."
    encoded = encode_example(tok, example, get_task("chat"), 384, 128)
    # the ids the benchmark decodes from (apply_chat_template), with no second start token
    rendered = tok.apply_chat_template(
        MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"][0].tolist()
    assert list(encoded.prompt_ids) == rendered
    assert rendered[0] == tok.bos_token_id  # the template carries its own
    answer = tok("Blue.", add_special_tokens=False)["input_ids"]
    assert list(encoded.target_ids) == [*answer, tok.eos_token_id]


def test_an_answer_cut_at_the_length_limit_trains_without_eos(tok, tmp_path):
    prompt = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    rows = [
        {"prompt": prompt, "response": "Blue, green and", "finished": False},
        {"prompt": prompt + " ", "response": "Red.", "finished": True},
    ]
    for split in ("train", "validation"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cut, whole = load_split("chat", "train", data_dir=tmp_path)
    assert (cut.complete, whole.complete) == (False, True)
    task = get_task("chat")
    assert encode_example(tok, cut, task, 384, 128).target_ids == tuple(
        tok("Blue, green and", add_special_tokens=False)["input_ids"]
    )
    assert encode_example(tok, whole, task, 384, 128).target_ids[-1] == tok.eos_token_id
    # the other datasets still get their BOS
    e2e_ids, _ = encode_prompt(tok, "name[X]", get_task("e2e"), 128)
    assert e2e_ids[0] == tok.bos_token_id and e2e_ids[1] != tok.bos_token_id


def test_a_chat_prompt_longer_than_the_limit_is_refused_not_cut(tok):
    prompt = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    with pytest.raises(DataConfigError, match=r"max_source_tokens=8; task 'chat' never cuts"):
        encode_prompt(tok, prompt, get_task("chat"), 8)


def test_chat_data_have_no_test_split_and_no_hub_source(tmp_path):
    with pytest.raises(DataConfigError, match="unknown split='test'.*allowed: train, validation"):
        load_split("chat", "test", data_dir=tmp_path)
    with pytest.raises(DataConfigError, match="'chat' has no hub source; set data_dir"):
        load_split("chat", "train")
