"""Interactive explorers for lessons 02, 04, 05 and 08: GEMM tiles, im2col, attention weights, GEMM shapes.

Each explorer is three layers:

- a pure function of the control values that says what to draw (`tiling_view`, `im2col_view`, `attention_view`,
  `shape_point`); the tests check these without a browser;
- a figure function that draws that view with matplotlib;
- a thin ipywidgets 8 layer (`tiling_explorer`, `im2col_explorer`, `attention_explorer`, `shape_explorer`): the
  controls, a text readout, and the figure redrawn as a PNG into an Output widget whenever a control moves.

Displayed, an explorer carries the live widget and a PNG of its first state, so a viewer without widgets (nbviewer,
GitHub, an HTML export) shows a picture instead of a widget placeholder. Nothing needs a network or ipympl.

Why this module is long: four explorers, each three small layers (a pure view, a matplotlib figure, an ipywidgets
panel) that belong together; each explorer is one section.
"""
from __future__ import annotations

import base64
import html
import io
import math
import threading
import warnings
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from twoprim.topics import convolution as conv, gemm
from twoprim.core import timing

__all__ = [
    "TilingView", "tiling_view", "tiling_figure", "tiling_explorer",
    "IM2COL_X", "Im2colView", "im2col_view", "im2col_explorer",
    "SENTENCE", "HEADS", "AttentionView", "attention_view", "attention_figure", "attention_explorer",
    "Measurement", "measure_gemm", "ShapePoint", "shape_point", "padded", "shape_figure", "shape_explorer",
    "Explorer",
]

DPI = 80                        # PNGs small enough to redraw at every slider step
_DRAW = threading.Lock()        # pyplot is not thread-safe; the shape explorer draws from a measuring thread


# ----------------------------------------------------------------------------------------------------------------
# The widget layer shared by every explorer
# ----------------------------------------------------------------------------------------------------------------

def _png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed, so the inline backend never shows it a second time."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buffer.getvalue()


def _display_data(png: bytes, text: str) -> dict:
    """One nbformat display_data output holding a PNG, with `text` for viewers that show no images."""
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": text}}


class Explorer:
    """Controls over a render function `render(**values) -> (figure, readout text)`.

    The readout shows the text; the Output widget shows the figure as a PNG, replaced whole at every change.
    `limits(**values) -> {control name: new max}` keeps dependent controls in range (a tile index below the
    number of tiles). A ValueError from `render` is shown in the readout instead of a figure: it names what to
    change. Displayed, the explorer is its widget plus the PNG of its first state for viewers without widgets.
    A subclass that computes differently (the shape explorer measures) overrides `refresh` and passes no render.
    """

    def __init__(self, title: str, controls: Mapping[str, object], render: Callable[..., tuple] | None, *,
                 limits: Callable[..., Mapping[str, int]] | None = None, extra: Sequence[object] = ()):
        import ipywidgets as widgets

        self.title, self.controls, self._render, self._limits = title, dict(controls), render, limits
        self.readout = widgets.HTML()
        self.output = widgets.Output()
        grid = widgets.GridBox(list(self.controls.values()),
                               layout=widgets.Layout(grid_template_columns="repeat(3, minmax(240px, 1fr))"))
        self.widget = widgets.VBox([widgets.HTML(f"<b>{html.escape(title)}</b>"), grid, *extra, self.readout,
                                    self.output])
        self.text, self.png = "", b""
        self._adjusting = False
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.refresh()
        self.first_png, self.first_text = self.png, self.text

    @property
    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def _changed(self, change) -> None:
        if not self._adjusting:
            self.refresh()

    def refresh(self) -> None:
        """Bring dependent controls into range, render the current values and show the result."""
        if self._limits is not None:
            self._adjusting = True  # a max that clamps a value fires another change: one redraw is enough
            try:
                for name, top in self._limits(**self.values).items():
                    self.controls[name].max = top
            finally:
                self._adjusting = False
        try:
            with _DRAW:
                fig, text = self._render(**self.values)
                png = _png(fig)
        except ValueError as err:
            self.show(None, str(err), error=True)
        else:
            self.show(png, text)

    def say(self, text: str, *, error: bool = False) -> None:
        """Put `text` in the readout (red for an error)."""
        colour = "#b00020" if error else "inherit"
        self.readout.value = (f'<pre class="twoprim-readout" style="margin: 4px 0; color: {colour}; '
                              f'white-space: pre-wrap">{html.escape(text)}</pre>')

    def show(self, png: bytes | None, text: str, *, error: bool = False) -> None:
        """Put `text` in the readout and `png` (None: nothing) in the output."""
        self.text = text
        self.say(text, error=error)
        if png is not None:
            self.png = png
        self.output.outputs = () if png is None else (_display_data(png, text),)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        bundle = self.widget._repr_mimebundle_()  # the widget view (and its repr as text/plain)
        if self.first_png:
            bundle["image/png"] = base64.b64encode(self.first_png).decode("ascii")
        bundle["text/plain"] = f"{self.title} (interactive in JupyterLab)\n{self.first_text}"
        return bundle


