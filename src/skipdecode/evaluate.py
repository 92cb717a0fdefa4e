"""``python -m skipdecode.evaluate``: Evaluate an exported model under a schedule (Hydra, conf/evaluate.yaml).

The documented entry point; the code lives in :mod:`skipdecode.evaluation.evaluate`.
"""

from skipdecode.evaluation.evaluate import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
