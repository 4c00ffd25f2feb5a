"""Timing on the learner's machine, with torch's own benchmark timer (warm-up, adaptive repeats, median)."""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch
from torch.utils.benchmark import Timer

__all__ = ["seconds", "gflops", "sweep"]


def seconds(fn: Callable[[], object], *, min_run_time: float = 0.1) -> float:
    """Median seconds per call of `fn()`, measured by torch.utils.benchmark (runs it until `min_run_time`)."""
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def gflops(flops: float, secs: float) -> float:
    """Throughput in GFLOP/s: flops / seconds / 1e9."""
    return flops / secs / 1e9


def sweep(sizes: Sequence[int], inputs: Callable[[int], tuple], variants: Mapping[str, Callable[..., object]], *,
          limits: Mapping[str, int] | None = None, min_run_time: float = 0.05) -> dict[str, list[float]]:
    """seconds[name][i] = median seconds of `variants[name](*inputs(sizes[i]))`; a variant stops after `limits[name]`.

    Each series is a prefix of `sizes` (what `plots.lines` expects), so slow variants simply end early.
    """
    limits = limits or {}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i, n in enumerate(int(n) for n in sizes):
        args = inputs(n)
        for name, fn in variants.items():
            if len(times[name]) == i and n <= limits.get(name, n):  # once a variant stops, it stays stopped
                times[name].append(seconds(lambda: fn(*args), min_run_time=min_run_time))
    return times