def _int_slider(description: str, value: int, low: int, high: int, **kwargs):
    import ipywidgets as widgets

    return widgets.IntSlider(value=value, min=low, max=high, description=description,
                             style={"description_width": "110px"}, continuous_update=False, **kwargs)


def _blocks(size: int, tile: int) -> list[tuple[int, int]]:
    """[start, stop) of each tile along an axis of `size`; the last one is shorter when tile does not divide size."""
    return [(start, min(start + tile, size)) for start in range(0, size, tile)]


# ----------------------------------------------------------------------------------------------------------------
# GEMM tiling (lesson 02)
# ----------------------------------------------------------------------------------------------------------------

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
        raise ValueError(f"tile ({row}, {col}) is outside C's {len(rows)} × {len(cols)} tiles of {tile}×{tile}; "
                         f"pick a row below {len(rows)} and a column below {len(cols)}")
    untiled = 2 * M * N * K
    tiled = M * K * len(cols) + K * N * len(rows)
    loads = {
        "untiled": untiled, "tiled": tiled,
        "untiled per C element": untiled / (M * N), "tiled per C element": tiled / (M * N),
        "A element loaded, untiled": N, "A element loaded, tiled": len(cols),
        "B element loaded, untiled": M, "B element loaded, tiled": len(rows),
        "working set bytes": 3 * tile * tile * 4,  # one A, B and C tile of float32 in fast memory
    }
    return TilingView(M, N, K, tile, row, col, rows, cols, ks, (rows[row], cols[col]),
                      [(rows[row], kb) for kb in ks], [(kb, cols[col]) for kb in ks], loads)


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
    board(ax_c, M, N, f"C ({M}×{N}): {len(view.row_blocks)} × {len(view.col_blocks)} tiles", view.row_blocks,
          view.col_blocks)
    for k, (a, b) in enumerate(zip(view.a_tiles, view.b_tiles)):
        colour = colours(k / max(pairs - 1, 1) * 0.85)
        fill(ax_a, *a, colour, f"k{k}")
        fill(ax_b, *b, colour, f"k{k}")
    fill(ax_c, *view.c_tile, "tab:red", f"C{view.row},{view.col}")
    fig.add_subplot(grid[0, 0]).axis("off")
    loads = view.loads
    fig.suptitle(f"tile {view.tile}: C tile ({view.row}, {view.col}) = Σ of {pairs} products A tile @ B tile\n"
                 f"loads per element of C: untiled {loads['untiled per C element']:.0f}, "
                 f"tiled {loads['tiled per C element']:.1f}", fontsize=10)
    return fig


def _tiling_text(view: TilingView) -> str:
    loads = view.loads
    (r0, r1), (c0, c1) = view.c_tile
    return (f"C tile ({view.row}, {view.col}) = C[{r0}:{r1}, {c0}:{c1}] = Σ over k-tiles of "
            f"A[{r0}:{r1}, k0:k1] @ B[k0:k1, {c0}:{c1}]: {len(view.k_blocks)} tile products\n"
            f"loads from memory per element of C: untiled {loads['untiled per C element']:.0f} (2K), "
            f"tiled {loads['tiled per C element']:.2f}  -> {loads['untiled'] / loads['tiled']:.1f}× fewer loads\n"
            f"each element of A is loaded {loads['A element loaded, untiled']}× untiled, "
            f"{loads['A element loaded, tiled']}× tiled; each element of B {loads['B element loaded, untiled']}× "
            f"untiled, {loads['B element loaded, tiled']}× tiled\n"
            f"fast memory one tile step needs (an A, a B and a C tile, float32): "
            f"{loads['working set bytes'] / 1024:.1f} KiB")


