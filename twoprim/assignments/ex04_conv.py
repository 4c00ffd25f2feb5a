"""Checks for assignment ex04_conv: im2col, conv2d as one GEMM per group, and the GEMM shape of a convolution.

Visible checks run with the default cases below; the hidden checks in the solution notebook pass their own cases
(built with the same builders) and `hidden=0`. Oracles: `F.unfold` (exact), `F.conv2d` in float64, and for
`conv_gemm_shape` the GEMM operand shapes that the reference `twoprim.topics.convolution.conv2d_im2col` actually
multiplies, recorded with `record_calls` at check time.

What the rules allow, precisely:
- `im2col` moves numbers and computes nothing: any indexing, slicing, padding, `Tensor.unfold`, `as_strided`,
  `reshape`/`permute`, `cat`/`stack`, `gather` is fine, and a Python loop over the kh·kw kernel offsets is fine.
  Not allowed: `F.unfold` / `nn.Unfold` (ATen `im2col`), `F.fold` (ATen `col2im`), any convolution op, any
  dot/GEMM op, and a Python loop over output positions (the number of tensor ops may grow with kh·kw, not with
  the number of positions).
- `conv2d_gemm` may call the learner's `im2col` (or `F.unfold`, which computes the same thing) and any tensor op,
  but no convolution op (`F.conv2d`, `torch.conv2d`, `nn.Conv2d`, ATen `convolution`, `_convolution`,
  `mkldnn_convolution`, ...: every op whose name contains "conv" but not "convert"). Its dot/GEMM ops must do
  exactly the convolution's 2·N·O·Hout·Wout·(C/groups)·kh·kw FLOPs, in either `groups` GEMM ops (one per group)
  or one batched GEMM op (`bmm`, a 3-D `matmul` or `einsum`) that does them all.
- No graded function may call the course's reference code in `twoprim.conv` (`im2col_spec`, `conv2d_im2col`,
  `recorded_gemms`): the grader's ground truth (`no_grader_calls`).

Why this module is long: three graded functions, each with its guard, case builders for every argument and memory
layout (every rule the exercise states has a visible case), an oracle and a judge that names the likely mistake.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from twoprim.core import guards
from twoprim.core.cases import dtype_name, randn
from twoprim.core.checks import (
    GEMM_ATEN,
    GEMM_FUNCTIONS,
    Axis,
    CallLog,
    Case,
    CheckResult,
    Mismatch,
    Rule,
    judge_tensor,
    no_grader_calls,
    run_check,
)
from twoprim.topics import convolution
from twoprim.topics.convolution import conv_flops, out_size, pair, recorded_gemms

__all__ = [
    "im2col_args",
    "conv_args",
    "conv_shape_args",
    "im2col_cases",
    "conv_cases",
    "shape_cases",
    "layer_shape_cases",
    "check_im2col",
    "check_conv2d_gemm",
    "check_conv_gemm_shape",
]

TASK = "ex04_conv"


# ----------------------------------------------------------------------------------------------------------------
# Guards: a clear error naming the shapes, as F.conv2d / F.unfold would refuse the same call
# ----------------------------------------------------------------------------------------------------------------


def _int(fn: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{fn}: {name} must be an int or a pair of ints, got {type(value).__name__} {value!r}.")
    if value < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {value}.")
    return value


def _pair(fn: str, name: str, value: Any, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each >= minimum."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(
                f"{fn}: {name} must be an int or a pair (for the height, for the width), got "
                f"{value!r} of length {len(value)}."
            )
        return _int(fn, name, value[0], minimum), _int(fn, name, value[1], minimum)
    v = _int(fn, name, value, minimum)
    return v, v


def _shape(fn: str, name: str, value: Any) -> tuple[int, int, int, int]:
    if isinstance(value, torch.Size):
        value = tuple(value)
    if not isinstance(value, (tuple, list)) or len(value) != 4:
        raise TypeError(f"{fn}: {name} must be a tuple of 4 ints, got {value!r}.")
    for v in value:
        _int(fn, f"every entry of {name}", v, 1)
    return tuple(value)


def _fits(fn: str, x_shape, kernel, stride, padding, dilation, what: str) -> None:
    """The dilated kernel fits in the padded input along both axes, so there is at least one output position."""
    H, W = x_shape[2], x_shape[3]
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    span = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
    padded = (H + 2 * ph, W + 2 * pw)
    if span[0] > padded[0] or span[1] > padded[1]:
        raise ValueError(
            f"{fn}: the padded input is {padded[0]} × {padded[1]} (x of shape {tuple(x_shape)}, padding {padding}) "
            f"but the {what} spans {span[0]} × {span[1]} (kernel {kernel}, dilation {dilation}); a kernel can't be "
            f"larger than the padded input (F.conv2d refuses it too). Pad more or use a smaller kernel."
        )


def _conv_shapes(fn: str, x_shape, w_shape, stride, padding, dilation, groups) -> tuple:
    """F.conv2d's shape rules: O and C divisible by groups, C == groups·weight.shape[1], the kernel fits."""
    s, p, d = _pair(fn, "stride", stride, 1), _pair(fn, "padding", padding, 0), _pair(fn, "dilation", dilation, 1)
    g = _int(fn, "groups", groups, 1)
    N, C, H, W = x_shape
    O, Cg, kh, kw = w_shape  # noqa: E741 - O output channels, as lesson 04 writes it
    if O % g:
        raise ValueError(
            f"{fn}: groups={g} must divide the output channels, but weight has shape {tuple(w_shape)}: "
            f"{O} output channels are not a multiple of {g}."
        )
    if g * Cg != C:
        extra = f" (and groups={g} must divide x's {C} channels)" if C % g else ""
        raise ValueError(
            f"{fn}: weight of shape {tuple(w_shape)} with groups={g} expects x with {g * Cg} channels "
            f"(groups × weight.shape[1] = {g} × {Cg}), but x has shape {tuple(x_shape)}: {C} channels"
            f"{extra}."
        )
    _fits(fn, x_shape, (kh, kw), s, p, d, "kernel")
    return s, p, d


