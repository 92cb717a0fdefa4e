"""Published results (``results/<name>/``) are what the aggregate code makes from the committed
records, and publishing is whole or nothing."""

from __future__ import annotations

import argparse
import copy
import functools
import json
from pathlib import Path

import pytest
from exports import compose, make_fake_sweep
from git_repo import git_in

from skipdecode.experiments.sweeps.aggregate import aggregate
from skipdecode.experiments.sweeps.audit import provenance_note
from skipdecode.experiments.sweeps.identity import (
    IDENTITY_FILE,
    cell_identity,
    identity_hash,
    without_sizes,
)
from skipdecode.experiments.sweeps.matched import format_matched, matched_rows
from skipdecode.experiments.sweeps.publish import publish, restore
from skipdecode.experiments.sweeps.samples import format_samples
from skipdecode.experiments.sweeps.seeds import summarize_seeds
from skipdecode.experiments.sweeps.table import collect, format_markdown, format_results_markdown

RESULTS = Path(__file__).resolve().parents[2] / "results"
PUBLISHED = sorted(p for p in RESULTS.glob("*") if (p / "results.md").is_file())
# the largest table (51 cells) is checked by make test-slow; the others in the default suite
LARGEST = "e2e_smollm2_gpu"


def _cases(dirs: list[Path]) -> list:
    return [
        pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name == LARGEST else [])
        for p in dirs
    ]


@pytest.mark.parametrize("published", _cases(PUBLISHED))
def test_committed_tables_are_rebuilt_from_committed_records(published):
    rows = collect(published)
    # some cells finished; a failed one (e.g. out of GPU memory) says why; a partial
    # publication lists the planned cells not run yet as pending
    assert any(r["status"] == "ok" for r in rows)
    assert all(r["status"] in ("ok", "pending") or r["error"] for r in rows)
    note = provenance_note(rows)  # names the cells whose record keeps no diff
    assert (published / "cells.md").read_text() == format_markdown(rows) + note
    results = summarize_seeds(rows)
    assert (published / "results.md").read_text() == format_results_markdown(results) + note
    assert (published / "samples.md").read_text() == format_samples(rows, results)
    matched = published / "matched.md"  # written where some method reaches a common speedup
    assert (matched.read_text() if matched.is_file() else None) == format_matched(
        matched_rows(rows)
    )


WITH_IDENTITIES = [p for p in PUBLISHED if any(p.glob(f"*/{IDENTITY_FILE}"))]


def _command_config(cell: dict) -> dict:
    """The resolved config the cell's sweep command composes today (its sweep and path settings
    left out, but for the step a cell evaluates, which is part of its identity)."""
    steps = ("sweep.eval_step=", "sweep.keep_steps=")
    overrides = [
        o
        for o in cell["overrides"]
        if o.startswith(steps) or not o.startswith(("sweep.", "paths."))
    ]
    return copy.deepcopy(_composed(tuple(overrides)))


@functools.cache
def _composed(overrides: tuple[str, ...]) -> dict:
    """Composed once per command (the identity and evaluation-id tests ask for the same cells)."""
    from skipdecode.experiments.sweeps.sweep import _resolved_without_paths_output

    return _resolved_without_paths_output(compose("sweep", list(overrides)))


@pytest.mark.parametrize("published", _cases(WITH_IDENTITIES))
def test_published_cells_are_the_cells_their_commands_train_now(published):
    """Each published cell's identity is the one its sweep command computes from today's
    configs in this checkout: a rerun after ``--restore`` reuses it instead of training again.
    Fails when a training default changed since publication (the published rows are stale)."""
    for identity_file in sorted(published.glob(f"*/{IDENTITY_FILE}")):
        cfg = _command_config(json.loads((identity_file.parent / "cell.json").read_text()))
        if not Path(cfg["dataset"].get("data_dir") or "").is_dir():
            pytest.skip(f"the data of {published.name} is not on this machine")
        ident = json.loads(identity_file.read_text())
        assert cell_identity(cfg) == (identity_hash(ident), without_sizes(ident)), identity_file


