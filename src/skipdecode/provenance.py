"""Provenance: where and with what a run happened (git, package versions, platform, device).

Recorded in every evaluation record and benchmark result.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.metadata as md
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "PROVENANCE_PACKAGES",
    "PROVENANCE_ENV",
    "ProvenanceError",
    "cpu_generation",
    "cpu_model",
    "diff_missing",
    "machine",
    "package_code",
    "provenance",
    "require_recorded_diff",
]

#: A dirty checkout's diff is kept whole in the record up to this size (else its sha256 only).
MAX_DIFF_CHARS = 200_000

#: Distribution names whose versions go into every record (None when not installed).
PROVENANCE_PACKAGES: tuple[str, ...] = (
    "skipdecode",
    "torch",
    "transformers",
    "tokenizers",
    "pytorch-lightning",
    "sacrebleu",
    "rouge-score",
    "bert-score",
    "datasets",
    "hydra-core",
    "omegaconf",
    "numpy",
)

#: Environment variables recorded when set (behaviour-relevant, never secrets).
PROVENANCE_ENV: tuple[str, ...] = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "SKIPDECODE_CACHE",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUBLAS_WORKSPACE_CONFIG",
    "SKIPDECODE_TREE_MANIFEST",
)


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _git(
    args: list[str], cwd: Path, exact: bool = False, succeeded: tuple[int, ...] = (0,)
) -> str | None:
    """git's output (None when its exit status is not in ``succeeded``), stripped; ``exact`` keeps
    it byte for byte but its final newlines (a diff: text mode would turn a CRLF file's line ends
    into LF, and the diff would no longer apply)."""
    try:
        res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode not in succeeded:
        return None
    text = res.stdout.decode("utf-8", errors="replace")
    return text.rstrip("\n") if exact else text.strip()


def _git_info(start: Path | None = None) -> dict[str, Any]:
    """Commit, dirty flag and branch of the repository holding ``start`` (default: this package)."""
    here = start or Path(__file__).resolve().parent
    from .manifest import MANIFEST_ENV, check_manifest  # here: `-m skipdecode.manifest` runs it

    manifest = os.environ.get(MANIFEST_ENV)
    if manifest:  # a copy of a checkout, checked against its commit's manifest (a git directory
        # that travelled with the copy can be stale: the manifest names the commit sent)
        return check_manifest(Path(manifest), _checkout_of(here if here.is_dir() else here.parent))
    root = checkout_root(here)
    if root is None:
        return {"commit": None, "dirty": None, "branch": None, "root": None}
    changes = _changes(root)
    info = {
        "commit": _git(["rev-parse", "HEAD"], root),
        "dirty": None if changes is None else bool(_joined(changes)),
        "branch": _git(["symbolic-ref", "--short", "-q", "HEAD"], root),
        "root": str(root),
    }
    if info["dirty"]:  # what the run had on top of the commit: changed and new files
        new = changes[1]
        parts = [_git(["diff", "HEAD"], root, exact=True) or ""]
        parts += [_new_file_diff(root, name) for name in new]
        diff = "\n".join(p for p in parts if p)  # as before for tracked changes alone
        info["diff_sha256"] = hashlib.sha256(diff.encode()).hexdigest()
        info["diff"] = diff if len(diff) <= MAX_DIFF_CHARS else None  # too large: hash only
        info["diff_scope"] = DIFF_SCOPE
        info["new_files"] = new
    return info


#: What a kept diff covers (records before this field kept the tracked files' changes only, so a
#: file the run added is missing from their diff).
DIFF_SCOPE = "tracked files and new files under the code folders"
#: The folders whose new (untracked, not ignored) files can change what runs.
CODE_FOLDERS = ("src", "conf", "scripts", "studies")


def new_code_files(root: Path) -> list[str]:
    """Untracked, not ignored files under :data:`CODE_FOLDERS` of the checkout at ``root``."""
    listed = _git(["ls-files", "-z", "--others", "--exclude-standard", "--", *CODE_FOLDERS], root,
                  exact=True)  # fmt: skip
    return sorted(name for name in (listed or "").split("\0") if name)  # -z: names unquoted


def checkout_root(path: Path) -> Path | None:
    """The top of the git work tree holding ``path`` (a file's: its folder's; None: in none)."""
    found = _git(["rev-parse", "--show-toplevel"], path if path.is_dir() else path.parent)
    return Path(found) if found else None


def dirty_paths(root: Path) -> list[Path] | None:
    """What makes a record made in the checkout at ``root`` dirty, relative to ``root``: tracked
    files with uncommitted changes (staged or not) and :func:`new_code_files` (None: git failed)."""
    changes = _changes(root)
    return None if changes is None else _joined(changes)


def _changes(root: Path) -> tuple[list[Path], list[str]] | None:
    """The tracked files with uncommitted changes and the new code files, apart (None: git
    status failed), each listed once for a record."""
    args = ["status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=no"]
    status = _git(args, root, exact=True)  # -z: names unquoted; a rename as both its names
    if status is None:
        return None
    return [Path(entry[3:]) for entry in status.split("\0") if entry], new_code_files(root)


def _joined(changes: tuple[list[Path], list[str]]) -> list[Path]:
    tracked, new = changes
    return tracked + [Path(name) for name in new]


def _new_file_diff(root: Path, name: str) -> str:
    """A new file as a ``git diff`` adds it (``git apply`` recreates it; 1: the files differ)."""
    diff = _git(["diff", "--no-index", "--", "/dev/null", name], root, exact=True, succeeded=(0, 1))
    return diff or ""


def _checkout_of(here: Path) -> Path:
    """The checkout above ``here``: the folder holding pyproject.toml (else ``here``)."""
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    return here


class ProvenanceError(RuntimeError):
    """A run whose record could not say what code it ran."""


def diff_missing(prov: dict[str, Any] | None) -> bool:
    """Whether a record's provenance is from a checkout with uncommitted changes whose diff it
    does not hold (too large to keep, or recorded before diffs were kept)."""
    git = (prov or {}).get("git") or {}
    return bool(git.get("dirty")) and not isinstance(git.get("diff"), str)


def require_recorded_diff(prov: dict[str, Any], what: str) -> None:
    """Refuse, before anything runs, a run whose record could not hold the diff it ran with."""
    if diff_missing(prov):
        git = prov.get("git") or {}
        raise ProvenanceError(
            f"{what}: the checkout {git.get('root')!r} has uncommitted changes whose diff is "
            f"larger than the {MAX_DIFF_CHARS:,} characters a record keeps, so the record could "
            "not say what code it ran; commit the changes (or stash them) and run again"
        )


def package_code() -> dict[str, str | None]:
    """This package's code as git knows it: the tree of its directory at ``HEAD`` and the sha256
    of the uncommitted diff inside it (None outside a checkout). Commits that touch only other
    files (results, docs) leave it as it is."""
    here = Path(__file__).resolve().parent
    diff = _git(["diff", "HEAD", "--", "."], here, exact=True)
    return {
        "tree": _git(["rev-parse", "HEAD:./"], here),
        "diff_sha256": None if diff is None else hashlib.sha256(diff.encode()).hexdigest(),
    }


@functools.cache
def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo, sysctl on macOS), or None where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            ).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or None


def cpu_generation() -> str | None:
    """The CPU's family, model and stepping numbers as /proc/cpuinfo gives them on x86
    (``"family 25 model 1 stepping 1"``), or None where it gives none. A virtual machine may
    name two generations alike (``AMD EPYC``); these numbers tell them apart."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
    except OSError:
        return None
    parts = [(name, fields.get(key)) for name, key in
             (("family", "cpu family"), ("model", "model"), ("stepping", "stepping"))]  # fmt: skip
    return " ".join(f"{name} {value}" for name, value in parts if value) or None


