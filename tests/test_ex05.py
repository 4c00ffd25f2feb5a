"""ex05_attention: every check explains a wrong value, shape and dtype; every stated rule catches its forbidden
call; the guards name bad input; the attention helpers (spec, FLOP counting, allocations, peak memory) are right."""

from __future__ import annotations

import math
from typing import Any

import matplotlib
import pytest
import torch
import torch.nn.functional as F

from twoprim.assignments import ex05_attention as ex05
from twoprim.topics import attention

from .conftest import check_of, fails, solution_namespace
from .visible_rules import assert_rule_is_visible, named

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def sol05():
    """The ex05_attention solution functions."""
    return solution_namespace("ex05_attention")


# (the solutions pass; a wrong value, shape or dtype is explained: tests/test_check_messages.py)


def test_not_written_yet_says_so():
    def softmax(x, dim=-1):
        raise NotImplementedError()

    msg = fails(ex05.check_softmax, softmax)
    assert "`softmax` is not written yet" in msg


# ---- the stated rules, caught on what ran


def _attention_from_sdpa(q, k, v, mask=None, causal=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


FORBIDDEN = {
    ("softmax", "torch.softmax"): (lambda x, dim=-1: torch.softmax(x, dim), "no built-in softmax"),
    ("softmax", "F.softmax"): (lambda x, dim=-1: F.softmax(x, dim=dim), "no built-in softmax"),
    ("softmax", "Tensor.softmax"): (lambda x, dim=-1: x.softmax(dim), "no built-in softmax"),
    ("softmax", "logsumexp"): (lambda x, dim=-1: (x - x.logsumexp(dim, keepdim=True)).exp(), "no built-in softmax"),
    ("layer_norm", "F.layer_norm"): (
        lambda x, w, b, eps=1e-5: F.layer_norm(x, (x.shape[-1],), w, b, eps),
        "no built-in normalisation",
    ),
    ("attention", "SDPA"): (_attention_from_sdpa, "no fused attention"),
    ("tiled_attention", "SDPA"): (
        lambda q, k, v, block, causal=False: _attention_from_sdpa(q, k, v, causal=causal),
        "no fused attention",
    ),
}


@pytest.mark.parametrize("name, spelling", list(FORBIDDEN), ids=[f"{n}-{s}" for n, s in FORBIDDEN])
def test_forbidden_builtins_are_detected(name, spelling):
    fn, rule = FORBIDDEN[(name, spelling)]
    msg = fails(check_of("ex05_attention", name), fn)
    assert f"✘ ex05_attention-{name}: the answer breaks a rule of this exercise: {rule}" in msg
    assert "found:    it called" in msg and "next:" in msg


def test_mha_through_nn_multiheadattention_is_forbidden():
    def multi_head_attention(x, W_qkv, W_o, n_heads, causal=False):
        layer = torch.nn.MultiheadAttention(x.shape[-1], n_heads, bias=False, batch_first=True, dtype=x.dtype)
        with torch.no_grad():
            layer.in_proj_weight.copy_(W_qkv)
            layer.out_proj.weight.copy_(W_o)
            return layer(x, x, x, need_weights=False)[0]

    msg = fails(ex05.check_multi_head_attention, multi_head_attention)
    assert "no fused attention" in msg and "multi_head_attention_forward" in msg


def test_attention_looping_over_heads_is_detected(sol05):
    def attention_per_head(q, k, v, mask=None, causal=False):
        out = torch.empty_like(q)
        for b in range(q.shape[0]):
            for h in range(q.shape[1]):
                one = slice(b, b + 1), slice(h, h + 1)
                out[b, h] = sol05["attention"](q[one], k[one], v[one], causal=causal)[0, 0]
        return out

    msg = fails(ex05.check_attention, attention_per_head, ex05.attention_cases([(2, 3, 7, 8)]))
    assert "two batched GEMMs" in msg and "two for each of the B·H = 6 (batch, head) pairs: a Python loop" in msg


def test_attention_without_gemms_is_detected():
    def attention_elementwise(q, k, v, mask=None, causal=False):
        scores = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) / math.sqrt(q.shape[-1])
        return (torch.softmax(scores, -1)[..., None] * v[..., None, :, :]).sum(-2)

    msg = fails(ex05.check_attention, attention_elementwise)
    assert "it ran no GEMM" in msg