@pytest.mark.parametrize("published", _cases(WITH_IDENTITIES))
def test_published_evaluations_are_the_evaluations_their_commands_run_now(published):
    """Each published evaluation's id (``eval-<id>`` in its source) is the one its sweep
    command computes from today's configs: a rerun after ``--restore`` reuses the record.
    Fails when an evaluation default changed since publication for a schedule it affects."""
    from skipdecode.experiments.sweeps.labels import eval_id

    for cell_file in sorted(published.glob("*/cell.json")):
        cell = json.loads(cell_file.read_text())
        if cell.get("status") != "ok" or "/eval-" not in str(cell.get("source")):
            continue
        cfg = _command_config(cell)
        published_id = str(cell["source"]).rsplit("/eval-", 1)[1]
        assert eval_id(cfg) == published_id, (
            cell_file
        )  # with the schedule evaluated, if not trained


def test_publish_copies_records_and_rebuilds_the_tables(tmp_path):
    sweep = make_fake_sweep(tmp_path / "sweep")
    aggregate(sweep, plots=False)
    out = publish(sweep, tmp_path / "results" / "fake", aggregate)
    assert [r["status"] for r in collect(out)] == [r["status"] for r in collect(sweep)]
    for table in ("results.md", "cells.md", "results.csv"):
        assert (out / table).read_text() == (sweep / table).read_text(), table
    assert (out / "0" / "record.json").is_file() and (out / "0" / "generations.jsonl.gz").is_file()
    samples = (out / "samples.md").read_text()  # input, references, each schedule's output
    assert "name[Aromi]" in samples and "- Aromi is a pub." in samples
    assert all(f"| {s} |" in samples for s in ("full", "target_2x", "target_4x"))
    assert not any("cell_dir" in p.read_text() for p in out.glob("*/cell.json"))
    publish(sweep, out, aggregate)  # publishing again replaces the directory whole
    assert not list((tmp_path / "results").glob(".fake.*"))  # no staging left behind


def test_publish_refuses_an_empty_sweep_and_leaves_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="nothing to publish"):
        publish(tmp_path / "empty", tmp_path / "results" / "x", aggregate)
    assert not (tmp_path / "results" / "x").exists()


def test_publish_merges_several_sweeps_and_restores_their_records(tmp_path):
    first = make_fake_sweep(tmp_path / "curve")
    second = make_fake_sweep(tmp_path / "seeds")
    out = publish([first, second], tmp_path / "results" / "both", aggregate)
    jobs = {r["job"]: r["status"] for r in collect(out)}
    # every job of both sweeps, named by its sweep; the planned-but-never-started ones too
    assert jobs == {
        **{f"curve-{k}": v for k, v in ((r["job"], r["status"]) for r in collect(first))},
        **{f"seeds-{k}": v for k, v in ((r["job"], r["status"]) for r in collect(second))},
    }
    assert "pending" in jobs.values()
    cells = tmp_path / "cells"
    written = restore(out, cells)
    # fake cells have no cells directory to return to, so nothing is restored from them
    assert written == []
    cell_file = out / "curve-0" / "cell.json"
    cell = json.loads(cell_file.read_text())
    cell["source"] = "tiny__synthetic__full__id0/eval-1234"
    cell_file.write_text(json.dumps(cell))
    (written_record,) = restore(out, cells)
    assert written_record == cells / "tiny__synthetic__full__id0" / "eval-1234" / "record.json"
    assert written_record.read_text() == (out / "curve-0" / "record.json").read_text()
    assert (written_record.parent / "generations.jsonl").is_file()
    with pytest.raises(FileNotFoundError, match="do not exist"):
        restore(tmp_path / "nowhere", cells)


def test_publish_keeps_the_validation_loss_curve(tmp_path):
    from skipdecode.experiments.sweeps.publish import VAL_CURVE, _copy_val_curve

    csv_dir = tmp_path / "cell" / "train" / "csv"
    csv_dir.mkdir(parents=True)
    (csv_dir / "metrics.csv").write_text(
        "epoch,step,train/loss,val/loss,val_start/loss\n"
        "0,0,,,2.5\n"
        "0,9,1.9,,\n"
        "0,9,,1.75,\n"
        "0,19,,1.5,\n"
    )
    job = tmp_path / "job"
    job.mkdir()
    _copy_val_curve({"cell_dir": str(tmp_path / "cell")}, job)
    assert (job / VAL_CURVE).read_text() == "step,val_loss\n0,2.5\n10,1.75\n20,1.5\n"
    other = tmp_path / "other"
    other.mkdir()
    _copy_val_curve({"cell_dir": str(tmp_path / "no-such-cell")}, other)  # no CSV logger: none
    assert not (other / VAL_CURVE).exists()


