"""Timing on the learner's machine, the one home of every timer the lessons use: `seconds`, the median by torch's
own benchmark timer (warm-up, adaptive repeats), `fastest`, the fastest single call, and `step_seconds`, two steps
of one computation timed apart.

The median counts the moments other programs held the cores; the fastest call measures what the machine can do
(a call can be slowed down by them, never sped up), which is what a GEMM's speed on a shared machine should report.
`warn_if_busy` says so before a cell that times: every lesson cell that prints a timing calls it first.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import torch
from torch.utils.benchmark import Timer

__all__ = ["seconds", "Fastest", "fastest", "step_seconds", "gflops", "sweep", "warn_if_busy"]


def warn_if_busy() -> None:
    """Print a warning when other programs keep the cores busy (load average above the core count); else nothing."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has no load average
        return
    cores = os.cpu_count() or 1
    if load <= cores:
        return
    print(
        f"Warning: this machine is busy (load average {load:.1f} over the last minute, on {cores} cores): other "
        f"programs hold the cores, so the timings below can be many times slower than this machine can do, "
        f"multi-threaded ones most. Rerun when it is idle."
    )


def seconds(fn: Callable[[], object], *, min_run_time: float = 0.1) -> float:
    """Median seconds per call of `fn()`, measured by torch.utils.benchmark (runs it until `min_run_time`)."""
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


@dataclass(frozen=True)
class Fastest:
    """The fastest of `calls` timed calls (after one warm-up call); `stopped` when stopped before all were done."""

    seconds: float
    calls: int
    planned: int
    stopped: bool


@overload
def fastest(
    fn: Callable[[], object],
    *,
    budget: float = ...,
    min_calls: int = ...,
    max_calls: int = ...,
    stop: None = None,
    progress: Callable[[int, int], object] | None = ...,
) -> Fastest:
    """Without a `stop`: always a measurement."""


@overload
def fastest(
    fn: Callable[[], object],
    *,
    budget: float = ...,
    min_calls: int = ...,
    max_calls: int = ...,
    stop: threading.Event | None,
    progress: Callable[[int, int], object] | None = ...,
) -> Fastest | None:
    """With a `stop`: None when it was set before the first timed call."""


def fastest(
    fn: Callable[[], object],
    *,
    budget: float = 0.05,
    min_calls: int = 3,
    max_calls: int = 1000,
    stop: threading.Event | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> Fastest | None:
    """The fastest single call of `fn()`: one warm-up call (first-call costs, allocation and thread start-up, are not
    the operation's speed) sets how many calls fit in about `budget` seconds (at least `min_calls`, at most
    `max_calls`); `progress(done, planned)` after each; no new call once `stop` is set. None when stopped before any
    timed call (so never without a `stop`)."""
    if min_calls < 1 or max_calls < 1:
        raise ValueError(f"fastest times at least one call: min_calls={min_calls}, max_calls={max_calls}")
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    planned = int(min(max(math.ceil(budget / max(first, 1e-9)), min_calls), max_calls))
    best, calls = math.inf, 0
    for _ in range(planned):
        if stop is not None and stop.is_set():
            break
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        calls += 1
        if progress is not None:
            progress(calls, planned)
    return Fastest(best, calls, planned, calls < planned) if calls else None


def step_seconds(
    first: Callable[[], object], then: Callable[[object], object], *, repeats: int = 5
) -> tuple[float, float]:
    """Median seconds of two steps of one computation timed apart, call by call: `out = first()`, then `then(out)`
    (MLX: building a lazy graph, then evaluating it). One warm-up of both steps first."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    then(first())
    firsts, thens = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = first()
        t1 = time.perf_counter()
        then(out)
        firsts.append(t1 - t0)
        thens.append(time.perf_counter() - t1)
    return statistics.median(firsts), statistics.median(thens)


def gflops(flops: float, secs: float) -> float:
    """Throughput in GFLOP/s: flops / seconds / 1e9."""
    return flops / secs / 1e9


def sweep(
    sizes: Sequence[int],
    inputs: Callable[[int], tuple],
    variants: Mapping[str, Callable[..., object]],
    *,
    limits: Mapping[str, int] | None = None,
    min_run_time: float = 0.05,
    best: bool = False,
) -> dict[str, list[float]]:
    """seconds[name][i] = median seconds of `variants[name](*inputs(sizes[i]))` (with `best`: its fastest call,
    `fastest`); a variant stops after `limits[name]`.

    Each series is a prefix of `sizes` (what `plots.lines` expects), so slow variants simply end early.
    """
    limits = limits or {}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i, n in enumerate(int(n) for n in sizes):
        args = inputs(n)
        for name, fn in variants.items():
            if len(times[name]) == i and n <= limits.get(name, n):  # once a variant stops, it stays stopped
                call = functools.partial(fn, *args)
                times[name].append(
                    fastest(call, budget=min_run_time).seconds if best else seconds(call, min_run_time=min_run_time)
                )
    return times
