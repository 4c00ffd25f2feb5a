"""GEMM tiling (lesson 02): which tiles of A and B feed one tile of C, how many loads tiling saves, and the explorer
that shows it (`tiling_explorer`). Lesson 02's loop orders, measurements and roofline are `topics.gemm`; the tiles
are apart only so that neither module passes 500 lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from twoprim.topics.explorers import Explorer, int_slider

__all__ = ["TilingView", "tiling_view", "tiling_figure", "tiling_explorer"]


def _blocks(size: int, tile: int) -> list[tuple[int, int]]:
    """[start, stop) of each tile along an axis of `size`; the last one is shorter when tile does not divide size."""
    return [(start, min(start + tile, size)) for start in range(0, size, tile)]


@dataclass(frozen=True)
class TilingView:
    """C (M×N) cut into tiles of at most tile×tile; C tile (row, col) = Σ over k-tiles of A tile @ B tile.

    `a_tiles[k]` and `b_tiles[k]` are the ((row start, stop), (column start, stop)) of the k-th pair that feeds the
    selected C tile. Loads count numbers read from main memory, assuming a tile stays in fast memory while used.
    """

    M: int
    N: int
    K: int
    tile: int
    row: int
    col: int
    row_blocks: list[tuple[int, int]]
    col_blocks: list[tuple[int, int]]
    k_blocks: list[tuple[int, int]]
    c_tile: tuple[tuple[int, int], tuple[int, int]]
    a_tiles: list[tuple[tuple[int, int], tuple[int, int]]]
    b_tiles: list[tuple[tuple[int, int], tuple[int, int]]]
    loads: dict[str, float]


def tiling_view(M: int, N: int, K: int, tile: int, row: int = 0, col: int = 0) -> TilingView:
    """The tiles of C, the A and B tiles that feed C tile (row, col), and loads: untiled 2MNK (one dot per element
    of C reads K of A and K of B), tiled M·K·⌈N/t⌉ + K·N·⌈M/t⌉ (each A row-block once per tile column, each B
    column-block once per tile row)."""
    for name, value in (("M", M), ("N", N), ("K", K), ("tile", tile)):
        if int(value) < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    rows, cols, ks = _blocks(M, tile), _blocks(N, tile), _blocks(K, tile)
    if not (0 <= row < len(rows) and 0 <= col < len(cols)):
        raise ValueError(
            f"tile ({row}, {col}) is outside C's {len(rows)} × {len(cols)} tiles of {tile}×{tile}; "
            f"pick a row below {len(rows)} and a column below {len(cols)}"
        )
    untiled = 2 * M * N * K
    tiled = M * K * len(cols) + K * N * len(rows)
    loads = {
        "untiled": untiled,
        "tiled": tiled,
        "untiled per C element": untiled / (M * N),
        "tiled per C element": tiled / (M * N),
        "A element loaded, untiled": N,
        "A element loaded, tiled": len(cols),
        "B element loaded, untiled": M,
        "B element loaded, tiled": len(rows),
        "working set bytes": 3 * tile * tile * 4,  # one A, B and C tile of float32 in fast memory
    }
    return TilingView(
        M,
        N,
        K,
        tile,
        row,
        col,
        rows,
        cols,
        ks,
        (rows[row], cols[col]),
        [(rows[row], kb) for kb in ks],
        [(kb, cols[col]) for kb in ks],
        loads,
    )


def tiling_figure(view: TilingView):
    """B above C, A left of C; the selected C tile and the A and B tiles that feed it, each k-pair in one colour."""
    M, N, K = view.M, view.N, view.K
    fig = plt.figure(figsize=(8.6, 6.4))
    grid = fig.add_gridspec(2, 2, width_ratios=[K, N], height_ratios=[K, M], wspace=0.08, hspace=0.08)
    ax_b, ax_a, ax_c = fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    colours = plt.get_cmap("viridis")
    pairs = len(view.k_blocks)

    def board(ax, rows, cols, title, row_blocks, col_blocks):
        ax.set_xlim(0, cols)
        ax.set_ylim(rows, 0)
        ax.set_aspect("equal")
        ax.set_xticks([]), ax.set_yticks([])
        for start, _ in row_blocks[1:]:
            ax.axhline(start, color="0.75", linewidth=0.8)
        for start, _ in col_blocks[1:]:
            ax.axvline(start, color="0.75", linewidth=0.8)
        ax.set_title(title, fontsize=9)

    def fill(ax, rows, cols, colour, label=None):
        (r0, r1), (c0, c1) = rows, cols
        ax.add_patch(Rectangle((c0, r0), c1 - c0, r1 - r0, facecolor=colour, edgecolor="black", alpha=0.8))
        if label and (r1 - r0) * (c1 - c0) >= 4 and pairs <= 12:
            ax.text((c0 + c1) / 2, (r0 + r1) / 2, label, ha="center", va="center", fontsize=7, color="white")

    board(ax_a, M, K, f"A ({M}×{K})", view.row_blocks, view.k_blocks)
    board(ax_b, K, N, f"B ({K}×{N})", view.k_blocks, view.col_blocks)
    board(
        ax_c,
        M,
        N,
        f"C ({M}×{N}): {len(view.row_blocks)} × {len(view.col_blocks)} tiles",
        view.row_blocks,
        view.col_blocks,
    )
    for k, (a, b) in enumerate(zip(view.a_tiles, view.b_tiles, strict=True)):
        colour = colours(k / max(pairs - 1, 1) * 0.85)
        fill(ax_a, *a, colour, f"k{k}")
        fill(ax_b, *b, colour, f"k{k}")
    fill(ax_c, *view.c_tile, "tab:red", f"C{view.row},{view.col}")
    fig.add_subplot(grid[0, 0]).axis("off")
    loads = view.loads
    fig.suptitle(
        f"tile {view.tile}: C tile ({view.row}, {view.col}) = Σ of {pairs} products A tile @ B tile\n"
        f"loads per element of C: untiled {loads['untiled per C element']:.0f}, "
        f"tiled {loads['tiled per C element']:.1f}",
        fontsize=10,
    )
    return fig


def _tiling_text(view: TilingView) -> str:
    loads = view.loads
    (r0, r1), (c0, c1) = view.c_tile
    return (
        f"C tile ({view.row}, {view.col}) = C[{r0}:{r1}, {c0}:{c1}] = Σ over k-tiles of "
        f"A[{r0}:{r1}, k0:k1] @ B[k0:k1, {c0}:{c1}]: {len(view.k_blocks)} tile products\n"
        f"loads from memory per element of C: untiled {loads['untiled per C element']:.0f} (2K), "
        f"tiled {loads['tiled per C element']:.2f}  -> {loads['untiled'] / loads['tiled']:.1f}× fewer loads\n"
        f"each element of A is loaded {loads['A element loaded, untiled']}× untiled, "
        f"{loads['A element loaded, tiled']}× tiled; each element of B {loads['B element loaded, untiled']}× "
        f"untiled, {loads['B element loaded, tiled']}× tiled\n"
        f"fast memory one tile step needs (an A, a B and a C tile, float32): "
        f"{loads['working set bytes'] / 1024:.1f} KiB"
    )


def tiling_explorer(M: int = 20, N: int = 24, K: int = 16, tile: int = 8) -> Explorer:
    """Sliders for M, N, K, the tile size and the selected C tile; the tiles that feed it and the loads they save."""
    controls = {
        "M": int_slider("M (rows of C)", M, 1, 96),
        "N": int_slider("N (columns of C)", N, 1, 96),
        "K": int_slider("K (inner size)", K, 1, 96),
        "tile": int_slider("tile size", tile, 1, 32),
        "row": int_slider("C tile row", 0, 0, 0),
        "col": int_slider("C tile column", 0, 0, 0),
    }

    def render(**v):
        view = tiling_view(**v)
        return tiling_figure(view), _tiling_text(view)

    def limits(M, N, K, tile, row, col):
        return {"row": math.ceil(M / tile) - 1, "col": math.ceil(N / tile) - 1}

    return Explorer("GEMM tiling: C = A @ B tile by tile", controls, render, limits=limits)