def test_mha_with_three_projections_is_detected(sol05):
    def multi_head_attention(x, W_qkv, W_o, n_heads, causal=False):
        B, S, E = x.shape
        q, k, v = (x @ W.T for W in W_qkv.split(E))  # three GEMMs instead of one
        q, k, v = (t.reshape(B, S, n_heads, E // n_heads).transpose(1, 2) for t in (q, k, v))
        return sol05["attention"](q, k, v, causal=causal).transpose(1, 2).reshape(B, S, E) @ W_o.T

    msg = fails(ex05.check_multi_head_attention, multi_head_attention)
    assert "four GEMMs" in msg and "no GEMM computed q, k and v together" in msg


def test_tiled_attention_building_the_scores_is_detected(sol05):
    msg = fails(
        ex05.check_tiled_attention, lambda q, k, v, block, causal=False: sol05["attention"](q, k, v, causal=causal)
    )
    assert "never build the S×S score matrix" in msg
    assert "aten.bmm returned a float32 tensor of shape (2, 100, 100)" in msg and "at least S² = 10,000" in msg


def test_tiled_attention_with_a_full_causal_mask_is_detected(sol05):
    def tiled(q, k, v, block, causal=False):
        S = q.shape[2]
        keep = torch.ones(S, S, dtype=torch.bool).tril()  # an S×S mask, even if only read per tile
        return sol05["tiled_attention"](q, k, v, block, causal) + 0 * keep[0, 0]

    msg = fails(ex05.check_tiled_attention, tiled, ex05.tiled_cases([(1, 1, 64, 8, 16)], causal=True))
    assert "aten.ones returned a bool tensor of shape (64, 64)" in msg


def test_tiled_attention_with_two_passes_is_detected():
    def two_pass(q, k, v, block, causal=False):
        B, H, S, D = q.shape
        qs = q / math.sqrt(D)
        m = torch.full((B, H, S, 1), -math.inf, dtype=q.dtype)
        for j in range(0, S, block):  # pass 1: the row max
            m = torch.maximum(m, (qs @ k[:, :, j : j + block].transpose(-2, -1)).amax(-1, keepdim=True))
        l, acc = torch.zeros(B, H, S, 1, dtype=q.dtype), torch.zeros_like(q)  # noqa: E741 - l: the softmax's running sum, as lesson 05 writes it
        for j in range(0, S, block):  # pass 2: the scores again
            p = torch.exp(qs @ k[:, :, j : j + block].transpose(-2, -1) - m)
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ v[:, :, j : j + block]  # noqa: E741 - l: the softmax's running sum, as lesson 05 writes it
        return acc / l

    msg = fails(ex05.check_tiled_attention, two_pass)
    assert "one pass: every score computed once" in msg and "more than the 640,000" in msg


def test_tiled_rule_is_silent_where_a_case_cannot_tell(sol05):
    """With block_size >= S one tile is the whole matrix: the no-S×S rule does not apply to that case."""
    full = lambda q, k, v, block, causal=False: sol05["attention"](q, k, v, causal=causal)  # noqa: E731
    full.__name__ = "tiled_attention"
    ex05.check_tiled_attention(full, ex05.tiled_cases([(1, 1, 9, 4, 64)]))


def test_attention_flops_that_measures_is_detected():
    def attention_flops(B, H, S, D):
        q = torch.empty(B, H, S, D, device="meta")
        return attention.gemm_and_other(attention.count_flops(attention.two_gemm_attention, q, q, q))

    msg = fails(ex05.check_attention_flops, attention_flops)
    assert "count with arithmetic on B, H, S and D" in msg and "it measured instead of counting" in msg


# ---- messages that teach the specific mistakes of this topic


def test_naive_softmax_overflow_says_subtract_the_max():
    msg = fails(ex05.check_softmax, lambda x, dim=-1: x.exp() / x.exp().sum(dim, keepdim=True))
    assert "values of order ±1000" in msg and "NaN" in msg and "subtract the largest value along dim" in msg


def test_softmax_normalised_over_the_wrong_extent_says_so():
    msg = fails(
        ex05.check_softmax,
        lambda x, dim=-1: (x - x.amax(dim, keepdim=True)).exp() / (x - x.amax(dim, keepdim=True)).exp().sum(),
    )
    assert "not 1" in msg and "divide by the sum over dim=dim with keepdim=True" in msg


def test_unbiased_variance_is_named():
    def layer_norm(x, w, b, eps=1e-5):
        return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b

    msg = fails(ex05.check_layer_norm, layer_norm)
    assert "divides the squared deviations by E, not E − 1" in msg


def test_one_pass_variance_fails_far_from_zero():
    def layer_norm(x, w, b, eps=1e-5):
        mu = x.mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt((x * x).mean(-1, keepdim=True) - mu * mu + eps) * w + b

    ex05.check_layer_norm(layer_norm, ex05.layer_norm_cases([(4, 8), (2, 3, 16)]))  # fine near zero ...
    msg = fails(ex05.check_layer_norm, layer_norm, ex05.layer_norm_cases([(8, 48)], offset=300.0, seed=203))
    assert "every row near 300" in msg and "cancels catastrophically" in msg  # ... not near 300


def test_fully_masked_query_returning_nan_is_explained():
    def attention_nan(q, k, v, mask: Any = None, causal=False):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
        return torch.softmax(scores, -1) @ v

    for kind in ("bool", "additive", "padding"):
        msg = fails(
            ex05.check_attention, attention_nan, ex05.attention_cases([(2, 2, 5, 4)], mask=kind, fully_masked=True)
        )
        assert "which sees no key at all" in msg and "returns zeros there" in msg and torch.__version__ in msg


def test_unstable_attention_fails_only_on_large_scores(sol05):
    def attention_unstable(q, k, v, mask=None, causal=False):
        S = q.shape[2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), -math.inf)
        e = scores.exp()
        return e / e.sum(-1, keepdim=True) @ v

    ex05.check_attention(attention_unstable, ex05.attention_cases([(2, 2, 8, 4)], causal=True))
    msg = fails(ex05.check_attention, attention_unstable, ex05.attention_cases([(2, 2, 16, 8)], scale=30.0))
    assert "scores of order ±900" in msg and "subtract each row's max score before exp" in msg


def test_tiled_without_running_max_overflows_on_large_scores(sol05):
    def tiled_no_max(q, k, v, block, causal=False):
        B, H, S, D = q.shape
        l, acc = torch.zeros(B, H, S, 1, dtype=q.dtype), torch.zeros_like(q)  # noqa: E741 - l: the softmax's running sum, as lesson 05 writes it
        for j in range(0, S, block):
            p = torch.exp(q @ k[:, :, j : j + block].transpose(-2, -1) / math.sqrt(D))
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ v[:, :, j : j + block]  # noqa: E741 - l: the softmax's running sum, as lesson 05 writes it
        return acc / l

    msg = fails(ex05.check_tiled_attention, tiled_no_max, ex05.tiled_cases([(1, 1, 40, 8, 8)], scale=30.0))
    assert "NaN" in msg


# ---- the oracles and case builders


def test_oracle_matches_sdpa_zeros_for_fully_masked_queries():
    case = ex05.attention_cases([(2, 2, 7, 4)], [torch.float64], mask="bool", fully_masked=True)[0]
    q, k, v = case.args
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=case.kwargs["mask"])
    assert (want[0, 0, 0] == 0).all() and (want[0, 0, 3] == 0).all()  # what SDPA returns on this torch
    assert torch.equal(attention.attention_spec(q, k, v, mask=case.kwargs["mask"])[0, 0, 0], want[0, 0, 0])