def tiling_explorer(M: int = 20, N: int = 24, K: int = 16, tile: int = 8) -> Explorer:
    """Sliders for M, N, K, the tile size and the selected C tile; the tiles that feed it and the loads they save."""
    controls = {"M": _int_slider("M (rows of C)", M, 1, 96), "N": _int_slider("N (columns of C)", N, 1, 96),
                "K": _int_slider("K (inner size)", K, 1, 96), "tile": _int_slider("tile size", tile, 1, 32),
                "row": _int_slider("C tile row", 0, 0, 0), "col": _int_slider("C tile column", 0, 0, 0)}

    def render(**v):
        view = tiling_view(**v)
        return tiling_figure(view), _tiling_text(view)

    def limits(M, N, K, tile, row, col):
        return {"row": math.ceil(M / tile) - 1, "col": math.ceil(N / tile) - 1}

    return Explorer("GEMM tiling: C = A @ B tile by tile", controls, render, limits=limits)


# ----------------------------------------------------------------------------------------------------------------
# im2col (lesson 04)
# ----------------------------------------------------------------------------------------------------------------

IM2COL_X = (1, 2, 5, 5)  # (N, C, H, W) of the explorer's input: small enough to print every number


@dataclass(frozen=True)
class Im2colView:
    """The receptive field of output (i, j) and the im2col column it becomes.

    `field[r]` is (channel, input row, input column) of row r of the column, in F.unfold's order (channel, then
    kernel row, then kernel column); rows and columns outside 0..H-1, 0..W-1 lie in the zero padding. `gemm` is
    (M, N, K) of the convolution's GEMM with `out_channels` kernels: (O, N·Hout·Wout, C·kh·kw), as recorded.
    """

    x: torch.Tensor
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    position: tuple[int, int]
    out_hw: tuple[int, int]
    column: int
    field: list[tuple[int, int, int]]
    patch: torch.Tensor
    gemm: tuple[int, int, int]


def im2col_view(kernel_size=3, stride=1, padding=0, dilation=1, position=(0, 0), *,
                x: torch.Tensor | None = None, out_channels: int = 4) -> Im2colView:
    """Receptive field of output (i, j): x[c, s·i + d·p − pad, s·j + d·q − pad] for every (c, p, q), 0 outside x,
    which is column i·Wout + j of im2col(x). x is (1, C, H, W); by default the numbers 1, 2, ... in IM2COL_X."""
    x = torch.arange(1.0, math.prod(IM2COL_X) + 1).reshape(IM2COL_X) if x is None else x
    if x.dim() != 4 or x.shape[0] != 1:
        raise ValueError(f"x must have shape (1, C, H, W), got {tuple(x.shape)}")
    _, C, H, W = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (conv.pair(v) for v in (kernel_size, stride, padding, dilation))
    Hout, Wout = conv.out_size(H, kh, sh, ph, dh), conv.out_size(W, kw, sw, pw, dw)
    if Hout < 1 or Wout < 1:
        raise ValueError(f"a {kh}×{kw} kernel with dilation ({dh}, {dw}) spans {dh * (kh - 1) + 1}×"
                         f"{dw * (kw - 1) + 1} input numbers, more than the padded input's {H + 2 * ph}×{W + 2 * pw}: "
                         f"there is no output position. Use a smaller kernel or dilation, or more padding.")
    i, j = position
    if not (0 <= i < Hout and 0 <= j < Wout):
        raise ValueError(f"output position ({i}, {j}) is outside the {Hout} × {Wout} output; pick a row below "
                         f"{Hout} and a column below {Wout}")
    field = [(c, sh * i + dh * p - ph, sw * j + dw * q - pw) for c in range(C) for p in range(kh) for q in range(kw)]
    patch = torch.tensor([float(x[0, c, r, s]) if 0 <= r < H and 0 <= s < W else 0.0 for c, r, s in field],
                         dtype=x.dtype)  # (C·kh·kw,)
    (_, ((M, K), (_, N))), = conv.recorded_gemms(tuple(x.shape), (out_channels, C, kh, kw), (sh, sw), (ph, pw),
                                                  (dh, dw))
    return Im2colView(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), (i, j), (Hout, Wout), i * Wout + j, field, patch,
                      (M, N, K))


