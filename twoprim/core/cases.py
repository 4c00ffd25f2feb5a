"""Seeded inputs the assignments' case builders share: a matrix in a chosen memory layout, a dtype's short name.

Every case builder takes a `seed`, so a failing case is the same tensor on every run and every machine.
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["LAYOUTS", "dtype_name", "matrix"]

# contiguous; "transposed": column-major, strides (1, rows); "strided": every other column, strides (2·cols, 2)
LAYOUTS = ("contiguous", "transposed", "strided")


def dtype_name(dtype: Any) -> str:
    """float32 for torch.float32 and for MLX's mlx.core.float32."""
    return str(dtype).removeprefix("torch.").removeprefix("mlx.core.")


def matrix(rows: int, cols: int, dtype: torch.dtype, gen: torch.Generator, layout: str = "contiguous",
           scale: float = 1.0) -> torch.Tensor:
    """A (rows, cols) matrix of `scale`·N(0, 1) values drawn in float64 from `gen`, then cast, laid out as `layout`."""
    if layout == "transposed":  # the transpose of a contiguous (cols, rows) matrix
        return (scale * torch.randn(cols, rows, generator=gen, dtype=torch.float64)).to(dtype).T
    if layout == "strided":  # every other column of a (rows, 2·cols) matrix
        return (scale * torch.randn(rows, 2 * cols, generator=gen, dtype=torch.float64)).to(dtype)[:, ::2]
    if layout == "contiguous":
        return (scale * torch.randn(rows, cols, generator=gen, dtype=torch.float64)).to(dtype)
    raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
