"""``python -m skipdecode.dashboard <entity/project> <sweep>``: a W&B report for a sweep.

The documented entry point; the code lives in :mod:`skipdecode.experiments.sweeps.dashboard`.
"""

from skipdecode.experiments.sweeps.dashboard import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
