"""Data layer: synthetic dataset, registry/loaders and their errors, tokenizer cache."""

from __future__ import annotations

import csv
import json
import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skipdecode.data import (
    DataConfigError,
    DataNotFoundError,
    EmptySplitError,
    Example,
    MissingColumnsError,
    available_datasets,
    get_or_train_tokenizer,
    get_task,
    group_by_source,
    load_split,
    median_target_length,
    synthetic,
    target_lengths,
)
from skipdecode.data.examples import limit_sources, pairs_to_examples

E2E_DIR = Path(
    os.environ.get("SKIPDECODE_E2E_DIR", Path(__file__).resolve().parents[3] / "shared/data/e2e")
)
SMALL = {"num_train": 60, "num_validation": 10, "num_test": 20}
MR_PATTERN = re.compile(r"^name\[[^\]]+\](, [A-Za-z ]+\[[^\]]+\])*$")
ALL_NAMES = set(synthetic.NAMES) | set(synthetic.NEAR_NAMES)


def assert_faithful(mr_text: str, reference: str) -> None:
    """Every slot is realised (per its markers) and no other venue is mentioned."""
    mr = synthetic.parse_mr(mr_text)
    lowered = reference.lower()
    for slot, value in mr.items():
        markers = synthetic.slot_markers(slot, value)
        assert any(m.lower() in lowered for m in markers), (slot, value, reference)
    if mr.get("familyFriendly") == "yes":
        assert not any(m in lowered for m in synthetic.slot_markers("familyFriendly", "no"))
    for other in ALL_NAMES - {mr["name"], mr.get("near")}:
        assert not re.search(rf"\b{re.escape(other)}\b", reference), (other, reference)
    eat_types = set(synthetic.SLOT_VALUES["eatType"]) - {mr.get("eatType")}
    assert not any(re.search(rf"\b{t}\b", lowered) for t in eat_types), reference


# ---------------------------------------------------------------------------- synthetic


def test_synthetic_is_deterministic_per_seed():
    first = load_split("synthetic", "train", seed=3, **SMALL)
    assert first == load_split("synthetic", "train", seed=3, **SMALL)
    assert first != load_split("synthetic", "train", seed=4, **SMALL)


def test_synthetic_default_sizes():
    sizes = {
        s: len(group_by_source(load_split("synthetic", s))) for s in ("train", "validation", "test")
    }
    assert sizes == {"train": 1500, "validation": 100, "test": 200}


def test_synthetic_splits_are_disjoint_and_eval_sets_ignore_train_size():
    sources = {
        s: {e.source for e in load_split("synthetic", s, **SMALL)}
        for s in ("train", "validation", "test")
    }
    assert not sources["train"] & sources["validation"]
    assert not sources["train"] & sources["test"]
    assert not sources["validation"] & sources["test"]
    bigger = {**SMALL, "num_train": 200}
    assert {e.source for e in load_split("synthetic", "test", **bigger)} == sources["test"]
    assert {e.source for e in load_split("synthetic", "validation", **bigger)} == sources[
        "validation"
    ]


def test_synthetic_mr_format_and_reference_counts():
    grouped = group_by_source(load_split("synthetic", "test", min_refs=3, max_refs=6, **SMALL))
    for example in grouped:
        assert MR_PATTERN.match(example.source), example.source
        slots = [part.split("[")[0] for part in example.source.split("], ")]
        assert slots == [s for s in synthetic.SLOTS if s in slots], "E2E slot order"
        assert synthetic.format_mr(synthetic.parse_mr(example.source)) == example.source
        assert 3 <= len(example.references) <= 6
        assert len(set(example.references)) == len(example.references)
    assert (
        synthetic.format_mr(
            {"near": "Burger King", "name": "The Eagle", "customer rating": "3 out of 5"}
        )
        == "name[The Eagle], customer rating[3 out of 5], near[Burger King]"
    )


def test_synthetic_references_are_faithful():
    for example in load_split("synthetic", "train", **SMALL):
        assert_faithful(example.source, example.target)
        assert example.target in example.references


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_any_realisation_is_faithful(seed):
    rng = random.Random(seed)
    mr = synthetic.random_mr(rng)
    text = synthetic.realise(mr, rng)
    assert_faithful(synthetic.format_mr(mr), text)
    assert text[0].isupper() and text.endswith(".")
    assert "  " not in text and " ." not in text and " ," not in text


def test_synthetic_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="min_refs"):
        load_split("synthetic", "train", min_refs=4, max_refs=2)
    with pytest.raises(ValueError, match="num_train"):
        load_split("synthetic", "train", num_train=-1)


# ---------------------------------------------------------------------------- records


