"""A pool of static KV caches kept across decode calls, so that a captured CUDA graph can be
replayed: the graph reads and writes the cache at the addresses it was recorded with.

A decoder in the CUDA-graph mode (``DecodeOptions(compile="reduce-overhead")``) takes its cache
from here instead of allocating one per call, and records each layer's step on these buffers
(:mod:`~skipdecode.core.graphs`). The pool holds one set of buffers per (batch, capacity),
allocated once (marked as static addresses for torch.compile too,
``torch._dynamo.mark_static_address``), and zeroed in place when a call takes them again. The
pool, and the recordings on it, are kept for the decoder's lifetime: a run that passes through
many (batch, capacity) shapes holds a set of buffers for each. What changes a batch's
shape inside a call copies into the pool's other buffers rather than allocating: compaction in
the lossless mode (finished rows leave: the rows copy into the smaller batch's buffers) and
growth (a round needs more columns: the cache copies into the larger capacity's buffers).
"""

from __future__ import annotations

import torch

from .cache import KVCache, StaticKVCache

__all__ = ["CachePool", "PooledKVCache"]

Buffers = tuple[list[torch.Tensor], list[torch.Tensor]]


class CachePool:
    """Static KV buffers per (batch, capacity) for one model's layers, kept for the decoder's
    lifetime."""

    def __init__(
        self,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        self.num_layers, self.kv_heads, self.head_dim = num_layers, kv_heads, head_dim
        self.dtype, self.device = dtype, device
        self._buffers: dict[tuple[int, int], Buffers] = {}

    def buffers(self, batch: int, capacity: int) -> Buffers:
        """The (keys, values) buffers of one shape, allocated and marked static on first use."""
        key = (batch, capacity)
        if key not in self._buffers:
            shape = (batch, self.kv_heads, capacity, self.head_dim)
            made = tuple(
                [
                    torch.zeros(shape, dtype=self.dtype, device=self.device)
                    for _ in range(self.num_layers)
                ]
                for _ in range(2)
            )
            for t in (*made[0], *made[1]):
                torch._dynamo.mark_static_address(t)
            self._buffers[key] = made  # type: ignore[assignment]
        return self._buffers[key]

    def cache(self, batch: int, capacity: int) -> PooledKVCache:
        """An empty cache on the pool's buffers of that shape, zeroed in place."""
        keys, values = self.buffers(batch, capacity)
        for t in (*keys, *values):
            t.zero_()
        return PooledKVCache(self, batch, capacity, keys, values)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The (batch, capacity) shapes the pool holds, in the order they were first used."""
        return list(self._buffers)


class PooledKVCache(StaticKVCache):
    """A static cache whose buffers belong to a :class:`CachePool`."""

    def __init__(
        self,
        pool: CachePool,
        batch: int,
        capacity: int,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
    ):
        KVCache.__init__(self, pool.num_layers)  # the buffers are the pool's, not new ones
        self.pool, self.batch, self.capacity = pool, batch, capacity
        self.keys, self.values = keys, values

    def _move(self, batch: int, capacity: int, rows: torch.Tensor | None) -> None:
        """Copy the cache (its ``rows``, all columns) into the pool's buffers of the new shape,
        the columns past the old capacity zeroed."""
        keys, values = self.pool.buffers(batch, capacity)
        width = min(capacity, self.capacity)
        for dst, src in zip((*keys, *values), (*self.keys, *self.values), strict=True):
            part = src if rows is None else src.index_select(0, rows)  # a copy: dst may be src
            dst[:, :, :width].copy_(part[:, :, :width])
            dst[:, :, width:].zero_()
        self.keys, self.values, self.batch, self.capacity = keys, values, batch, capacity

    def select_rows(self, index: torch.Tensor) -> None:
        self._move(len(index), self.capacity, index)

    def reserve(self, positions: int) -> None:
        """Room for ``positions`` columns: the next capacity bucket of the pool (doubling)."""
        if positions > self.capacity:
            self._move(self.batch, max(positions, 2 * self.capacity), None)