def _im2col_text(view: Im2colView) -> str:
    (i, j), (Hout, Wout) = view.position, view.out_hw
    M, N, K = view.gemm
    _, C, H, W = view.x.shape
    inside = sum(0 <= r < H and 0 <= s < W for _, r, s in view.field)
    return (f"output ({i}, {j}) of {Hout} × {Wout} -> column {view.column} = {i}·{Wout} + {j} of cols "
            f"({C * view.kernel_size[0] * view.kernel_size[1]} × {Hout * Wout})\n"
            f"column {view.column}: {[float(v) for v in view.patch]}\n"
            f"{inside} of its {len(view.field)} numbers come from x, {len(view.field) - inside} from the "
            f"zero padding\n"
            f"GEMM with {M} kernels: (M, K) @ (K, N) = ({M}, {K}) @ ({K}, {N}): M = O = {M}, "
            f"N = N·Hout·Wout = {N}, K = C·kh·kw = {K}")


def im2col_explorer(kernel_size: int = 3, stride: int = 1, padding: int = 0, dilation: int = 1) -> Explorer:
    """Kernel size, stride, padding, dilation and the output position; its receptive field beside its column."""
    controls = {"kernel_size": _int_slider("kernel size", kernel_size, 1, 4),
                "stride": _int_slider("stride", stride, 1, 3), "padding": _int_slider("padding", padding, 0, 2),
                "dilation": _int_slider("dilation", dilation, 1, 3), "i": _int_slider("output row i", 0, 0, 0),
                "j": _int_slider("output column j", 0, 0, 0)}

    def render(kernel_size, stride, padding, dilation, i, j):
        view = im2col_view(kernel_size, stride, padding, dilation, (i, j))
        fig = conv.receptive_field_figure(view.x, kernel_size, stride=stride, padding=padding, dilation=dilation,
                                          position=(i, j))
        return fig, _im2col_text(view)

    def limits(kernel_size, stride, padding, dilation, i, j):
        _, _, H, W = IM2COL_X
        return {"i": max(conv.out_size(H, kernel_size, stride, padding, dilation) - 1, 0),
                "j": max(conv.out_size(W, kernel_size, stride, padding, dilation) - 1, 0)}

    return Explorer("im2col: a receptive field becomes a column", controls, render, limits=limits)


# ----------------------------------------------------------------------------------------------------------------
# Attention (lesson 05)
# ----------------------------------------------------------------------------------------------------------------

SENTENCE = tuple("the cat sat on the mat because it was tired".split())
HEADS = ("previous token", "same word", "average", "random (untrained)")


@dataclass(frozen=True)
class AttentionView:
    """One head over SENTENCE: scores = q·kᵀ/(√D·T), −inf where the causal mask hides a key; weights = softmax."""

    tokens: tuple[str, ...]
    head: str
    causal: bool
    temperature: float
    query: int
    q: torch.Tensor        # (S, D)
    k: torch.Tensor        # (S, D)
    v: torch.Tensor        # (S, D)
    scores: torch.Tensor   # (S, S)
    weights: torch.Tensor  # (S, S), rows sum to 1
    out: torch.Tensor      # (S, D) = weights @ v


