"""Published cells rerun from the current commit (``sweeps.rerun``): the command each job's
cell.json recorded, under its own sweep name and without reuse; checked, then published."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest

from skipdecode.experiments.sweeps import rerun as rerun_module
from skipdecode.experiments.sweeps.pending import pending
from skipdecode.experiments.sweeps.rerun import RerunError, plan_rerun, rerun

CELL = {
    "status": "ok",
    "overrides": ["experiment=scitldr_smollm2", "sweep.name=pair", "seed=2", "schedule=target_2x"],
    "cell_id": "ac8672a57f6f",
}


def _job(tmp_path: Path, name: str = "1", **changes) -> Path:
    job = tmp_path / "results" / "scitldr" / name
    job.mkdir(parents=True)
    (job / "cell.json").write_text(json.dumps({**CELL, **changes}))
    return job


def test_a_rerun_is_the_recorded_command_under_its_own_name_without_reuse(tmp_path):
    job = _job(tmp_path)
    plan = plan_rerun(job)
    assert plan.overrides == (
        "experiment=scitldr_smollm2",
        "seed=2",
        "schedule=target_2x",
        "sweep.name=rerun_scitldr_1",
        "sweep.reuse=false",
    )
    lines = []
    commands = rerun([job], dry_run=True, sweeps=tmp_path / "sweep", say=lines.append)
    assert [c[2] for c in commands] == [
        "skipdecode.sweep",
        "skipdecode.aggregate",
        "skipdecode.experiments.sweeps.pages",
    ]
    assert lines[1].endswith(f"rerun_scitldr_1 --publish {job.parent} --update")
    publish_only = rerun([job], dry_run=True, sweeps=tmp_path / "sweep", say=[].append, pages=False)
    assert [c[2] for c in publish_only] == ["skipdecode.sweep", "skipdecode.aggregate"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"status": "failed"}, "only a finished cell with its id"),
        ({"cell_id": None}, "only a finished cell with its id"),
        ({"overrides": ["seed=1"]}, "records no sweep command"),
    ],
)
def test_a_job_that_cannot_be_rerun_is_refused_and_says_why(tmp_path, changes, message):
    with pytest.raises(RerunError, match=message):
        plan_rerun(_job(tmp_path, **changes))
    with pytest.raises(RerunError, match="no readable cell.json"):
        plan_rerun(tmp_path / "results" / "scitldr" / "none")


def test_a_rerun_of_another_cell_is_not_published_and_a_finished_one_is_not_run_again(
    tmp_path, monkeypatch
):
    job, sweeps = _job(tmp_path), tmp_path / "sweep"
    trained = {"cell_id": "0123456789ab"}
    ran = []

    def fake_run(cmd, check):
        ran.append(cmd[2])
        if cmd[2] == "skipdecode.sweep":  # the sweep writes its cell under its name
            cell = sweeps / "rerun_scitldr_1" / "0" / "cell.json"
            cell.parent.mkdir(parents=True, exist_ok=True)
            cell.write_text(json.dumps({"status": "ok", **trained}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(rerun_module.subprocess, "run", fake_run)
    with pytest.raises(RerunError, match="'0123456789ab', not the published 'ac8672a57f6f'"):
        rerun([job], sweeps=sweeps, say=lambda _: None)
    assert ran == ["skipdecode.sweep"]  # nothing published
    trained["cell_id"] = CELL["cell_id"]
    (sweeps / "rerun_scitldr_1" / "0" / "cell.json").write_text(json.dumps(CELL))
    ran.clear()
    rerun([job], sweeps=sweeps, say=lambda _: None)
    assert ran == ["skipdecode.aggregate", "skipdecode.experiments.sweeps.pages"]


def _generations(
    folder: Path, outputs: list[str], gzipped: bool = False, device: dict | None = None
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"files": {"generations": "generations.jsonl"}, "provenance": {"device": device}}
    (folder / "record.json").write_text(json.dumps(record))
    lines = "".join(json.dumps({"index": i, "output": o}) + "\n" for i, o in enumerate(outputs))
    if gzipped:
        with gzip.open(folder / "generations.jsonl.gz", "wt", encoding="utf-8") as f:
            f.write(lines)
    else:
        (folder / "generations.jsonl").write_text(lines)


def test_a_rerun_whose_outputs_changed_is_published_only_with_its_whole_folder(
    tmp_path, monkeypatch
):
    jobs = [_job(tmp_path, "1"), _job(tmp_path, "2", overrides=[*CELL["overrides"][:2], "seed=3"])]
    sweeps = tmp_path / "sweep"
    xeon = {"cpu": "Intel(R) Xeon(R) Processor"}  # written before the kernels' ISA was kept
    for job in jobs:
        _generations(job, ["a", "b", "c"], gzipped=True, device=xeon)
    evaluated = tmp_path / "cells"
    _generations(evaluated / "1", ["a", "b", "c"], device=xeon)  # the same outputs
    epyc = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "cpu_generation": "family 25 model 17"}
    _generations(evaluated / "2", ["a", "x", "c"], device=epyc)  # one otherwise, another CPU
    for job in jobs:
        cell = sweeps / f"rerun_scitldr_{job.name}" / "0" / "cell.json"
        cell.parent.mkdir(parents=True)
        record = evaluated / job.name / "record.json"
        cell.write_text(json.dumps({**CELL, "record": str(record)}))
    ran = []
    monkeypatch.setattr(
        rerun_module.subprocess,
        "run",
        lambda cmd, check: ran.append(cmd[2]) or subprocess.CompletedProcess(cmd, 0),
    )
    differ = (
        r"scitldr/2: 1 of 3 outputs differ \(published from Intel\(R\) Xeon\(R\) Processor "
        r"\(instruction set not recorded; generation not recorded\), "
        r"rerun on AMD EPYC \(AVX512; family 25 model 17\)\): outputs differ when"
    )
    with pytest.raises(RerunError, match=differ):
        rerun([jobs[1]], sweeps=sweeps, say=lambda _: None)
    assert ran == []  # nothing published
    said = []
    rerun(jobs, sweeps=sweeps, say=said.append)  # the whole folder: one code again
    assert ran == ["skipdecode.aggregate", "skipdecode.experiments.sweeps.pages"]
    assert any("scitldr/2: 1 of 3 outputs differ" in line for line in said)
    ran.clear()
    rerun([jobs[1]], sweeps=sweeps, say=lambda _: None, outputs_may_differ=True)
    assert ran == ["skipdecode.aggregate", "skipdecode.experiments.sweeps.pages"]
    rerun([jobs[0]], sweeps=sweeps, say=lambda _: None)  # alike: nothing to refuse

    (evaluated / "1" / "generations.jsonl").unlink()  # unknown is not alike
    with pytest.raises(RerunError, match=r"scitldr/1: the rerun kept no outputs, so whether"):
        rerun([jobs[0]], sweeps=sweeps, say=lambda _: None)
    _generations(evaluated / "1", ["a", "b", "c"], device=xeon)
    (jobs[0] / "cell.json").write_text(json.dumps({**CELL, "source": "smollm2__x/eval-021ea6a7"}))
    with pytest.raises(RerunError, match=r"evaluated as '1', not the published 'eval-021ea6a7'"):
        rerun([jobs[0]], sweeps=sweeps, say=lambda _: None)  # its record is in cells/1/


def test_pending_lists_the_records_that_publish_a_speedup_without_its_raw_timings(tmp_path, capsys):
    speeds = {
        "10": {"measured_speedup_decode": 2.1, "baseline": {"schedule": "full"}},
        "3": {"measured_speedup_decode": 1.9, "baseline": {"schedule": "full"}},
        "4": {"measured_speedup_decode": 2.0, "baseline": {"schedule": "full"}, "raw": {"x": 1}},
        "5": {"measured_speedup_decode": 1.0, "baseline": {"schedule": "self"}},
        "6": {"measured_speedup_decode": None},
    }
    genoa = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "cpu_generation": "family 25 model 17"}
    for name, speed in speeds.items():
        job = tmp_path / "results" / "scitldr" / name
        job.mkdir(parents=True)
        device = genoa if name != "6" else {"cpu": "AMD EPYC"}
        (job / "record.json").write_text(
            json.dumps({"speed": speed, "provenance": {"device": device}})
        )
    folder = tmp_path / "results" / "scitldr"
    assert pending(tmp_path / "results") == {folder: [folder / "3", folder / "10"]}
    for name in ("3", "4", "10"):  # sweep jobs; 4 keeps its raw timings
        (folder / name / "cell.json").write_text("{}")
    rerun_module.main(["--pending", str(tmp_path / "results")])
    said = capsys.readouterr().out.splitlines()
    assert said[1] == (  # the machine a rerun should run on, most records first
        "  its records ran on: AMD EPYC (AVX512; family 25 model 17) (4); "
        "AMD EPYC (instruction set not recorded; generation not recorded) (1)"
    )
    assert said[2] == f"  python -m skipdecode.experiments.sweeps.rerun {folder}/3 {folder}/10"
    assert said[3].endswith(f"rerun {folder}/3 {folder}/4 {folder}/10)")  # where refused


def test_pending_lists_benchmarks_timed_without_their_raw_seconds_with_their_commands(tmp_path):
    from skipdecode.experiments.sweeps.pending import bench_command, pending_benchmarks

    bench = tmp_path / "bench"
    bench.mkdir()
    argv = ["/w/src/skipdecode/bench.py", "--shapes", "tiny", "--name", "x y"]
    cpu = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "cuda_devices": []}

    def write(name, variants, device=cpu):
        prov = {"argv": argv, "device": device}
        record = {"cells": [{"variants": variants}], "provenance": prov}
        (bench / f"{name}.json").write_text(json.dumps(record))

    write("kept", {"a": {"decode_ms_per_step": 1.0, "raw": {}}, "b": {"prefill_ms": 2.0}})
    write("decode", {"a": {"decode_ms_per_step": 1.0}, "b": {"ms_per_round": 3.0}})
    write("train", {"full": {"step_ms": 5.0, "step_s_per_repeat": [0.005]}, "2x": {"step_ms": 3}})
    gpu = {"cuda_devices": [{"name": "NVIDIA H200"}]}
    write(
        "lossless",
        {"full": {"decode_s": 1.0, "decode_s_per_repeat": [1.0]}, "k": {"decode_s": 2}},
        gpu,
    )
    listed = {p.stem: (n, device) for p, n, device, _ in pending_benchmarks(tmp_path)}
    assert listed == {
        "decode": (2, "AMD EPYC (AVX512; generation not recorded)"),
        "train": (1, "AMD EPYC (AVX512; generation not recorded)"),
        "lossless": (1, "NVIDIA H200"),
    }
    assert bench_command(argv) == "python -m skipdecode.bench --shapes tiny --name 'x y'"
    assert bench_command(["/w/studies/s.py", "--n", "1"]) == "python /w/studies/s.py --n 1"


def test_with_commit_each_job_is_published_and_committed_as_it_finishes(tmp_path, monkeypatch):
    from skipdecode.experiments.sweeps.rerun import rerun_and_commit

    monkeypatch.setenv("GIT_AUTHOR_NAME", "a")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "a@b")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "a")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "a@b")
    made = [_job(tmp_path, "1"), _job(tmp_path, "2", overrides=[*CELL["overrides"][:2], "seed=3"])]
    jobs = [job.relative_to(tmp_path) for job in made]  # as a chain names them, from the root
    real_run = subprocess.run
    for git in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "published"]):
        real_run(["git", *git], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    sweeps, ran = Path("sweep"), []

    def fake_run(cmd, check=False, **kwargs):
        if cmd[0] == "git":
            return real_run(cmd, check=check, **kwargs)
        ran.append(cmd[2])
        name = next(a for a in cmd if a.startswith(("sweep.name=", "outputs/", "sweep/")))
        job = name.rsplit("_", 1)[-1]
        if cmd[2] == "skipdecode.sweep":  # trains and evaluates the cell under its rerun name
            cell = sweeps / f"rerun_scitldr_{job}" / "0" / "cell.json"
            cell.parent.mkdir(parents=True)
            cell.write_text(json.dumps(CELL))
        else:  # publishes it into its job folder, and the tree's pages change with it
            (Path("results/scitldr") / job / "record.json").write_text("{}")
            Path("results/PROVENANCE.md").write_text(f"job {job}\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(rerun_module.subprocess, "run", fake_run)
    Path("notes.txt").write_text("not the rerun's\n")  # untracked, outside results: left alone
    with pytest.raises(RerunError, match="in checkout .*, but the code that would rerun it is"):
        rerun_and_commit(jobs, say=[].append, sweeps=sweeps, pages=False)  # this package's code
    assert ran == []
    said, alone = [], {"outputs_may_differ": True}  # a job alone, and no outputs kept here
    rerun_and_commit(jobs, say=said.append, sweeps=sweeps, pages=False, code=tmp_path, **alone)
    assert ran == ["skipdecode.sweep", "skipdecode.aggregate"] * 2  # one job after the other
    log = real_run(["git", "log", "--format=%s"], capture_output=True, text=True).stdout
    assert log.splitlines() == [
        f"results/scitldr/{job} trained and evaluated again from a clean commit, raw timings kept "
        f"(python -m skipdecode.experiments.sweeps.rerun results/scitldr/{job})"
        for job in (2, 1)
    ] + ["published"]
    last = real_run(["git", "show", "--name-only", "--format="], capture_output=True, text=True)
    assert last.stdout.split() == ["results/PROVENANCE.md", "results/scitldr/2/record.json"]
    assert "# results/scitldr/1: committed" in said
    status = real_run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout
    assert status.split() == ["??", "notes.txt", "??", "sweep/"]
    said.clear()
    rerun_and_commit(jobs[1:], say=said.append, sweeps=sweeps, pages=False, code=tmp_path, **alone)
    assert said[-1] == "# results/scitldr/2: nothing new to commit"  # finished, published as is
