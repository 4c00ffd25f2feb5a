"""ex04_conv: every check explains a wrong value, shape and dtype; every stated rule catches its forbidden call (and
lets the allowed alternatives through); bad input gets F.conv2d's refusals with the shapes named; the topic module's
specs, reference, measurements and figure do what they say."""

from __future__ import annotations

import inspect

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from twoprim.assignments import ex04_conv as ex04
from twoprim.core import checks, record
from twoprim.topics import convolution as conv

from .conftest import fails, solution_namespace
from .visible_rules import assert_rule_is_visible, ignores_strides, named

matplotlib.use("Agg")
Size = int | tuple[int, int]  # a size, or one per axis (height, width), as F.unfold takes them


@pytest.fixture(scope="module")
def sol04():
    """The ex04_conv solution functions (im2col, conv_gemm_shape, conv2d_gemm)."""
    return solution_namespace("ex04_conv")


def _named(fn, name):
    fn.__name__ = name
    return fn


# ---- (a wrong value, shape or dtype of every check: tests/test_check_messages.py)


def test_im2col_wrong_row_order_names_first_wrong_element_and_exact_tolerance(sol04):
    def im2col(x, kernel_size, stride=1, padding=0, dilation=1):  # kernel offsets first, channels last: wrong order
        cols = sol04["im2col"](x, kernel_size, stride, padding, dilation)
        N, R, L = cols.shape
        C = x.shape[1]
        return cols.reshape(N, C, R // C, L).transpose(1, 2).reshape(N, R, L)

    msg = fails(ex04.check_im2col, im2col)
    assert "first wrong element" in msg and "tolerance abs 0.0e+00 + rel 0.0e+00" in msg
    # the case: (2, 27, 196), the first wrong element at flat index 196, named by what it means
    assert (
        "first wrong element: [0, 1, 0] = batch 0, row 1 (channel 0, kernel row 0, kernel column 1), column 0 "
        "(output row 0, output column 0): got "
    ) in msg
    assert "expected: float32 tensor of shape (2, 27, 196)\n" in msg  # no preview that starts like the got one
    assert "around it, at batch 0 (* marks a wrong value):" in msg and "    row 1  expected" in msg
    assert (
        "order:    the same values as expected, in another order: (channel) and (kernel row, kernel column) look "
        "swapped"
    ) in msg
    assert (
        "next:     put the axes in the order (batch, channel, kernel row, kernel column, output row, output "
        "column) before the final reshape" in msg
    )


def test_im2col_with_the_kernel_offsets_swapped_names_the_swap(sol04):
    def im2col(x, kernel_size, stride=1, padding=0, dilation=1):  # kernel column before kernel row
        cols = sol04["im2col"](x, kernel_size, stride, padding, dilation)
        (kh, kw), (N, R, L) = conv.pair(kernel_size), cols.shape
        return cols.reshape(N, x.shape[1], kh, kw, L).transpose(2, 3).reshape(N, R, L)

    msg = fails(ex04.check_im2col, im2col)
    assert "kernel row and kernel column look swapped" in msg, msg


def test_conv2d_gemm_with_output_rows_and_columns_swapped_names_the_swap(sol04):
    def conv2d_gemm(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        out = sol04["conv2d_gemm"](x, weight, bias, stride, padding, dilation, groups)
        return out.transpose(2, 3).contiguous()  # square outputs (8×8): the right shape, the wrong order

    msg = fails(ex04.check_conv2d_gemm, conv2d_gemm)
    assert "= batch 0, output channel 0, output row 0, output column 1: got" in msg
    assert "output row and output column look swapped" in msg, msg


@pytest.mark.parametrize(
    "component, index, hint", [("M", 0, "O/groups"), ("N", 1, "N·Hout·Wout"), ("K", 2, "weight.shape[1]·kh·kw")]
)
def test_conv_gemm_shape_names_the_wrong_component_and_the_recorded_gemm(sol04, component, index, hint):
    def conv_gemm_shape(*args):
        mnk = list(sol04["conv_gemm_shape"](*args))
        mnk[index] += 1
        return tuple(mnk)

    msg = fails(ex04.check_conv_gemm_shape, conv_gemm_shape)
    assert f"{component} wrong" in msg and hint in msg
    assert "the reference conv multiplied 1 GEMM of (M, K) @ (K, N) = (4, 27) @ (27, 128)" in msg


def test_conv_gemm_shape_ignoring_groups_is_caught_on_the_grouped_case(sol04):
    def conv_gemm_shape(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1):
        M, N, K = sol04["conv_gemm_shape"](x_shape, w_shape, stride, padding, dilation, groups)
        return (w_shape[0], N, K)  # forgets that each group has only O/groups output channels

    msg = fails(ex04.check_conv_gemm_shape, conv_gemm_shape)
    assert "groups 2" in msg and "M wrong" in msg and "O/groups = 6/2" in msg


def test_conv_gemm_shape_expected_comes_from_recorded_gemms_not_a_formula(sol04, monkeypatch):
    ex04.check_conv_gemm_shape(sol04["conv_gemm_shape"])  # passes against the real recording
    fake = lambda *args: [("mm", ((7, 5), (5, 3)))]  # noqa: E731 - what if the reference had multiplied this?
    monkeypatch.setattr(ex04, "recorded_gemms", fake)
    msg = fails(ex04.check_conv_gemm_shape, sol04["conv_gemm_shape"])
    assert "(7, 5) @ (5, 3)" in msg


def test_conv2d_gemm_tolerance_is_stated_and_scales_with_the_sum(sol04, capsys):
    ex04.check_conv2d_gemm(sol04["conv2d_gemm"], hidden=22)
    out = capsys.readouterr().out
    assert "tolerance abs" in out and "passed 7 cases" in out and "Grading runs 22 more hidden checks" in out
    ones = [checks.Case("ones", (torch.ones(1, 2, 3, 3), torch.ones(1, 2, 3, 3)), {})]  # every output 18.0

    def shifted(by):
        return _named(lambda *args, **kwargs: sol04["conv2d_gemm"](*args, **kwargs) + by, "conv2d_gemm")

    ex04.check_conv2d_gemm(shifted(0.0), ones)
    assert "tolerance abs 1.7e-05" in capsys.readouterr().out  # 8·eps·18
    ex04.check_conv2d_gemm(shifted(1e-5), ones)  # within 8·eps·18 + eps·18 ≈ 1.9e-5
    assert "wrong result" in fails(ex04.check_conv2d_gemm, shifted(4e-5), ones)


def test_not_written_yet_says_so():
    def im2col(x, kernel_size, stride=1, padding=0, dilation=1):
        raise NotImplementedError()

    assert "`im2col` is not written yet" in fails(ex04.check_im2col, im2col)


def test_a_view_on_non_contiguous_input_reports_the_case(sol04):
    def conv2d_gemm(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        x.view(-1)  # fails on a non-contiguous input
        return sol04["conv2d_gemm"](x, weight, bias, stride, padding, dilation, groups)

    cases = ex04.conv_cases([((2, 3, 6, 6), (4, 3, 3, 3), {})], layout="sliced", seed=1)
    with pytest.raises(checks.CheckFailure, match=r"raised RuntimeError(.|\n)*sliced \(non-contiguous\) input"):
        ex04.check_conv2d_gemm(conv2d_gemm, cases)


# ---- im2col's rules: forbidden spellings caught, allowed ones pass


def _unfold(x, kernel_size, stride: Size = 1, padding: Size = 0, dilation: Size = 1):
    return F.unfold(x, kernel_size, dilation=dilation, padding=padding, stride=stride)


def _offset_loop_im2col(x, kernel_size, stride: Size = 1, padding: Size = 0, dilation: Size = 1):
    """Allowed: one strided slice per kernel offset (kh·kw of them), stacked."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(conv.pair, (kernel_size, stride, padding, dilation))
    N, C, H, W = x.shape
    xp = F.pad(x, (pw, pw, ph, ph))
    Hout, Wout = conv.out_size(H, kh, sh, ph, dh), conv.out_size(W, kw, sw, pw, dw)
    taps = [
        xp[:, :, dh * p : dh * p + sh * (Hout - 1) + 1 : sh, dw * q : dw * q + sw * (Wout - 1) + 1 : sw]
        for p in range(kh)
        for q in range(kw)
    ]  # kh·kw × (N, C, Hout, Wout)
    return torch.stack(taps, dim=2).reshape(N, C * kh * kw, Hout * Wout)


def _one_hot_conv(x, kernel_size, stride: Size = 1, padding: Size = 0, dilation: Size = 1):
    """im2col as a convolution with one-hot kernels: right numbers, but a convolution."""
    (kh, kw), C = conv.pair(kernel_size), x.shape[1]
    eye = torch.eye(C * kh * kw, dtype=x.dtype).reshape(C * kh * kw, C, kh, kw)
    out = F.conv2d(x, eye, None, stride, padding, dilation)
    return out.reshape(x.shape[0], C * kh * kw, -1)


def _selection_gemm(x, kernel_size, stride: Size = 1, padding: Size = 0, dilation: Size = 1):
    """im2col as (N, C·H·W) @ a 0/1 selection matrix built from F.unfold's indices: right numbers, GEMM FLOPs."""
    N, C, H, W = x.shape
    index = torch.arange(1, C * H * W + 1, dtype=torch.float64).reshape(1, C, H, W)
    where = _offset_loop_im2col(index, kernel_size, stride, padding, dilation)[0].long()  # (C·kh·kw, L), 0: padding
    select = torch.zeros(C * H * W + 1, where.numel(), dtype=x.dtype)
    select[where.reshape(-1), torch.arange(where.numel())] = 1
    flat = torch.cat([torch.zeros(N, 1, dtype=x.dtype), x.reshape(N, -1)], dim=1)  # (N, 1 + C·H·W)
    return (flat @ select).reshape(N, *where.shape)


def _loop_over_positions(x, kernel_size, stride: Size = 1, padding: Size = 0, dilation: Size = 1):
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(conv.pair, (kernel_size, stride, padding, dilation))
    N, C, H, W = x.shape
    xp = F.pad(x, (pw, pw, ph, ph))
    Hout, Wout = conv.out_size(H, kh, sh, ph, dh), conv.out_size(W, kw, sw, pw, dw)
    columns = [
        xp[:, :, sh * i : sh * i + dh * (kh - 1) + 1 : dh, sw * j : sw * j + dw * (kw - 1) + 1 : dw].reshape(N, -1)
        for i in range(Hout)
        for j in range(Wout)
    ]
    return torch.stack(columns, dim=2)


@pytest.mark.parametrize(
    "fn, found",
    [
        (_unfold, "torch.nn.functional.unfold"),
        (
            lambda x, k, stride=1, padding=0, dilation=1: torch.nn.Unfold(k, dilation, padding, stride)(x),
            "torch.nn.functional.unfold",
        ),
        (
            # ATen's im2col binding, which torch's stubs leave out of torch._C
            lambda x, k, stride=1, padding=0, dilation=1: torch._C._nn.im2col(  # pyright: ignore[reportAttributeAccessIssue]
                x, conv.pair(k), conv.pair(dilation), conv.pair(padding), conv.pair(stride)
            ),
            "aten.im2col",
        ),
        (_one_hot_conv, "a convolution op"),
        (_selection_gemm, "im2col only moves numbers"),
        (_loop_over_positions, "tensor (ATen) ops for a 3×3 kernel"),
    ],
    ids=["F.unfold", "nn.Unfold", "aten.im2col", "one-hot conv2d", "selection GEMM", "loop over positions"],
)
def test_im2col_rules_catch_each_forbidden_spelling(fn, found):
    msg = fails(ex04.check_im2col, _named(fn, "im2col"))
    assert "✘ ex04_conv-im2col: the answer breaks a rule of this exercise" in msg
    assert found in msg and "next:" in msg


def test_im2col_forbidden_spellings_do_compute_the_right_numbers():
    """So the rules, not wrong values, are what fail them above."""
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64)
    for fn in (_one_hot_conv, _selection_gemm, _loop_over_positions):
        assert torch.equal(fn(x, (3, 2), 2, 1, (1, 2)), _unfold(x, (3, 2), 2, 1, (1, 2)))


def _as_strided_im2col(x, kernel_size, stride=1, padding=0, dilation=1):
    """Allowed: one as_strided view of the padded input."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(conv.pair, (kernel_size, stride, padding, dilation))
    N, C, H, W = x.shape
    xp = F.pad(x, (pw, pw, ph, ph)).contiguous()
    Hout, Wout = conv.out_size(H, kh, sh, ph, dh), conv.out_size(W, kw, sw, pw, dw)
    sN, sC, sH, sW = xp.stride()
    view = xp.as_strided((N, C, kh, kw, Hout, Wout), (sN, sC, dh * sH, dw * sW, sh * sH, sw * sW))
    return view.reshape(N, C * kh * kw, Hout * Wout)


@pytest.mark.parametrize("fn", [_offset_loop_im2col, _as_strided_im2col], ids=["loop over offsets", "as_strided"])
def test_im2col_allowed_alternatives_pass_visible_and_hidden_style_cases(fn):
    ex04.check_im2col(_named(fn, "im2col"))
    ex04.check_im2col(
        _named(fn, "im2col"),
        ex04.im2col_cases(
            [
                ((1, 1, 5, 5), 5, {}),
                ((3, 2, 10, 12), (2, 3), {"stride": (1, 3), "padding": (0, 2), "dilation": (3, 1)}),
            ],
            [torch.float64],
            layout="transposed",
            seed=9,
        ),
    )


# ---- conv2d_gemm's rules


def _conv_via(op):
    return lambda x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1: op(
        x, weight, bias, stride, padding, dilation, groups
    )


def _module_conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    layer = torch.nn.Conv2d(
        x.shape[1],
        weight.shape[0],
        weight.shape[2:],
        stride,
        padding,
        dilation,
        groups,
        bias=bias is not None,
        dtype=x.dtype,
    )
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            assert layer.bias is not None  # (made with bias=True)
            layer.bias.copy_(bias)
        return layer(x)


def _convolution(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return torch.convolution(
        x, weight, bias, conv.pair(stride), conv.pair(padding), conv.pair(dilation), False, (0, 0), groups
    )


@pytest.mark.parametrize(
    "fn, found",
    [
        (_conv_via(F.conv2d), "torch.nn.functional.conv2d"),
        (_conv_via(torch.conv2d), "conv2d"),
        (_module_conv, "aten.convolution"),
        (_convolution, "convolution"),
    ],
    ids=["F.conv2d", "torch.conv2d", "nn.Conv2d", "torch.convolution"],
)
def test_conv2d_gemm_forbids_every_convolution_op(fn, found):
    msg = fails(ex04.check_conv2d_gemm, _named(fn, "conv2d_gemm"))
    assert "✘ ex04_conv-conv2d_gemm: the answer breaks a rule of this exercise: no convolution op" in msg
    assert found in msg and "found:    it called" in msg


def _pieces(x, weight, stride, padding, dilation, groups):
    N = x.shape[0]
    O, Cg, kh, kw = weight.shape  # noqa: E741 - O output channels, as lesson 04 writes it
    cols = F.unfold(x, (kh, kw), dilation=dilation, padding=padding, stride=stride)  # (N, C·kh·kw, L)
    (sh, sw), (ph, pw), (dh, dw) = map(conv.pair, (stride, padding, dilation))
    Hout, Wout = conv.out_size(x.shape[2], kh, sh, ph, dh), conv.out_size(x.shape[3], kw, sw, pw, dw)
    return N, O, Cg * kh * kw, Hout, Wout, cols


def _elementwise(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Right numbers without a GEMM: broadcast multiply and sum."""
    N, O, K, Hout, Wout, cols = _pieces(x, weight, stride, padding, dilation, groups)  # noqa: E741 - O output channels, as lesson 04 writes it
    cols = cols.reshape(N, groups, 1, K, -1)  # (N, g, 1, K, L)
    w = weight.reshape(1, groups, O // groups, K, 1)  # (1, g, M, K, 1)
    out = (w * cols).sum(3).reshape(N, O, Hout, Wout)
    return out if bias is None else out + bias[None, :, None, None]


def _per_sample(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Right numbers, one GEMM per sample and group: a loop over samples."""
    N, O, K, Hout, Wout, cols = _pieces(x, weight, stride, padding, dilation, groups)  # noqa: E741 - O output channels, as lesson 04 writes it
    w = weight.reshape(groups, O // groups, K)
    out = torch.stack(
        [torch.cat([w[g] @ cols[n].reshape(groups, K, -1)[g] for g in range(groups)]) for n in range(N)]
    ).reshape(N, O, Hout, Wout)
    return out if bias is None else out + bias[None, :, None, None]


def _block_diagonal(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Right numbers, one dense GEMM with a block-diagonal weight: groups× the FLOPs a grouped conv needs."""
    N, O, K, Hout, Wout, cols = _pieces(x, weight, stride, padding, dilation, groups)  # noqa: E741 - O output channels, as lesson 04 writes it
    dense = torch.block_diag(*weight.reshape(groups, O // groups, K))  # (O, groups·K), zeros off the blocks
    out = (dense @ cols).reshape(N, O, Hout, Wout)  # (O, C·kh·kw) @ (N, C·kh·kw, L)
    return out if bias is None else out + bias[None, :, None, None]


def _loop_over_groups(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Allowed: a Python loop over groups, one mm each."""
    N, O, K, Hout, Wout, cols = _pieces(x, weight, stride, padding, dilation, groups)  # noqa: E741 - O output channels, as lesson 04 writes it
    cols = cols.reshape(N, groups, K, -1).permute(1, 2, 0, 3).reshape(groups, K, -1)  # (g, K, N·L)
    w = weight.reshape(groups, O // groups, K)
    out = torch.cat([torch.mm(w[g], cols[g]) for g in range(groups)])  # (O, N·L)
    out = out.reshape(O, N, Hout, Wout).permute(1, 0, 2, 3)
    return out if bias is None else out + bias[None, :, None, None]


@pytest.mark.parametrize(
    "fn, found",
    [
        (_elementwise, "it ran no dot/GEMM op"),
        (_per_sample, "a Python loop over samples"),
        (_block_diagonal, "but the convolution needs exactly"),
    ],
    ids=["element-wise", "loop over samples", "block-diagonal weight"],
)
def test_conv2d_gemm_flop_rule_catches_wrong_ways_to_get_the_right_numbers(fn, found):
    x, w, b = torch.randn(2, 4, 6, 6), torch.randn(6, 2, 3, 3), torch.randn(6)
    assert torch.allclose(fn(x, w, b, 1, 1, 1, 2), F.conv2d(x, w, b, 1, 1, 1, 2), atol=1e-5)  # right numbers
    msg = fails(ex04.check_conv2d_gemm, _named(fn, "conv2d_gemm"))
    assert "breaks a rule of this exercise: the FLOPs run in GEMMs" in msg and found in msg


def test_conv2d_gemm_accepts_a_loop_over_groups_and_f_unfold(capsys):
    ex04.check_conv2d_gemm(_named(_loop_over_groups, "conv2d_gemm"))
    assert "✔ ex04_conv-conv2d_gemm" in capsys.readouterr().out


def test_conv_op_pattern_does_not_flag_unrelated_names():
    log = checks.CallLog()
    log.functions.update({"torch.Tensor.contiguous": 1, "torch._prims.convert_element_type": 1})
    log.aten.update({"_convert_indices_from_coo_to_csr": 1, "copy_": 1})
    assert ex04._conv_calls(log) == []
    log.aten.update({"mkldnn_convolution": 1, "_slow_conv2d_forward": 1, "_conv_depthwise2d": 1})
    assert ex04._conv_calls(log) == ["aten._conv_depthwise2d", "aten._slow_conv2d_forward", "aten.mkldnn_convolution"]


# ---- bad input to the solution functions: F.conv2d's refusals, with the shapes named


def test_mismatched_channels_name_both_shapes(sol04):
    with pytest.raises(
        ValueError,
        match=r"conv2d_gemm: weight of shape \(8, 4, 3, 3\) with groups=1 expects x with 4 "
        r"channels .* but x has shape \(2, 3, 10, 10\): 3 channels",
    ):
        sol04["conv2d_gemm"](torch.ones(2, 3, 10, 10), torch.ones(8, 4, 3, 3))


def test_groups_that_do_not_divide_the_output_channels(sol04):
    with pytest.raises(
        ValueError,
        match=r"groups=2 must divide the output channels, but weight has shape "
        r"\(5, 2, 3, 3\)",
    ):
        sol04["conv2d_gemm"](torch.ones(1, 4, 6, 6), torch.ones(5, 2, 3, 3), groups=2)


def test_groups_that_do_not_divide_the_input_channels(sol04):
    with pytest.raises(
        ValueError,
        match=r"expects x with 4 channels .* x has shape \(1, 5, 6, 6\): 5 channels "
        r"\(and groups=2 must divide x's 5 channels\)",
    ):
        sol04["conv2d_gemm"](torch.ones(1, 5, 6, 6), torch.ones(4, 2, 3, 3), groups=2)


@pytest.mark.parametrize(
    "name, args",
    [
        ("conv2d_gemm", (torch.ones(1, 1, 2, 2), torch.ones(1, 1, 3, 3))),
        ("im2col", (torch.ones(1, 1, 2, 2), 3)),
        ("conv_gemm_shape", ((1, 1, 2, 2), (1, 1, 3, 3))),
    ],
)
def test_kernel_larger_than_the_padded_input(sol04, name, args):
    with pytest.raises(
        ValueError,
        match=rf"{name}: the padded input is 2 × 2 .* but the kernel spans 3 × 3 .* can't "
        r"be larger than the padded input",
    ):
        sol04[name](*args)


def test_dilated_kernel_larger_than_the_padded_input(sol04):
    with pytest.raises(
        ValueError,
        match=r"padded input is 6 × 6 .* kernel spans 7 × 7 \(kernel \(3, 3\), dilation "
        r"\(3, 3\)\)",
    ):
        sol04["conv2d_gemm"](torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3), padding=1, dilation=3)


def test_the_guards_agree_with_f_conv2d_on_what_is_valid(sol04):
    """Every call the guard refuses, F.conv2d refuses too (and one it accepts, F.conv2d accepts)."""
    bad = [
        (torch.ones(2, 3, 10, 10), torch.ones(8, 4, 3, 3), {}),
        (torch.ones(1, 4, 6, 6), torch.ones(5, 2, 3, 3), {"groups": 2}),
        (torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3), {"padding": 1, "dilation": 3}),
    ]
    for x, w, kw in bad:
        with pytest.raises(RuntimeError):
            F.conv2d(x, w, **kw)
        with pytest.raises(ValueError):
            sol04["conv2d_gemm"](x, w, **kw)
    x, w = torch.ones(1, 1, 3, 4), torch.ones(1, 1, 5, 6)  # kernel exactly the padded input: allowed by both
    assert sol04["conv2d_gemm"](x, w, padding=1).shape == F.conv2d(x, w, padding=1).shape == (1, 1, 1, 1)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"stride": 0}, ValueError, r"stride must be >= 1, got 0"),
        ({"padding": -1}, ValueError, r"padding must be >= 0, got -1"),
        ({"dilation": (1, 0)}, ValueError, r"dilation must be >= 1, got 0"),
        ({"stride": (1, 2, 3)}, ValueError, r"stride must be an int or a pair .* length 3"),
        ({"padding": 1.0}, TypeError, r"padding must be an int or a pair of ints, got float"),
        ({"groups": 0}, ValueError, r"groups must be >= 1"),
    ],
)
def test_bad_conv_arguments(sol04, kwargs, error, text):
    with pytest.raises(error, match=text):
        sol04["conv2d_gemm"](torch.ones(1, 2, 5, 5), torch.ones(2, 2, 3, 3), **kwargs)


def test_bad_tensors(sol04):
    conv2d_gemm = sol04["conv2d_gemm"]
    with pytest.raises(ValueError, match=r"conv2d_gemm: x must be 4-D, got shape \(2, 5, 5\)"):
        conv2d_gemm(torch.ones(2, 5, 5), torch.ones(2, 2, 3, 3))
    with pytest.raises(TypeError, match=r"x is torch.float32 but weight is torch.float64"):
        conv2d_gemm(torch.ones(1, 2, 5, 5), torch.ones(2, 2, 3, 3, dtype=torch.float64))
    with pytest.raises(
        ValueError,
        match=r"bias has shape \(3,\) but weight has shape \(2, 2, 3, 3\); bias must be "
        r"\(2,\)",
    ):
        conv2d_gemm(torch.ones(1, 2, 5, 5), torch.ones(2, 2, 3, 3), torch.ones(3))
    with pytest.raises(TypeError, match=r"x is torch.float32 but bias is torch.float64"):
        conv2d_gemm(torch.ones(1, 2, 5, 5), torch.ones(2, 2, 3, 3), torch.ones(2, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        conv2d_gemm([[1.0]], torch.ones(2, 2, 3, 3))
    with pytest.raises(TypeError, match=r"im2col: x must be floating point .* got torch.int64"):
        sol04["im2col"](torch.ones(1, 1, 4, 4, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"im2col: kernel_size must be >= 1, got 0"):
        sol04["im2col"](torch.ones(1, 1, 4, 4), 0)
    with pytest.raises(TypeError, match=r"conv_gemm_shape: x_shape must be a tuple of 4 ints, got \(3, 8, 8\)"):
        sol04["conv_gemm_shape"]((3, 8, 8), (4, 3, 3, 3))


# ---- the solutions keep the input's dtype and accept tuples everywhere


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_solutions_return_the_input_dtype(sol04, dtype):
    x, w = torch.randn(1, 2, 5, 5, dtype=dtype), torch.randn(4, 1, 2, 3, dtype=dtype)
    assert sol04["im2col"](x, (2, 3), (1, 2), (1, 0), (2, 1)).dtype == dtype
    assert sol04["conv2d_gemm"](x, w, torch.randn(4, dtype=dtype), (1, 2), (1, 0), (2, 1), 2).dtype == dtype


# ---- the topic module

CONFIGS = [
    ((2, 3, 7, 6), (4, 3, 3, 2), 1, 0, 1, 1),
    ((1, 4, 9, 8), (6, 2, 3, 3), (2, 1), (1, 2), (1, 2), 2),
    ((2, 4, 5, 5), (4, 1, 3, 3), 2, 2, 3, 4),
    ((1, 1, 3, 3), (2, 1, 5, 5), 1, 1, 1, 1),
    ((1, 3, 6, 6), (5, 3, 1, 1), 1, 0, 1, 1),
]


@pytest.mark.parametrize("x_shape, w_shape, s, p, d, g", CONFIGS)
def test_specs_and_reference_equal_torch(x_shape, w_shape, s, p, d, g):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(x_shape, generator=gen, dtype=torch.float64)
    w = torch.randn(w_shape, generator=gen, dtype=torch.float64)
    b = torch.randn(w_shape[0], generator=gen, dtype=torch.float64)
    want = F.conv2d(x, w, b, s, p, d, g)
    torch.testing.assert_close(conv.conv2d_spec(x, w, b, s, p, d, g), want)
    torch.testing.assert_close(conv.conv2d_im2col(x, w, b, s, p, d, g), want)
    assert torch.equal(conv.im2col_spec(x, w_shape[2:], s, p, d), F.unfold(x, w_shape[2:], d, p, s))
    (sh, sw), (ph, pw), (dh, dw) = map(conv.pair, (s, p, d))
    assert (
        conv.out_size(x_shape[2], w_shape[2], sh, ph, dh),
        conv.out_size(x_shape[3], w_shape[3], sw, pw, dw),
    ) == tuple(want.shape[2:])
    with FlopCounterMode(display=False) as counter:
        F.conv2d(x, w, None, s, p, d, g)
    assert conv.conv_flops(x_shape, w_shape, s, p, d, g) == counter.get_total_flops()


def test_reference_runs_one_mm_per_group_and_records_real_layers_without_memory():
    gemms = conv.recorded_gemms(*conv.LAYERS["MobileNetV2 depthwise 3×3, 144"])
    assert len(gemms) == 144 and set(gemms) == {("mm", ((1, 9), (9, 32 * 56 * 56)))}
    ((op, ((M, K), (_, N))),) = conv.recorded_gemms(*conv.LAYERS["ResNet-50 stage 1 3×3, 64→64"])
    assert (op, M, N, K) == ("mm", 64, 32 * 56 * 56, 64 * 9)
    for layer in conv.LAYERS.values():
        flops = sum(record.gemm_flops(op, shapes) for op, shapes in conv.recorded_gemms(*layer))
        assert flops == conv.conv_flops(*layer)


def test_allocations_measure_im2col_blowup():
    x, w = torch.randn(2, 8, 12, 12), torch.randn(8, 8, 3, 3)
    cols = conv.allocations(lambda: F.unfold(x, 3, padding=1))
    assert cols == {"total": 2 * 72 * 144 * 4, "largest": 2 * 72 * 144 * 4, "op": "im2col"}
    assert cols["largest"] == 9 * x.nbytes  # kh·kw = 9 times the input
    assert conv.allocations(lambda: x.view(-1)[:5]) == {"total": 0, "largest": 0, "op": None}  # views allocate nothing
    assert conv.allocations(lambda: F.conv2d(x, w, padding=1))["largest"] == x.nbytes  # just the output here


def test_receptive_field_figure_outlines_the_field_and_its_column():
    from matplotlib.patches import Rectangle

    x = torch.arange(1.0, 2 * 4 * 5 + 1).reshape(1, 2, 4, 5)
    fig = conv.receptive_field_figure(x, (2, 3), stride=(1, 2), padding=1, dilation=(2, 1), position=(1, 1))
    axes = fig.axes
    assert len(axes) == 3  # two input channels and the cols matrix
    outlined = [p for p in axes[0].patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert sorted((round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in outlined) == sorted(
        (2 * 1 + q, 1 + 2 * p) for p in range(2) for q in range(3)
    )  # (column, row) of the padded input
    cols = F.unfold(x, (2, 3), (2, 1), 1, (1, 2))
    wout = cols.shape[2] // conv.out_size(4, 2, 1, 1, 2)
    (box,) = [p for p in axes[2].patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert round(box.get_x() + 0.5) == 1 * wout + 1
    assert wout == 3 and "column 4 = output (1, 1)" in axes[2].get_title()
    with pytest.raises(ValueError, match="outside"):
        conv.receptive_field_figure(x, 3, position=(5, 0))
    import matplotlib.pyplot as plt

    plt.close("all")


def test_h200_fact_comes_from_the_probe_file_with_its_machine():
    fact = conv.h200_conv_fact()
    assert fact["ratio"] == pytest.approx(6.37) and fact["machine"].startswith("NVIDIA H200")
    assert fact["file"] == "data/h200_gemm_probe_2026-11-30.json"


# ---- every rule ex04 states has a visible case (issue #43): a wrong answer breaking only that rule passed the visible
# check before its case was added, and fails it now with a message about its own mistake


def _im2col_own_strides(x, kernel_size, stride=1, padding=0, dilation=1):
    """Wrong: as_strided with the strides of a contiguous padded input (F.pad keeps channels_last, and a transposed x
    without padding stays transposed)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = ex04.im2col_args("im2col", x, kernel_size, stride, padding, dilation)
    xp = F.pad(x, (pw, pw, ph, ph))
    N, C, H, W = xp.shape
    Hout, Wout = (H - dh * (kh - 1) - 1) // sh + 1, (W - dw * (kw - 1) - 1) // sw + 1
    taps = xp.as_strided((N, C, kh, kw, Hout, Wout), (C * H * W, H * W, dh * W, dw, sh * W, sw))
    return taps.reshape(N, C * kh * kw, Hout * Wout)


def test_im2col_meets_non_contiguous_inputs_in_its_visible_check():
    assert_rule_is_visible(
        ex04.check_im2col,
        named("im2col", _im2col_own_strides),
        lambda c: "non-contiguous" in c.label,
        "all contiguous, passed",
        "the first with a non-contiguous input (`x` strides (126, 1, 21, 3))",
        "strides it computes itself from the shape",
    )


def test_conv2d_gemm_meets_non_contiguous_inputs_in_its_visible_check(sol04):
    assert_rule_is_visible(
        ex04.check_conv2d_gemm,
        ignores_strides(sol04["conv2d_gemm"], 0),
        lambda c: "non-contiguous" in c.label,
        "`x` read as if it were contiguous",
    )


# ---- the rule "your own code": the reference convolution is the grader's, not the learner's


def _shape_from_reference(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1):
    (_, ((M, K), (_, N))) = conv.recorded_gemms(x_shape, w_shape, stride, padding, dilation, groups)[0]
    return (M, N, K)


@pytest.mark.parametrize(
    "check, cheat, called",
    [
        (
            ex04.check_im2col,
            lambda x, k, stride=1, padding=0, dilation=1: conv.im2col_spec(x, k, stride, padding, dilation),
            "twoprim.conv.im2col_spec",
        ),
        (ex04.check_conv_gemm_shape, _shape_from_reference, "twoprim.conv.recorded_gemms"),
        (
            ex04.check_conv2d_gemm,
            lambda x, w, bias=None, stride=1, padding=0, dilation=1, groups=1: conv.conv2d_im2col(
                x, w, bias, stride, padding, dilation, groups
            ),
            "twoprim.conv.conv2d_im2col",
        ),
    ],
    ids=["im2col_spec", "recorded_gemms", "conv2d_im2col"],
)
def test_calling_the_reference_convolution_is_refused(check, cheat, called):
    """Each of these passed its visible check before: the spec copies exactly with few ATen ops, the reference runs
    one GEMM per group, and recorded_gemms is what conv_gemm_shape's check compares with."""
    msg = fails(check, named(check.__name__.removeprefix("check_"), cheat))
    assert "breaks a rule of this exercise: your own code: no calls to the reference code the grader" in msg, msg
    assert "found:    it called twoprim.conv." in msg and f"{called} ×1" in msg and "next:" in msg, msg


def test_the_spec_compared_outside_the_function_is_fine_and_prints_as_written(sol04):
    x = torch.randn(1, 2, 5, 6)
    assert torch.equal(sol04["im2col"](x, 3, padding=1), conv.im2col_spec(x, 3, padding=1))  # as the task suggests
    ex04.check_im2col(sol04["im2col"])
    source = inspect.getsource(conv.im2col_spec)  # the exercise prints it: the spec's own code, nothing of the guard
    assert source.startswith("def im2col_spec(") and "_USES" not in source