def _head_qkv(head: str, tokens: Sequence[str], D: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v (S, D) of a hand-built head: orthonormal word and position vectors, so each head's pattern is exact."""
    gen = torch.Generator().manual_seed(5)
    S, words = len(tokens), sorted(set(tokens))
    if not 1 <= S <= D:
        raise ValueError(f"the explorer's heads take 1 to {D} tokens (one orthonormal position vector each), got {S}")
    position = torch.linalg.qr(torch.randn(D, D, dtype=torch.float64, generator=gen))[0][:S]      # (S, D)
    word_basis = torch.linalg.qr(torch.randn(D, D, dtype=torch.float64, generator=gen))[0]        # (D, D)
    word = torch.stack([word_basis[words.index(t)] for t in tokens])                              # (S, D)
    sharp = 5 * math.sqrt(D)  # a matching pair scores 5 after the 1/√D scale
    if head == "previous token":   # query of token i = position of token i − 1
        q, k = torch.cat([position[:1], position[:-1]]) * sharp, position
    elif head == "same word":      # query = its own word: every token looks at the copies of its word
        q, k = word * sharp, word
    elif head == "average":        # a zero query scores every key the same: a plain average of the values
        q, k = torch.zeros(S, D, dtype=torch.float64), word + position
    elif head == "random (untrained)":
        q, k = torch.randn(S, D, dtype=torch.float64, generator=gen), torch.randn(S, D, dtype=torch.float64,
                                                                                   generator=gen)
    else:
        raise ValueError(f"head must be one of {', '.join(map(repr, HEADS))}, got {head!r}")
    return q, k, word  # values: the word vectors, so an output says which words it averaged


def attention_view(head: str = "previous token", causal: bool = True, temperature: float = 1.0, query: int = 7,
                   tokens: Sequence[str] = SENTENCE) -> AttentionView:
    """weights = softmax(q·kᵀ / (√D·T) + mask) for one head over `tokens`; out = weights @ v."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive (it divides the scores), got {temperature}")
    if not 0 <= query < len(tokens):
        raise ValueError(f"query must be a token index from 0 to {len(tokens) - 1}, got {query}")
    q, k, v = _head_qkv(head, tokens)
    S, D = q.shape
    scores = q @ k.T / (math.sqrt(D) * temperature)                       # (S, D) @ (D, S) -> (S, S)
    if causal:
        keep = torch.ones(S, S, dtype=torch.bool).tril()                  # key j <= query i
        scores = scores.masked_fill(~keep, -math.inf)
    weights = torch.softmax(scores, dim=-1)                               # (S, S)
    return AttentionView(tuple(tokens), head, causal, float(temperature), query, q, k, v, scores, weights,
                         weights @ v)                                     # (S, S) @ (S, D) -> (S, D)


def attention_figure(view: AttentionView):
    """Scores beside softmax weights, keys the mask hides in grey; the selected query's row outlined in both."""
    S = len(view.tokens)
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.9), layout="constrained")
    finite = view.scores[torch.isfinite(view.scores)]
    bound = max(float(finite.abs().max()) if finite.numel() else 1.0, 1e-9)
    hidden = ~torch.isfinite(view.scores)  # (S, S): masked keys, score -inf and weight 0
    panels = [(axes[0], view.scores, "coolwarm", (-bound, bound), "scores q·kᵀ / (√D·T)", "{:.1f}", 0.0),
              (axes[1], view.weights, "viridis", (0.0, 1.0), "weights = softmax(scores)", "{:.2f}", 0.05)]
    for ax, values, cmap, (lo, hi), title, fmt, smallest in panels:
        shown = values.masked_fill(hidden, float("nan"))
        image = ax.imshow(shown.numpy(), cmap=plt.get_cmap(cmap).with_extremes(bad="0.88"), vmin=lo, vmax=hi)
        ax.set_xticks(range(S), view.tokens, rotation=90)
        ax.set_yticks(range(S), [f"{t} ({n})" for n, t in enumerate(view.tokens)])
        ax.set(xlabel="key j", ylabel="query i")
        ax.set_title(title, fontsize=10)
        for i in range(S):
            for j in range(S):
                value = float(values[i, j])
                if not hidden[i, j] and abs(value) >= smallest:
                    dark = cmap == "viridis" and value < 0.6
                    ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=6,
                            color="white" if dark else "black")
        ax.add_patch(Rectangle((-0.5, view.query - 0.5), S, 1, fill=False, edgecolor="tab:red", linewidth=2))
        fig.colorbar(image, ax=ax, shrink=0.8)
    mask = "causal mask" if view.causal else "no mask"
    fig.suptitle(f"head: {view.head}, {mask}, temperature {view.temperature:.2g}: row i is where token i looks",
                 fontsize=10)
    return fig