def test_case_builders_mask_what_their_labels_say():
    (padding,) = ex05.attention_cases([(3, 2, 6, 4)], mask="padding", fully_masked=True)
    keep = padding.kwargs["mask"]
    assert keep.shape == (3, 1, 1, 6) and not keep[0].any() and keep[1, ..., :5].all() and not keep[1, ..., 5]
    (additive,) = ex05.attention_cases([(1, 2, 9, 3)], mask="additive", fully_masked=True)
    add = additive.kwargs["mask"]
    assert add.shape == (9, 9) and torch.isneginf(add[8]).all() and torch.isfinite(add[:8, 0]).all()
    for case in ex05.softmax_cases([((6, 10), -1), ((3, 8, 2), 1)], neg_inf=True):
        x, dim = case.args[0], case.kwargs["dim"]
        assert torch.isneginf(x).any() and torch.isfinite(x).any(dim=dim).all()
    (big,) = ex05.tiled_cases([(1, 1, 40, 8, 8)], scale=30.0)
    assert float((big.args[0] @ big.args[1].transpose(-2, -1)).abs().max()) / math.sqrt(8) > 710  # exp overflows f64


# ---- bad input gets named errors


def test_guard_errors(sol05):
    q = torch.ones(2, 3, 5, 4)
    cases = [
        (lambda: sol05["softmax"]([1.0, 2.0]), TypeError, r"softmax: x must be a torch.Tensor, got list"),
        (lambda: sol05["softmax"](torch.tensor(1.0)), ValueError, r"softmax: x is a 0-d tensor"),
        (
            lambda: sol05["softmax"](torch.ones(2, 3), dim=2),
            IndexError,
            r"softmax: dim=2 is out of range for x of shape \(2, 3\) \(2-D\); use a dim from -2 to 1",
        ),
        (lambda: sol05["softmax"](torch.arange(3)), TypeError, r"must be floating point"),
        (
            lambda: sol05["layer_norm"](torch.ones(2, 4), torch.ones(3), torch.ones(4)),
            ValueError,
            r"layer_norm: x has shape \(2, 4\) and weight has shape \(3,\); weight must be \(4,\)",
        ),
        (
            lambda: sol05["layer_norm"](torch.ones(2, 4), torch.ones(4), torch.ones(4, dtype=torch.float64)),
            TypeError,
            r"x is torch.float32 but bias is torch.float64",
        ),
        (
            lambda: sol05["layer_norm"](torch.ones(2, 4), torch.ones(4), torch.ones(4), eps=0),
            ValueError,
            r"eps must be a positive number",
        ),
        (
            lambda: sol05["attention"](q, torch.ones(2, 3, 6, 4), q),
            ValueError,
            r"attention: q has shape \(2, 3, 5, 4\), k has shape \(2, 3, 6, 4\), v has shape \(2, 3, 5, 4\)",
        ),
        (
            lambda: sol05["attention"](torch.ones(5, 4), q, q),
            ValueError,
            r"attention: q must be 4-D \(B, H, S, D\), got shape \(5, 4\) \(2-D\)",
        ),
        (lambda: sol05["attention"](q, q.double(), q), TypeError, r"q is torch.float32, k is torch.float64"),
        (
            lambda: sol05["attention"](q, q, q, mask=torch.ones(5, 6, dtype=torch.bool)),
            ValueError,
            r"mask has shape \(5, 6\), which does not broadcast to the scores' shape \(B, H, S, S\) = \(2, 3, 5, 5\)",
        ),
        (
            lambda: sol05["attention"](q, q, q, mask=torch.ones(5, 5, dtype=torch.int64)),
            TypeError,
            r"mask is torch.int64; use a boolean mask",
        ),
        (
            lambda: sol05["attention"](q, q, q, mask=torch.ones(5, 5, dtype=torch.bool), causal=True),
            ValueError,
            r"pass either mask or causal=True, not both",
        ),
        (lambda: sol05["attention"](q, q, q, causal=1), TypeError, r"causal must be True or False, got int"),
        (
            lambda: sol05["tiled_attention"](q, q, q, 0),
            ValueError,
            r"tiled_attention: block_size=0, but it must be at least 1",
        ),
        (lambda: sol05["tiled_attention"](q, q, q, 2.0), TypeError, r"block_size must be an int, got float"),
        (
            lambda: sol05["multi_head_attention"](torch.ones(2, 5, 8), torch.ones(24, 8), torch.ones(8, 8), 3),
            ValueError,
            r"n_heads=3 does not divide E=8",
        ),
        (
            lambda: sol05["multi_head_attention"](torch.ones(2, 5, 8), torch.ones(8, 24), torch.ones(8, 8), 2),
            ValueError,
            r"x has shape \(2, 5, 8\) \(E = 8\) and W_qkv has shape \(8, 24\); W_qkv must be \(24, 8\)",
        ),
        (
            lambda: sol05["multi_head_attention"](torch.ones(5, 8), torch.ones(24, 8), torch.ones(8, 8), 2),
            ValueError,
            r"x must be 3-D \(B, S, E\), got shape \(5, 8\)",
        ),
        (lambda: sol05["attention_flops"](1, 2, 0, 4), ValueError, r"attention_flops: S=0, but it must be at least 1"),
        (lambda: sol05["attention_flops"](1, 2.0, 8, 4), TypeError, r"attention_flops: H must be an int, got float"),
    ]
    for call, error, text in cases:
        with pytest.raises(error, match=text):
            call()


