"""Run a study by name: compose ``studies/conf/<name>.yaml`` with Hydra and carry out its steps.

A study is a list of steps, each one of:

- ``train``: fine-tune one model (``python -m skipdecode.train``) into ``<run>/train``, kept when
  its export exists: ``{run, schedule, experiment: e2e_smollm2, seed, overrides: [...]}``;
- ``run``: any entry point, ``python -m <module> <args...>`` (a list, first the module), or
  ``{argv: [...], creates: PATH, only_if: PATH}``: skipped when ``creates`` exists or
  ``only_if`` does not;
- ``keep_training``: copy a training run's record (metrics, run info, resolved config) beside a
  result: ``{run, to}``;
- ``keep_record``: copy an evaluation's ``record.json`` and its generations (gzipped) into a
  results folder: ``{run, to}``;
- ``require``: stop with ``hint`` unless ``path`` exists (checked before any step runs);
- ``study``: another study with overrides, ``{name, overrides: [...], creates: PATH}``.

A step may repeat over values: ``foreach: {b: [6, 8]}`` runs it once per value, with ``{b}``
replaced in its strings. Settings the study declares (``seed``, ``variant``, ...) are Hydra
overrides on the command line: ``python -m studies speculative_b10_variant variant=240steps
'train_overrides=[trainer.max_steps=240]'``. ``--dry-run`` prints the commands instead.
"""

from __future__ import annotations

import gzip
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from itertools import product
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from skipdecode.experiments.sweeps.sources import pack_folder
from skipdecode.io import write_bytes_atomic

ROOT = Path(__file__).resolve().parents[1]
CONF = Path(__file__).resolve().parent / "conf"
#: Files of a training run kept beside a result that used its model.
TRAINING_RECORD = ("csv/metrics.csv", "run_info.json", "config_resolved.yaml")
STEP_KINDS = ("train", "run", "keep_training", "keep_record", "require", "study")
#: Each kind's settings (a mapping): (required, optional). ``run`` may be a list instead.
STEP_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "train": ({"run"}, {"experiment", "schedule", "seed", "overrides"}),
    "run": ({"argv"}, {"creates", "only_if"}),
    "keep_training": ({"run", "to"}, {"extra"}),
    "keep_record": ({"run", "to"}, set()),
    "require": ({"path", "hint"}, set()),
    "study": ({"name"}, {"overrides", "creates"}),
}

__all__ = ["StudyError", "compose_study", "describe", "study_names", "steps", "run_study"]


class StudyError(RuntimeError):
    """A study that cannot run as asked."""


def _shape_prefix(warmup: Any) -> str:
    """A draft run's shape in its names: empty for speculative_b10's own warm-up of 1."""
    return "" if int(warmup) == 1 else f"warmup-{int(warmup)}-"


def _warmup_overrides(warmup: Any) -> list[str]:
    """The training overrides of a draft with ``warmup`` bottom layers (none for 1)."""
    return [] if int(warmup) == 1 else [f"schedule.draft.warmup_layers={int(warmup)}"]


OmegaConf.register_new_resolver("shape_prefix", _shape_prefix, replace=True)
OmegaConf.register_new_resolver("warmup_overrides", _warmup_overrides, replace=True)


def study_names() -> list[str]:
    """Every study (a config under ``studies/conf/`` that is not a shared group)."""
    return sorted(p.stem for p in CONF.glob("*.yaml"))


