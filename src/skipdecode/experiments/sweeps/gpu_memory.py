"""How many sweep cells fit on one GPU at once, from a cell's measured peak and the free memory.

A cell (training, then evaluation) records the peak GPU memory its process reserved
(``gpu_peak_bytes`` in ``cell.json``). Before a parallel sweep, ``python -m
skipdecode.experiments.sweeps.gpu_memory <results or sweep dirs>`` prints how many cells to run at once:
the free memory of the device, less a headroom, divided by the largest measured peak plus the
per-process overhead the allocator does not see (the CUDA context and its kernels). Where no cell
has a measured peak yet, the memory plan of ``--experiment`` stands in for it
(:mod:`skipdecode.training.memory`; it does not model what CALM's exits through the LM head at
every layer or the lossless mode's second pass add, which measured peaks then cover), else
``--default-peak-gib``.

Workers of a parallel launcher (joblib/loky) run several cells one after another in the same
process, so a cell starts from a clean slate (:func:`begin_cell` resets the peak) and hands its
cached blocks back when it ends (:func:`end_cell`): a finished cell's cache must not count
against the cells that run beside the next one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

from ...arguments import at_least, fraction

__all__ = [
    "PEAK_KEY",
    "begin_cell",
    "end_cell",
    "measured_peaks",
    "choose_jobs",
    "main",
]

#: The key of a cell's measured peak (bytes reserved by the caching allocator) in cell.json.
PEAK_KEY = "gpu_peak_bytes"
GIB = 2**30


def _cuda():
    import torch

    return torch.cuda if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def begin_cell() -> None:
    """Reset the peak counter (a no-op where CUDA was never used in this process)."""
    cuda = _cuda()
    if cuda is not None:
        cuda.empty_cache()
        cuda.reset_peak_memory_stats()


def end_cell() -> int | None:
    """The peak bytes the allocator reserved since :func:`begin_cell` (None without CUDA); the
    cached blocks are returned to the device."""
    cuda = _cuda()
    if cuda is None:
        return None
    peak = int(cuda.max_memory_reserved())
    cuda.empty_cache()
    return peak


def measured_peaks(dirs: Iterable[Path]) -> list[int]:
    """Every ``gpu_peak_bytes`` recorded in a ``cell.json`` under ``dirs`` (any depth)."""
    peaks = []
    for root in dirs:
        for path in sorted(Path(root).rglob("cell.json")):
            try:
                value = json.loads(path.read_text()).get(PEAK_KEY)
            except (OSError, ValueError):
                continue
            if isinstance(value, int) and value > 0:
                peaks.append(value)
    return peaks


def choose_jobs(
    free_bytes: int,
    peak_bytes: int,
    overhead_bytes: int = GIB,
    headroom: float = 0.9,
    max_jobs: int | None = None,
) -> int:
    """``floor(headroom * free / (peak + overhead))``, at least 1 and at most ``max_jobs``."""
    if free_bytes <= 0:
        raise ValueError(f"free_bytes must be positive, got {free_bytes}")
    if peak_bytes <= 0:
        raise ValueError(f"peak_bytes must be positive, got {peak_bytes}")
    if not 0 < headroom <= 1:
        raise ValueError(f"headroom must be in (0, 1], got {headroom}")
    n = math.floor(headroom * free_bytes / (peak_bytes + overhead_bytes))
    n = max(1, n)
    return min(n, max_jobs) if max_jobs else n


def _free_bytes(device: int) -> int:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the number of GPU jobs needs one (set GPU_JOBS instead)")
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="*", type=Path, help="results or sweep dirs with cell.json files")
    p.add_argument(
        "--experiment",
        help="where no cell has a measured peak yet: the memory plan of this experiment "
        "(skipdecode.training.memory, at its configured maximum lengths) stands in for one",
    )
    p.add_argument("--default-peak-gib", type=at_least(0.001, float), default=16.0)
    p.add_argument("--overhead-gib", type=at_least(0, float), default=1.0)
    p.add_argument("--headroom", type=fraction, default=0.9)
    # never 0 or -1: the Makefile hands the answer to joblib, where -1 means every core
    p.add_argument("--max-jobs", type=at_least(1), default=os.cpu_count() or 1)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--verbose", action="store_true", help="explain the choice on stderr")
    args = p.parse_args(argv)
    peaks = measured_peaks(args.dirs)
    source = f"max of {len(peaks)} measured cells"
    if peaks:
        peak = max(peaks)
    elif args.experiment:
        from ...training.memory import experiment_plan

        peak, source = experiment_plan(args.experiment, [])[1].total, f"{args.experiment}'s plan"
    else:
        peak, source = int(args.default_peak_gib * GIB), "--default-peak-gib"
    free = _free_bytes(args.device)
    n = choose_jobs(free, peak, int(args.overhead_gib * GIB), args.headroom, args.max_jobs)
    if args.verbose:
        import sys

        print(
            f"free {free / GIB:.1f} GiB, peak {peak / GIB:.1f} GiB ({source}) + "
            f"{args.overhead_gib:.1f} GiB per process, headroom {args.headroom}: {n} jobs",
            file=sys.stderr,
        )
    print(n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