def test_broadcastable_masks_are_accepted(sol05):
    q = torch.randn(2, 3, 5, 4)
    for shape in [(5, 5), (2, 1, 5, 5), (2, 1, 1, 5), (1, 3, 5, 5)]:
        mask = torch.rand(shape) > 0.3
        got = sol05["attention"](q, q, q, mask=mask)
        assert torch.allclose(got, F.scaled_dot_product_attention(q, q, q, attn_mask=mask), atol=1e-6)


# ---- twoprim.topics.attention helpers


@pytest.mark.parametrize("kwargs", [{}, {"causal": True}, {"mask": "bool"}, {"mask": "additive"}])
def test_attention_spec_and_two_gemm_attention_match_sdpa(kwargs: dict[str, Any]):
    q, k, v = (torch.randn(2, 2, 5, 3, dtype=torch.float64) for _ in range(3))
    if kwargs.get("mask") == "bool":
        kwargs = {"mask": torch.rand(2, 1, 5, 5) > 0.3}  # (the parameter's dict: str -> Any)
        kwargs["mask"][..., 0] = True
    elif kwargs.get("mask") == "additive":
        kwargs = {"mask": torch.randn(5, 5, dtype=torch.float64)}
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=kwargs.get("mask"), is_causal=kwargs.get("causal", False))
    assert torch.allclose(attention.attention_spec(q, k, v, **kwargs), want, atol=1e-12)
    assert torch.allclose(attention.two_gemm_attention(q, k, v, **kwargs), want, atol=1e-12)


