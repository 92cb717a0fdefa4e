"""Studies run by name: every study config composes and lists its commands; settings are Hydra
overrides, a missing one is named; steps repeat, skip what exists, and stop before running when
an input is missing."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from studies import run
from studies.run import StudyError, run_study, study_names

#: settings a study requires from the command line, for its dry run here
REQUIRED = {
    "speculative_b10_variant": ["variant=x"],
    "spec_bench_variant": ["variant=x"],
    "speculative_e2e_b8": ["export=outputs/some/export"],
}


@pytest.mark.parametrize("name", study_names())
def test_every_study_composes_and_lists_its_commands(name, capsys):
    lines = run_study(name, REQUIRED.get(name, []), dry_run=True)
    commands = [line for line in lines if line.startswith("python -m ")]
    assert lines[0].startswith(f"# study {name}: ") and len(lines[0]) > 30
    assert commands or any(line.startswith("# skip") for line in lines), lines


def test_a_study_lists_the_commands_its_make_target_ran():
    lines = run_study("speculative_budgets", dry_run=True)
    commands = [line for line in lines if line.startswith("python -m ")]
    assert commands[0] == (
        "python -m skipdecode.train experiment=e2e_smollm2 schedule=speculative_b6 seed=1 "
        "hydra.run.dir=outputs/speculative_budgets/b6/train"
    )
    assert commands[4] == (
        "python -m skipdecode.experiments.benchmarks.bench_speculative --model "
        "outputs/speculative_budgets/b6/train/export --workload dataset --prompts 16 "
        "--batch-sizes 1 8 32 --ks 2 3 4 --draft-vocab 4096 --new-tokens 64 --repeats 2 "
        "--compile --draft-budget 6 --draft-warmup 1 --out results/bench "
        "--name speculative-budgets-b6"
    )
    assert commands[-1].startswith("python -m studies.speculative_budgets ")
    assert len(commands) == 9  # 4 trainings, 4 benchmarks, the comparison


def test_settings_are_overrides_and_a_missing_one_is_named():
    lines = run_study("speculative_b10_seed", ["draft_seed=3", "draft_warmup=5"], dry_run=True)
    train = next(line for line in lines if "skipdecode.train" in line)
    assert "seed=3" in train and "b10_warmup-5-seed-3/train" in train
    assert "schedule.draft.warmup_layers=5" in train
    with pytest.raises(
        StudyError, match=r"needs the setting\(s\) variant.*NAME=spec_bench_variant"
    ):
        run_study("spec_bench_variant", dry_run=True)
    with pytest.raises(
        StudyError, match=r"NAME='nope' is not known; allowed: .*speculative_budgets"
    ):
        run_study("nope", dry_run=True)


@pytest.fixture
def tiny_studies(tmp_path, monkeypatch):
    """A studies folder of its own: a conf/ with one study, run from ``tmp_path``."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "demo.yaml").write_text(
        "description: a demo\n"
        "steps:\n"
        "  - require: {path: inputs/a.txt, hint: make it first}\n"
        "  - foreach: {n: [1, 2]}\n"
        "    run: {argv: [json.tool, inputs/a.txt, 'out/{n}.json'], creates: 'out/{n}.json'}\n"
        "  - keep_record: {run: ev, to: published/ev}\n"
    )
    monkeypatch.setattr(run, "CONF", conf)
    monkeypatch.setattr(run, "ROOT", tmp_path)
    return tmp_path


def test_steps_repeat_skip_what_exists_and_keep_a_record(tiny_studies):
    root = tiny_studies
    with pytest.raises(StudyError, match=r"inputs/a.txt is missing: make it first"):
        run_study("demo")
    assert not (root / "out").exists()  # stopped before any step ran
    (root / "inputs").mkdir()
    (root / "inputs" / "a.txt").write_text('{"x": 1}')
    (root / "out").mkdir()
    (root / "out" / "2.json").write_text("kept")
    (root / "ev").mkdir()
    (root / "ev" / "record.json").write_text("{}")
    (root / "ev" / "generations.jsonl").write_text('{"output": "a"}\n')
    lines = run_study("demo")
    assert lines[1] == shlex_join(["python", "-m", "json.tool", "inputs/a.txt", "out/1.json"])
    assert lines[2] == "# skip: out/2.json exists"
    assert json.loads((root / "out" / "1.json").read_text()) == {"x": 1}
    assert (root / "out" / "2.json").read_text() == "kept"
    published = root / "published" / "ev"
    assert (published / "record.json").read_text() == "{}"
    assert (
        gzip.decompress((published / "generations.jsonl.gz").read_bytes()) == b'{"output": "a"}\n'
    )


def test_a_step_with_a_key_it_does_not_read_or_a_missing_source_is_refused(tiny_studies):
    """A misspelt ``experiments:`` once trained the default experiment; a record kept without
    its generations once left a published folder with a record alone."""
    conf = tiny_studies / "conf"
    (conf / "typo.yaml").write_text("steps:\n  - train: {run: r, experiments: e2e_gemma3}\n")
    with pytest.raises(
        StudyError,
        match=r"step 0 train: .* has experiments, which it does not "
        r"read; a train step takes run \(required\) and experiment, ",
    ):
        run_study("typo", dry_run=True)
    (conf / "lacks.yaml").write_text("steps:\n  - keep_record: {run: ev}\n")
    with pytest.raises(StudyError, match=r"step 0 keep_record: .* lacks to"):
        run_study("lacks", dry_run=True)
    (conf / "half.yaml").write_text("steps:\n  - keep_record: {run: ev, to: published/ev}\n")
    (tiny_studies / "ev").mkdir()
    (tiny_studies / "ev" / "record.json").write_text("{}")
    with pytest.raises(StudyError, match=r"nothing kept, ev/generations.jsonl missing"):
        run_study("half")
    assert not (tiny_studies / "published").exists()


def shlex_join(parts: list[str]) -> str:
    import shlex

    return shlex.join(parts)


def test_make_study_lists_the_studies():
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "studies"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [line.split()[0] for line in out.splitlines()] == study_names()
