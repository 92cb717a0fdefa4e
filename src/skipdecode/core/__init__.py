"""The engine room: run a transformers causal LM layer by layer under any layer plan.

``adapters`` (one view of every decoder family), ``cache`` (KV caches with a per-layer length),
``masks``, ``sampling``, ``step`` (the engine/schedule contract for one decode pass), ``stats``,
``loss`` and ``engine`` (:class:`SkipDecoder`). Nothing here knows any schedule by name.
"""
