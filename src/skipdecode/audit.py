"""``python -m skipdecode.audit [results]``: recompute the published numbers from the records and
check their provenance (``make audit``).

The documented entry point; the code lives in :mod:`skipdecode.experiments.recompute`.
"""

from skipdecode.experiments.recompute.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
