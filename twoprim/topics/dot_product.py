"""Reference kernels: the slow, obviously correct loop versions ("specs") that lessons time and exercises mirror."""
from __future__ import annotations

import torch

__all__ = ["dot_spec"]


def dot_spec(x: torch.Tensor, w: torch.Tensor) -> float:
    """x·w = Σᵢ xᵢ wᵢ, one multiply-add per element, in Python floats."""
    total = 0.0
    for xi, wi in zip(x.tolist(), w.tolist()):  # (n,), (n,) -> n Python floats each
        total += xi * wi
    return total