def machine(device: dict[str, Any]) -> str:
    """A record's machine in one label (``device``: its ``provenance.device``): the GPU where
    one ran, else the CPU with the instruction set of torch's kernels and its generation, each
    said to be unrecorded where the record predates it."""
    gpus = [gpu for gpu in device.get("cuda_devices") or [] if isinstance(gpu, dict)]
    if gpus:
        return str(gpus[0].get("name") or "an unnamed GPU")
    isa = device.get("cpu_capability") or "instruction set not recorded"
    generation = device.get("cpu_generation") or "generation not recorded"
    return f"{device.get('cpu') or 'an unrecorded CPU'} ({isa}; {generation})"


def _versions(names: Iterable[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def _device_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_generation": cpu_generation(),
        "cpu_count": os.cpu_count(),
    }
    try:
        import torch
    except ImportError:
        info.update(torch_threads=None, cuda_available=False, cuda_devices=[])
        return info
    # the instruction set torch's CPU kernels run (AVX512, AVX2, ...): two CPUs that differ in it
    # round otherwise, and a training run carries that into other weights
    info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    info["torch_threads"] = torch.get_num_threads()
    info["torch_interop_threads"] = torch.get_num_interop_threads()
    info["cuda_available"] = torch.cuda.is_available()
    info["cuda_version"] = torch.version.cuda
    devices = []
    if info["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append(
                {
                    "index": i,
                    "name": props.name,
                    "capability": f"{props.major}.{props.minor}",
                    "memory_gib": round(props.total_memory / 2**30, 2),
                }
            )
        info["cudnn_version"] = torch.backends.cudnn.version()
        info["driver"] = getattr(torch.cuda, "get_driver_version", lambda: None)()
    info["cuda_devices"] = devices
    info["device"] = devices[0]["name"] if devices else info["cpu"]
    return info


def provenance(repo: str | os.PathLike | None = None) -> dict[str, Any]:
    """Where and with what a run happened: git, package versions, python, platform, device, time.

    ``repo`` is any path inside the git checkout to describe (default: this package's checkout).
    Fields that cannot be determined are ``None``.
    """
    return {
        "timestamp_utc": _utc_now(),
        "git": _git_info(Path(repo) if repo is not None else None),
        "packages": _versions(PROVENANCE_PACKAGES),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "platform": platform.platform(),
        },
        "device": _device_info(),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "env": {k: os.environ[k] for k in PROVENANCE_ENV if k in os.environ},
    }
