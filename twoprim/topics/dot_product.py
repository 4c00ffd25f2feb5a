"""Reference kernels: the slow, obviously correct loop versions ("specs") that lessons time and exercises mirror.

`dot_spec` is ex01_dot's `dot_loop` itself, so it counts its calls (`uses`): a check can tell when an answer calls it
instead of writing the loop.
"""

from __future__ import annotations

from collections import Counter

import torch

__all__ = ["dot_spec", "uses"]

_USES: Counter = Counter()


def uses() -> Counter:
    """How many times `dot_spec` has been called (a copy)."""
    return Counter(_USES)


def dot_spec(x: torch.Tensor, w: torch.Tensor) -> float:
    """x·w = Σᵢ xᵢ wᵢ, one multiply-add per element, in Python floats."""
    _USES["dot_spec"] += 1  # counted in the function, not by a wrapper: lesson 01 times it on 10 elements
    total = 0.0
    for xi, wi in zip(x.tolist(), w.tolist(), strict=False):  # (n,), (n,) -> n Python floats each
        total += xi * wi
    return total