def test_count_flops_agrees_with_flop_counter_mode_and_counts_the_softmax():
    from torch.utils.flop_counter import FlopCounterMode

    B, H, S, D = 2, 3, 64, 16
    q = torch.randn(B, H, S, D)
    counts = attention.count_flops(attention.two_gemm_attention, q, q, q)
    with FlopCounterMode(display=False) as counter:
        attention.two_gemm_attention(q, q, q)
    assert attention.gemm_and_other(counts) == {"gemm": counter.get_total_flops(), "other": 6 * B * H * S * S}
    assert counts["bmm"] == 4 * B * H * S * S * D and counts["exp"] == B * H * S * S
    meta = torch.empty(B, H, S, D, device="meta")
    assert attention.count_flops(attention.two_gemm_attention, meta, meta, meta) == counts
    causal = attention.gemm_and_other(
        attention.count_flops(attention.two_gemm_attention, meta, meta, meta, causal=True)
    )
    assert causal["other"] == 7 * B * H * S * S  # the mask adds one select per score


def test_record_allocations_sees_storage_not_shape():
    x = torch.randn(100, 100)
    with attention.record_allocations() as allocs:
        x[:2]  # a view: the base's 10,000 elements
        torch.ones(3).expand(50, 3)  # an expand: 3 elements behind a (50, 3) shape
        x @ x  # a new 10,000-element tensor
    by_op = {a.op: a for a in allocs}
    assert by_op["slice"].storage_elements == 10_000 and by_op["slice"].shape == (2, 100)
    assert by_op["expand"].storage_elements == 3 and by_op["expand"].shape == (50, 3)
    assert by_op["mm"].storage_elements == 10_000