def im2col_args(fn: str, x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> tuple:
    """x a 4-D floating tensor (N, C, H, W); returns (kh, kw), (sh, sw), (ph, pw), (dh, dw)."""
    guards.tensor(fn, "x", x, ndim=4)
    k = _pair(fn, "kernel_size", kernel_size, 1)
    s, p, d = _pair(fn, "stride", stride, 1), _pair(fn, "padding", padding, 0), _pair(fn, "dilation", dilation, 1)
    _fits(fn, tuple(x.shape), k, s, p, d, "kernel")
    return k, s, p, d


def conv_args(fn: str, x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: Any) -> tuple:
    """x (N, C, H, W), weight (O, C/groups, kh, kw), bias None or (O,), one dtype; returns the three pairs."""
    guards.tensor(fn, "x", x, ndim=4)
    guards.tensor(fn, "weight", weight, ndim=4)
    guards.same_dtype(fn, x=x, weight=weight)
    if bias is not None:
        guards.tensor(fn, "bias", bias, ndim=1)
        if bias.shape[0] != weight.shape[0]:
            raise ValueError(
                f"{fn}: bias has shape {tuple(bias.shape)} but weight has shape {tuple(weight.shape)}; "
                f"bias must be ({weight.shape[0]},): one number per output channel."
            )
        guards.same_dtype(fn, x=x, bias=bias)
    return _conv_shapes(fn, tuple(x.shape), tuple(weight.shape), stride, padding, dilation, groups)


def conv_shape_args(
    fn: str, x_shape: Any, w_shape: Any, stride: Any, padding: Any, dilation: Any, groups: Any
) -> tuple:
    """Shapes as tuples of 4 ints, consistent as F.conv2d requires; returns (sh, sw), (ph, pw), (dh, dw)."""
    x_shape, w_shape = _shape(fn, "x_shape", x_shape), _shape(fn, "w_shape", w_shape)
    return _conv_shapes(fn, x_shape, w_shape, stride, padding, dilation, groups)


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run)
# ----------------------------------------------------------------------------------------------------------------