def test_a_restored_cell_republishes_with_its_curve_and_training_time(tmp_path):
    """A cell reused after ``--restore`` is not trained again, so nothing on this machine can
    measure its validation curve or training time: restore puts the published ones in its folder
    (never over the cell's own) and the next publication carries them on unchanged."""
    from skipdecode.experiments.sweeps.publish import VAL_CURVE
    from skipdecode.experiments.sweeps.table import TRAIN_DONE

    sweep = make_fake_sweep(tmp_path / "sweep")
    cell_dir = tmp_path / "checkout_a" / "cells" / "tiny__synthetic__full__id0"
    (cell_dir / "train" / "csv").mkdir(parents=True)
    (cell_dir / "train" / "csv" / "metrics.csv").write_text(
        "epoch,step,val/loss,val_start/loss\n0,0,,2.5\n0,9,1.75,\n"
    )
    (cell_dir / TRAIN_DONE).write_text(json.dumps({"status": "ok", "seconds": 123.0}))
    cell_file = sweep / "0" / "cell.json"
    cell = json.loads(cell_file.read_text())
    cell.update(cell_dir=str(cell_dir), train_seconds=123.0)
    cell_file.write_text(json.dumps(cell))
    first = publish(sweep, tmp_path / "results" / "first", aggregate)
    curve = (first / "0" / VAL_CURVE).read_text()
    assert curve == "step,val_loss\n0,2.5\n10,1.75\n"

    cells_b = tmp_path / "checkout_b" / "cells"
    (written,) = restore(first, cells_b)
    restored_dir = written.parents[1]
    assert (restored_dir / VAL_CURVE).read_text() == curve
    summary = json.loads((restored_dir / TRAIN_DONE).read_text())
    assert summary == {"status": "restored", "seconds": 123.0}  # never "ok": no model here

    # a rerun in checkout B reuses the evaluation; its cell.json has no training time of its own
    rerun = make_fake_sweep(tmp_path / "rerun")
    cell = json.loads((rerun / "0" / "cell.json").read_text())
    cell.update(cell_dir=str(restored_dir), record=str(written), train_seconds=None)
    (rerun / "0" / "cell.json").write_text(json.dumps(cell))
    second = publish(rerun, tmp_path / "results" / "second", aggregate)
    assert (second / "0" / VAL_CURVE).read_text() == curve
    assert json.loads((second / "0" / "cell.json").read_text())["train_seconds"] == 123.0

    # restoring again completes a folder that lost its evidence, writes no record twice, and
    # never overwrites what a cell trained here wrote
    (restored_dir / VAL_CURVE).unlink()
    (restored_dir / TRAIN_DONE).write_text(json.dumps({"status": "ok", "seconds": 7.0}))
    assert restore(first, cells_b) == []
    assert (restored_dir / VAL_CURVE).read_text() == curve
    assert json.loads((restored_dir / TRAIN_DONE).read_text())["seconds"] == 7.0


def test_publish_update_keeps_published_cells_a_rerun_did_not_improve(tmp_path):
    """A rerun that retries failed cells (numbered in another order, cut short) adds what it
    finished and loses nothing: cells match by what they are, not by their job number."""
    sweep = make_fake_sweep(tmp_path / "sweep")
    out = publish(sweep, tmp_path / "results" / "fake", aggregate)
    before = {r["schedule"]: r["status"] for r in collect(out)}
    assert before["skipdecode_2x_24l"] == "failed" and before["full"] == "ok"
    rerun = tmp_path / "rerun"

    def job(num, source, **change):
        (rerun / str(num)).mkdir(parents=True)
        cell = json.loads((sweep / str(source) / "cell.json").read_text()) | change
        (rerun / str(num) / "cell.json").write_text(json.dumps(cell))

    # the failed cell now finished (with target_4x's record), full failed this time, target_4x
    # was interrupted, and a cell never published before finished
    job(0, 3, status="ok", record=str(sweep / "cells" / "target_4x" / "eval" / "record.json"))
    job(1, 0, status="failed", error="OutOfMemoryError: CUDA out of memory", record=None)
    job(2, 2, status="running")
    job(3, 1, schedule="target_3x", cell_id="id9")
    out = publish(rerun, out, aggregate, update=True)
    after = {r["schedule"]: (r["status"], r["job"]) for r in collect(out)}
    assert after["skipdecode_2x_24l"] == ("ok", "3")  # replaced, under its published number
    assert after["full"] == ("ok", "0")  # the published finished cell stays
    assert after["target_4x"] == ("ok", "2")
    assert after["target_3x"] == ("ok", "5")  # new: numbered after the published jobs
    assert after["target_5x"] == ("interrupted", "4")  # interrupted again: replaces nothing
    assert (out / "3" / "record.json").is_file()

    # a later rerun that only found full's published evaluation again (same record bytes, a
    # cell.json saying "reused" at another time) leaves the published account as it was
    published_cell = (out / "0" / "cell.json").read_bytes()
    again = tmp_path / "again"
    (again / "0").mkdir(parents=True)
    cell = json.loads((sweep / "0" / "cell.json").read_text())
    cell.update(started="2099-01-01T00:00:00", train_reused=True, eval_reused=True)
    (again / "0" / "cell.json").write_text(json.dumps(cell))
    out = publish(again, out, aggregate, update=True)
    assert (out / "0" / "cell.json").read_bytes() == published_cell


