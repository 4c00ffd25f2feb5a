"""Checks for assignment ex05_attention: softmax and layer norm as reductions, attention as two batched GEMMs,
multi-head attention, a tiled online-softmax attention, and its FLOP count.

Visible checks run with the default cases below; the hidden checks in the solution notebook pass their own cases
(built with the same builders) and `hidden=0`. Every oracle is measured at check time on this torch version, in
float64: `torch.softmax`, `F.layer_norm`, `F.scaled_dot_product_attention` (including what it returns for a query
whose keys are all masked), `nn.MultiheadAttention`, and `FlopCounterMode` for the GEMM FLOPs.

The rules each exercise states are checked on what ran (`twoprim.core.record.record_calls`):
- `softmax`: no built-in softmax (`torch.softmax`, `F.softmax`, `Tensor.softmax`, `log_softmax`, `logsumexp`).
- `layer_norm`: no built-in normalisation (`F.layer_norm`, `native_layer_norm`, group/batch/instance/RMS norm).
- `attention`: no fused attention (SDPA or any `*scaled_dot_product*` / `*attention*` op); its two products are
  exactly two GEMM ops (`bmm`/`mm`/`baddbmm`, whatever Python spelling reached them) doing 4·B·H·S²·D FLOPs
  together, so they are batched over B and H. Any softmax may be used (your own is the point of the exercise).
- `multi_head_attention`: no fused attention; exactly four GEMM ops: the QKV projection (one GEMM with W_qkv), the
  two attention products, the output projection.
- `tiled_attention`: no fused attention, no built-in softmax, the products are GEMMs that compute every score at most
  once (GEMM FLOPs <= 4·B·H·S²·D), and no ATen op returns a tensor whose storage holds S² or more elements (checked
  on the cases where every honest tiling stays below that: S > B·H·max(min(block_size, S), D)).
- `attention_flops`: arithmetic on the four sizes, no tensor ops.
- `attention`, `multi_head_attention`, `tiled_attention`: no calls to the course's attention
  (`twoprim.attention.two_gemm_attention`, `attention_spec`), the grader's ground truth (`no_grader_calls`).

Why this module is long: one assignment's checks (six graded functions, including the tiled-attention memory rules
and the FLOP count), each with its case builders, judge, rules and messages, its guard and its hints; split further,
a check would sit apart from the messages it gives.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from twoprim.core import guards
from twoprim.core.cases import dtype_name, randn
from twoprim.core.checks import (
    CallLog,
    Case,
    CheckResult,
    Mismatch,
    Rule,
    describe,
    eps,
    forbid,
    judge_tensor,
    no_grader_calls,
    run_check,
)
from twoprim.core.record import gemm_flops, record_allocations
from twoprim.topics import attention as attention_topic
from twoprim.topics.attention import count_flops, gemm_and_other, two_gemm_attention

__all__ = [
    "softmax_cases",
    "layer_norm_cases",
    "attention_cases",
    "mha_cases",
    "tiled_cases",
    "flop_cases",
    "check_softmax",
    "check_layer_norm",
    "check_attention",
    "check_multi_head_attention",
    "check_tiled_attention",
    "check_attention_flops",
    "guard_softmax",
    "guard_layer_norm",
    "guard_attention",
    "guard_multi_head_attention",
    "guard_tiled_attention",
    "guard_sizes",
]

TASK = "ex05_attention"


def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)


# ----------------------------------------------------------------------------------------------------------------
# Guards: the first line of every graded function (outside the solution), a clear error naming the shapes
# ----------------------------------------------------------------------------------------------------------------


def _int(fn: str, name: str, value: Any, *, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}.")
    if value < low:
        raise ValueError(f"{fn}: {name}={value}, but it must be at least {low}.")
    return value


def _flag(fn: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be True or False, got {type(value).__name__}.")


def guard_softmax(fn: str, x: Any, dim: Any) -> None:
    """x: a floating tensor with at least one dimension; dim: an int naming one of its dimensions."""
    guards.tensor(fn, "x", x)
    if x.dim() == 0:
        raise ValueError(
            f"{fn}: x is a 0-d tensor (a single number); softmax needs at least one dimension to normalise over."
        )
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{fn}: dim must be an int, got {type(dim).__name__}.")
    if not -x.dim() <= dim < x.dim():
        raise IndexError(
            f"{fn}: dim={dim} is out of range for x of shape {_shape(x)} ({x.dim()}-D); use a dim "
            f"from {-x.dim()} to {x.dim() - 1}."
        )


def guard_layer_norm(fn: str, x: Any, weight: Any, bias: Any, eps: Any) -> None:
    """x (..., E); weight and bias (E,) of x's dtype; eps a positive number."""
    guards.tensor(fn, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{fn}: x is a 0-d tensor; layer norm normalises over the last dimension, so x needs one.")
    E = x.shape[-1]
    for name, value in (("weight", weight), ("bias", bias)):
        guards.tensor(fn, name, value)
        if _shape(value) != (E,):
            raise ValueError(
                f"{fn}: x has shape {_shape(x)} and {name} has shape {_shape(value)}; {name} must be "
                f"({E},): one number per feature of the last dimension."
            )
        guards.same_dtype(fn, x=x, **{name: value})
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"{fn}: eps must be a positive number, got {eps!r}.")


def _qkv(fn: str, q: Any, k: Any, v: Any) -> tuple[int, int, int, int]:
    for name, value in (("q", q), ("k", k), ("v", v)):
        guards.tensor(fn, name, value)
        if value.dim() != 4:
            raise ValueError(
                f"{fn}: {name} must be 4-D (B, H, S, D), got shape {_shape(value)} ({value.dim()}-D). "
                f"Add the missing batch or head dimensions with {name}[None] or {name}.unsqueeze(...)."
            )
    if not _shape(q) == _shape(k) == _shape(v):
        raise ValueError(
            f"{fn}: q has shape {_shape(q)}, k has shape {_shape(k)}, v has shape {_shape(v)}; all three "
            f"must be (B, H, S, D) with the same sizes."
        )
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"{fn}: q is {q.dtype}, k is {k.dtype}, v is {v.dtype}; convert them to one dtype.")
    B, H, S, D = q.shape
    if min(B, H, S, D) == 0:
        raise ValueError(f"{fn}: q has shape {_shape(q)}; every size must be at least 1.")
    return B, H, S, D