def _attention_text(view: AttentionView) -> str:
    row = view.weights[view.query]
    order = sorted(range(len(row)), key=lambda j: -float(row[j]))
    top = ", ".join(f"'{view.tokens[j]}' ({j}) {float(row[j]):.2f}" for j in order[:3] if float(row[j]) > 0)
    hidden = int((row == 0).sum()) if view.causal else 0
    return (f"query {view.query} '{view.tokens[view.query]}' looks at: {top}\n"
            f"its weights sum to {float(row.sum()):.4f}; {hidden} later keys hidden by the mask get weight 0\n"
            f"temperature T divides the scores: T < 1 sharpens the softmax towards one key, T > 1 flattens it")


def attention_explorer(head: str = "previous token", causal: bool = True, temperature: float = 1.0,
                       query: int = 7) -> Explorer:
    """Head, causal mask, temperature and a query: the score heatmap and the softmax weights."""
    import ipywidgets as widgets

    style = {"description_width": "110px"}
    controls = {
        "head": widgets.Dropdown(options=HEADS, value=head, description="head", style=style),
        "causal": widgets.Checkbox(value=causal, description="causal mask", style=style),
        "temperature": widgets.FloatLogSlider(value=temperature, base=10, min=-1, max=1, step=0.1,
                                              description="temperature", style=style, continuous_update=False),
        "query": _int_slider("query token", query, 0, len(SENTENCE) - 1),
    }

    def render(**v):
        view = attention_view(**v)
        return attention_figure(view), _attention_text(view)

    return Explorer("Attention: scores, mask, temperature, softmax", controls, render)


# ----------------------------------------------------------------------------------------------------------------
# GEMM shapes on the roofline (lesson 08)
# ----------------------------------------------------------------------------------------------------------------

Measurement = timing.Fastest  # what measure_gemm returns


def measure_gemm(M: int, N: int, K: int, *, budget: float = 0.2, min_calls: int = 3, max_calls: int = 200,
                 stop: threading.Event | None = None, progress: Callable[[int, int], None] | None = None,
                 dtype: torch.dtype = torch.float32) -> Measurement | None:
    """Fastest single call of A (M×K) @ B (K×N), one call per step: `progress(done, planned)` after each, and no
    new call once `stop` is set. Returns None when stopped before any timed call."""
    gen = torch.Generator().manual_seed(0)
    A, B = torch.randn(M, K, generator=gen).to(dtype), torch.randn(K, N, generator=gen).to(dtype)  # (M, K), (K, N)
    return timing.fastest(lambda: A @ B, budget=budget, min_calls=min_calls, max_calls=max_calls, stop=stop,
                          progress=progress)  # (M, K) @ (K, N) -> (M, N)