@given(st.lists(st.tuples(st.sampled_from("abc"), st.text(min_size=1, max_size=5)), max_size=30))
def test_group_by_source_keeps_every_pair(pairs):
    examples = [Example(source=s, target=t, references=(t,)) for s, t in pairs]
    grouped = group_by_source(examples)
    assert [g.source for g in grouped] == list(dict.fromkeys(s for s, _ in pairs))
    for g in grouped:
        assert set(g.references) == {t for s, t in pairs if s == g.source}
        assert g.target == g.references[0]


def test_limit_keeps_first_sources_with_all_references():
    examples = (
        pairs_to_examples("a", ["1", "2"])
        + pairs_to_examples("b", ["3"])
        + pairs_to_examples("c", ["4"])
    )
    assert [(e.source, e.target) for e in limit_sources(examples, 2)] == [
        ("a", "1"),
        ("a", "2"),
        ("b", "3"),
    ]
    assert len(load_split("synthetic", "test", limit=5, **SMALL)) >= 15
    assert len(group_by_source(load_split("synthetic", "test", limit=5, **SMALL))) == 5


# ---------------------------------------------------------------------------- registry errors


def test_unknown_dataset_lists_known_names():
    with pytest.raises(
        DataConfigError,
        match="unknown dataset name='wmt'.*synthetic, e2e, reddit_tldr, cnn_dm, scitldr, chat",
    ):
        load_split("wmt", "train")
    assert set(available_datasets()) == {
        "synthetic",
        "e2e",
        "reddit_tldr",
        "cnn_dm",
        "scitldr",
        "chat",
    }


def test_unknown_split_lists_allowed_and_aliases_work():
    with pytest.raises(DataConfigError, match="unknown split='dev2'.*train, validation, test"):
        load_split("synthetic", "dev2")
    assert load_split("synthetic", "val", **SMALL) == load_split("synthetic", "validation", **SMALL)


def test_unknown_setting_is_named():
    with pytest.raises(DataConfigError, match=r"unknown setting\(s\) \['num_trian'\].*num_train"):
        load_split("synthetic", "train", num_trian=5)


def test_empty_split_is_an_error():
    with pytest.raises(EmptySplitError, match="'synthetic' split 'validation' is empty"):
        load_split("synthetic", "validation", num_validation=0)


def test_prompt_formats():
    assert get_task("e2e").prompt("name[X]") == "name[X]\nDescription:"
    assert get_task("synthetic").full_text("name[X]", "X is.") == "name[X]\nDescription: X is."
    assert get_task("cnn_dm").prompt("Some news.") == "Some news.\nTL;DR:"
    assert get_task("reddit_tldr").prompt_suffix == "\nTL;DR:"


# ---------------------------------------------------------------------------- E2E


def write_csv(path: Path, rows: list[dict[str, str]], columns=("mr", "ref")) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture
def e2e_like_dir(tmp_path: Path) -> Path:
    for split, filename in (("train", "devset.csv"), ("test", "testset_w_refs.csv")):
        data = synthetic.generate_split(
            split, 0, synthetic.SyntheticConfig(**{**SMALL, "num_train": 40})
        )
        write_csv(
            tmp_path / filename, [{"mr": mr, "ref": ref} for mr, refs in data for ref in refs]
        )
    return tmp_path