def test_publish_update_replaces_the_job_of_the_same_steps_and_training(tmp_path):
    """Jobs alike in model, dataset, schedule and seed (a budget study's checkpoints of one
    training, recipes trained otherwise) are told apart by their steps and their training
    config; a new cell that could replace several of them is refused, never matched by chance."""
    from skipdecode.experiments.sweeps.publish import PublishError

    sweep = make_fake_sweep(tmp_path / "sweep")

    def cell_of(folder: Path, num: int, **change) -> dict:
        f = folder / str(num) / "cell.json"
        cell = json.loads(f.read_text()) | change
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(cell))
        return cell

    # full after 120 and 240 steps of one training (id0); full from two other recipes
    cell_of(sweep, 0, train_steps=120)
    cell_of(sweep, 1, schedule="full", train_steps=240, cell_id="id0")
    cell_of(sweep, 2, schedule="full", cell_id="id7")
    cell_of(sweep, 3, schedule="full", status="ok", record=cell_of(sweep, 2)["record"])
    out = publish(sweep, tmp_path / "results" / "fake", aggregate)
    before = {n: (out / n / "record.json").read_bytes() for n in "0123"}

    rerun = tmp_path / "rerun"
    records = {n: json.loads((sweep / n / "cell.json").read_text())["record"] for n in "012"}
    for num, (source, record) in enumerate([("1", records["0"]), ("2", records["1"])]):
        (rerun / str(num)).mkdir(parents=True)
        cell = json.loads((sweep / source / "cell.json").read_text()) | {"record": record}
        (rerun / str(num) / "cell.json").write_text(json.dumps(cell))
    out = publish(rerun, out, aggregate, update=True)
    after = {n: (out / n / "record.json").read_bytes() for n in "0123"}
    assert after["1"] == Path(records["0"]).read_bytes() != before["1"]  # step 240's job
    assert after["2"] == Path(records["1"]).read_bytes() != before["2"]  # id7's job
    assert after["0"] == before["0"] and after["3"] == before["3"]  # step 120's, id3's

    (rerun / "1").rename(tmp_path / "kept")
    cell_of(rerun, 0, train_steps=None, cell_id="id8")  # full, a third recipe: which twin?
    with pytest.raises(PublishError, match=r"published jobs 2, 3 .* none of them"):
        publish(rerun, out, aggregate, update=True)
    assert {n: (out / n / "record.json").read_bytes() for n in "0123"} == after


