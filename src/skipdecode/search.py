"""``python -m skipdecode.search -m checkpoint=<export> quality_floor=-0.5``: search a schedule on
a trained model (Hydra's Optuna sweeper, ``conf/search.yaml``).

The documented entry point; the code lives in :mod:`skipdecode.experiments.search`.
"""

from skipdecode.experiments.search.trial import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
