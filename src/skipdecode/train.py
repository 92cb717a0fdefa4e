"""``python -m skipdecode.train``: Fine-tune under a schedule (Hydra, conf/train.yaml).

The documented entry point; the code lives in :mod:`skipdecode.training.train`.
"""

from skipdecode.training.train import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