def test_publish_update_tells_two_evaluations_of_one_training_apart_by_their_folder(tmp_path):
    """Two published jobs of one training and schedule, evaluated otherwise (two evaluation
    folders): a new cell replaces the one of its own evaluation folder; an interrupted job's
    waiting account (machine-local paths) is not published."""
    sweep = make_fake_sweep(tmp_path / "sweep")
    for num in (0, 1):
        f = sweep / str(num) / "cell.json"
        cell = json.loads(f.read_text()) | {"schedule": "full", "cell_id": "id0"}
        f.write_text(json.dumps(cell | {"cell_dir": str(tmp_path / "cells" / "tiny__id0")}))
    running = sweep / "4" / "cell.json"
    waiting = {"status": "ok", "cell_dir": "/machine/cells/x", "record": "/machine/r.json"}
    running.write_text(json.dumps(json.loads(running.read_text()) | {"earlier": waiting}))
    out = publish(sweep, tmp_path / "results" / "fake", aggregate)
    assert "earlier" not in json.loads((out / "4" / "cell.json").read_text())
    sources = [json.loads((out / n / "cell.json").read_text())["source"] for n in "01"]
    assert sources == ["tiny__id0/eval", "tiny__id0/eval"]  # the fake sweep's folder names
    for n, folder in (("0", "eval-aaaa"), ("1", "eval-bbbb")):
        f = out / n / "cell.json"
        f.write_text(json.dumps(json.loads(f.read_text()) | {"source": f"tiny__id0/{folder}"}))
    before = {n: (out / n / "record.json").read_bytes() for n in "01"}
    record = tmp_path / "again" / "eval-aaaa" / "record.json"
    record.parent.mkdir(parents=True)
    record.write_text((sweep / "cells" / "target_4x" / "eval" / "record.json").read_text())
    rerun = tmp_path / "rerun" / "0" / "cell.json"
    rerun.parent.mkdir(parents=True)
    rerun.write_text(
        json.dumps(json.loads((sweep / "0" / "cell.json").read_text()) | {"record": str(record)})
    )
    out = publish(tmp_path / "rerun", out, aggregate, update=True)
    assert (out / "0" / "record.json").read_bytes() == record.read_bytes() != before["0"]
    assert (out / "1" / "record.json").read_bytes() == before["1"]


def test_publishing_refuses_a_record_another_run_wrote_after_the_job(tmp_path):
    """A cell evaluated again by another sweep (the same cell folder) leaves the first job's
    cell.json naming a record it did not write: its times and overrides describe a run whose
    record is gone, so publishing that job is refused; a reused evaluation is not checked."""
    from datetime import datetime, timezone

    from skipdecode.experiments.sweeps.publish import PublishError

    sweep = make_fake_sweep(tmp_path / "sweep")
    cell_file = sweep / "1" / "cell.json"
    cell = json.loads(cell_file.read_text())
    record = Path(cell["record"])
    data = json.loads(record.read_text())

    def local(utc: str) -> str:  # the cell's times are the machine's local time
        at = datetime.fromisoformat(utc).replace(tzinfo=timezone.utc).astimezone()
        return at.replace(tzinfo=None).isoformat(timespec="seconds")

    cell |= {"started": local("2026-11-24T22:43:11"), "finished": local("2026-11-24T23:34:33")}
    cell_file.write_text(json.dumps(cell))
    for written, refused in (("2026-11-24T23:34:30Z", False), ("2026-11-24T23:58:44Z", True)):
        data["provenance"]["timestamp_utc"] = written
        record.write_text(json.dumps(data))
        target = tmp_path / "results" / ("refused" if refused else "inside")
        if refused:
            with pytest.raises(PublishError, match=r"1 cell\(s\) \(sweep/1\) name records"):
                publish(sweep, target, aggregate)
            assert not target.exists()
        else:
            publish(sweep, target, aggregate)
    cell_file.write_text(json.dumps(cell | {"eval_reused": True}))  # found, not written, here
    publish(sweep, tmp_path / "results" / "reused", aggregate)


def test_publishing_refuses_cells_from_a_dirty_checkout_unless_allowed(tmp_path):
    from skipdecode.experiments.sweeps.publish import RESTORED, PublishError

    sweep = make_fake_sweep(tmp_path / "sweep")
    record = Path(json.loads((sweep / "1" / "cell.json").read_text())["record"])
    data = json.loads(record.read_text())
    data["provenance"]["git"] |= {"dirty": True, "diff": "+x = 1\n", "diff_sha256": "ab"}
    record.write_text(json.dumps(data))
    target = tmp_path / "results" / "fake"
    with pytest.raises(PublishError, match=r"1 cell\(s\) .*sweep/1.*--allow-dirty"):
        publish(sweep, target, aggregate)
    assert not target.exists() and not list(target.parent.glob(".fake.*"))  # nothing half-made
    out = publish(sweep, target, aggregate, allow_dirty=True)
    kept = json.loads((out / "1" / "record.json").read_text())["provenance"]["git"]
    assert kept["diff"] == "+x = 1\n"  # the published record says what the run had
    (record.parent / RESTORED).write_text("{}")  # put back from a publication: not news
    publish(sweep, target, aggregate)