def test_peak_memory_counts_live_tensors_only():
    def fn():
        a = torch.ones(1000, 1000)  # 4 MB
        del a  # freed before the next one
        b = torch.ones(1000, 1000)
        c = b.view(-1)  # a view allocates nothing
        return c * 2  # b and the result alive together: 8 MB

    assert attention.peak_memory(fn) == 8_000_000
    x = torch.ones(1000, 1000)
    assert attention.peak_memory(lambda t: t[:10], x) == 0  # a view of an input is the input's memory


def test_peak_memory_of_naive_and_tiled_attention(sol05):
    q = torch.randn(1, 1, 512, 16)
    scores = attention.scores_bytes(1, 1, 512)
    assert scores == 512 * 512 * 4
    assert attention.peak_memory(attention.two_gemm_attention, q, q, q) >= 2 * scores
    assert attention.peak_memory(sol05["tiled_attention"], q, q, q, 64) < scores / 4


def test_plots_draw():
    w = torch.softmax(torch.randn(4, 4).masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), -math.inf), -1)
    fig = attention.heatmap({"a": w, "b": w}, labels=list("abcd"), title="t")
    assert len(fig.axes) == 3  # two panels and a colour bar
    fig = attention.share_bars({"FLOPs": {"x": 1, "y": 3}, "time": {"x": 2, "y": 2}}, title="t")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["FLOPs", "time"]


# ---- every rule ex05 states has a visible case (issue #43): a wrong answer breaking only that rule passed the visible
# check before its case was added, and fails it now with a message about its own mistake


def _softmax_clears_infinities(x, dim=-1):
    """Wrong: 'guards' against infinities by zeroing them, which gives the masked (-inf) entries a weight."""
    x = torch.where(torch.isinf(x), torch.zeros_like(x), x)
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _layer_norm_one_pass(x, weight, bias, eps=1e-5):
    """Wrong: the one-pass variance E[x²] − E[x]², which cancels for rows far from 0."""
    mu = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mu * mu
    return (x - mu) / torch.sqrt(var + eps) * weight + bias


def _attention_nan_rows(q, k, v, mask=None, causal=False):
    """Wrong: a query whose keys are all masked gets softmax's 0/0 = NaN, not SDPA's zeros."""
    S, D = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), -math.inf)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)) @ v


