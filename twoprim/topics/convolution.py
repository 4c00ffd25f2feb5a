"""Convolution as GEMM (lesson 04, assignment ex04_conv): the loop specs, the output-size formula, a reference
conv2d built on im2col with one GEMM per group, the GEMM shapes and FLOPs of real layers, what im2col costs in
memory, and the figure of a receptive field beside the column it becomes.

Notation: x is (N, C, H, W), weight (O, C/groups, kh, kw), the output (N, O, Hout, Wout), L = Hout·Wout output
positions per sample. For one group the GEMM is W_g (M × K) @ cols_g (K × N'), with M = O/groups,
K = C/groups·kh·kw and N' = N·Hout·Wout.

`im2col_spec`, `conv2d_im2col` and `recorded_gemms` are ex04_conv's ground truth: each counts its calls (`uses`), so
a check can tell when an answer calls them instead of doing the work.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from twoprim.config import DATA
from twoprim.core.checks import counted
from twoprim.core.record import record_allocations, record_calls

if TYPE_CHECKING:  # the explorer's widget layer (and pyplot) is imported when an explorer is made
    from twoprim.topics.explorers import Explorer

__all__ = [
    "pair",
    "out_size",
    "conv2d_spec",
    "im2col_spec",
    "conv2d_im2col",
    "conv_flops",
    "recorded_gemms",
    "LAYERS",
    "allocations",
    "receptive_field_figure",
    "h200_conv_fact",
    "IM2COL_X",
    "Im2colView",
    "im2col_view",
    "im2col_explorer",
    "uses",
]

_USES: Counter = Counter()


def uses() -> Counter:
    """How many times each of ex04_conv's ground-truth functions here has been called (a copy)."""
    return Counter(_USES)


