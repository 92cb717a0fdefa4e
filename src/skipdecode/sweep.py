"""``python -m skipdecode.sweep``: Train-and-evaluate multirun cells (Hydra, conf/sweep.yaml).

The documented entry point; the code lives in :mod:`skipdecode.experiments.sweeps.sweep`.
"""

from skipdecode.experiments.sweeps.sweep import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