def compose_study(name: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The study's config, composed by Hydra with ``overrides`` and resolved."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    if name not in study_names():
        raise StudyError(f"study NAME={name!r} is not known; allowed: {', '.join(study_names())}")
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose(config_name=name, overrides=list(overrides))
        missing = [k for k in cfg if OmegaConf.is_missing(cfg, k)]
        if missing:
            raise StudyError(
                f"study {name!r} needs the setting(s) {', '.join(missing)}: give them as "
                f'overrides, e.g. `make study NAME={name} ARGS="{missing[0]}=..."` '
                f"({describe(name)})"
            )
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as e:
        raise StudyError(f"study {name!r}: {e}") from e


def describe(name: str) -> str:
    """A study's description, read without composing it."""
    return str(OmegaConf.load(CONF / f"{name}.yaml").get("description", ""))


def _fill(value: Any, names: Mapping[str, Any]) -> Any:
    """``value`` with ``{name}`` replaced by ``names[name]`` in every string."""
    if isinstance(value, str):
        return re.sub(r"\{(\w+)\}", lambda m: str(names.get(m.group(1), m.group(0))), value)
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


def steps(cfg: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """``(kind, settings)`` of every step, each ``foreach`` repeated over its values."""
    for i, step in enumerate(cfg.get("steps") or []):
        kinds = [k for k in step if k in STEP_KINDS]
        if len(kinds) != 1 or set(step) - {*STEP_KINDS, "foreach"}:
            raise StudyError(
                f"step {i} {step!r}: give exactly one of {', '.join(STEP_KINDS)} (and optionally "
                "foreach)"
            )
        _check_keys(i, kinds[0], step[kinds[0]])
        loops = step.get("foreach") or {}
        for values in product(*loops.values()):
            names = dict(zip(loops, values, strict=True))
            yield kinds[0], _fill(step[kinds[0]], names)


def _check_keys(i: int, kind: str, settings: Any) -> None:
    """A step's settings hold every key its kind needs and none it does not read (a misspelt
    ``experiments:`` would otherwise train the default experiment)."""
    if kind == "run" and isinstance(settings, (list, tuple)):
        return
    required, optional = STEP_KEYS[kind]
    given = set(settings) if isinstance(settings, Mapping) else set()
    missing, unknown = sorted(required - given), sorted(given - required - optional)
    if not isinstance(settings, Mapping) or missing or unknown:
        raise StudyError(
            f"step {i} {kind}: {settings!r}"
            + (f" lacks {', '.join(missing)}" if missing else "")
            + (f" has {', '.join(unknown)}, which it does not read" if unknown else "")
            + f"; a {kind} step takes {', '.join(sorted(required))} (required)"
            + (f" and {', '.join(sorted(optional))}" if optional else "")
        )


def _flat(args: Sequence[Any]) -> Iterator[str]:
    """Arguments as strings, a shared protocol's list (``${shared.draft_bench}``) spliced in."""
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield str(a)


def _python(module: str, args: Sequence[Any]) -> list[str]:
    return [sys.executable, "-m", module, *_flat(args)]


def _commands(kind: str, s: Any, cfg: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """What one step does: ``("exec", argv)``, ``("copy", (files, dir))``, ``("skip", why)``
    or ``("study", (name, overrides))``."""
    if kind == "train":
        run = Path(s["run"])
        export = run / "train" / "export" / "skipdecode.json"
        if (ROOT / export).is_file():
            return [("skip", f"{export} exists: its model is kept")]
        args = [
            f"experiment={s.get('experiment', 'e2e_smollm2')}",
            *([f"schedule={s['schedule']}"] if s.get("schedule") else []),
            f"seed={s.get('seed', cfg.get('seed', 1))}",
            f"hydra.run.dir={run / 'train'}",
            *s.get("overrides", []),
        ]
        return [("exec", _python("skipdecode.train", args))]
    if kind == "run":
        argv = s["argv"] if isinstance(s, dict) else s
        if isinstance(s, dict) and s.get("creates") and (ROOT / s["creates"]).exists():
            return [("skip", f"{s['creates']} exists")]
        if isinstance(s, dict) and s.get("only_if") and not (ROOT / s["only_if"]).exists():
            return [("skip", f"{s['only_if']} does not exist")]
        return [("exec", _python(str(argv[0]), argv[1:]))]
    if kind == "keep_training":
        files = [Path(s["run"]) / "train" / f for f in TRAINING_RECORD]
        return [("copy", ([*files, *map(Path, s.get("extra", []))], Path(s["to"])))]
    if kind == "keep_record":
        return [("record", (Path(s["run"]), Path(s["to"])))]
    if kind == "study":
        if s.get("creates") and (ROOT / s["creates"]).exists():
            return [("skip", f"{s['creates']} exists")]
        return [("study", (s["name"], list(s.get("overrides", []))))]
    return []  # require: checked up front


def run_study(name: str, overrides: Sequence[str] = (), dry_run: bool = False) -> list[str]:
    """Carry out (or with ``dry_run`` only list) the study's steps; returns the lines printed."""
    cfg = compose_study(name, overrides)
    planned = list(steps(cfg))
    missing = [s for kind, s in planned if kind == "require" and not (ROOT / s["path"]).exists()]
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    say(f"# study {name}: {cfg.get('description', '')}")
    for s in missing:
        say(f"# needs {s['path']}: {s['hint']}")
    if missing and not dry_run:
        raise StudyError(
            f"study {name!r}: " + "; ".join(f"{s['path']} is missing: {s['hint']}" for s in missing)
        )
    for kind, s in planned:
        for what, detail in _commands(kind, s, cfg):
            if what == "skip":
                say(f"# skip: {detail}")
            elif what == "exec":
                say(shlex.join(["python", *detail[1:]]))
                if not dry_run:
                    done = subprocess.run(detail, cwd=ROOT, check=False)
                    if done.returncode:
                        raise StudyError(f"study {name!r}: {shlex.join(detail[1:])} failed")
            elif what == "copy":
                files, to = detail
                say(f"# keep {len(files)} file(s) in {to}")
                if not dry_run:
                    _require_sources(name, files)  # every one, before any is copied
                    for f in files:
                        write_bytes_atomic(ROOT / to / f.name, (ROOT / f).read_bytes())
            elif what == "record":
                run, to = detail
                say(f"# keep {run}/record.json and its generations in {to}")
                if not dry_run:
                    _require_sources(name, [run / "record.json", run / "generations.jsonl"])
                    data = (ROOT / run / "generations.jsonl").read_bytes()
                    gz = gzip.compress(data, mtime=0)
                    write_bytes_atomic(ROOT / to / "generations.jsonl.gz", gz)
                    # the record last: a folder with a record has its generations
                    write_bytes_atomic(
                        ROOT / to / "record.json", (ROOT / run / "record.json").read_bytes()
                    )
                    pack_folder((ROOT / to).parent)  # the folder's shared sources once
            elif what == "study":
                lines += run_study(detail[0], detail[1], dry_run)
    return lines


def _require_sources(study: str, files: Sequence[Path]) -> None:
    missing = [str(f) for f in files if not (ROOT / f).is_file()]
    if missing:
        raise StudyError(f"study {study!r}: nothing kept, {', '.join(missing)} missing")