def padded(size: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is at least `size`: ⌈size / multiple⌉ · multiple."""
    return -(-size // multiple) * multiple


@dataclass(frozen=True)
class ShapePoint:
    """One measured GEMM on the roofline: the shape asked for, the shape run (padded), and the time of one call.

    `gflops` counts the FLOPs of the shape asked for (2·M·N·K, the useful work) over the time of the shape run;
    `intensity` is the FLOPs per byte of the shape run, reading A and B and writing C once in float32.
    """

    M: int
    N: int
    K: int
    multiple: int
    run: tuple[int, int, int]
    seconds: float
    calls: int = 0
    stopped: bool = False

    @property
    def gflops(self) -> float:
        return timing.gflops(2 * self.M * self.N * self.K, self.seconds)

    @property
    def intensity(self) -> float:
        return gemm.gemm_intensity(*self.run)

    @property
    def extra_flops(self) -> float:
        """Fraction of FLOPs the padding adds: (Mp·Np·Kp − M·N·K) / (M·N·K)."""
        Mp, Np, Kp = self.run
        return Mp * Np * Kp / (self.M * self.N * self.K) - 1

    @property
    def label(self) -> str:
        shape = f"{self.M}×{self.N}×{self.K}"
        return shape if self.multiple == 1 else f"{shape}, padded to a multiple of {self.multiple}"


def shape_point(M: int, N: int, K: int, seconds: float, *, multiple: int = 1, calls: int = 0,
                stopped: bool = False) -> ShapePoint:
    """The roofline point of an M×N×K GEMM run as (M, N, K) padded up to `multiple` and timed at `seconds` a call."""
    for name, value in (("M", M), ("N", N), ("K", K), ("multiple", multiple)):
        if int(value) < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if not seconds > 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    run = (padded(M, multiple), padded(N, multiple), padded(K, multiple))
    return ShapePoint(M, N, K, multiple, run, seconds, calls, stopped)


def shape_figure(points: Sequence[ShapePoint], *, peak: float | None, bandwidth_gbs: float, peak_label: str,
                 note: str | None = None):
    """Lesson 02's roofline of this machine (gemm.roofline) with every measured point, numbered oldest first."""
    marks = {f"{n}. {p.label}": (p.intensity, p.gflops) for n, p in enumerate(points, start=1)}
    with warnings.catch_warnings():  # its first layout can clip the memory slope's label; redone below
        warnings.filterwarnings("ignore", message="Tight layout not applied")
        fig = gemm.roofline(peak, bandwidth_gbs, marks, title="GEMM shapes on this machine's roofline (float32)",
                            peak_label=peak_label, note=note)
    ax = fig.axes[0]
    # gemm.roofline starts the y axis just below the slowest point; with only fast GEMMs that hides the memory
    # slope and its label, so start it where the slope enters the plot.
    bottom = min(ax.get_ylim()[0], bandwidth_gbs * ax.get_xlim()[0])
    ax.set_ylim(bottom=bottom)
    for text in ax.texts:
        if text.get_text().startswith("ridge point"):
            text.set_y(bottom * 1.5)  # where gemm.roofline puts it: just above the bottom
    fig.set_size_inches(9.8, 4.4)  # room for the legend of six points
    fig.tight_layout()
    return fig


class ShapeExplorer(Explorer):
    """The GEMM shape explorer: each change of M, N, K or padding is measured in a background thread, with a
    progress bar and a Stop button, and its point joins the roofline (the last `keep` points stay).

    The first state is measured before the constructor returns, so the static picture shows a measured point.
    """

    def __init__(self, M: int, N: int, K: int, multiple: int, *, peak: float | None, peak_label: str,
                 bandwidth_gbs: float, budget: float, keep: int = 6, note: str | None = None):
        import ipywidgets as widgets

        self.peak, self.peak_label, self.bandwidth_gbs = peak, peak_label, bandwidth_gbs
        self.budget, self.keep, self.note = budget, keep, note
        self.points: list[ShapePoint] = []
        self._stop, self._thread = threading.Event(), None
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="calls timed",
                                            style={"description_width": "110px"})
        self.stop_button = widgets.Button(description="Stop", disabled=True, button_style="warning",
                                          tooltip="stop after the GEMM call that is running")
        self.stop_button.on_click(lambda _: self._stop.set())
        style = {"description_width": "110px"}
        controls = {"M": _int_slider("M", M, 1, 4096), "N": _int_slider("N", N, 1, 4096),
                    "K": _int_slider("K", K, 1, 4096),
                    "multiple": widgets.Dropdown(options=[("none", 1), ("to a multiple of 8", 8),
                                                          ("to a multiple of 16", 16), ("to a multiple of 64", 64),
                                                          ("to a multiple of 128", 128)],
                                                 value=multiple, description="padding", style=style)}
        super().__init__("GEMM shapes: GFLOP/s measured live, on the roofline", controls, render=None,
                         extra=[widgets.HBox([self.progress, self.stop_button])])

    def _changed(self, change) -> None:
        self.stop()
        self._stop.clear()
        self._thread = threading.Thread(target=self.refresh, daemon=True, name="twoprim-gemm-shapes")
        self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop a running measurement after its current GEMM call, and wait for it."""
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the running measurement, if any, to finish."""
        if self._thread is not None:
            self._thread.join(timeout)

    def refresh(self) -> None:
        """Measure the current shape (and its padded version), then redraw the roofline with the new points."""
        M, N, K, multiple = (self.values[name] for name in ("M", "N", "K", "multiple"))
        new = self._measure(M, N, K, multiple)
        self.points = (self.points + new)[-self.keep:]
        if not self.points:
            self.show(None, "stopped before the first timed call: no point to show. Move a slider to measure "
                            "again.", error=True)
            return
        with _DRAW:
            png = _png(shape_figure(self.points, peak=self.peak, bandwidth_gbs=self.bandwidth_gbs,
                                    peak_label=self.peak_label, note=self.note))
        self.show(png, self._text(new, M, N, K))

    def _measure(self, M: int, N: int, K: int, multiple: int) -> list[ShapePoint]:
        """The shape as asked and, with padding, padded: one point each, in small steps that Stop can end."""
        runs = [1] + ([multiple] if multiple > 1 else [])
        self.say(f"measuring {M}×{N}×{K} ..." + (f" and padded to a multiple of {multiple}" if multiple > 1 else ""))
        self.progress.value = 0
        self.stop_button.disabled = False
        new: list[ShapePoint] = []
        try:
            for n, mult in enumerate(runs):
                def progress(done: int, planned: int, n: int = n) -> None:
                    self.progress.max = planned * len(runs)
                    self.progress.value = planned * n + done

                result = measure_gemm(padded(M, mult), padded(N, mult), padded(K, mult), budget=self.budget,
                                      stop=self._stop, progress=progress)
                if result is None:
                    break
                new.append(shape_point(M, N, K, result.seconds, multiple=mult, calls=result.calls,
                                       stopped=result.stopped))
                if result.stopped:
                    break
        finally:
            self.stop_button.disabled = True
        return new

    def _text(self, new: Sequence[ShapePoint], M: int, N: int, K: int) -> str:
        if not new:
            return f"stopped before the first timed call of {M}×{N}×{K}: no new point"
        lines = []
        for p in new:
            roof = min(self.peak or math.inf, self.bandwidth_gbs * p.intensity)
            status = f"STOPPED after {p.calls} of the planned calls" if p.stopped else f"fastest of {p.calls} calls"
            lines.append(f"{p.label}: {p.seconds * 1e3:.3f} ms a call ({status}), {p.gflops:.1f} GFLOP/s of "
                         f"2·M·N·K; intensity {p.intensity:.1f} FLOP/byte, roof there {roof:,.0f} GFLOP/s")
            if self.peak and p.gflops > self.peak:
                lines.append("  faster than the estimated peak: one of its factors (most likely the clock) is too "
                             "low for this machine")
        if len(new) == 2:
            lines.append(f"padding adds {new[1].extra_flops:.2%} FLOPs and runs the asked-for product "
                         f"{new[1].gflops / new[0].gflops:.2f}× as fast (not counting the copy into padded buffers)")
        return "\n".join(lines)