def test_publishing_refuses_cells_timed_on_a_busy_machine_unless_allowed(tmp_path):
    from skipdecode.experiments.sweeps.publish import PublishError

    sweep = make_fake_sweep(tmp_path / "sweep")
    record = Path(json.loads((sweep / "1" / "cell.json").read_text())["record"])
    data = json.loads(record.read_text())
    data["speed"]["load"] = {"measured": True, "other_share": 0.6, "own_share": 0.4}
    record.write_text(json.dumps(data))
    target = tmp_path / "results" / "fake"
    with pytest.raises(PublishError, match=r"1 cell\(s\) .*sweep/1.*more than 25%.*--allow-busy"):
        publish(sweep, target, aggregate)
    assert not target.exists()
    out = publish(sweep, target, aggregate, allow_busy=True)
    assert (
        json.loads((out / "1" / "record.json").read_text())["speed"]["load"]["other_share"] == 0.6
    )
    data["speed"]["load"]["other_share"] = 0.1  # a quiet machine: published as it is
    record.write_text(json.dumps(data))
    publish(sweep, tmp_path / "results" / "quiet", aggregate)


def test_publishing_refuses_a_dirty_record_without_its_diff_even_when_allowed(tmp_path):
    from skipdecode.experiments.sweeps.publish import PublishError

    sweep = make_fake_sweep(tmp_path / "sweep")
    record = Path(json.loads((sweep / "2" / "cell.json").read_text())["record"])
    data = json.loads(record.read_text())
    data["provenance"]["git"] |= {"dirty": True, "diff": None, "diff_sha256": "ab"}  # too large
    record.write_text(json.dumps(data))
    target = tmp_path / "results" / "fake"
    with pytest.raises(PublishError, match=r"1 cell\(s\) \(sweep/2\) .*hold no diff.*commit"):
        publish(sweep, target, aggregate, allow_dirty=True)
    assert not target.exists() and not list(target.parent.glob(".fake.*"))


def test_benchmarks_refuse_up_front_a_checkout_whose_diff_a_record_cannot_hold(monkeypatch, capsys):
    from skipdecode.experiments.benchmarks import bench_tables

    too_large = {"git": {"dirty": True, "diff": None, "root": "/repo", "diff_sha256": "ab"}}
    monkeypatch.setattr(bench_tables, "provenance", lambda: too_large)
    parser = argparse.ArgumentParser(prog="skipdecode-bench")
    with pytest.raises(SystemExit):
        bench_tables.started_provenance(parser)
    assert "uncommitted changes whose diff is larger than" in capsys.readouterr().err
    kept = {"git": {"dirty": True, "diff": "+x\n"}}
    monkeypatch.setattr(bench_tables, "provenance", lambda: kept)
    assert bench_tables.started_provenance(parser) is kept


def test_the_cell_table_ends_with_what_its_trainings_and_evaluations_took():
    """Each training counted once (cells evaluated from one trained model share its cell id),
    minutes under two hours, hours from two; no line where no cell keeps a time."""

    def row(job, cell_id, train, evaluation):
        return {"job": job, "cell_id": cell_id, "train_seconds": train, "eval_seconds": evaluation}

    shared = [row("0", "a", 3600.0, 60.0), row("1", "a", 3600.0, 90.0)]
    assert format_markdown(shared).endswith(
        "\n\nIts 1 training took 60 min and its 2 evaluations 2 min.\n"
    )
    apart = [*shared, row("2", "b", 3600.0, None), row("3", None, None, None)]
    assert format_markdown(apart).endswith(
        "\n\nIts 2 trainings took 2.0 h and its 2 evaluations 0.0 h.\n"
    )
    untimed = format_markdown([row("0", "a", None, None)])
    assert "Its " not in untimed and untimed.endswith("|\n")


def test_the_committed_provenance_page_is_up_to_date():
    from skipdecode.experiments.sweeps.audit import main as audit

    assert audit([str(RESULTS), "--check"]) == 0


def test_provenance_keeps_the_diff_of_a_dirty_checkout(tmp_path):
    from skipdecode.provenance import provenance

    repo = tmp_path / "repo"
    repo.mkdir()
    git = git_in(repo, home=tmp_path)
    git("init", "-q")
    (repo / "f.py").write_text("x = 1\n")
    git("add", "f.py")
    git("commit", "-qm", "c")
    assert "diff" not in provenance(repo)["git"]
    (repo / "f.py").write_text("x = 2\n")
    info = provenance(repo)["git"]
    assert info["dirty"] and "+x = 2" in info["diff"] and len(info["diff_sha256"]) == 64


