"""``python -m skipdecode.dashboard <entity/project> <sweep>``: a W&B report for a sweep.

The documented entry point; the code lives in :mod:`skipdecode.experiments.dashboard`.
"""

from skipdecode.experiments.dashboard import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
