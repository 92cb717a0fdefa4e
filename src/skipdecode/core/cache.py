"""KV caches with a per-layer length.

Under a SkipDecode schedule the layers' caches grow at different rates: a layer skipped at a
step writes nothing at that step and, budgets being non-increasing, never runs again, so its
cache simply stops growing. Every layer that does run at a step has seen every earlier position,
so all active layers share one cache length and one attention mask.

Both caches implement the one method transformers' attention modules call,
``update(key, value, layer_idx) -> (keys, values)``, plus ``begin``/``length``/``reset``, and
what speculative decoding needs: ``rewind`` (a verify pass rewrites positions a draft wrote),
``select_rows`` (finished rows leave the batch) and ``reserve`` (room for a round).
Before each forward pass the engine calls ``begin(position)``: the pass writes its new keys at
``position`` onward. Writing to a layer whose cache does not reach ``position`` would leave a gap
of missing KV, which is exactly what a non-monotone plan causes; it raises instead.
"""

from __future__ import annotations

import torch

__all__ = ["KVCache", "StaticKVCache", "DynamicKVCache", "CacheGapError"]


class CacheGapError(RuntimeError):
    """A layer was asked to extend a cache that is missing earlier positions."""


class KVCache:
    """Common bookkeeping: per-layer lengths and the write position of the current pass."""

    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        self._lengths = [0] * num_layers
        self._start = 0

    def begin(self, position: int) -> None:
        """The next forward pass writes keys for positions ``position, position + 1, ...``."""
        self._start = position

    def length(self, layer_idx: int) -> int:
        """Number of positions cached for ``layer_idx``."""
        return self._lengths[layer_idx]

    @property
    def lengths(self) -> list[int]:
        return list(self._lengths)

    def reset(self) -> None:
        self._lengths = [0] * self.num_layers
        self._start = 0

    def rewind(self, position: int) -> None:
        """Forget every layer's positions from ``position`` on (their buffers are rewritten)."""
        self._lengths = [min(n, position) for n in self._lengths]

    def select_rows(self, index: torch.Tensor) -> None:
        """Keep only the batch rows ``index`` (in that order)."""
        raise NotImplementedError

    def reserve(self, positions: int) -> None:
        """Make room for ``positions`` positions per layer."""

    def _check(self, layer_idx: int) -> int:
        have = self._lengths[layer_idx]
        if have != self._start:
            raise CacheGapError(
                f"layer {layer_idx} has {have} cached positions but the pass writes at "
                f"position {self._start}: a layer skipped earlier cannot run again "
                "(schedules must be non-increasing so that active layer sets are nested)"
            )
        return have

    # transformers' Cache API used by attention modules that check for it.
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._lengths[layer_idx]


class StaticKVCache(KVCache):
    """Preallocated buffers ``(B, H_kv, capacity, D)`` per layer: no allocation per step."""

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        kv_heads: int,
        head_dim: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        super().__init__(num_layers)
        self.capacity = capacity
        shape = (batch_size, kv_heads, capacity, head_dim)
        # Zeros, not empty: the compiled path attends over unwritten columns (masked); garbage
        # there could be NaN or inf, which a zero attention weight does not cancel.
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start = self._check(layer_idx)
        end = start + key.shape[-2]
        if end > self.capacity:
            raise CacheGapError(
                f"cache capacity {self.capacity} exceeded at layer {layer_idx} (needs {end})"
            )
        self.keys[layer_idx][:, :, start:end] = key
        self.values[layer_idx][:, :, start:end] = value
        self._lengths[layer_idx] = end
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]

    def claim(self, layer_idx: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole buffers of ``layer_idx`` for a pass that writes ``n`` positions in place
        (the compiled path); checks for a gap and advances the layer's length, as ``update``."""
        start = self._check(layer_idx)
        if start + n > self.capacity:
            raise CacheGapError(
                f"cache capacity {self.capacity} exceeded at layer {layer_idx} (needs {start + n})"
            )
        self._lengths[layer_idx] = start + n
        return self.keys[layer_idx], self.values[layer_idx]

    def select_rows(self, index: torch.Tensor) -> None:
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]

    def reserve(self, positions: int) -> None:
        """Grow every buffer to at least ``positions`` (doubling, so growth is rare)."""
        if positions <= self.capacity:
            return
        new = max(positions, 2 * self.capacity)
        extra = new - self.capacity

        def grown(buf: torch.Tensor) -> torch.Tensor:
            pad = buf.new_zeros(buf.shape[0], buf.shape[1], extra, buf.shape[3])
            return torch.cat([buf, pad], dim=2)

        self.keys = [grown(k) for k in self.keys]
        self.values = [grown(v) for v in self.values]
        self.capacity = new


class DynamicKVCache(KVCache):
    """Grows by concatenation; the plain reference the static cache is tested against."""

    def __init__(self, num_layers: int):
        super().__init__(num_layers)
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(layer_idx)
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k = key if k is None else torch.cat([k, key], dim=-2)
        v = value if v is None else torch.cat([v, value], dim=-2)
        self.keys[layer_idx], self.values[layer_idx] = k, v
        self._lengths[layer_idx] = k.shape[-2]
        return k, v

    def reset(self) -> None:
        super().reset()
        self.keys = [None] * self.num_layers
        self.values = [None] * self.num_layers

    def rewind(self, position: int) -> None:
        super().rewind(position)
        for i, n in enumerate(self._lengths):
            if self.keys[i] is not None:
                self.keys[i] = self.keys[i][:, :, :n]  # type: ignore[index]
                self.values[i] = self.values[i][:, :, :n]  # type: ignore[index]

    def select_rows(self, index: torch.Tensor) -> None:
        self.keys = [None if k is None else k.index_select(0, index) for k in self.keys]
        self.values = [None if v is None else v.index_select(0, index) for v in self.values]