def test_the_page_of_a_record_without_its_diff_is_marked_once(tmp_path):
    import json

    from skipdecode.experiments.sweeps.audit import mark_pages

    def record(name, git):
        (tmp_path / f"{name}.json").write_text(json.dumps({"provenance": {"git": git}}))
        (tmp_path / f"{name}.md").write_text("| a |\n|---|\n| 1 |\n")

    record("lost", {"commit": "0123456789abcdef", "dirty": True})
    record("kept", {"commit": "0123456789abcdef", "dirty": True, "diff": "+x = 2"})
    record("clean", {"commit": "0123456789abcdef", "dirty": False})
    assert mark_pages(tmp_path) == [tmp_path / "lost.md"]
    lost = (tmp_path / "lost.md").read_text()
    assert lost.startswith("> **Provenance:** written from commit 0123456789ab with uncommitted")
    assert lost.endswith("\n\n| a |\n|---|\n| 1 |\n")
    assert mark_pages(tmp_path) == [] and (tmp_path / "lost.md").read_text() == lost
    for name in ("kept", "clean"):
        assert (tmp_path / f"{name}.md").read_text() == "| a |\n|---|\n| 1 |\n"


def test_the_provenance_page_sorts_records_by_what_their_diff_holds(tmp_path):
    import json

    from skipdecode.experiments.sweeps.audit import audit_page

    def write(rel, data):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))

    git = {"commit": "0123456789abcdef", "dirty": True}
    write("a/clean.json", {"provenance": {"git": {**git, "dirty": False}}})
    write("a/whole.json", {"provenance": {"git": {**git, "diff": "+x", "diff_scope": "tracked"}}})
    write("a/tracked.json", {"provenance": {"git": {**git, "diff": "+x"}}})
    write("a/lost.json", {"provenance": {"git": git}})
    write("training/run/metrics.json", {"metrics": {}, "memory_plan": {}})
    page = audit_page(tmp_path)
    assert "| a | 1 | 1 | 1 | 1 | 0 |" in page
    lacks = page.split("## Records whose diff lacks the files the run added (1)")[1]
    assert lacks.split("##")[0].strip() == "- `a/tracked.json` (commit 0123456789ab)"
    assert "## Records without their diff (1)\n\n- `a/lost.json`" in page
    training = page.split("## Training records without provenance (1)")[1].split("##")[0]
    assert training.rstrip().endswith("- `training/run/metrics.json`")
    assert "## Records from commits outside the history (0)" in page  # no repository here
    assert page.rstrip().endswith("None.")  # every speedup recomputes from raw timings


def test_the_provenance_page_lists_the_speedups_that_do_not_recompute_from_raw_timings(tmp_path):
    """An evaluation that publishes a speedup over another schedule without its raw timings, and
    a benchmark variant timed without its repeats' seconds, are listed; a record that keeps them,
    or whose baseline is itself, is not."""
    import json

    from skipdecode.experiments.sweeps.audit import audit_page

    def write(rel, data):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**data, "provenance": {"device": {"cpu": "a CPU"}}}))

    write("f/1/record.json", {"speed": {"measured_speedup_decode": 2.0}})
    write("f/2/record.json", {"speed": {"measured_speedup_decode": 2.0, "raw": {"batches": []}}})
    own = {"measured_speedup_decode": 1.0, "baseline": {"schedule": "self"}}
    write("f/3/record.json", {"speed": own})
    variants = {"full": {"decode_ms_per_step": 3.0}, "2x": {"decode_ms_per_step": 2.0, "raw": {}}}
    write("bench/decode-x.json", {"cells": [{"variants": variants}]})
    write("bench/decode-y.json", {"cells": [{"variants": {"full": variants["2x"]}}]})
    section = audit_page(tmp_path).split("## Records whose speedups do not recompute")[1]
    assert section.startswith(" from raw timings (2)")
    listed = [line for line in section.splitlines() if line.startswith("- ")]
    assert listed == [
        "- `f/1/record.json`",
        "- `bench/decode-x.json` (1 variant; a CPU (instruction set not recorded; generation not recorded))",
    ]