def _tiled_square_causal_mask(q, k, v, block_size, causal=False):
    """Wrong: one causal mask of block_size × block_size for every diagonal tile, which a last tile shorter than
    block_size cannot take."""
    B, H, S, D = q.shape
    diagonal = torch.ones(block_size, block_size, dtype=torch.bool).tril()
    out = torch.empty_like(q)
    for i0 in range(0, S, block_size):
        i1 = min(i0 + block_size, S)
        q_i = q[:, :, i0:i1] / math.sqrt(D)
        m = torch.full((B, H, i1 - i0, 1), -math.inf, dtype=q.dtype)
        l = torch.zeros(B, H, i1 - i0, 1, dtype=q.dtype)  # noqa: E741 - l: the softmax's running sum, as lesson 05 writes it
        acc = torch.zeros(B, H, i1 - i0, D, dtype=q.dtype)
        for j0 in range(0, i1 if causal else S, block_size):
            j1 = min(j0 + block_size, S)
            s = q_i @ k[:, :, j0:j1].transpose(-2, -1)
            if causal and j0 == i0:
                s = s.masked_fill(~diagonal, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            p, alpha = torch.exp(s - m_new), torch.exp(m - m_new)
            l, acc, m = l * alpha + p.sum(dim=-1, keepdim=True), acc * alpha + p @ v[:, :, j0:j1], m_new  # noqa: E741 - l: the softmax's running sum, as lesson 05 writes it
        out[:, :, i0:i1] = acc / l
    return out


@pytest.mark.parametrize(
    "check, wrong, rule, says",
    [
        (
            ex05.check_softmax,
            named("softmax", _softmax_clears_infinities),
            lambda c: "-inf" in c.label,
            ("an entry of -inf (a masked score) gets weight exactly 0",),
        ),
        (
            ex05.check_layer_norm,
            named("layer_norm", _layer_norm_one_pass),
            lambda c: "near 3000" in c.label,
            ("E[x²] − E[x]² cancels catastrophically",),
        ),
        (
            ex05.check_attention,
            named("attention", _attention_nan_rows),
            lambda c: "no key" in c.label or "hides every key" in c.label,
            ("which sees no key at all", "give them an output of zeros"),
        ),
        (
            ex05.check_tiled_attention,
            named("tiled_attention", _tiled_square_causal_mask),
            lambda c: "causal" in c.label and "not a multiple" in c.label,
            ("must match the size of tensor",),
        ),
    ],
    ids=["softmax-neg-inf", "layer-norm-centred", "attention-no-key", "tiled-causal-ragged"],
)
def test_each_stated_rule_of_ex05_has_a_visible_case(check, wrong, rule, says):
    assert_rule_is_visible(check, wrong, rule, *says)


# ---- the rule "your own code": the course's attention is the grader's ground truth, not the learner's


def _mha_on_the_course_attention(x, W_qkv, W_o, n_heads, causal=False):
    B, S, E = x.shape
    heads = lambda t: t.reshape(B, S, n_heads, E // n_heads).transpose(1, 2)  # noqa: E731 - (B, S, E) -> (B, H, S, D)
    q, k, v = (x @ W_qkv.T).split(E, dim=-1)
    out = attention.two_gemm_attention(heads(q), heads(k), heads(v), None, causal)
    return out.transpose(1, 2).reshape(B, S, E) @ W_o.T


@pytest.mark.parametrize(
    "check, cheat",
    [
        # NaN rows (every key masked) set to SDPA's zeros: this passed the visible check before the rule
        (
            ex05.check_attention,
            lambda q, k, v, mask=None, causal=False: torch.nan_to_num(
                attention.two_gemm_attention(q, k, v, mask, causal), nan=0.0
            ),
        ),
        (ex05.check_multi_head_attention, _mha_on_the_course_attention),
    ],
    ids=["attention", "multi_head_attention"],
)
def test_calling_the_courses_attention_is_refused(check, cheat):
    msg = fails(check, named(check.__name__.removeprefix("check_"), cheat))
    assert "breaks a rule of this exercise: your own code: no calls to the course's attention" in msg, msg
    assert "found:    it called twoprim.attention.two_gemm_attention ×1" in msg and "next:" in msg, msg
