"""The schedule search: refusals before any decoding, trials scored on the validation split and
replayed from cache on a rerun, and the page's front and best schedule."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from exports import compose, make_exported_dir
from offline_env import offline_env
from wandb_offline import read_offline_run

from skipdecode.experiments.search.front import (
    best_at_speed,
    best_trial,
    pareto_front,
    per_schedule_points,
    read_trials,
    write_front,
)
from skipdecode.experiments.search.trial import SearchError, search_trial

ROOT = Path(__file__).resolve().parents[2]
FAST = ["eval=fast", "eval.limit=4", "eval.generation.batch_size=2"]
FAST += ["eval.generation.max_new_tokens=8", "eval.threads=1", "metric=bleu"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_exported_dir(tmp_path_factory.mktemp("search") / "model", num_layers=8, width=32)


def _cfg(model_dir: Path, tmp: Path, *extra: str):
    return compose(
        "search",
        [f"checkpoint={model_dir}", f"output_dir={tmp / 'job'}", f"paths.output_dir={tmp}"]
        + [f"cache_dir={tmp / 'cache'}"]
        + FAST
        + list(extra),
    )


@pytest.mark.parametrize(
    "extra, match",
    [
        (["eval.split=test"], r"eval\.split='test': the search never sees the test split"),
        (["quality_floor=0.5"], r"quality_floor=0\.5; allowed: a number <= 0"),
        (["metric=meteor"], r"metric='meteor'; allowed: rougeL_max, bleu, bertscore_f1"),
        (["metric=bertscore_f1", "eval.metrics.bertscore.enabled=false"], r"not in the full"),
        (["search.shape=linear"], r"search\.max_layers=None; search\.shape=linear needs an int"),
    ],
)
def test_the_search_refuses_what_it_cannot_evaluate(model_dir, tmp_path, extra, match):
    with pytest.raises(SearchError, match=match):
        search_trial(_cfg(model_dir, tmp_path, *extra))
    if "eval.split=test" in extra or "quality_floor=0.5" in extra or "search.shape" in extra[0]:
        assert not (tmp_path / "cache").exists()  # refused before anything was decoded


def _assert_logged_to_wandb(job: Path, trial: dict) -> None:
    """The trial's job logged one offline W&B run with its speed and difference."""
    (run,) = (job / "wandb").glob("offline-run-*")
    logged = read_offline_run(run)
    assert logged["group"] == "schedule_search" and logged["job_type"] == "search_trial"
    assert logged["summary"]["search/speed"] == pytest.approx(trial["speed"])
    assert logged["summary"]["search/delta"] == pytest.approx(trial["delta"])


def test_trials_are_scored_on_validation_replayed_from_cache_and_make_the_front(
    model_dir, tmp_path
):
    """Two trials in-process (what each job of the search's multirun runs): scored on the
    validation split against full, logged to W&B (offline), replayed from the cache on a rerun
    with nothing decoded again, and the page's front drawn from their ``trial.json``. The
    multirun itself (its sweeper choosing the trials) is the ``slow`` test below."""
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    settings = (
        ["search.target_speedup=2.0"],
        ["search.shape=power_law", "search.target_speedup=3"],
    )

    def run(wandb: bool) -> list[tuple[float, float]]:
        out = []
        for n, extra in enumerate(settings):
            job = sweep / str(n)
            cfg = compose(
                "search",
                [f"checkpoint={model_dir}", f"output_dir={job}", f"paths.output_dir={tmp_path}",
                 f"cache_dir={cache}", f"wandb.enabled={str(wandb).lower()}", *FAST, *extra],
            )  # fmt: skip
            out.append(search_trial(cfg))
        return out

    first = run(wandb=True)
    trials = [json.loads((sweep / str(n) / "trial.json").read_text()) for n in range(2)]
    assert [(t["speed"], t["delta"]) for t in trials] == first
    assert [t["status"] for t in trials] == ["ok", "ok"] and trials[1]["schedule"]["name"] == (
        "power_law"
    )
    for n, trial in enumerate(trials):
        _assert_logged_to_wandb(sweep / str(n), trial)
    records = [json.loads(p.read_text()) for p in cache.glob("*/record.json")]
    assert len(records) == 3 and {r["dataset"]["split"] for r in records} == {"validation"}
    before = sorted(p.name for p in cache.iterdir())
    assert run(wandb=False) == first  # replayed: the same numbers
    assert sorted(p.name for p in cache.iterdir()) == before  # nothing evaluated again
    page = write_front(sweep)["md"].read_text()
    assert "2 trials on the validation subset (never the test split)" in page
    front = pareto_front(read_trials(sweep))
    for n, trial in enumerate(trials):  # each trial's row: its speed, Δ and place on the front
        (row,) = [line for line in page.splitlines() if line.startswith(f"| {n} | `")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2:4] == [f"{trial['speed']:.2f}x", f"{trial['delta']:+.2f}"]
        assert (cells[5] == "yes") == (str(n) in front)
    assert front  # two trials: one at least is on the front