def test_the_provenance_page_counts_each_folders_records_per_machine(tmp_path):
    """Two CPUs of one name with other kernels or generations are two machines; a GPU record
    is its GPU's; a record older than a field says it is not recorded."""
    import json

    from skipdecode.experiments.sweeps.audit import audit_page

    milan = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "cpu_generation": "family 25 model 1"}
    genoa = {**milan, "cpu_capability": "AVX512", "cpu_generation": "family 25 model 17"}
    h100 = {"cpu": "AMD EPYC", "cuda_devices": [{"name": "NVIDIA H100"}]}
    for rel, device in [("f/1", genoa), ("f/2", genoa), ("f/3", milan), ("f/4", {"cpu": "AMD EPYC"}),
                        ("g/1", h100)]:  # fmt: skip
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "record.json").write_text(json.dumps({"provenance": {"device": device}}))
    section = audit_page(tmp_path).split("## Machines of each folder's records")[1]
    rows = [line for line in section.split("##")[0].splitlines() if line.startswith("| f |") or
            line.startswith("| g |")]  # fmt: skip
    assert rows == [
        "| f | AMD EPYC (AVX2; family 25 model 1) | 1 |",
        "| f | AMD EPYC (AVX512; family 25 model 17) | 2 |",
        "| f | AMD EPYC (instruction set not recorded; generation not recorded) | 1 |",
        "| g | NVIDIA H100 | 1 |",
    ]


def test_the_provenance_page_counts_the_code_versions_of_each_folders_clean_records(tmp_path):
    """Commits that change only docs or results are one code version; a change under src is
    another; outside a repository the version is unknown."""
    import json
    import shutil

    from skipdecode.experiments.sweeps.audit import audit_page

    git = git_in(tmp_path, home=tmp_path / "home")
    git("init", "-q")
    commits = []
    for rel, text in [("src/m.py", "x = 1"), ("docs/d.md", "new words"), ("src/m.py", "x = 2")]:
        for path, body in {"conf/c.yaml": "a: 1", "pyproject.toml": "[project]", rel: text}.items():
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(body + "\n")
        git("add", "-A")
        git("commit", "-qm", rel)
        commits.append(git("rev-parse", "HEAD"))
    results = tmp_path / "results"
    for rel, commit, dirty in [
        ("f/1.json", commits[0], False),
        ("f/2.json", commits[1], False),  # docs only since commits[0]: the same code
        ("f/3.json", commits[2], False),
        ("f/4.json", commits[2], True),  # not clean: not counted
        ("g/1.json", commits[1], False),
    ]:
        (results / rel).parent.mkdir(parents=True, exist_ok=True)
        prov = {"git": {"commit": commit, "dirty": dirty, "diff": "+x", "diff_scope": "all"}}
        (results / rel).write_text(json.dumps({"provenance": prov}))
    page = audit_page(results)
    section = page.split("## Code versions of each folder's clean records")[1].split("##")[0]
    assert "| f | 3 | 3 | 2 |" in section and "| g | 1 | 1 | 1 |" in section
    shutil.rmtree(tmp_path / ".git")
    assert "| f | 3 | 3 | unknown |" in audit_page(results)


@pytest.mark.parametrize("tokenizer", ["here", "absent"])
def test_make_docs_rewrites_a_published_folder_byte_for_byte(tmp_path, monkeypatch, tokenizer):
    """``make docs`` (experiments.pages) on a copy of a SmolLM2 folder whose job 0 predates
    records that count their outputs' tokens: its tables, reach page and the provenance page
    come out as committed (a clean clone stays clean), with or without the model's tokenizer on
    the machine (that cell's output counts are kept beside it)."""
    import shutil

    from skipdecode.experiments.sweeps import cell_outputs
    from skipdecode.experiments.sweeps.pages import write_pages

    if tokenizer == "absent":
        monkeypatch.setattr(cell_outputs, "_tokenizer", lambda key: None)

    folder = tmp_path / "results" / "e2e_smollm2_fit"
    shutil.copytree(RESULTS / "e2e_smollm2_fit", folder)
    assert (folder / "0" / cell_outputs.RECOUNT_FILE).is_file()
    done = write_pages(tmp_path / "results", only=("tables", "summaries", "reach"))
    assert done[0].startswith("e2e_smollm2_fit: tables, summaries: no summarization cells, reach")
    for name in ("results.md", "results.csv", "cells.md", "samples.md", "matched.md", "reach.md"):
        expected = (RESULTS / "e2e_smollm2_fit" / name).read_bytes()
        assert (folder / name).read_bytes() == expected, name
    page = (tmp_path / "results" / "PROVENANCE.md").read_text()
    assert "| e2e_smollm2_fit | 4 | 0 | 0 | 0 | 0 |" in page
