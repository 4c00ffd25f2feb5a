"""Seeded inputs the assignments' case builders share: a tensor (or a matrix) of normal values in a chosen memory
layout, a dtype's short name.

Every case builder takes a `seed`, so a failing case is the same tensor on every run and every machine: it makes one
`torch.Generator().manual_seed(seed)` and draws every tensor of its cases from it with `randn`, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["LAYOUTS", "dtype_name", "randn", "matrix"]

# contiguous; "transposed": the last two axes swapped in memory (a matrix column-major, strides (1, rows));
# "strided": every other element along the last axis (a matrix's strides (2·cols, 2))
LAYOUTS = ("contiguous", "transposed", "strided")


def dtype_name(dtype: Any) -> str:
    """float32 for torch.float32 and for MLX's mlx.core.float32."""
    return str(dtype).removeprefix("torch.").removeprefix("mlx.core.")


def randn(
    shape: Sequence[int], dtype: Any, gen: torch.Generator, layout: str = "contiguous", scale: float = 1.0
) -> torch.Tensor:
    """A tensor of `shape` holding `scale`·N(0, 1) values drawn in float64 from `gen`, then cast to `dtype`, laid out
    in memory as `layout` (`LAYOUTS`). A layout other than contiguous draws the values of the larger or transposed
    tensor it is a view of, so the layout is part of the case: the same seed and layout give the same tensor."""
    shape = tuple(shape)
    if layout == "transposed" and len(shape) >= 2:  # the transpose of a contiguous (..., cols, rows) tensor
        drawn = (*shape[:-2], shape[-1], shape[-2])
        return (scale * torch.randn(*drawn, generator=gen, dtype=torch.float64)).to(dtype).transpose(-1, -2)
    if layout == "strided" and shape:  # every other element of a (..., 2·n) tensor
        drawn = (*shape[:-1], 2 * shape[-1])
        return (scale * torch.randn(*drawn, generator=gen, dtype=torch.float64)).to(dtype)[..., ::2]
    if layout == "contiguous":
        return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)
    raise ValueError(
        f"layout must be one of {', '.join(map(repr, LAYOUTS))} (transposed: 2-D or more; strided: 1-D "
        f"or more), got {layout!r} for shape {shape}"
    )


def matrix(
    rows: int, cols: int, dtype: torch.dtype, gen: torch.Generator, layout: str = "contiguous", scale: float = 1.0
) -> torch.Tensor:
    """A (rows, cols) matrix of `scale`·N(0, 1) values drawn in float64 from `gen`, then cast, laid out as `layout`:
    `randn((rows, cols), ...)`."""
    return randn((rows, cols), dtype, gen, layout, scale)
