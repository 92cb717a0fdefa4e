"""Evaluation room: generate a whole split under a schedule, score it, time it, record it.

``inputs`` (model, schedule, prompts) -> ``generation`` (batched decoding and timing against
``full``) -> ``metrics`` (BLEU, ROUGE, BERTScore) -> ``record`` (the JSON record); ``evaluate``
orchestrates and is the Hydra entry point.
"""