def _peak_for_threads(threads: int) -> tuple[float | None, str]:
    """gemm.peak_estimate scaled to the cores `threads` torch threads can use, with a label saying so."""
    estimate = gemm.peak_estimate(torch.float32)
    if estimate.gflops is None or not estimate.cores:
        return None, "estimated peak"
    cores = min(threads, estimate.cores)
    return estimate.gflops * cores / estimate.cores, f"estimated peak of {cores} core{'s' if cores > 1 else ''}"


def shape_explorer(M: int = 256, N: int = 256, K: int = 256, multiple: int = 1, *, budget: float = 0.2,
                   bandwidth_gbs: float | None = None, peak: float | None = None) -> ShapeExplorer:
    """Pick M, N, K and padding; GFLOP/s measured live (torch's current threads) on lesson 02's roofline.

    Without `bandwidth_gbs` it is measured here (gemm.bandwidth, about half a second); without `peak` it is
    gemm.peak_estimate scaled to the cores torch's threads can use. Each measurement runs for about `budget`
    seconds per shape, in a background thread, and can be stopped.
    """
    threads = torch.get_num_threads()
    label = "estimated peak"
    if peak is None:
        peak, label = _peak_for_threads(threads)
    if bandwidth_gbs is None:
        bandwidth_gbs = max(gemm.bandwidth(64 * 2**20, min_run_time=0.05).values())
    note = f"torch {torch.__version__}, {threads} thread{'s' if threads > 1 else ''}; peak estimated, rest measured"
    return ShapeExplorer(M, N, K, multiple, peak=peak, peak_label=label, bandwidth_gbs=bandwidth_gbs, budget=budget,
                         note=note)
