"""Where a decode step's time goes on the device: the kernels one step runs, how long they run,
and the host calls that launch them (``make bench-gpu``'s ``--profile``).

Each profiled variant runs twice under ``torch.profiler`` after it was timed (so nothing compiles
or records here): once with one new token (the prefill and its choice) and once with the cell's
``new_tokens``. The difference over the ``new_tokens - 1`` steps is what a decode step costs:
the kernels it runs (those inside a CUDA graph's replay included), their summed time (of each
kernel name, the decoding call's time less that of its earliest runs, as many as the one-token
call ran: the prefill's, so the two calls' noise does not mix), and the
host's calls into the driver (graph launches, kernel launches, copies, synchronisations). Beside
the step's timed wall time, the share of it the device spent in kernels says where a step waits:
near 1, on the kernels themselves (for a small model, many kernels each far shorter than a launch
is worth); well under 1, on the host or on gaps between them. A profiled run is slower than a
timed one (the profiler's own cost), so the wall time is the timed median, never the profiled.

Off a GPU the same runs count the leaf operators the CPU ran (there are no kernels): a dry run
of the profiling, not a measurement of a GPU step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

__all__ = ["PROFILED", "profile_lines", "step_profiles"]

#: The variants a cell profiles, where it timed them: our whole-step and per-layer graph paths
#: and the gpt-fast-style loop (the same computation as full, by another route).
PROFILED = (
    "skipdecode-full-step",
    "skipdecode-2x-step",
    "skipdecode-full-graphs",
    "transformers-loop-compiled",
)
#: Host calls counted per step, by the prefixes of their CUDA runtime and driver names (the
#: variants: ``cuLaunchKernelEx``, ``cudaLaunchKernelExC``, ...; none exist off a GPU).
HOST_CALLS = {
    "graph_launches": ("cudaGraphLaunch", "cuGraphLaunch"),
    "kernel_launches": ("cudaLaunchKernel", "cuLaunchKernel"),
    "copies": ("cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset"),
    "syncs": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"),
}
TOP_KERNELS = 8


def _device_events(events: list[Any], device: torch.device) -> list[Any]:
    """The events that are work on the device: kernels (and copies) on a GPU; off one, the leaf
    operators the CPU ran (``aten::`` calls with no operator inside them)."""
    if device.type == "cuda":
        return [e for e in events if e.device_type == DeviceType.CUDA]
    return [
        e
        for e in events
        if e.device_type == DeviceType.CPU
        and e.name.startswith("aten::")
        and not any(c.name.startswith("aten::") for c in e.cpu_children)
    ]


def _tally(
    events: list[Any], device: torch.device, first: Mapping[str, list[float]] | None = None
) -> dict[str, Any]:
    """Counts and microseconds of one profiled call: device events by name (``[count, us]``),
    and host calls by kind. ``first``: the one-token call's tally by name; each name then also
    keeps the microseconds of its earliest events, as many as that call ran (the prefill's, so
    the decode steps' own time is the rest: ``[count, us, us_first]``)."""
    by_name: dict[str, list[Any]] = {}
    for e in _device_events(events, device):
        by_name.setdefault(e.name, []).append(e.time_range)
    names: dict[str, list[float]] = {}
    for name, ranges in by_name.items():
        durations = [r.elapsed_us() for r in sorted(ranges, key=lambda r: r.start)]
        names[name] = [len(durations), sum(durations)]
        if first is not None:
            names[name].append(sum(durations[: int(first.get(name, (0,))[0])]))
    host = {
        kind: sum(1 for e in events if e.device_type == DeviceType.CPU and e.name.startswith(calls))
        for kind, calls in HOST_CALLS.items()
    }
    return {"names": names, "host": host}


def _profiled(
    run: Callable[[int], Any],
    new_tokens: int,
    device: torch.device,
    first: Mapping[str, list[float]] | None = None,
) -> dict:
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize(device)
    with profile(activities=activities) as prof:
        run(new_tokens)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return _tally(list(prof.events()), device, first)


def _per_step(one: dict[str, Any], many: dict[str, Any], steps: int) -> dict[str, Any]:
    """What the decoding call ran beyond the one-token call, per step: device events by name
    (those it ran more often; their time less that of their earliest events, the prefill's)
    and host calls."""
    names = {}
    for name, (count, us, us_first) in many["names"].items():
        extra = count - one["names"].get(name, (0, 0.0))[0]
        if extra > 0:
            names[name] = (extra / steps, (us - us_first) / steps)
    top = sorted(names.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
    return {
        "events_per_step": sum(c for c, _ in names.values()),
        "device_us_per_step": sum(u for _, u in names.values()),
        "host_per_step": {k: (many["host"][k] - one["host"][k]) / steps for k in many["host"]},
        "top": [{"name": n, "per_step": c, "us_per_step": u} for n, (c, u) in top],
        "distinct": len(names),
    }


def step_profiles(
    runs: Mapping[str, Callable[[int], Any]],
    new_tokens: int,
    device: torch.device,
    timed_ms: Mapping[str, float],
) -> dict[str, dict[str, Any]]:
    """One profile per variant of ``runs`` (each takes its number of new tokens and decodes
    them, already warm): device events and host calls a decode step adds, and, where
    ``timed_ms`` has the variant's timed ms a step, the share of it spent in device events."""
    if new_tokens < 2:
        raise ValueError(f"new_tokens={new_tokens}: a profile needs at least 2 (one decode step)")
    out = {}
    for name, run in runs.items():
        try:  # a variant whose profile fails keeps its error; the others are still profiled
            run(1)  # the one-token call's own shapes compiled and recorded before it is profiled
            one = _profiled(run, 1, device)
            many = _profiled(run, new_tokens, device, first=one["names"])
        except Exception as e:  # noqa: BLE001 - recorded, not swallowed
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        row = _per_step(one, many, new_tokens - 1)
        # the two profiled calls' own tallies: every per-step figure is arithmetic on these
        row["raw"] = {"steps": new_tokens - 1, "prefill_only": one, "decode": many}
        row["unit"] = "kernels" if device.type == "cuda" else "cpu operators"
        ms = timed_ms.get(name)
        row["timed_ms_per_step"] = ms
        row["busy_share"] = None if not ms else row["device_us_per_step"] / (ms * 1000)
        out[name] = row
    return out


def profile_lines(cells: list[dict[str, Any]]) -> list[str]:
    """The page's lines for the cells that kept a profile: per variant and batch, events and
    their time a step, the busy share, host launches, and the longest-running events."""
    out = []
    for c in cells:
        for name, p in (c.get("step_profile") or {}).items():
            if "error" in p:
                out.append(f"{name} at batch {c['batch_size']}: not profiled: {p['error'][:300]}")
                continue
            host = p["host_per_step"]
            busy = "" if p["busy_share"] is None else f" ({p['busy_share']:.0%} of the timed step)"
            timed = (
                "" if p["timed_ms_per_step"] is None else f", timed {p['timed_ms_per_step']:.2f} ms"
            )
            top = "; ".join(
                f"{t['name'][:60]} x{t['per_step']:.1f} {t['us_per_step']:.1f} us"
                for t in p["top"][:3]
            )
            if host["graph_launches"] > 0 and p["events_per_step"] < host["graph_launches"]:
                top += (
                    " (the profiler saw no kernels inside the graph replays: not the step's count)"
                )
            out.append(
                f"{name} at batch {c['batch_size']}: {p['events_per_step']:.1f} {p['unit']} a step "
                f"({p['distinct']} distinct), {p['device_us_per_step'] / 1000:.3f} ms in them{busy}"
                f"{timed}; host a step: {host['graph_launches']:.1f} graph launches, "
                f"{host['kernel_launches']:.1f} kernel launches, {host['copies']:.1f} copies, "
                f"{host['syncs']:.1f} syncs; longest: {top}"
            )
    return out