def _input(shape, dtype, gen, layout: str | None) -> torch.Tensor:
    """A random tensor of `shape`; layout None (contiguous), "channels_last", "sliced" (a crop of a larger tensor,
    every other column: x.view(-1) fails on it) or "transposed" (H and W swapped in memory)."""
    N, C, H, W = shape
    if layout == "sliced":
        return torch.randn(N, C, H + 1, 2 * W + 1, generator=gen, dtype=torch.float64).to(dtype)[:, :, 1:, 1::2]
    if layout == "transposed":  # drawn (N, C, W, H), then H and W swapped
        return randn(shape, dtype, gen, "transposed")
    t = randn(shape, dtype, gen)
    if layout == "channels_last":
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def _settings(kwargs: dict) -> str:
    parts = [f"{k} {v}" for k, v in kwargs.items()]
    return ", ".join(parts) if parts else "default stride, padding and dilation"


def im2col_cases(
    configs: Sequence[tuple],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    layout: str | None = None,
    seed: int = 0,
) -> list[Case]:
    """configs: (x_shape, kernel_size, {"stride": ..., "padding": ..., "dilation": ...}) with only the given keys
    passed; one case per config × dtype."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for x_shape, kernel_size, kwargs in configs:
            x = _input(x_shape, dtype, gen, layout)
            label = f"x {tuple(x_shape)}, kernel_size {kernel_size}, {_settings(kwargs)}, {dtype_name(dtype)}"
            if layout:
                label += f", {layout} (non-contiguous) input"
            cases.append(Case(label, (x, kernel_size), dict(kwargs)))
    return cases


def conv_cases(
    configs: Sequence[tuple],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    bias: bool = True,
    layout: str | None = None,
    seed: int = 0,
) -> list[Case]:
    """configs: (x_shape, w_shape, {"stride", "padding", "dilation", "groups": ...}); one case per config × dtype,
    with a bias of shape (O,) when `bias` (passed as a keyword), without one otherwise."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for x_shape, w_shape, kwargs in configs:
            x = _input(x_shape, dtype, gen, layout)
            w = randn(w_shape, dtype, gen)
            kw = dict(kwargs)
            if bias:
                kw = {"bias": randn((w_shape[0],), dtype, gen), **kw}
            label = (
                f"x {tuple(x_shape)}, weight {tuple(w_shape)}, {'bias' if bias else 'no bias'}, "
                f"{_settings(kwargs)}, {dtype_name(dtype)}"
            )
            if layout:
                label += f", {layout} (non-contiguous) input"
            cases.append(Case(label, (x, w), kw))
    return cases


def shape_cases(configs: Sequence[tuple], names: Sequence[str] | None = None) -> list[Case]:
    """configs: (x_shape, w_shape, stride, padding, dilation, groups), passed positionally as the API says."""
    cases = []
    for i, (x_shape, w_shape, s, p, d, g) in enumerate(configs):
        label = f"x_shape {tuple(x_shape)}, w_shape {tuple(w_shape)}, stride {s}, padding {p}, dilation {d}, groups {g}"
        if names:
            label = f"{names[i]}: {label}"
        cases.append(Case(label, (tuple(x_shape), tuple(w_shape), s, p, d, g)))
    return cases


def layer_shape_cases() -> list[Case]:
    """Every real layer of `twoprim.topics.convolution.LAYERS` (ResNet-50, ResNeXt-50, MobileNetV2 at batch 32)."""
    from twoprim.topics.convolution import LAYERS

    return shape_cases(list(LAYERS.values()), list(LAYERS))


# ----------------------------------------------------------------------------------------------------------------
# Rules
# ----------------------------------------------------------------------------------------------------------------

_CONV = re.compile(r"conv(?!ert)", re.IGNORECASE)


def _conv_calls(log: CallLog) -> list[str]:
    hits = [name for name in log.functions if _CONV.search(name.rsplit(".", 1)[-1])]
    hits += [f"aten.{name}" for name in log.aten if _CONV.search(name)]
    return sorted(hits)


def _no_conv(next_step: str) -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        hits = _conv_calls(log)
        if hits:
            return f"it called {', '.join(hits)}: a convolution op, which this exercise rules out"
        return None

    return Rule("no convolution op (F.conv2d, torch.conv2d, nn.Conv2d, ATen convolution, ...)", test, next_step)


_UNFOLD_FUNCTIONS = {"torch.nn.functional.unfold", "torch.nn.functional.fold"}


