"""The hardware floor of a decode step: what reading its weights and doing its arithmetic take.

A decode step must read every weight it uses once (the active layers, the final norm and the LM
head; one embedding row per token, negligible) and the keys and values its layers attend over,
and it must do about two floating-point operations per weight and row. Its floor on a device is
the larger of ``bytes / bandwidth`` (the bandwidth floor) and ``flops / peak`` (the compute
floor), with the bandwidth measured by a large copy and the peak by a large matrix product on that
device. A variant's ms per token divided by each floor says how far it is from what the hardware
allows; both multiples are reported, since which floor binds changes with the batch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .adapters import DecoderAdapter

__all__ = ["DeviceLimits", "measure_device", "step_floor_seconds", "weight_bytes"]


@dataclass(frozen=True)
class DeviceLimits:
    """Measured memory bandwidth (bytes/s, counting read and write) and matmul peak (FLOP/s)."""

    bandwidth: float
    peak_flops: float
    dtype: str

    def as_dict(self) -> dict[str, float | str]:
        return {
            "bandwidth_gb_s": self.bandwidth / 1e9,
            "peak_tflops": self.peak_flops / 1e12,
            "dtype": self.dtype,
        }


def _median_seconds(fn, device: torch.device, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_device(
    device: torch.device, dtype: torch.dtype, copy_mib: int = 512, matmul_n: int = 2048
) -> DeviceLimits:
    """Bandwidth from copying ``copy_mib`` MiB (read + write bytes over the median time) and
    the matmul peak from an ``n x n`` product, in ``dtype`` on ``device``."""
    buffers = [torch.empty(copy_mib * 2**20 // 4, dtype=torch.float32, device=device)]
    buffers.append(torch.empty_like(buffers[0]))
    copy_s = _median_seconds(lambda: buffers[1].copy_(buffers[0]), device, 10)
    bandwidth = 2 * buffers[0].numel() * 4 / copy_s
    buffers.clear()
    n = matmul_n
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    peak = 2 * n**3 / _median_seconds(lambda: a @ b, device, 5)
    return DeviceLimits(bandwidth, peak, str(dtype).replace("torch.", ""))


def weight_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters (each shared tensor once)."""
    seen: set[int] = set()
    total = 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def step_floor_seconds(
    adapter: DecoderAdapter,
    layers: Sequence[int] | float,
    batch: int,
    context: int,
    limits: DeviceLimits,
) -> dict[str, float]:
    """Floor of one decode step running ``layers`` (a list, or a mean count) for ``batch`` rows
    attending over ``context`` positions: ``{"bytes", "flops", "bandwidth_seconds",
    "compute_seconds", "seconds"}``, the last the larger of the two (the roofline floor).

    Bytes: the layers' weights, the head's (final norm and LM head), and the KV the layers read;
    FLOPs: two per weight and row (the attention's own arithmetic is small at these lengths
    and left out). The bytes are read at the copy's whole traffic rate (read + write bytes per
    second), which a pure read stream can reach at best: the floor is a lower bound."""
    count = float(len(layers)) if not isinstance(layers, (int, float)) else float(layers)
    per_layer = weight_bytes(adapter.layers[adapter.num_layers - 1])
    model = adapter.model
    head = model.get_output_embeddings()
    head_bytes = weight_bytes(head) if head is not None else 0
    kv_heads, head_dim = adapter.kv_shape
    element = next(model.parameters()).element_size()
    kv_bytes = count * 2 * batch * kv_heads * head_dim * context * element
    nbytes = count * per_layer + head_bytes + kv_bytes
    flops = 2 * batch * (count * per_layer + head_bytes) / element
    bandwidth_s, compute_s = nbytes / limits.bandwidth, flops / limits.peak_flops
    return {
        "bytes": nbytes,
        "flops": flops,
        "bandwidth_seconds": bandwidth_s,
        "compute_seconds": compute_s,
        "seconds": max(bandwidth_s, compute_s),
    }
