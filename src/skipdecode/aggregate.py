"""``python -m skipdecode.aggregate``: Rebuild a sweep's table and plots from its cells.

The documented entry point; the code lives in :mod:`skipdecode.experiments.sweeps.aggregate`.
"""

from skipdecode.experiments.sweeps.aggregate import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