@pytest.mark.slow
def test_a_search_scores_trials_on_validation_replays_them_and_marks_the_front(model_dir, tmp_path):
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    argv = [
        sys.executable, "-m", "skipdecode.search", "-m", f"checkpoint={model_dir}",
        f"cache_dir={cache}", f"hydra.sweep.dir={sweep}", "hydra.sweeper.n_trials=3",
        "quality_floor=-100", *FAST,
    ]  # fmt: skip
    env = offline_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    logged = [*argv, "wandb.enabled=true"]  # the first run logs each trial to W&B (offline)
    subprocess.run(logged, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    trials = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/trial.json"))]
    assert len(trials) == 3
    for job, trial in zip(sorted(p.parent for p in sweep.glob("*/trial.json")), trials):
        _assert_logged_to_wandb(job, trial)
    records = [json.loads(p.read_text()) for p in cache.glob("*/record.json")]
    assert records and {r["dataset"]["split"] for r in records} == {"validation"}
    before = sorted(p.name for p in cache.iterdir())
    subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    assert sorted(p.name for p in cache.iterdir()) == before  # every trial replayed from cache
    again = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/trial.json"))]
    assert [(t["speed"], t["delta"]) for t in again] == [(t["speed"], t["delta"]) for t in trials]
    paths = write_front(sweep, against=ROOT / "results" / "scitldr_randomized")
    page = paths["md"].read_text()
    assert "never the test split" in page and paths["png"].is_file()
    two = _per_schedule_summary("target_2x")
    assert "Beside the front" in page
    assert f"| target_2x | {float(two['measured_speedup_decode']):.2f}x |" in page


def test_the_front_and_the_best_schedule():
    trials = [
        {"trial": "0", "status": "ok", "speed": 1.5, "delta": -0.2, "feasible": True},
        {"trial": "1", "status": "ok", "speed": 2.0, "delta": -0.4, "feasible": True},
        {"trial": "2", "status": "ok", "speed": 1.8, "delta": -0.5, "feasible": False},
        {"trial": "3", "status": "ok", "speed": 2.5, "delta": -1.0, "feasible": False},
        {"trial": "4", "status": "invalid", "speed": 0.0, "delta": -1000.0},
    ]
    assert pareto_front(trials) == ["0", "1", "3"]  # 2 is slower and worse than 1
    assert best_trial(trials)["trial"] == "1"
    assert best_trial([t for t in trials if not t.get("feasible")]) is None
    assert best_at_speed(trials, 1.8)["trial"] == "1"  # the best quality at >= 1.8x
    assert best_at_speed(trials, 2.1)["trial"] == "3"
    assert best_at_speed(trials, 3.0) is None


def test_the_chosen_trial_travels_as_a_preset_that_builds_its_schedule(tmp_path):
    """--preset writes the chosen trial's schedule as conf/schedule/<name>.yaml; composed as a
    schedule preset it is the trial's schedule, key for key."""
    from omegaconf import OmegaConf

    schedule = {"name": "target", "target_speedup": 2.3, "warmup_layers": 2, "spread": 0.25}
    trials = [
        {"status": "ok", "speed": 2.1, "delta": -3.0, "feasible": False, "schedule": schedule,
         "metric": "rougeL_max", "quality_floor": -0.5},
        {"status": "ok", "speed": 1.6, "delta": -1.0, "feasible": False,
         "schedule": {"name": "power_law", "target_speedup": 1.7, "warmup_layers": 1},
         "metric": "rougeL_max", "quality_floor": -0.5},
    ]  # fmt: skip
    sweep = tmp_path / "sweep"
    for n, t in enumerate(trials):
        (sweep / str(n)).mkdir(parents=True)
        (sweep / str(n) / "trial.json").write_text(json.dumps(t))
    with pytest.raises(ValueError, match="no trial meets the floor; give --min-speed"):
        write_front(sweep, preset=tmp_path / "p.yaml")
    paths = write_front(sweep, min_speed=1.8, preset=tmp_path / "p.yaml")
    assert OmegaConf.to_container(OmegaConf.load(paths["preset"])) == schedule
    assert "Best quality at or above 1.8x measured: trial 0" in paths["md"].read_text()
    with pytest.raises(ValueError, match="--min-speed 3: no trial is that fast"):
        write_front(sweep, min_speed=3.0, preset=tmp_path / "q.yaml")
    assert not (tmp_path / "q.yaml").exists()


def _per_schedule_summary(schedule: str) -> dict[str, str]:
    """SciTLDR's per-schedule cells of ``schedule`` as the summary page gives them."""
    rows = csv.DictReader((ROOT / "results/scitldr_smollm2/summaries.csv").open())
    return next(r for r in rows if r["schedule"] == schedule)


def test_the_per_schedule_cells_beside_the_front_are_the_published_ones():
    """SciTLDR's per-schedule target_2x cells beside the front: their ROUGE-L max below full's
    and their measured decode speedup, as the summary page gives them (README's row)."""
    points = per_schedule_points(ROOT / "results/scitldr_randomized/one_model.csv", "rougeL_max")
    by_schedule = {p["schedule"]: p for p in points}
    assert "full" not in by_schedule
    two = _per_schedule_summary("target_2x")
    assert two["seeds"] == two["delta_seeds"] == "1 2 3"  # the same seeds: a difference of means
    delta = 100 * float(two["rougeL_max_delta"])
    assert by_schedule["target_2x"]["delta"] == pytest.approx(delta, abs=1e-9)
    assert by_schedule["target_2x"]["speed"] == pytest.approx(float(two["measured_speedup_decode"]))