def pair(value: Any) -> tuple[int, int]:
    """An int or a pair of ints as (for the height, for the width), the way F.conv2d reads its arguments."""
    if isinstance(value, (tuple, list)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


def out_size(size: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    """Output length along one axis: ⌊(size + 2·padding − dilation·(kernel − 1) − 1) / stride⌋ + 1."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


# ----------------------------------------------------------------------------------------------------------------
# The specs: slow, obviously correct loops
# ----------------------------------------------------------------------------------------------------------------


def conv2d_spec(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
) -> torch.Tensor:
    """out[n,o,i,j] = b[o] + Σ_{c,p,q} w[o,c,p,q]·x[n, g·Cg + c, sh·i + dh·p − ph, sw·j + dw·q − pw], 0 outside x."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    N, C, H, W = x.shape
    O, Cg, kh, kw = weight.shape  # noqa: E741 - O output channels, as lesson 04 writes it
    Hout, Wout = out_size(H, kh, sh, ph, dh), out_size(W, kw, sw, pw, dw)
    xs, ws = x.tolist(), weight.tolist()  # nested Python lists of floats
    bs = bias.tolist() if bias is not None else [0.0] * O
    Og = O // groups  # output channels per group
    out = [[[[0.0] * Wout for _ in range(Hout)] for _ in range(O)] for _ in range(N)]
    for n in range(N):
        for o in range(O):
            g = o // Og  # the group of output channel o sees input channels g·Cg ... g·Cg + Cg − 1
            for i in range(Hout):
                for j in range(Wout):
                    total = bs[o]
                    for c in range(Cg):
                        for p in range(kh):
                            for q in range(kw):
                                r, s = sh * i + dh * p - ph, sw * j + dw * q - pw  # input row and column
                                if 0 <= r < H and 0 <= s < W:  # outside x lies the zero padding
                                    total += ws[o][c][p][q] * xs[n][g * Cg + c][r][s]
                    out[n][o][i][j] = total
    return torch.tensor(out, dtype=x.dtype).reshape(N, O, Hout, Wout)


def im2col_spec(x: torch.Tensor, kernel_size, stride=1, padding=0, dilation=1) -> torch.Tensor:
    """cols[n, c·kh·kw + p·kw + q, i·Wout + j] = x[n, c, sh·i + dh·p − ph, sw·j + dw·q − pw], 0 outside x (F.unfold)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = pair(kernel_size), pair(stride), pair(padding), pair(dilation)
    N, C, H, W = x.shape
    Hout, Wout = out_size(H, kh, sh, ph, dh), out_size(W, kw, sw, pw, dw)
    xs = x.tolist()
    cols = [[[0.0] * (Hout * Wout) for _ in range(C * kh * kw)] for _ in range(N)]
    for n in range(N):
        for i in range(Hout):
            for j in range(Wout):  # output position l = i·Wout + j: its receptive field becomes column l
                for c in range(C):
                    for p in range(kh):
                        for q in range(kw):
                            r, s = sh * i + dh * p - ph, sw * j + dw * q - pw
                            if 0 <= r < H and 0 <= s < W:
                                cols[n][c * kh * kw + p * kw + q][i * Wout + j] = xs[n][c][r][s]
    return torch.tensor(cols, dtype=x.dtype).reshape(N, C * kh * kw, Hout * Wout)


# ----------------------------------------------------------------------------------------------------------------
# The reference: im2col (torch's F.unfold) and one GEMM per group
# ----------------------------------------------------------------------------------------------------------------


def conv2d_im2col(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
) -> torch.Tensor:
    """F.conv2d as out_g = W_g (O/groups × K) @ cols_g (K × N·Hout·Wout), K = C/groups·kh·kw, one mm per group."""
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    N, C, H, W = x.shape
    O, Cg, kh, kw = weight.shape  # noqa: E741 - O output channels, as lesson 04 writes it
    Hout, Wout = out_size(H, kh, sh, ph, dh), out_size(W, kw, sw, pw, dw)
    M, K, L = O // groups, Cg * kh * kw, Hout * Wout
    cols = F.unfold(x, (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))  # (N, C·kh·kw, L)
    cols = cols.reshape(N, groups, K, L).permute(1, 2, 0, 3).reshape(groups, K, N * L)  # (groups, K, N·L)
    w = weight.reshape(groups, M, K)  # (groups, M, K)
    out = torch.stack([torch.mm(w[g], cols[g]) for g in range(groups)])  # groups × (M, K) @ (K, N·L) -> (M, N·L)
    out = out.reshape(O, N, Hout, Wout).permute(1, 0, 2, 3)  # (N, O, Hout, Wout)
    return out if bias is None else out + bias[None, :, None, None]


def conv_flops(x_shape, w_shape, stride=1, padding=0, dilation=1, groups: int = 1) -> int:
    """FLOPs of a convolution (2 per multiply-add): 2·N·O·Hout·Wout·(C/groups)·kh·kw, the sum over its GEMMs."""
    N, _, H, W = x_shape
    O, Cg, kh, kw = w_shape  # noqa: E741 - O output channels, as lesson 04 writes it
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return 2 * N * O * out_size(H, kh, sh, ph, dh) * out_size(W, kw, sw, pw, dw) * Cg * kh * kw


def recorded_gemms(
    x_shape,
    w_shape,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
) -> list:
    """The GEMMs `conv2d_im2col` runs for these shapes, as recorded ATen ops [(op, operand shapes), ...].

    It runs on the `meta` device: shapes and ops only, no memory and no arithmetic, so real layer sizes are free.
    """
    x = torch.empty(tuple(x_shape), device="meta")
    w = torch.empty(tuple(w_shape), device="meta")
    with record_calls() as log:
        conv2d_im2col(x, w, None, stride, padding, dilation, groups)
    return log.gemms


im2col_spec = counted(im2col_spec, _USES)
conv2d_im2col = counted(conv2d_im2col, _USES)
recorded_gemms = counted(recorded_gemms, _USES)


# Real layers at batch 32: (x shape, weight shape, stride, padding, dilation, groups).
LAYERS: dict[str, tuple] = {
    "ResNet-50 stem 7×7/2, 3→64": ((32, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1, 1),
    "ResNet-50 stage 1 3×3, 64→64": ((32, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, 1),
    "ResNet-50 stage 1 1×1, 256→64": ((32, 256, 56, 56), (64, 256, 1, 1), 1, 0, 1, 1),
    "ResNet-50 stage 3 3×3, 256→256": ((32, 256, 14, 14), (256, 256, 3, 3), 1, 1, 1, 1),
    "ResNeXt-50 stage 1 3×3, 128, 32 groups": ((32, 128, 56, 56), (128, 4, 3, 3), 1, 1, 1, 32),
    "MobileNetV2 depthwise 3×3, 144": ((32, 144, 56, 56), (144, 1, 3, 3), 1, 1, 1, 144),
}


# ----------------------------------------------------------------------------------------------------------------
# Memory: the tensors a computation creates
# ----------------------------------------------------------------------------------------------------------------


def allocations(fn: Callable[[], object]) -> dict:
    """Run `fn()` and measure the tensors its torch ops allocated: {"total": bytes, "largest": bytes, "op": name}.

    Counts every new buffer an ATen op returned (views and in-place results are not new). Memory a library
    allocates inside one op for its own use (a oneDNN or cuDNN workspace) is not visible here.
    """
    with record_allocations() as allocs:
        fn()
    buffers = [(a.op, a.storage_bytes) for a in allocs if a.new]
    if not buffers:
        return {"total": 0, "largest": 0, "op": None}
    op, largest = max(buffers, key=lambda b: b[1])
    return {"total": sum(b for _, b in buffers), "largest": largest, "op": op}


# ----------------------------------------------------------------------------------------------------------------
# The figure: a receptive field beside the column it becomes
# ----------------------------------------------------------------------------------------------------------------


def receptive_field_figure(
    x: torch.Tensor,
    kernel_size: int | tuple[int, int],
    *,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    position: tuple[int, int] = (0, 0),
):
    """Input channels (padding in grey) with the receptive field of output `position` outlined, beside
    cols = F.unfold(x) (C·kh·kw × Hout·Wout) with the column it becomes outlined. x is (C, H, W) or (1, C, H, W)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    x = x.detach()
    x = x[0] if x.dim() == 4 else x
    C, H, W = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = pair(kernel_size), pair(stride), pair(padding), pair(dilation)
    Hout, Wout = out_size(H, kh, sh, ph, dh), out_size(W, kw, sw, pw, dw)
    i, j = position
    if not (0 <= i < Hout and 0 <= j < Wout):
        raise ValueError(f"position {position} is outside the {Hout} × {Wout} output")
    col = i * Wout + j
    cols = F.unfold(x[None].double(), (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))[0]
    xp = F.pad(x.double(), (pw, pw, ph, ph))
    vmax = float(x.abs().max()) or 1.0
    hot, cmap = "tab:red", plt.get_cmap("Blues")

    width_in = C * (W + 2 * pw) + Hout * Wout + 4
    fig = plt.figure(figsize=(min(13.0, 0.42 * width_in + 1.5), max(3.6, 0.3 * C * kh * kw + 1.2)))
    grid = fig.add_gridspec(1, C + 1, width_ratios=[W + 2 * pw] * C + [Hout * Wout + 3], wspace=0.35)

    def cell_text(ax, r, c, value, bold=False, grey=False):
        ax.text(
            c,
            r,
            f"{value:g}",
            ha="center",
            va="center",
            fontsize=7,
            color="0.55" if grey else "black",
            fontweight="bold" if bold else "normal",
        )

    rows, cols_in_field = [sh * i + dh * p for p in range(kh)], [sw * j + dw * q for q in range(kw)]
    for c in range(C):
        ax = fig.add_subplot(grid[0, c])
        shade = (xp[c].abs() / vmax).numpy() * 0.5
        ax.imshow(shade, cmap=cmap, vmin=0, vmax=1)
        for r in range(H + 2 * ph):
            for s in range(W + 2 * pw):
                pad = not (ph <= r < H + ph and pw <= s < W + pw)
                if pad:
                    ax.add_patch(Rectangle((s - 0.5, r - 0.5), 1, 1, color="0.9"))
                cell_text(ax, r, s, float(xp[c, r, s]), bold=(r in rows and s in cols_in_field), grey=pad)
        for r in rows:
            for s in cols_in_field:
                ax.add_patch(Rectangle((s - 0.5, r - 0.5), 1, 1, fill=False, edgecolor=hot, linewidth=2))
        ax.set_xticks([]), ax.set_yticks([])
        ax.set_title(f"x[0, {c}]" + (" (padded)" if ph or pw else ""), fontsize=9)

    ax = fig.add_subplot(grid[0, C])
    ax.imshow((cols.abs() / vmax).numpy() * 0.5, cmap=cmap, vmin=0, vmax=1, aspect="auto")
    for r in range(C * kh * kw):
        for s in range(Hout * Wout):
            cell_text(ax, r, s, float(cols[r, s]), bold=(s == col))
    ax.add_patch(Rectangle((col - 0.5, -0.5), 1, C * kh * kw, fill=False, edgecolor=hot, linewidth=2))
    ax.set_yticks(
        range(C * kh * kw), [f"c{c} p{p} q{q}" for c in range(C) for p in range(kh) for q in range(kw)], fontsize=6
    )
    ax.set_xticks(range(Hout * Wout), [str(s) for s in range(Hout * Wout)], fontsize=6)
    ax.set_xlabel(f"column l = i·Wout + j  (Hout × Wout = {Hout} × {Wout})", fontsize=8)
    ax.set_title(f"cols (C·kh·kw × L) = ({C * kh * kw} × {Hout * Wout}); column {col} = output ({i}, {j})", fontsize=9)
    fig.suptitle(
        f"kernel {kh}×{kw}, stride ({sh}, {sw}), padding ({ph}, {pw}), dilation ({dh}, {dw}): "
        f"the receptive field of output ({i}, {j}) becomes column {col}",
        fontsize=10,
    )
    return fig


# ----------------------------------------------------------------------------------------------------------------
# Measured elsewhere
# ----------------------------------------------------------------------------------------------------------------


def h200_conv_fact() -> dict:
    """The im2col-vs-vendor convolution ratio measured for this course on an NVIDIA H200 (`gemm.h200_probe`)."""
    from twoprim.topics.gemm import H200_PROBE as path
    from twoprim.topics.gemm import h200_probe

    probe = h200_probe()
    return {
        "machine": f"{probe['device']}, torch {probe['torch']}",
        "what": "float16 conv, x of shape (32, 64, 56, 56), 3×3 kernel: im2col + GEMM against cuDNN (F.conv2d)",
        "ratio": float(probe["conv: im2col time / vendor time"]),
        "max error": float(probe["im2col conv maxerr"]),
        "file": str(path.relative_to(DATA.parent)),
    }


# ----------------------------------------------------------------------------------------------------------------
# The im2col explorer
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


def im2col_view(
    kernel_size=3,
    stride=1,
    padding=0,
    dilation=1,
    position=(0, 0),
    *,
    x: torch.Tensor | None = None,
    out_channels: int = 4,
) -> Im2colView:
    """Receptive field of output (i, j): x[c, s·i + d·p − pad, s·j + d·q − pad] for every (c, p, q), 0 outside x,
    which is column i·Wout + j of im2col(x). x is (1, C, H, W); by default the numbers 1, 2, ... in IM2COL_X."""
    x = torch.arange(1.0, math.prod(IM2COL_X) + 1).reshape(IM2COL_X) if x is None else x
    if x.dim() != 4 or x.shape[0] != 1:
        raise ValueError(f"x must have shape (1, C, H, W), got {tuple(x.shape)}")
    _, C, H, W = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (pair(v) for v in (kernel_size, stride, padding, dilation))
    Hout, Wout = out_size(H, kh, sh, ph, dh), out_size(W, kw, sw, pw, dw)
    if Hout < 1 or Wout < 1:
        raise ValueError(
            f"a {kh}×{kw} kernel with dilation ({dh}, {dw}) spans {dh * (kh - 1) + 1}×"
            f"{dw * (kw - 1) + 1} input numbers, more than the padded input's {H + 2 * ph}×{W + 2 * pw}: "
            f"there is no output position. Use a smaller kernel or dilation, or more padding."
        )
    i, j = position
    if not (0 <= i < Hout and 0 <= j < Wout):
        raise ValueError(
            f"output position ({i}, {j}) is outside the {Hout} × {Wout} output; pick a row below "
            f"{Hout} and a column below {Wout}"
        )
    field = [(c, sh * i + dh * p - ph, sw * j + dw * q - pw) for c in range(C) for p in range(kh) for q in range(kw)]
    patch = torch.tensor(
        [float(x[0, c, r, s]) if 0 <= r < H and 0 <= s < W else 0.0 for c, r, s in field], dtype=x.dtype
    )  # (C·kh·kw,)
    ((_, ((M, K), (_, N))),) = recorded_gemms(tuple(x.shape), (out_channels, C, kh, kw), (sh, sw), (ph, pw), (dh, dw))
    return Im2colView(
        x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), (i, j), (Hout, Wout), i * Wout + j, field, patch, (M, N, K)
    )


def _im2col_text(view: Im2colView) -> str:
    (i, j), (Hout, Wout) = view.position, view.out_hw
    M, N, K = view.gemm
    _, C, H, W = view.x.shape
    inside = sum(0 <= r < H and 0 <= s < W for _, r, s in view.field)
    return (
        f"output ({i}, {j}) of {Hout} × {Wout} -> column {view.column} = {i}·{Wout} + {j} of cols "
        f"({C * view.kernel_size[0] * view.kernel_size[1]} × {Hout * Wout})\n"
        f"column {view.column}: {[float(v) for v in view.patch]}\n"
        f"{inside} of its {len(view.field)} numbers come from x, {len(view.field) - inside} from the "
        f"zero padding\n"
        f"GEMM with {M} kernels: (M, K) @ (K, N) = ({M}, {K}) @ ({K}, {N}): M = O = {M}, "
        f"N = N·Hout·Wout = {N}, K = C·kh·kw = {K}"
    )


def im2col_explorer(kernel_size: int = 3, stride: int = 1, padding: int = 0, dilation: int = 1) -> Explorer:
    """Kernel size, stride, padding, dilation and the output position; its receptive field beside its column."""
    from twoprim.topics.explorers import Explorer, int_slider

    controls = {
        "kernel_size": int_slider("kernel size", kernel_size, 1, 4),
        "stride": int_slider("stride", stride, 1, 3),
        "padding": int_slider("padding", padding, 0, 2),
        "dilation": int_slider("dilation", dilation, 1, 3),
        "i": int_slider("output row i", 0, 0, 0),
        "j": int_slider("output column j", 0, 0, 0),
    }

    def render(kernel_size, stride, padding, dilation, i, j):
        view = im2col_view(kernel_size, stride, padding, dilation, (i, j))
        fig = receptive_field_figure(
            view.x, kernel_size, stride=stride, padding=padding, dilation=dilation, position=(i, j)
        )
        return fig, _im2col_text(view)

    def limits(kernel_size, stride, padding, dilation, i, j):
        _, _, H, W = IM2COL_X
        return {
            "i": max(out_size(H, kernel_size, stride, padding, dilation) - 1, 0),
            "j": max(out_size(W, kernel_size, stride, padding, dilation) - 1, 0),
        }

    return Explorer("im2col: a receptive field becomes a column", controls, render, limits=limits)