def _no_unfold() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        hits = [n for n in log.functions if n in _UNFOLD_FUNCTIONS or n.rsplit(".", 1)[-1] in ("im2col", "col2im")]
        hits += [f"aten.{n}" for n in log.aten if n in ("im2col", "col2im")]
        if hits:
            return f"it called {', '.join(sorted(hits))}: torch's own im2col, the function you are writing"
        return None

    return Rule(
        "no F.unfold, nn.Unfold or F.fold (torch's im2col)",
        test,
        "pad x, then take sliding windows with Tensor.unfold (x.unfold(dim, size, step), a view) or slices, "
        "and reshape the windows into columns; twoprim.topics.convolution.im2col_spec shows the indexing",
    )


def _no_gemm_in_im2col() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        hits = log.used(GEMM_FUNCTIONS, GEMM_ATEN)
        if hits:
            return (
                f"it called {', '.join(sorted(hits))}: im2col only moves numbers; multiplying by a 0/1 matrix "
                f"to pick them costs a GEMM (and its FLOPs) that the convolution does not need"
            )
        return None

    return Rule(
        "im2col moves numbers: no dot or GEMM ops",
        test,
        "select the windows by indexing, slicing or Tensor.unfold instead of multiplying by a selection matrix",
    )


def _im2col_vectorised(base: int = 40, per_offset: int = 8) -> Rule:
    """The number of ATen ops may grow with the kernel's kh·kw offsets, never with the output positions."""

    def test(log: CallLog, case: Case) -> str | None:
        kh, kw = pair(case.args[1])
        allowed = base + per_offset * kh * kw
        if log.total > allowed:
            return (
                f"it ran {log.total} tensor (ATen) ops for a {kh}×{kw} kernel; building the columns with a "
                f"fixed number of ops, or a few per kernel offset, stays under {allowed}, so this loops in "
                f"Python over samples, channels or output positions"
            )
        return None

    return Rule(
        "vectorised: no Python loop over output positions (a loop over the kh·kw kernel offsets is fine)",
        test,
        "take every window at once: x_padded.unfold(2, ...).unfold(3, ...) gives all of them as a view",
    )


def _conv_geometry(case: Case) -> tuple:
    x, w = case.args[:2]
    kw = case.kwargs
    return (
        tuple(x.shape),
        tuple(w.shape),
        kw.get("stride", 1),
        kw.get("padding", 0),
        kw.get("dilation", 1),
        kw.get("groups", 1),
    )


def _gemms_do_the_flops() -> Rule:
    """All of the convolution's FLOPs run in dot/GEMM ops: `groups` of them, or one batched GEMM."""

    def test(log: CallLog, case: Case) -> str | None:
        x_shape, w_shape, s, p, d, groups = _conv_geometry(case)
        want = conv_flops(x_shape, w_shape, s, p, d, groups)
        ops = [op for op, _ in log.gemms]
        listing = ", ".join(f"{op} ×{ops.count(op)}" for op in dict.fromkeys(ops)) or "none"
        got = log.gemm_flops()
        if got != want:
            if got == 0:
                return (
                    f"it ran no dot/GEMM op (GEMM ops: {listing}): the products were summed by element-wise "
                    f"ops instead of a matrix multiply; the convolution needs {want:,} FLOPs in GEMMs"
                )
            return (
                f"its dot/GEMM ops ({listing}) did {got:,} FLOPs, but the convolution needs exactly "
                f"2·N·O·Hout·Wout·(C/groups)·kh·kw = {want:,}"
            )
        if len(ops) not in (1, groups):
            N = x_shape[0]
            why = f" — one per sample for N={N}: a Python loop over samples" if len(ops) in (N, N * groups) else ""
            return (
                f"it ran {len(ops)} dot/GEMM ops ({listing}) for groups={groups}; allowed: {groups} (one per "
                f"group) or 1 (one batched GEMM){why}"
            )
        return None

    return Rule(
        "the FLOPs run in GEMMs: one per group (or one batched GEMM), no loop over samples or positions",
        test,
        "reshape the columns to (C/groups·kh·kw, N·Hout·Wout) per group so that one GEMM covers every "
        "sample and position of that group: W_g (M, K) @ cols_g (K, N·Hout·Wout)",
    )


# ----------------------------------------------------------------------------------------------------------------
# Oracles and judges
# ----------------------------------------------------------------------------------------------------------------


def _im2col_expected(x, kernel_size, stride=1, padding=0, dilation=1):
    return F.unfold(x, kernel_size, dilation=dilation, padding=padding, stride=stride)


