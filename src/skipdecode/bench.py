"""``python -m skipdecode.bench``: Decode and training throughput benchmark.

The documented entry point; the code lives in :mod:`skipdecode.experiments.bench`.
"""

from skipdecode.experiments.bench import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