def test_e2e_local_split_of_devset_is_disjoint_and_complete(e2e_like_dir):
    train = load_split("e2e", "train", data_dir=str(e2e_like_dir), seed=1)
    validation = load_split("e2e", "validation", data_dir=e2e_like_dir, seed=1)
    train_mrs, val_mrs = {e.source for e in train}, {e.source for e in validation}
    assert not train_mrs & val_mrs
    assert len(val_mrs) == 4  # 10% of 40 MRs
    with open(e2e_like_dir / "devset.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert train_mrs | val_mrs == {r["mr"] for r in rows}
    assert len(train) + len(validation) == len(rows)
    assert {
        e.source for e in load_split("e2e", "validation", data_dir=e2e_like_dir, seed=2)
    } != val_mrs


def test_e2e_split_files_mapping(e2e_like_dir):
    (e2e_like_dir / "my_val.csv").write_text(
        "mr,ref\nname[A],A is.\nname[A],A is here.\n", encoding="utf-8"
    )
    validation = load_split(
        "e2e", "validation", data_dir=e2e_like_dir, split_files={"validation": "my_val.csv"}
    )
    assert group_by_source(validation) == [Example("name[A]", "A is.", ("A is.", "A is here."))]
    train = load_split(
        "e2e", "train", data_dir=e2e_like_dir, split_files={"validation": "my_val.csv"}
    )
    assert len({e.source for e in train}) == 40  # no longer split


def test_e2e_missing_data_dir_names_setting_path_and_files(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(DataNotFoundError) as info:
        load_split("e2e", "train", data_dir=str(missing))
    message = str(info.value)
    assert "data_dir=" in message and str(missing) in message
    assert "devset.csv" in message and "testset_w_refs.csv" in message


def test_e2e_missing_file_in_existing_dir(tmp_path):
    with pytest.raises(DataNotFoundError, match="testset_w_refs.csv.*split_files"):
        load_split("e2e", "test", data_dir=tmp_path)


def test_e2e_missing_column_names_file_found_and_needed(tmp_path):
    write_csv(
        tmp_path / "testset_w_refs.csv", [{"mr": "name[A]", "text": "A."}], columns=("mr", "text")
    )
    with pytest.raises(MissingColumnsError) as info:
        load_split("e2e", "test", data_dir=tmp_path)
    message = str(info.value)
    assert (
        "testset_w_refs.csv" in message
        and "['mr', 'text']" in message
        and "['mr', 'ref']" in message
    )


def test_e2e_header_only_file_is_empty_split(tmp_path):
    (tmp_path / "testset_w_refs.csv").write_text("mr,ref\n", encoding="utf-8")
    with pytest.raises(EmptySplitError, match="'e2e' split 'test' is empty"):
        load_split("e2e", "test", data_dir=tmp_path)


def test_e2e_bad_validation_fraction(e2e_like_dir):
    with pytest.raises(DataConfigError, match="validation_fraction=1.5"):
        load_split("e2e", "train", data_dir=e2e_like_dir, validation_fraction=1.5)


@pytest.mark.skipif(
    not (E2E_DIR / "devset.csv").is_file(), reason=f"real E2E CSVs not found at {E2E_DIR}"
)
def test_e2e_real_data_grouped_references():
    test = load_split("e2e", "test", data_dir=E2E_DIR)
    grouped = group_by_source(test)
    with open(E2E_DIR / "testset_w_refs.csv", encoding="utf-8-sig") as handle:
        pairs = {(row["mr"], row["ref"].strip()) for row in csv.DictReader(handle)}
    assert len(grouped) == 630 and len(test) == len(pairs)  # exact duplicate refs merge
    assert sum(len(g.references) for g in grouped) == len(pairs)
    assert max(len(g.references) for g in grouped) > 20
    train = load_split("e2e", "train", data_dir=E2E_DIR)
    validation = load_split("e2e", "validation", data_dir=E2E_DIR)
    assert not {e.source for e in train} & {e.source for e in validation}
    assert len({e.source for e in train}) + len({e.source for e in validation}) == 547
    assert all(e.source.startswith("name[") for e in train)


def test_e2e_hub_path_uses_card_fields(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, *, split, revision=None, **kwargs):
        calls.append((path, name, split, revision))
        return datasets.Dataset.from_dict(
            {
                "meaning_representation": ["name[A], food[French]", "name[A], food[French]"],
                "human_reference": ["A serves French food.", "A offers French food."],
            }
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    examples = load_split("e2e", "validation")
    assert calls == [("tuetschek/e2e_nlg", None, "validation", "refs/convert/parquet")]
    assert group_by_source(examples)[0].references == (
        "A serves French food.",
        "A offers French food.",
    )


def test_hub_failure_points_to_data_dir(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        DataConfigError, match="hub_name='abisee/cnn_dailymail'.*3.0.0.*set data_dir"
    ):
        load_split("cnn_dm", "test")


# ---------------------------------------------------------------------------- summarisation


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def test_reddit_tldr_local_jsonl(tmp_path):
    post = "SUBREDDIT: r/test\nTITLE: Title\nPOST: My long post.\nTL;DR:"
    write_jsonl(tmp_path / "train.jsonl", [{"prompt": post, "label": " short  summary\n"}] * 2)
    write_jsonl(tmp_path / "valid.jsonl", [{"prompt": "Other post\nTL;DR:", "label": "other"}])
    train = load_split("reddit_tldr", "train", data_dir=tmp_path)
    assert train[0] == Example(
        "SUBREDDIT: r/test\nTITLE: Title\nPOST: My long post.", "short summary", ("short summary",)
    )
    assert get_task("reddit_tldr").prompt(train[0].source) == post
    assert len(group_by_source(train)) == 1
    assert load_split("reddit_tldr", "validation", data_dir=tmp_path)[0].target == "other"


def test_cnn_dm_local_csv_json_and_field_override(tmp_path):
    write_csv(
        tmp_path / "test.csv",
        [{"article": "Art one.", "highlights": "Line one.\nLine two."}],
        columns=("article", "highlights"),
    )
    (tmp_path / "validation.json").write_text(
        json.dumps([{"article": "Art two.", "highlights": "H."}]), encoding="utf-8"
    )
    write_jsonl(tmp_path / "train.jsonl", [{"document": "Doc.", "summary": "Sum."}])
    assert load_split("cnn_dm", "test", data_dir=tmp_path) == [
        Example("Art one.", "Line one. Line two.", ("Line one. Line two.",))
    ]
    assert load_split("cnn_dm", "validation", data_dir=tmp_path)[0].source == "Art two."
    train = load_split(
        "cnn_dm", "train", data_dir=tmp_path, source_field="document", target_field="summary"
    )
    assert train[0].target == "Sum."
    renamed = load_split("cnn_dm", "train", data_dir=tmp_path, split_files={"train": "test.csv"})
    assert renamed[0].source == "Art one."


def test_summary_missing_file_lists_expected_names(tmp_path):
    with pytest.raises(
        DataNotFoundError, match=r"validation\.jsonl.*valid\.jsonl.*val\.csv.*split_files"
    ):
        load_split("reddit_tldr", "validation", data_dir=tmp_path)


def test_summary_missing_dir_and_columns(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"data_dir=.*nowhere.*prompt,label"):
        load_split("reddit_tldr", "train", data_dir=tmp_path / "nowhere")
    write_jsonl(tmp_path / "train.jsonl", [{"prompt": "p", "summary": "s"}])
    with pytest.raises(
        MissingColumnsError, match=r"train\.jsonl.*\['prompt', 'summary'\].*\['prompt', 'label'\]"
    ):
        load_split("reddit_tldr", "train", data_dir=tmp_path)


def test_malformed_jsonl_names_file_and_row(tmp_path):
    (tmp_path / "train.jsonl").write_text(
        '{"prompt": "p", "label": "l"}\n{oops\n', encoding="utf-8"
    )
    # read by datasets' json builder, whose parser counts rows from 0: row 1 is line 2
    with pytest.raises(DataConfigError, match=r"train\.jsonl.*could not be read as json.* row 1"):
        load_split("reddit_tldr", "train", data_dir=tmp_path)


# ---------------------------------------------------------------------------- tokenizer


@pytest.fixture(scope="module")
def small_train() -> list[Example]:
    return load_split("synthetic", "train", num_train=150, num_validation=10, num_test=10)


def test_tokenizer_train_cache_reload_round_trip(tmp_path, small_train, monkeypatch):
    from transformers import AutoTokenizer

    from skipdecode.data import tokenizer as tokenizer_module

    task = get_task("synthetic")
    tok = get_or_train_tokenizer(small_train, task, tmp_path, vocab_size=512)
    directory = Path(tok.name_or_path)
    assert directory.parent == tmp_path and directory.name.startswith("bpe-synthetic-train-v512-")
    assert sorted(p.name for p in tmp_path.iterdir()) == [directory.name]  # no temp dirs left
    assert (tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token) == (
        "<pad>",
        "<s>",
        "</s>",
        "<unk>",
    )
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert 256 < len(tok) <= 512

    text = task.full_text(small_train[0].source, small_train[0].target) + " £20-25 café"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == text
    reloaded = AutoTokenizer.from_pretrained(str(directory))
    assert reloaded(text)["input_ids"] == ids and reloaded.pad_token_id == 0

    def no_training(*args, **kwargs):
        raise AssertionError("cache miss")

    monkeypatch.setattr(tokenizer_module, "train_bpe_tokenizer", no_training)
    again = get_or_train_tokenizer(small_train, task, tmp_path, vocab_size=512)
    assert again.name_or_path == tok.name_or_path
    monkeypatch.undo()
    other = get_or_train_tokenizer(small_train[:-1], task, tmp_path, vocab_size=512)
    assert other.name_or_path != tok.name_or_path  # data fingerprint is part of the key
    assert (
        get_or_train_tokenizer(small_train, task, tmp_path, vocab_size=600, seed=1).name_or_path
        != tok.name_or_path
    )


def test_tokenizer_vocab_size_too_small(tmp_path, small_train):
    with pytest.raises(DataConfigError, match="vocab_size=100.*>= 260"):
        get_or_train_tokenizer(small_train, get_task("synthetic"), tmp_path, vocab_size=100)


def test_median_target_length(tmp_path, small_train):
    task = get_task("synthetic")
    tok = get_or_train_tokenizer(small_train, task, tmp_path, vocab_size=512)
    examples = [
        Example("s", "a", ("a",)),
        Example("s", "a b c", ("a b c",)),
        Example("s", "a b c d e", ("a b c d e",)),
    ]
    lengths = target_lengths(examples, tok, task=task)
    assert (
        lengths == sorted(lengths)
        and lengths[0] == len(tok(" a", add_special_tokens=False)["input_ids"]) + 1
    )
    assert median_target_length(examples, tok, task=task) == lengths[1]
    assert median_target_length(small_train, tok) > 10
    with pytest.raises(EmptySplitError):
        median_target_length([], tok)
