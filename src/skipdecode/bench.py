"""``python -m skipdecode.bench``: Decode and training throughput benchmark.

The documented entry point; the code lives in :mod:`skipdecode.experiments.benchmarks.bench`.
"""

from skipdecode.experiments.benchmarks.bench import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