def guard_attention(fn: str, q: Any, k: Any, v: Any, mask: Any = None, causal: Any = False) -> None:
    """q, k, v (B, H, S, D) of one dtype; mask None, boolean (True = keep) or additive floats of q's dtype, shaped
    to broadcast to (B, H, S, S); causal a bool, and not together with a mask (as F.scaled_dot_product_attention)."""
    B, H, S, D = _qkv(fn, q, k, v)
    _flag(fn, "causal", causal)
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{fn}: mask must be None or a torch.Tensor, got {type(mask).__name__}.")
    if mask.dtype != torch.bool and mask.dtype != q.dtype:
        raise TypeError(
            f"{fn}: mask is {mask.dtype}; use a boolean mask (True = attend) or an additive float mask "
            f"of q's dtype ({q.dtype})."
        )
    target = (B, H, S, S)
    try:
        ok = mask.dim() <= 4 and torch.broadcast_shapes(_shape(mask), target) == target
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{fn}: mask has shape {_shape(mask)}, which does not broadcast to the scores' shape "
            f"(B, H, S, S) = {target}; use e.g. ({S}, {S}), ({B}, 1, {S}, {S}) or ({B}, 1, 1, {S})."
        )
    if causal:
        raise ValueError(
            f"{fn}: pass either mask or causal=True, not both (F.scaled_dot_product_attention rejects "
            f"the pair too); fold the causal mask into your mask instead."
        )


def guard_tiled_attention(fn: str, q: Any, k: Any, v: Any, block_size: Any, causal: Any = False) -> None:
    """q, k, v (B, H, S, D) of one dtype; block_size an int >= 1; causal a bool."""
    _qkv(fn, q, k, v)
    _int(fn, "block_size", block_size)
    _flag(fn, "causal", causal)


def guard_multi_head_attention(fn: str, x: Any, W_qkv: Any, W_o: Any, n_heads: Any, causal: Any = False) -> None:
    """x (B, S, E); W_qkv (3E, E); W_o (E, E); n_heads an int that divides E; causal a bool."""
    guards.tensor(fn, "x", x)
    if x.dim() != 3:
        raise ValueError(f"{fn}: x must be 3-D (B, S, E), got shape {_shape(x)} ({x.dim()}-D).")
    E = x.shape[-1]
    for name, value, want in (("W_qkv", W_qkv, (3 * E, E)), ("W_o", W_o, (E, E))):
        guards.tensor(fn, name, value)
        if _shape(value) != want:
            raise ValueError(
                f"{fn}: x has shape {_shape(x)} (E = {E}) and {name} has shape {_shape(value)}; {name} "
                f"must be {want}, in nn.Linear's (out, in) layout."
            )
        guards.same_dtype(fn, x=x, **{name: value})
    _int(fn, "n_heads", n_heads)
    if E % n_heads:
        raise ValueError(
            f"{fn}: n_heads={n_heads} does not divide E={E}; each head gets E / n_heads features, so "
            f"pick a divisor of {E}."
        )
    _flag(fn, "causal", causal)


def guard_sizes(fn: str, **sizes: Any) -> None:
    """Every size is an int >= 1."""
    for name, value in sizes.items():
        _int(fn, name, value)


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run)
# ----------------------------------------------------------------------------------------------------------------


