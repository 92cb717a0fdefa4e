"""How many cells share a GPU: the choice from free memory and measured peaks."""

from __future__ import annotations

import json

import pytest

from skipdecode.experiments.sweeps.gpu_memory import GIB, PEAK_KEY, choose_jobs, measured_peaks


def test_choose_jobs_divides_the_free_memory_by_peak_plus_overhead():
    # 0.9 * 78.7 GiB / (16 + 1) GiB = 4.17 -> 4 cells at once
    assert choose_jobs(int(78.7 * GIB), 16 * GIB) == 4
    # measured CALM peak 11.1 GiB: 0.9 * 78.7 / 12.1 = 5.85 -> 5
    assert choose_jobs(int(78.7 * GIB), int(11.1 * GIB)) == 5


def test_choose_jobs_is_at_least_one_and_at_most_max_jobs():
    assert choose_jobs(2 * GIB, 16 * GIB) == 1
    assert choose_jobs(80 * GIB, GIB // 4, max_jobs=16) == 16


@pytest.mark.parametrize(
    "kwargs, setting",
    [
        ({"free_bytes": 0, "peak_bytes": GIB}, "free_bytes"),
        ({"free_bytes": GIB, "peak_bytes": 0}, "peak_bytes"),
        ({"free_bytes": GIB, "peak_bytes": GIB, "headroom": 1.5}, "headroom"),
    ],
)
def test_choose_jobs_rejects_bad_input_by_name(kwargs, setting):
    with pytest.raises(ValueError, match=setting):
        choose_jobs(**kwargs)


def test_measured_peaks_reads_every_cell_json(tmp_path):
    for i, peak in enumerate([4 * GIB, None, 11 * GIB]):
        job = tmp_path / "sweep" / str(i)
        job.mkdir(parents=True)
        cell = {"status": "ok"} | ({PEAK_KEY: peak} if peak else {})
        (job / "cell.json").write_text(json.dumps(cell))
    (tmp_path / "sweep" / "3").mkdir()
    (tmp_path / "sweep" / "3" / "cell.json").write_text("{not json")
    assert sorted(measured_peaks([tmp_path / "sweep", tmp_path / "absent"])) == [4 * GIB, 11 * GIB]


def test_without_a_measured_peak_the_experiments_memory_plan_sizes_the_jobs(
    tmp_path, monkeypatch, capsys
):
    from skipdecode.experiments.sweeps import gpu_memory
    from skipdecode.training.memory import GIB, experiment_plan

    monkeypatch.setattr(gpu_memory, "_free_bytes", lambda device: 80 * GIB)
    assert gpu_memory.main([str(tmp_path), "--experiment", "e2e_smollm2_gpu", "--verbose"]) == 0
    out, err = capsys.readouterr()
    plan = experiment_plan("e2e_smollm2_gpu", [])[1].total
    assert int(out) == gpu_memory.choose_jobs(80 * GIB, plan, GIB, 0.9, gpu_memory.os.cpu_count())
    assert "e2e_smollm2_gpu's plan" in err
