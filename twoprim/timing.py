"""Timing on the learner's machine, with torch's own benchmark timer (warm-up, adaptive repeats, median)."""
from __future__ import annotations

from typing import Callable

import torch
from torch.utils.benchmark import Timer

__all__ = ["seconds", "gflops"]


def seconds(fn: Callable[[], object], *, min_run_time: float = 0.1) -> float:
    """Median seconds per call of `fn()`, measured by torch.utils.benchmark (runs it until `min_run_time`)."""
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def gflops(flops: float, secs: float) -> float:
    """Throughput in GFLOP/s: flops / seconds / 1e9."""
    return flops / secs / 1e9