def softmax_cases(
    specs: Sequence[tuple[tuple[int, ...], int]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    scale: float = 1.0,
    neg_inf: bool = False,
    seed: int = 0,
) -> list[Case]:
    """(x, dim) for every (shape, dim) × dtype; x ~ N(0, scale²). `neg_inf`: about a quarter of the entries are -inf
    (masked scores), never a whole slice along dim."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for shape, dim in specs:
            x = randn(shape, dtype, gen, scale=scale)
            notes = [f"x {tuple(shape)}", f"dim={dim}", dtype_name(dtype)]
            if scale >= 50:
                notes.append(
                    f"values of order ±{scale:g} (exp overflows {dtype_name(dtype)} above "
                    f"{math.log(torch.finfo(dtype).max):.0f})"
                )
            if neg_inf:
                hide = torch.rand(shape, generator=gen) < 0.25
                first: list[slice | int] = [slice(None)] * len(shape)
                first[dim] = 0
                hide[tuple(first)] = False  # every slice along dim keeps at least one finite entry
                x = x.masked_fill(hide, -math.inf)
                notes.append("some entries -inf")
            cases.append(Case(", ".join(notes), (x,), {"dim": dim}))
    return cases


def layer_norm_cases(
    shapes: Sequence[tuple[int, ...]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    offset: float = 0.0,
    eps: float | None = None,
    seed: int = 0,
) -> list[Case]:
    """(x, weight, bias[, eps]) with x ~ offset + N(0, 1) of the given shapes, weight ~ 1 + N(0, 0.25), bias ~
    N(0, 0.25). A large `offset` makes E[x²] − E[x]² cancel catastrophically in float32."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for shape in shapes:
            E = shape[-1]
            x = (offset + torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)
            w = (1 + 0.5 * torch.randn(E, generator=gen, dtype=torch.float64)).to(dtype)
            b = randn((E,), dtype, gen, scale=0.5)
            notes = [f"x {tuple(shape)}", f"E={E}", dtype_name(dtype)]
            if offset:
                notes.append(f"every row near {offset:g} with spread 1")
            kwargs = {}
            if eps is not None:
                kwargs["eps"] = eps
                notes.append(f"eps={eps:g}")
            cases.append(Case(", ".join(notes), (x, w, b), kwargs))
    return cases


def _qkv_tensors(shape, dtype, gen, scale):
    q = randn(shape, dtype, gen, scale=scale)
    k = randn(shape, dtype, gen, scale=scale)
    v = randn(shape, dtype, gen)
    return q, k, v


def _mask(kind: str, B: int, H: int, S: int, dtype: torch.dtype, gen, fully_masked: bool) -> tuple[torch.Tensor, str]:
    if kind == "bool":
        keep = torch.rand(B, H, S, S, generator=gen) < 0.7
        keep[..., 0] = True  # the first key is always visible ...
        note = f"boolean mask ({B}, {H}, {S}, {S})"
        if fully_masked:
            rows = sorted({0, S // 2})
            keep[0, 0, rows, :] = False  # ... except for these queries, which see no key at all
            note += f", queries {rows} of batch 0, head 0 see no key"
        return keep, note
    if kind == "additive":
        add = 2.0 * torch.randn(S, S, generator=gen, dtype=torch.float64)
        add = add.masked_fill(torch.rand(S, S, generator=gen) < 0.25, -math.inf)
        add[:, 0] = 0.0
        note = f"additive float mask ({S}, {S}) with -inf entries"
        if fully_masked:
            add[S - 1, :] = -math.inf
            note += f", query {S - 1} sees no key (a row of -inf)"
        return add.to(dtype), note
    if kind == "padding":
        keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
        for b in range(B):
            hidden = min(b, S - 1)  # batch b hides its last b keys (always keeping the first)
            if hidden:
                keep[b, ..., S - hidden :] = False
        note = f"key-padding mask ({B}, 1, 1, {S}): batch b hides its last b keys"
        if fully_masked:
            keep[0] = False
            note += ", batch 0 hides every key"
        return keep, note
    raise ValueError(f"unknown mask kind {kind!r}")


def attention_cases(
    shapes: Sequence[tuple[int, int, int, int]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    causal: bool = False,
    mask: str | None = None,
    fully_masked: bool = False,
    scale: float = 1.0,
    seed: int = 0,
) -> list[Case]:
    """(q, k, v) of shape (B, H, S, D) with mask= (kind "bool", "additive" or "padding") or causal=True.

    q and k ~ N(0, scale²), so the scores have spread about scale²; scale = 30 makes exp overflow in float64.
    """
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for B, H, S, D in shapes:
            q, k, v = _qkv_tensors((B, H, S, D), dtype, gen, scale)
            notes = [f"(B, H, S, D) = {(B, H, S, D)}", dtype_name(dtype)]
            kwargs: dict = {}
            if causal:
                kwargs["causal"] = True
                notes.append("causal")
            if mask is not None:
                kwargs["mask"], note = _mask(mask, B, H, S, dtype, gen, fully_masked)
                notes.append(note)
            if scale != 1.0:
                notes.append(f"q and k ×{scale:g}: scores of order ±{scale * scale:g}")
            cases.append(Case(", ".join(notes), (q, k, v), kwargs))
    return cases


def mha_cases(
    specs: Sequence[tuple[int, int, int, int]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    causal: bool = False,
    seed: int = 0,
) -> list[Case]:
    """(x (B, S, E), W_qkv (3E, E), W_o (E, E), n_heads) for every (B, S, E, n_heads) × dtype."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for B, S, E, H in specs:
            x = randn((B, S, E), dtype, gen)
            W_qkv = randn((3 * E, E), dtype, gen, scale=1 / math.sqrt(E))
            W_o = randn((E, E), dtype, gen, scale=1 / math.sqrt(E))
            notes = [f"x (B, S, E) = {(B, S, E)}", f"n_heads={H} (D = {E // H})", dtype_name(dtype)]
            kwargs = {"causal": True} if causal else {}
            if causal:
                notes.append("causal")
            cases.append(Case(", ".join(notes), (x, W_qkv, W_o, H), kwargs))
    return cases


def tiled_cases(
    specs: Sequence[tuple[int, int, int, int, int]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    causal: bool = False,
    scale: float = 1.0,
    seed: int = 0,
) -> list[Case]:
    """(q, k, v, block_size) for every (B, H, S, D, block_size) × dtype."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for B, H, S, D, block in specs:
            q, k, v = _qkv_tensors((B, H, S, D), dtype, gen, scale)
            notes = [f"(B, H, S, D) = {(B, H, S, D)}", f"block_size={block}", dtype_name(dtype)]
            if S % block and block < S:
                notes.append(f"S is not a multiple of block_size (last block {S % block})")
            kwargs = {"causal": True} if causal else {}
            if causal:
                notes.append("causal")
            if scale != 1.0:
                notes.append(f"q and k ×{scale:g}: scores of order ±{scale * scale:g}")
            cases.append(Case(", ".join(notes), (q, k, v, block), kwargs))
    return cases


def flop_cases(sizes: Sequence[tuple[int, int, int, int]]) -> list[Case]:
    """(B, H, S, D) as four ints."""
    return [Case(f"(B, H, S, D) = {tuple(s)}", tuple(s)) for s in sizes]


# ----------------------------------------------------------------------------------------------------------------
# Oracles (measured at check time, float64)
# ----------------------------------------------------------------------------------------------------------------


def _softmax_expected(x, dim=-1):
    return torch.softmax(x.double(), dim=dim).to(x.dtype)


def _layer_norm64(x, w, b, eps=1e-5):
    return F.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(), eps)


def _attention64(q, k, v, mask=None, causal=False):
    """What F.scaled_dot_product_attention returns on this torch version, in float64."""
    mask64 = mask if mask is None or mask.dtype == torch.bool else mask.double()
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask64, is_causal=causal)


def _attention_expected(q, k, v, mask=None, causal=False):
    return _attention64(q, k, v, mask, causal).to(q.dtype)


def _mha64(x, W_qkv, W_o, n_heads, causal=False):
    B, S, E = x.shape
    layer = torch.nn.MultiheadAttention(E, n_heads, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        layer.in_proj_weight.copy_(W_qkv.double())
        layer.out_proj.weight.copy_(W_o.double())
        mask = torch.nn.Transformer.generate_square_subsequent_mask(S, dtype=torch.float64) if causal else None
        x64 = x.double()
        out, _ = layer(x64, x64, x64, need_weights=False, attn_mask=mask, is_causal=causal)
    return out


def _measured_flops(B, H, S, D) -> dict[str, int]:
    """FLOPs of `two_gemm_attention` on (B, H, S, D) meta tensors: GEMMs by FlopCounterMode, the rest per element."""
    q = torch.empty(B, H, S, D, device="meta")
    return gemm_and_other(count_flops(two_gemm_attention, q, q, q))


# ----------------------------------------------------------------------------------------------------------------
# Rules
# ----------------------------------------------------------------------------------------------------------------

_SOFTMAX_FUNCTIONS = {"softmax", "log_softmax", "softmin", "logsumexp", "_softmax", "_log_softmax"}
_SOFTMAX_ATEN = {"softmax", "_softmax", "log_softmax", "_log_softmax", "logsumexp", "_safe_softmax"}

_NO_BUILTIN_SOFTMAX = forbid(
    "no built-in softmax (torch.softmax, F.softmax, Tensor.softmax, log_softmax, logsumexp)",
    _SOFTMAX_FUNCTIONS,
    _SOFTMAX_ATEN,
    next_step="write it from its parts: subtract the max along dim (keepdim=True), exp, divide by the sum along dim",
)

_NO_BUILTIN_NORM = forbid(
    "no built-in normalisation (F.layer_norm, group/batch/instance/RMS norm)",
    {"layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "native_layer_norm", "LayerNorm"},
    {
        "native_layer_norm",
        "layer_norm",
        "native_group_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training",
        "_fused_rms_norm",
        "rms_norm",
        "instance_norm",
    },
    next_step="two reductions and an element-wise scale: the mean and the variance over the last dim, then "
    "(x − mean) / sqrt(var + eps) · weight + bias",
)


def _no_fused_attention() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        hits = [
            name
            for name in log.functions
            if "scaled_dot_product" in name
            or "attention" in name.rsplit(".", 1)[-1].lower()
            or name.rsplit(".", 1)[-1] == "MultiheadAttention"
        ]
        hits += [f"aten.{op}" for op in log.aten if "scaled_dot_product" in op or "attention" in op]
        if hits:
            return f"it called {', '.join(sorted(hits))}, a fused attention kernel this exercise rules out"
        return None

    return Rule(
        "no fused attention (F.scaled_dot_product_attention, nn.MultiheadAttention)",
        test,
        "write the scores as a GEMM, then the mask and the softmax, then the second GEMM yourself",
    )


_NO_FUSED_ATTENTION = _no_fused_attention()


def _gemm_listing(log: CallLog, most: int = 4) -> str:
    shown = [f"{op} {' @ '.join(str(s) for s in shapes[-2:])}" for op, shapes in log.gemms[:most]]
    if len(log.gemms) > most:
        shown.append(f"... {len(log.gemms) - most} more")
    return ", ".join(shown) or "none"


def _two_gemms() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        B, H, S, D = case.args[0].shape
        if S < 2 or D < 2:  # einsum may turn a product with a size-1 dimension into a multiplication
            return None
        ops, flops, want = len(log.gemms), log.gemm_flops(), 4 * B * H * S * S * D
        if ops == 0:
            return (
                "it ran no GEMM: the scores or the output came from element-wise products and sums instead of "
                "matmul calls"
            )
        if ops == 2 and flops == want:
            return None
        if ops > 2:
            loop = f", two for each of the B·H = {B * H} (batch, head) pairs: a Python loop" if ops == 2 * B * H else ""
            return f"it ran {ops} GEMM ops{loop} ({_gemm_listing(log)})"
        return (
            f"it ran {ops} GEMM op{'s' if ops != 1 else ''} doing {flops:,} FLOPs ({_gemm_listing(log)}); q·kᵀ "
            f"and p·v are two batched GEMMs of 2·B·H·S²·D FLOPs each, {want:,} together"
        )

    return Rule(
        "the two products are two batched GEMMs (matmul calls), one for q·kᵀ and one for p·v",
        test,
        "scores = q @ k.transpose(-2, -1) is (B, H, S, D) @ (B, H, D, S) -> (B, H, S, S) in one call for "
        "every batch and head; then weights @ v",
    )


def _four_gemms() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        x, _, _, n_heads = case.args
        B, S, E = x.shape
        D = E // n_heads
        if S < 2 or D < 2:
            return None
        proj = 2 * B * S * E * 3 * E
        want = proj + 4 * B * S * S * E + 2 * B * S * E * E
        ops, flops = len(log.gemms), log.gemm_flops()
        if ops == 4 and flops == want:
            return None
        per_op = [gemm_flops(op, shapes) for op, shapes in log.gemms]
        if proj not in per_op:
            return (
                f"no GEMM computed q, k and v together ({_gemm_listing(log)}): the QKV projection is one GEMM, "
                f"x (B·S, E) @ W_qkvᵀ (E, 3E), {proj:,} FLOPs"
            )
        return (
            f"it ran {ops} GEMM ops doing {flops:,} FLOPs ({_gemm_listing(log)}); expected 4 (QKV projection, "
            f"q·kᵀ, p·v, output projection) doing {want:,}"
        )

    return Rule(
        "four GEMMs: one QKV projection with W_qkv, the two attention products batched over heads, one "
        "output projection",
        test,
        "qkv = x @ W_qkv.T (one GEMM, as in lesson 03), split it into q, k, v, reshape to (B, H, S, D), "
        "call your attention, reshape back and multiply by W_o.T",
    )


def _no_square() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        allocations = getattr(log, "allocations", [])
        q, block = case.args[0], case.args[3]
        B, H, S, D = q.shape
        honest = B * H * S * max(min(block, S), D)  # the largest tensor a tiling needs: (B, H, S, max(block, D))
        if honest >= S * S:
            return None  # this case cannot tell a tiling from the full score matrix
        big = [a for a in allocations if a.storage_elements >= S * S]
        if big:
            a = big[0]
            return (
                f"aten.{a.op} returned a {dtype_name(a.dtype)} tensor of shape {a.shape} whose storage holds "
                f"{a.storage_elements:,} elements, at least S² = {S * S:,} (S = {S}): the S×S scores or mask. "
                f"A tiling needs at most (B, H, S, max(block_size, D)) = {honest:,} elements"
            )
        return None

    return Rule(
        "never build the S×S score matrix (or an S×S mask)",
        test,
        "loop over blocks of keys (and of queries): compute one (block, block) tile of scores at a time, "
        "build causal masks per tile from the row and column indices, and keep only a running max, a "
        "running sum and a running output per query",
    )


def _each_score_once() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        B, H, S, D = case.args[0].shape
        if S < 2 or D < 2:
            return None
        flops, most = log.gemm_flops(), 4 * B * H * S * S * D
        if flops == 0:
            return (
                "it ran no GEMM: compute each tile of scores as q_tile @ k_tileᵀ and each partial output as p @ v_tile"
            )
        if flops > most:
            return (
                f"its GEMMs did {flops:,} FLOPs, more than the {most:,} of computing every score once "
                f"(4·B·H·S²·D): a first pass for the max and the sum, then a second pass for the output?"
            )
        return None

    return Rule(
        "one pass: every score computed once, by GEMMs",
        test,
        "keep a running max m and running sum l per query; when a new tile raises the max, rescale l and the "
        "partial output by exp(m_old − m_new) instead of recomputing the scores",
    )


def _no_tensor_ops() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        if log.total:
            ops = ", ".join(f"{op} ×{n}" for op, n in log.aten.most_common(5))
            return f"it ran {log.total} tensor ops ({ops}): it measured instead of counting"
        return None

    return Rule(
        "count with arithmetic on B, H, S and D (no tensors)",
        test,
        "write each GEMM as (M, K) @ (K, N) with its batch, count 2·M·N·K per GEMM, and count one FLOP per "
        "score for each element-wise step of the softmax",
    )


# ----------------------------------------------------------------------------------------------------------------
# Judges
# ----------------------------------------------------------------------------------------------------------------


def _judge_softmax(got, want, case: Case) -> str:
    dtype = case.args[0].dtype
    e = eps(dtype)
    try:
        return judge_tensor(got, want, atol=8 * e, rtol=64 * e)
    except Mismatch as bad:
        if (
            isinstance(got, torch.Tensor)
            and got.shape == want.shape
            and torch.isnan(got).any()
            and not torch.isnan(want).any()
        ):
            raise Mismatch(
                bad.detail,
                next_step="exp overflowed: subtract the largest value along dim (keepdim=True) "
                "before exp; softmax does not change, and the largest exp is 1",
            ) from None
        x = case.args[0]
        if (
            isinstance(got, torch.Tensor)
            and got.shape == want.shape
            and torch.isneginf(x).any()
            and bool((got.double()[torch.isneginf(x)].abs() > 8 * e).any())
        ):
            raise Mismatch(
                bad.detail,
                next_step="an entry of -inf (a masked score) gets weight exactly 0, as exp(-inf "
                "− m) = 0 with m the largest value along dim: leave the -inf entries "
                "as they are (replacing or clamping them gives them weight)",
            ) from None
        if isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype:
            dim = case.kwargs.get("dim", -1)
            sums = got.double().sum(dim)
            if not torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
                raise Mismatch(
                    bad.detail + f"\n  note:     your values sum to {float(sums.reshape(-1)[0]):.6g} "
                    f"along dim={dim}, not 1",
                    next_step="normalise along dim: divide by the sum over dim=dim with keepdim=True",
                ) from None
        raise


def _layer_norm_atol(x, w, b) -> float:
    """Float32 layer norm loses about eps·|x|/σ to rounding in x − mean (σ the row's spread)."""
    e = eps(x.dtype)
    x64 = x.double()
    sigma = x64.var(dim=-1, unbiased=False).clamp_min(1e-12).sqrt()
    ratio = float((x64.abs().amax(dim=-1) / sigma).max()) if x.shape[-1] > 1 else 1.0
    return 16 * e * (1 + ratio) * float(w.double().abs().max()) + 16 * e * float(b.double().abs().max())


def _judge_layer_norm(got, want, case: Case) -> str:
    x, w, b = case.args
    atol = _layer_norm_atol(x, w, b)
    try:
        return judge_tensor(got, want, atol=atol, rtol=16 * eps(x.dtype))
    except Mismatch as bad:
        E = x.shape[-1]
        if isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype and E > 1:
            added = case.kwargs.get("eps", 1e-5)  # layer norm's eps, added to the variance
            x64 = x.double()
            unbiased = (x64 - x64.mean(-1, keepdim=True)) / (x64.var(-1, keepdim=True, unbiased=True) + added).sqrt()
            unbiased = unbiased * w.double() + b.double()
            if torch.allclose(got.double(), unbiased, atol=10 * atol, rtol=1e-4):
                raise Mismatch(
                    bad.detail,
                    next_step="layer norm divides the squared deviations by E, not E − 1: use "
                    "var(..., unbiased=False) (or correction=0), or mean of squares",
                ) from None
            if float(x64.mean().abs()) > 100 * float(x64.std()):
                raise Mismatch(
                    bad.detail,
                    next_step="the rows sit far from 0: E[x²] − E[x]² cancels catastrophically "
                    "there. Subtract the mean first, then average the squared "
                    "deviations (two passes)",
                ) from None
        raise


def _attention_atol(q, k, v, mask=None) -> float:
    """About eps · (largest |score| the softmax sees) · max|v|: a relative error eps in a score of size s moves the
    weights by about eps·s."""
    e = eps(q.dtype)
    D = q.shape[-1]
    abs_scores = float((q.double().abs() @ k.double().abs().transpose(-2, -1)).max()) / math.sqrt(D)
    if mask is not None and mask.dtype != torch.bool:
        finite = mask.double()[torch.isfinite(mask.double())]
        abs_scores += float(finite.abs().max()) if finite.numel() else 0.0
    return 16 * e * (1 + abs_scores) * max(float(v.double().abs().max()), 1e-30)


def _fully_masked_note(got, want, case: Case) -> str | None:
    """When the answer has NaN where SDPA returned zeros for a query that sees no key: say so."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return None
    bad = torch.isnan(got.double()) & ~torch.isnan(want.double())
    if not bad.any():
        return None
    rows = bad.any(dim=-1)
    zero_rows = (want.double() == 0).all(dim=-1)
    if (rows & zero_rows).any():
        idx = tuple(int(i) for i in (rows & zero_rows).nonzero()[0])
        return (
            f"NaN for query {idx[2]} of batch {idx[0]}, head {idx[1]}, which sees no key at all; "
            f"F.scaled_dot_product_attention returns zeros there on this torch version (torch {torch.__version__})"
        )
    return None


def _judge_attention(got, want, case: Case) -> str:
    q, k, v = case.args[:3]
    note = _fully_masked_note(got, want, case)
    if note:
        raise Mismatch(
            note,
            next_step="find the queries whose scores are all -inf (after masking) and give them an "
            "output of zeros, e.g. torch.where on the row max being -inf; the softmax "
            "there is 0/0",
        )
    try:
        return judge_tensor(got, want, atol=_attention_atol(q, k, v, case.kwargs.get("mask")), rtol=16 * eps(q.dtype))
    except Mismatch as bad:
        if isinstance(got, torch.Tensor) and torch.isnan(got).any() and not torch.isnan(want).any():
            raise Mismatch(
                bad.detail,
                next_step="exp overflowed or a row was all -inf: subtract each row's max "
                "score before exp (your stable softmax)",
            ) from None
        raise


def _judge_mha(got, want, case: Case) -> str:
    x, W_qkv, W_o, n_heads = case.args
    B, S, E = x.shape
    D = E // n_heads
    x64, W64 = x.double(), W_qkv.double()
    # each projected number carries a rounding error of about eps · Σ|x||W| (its abs-sum) ...
    abs_qkv = float((x64.abs() @ W64.abs().T).max())
    # ... which the scores and the softmax amplify as in attention, and the output projection sums E of
    q, k, _ = (x64 @ W64.T).split(E, dim=-1)
    q, k = (t.reshape(B, S, n_heads, D).transpose(1, 2) for t in (q, k))
    abs_scores = float((q.abs() @ k.abs().transpose(-2, -1)).max()) / math.sqrt(D)
    w_o = float(W_o.double().abs().sum(dim=1).max())
    atol = 16 * eps(x.dtype) * (1 + abs_scores) * max(abs_qkv, 1e-30) * max(w_o, 1e-30)
    return judge_tensor(got, want, atol=atol, rtol=16 * eps(x.dtype))


def _judge_flops(got, want, case: Case) -> str:
    B, H, S, D = case.args
    if not isinstance(got, dict):
        raise Mismatch(
            f"{describe(got)}, but attention_flops returns a dict {{'gemm': ..., 'other': ...}}",
            next_step="return {'gemm': gemm_flops, 'other': other_flops}",
        )
    if set(got) != {"gemm", "other"}:
        raise Mismatch(
            f"a dict with keys {sorted(map(str, got))}, expected exactly the keys ['gemm', 'other']",
            next_step="return {'gemm': gemm_flops, 'other': other_flops}",
        )
    for key in ("gemm", "other"):
        value = got[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise Mismatch(
                f"{key} = {value!r} ({type(value).__name__}), but a FLOP count is a Python int",
                next_step="use integer arithmetic (* and //), not /, and return plain ints",
            )
    if got["gemm"] != want["gemm"]:
        raise Mismatch(
            f"gemm = {got['gemm']:,}, but FlopCounterMode counted {want['gemm']:,} for q @ kᵀ and p @ v on "
            f"(B, H, S, D) = {(B, H, S, D)}",
            next_step="each product is a batch of B·H GEMMs (S, D) @ (D, S) and (S, S) @ (S, D); "
            "a GEMM (M, K) @ (K, N) costs 2·M·N·K FLOPs (one multiply and one add per term)",
        )
    if got["other"] != want["other"]:
        raise Mismatch(
            f"other = {got['other']:,}, but the unmasked two_gemm_attention ran {want['other']:,} FLOPs outside GEMMs "
            f"on (B, H, S, D) = {(B, H, S, D)}",
            next_step="count one FLOP per score (B·H·S² scores) for each step: the scale, the row max, the "
            "subtraction, the exp, the row sum and the division",
        )
    return "exact"


# ----------------------------------------------------------------------------------------------------------------
# Recording the allocations as well as the calls
# ----------------------------------------------------------------------------------------------------------------


def _with_allocations(fn: Callable) -> Callable:
    """`fn`, run under `record_allocations`; the list is attached to the call log by `_AllocRule` through a cell."""
    holder: dict = {}

    def wrapped(*args, **kwargs):
        with record_allocations() as allocs:
            result = fn(*args, **kwargs)
        holder["last"] = allocs
        return result

    wrapped.__name__ = getattr(fn, "__name__", "tiled_attention")
    wrapped.holder = holder  # type: ignore[attr-defined]
    return wrapped


def _alloc_rule(base: Rule, holder: dict) -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        log.allocations = holder.get("last", [])  # type: ignore[attr-defined]
        return base.test(log, case)

    return Rule(base.name, test, base.next_step)


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def check_softmax(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `softmax`: a stable softmax along any dim, equal to torch.softmax, without it."""
    if cases is None:
        cases = (
            softmax_cases([((5,), -1), ((3, 7), -1), ((4, 6), 0), ((2, 3, 5), 1)], [torch.float32, torch.float64])
            + softmax_cases([((2, 6), -1)], [torch.float32], scale=1000.0, seed=1)
            + softmax_cases([((4, 9), -1)], [torch.float64], neg_inf=True, seed=2)
        )  # -inf entries get weight 0
    return run_check(
        f"{TASK}-softmax",
        fn,
        cases,
        expected=_softmax_expected,
        judge=_judge_softmax,
        rules=[_NO_BUILTIN_SOFTMAX],
        proves="a stable softmax along any dim, equal to torch.softmax, without it",
        hidden=hidden,
        next_step="softmax(x)ᵢ = exp(xᵢ − max x) / Σⱼ exp(xⱼ − max x) along dim",
    )


def check_layer_norm(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `layer_norm`: layer norm over the last dim, equal to F.layer_norm, as two reductions and a scale."""
    if cases is None:
        cases = (
            layer_norm_cases([(4, 8), (2, 3, 16)], [torch.float32, torch.float64])
            + layer_norm_cases([(3, 32)], [torch.float32], eps=1e-3, seed=1)
            # the variance from the centred values: rows near 3000, where the one-pass formula cancels
            + layer_norm_cases([(4, 40)], [torch.float32], offset=3000.0, seed=2)
        )
    return run_check(
        f"{TASK}-layer_norm",
        fn,
        cases,
        expected=lambda x, w, b, eps=1e-5: _layer_norm64(x, w, b, eps).to(x.dtype),
        judge=_judge_layer_norm,
        rules=[_NO_BUILTIN_NORM],
        proves="layer norm over the last dim, equal to F.layer_norm, as two reductions and a scale",
        hidden=hidden,
        next_step="y = (x − mean) / sqrt(var + eps) · weight + bias, mean and (biased) var over the last "
        "dim with keepdim=True",
    )


def _own(fn: Callable) -> tuple[Callable, Rule]:
    """`fn` watched for calls to the course's own attention, and the rule that refuses them."""
    return no_grader_calls(
        fn,
        {"twoprim.attention": attention_topic.uses},
        why="the course's attention (two_gemm_attention, attention_spec)",
        next_step="write the scores, the mask, the softmax and the two products yourself, as lesson 05 builds them",
    )


def check_attention(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `attention`: softmax(q·kᵀ/√D + mask)·v with two batched GEMMs, equal to F.scaled_dot_product_attention
    (causal, boolean and additive masks)."""
    if cases is None:
        cases = (
            attention_cases([(1, 1, 4, 3), (2, 3, 7, 8)], [torch.float32, torch.float64])
            + attention_cases([(2, 2, 6, 4)], [torch.float32], causal=True, seed=1)
            + attention_cases([(2, 2, 5, 4)], [torch.float64], mask="bool", seed=2)
            + attention_cases([(1, 2, 6, 4)], [torch.float32], mask="additive", seed=3)
            # the rules stated, each in a case: a query that sees no key gets zeros; a key-padding mask broadcasts
            + attention_cases([(1, 2, 5, 4)], [torch.float32], mask="bool", fully_masked=True, seed=4)
            + attention_cases([(2, 1, 6, 3)], [torch.float64], mask="padding", fully_masked=True, seed=5)
        )
    fn, own = _own(fn)
    return run_check(
        f"{TASK}-attention",
        fn,
        cases,
        expected=_attention_expected,
        judge=_judge_attention,
        rules=[_NO_FUSED_ATTENTION, _two_gemms(), own],
        proves="softmax(q·kᵀ/√D + mask)·v with two batched GEMMs, equal to "
        "F.scaled_dot_product_attention (causal, boolean and additive masks)",
        hidden=hidden,
        next_step="scores = q @ kᵀ / √D; hide masked keys with -inf (or add the float mask); softmax "
        "over the keys (last dim); multiply by v",
    )


def check_multi_head_attention(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `multi_head_attention`: multi-head self-attention equal to nn.MultiheadAttention(bias=False,
    batch_first=True), as four GEMMs and reshapes."""
    if cases is None:
        cases = mha_cases([(1, 5, 8, 2), (2, 7, 12, 3)], [torch.float32, torch.float64]) + mha_cases(
            [(2, 6, 16, 4)], [torch.float32], causal=True, seed=1
        )
    fn, own = _own(fn)
    return run_check(
        f"{TASK}-multi_head_attention",
        fn,
        cases,
        expected=lambda *a, **kw: _mha64(*a, **kw).to(a[0].dtype),
        judge=_judge_mha,
        rules=[_NO_FUSED_ATTENTION, _four_gemms(), own],
        proves="multi-head self-attention equal to nn.MultiheadAttention(bias=False, batch_first=True), "
        "as four GEMMs and reshapes",
        hidden=hidden,
        next_step="split E into n_heads heads of D = E / n_heads: (B, S, E) -> (B, S, H, D) -> (B, H, S, D); "
        "after attention go back with transpose(1, 2) and reshape(B, S, E)",
    )


def check_tiled_attention(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `tiled_attention`: attention tile by tile with an online softmax (running max and sum), equal to
    F.scaled_dot_product_attention, never holding an S×S tensor."""
    if cases is None:
        cases = (
            tiled_cases([(1, 2, 100, 8, 16), (2, 1, 67, 4, 8)], [torch.float32, torch.float64])
            + tiled_cases([(1, 1, 64, 8, 16)], [torch.float32], causal=True, seed=1)
            + tiled_cases([(1, 1, 40, 4, 8)], [torch.float64], scale=30.0, seed=2)
            # the rules stated, each in a case: causal with a last block shorter than block_size; block_size > S
            + tiled_cases([(1, 1, 50, 4, 16)], [torch.float64], causal=True, seed=3)
            + tiled_cases([(1, 2, 9, 4, 16)], [torch.float32], seed=4)
        )
    fn, own = _own(fn)
    recorded = _with_allocations(fn) if callable(fn) else fn
    holder = getattr(recorded, "holder", {})
    return run_check(
        f"{TASK}-tiled_attention",
        recorded,
        cases,
        expected=lambda q, k, v, block, causal=False: _attention64(q, k, v, causal=causal).to(q.dtype),
        judge=_judge_attention,
        rules=[_NO_FUSED_ATTENTION, _NO_BUILTIN_SOFTMAX, _alloc_rule(_no_square(), holder), _each_score_once(), own],
        proves="attention tile by tile with an online softmax (running max and sum), equal to "
        "F.scaled_dot_product_attention, never holding an S×S tensor",
        hidden=hidden,
        next_step="for each block of queries, loop over blocks of keys: tile scores, new max m, rescale the "
        "running sum and output by exp(m_old − m), add this tile's exp(scores − m) and its @ v; "
        "divide by the sum at the end",
    )


def check_attention_flops(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `attention_flops`: the GEMM FLOPs of attention (as FlopCounterMode measures them) and the FLOPs outside
    them."""
    if cases is None:
        cases = flop_cases([(1, 1, 4, 2), (2, 3, 64, 16), (8, 16, 4096, 64)])
    return run_check(
        f"{TASK}-attention_flops",
        fn,
        cases,
        expected=_measured_flops,
        judge=_judge_flops,
        rules=[_no_tensor_ops()],
        proves="the GEMM FLOPs of attention (as FlopCounterMode measures them) and the FLOPs outside them",
        hidden=hidden,
        next_step="gemm: two batched GEMMs of 2·S·S·D FLOPs per (batch, head); other: 6 steps × B·H·S² scores",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex05_attention-softmax": (
        "Three steps along `dim`: subtract the maximum, exponentiate, divide by the sum. Keep the reduced dimension "
        "so it broadcasts back.",
        "With `keepdim=True`, the maximum along dim has x's shape with size 1 along dim, so subtracting it "
        "broadcasts over x; the sum of the exponentials works the same way.",
        "softmax(x) = softmax(x − c) for any c constant along dim, because e^(−c) cancels. With c the maximum, "
        "every exponential is at most 1, nothing overflows, and a −inf entry becomes exp(−inf) = 0.",
    ),
    "ex05_attention-layer_norm": (
        "Two reductions over the last dimension: the mean, then the variance of the centred values.",
        "With `keepdim=True` the mean and the variance are (..., 1) and broadcast over (..., E); weight and bias "
        "(E,) broadcast over the leading dimensions.",
        "σ² = mean((x − μ)²), dividing by E, not E − 1; y = (x − μ) / √(σ² + eps) · weight + bias. Avoid "
        "mean(x²) − μ²: it cancels catastrophically in float32 when a row sits far from zero.",
    ),
    "ex05_attention-attention": (
        "Five steps: scores, scale, mask, softmax (yours), weighted sum of v. Read "
        "`twoprim.topics.attention.attention_spec` when unsure what a mask means.",
        "`k.transpose(-2, -1)` is (B, H, D, S), so q @ it is (B, H, S, S), one batched GEMM; (B, H, S, S) @ v "
        "(B, H, S, D) is the second. For causal, a lower-triangular (S, S) boolean matrix (`.tril()` of a matrix "
        "of True) says which keys each query keeps.",
        "Hidden scores become −inf: `masked_fill` for a boolean mask or a causal one, `+` for an additive mask. A "
        "row with every key hidden gives 0/0 = NaN in the softmax; find the rows whose largest score is −inf and "
        "put zeros there with `torch.where`, as SDPA does.",
    ),
    "ex05_attention-multi_head_attention": (
        "Four GEMMs: one for q, k and v together, two inside your `attention`, one for the output projection. "
        "Everything else is reshaping.",
        "x @ W_qkvᵀ is (B, S, 3E); split it into three (B, S, E) along the last dimension; reshape each to "
        "(B, S, H, D), then `transpose(1, 2)` to (B, H, S, D).",
        "Putting the heads back is the inverse: (B, H, S, D) → (B, S, H, D) → (B, S, E), then the product with "
        "W_oᵀ. Reshaping E into (H, D) gives head h the features h·D to h·D + D − 1, as nn.MultiheadAttention "
        "does.",
    ),
    "ex05_attention-tiled_attention": (
        "Two loops: blocks of queries outside, blocks of keys inside. Each query block carries three running "
        "tensors: the maximum m, the sum ℓ and the unnormalised output a.",
        "For a block of Bq queries, m and ℓ are (B, H, Bq, 1) and a is (B, H, Bq, D); a tile of scores is "
        "(B, H, Bq, Bk), never (S, S). Start m at −inf and ℓ and a at zero; write a / ℓ into the output rows "
        "after the last key block.",
        "Online softmax: m' = max(m, row max of s), p = exp(s − m'), α = exp(m − m'); then ℓ ← α·ℓ + row sum of "
        "p and a ← α·a + p·v_blk. For causal, mask a tile with its own row and column indices (column > row "
        "becomes −inf) and stop the key loop at the diagonal.",
    ),
    "ex05_attention-attention_flops": (
        "No tensors here, only arithmetic on B, H, S and D: count the two GEMMs and the six element-wise and "
        "reduction steps separately.",
        "q·kᵀ is B·H GEMMs of shape (S, D) @ (D, S), and p·v is B·H GEMMs of shape (S, S) @ (S, D). The scores "
        "tensor has B·H·S·S entries.",
        "A GEMM (M, K) @ (K, N) costs 2·M·N·K FLOPs. 'other' is one FLOP per score for each of the six steps; "
        "return both as plain ints in a dict.",
    ),
}