def _output_size(x_shape, kernel, stride, padding, dilation) -> tuple[int, int]:
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = pair(kernel), pair(stride), pair(padding), pair(dilation)
    return out_size(x_shape[2], kh, sh, ph, dh), out_size(x_shape[3], kw, sw, pw, dw)


def _im2col_axes(case: Case) -> list[Axis]:
    """cols (N, C·kh·kw, Hout·Wout): row c·kh·kw + p·kw + q is channel c at kernel offset (p, q); column i·Wout + j
    is output position (i, j)."""
    x, kernel = case.args[:2]
    kw_ = case.kwargs
    (kh, kw) = pair(kernel)
    hout, wout = _output_size(
        tuple(x.shape), kernel, kw_.get("stride", 1), kw_.get("padding", 0), kw_.get("dilation", 1)
    )
    return [
        Axis("batch"),
        Axis("row", (("channel", x.shape[1]), ("kernel row", kh), ("kernel column", kw))),
        Axis("column", (("output row", hout), ("output column", wout))),
    ]


def _judge_im2col(got, want, case: Case) -> str:
    return judge_tensor(got, want, atol=0.0, rtol=0.0, what="cols (N, C·kh·kw, Hout·Wout)", axes=_im2col_axes(case))


def _conv_expected(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    b = None if bias is None else bias.double()
    return F.conv2d(x.double(), weight.double(), b, stride, padding, dilation, groups).to(x.dtype)


CONV_TOLERANCE_K = 8


def _judge_conv(got, want, case: Case) -> str:
    """|got − expected| <= 8·eps(dtype)·max Σ|w·x| (+|b|) + eps·|expected|: a sum of products' error bound."""
    x, w = case.args
    kw = case.kwargs
    bias = kw.get("bias")
    b = None if bias is None else bias.double().abs()
    abs_sum = F.conv2d(
        x.double().abs(),
        w.double().abs(),
        b,
        kw.get("stride", 1),
        kw.get("padding", 0),
        kw.get("dilation", 1),
        kw.get("groups", 1),
    )
    eps = torch.finfo(x.dtype).eps
    atol = CONV_TOLERANCE_K * eps * float(abs_sum.max()) + torch.finfo(x.dtype).tiny
    groups, O = kw.get("groups", 1), w.shape[0]  # noqa: E741 - O output channels, as lesson 04 writes it
    channel = Axis("output channel", (("group", groups), ("channel of the group", O // groups)) if groups > 1 else ())
    axes = [Axis("batch"), channel, Axis("output row"), Axis("output column")]
    return judge_tensor(got, want, atol=atol, rtol=eps, what="the output (N, O, Hout, Wout)", axes=axes)


def _gemm_shape_expected(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1):
    """(M, N, K) read from the GEMMs the reference conv multiplies for these shapes (recorded on the meta device)."""
    gemms = recorded_gemms(x_shape, w_shape, stride, padding, dilation, groups)
    shapes = {shapes for _, shapes in gemms}
    assert len(gemms) == groups and len(shapes) == 1, f"reference conv ran {gemms}"  # one mm per group, all alike
    (M, K), (_, N) = next(iter(shapes))
    return (M, N, K)


def _judge_gemm_shape(got, want, case: Case) -> str:
    x_shape, w_shape, s, p, d, groups = case.args
    M, N, K = want
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Mismatch(
            f"{got!r}, but conv_gemm_shape returns a tuple of three ints (M, N, K)",
            next_step="return (M, N, K) as a tuple, e.g. return (M, N, K)",
        )
    try:
        values = tuple(operator.index(v) for v in got)
        if any(isinstance(v, bool) for v in got):
            raise TypeError
    except TypeError:
        raise Mismatch(
            f"{got!r}: M, N and K must be ints (not floats or tensors)",
            next_step="use integer division // and int(...), never /, for sizes",
        ) from None
    if values == want:
        return ""
    wrong = [n for n, g, e in zip("MNK", values, want, strict=True) if g != e]
    hints = {
        "M": f"M is the output channels of one group: O/groups = {w_shape[0]}/{groups}",
        "N": (
            "N counts every output position of every sample: N·Hout·Wout, with "
            "Hout = ⌊(H + 2·ph − dh·(kh − 1) − 1)/sh⌋ + 1 and Wout likewise"
        ),
        "K": (
            f"K is one column's length: (C/groups)·kh·kw = weight.shape[1]·kh·kw = "
            f"{w_shape[1]}·{w_shape[2]}·{w_shape[3]}"
        ),
    }
    raise Mismatch(
        f"(M, N, K) = {values}: {', '.join(wrong)} wrong; the reference conv multiplied {groups} GEMM"
        f"{'s' if groups > 1 else ''} of (M, K) @ (K, N) = ({M}, {K}) @ ({K}, {N})",
        next_step="; ".join(hints[n] for n in wrong),
    )


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def _own(fn: Callable, next_step: str) -> tuple[Callable, Rule]:
    """`fn` watched for calls to the course's reference convolution code, and the rule that refuses them."""
    return no_grader_calls(
        fn,
        {"twoprim.conv": convolution.uses},
        next_step=next_step,
        why="the reference code the grader compares with (im2col_spec, conv2d_im2col, recorded_gemms)",
    )


def check_im2col(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `im2col`: the columns of every receptive field, exactly as F.unfold, with stride, padding and dilation."""
    if cases is None:
        cases = (
            im2col_cases(
                [((2, 3, 16, 16), 3, {}), ((1, 2, 7, 8), (2, 3), {"stride": 2, "padding": 1})], [torch.float32], seed=1
            )
            + im2col_cases(
                [
                    ((2, 1, 9, 9), 3, {"padding": (2, 1), "dilation": 2}),
                    ((1, 3, 5, 6), (3, 3), {"stride": (2, 1), "padding": 1, "dilation": (1, 2)}),
                ],
                [torch.float64],
                seed=2,
            )
            # the rule "any strides": channels_last, sliced and transposed (non-contiguous) inputs
            + im2col_cases([((1, 3, 6, 7), 3, {"padding": 1})], [torch.float32], layout="channels_last", seed=3)
            + im2col_cases([((2, 2, 7, 5), (2, 3), {"stride": 2})], [torch.float64], layout="sliced", seed=4)
            + im2col_cases([((1, 2, 5, 6), 2, {"dilation": 2})], [torch.float32], layout="transposed", seed=5)
        )
    fn, own = _own(
        fn,
        "build the columns yourself with F.pad and Tensor.unfold or slices; compare with "
        "conv.im2col_spec outside your function, never call it inside",
    )
    return run_check(
        f"{TASK}-im2col",
        fn,
        cases,
        expected=_im2col_expected,
        judge=_judge_im2col,
        rules=[
            _no_unfold(),
            _no_conv("select the windows with slicing or Tensor.unfold"),
            _no_gemm_in_im2col(),
            _im2col_vectorised(),
            own,
        ],
        proves="the columns of every receptive field, exactly as F.unfold, with stride, padding and dilation",
        hidden=hidden,
        next_step="compare with twoprim.topics.convolution.im2col_spec on a tiny input: row c·kh·kw + p·kw + q, "
        "column i·Wout + j holds x_padded[n, c, sh·i + dh·p, sw·j + dw·q]",
    )


def check_conv_gemm_shape(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `conv_gemm_shape`: (M, N, K) of one group's GEMM, equal to the shapes the reference conv multiplies."""
    if cases is None:
        cases = shape_cases(
            [
                ((2, 3, 8, 8), (4, 3, 3, 3), 1, 1, 1, 1),
                ((1, 4, 9, 7), (6, 2, 3, 2), 2, (1, 0), 1, 2),
                ((2, 4, 10, 10), (4, 1, 3, 3), 1, 2, 2, 4),
            ]
        )
    fn, own = _own(fn, "compute Hout and Wout from the shapes with the output-size formula, then M, N and K")
    return run_check(
        f"{TASK}-conv_gemm_shape",
        fn,
        cases,
        expected=_gemm_shape_expected,
        judge=_judge_gemm_shape,
        rules=[own],
        proves="(M, N, K) of one group's GEMM, equal to the shapes the reference conv multiplies",
        hidden=hidden,
        next_step="M = O/groups, N = N·Hout·Wout, K = C/groups·kh·kw",
    )


def check_conv2d_gemm(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `conv2d_gemm`: F.conv2d (float64 oracle) with bias, stride, padding, dilation and groups, from im2col and
    one GEMM per group."""
    if cases is None:
        cases = (
            conv_cases([((2, 3, 8, 8), (4, 3, 3, 3), {"padding": 1})], [torch.float32], seed=3)
            + conv_cases(
                [((1, 4, 9, 7), (6, 2, 3, 2), {"stride": 2, "groups": 2})], [torch.float64], bias=False, seed=4
            )
            + conv_cases(
                [((2, 4, 10, 10), (4, 1, 3, 3), {"padding": 2, "dilation": 2, "groups": 4})], [torch.float32], seed=5
            )
            + conv_cases([((3, 5, 6, 6), (8, 5, 1, 1), {})], [torch.float64], seed=6)
            # the rule "any strides": channels_last, sliced and transposed (non-contiguous) inputs
            + conv_cases(
                [((2, 4, 7, 6), (6, 2, 3, 3), {"padding": 1, "groups": 2})],
                [torch.float32],
                layout="channels_last",
                seed=7,
            )
            + conv_cases(
                [((1, 3, 6, 5), (4, 3, 2, 2), {"stride": 2})], [torch.float64], layout="sliced", bias=False, seed=8
            )
            + conv_cases(
                [((2, 2, 5, 7), (3, 2, 3, 2), {"padding": (1, 0)})], [torch.float32], layout="transposed", seed=9
            )
        )
    fn, own = _own(fn, "build it from your im2col (or F.unfold) and W_g @ cols_g for each group, yourself")
    return run_check(
        f"{TASK}-conv2d_gemm",
        fn,
        cases,
        expected=_conv_expected,
        judge=_judge_conv,
        rules=[
            _no_conv("build the output from im2col and a GEMM: W_g @ cols_g for each group"),
            _gemms_do_the_flops(),
            own,
        ],
        proves="F.conv2d (float64 oracle) with bias, stride, padding, dilation and groups, from im2col "
        "and one GEMM per group",
        hidden=hidden,
        next_step="check the shape of every step on a tiny case: cols (N, C·kh·kw, L) -> per group "
        "(K, N·L); W_g (M, K); W_g @ cols_g (M, N·L) -> (N, O, Hout, Wout), then + bias",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex04_conv-im2col": (
        "Read `conv.im2col_spec` (the cell above prints it) and compare your result with it on a tiny input such "
        "as `torch.arange(32.).reshape(1, 2, 4, 4)`: the order of the rows (channel, then kernel row, then kernel "
        "column) is what usually goes wrong.",
        "Pad first with `F.pad`, then take sliding windows with `Tensor.unfold` on the height, then on the width: a "
        "view of shape (N, C, Hout, Wout, window height, window width). Move the two window axes in front of the "
        "two position axes, then reshape to (N, C·kh·kw, Hout·Wout).",
        "Dilation: a window of size d·(k − 1) + 1 covers the dilated kernel's footprint, and slicing it with step d "
        "keeps exactly its k taps. The stride is `unfold`'s step.",
    ),
    "ex04_conv-conv_gemm_shape": (
        "Three numbers: M counts one group's output channels, N counts the output positions of the whole batch, K "
        "is the length of one column of one group.",
        "You need Hout and Wout first. Per spatial dimension: Hout = ⌊(H + 2·padding − dilation·(k − 1) − 1) / "
        "stride⌋ + 1.",
        "M = O / groups, N = batch · Hout · Wout, K = (C / groups) · kh · kw; the weight's shape already holds "
        "C / groups as its second entry.",
    ),
    "ex04_conv-conv2d_gemm": (
        "Three steps: columns from your `im2col`, one GEMM per group (that group's weights times that group's "
        "columns), then the output's shape and the bias.",
        "im2col gives (N, C·kh·kw, L) with L = Hout·Wout. Group g owns a contiguous block of K rows of each "
        "sample's columns: reshape to (N, groups, K, L) and move the axes to (groups, K, N·L) so every sample "
        "sits side by side in one GEMM. The weight reshapes to (groups, M, K).",
        "(groups, M, K) @ (groups, K, N·L) is one batched GEMM of shape (groups, M, N·L), which is (O, N, Hout, "
        "Wout) after a reshape. Bring the batch axis to the front, then add the bias broadcast as (1, O, 1, 1).",
    ),
}
