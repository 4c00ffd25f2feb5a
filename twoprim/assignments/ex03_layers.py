"""Checks for assignment ex03_layers: layers are GEMMs.

`linear`, `qkv_projection`, `mlp`, `embedding_as_gemm`, `rnn_cell` and `gnn_layer` are each checked against a float64
oracle, and the GEMMs they run are checked too: every GEMM-family ATen op the learner's code runs is recorded
(`twoprim.core.record.record_calls`) and read as (batch, M, N, K) (`twoprim.topics.layers_as_gemms.gemm_mnk`), so
"one GEMM whatever the rank of x" or "multiply in the cheaper order" is a fact the check measures, not a request.

Visible checks run with the default cases below; the hidden checks in the solution notebook pass their own cases
(built with the same builders) and `hidden=0`. The argument guards the notebook calls first live here too.

Why this module is long: one assignment's checks (six graded functions), each with its case builders, judge, rules
and the messages they teach with, its input guard and its hints; split further, a check would sit apart from the
messages it gives.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from twoprim.core import guards
from twoprim.core.cases import dtype_name, randn
from twoprim.core.checks import CallLog, Case, CheckResult, Mismatch, Rule, describe, forbid, judge_tensor, run_check
from twoprim.topics.layers_as_gemms import gemms_of

__all__ = [
    "guard_linear",
    "guard_qkv",
    "guard_mlp",
    "guard_embedding",
    "guard_rnn",
    "guard_gnn",
    "linear_cases",
    "qkv_cases",
    "mlp_cases",
    "embedding_cases",
    "rnn_cases",
    "gnn_cases",
    "check_linear",
    "check_qkv_projection",
    "check_mlp",
    "check_embedding_as_gemm",
    "check_rnn_cell",
    "check_gnn_layer",
    "gnn_flops",
]

TASK = "ex03_layers"


# ----------------------------------------------------------------------------------------------------------------
# Guards: called first in every function of the notebook; a clear error naming the shapes, never a broadcast
# ----------------------------------------------------------------------------------------------------------------


def _shapes(**tensors: torch.Tensor) -> str:
    return ", ".join(f"{name} has shape {tuple(t.shape)}" for name, t in tensors.items())


def _floats(fn: str, **tensors: Any) -> None:
    """Each argument is a floating-point torch tensor, all of one dtype."""
    for name, value in tensors.items():
        guards.tensor(fn, name, value)
    (first, t0), *rest = tensors.items()
    for name, t in rest:
        if t.dtype != t0.dtype:
            raise TypeError(
                f"{fn}: {first} is {t0.dtype} but {name} is {t.dtype}; convert them to one dtype "
                f"(e.g. {name}.to({first}.dtype))."
            )


def _ndim(fn: str, name: str, t: torch.Tensor, ndim: int, what: str) -> None:
    if t.dim() != ndim:
        raise ValueError(f"{fn}: {name} must be {what}, got shape {tuple(t.shape)} ({t.dim()}-D).")


def _features(fn: str, name: str, t: torch.Tensor) -> None:
    if t.dim() < 1:
        raise ValueError(f"{fn}: {name} must have shape (..., features), at least 1-D; got a 0-d tensor.")


def _weight(fn: str, x_name: str, x: torch.Tensor, w_name: str, W: torch.Tensor, out: str) -> None:
    """W is (out, in) with in = x.shape[-1] (nn.Linear's layout)."""
    _ndim(fn, w_name, W, 2, f"a 2-D ({out}, in) matrix")
    if W.shape[1] != x.shape[-1]:
        raise ValueError(
            f"{fn}: {_shapes(**{x_name: x, w_name: W})}; {w_name} must be ({out}, {x.shape[-1]}): "
            f"nn.Linear's (out, in) layout, one row per output feature, as wide as {x_name}'s last "
            f"dimension."
        )


def _bias(fn: str, b_name: str, b: torch.Tensor, w_name: str, W: torch.Tensor) -> None:
    if b.shape != (W.shape[0],):
        raise ValueError(
            f"{fn}: {_shapes(**{b_name: b, w_name: W})}; {b_name} must be ({W.shape[0]},): one bias "
            f"per output feature (per row of {w_name})."
        )


def guard_linear(x: Any, W: Any, b: Any, *, fn: str = "linear") -> None:
    """x (..., in), W (out, in), b (out,), one floating dtype."""
    _floats(fn, x=x, W=W, b=b)
    _features(fn, "x", x)
    _weight(fn, "x", x, "W", W, "out")
    _bias(fn, "b", b, "W", W)


def guard_qkv(x: Any, Wq: Any, Wk: Any, Wv: Any) -> None:
    """x (..., in); Wq, Wk, Wv each (d, in), one floating dtype."""
    fn = "qkv_projection"
    _floats(fn, x=x, Wq=Wq, Wk=Wk, Wv=Wv)
    _features(fn, "x", x)
    for name, W in (("Wq", Wq), ("Wk", Wk), ("Wv", Wv)):
        _weight(fn, "x", x, name, W, "d")


def guard_mlp(x: Any, W1: Any, b1: Any, W2: Any, b2: Any) -> None:
    """x (..., in), W1 (hidden, in), b1 (hidden,), W2 (out, hidden), b2 (out,)."""
    fn = "mlp"
    _floats(fn, x=x, W1=W1, b1=b1, W2=W2, b2=b2)
    _features(fn, "x", x)
    _weight(fn, "x", x, "W1", W1, "hidden")
    _bias(fn, "b1", b1, "W1", W1)
    _ndim(fn, "W2", W2, 2, "a 2-D (out, hidden) matrix")
    if W2.shape[1] != W1.shape[0]:
        raise ValueError(
            f"{fn}: {_shapes(W1=W1, W2=W2)}; W2 must be (out, {W1.shape[0]}): it reads the "
            f"{W1.shape[0]} hidden features that W1 produces."
        )
    _bias(fn, "b2", b2, "W2", W2)


def guard_embedding(ids: Any, table: Any) -> None:
    """ids: an integer tensor of any shape with values in [0, V); table (V, D) floating."""
    fn = "embedding_as_gemm"
    guards.tensor(fn, "ids", ids, floating=False)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(
            f"{fn}: ids must be an integer tensor (int64 or int32 token ids), got {ids.dtype}; "
            f"convert it with ids.long()."
        )
    guards.tensor(fn, "table", table, ndim=2)
    V = table.shape[0]
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= V:
            raise IndexError(
                f"{fn}: ids run from {lo} to {hi}, but table has shape {tuple(table.shape)}: {V} rows, "
                f"so every id must lie in [0, {V - 1}]."
            )


def guard_rnn(x: Any, h: Any, W_ih: Any, W_hh: Any, b: Any) -> None:
    """x (..., in), h (..., hidden) with the same leading dims, W_ih (hidden, in), W_hh (hidden, hidden), b
    (hidden,)."""
    fn = "rnn_cell"
    _floats(fn, x=x, h=h, W_ih=W_ih, W_hh=W_hh, b=b)
    _features(fn, "x", x)
    _features(fn, "h", h)
    if x.shape[:-1] != h.shape[:-1]:
        raise ValueError(
            f"{fn}: {_shapes(x=x, h=h)}; x and h need the same leading dimensions (one hidden state "
            f"per input row): x {tuple(x.shape[:-1])} vs h {tuple(h.shape[:-1])}."
        )
    _weight(fn, "x", x, "W_ih", W_ih, "hidden")
    _weight(fn, "h", h, "W_hh", W_hh, "hidden")
    if W_ih.shape[0] != h.shape[-1]:
        raise ValueError(
            f"{fn}: {_shapes(h=h, W_ih=W_ih)}; W_ih must have {h.shape[-1]} rows, one per hidden feature of h."
        )
    _bias(fn, "b", b, "W_hh", W_hh)


def guard_gnn(adj: Any, X: Any, W: Any) -> None:
    """adj (N, N), X (N, F_in), W (F_in, F_out), one floating dtype."""
    fn = "gnn_layer"
    _floats(fn, adj=adj, X=X, W=W)
    _ndim(fn, "adj", adj, 2, "a 2-D (N, N) adjacency matrix")
    _ndim(fn, "X", X, 2, "a 2-D (N, F_in) matrix of node features")
    _ndim(fn, "W", W, 2, "a 2-D (F_in, F_out) matrix")
    if adj.shape[0] != adj.shape[1]:
        raise ValueError(
            f"{fn}: adj has shape {tuple(adj.shape)}; an adjacency matrix is square (N, N), one row "
            f"and one column per node."
        )
    if X.shape[0] != adj.shape[0]:
        raise ValueError(f"{fn}: {_shapes(adj=adj, X=X)}; X must have one row per node: ({adj.shape[0]}, F_in).")
    if W.shape[0] != X.shape[1]:
        raise ValueError(
            f"{fn}: {_shapes(X=X, W=W)}; W must be ({X.shape[1]}, F_out): (in, out), as tall as X "
            f"is wide (not nn.Linear's (out, in) layout)."
        )


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run)
# ----------------------------------------------------------------------------------------------------------------

_LAYOUTS = {
    "": "",
    "T": "transposed view",
    "lead": "first two dims swapped, non-contiguous",
    "stride": "every other element, stride 2",
}


def _layout(t: torch.Tensor, layout: str = "") -> torch.Tensor:
    """The same values as `t`, laid out in memory as `layout` says (see _LAYOUTS): a case's values do not depend on
    its layout here, unlike `twoprim.core.cases.randn`'s layouts, which draw the larger tensor a view is of."""
    if layout == "T" and t.dim() < 2 or layout == "lead" and t.dim() < 3:
        layout = "stride"
    if layout == "T":
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "lead":
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "stride" and t.dim() >= 1:
        full = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        full[..., ::2] = t
        return full[..., ::2]
    return t.contiguous()


def _note(name: str, t: torch.Tensor, layout: str) -> str:
    extra = f" {_LAYOUTS[layout]}" if layout and not t.is_contiguous() else ""
    return f"{name} {tuple(t.shape)}{extra}"


def linear_cases(
    specs: Sequence[tuple], dtypes: Sequence[torch.dtype] = (torch.float32,), *, seed: int = 0
) -> list[Case]:
    """(x, W, b) for every spec × dtype; spec = (x_shape, out) or (x_shape, out, x_layout, W_layout)."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for x_shape, n_out, *layouts in specs:
            x_layout, w_layout = (list(layouts) + ["", ""])[:2]
            x = _layout(randn(x_shape, dtype, gen), x_layout)
            W = _layout(randn((n_out, x_shape[-1]), dtype, gen), w_layout)
            b = randn((n_out,), dtype, gen)
            label = f"{_note('x', x, x_layout)}, {_note('W', W, w_layout)}, b ({n_out},), {dtype_name(dtype)}"
            cases.append(Case(label, (x, W, b)))
    return cases


def qkv_cases(specs: Sequence[tuple], dtypes: Sequence[torch.dtype] = (torch.float32,), *, seed: int = 0) -> list[Case]:
    """(x, Wq, Wk, Wv); spec = (x_shape, (dq, dk, dv)) or (x_shape, (dq, dk, dv), x_layout, W_layout)."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for x_shape, dims, *layouts in specs:
            x_layout, w_layout = (list(layouts) + ["", ""])[:2]
            x = _layout(randn(x_shape, dtype, gen), x_layout)
            Ws = [_layout(randn((d, x_shape[-1]), dtype, gen), w_layout) for d in dims]
            widths = f"dq = dk = dv = {dims[0]}" if len(set(dims)) == 1 else "dq, dk, dv = {}, {}, {}".format(*dims)
            w_note = f", weights {_LAYOUTS[w_layout]}" if w_layout and not Ws[0].is_contiguous() else ""
            cases.append(Case(f"{_note('x', x, x_layout)}, {widths}{w_note}, {dtype_name(dtype)}", (x, *Ws)))
    return cases


def mlp_cases(specs: Sequence[tuple], dtypes: Sequence[torch.dtype] = (torch.float32,), *, seed: int = 0) -> list[Case]:
    """(x, W1, b1, W2, b2); spec = (x_shape, hidden, out) or (x_shape, hidden, out, x_layout)."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for x_shape, hidden, n_out, *layouts in specs:
            x_layout = (list(layouts) + [""])[0]
            x = _layout(randn(x_shape, dtype, gen), x_layout)
            W1, b1 = randn((hidden, x_shape[-1]), dtype, gen), randn((hidden,), dtype, gen)
            W2, b2 = randn((n_out, hidden), dtype, gen), randn((n_out,), dtype, gen)
            cases.append(
                Case(
                    f"{_note('x', x, x_layout)}, in {x_shape[-1]} -> hidden {hidden} -> out {n_out}, "
                    f"{dtype_name(dtype)}",
                    (x, W1, b1, W2, b2),
                )
            )
    return cases


def embedding_cases(
    specs: Sequence[tuple], dtypes: Sequence[torch.dtype] = (torch.float32,), *, seed: int = 0
) -> list[Case]:
    """(ids, table); spec = (ids_shape, V, D) or (ids_shape, V, D, ids_dtype, table_layout).

    With 2 or more ids, the last repeats the first (a token that occurs twice); with 3 or more, the second is the
    last row V - 1, so the edges of the table are looked up too.
    """
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for ids_shape, V, D, *rest in specs:
            ids_dtype, t_layout = (list(rest) + [torch.int64, ""])[:2]
            ids = torch.randint(0, V, tuple(ids_shape), generator=gen)
            flat = ids.view(-1)
            notes = []
            if flat.numel() >= 2:
                flat[-1] = flat[0]
                notes.append("repeated ids")
            if flat.numel() >= 3:
                flat[1] = V - 1
            ids = ids.to(ids_dtype)
            table = _layout(randn((V, D), dtype, gen), t_layout)
            what = "ids ()" if ids.dim() == 0 else f"ids {tuple(ids.shape)}"
            t_note = f" {_LAYOUTS[t_layout]}" if t_layout and not table.is_contiguous() else ""
            cases.append(
                Case(
                    f"{what} {dtype_name(ids_dtype)}{', ' + ', '.join(notes) if notes else ''}, "
                    f"table ({V}, {D}){t_note}, {dtype_name(dtype)}",
                    (ids, table),
                )
            )
    return cases


def rnn_cases(specs: Sequence[tuple], dtypes: Sequence[torch.dtype] = (torch.float32,), *, seed: int = 0) -> list[Case]:
    """(x, h, W_ih, W_hh, b); spec = (x_shape, hidden) or (x_shape, hidden, layout of x and h)."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for x_shape, hidden, *layouts in specs:
            layout = (list(layouts) + [""])[0]
            x = _layout(randn(x_shape, dtype, gen), layout)
            h = _layout(torch.tanh(randn((*x_shape[:-1], hidden), dtype, gen)), layout)  # a state an RNN holds
            W_ih = randn((hidden, x_shape[-1]), dtype, gen) / math.sqrt(x_shape[-1])
            W_hh = randn((hidden, hidden), dtype, gen) / math.sqrt(hidden)
            b = randn((hidden,), dtype, gen)
            cases.append(
                Case(
                    f"{_note('x', x, layout)}, {_note('h', h, layout)}, in {x_shape[-1]}, hidden "
                    f"{hidden}, {dtype_name(dtype)}",
                    (x, h, W_ih, W_hh, b),
                )
            )
    return cases


def _normalised_adjacency(n: int, gen: torch.Generator) -> torch.Tensor:
    """D^-1/2 (A + I) D^-1/2 for a random undirected graph A on n nodes (the GCN normalisation), float64."""
    upper = (torch.rand(n, n, generator=gen, dtype=torch.float64) < min(0.5, 3.0 / max(n, 1))).triu(1)
    A = (upper + upper.T).double() + torch.eye(n, dtype=torch.float64)
    d = A.sum(1).rsqrt()
    return d[:, None] * A * d[None, :]


def gnn_cases(specs: Sequence[tuple], dtypes: Sequence[torch.dtype] = (torch.float32,), *, seed: int = 0) -> list[Case]:
    """(adj, X, W); spec = (N, F_in, F_out) or (N, F_in, F_out, adj_layout, X_layout)."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for n, f_in, f_out, *layouts in specs:
            a_layout, x_layout = (list(layouts) + ["", ""])[:2]
            adj = _layout(_normalised_adjacency(n, gen).to(dtype), a_layout)
            X = _layout(randn((n, f_in), dtype, gen), x_layout)
            W = randn((f_in, f_out), dtype, gen)
            order = (
                "either order"
                if f_in == f_out
                else "cheaper: adj @ (X @ W)"
                if f_out < f_in
                else "cheaper: (adj @ X) @ W"
            )
            a_note = f" {_LAYOUTS[a_layout]}" if a_layout and not adj.is_contiguous() else ""
            cases.append(
                Case(
                    f"N={n} nodes, adj ({n}, {n}){a_note}, {_note('X', X, x_layout)}, W ({f_in}, {f_out}) "
                    f"[{order}], {dtype_name(dtype)}",
                    (adj, X, W),
                )
            )
    return cases


# ----------------------------------------------------------------------------------------------------------------
# Oracles (float64) and error bounds
# ----------------------------------------------------------------------------------------------------------------


def _d(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().double() for t in ts]


def _linear64(x, W, b):
    x, W, b = _d(x, W, b)
    return x @ W.T + b


def _linear_bound(x, W, b):
    """|x| @ |W|ᵀ + |b|: the sum of absolute terms behind every output, which rounding errors scale with."""
    x, W, b = _d(x, W, b)
    return x.abs() @ W.abs().T + b.abs()


def _gemm_judge(bound: Callable[..., torch.Tensor], *, k: float = 16.0) -> Callable:
    """Tolerance k·eps·max(bound) + 4·eps relative: a GEMM rounds once per term, and summation orders differ."""

    def judge(got, want, case: Case) -> str:
        dtype = want.dtype
        eps = torch.finfo(dtype).eps
        atol = k * eps * float(bound(*case.args).max()) + torch.finfo(dtype).tiny
        return judge_tensor(got, want, atol=atol, rtol=4 * eps)

    return judge


class _Triple(tuple):
    """(q, k, v) as the check prints it: dtypes and shapes, not every number."""

    def __repr__(self) -> str:
        return "(q, k, v): " + ", ".join(describe(t) for t in self)


def _qkv64(x, Wq, Wk, Wv):
    dtype = x.dtype
    x, Wq, Wk, Wv = _d(x, Wq, Wk, Wv)
    return _Triple((x @ W.T).to(dtype) for W in (Wq, Wk, Wv))


def _judge_qkv(got, want, case: Case) -> str:
    x, *Ws = case.args
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        what = f"a {type(got).__name__} of length {len(got)}" if isinstance(got, (tuple, list)) else describe(got)
        raise Mismatch(
            f"{what}, but qkv_projection returns three tensors (q, k, v)",
            next_step="split the fused result into its three column blocks and return them as a tuple",
        )
    eps = torch.finfo(x.dtype).eps
    summaries = []
    for name, g, w, W in zip("qkv", got, want, Ws, strict=True):
        bound = float((x.detach().double().abs() @ W.detach().double().abs().T).max())
        try:
            summaries.append(
                judge_tensor(g, w, atol=16 * eps * bound + torch.finfo(x.dtype).tiny, rtol=4 * eps, what=name)
            )
        except Mismatch as bad:
            raise Mismatch(
                f"{name}: {bad.detail}",
                next_step=bad.next_step
                or f"{name} is x @ W{name}.T: check which columns of the fused result you return as {name}",
            ) from None
    return max(summaries, key=lambda s: s.rel_error)


def _mlp64(x, W1, b1, W2, b2):
    x, W1, b1, W2, b2 = _d(x, W1, b1, W2, b2)
    return torch.relu(x @ W1.T + b1) @ W2.T + b2


def _mlp_bound(x, W1, b1, W2, b2):
    x, W1, b1, W2, b2 = _d(x, W1, b1, W2, b2)
    return (x.abs() @ W1.abs().T + b1.abs()) @ W2.abs().T + b2.abs()


def _embedding64(ids, table):
    return table.detach()[ids.long()]


def _judge_embedding(got, want, case: Case) -> str:
    return judge_tensor(got, want, atol=0.0, rtol=0.0, what="the looked-up rows")


def _rnn64(x, h, W_ih, W_hh, b):
    x, h, W_ih, W_hh, b = _d(x, h, W_ih, W_hh, b)
    return torch.tanh(x @ W_ih.T + h @ W_hh.T + b)


def _rnn_bound(x, h, W_ih, W_hh, b):
    """tanh is 1-Lipschitz: an error in the pre-activation is at most as large after it."""
    x, h, W_ih, W_hh, b = _d(x, h, W_ih, W_hh, b)
    return x.abs() @ W_ih.abs().T + h.abs() @ W_hh.abs().T + b.abs() + 1.0


def _gnn64(adj, X, W):
    adj, X, W = _d(adj, X, W)
    return adj @ X @ W


def _gnn_bound(adj, X, W):
    adj, X, W = _d(adj, X, W)
    return adj.abs() @ X.abs() @ W.abs()


def _with_dtype(oracle: Callable, dtype_of: int = 0) -> Callable:
    def expected(*args):
        out = oracle(*args)
        return out.to(args[dtype_of].dtype) if isinstance(out, torch.Tensor) else out

    return expected


def gnn_flops(n: int, f_in: int, f_out: int) -> dict[str, int]:
    """FLOPs of the two orders of adj (N, N) @ X (N, F_in) @ W (F_in, F_out)."""
    return {
        "(adj @ X) @ W": 2 * n * n * f_in + 2 * n * f_in * f_out,
        "adj @ (X @ W)": 2 * n * f_in * f_out + 2 * n * n * f_out,
    }


# ----------------------------------------------------------------------------------------------------------------
# Rules: checked on what ran
# ----------------------------------------------------------------------------------------------------------------


def _rows(t: torch.Tensor) -> int:
    return math.prod(t.shape[:-1])


def _plan_text(plan: Sequence[tuple[int, int, int]]) -> str:
    words = {1: "one GEMM", 2: "two GEMMs", 3: "three GEMMs"}.get(len(plan), f"{len(plan)} GEMMs")
    return f"{words}: " + " and ".join(f"({M}, {K}) @ ({K}, {N})" for M, N, K in plan)


_MATMUL_BATCHES = (
    "torch.matmul runs a batched GEMM like this when x has 3 or more dims and is not contiguous: "
    "it cannot fold them into rows without a copy"
)


def _gemm_plan(
    what: str,
    plans: Callable[..., list[list[tuple[int, int, int]]]],
    next_step: str,
    *,
    batched_hint: str = _MATMUL_BATCHES,
) -> Rule:
    """The GEMM-family ops that ran must match one of `plans(*case.args)`: each plan a list of (M, N, K).

    Matching is by output size M·N and inner size K, so a transposed formulation (Wᵀ-first, (N, M) out) or an
    einsum's batch-of-one GEMM counts as the same GEMM; a batched GEMM with batch > 1 never does. The message lists
    what ran with its FLOPs beside what was needed with its FLOPs.
    """

    def test(log: CallLog, case: Case) -> str | None:
        ran = gemms_of(log)
        options = plans(*case.args)
        want = " or ".join(f"{_plan_text(p)} ({sum(2 * M * N * K for M, N, K in p):,} FLOPs)" for p in options)
        listing = "; ".join(str(g) for g in ran)
        for g in ran:
            if g.batch > 1:
                return (
                    f"it ran {g}: one call, but {g.batch} separate GEMMs of ({g.M}, {g.K}) @ ({g.K}, {g.N}), "
                    f"each reading its operands again ({batched_hint}). This function needs {want}"
                )
        got = sorted((g.M * g.N, g.K) for g in ran)
        if any(got == sorted((M * N, K) for M, N, K in plan) for plan in options):
            return None
        if not ran:
            return f"it ran no GEMM at all; this function needs {want}"
        flops = sum(g.flops for g in ran)
        return (
            f"it ran {len(ran)} GEMM op{'s' if len(ran) != 1 else ''} ({listing}; {flops:,} FLOPs); this function "
            f"needs {want}"
        )

    return Rule(what, test, next_step)


def _linear_plan(x, W, b):
    return [[(_rows(x), W.shape[0], W.shape[1])]]


def _qkv_plan(x, Wq, Wk, Wv):
    return [[(_rows(x), Wq.shape[0] + Wk.shape[0] + Wv.shape[0], x.shape[-1])]]


def _mlp_plan(x, W1, b1, W2, b2):
    return [[(_rows(x), W1.shape[0], W1.shape[1]), (_rows(x), W2.shape[0], W2.shape[1])]]


def _embedding_plan(ids, table):
    return [[(ids.numel(), table.shape[1], table.shape[0])]]  # a 0-d id is one row too


def _rnn_plan(x, h, W_ih, W_hh, b):
    m, hidden, n_in = _rows(x), h.shape[-1], x.shape[-1]
    return [[(m, hidden, n_in + hidden)], [(m, hidden, n_in), (m, hidden, hidden)]]


def _gnn_plan(adj, X, W):
    n, f_in, f_out = X.shape[0], X.shape[1], W.shape[1]
    x_first = [(n, f_out, f_in), (n, f_out, n)]  # X @ W, then adj @ (X W)
    adj_first = [(n, f_in, n), (n, f_out, f_in)]  # adj @ X, then (adj X) @ W
    if f_out < f_in:
        return [x_first]
    if f_in < f_out:
        return [adj_first]
    return [x_first, adj_first]


_NO_LINEAR = forbid(
    "write the GEMM yourself: no torch.nn.functional.linear or nn.Linear",
    {"linear", "bilinear", "numpy"},
    {"linear", "_mkl_linear", "mkldnn_linear"},
    next_step="compute x @ W.T + b with torch.addmm, torch.mm or @ on tensors you shaped yourself",
)

_NO_GATHER = forbid(
    "the rows must come out of the GEMM: no table[ids], index_select, gather, F.embedding or a loop over rows",
    {"embedding", "embedding_bag", "index_select", "gather", "take", "take_along_dim", "masked_select", "numpy"},
    {
        "index",
        "index_select",
        "gather",
        "take",
        "embedding",
        "embedding_bag",
        "_embedding_bag",
        "_embedding_bag_forward_only",
        "masked_select",
        "select",
        "unbind",
    },
    next_step="build the one-hot matrix (ids compared with torch.arange(V), or F.one_hot on int64 ids), then "
    "multiply it by the table",
)

_NO_RNN_CELL = forbid(
    "write the GEMMs yourself: no nn.RNNCell, torch.rnn_tanh_cell or F.linear",
    {"rnn_tanh_cell", "rnn_relu_cell", "rnn_tanh", "rnn_relu", "linear", "numpy"},
    {"linear", "_mkl_linear"},
    next_step="compute tanh(x @ W_ih.T + h @ W_hh.T + b) with torch.addmm, torch.mm or @",
)

_NO_MULTI_DOT = forbid(
    "choose the order yourself: no torch.linalg.multi_dot or chain_matmul (they pick it for you)",
    {"multi_dot", "chain_matmul", "linear", "numpy"},
    {"linear"},
    next_step="compare the FLOPs of (adj @ X) @ W and adj @ (X @ W) and multiply in the cheaper order",
)


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def check_linear(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `linear`: x @ W.T + b for x of any rank, with one GEMM over all rows."""
    if cases is None:
        cases = (
            linear_cases([((6, 5), 4), ((2, 3, 4, 5), 7)], [torch.float32])
            + linear_cases([((2, 3, 5), 4)], [torch.float64], seed=1)
            + linear_cases([((2, 3, 5), 4, "lead")], [torch.float32], seed=2)
            # the rules stated, each in a case: x of rank 1, (in,); any strides of x and of W
            + linear_cases([((7,), 3), ((5, 8), 3, "stride", "T")], [torch.float32], seed=3)
        )
    rule = _gemm_plan(
        "one GEMM over all rows of x, whatever its rank",
        _linear_plan,
        "fold every leading dim of x into the rows of one GEMM: x.reshape(-1, in) is (M, in) with M the product of "
        "the leading dims; multiply by W.T, add b (torch.addmm does both in one call), reshape back to (..., out)",
    )
    return run_check(
        f"{TASK}-linear",
        fn,
        cases,
        expected=_with_dtype(_linear64),
        judge=_gemm_judge(_linear_bound),
        rules=[_NO_LINEAR, rule],
        hidden=hidden,
        proves="x @ W.T + b for x of any rank, with one GEMM over all rows",
        next_step="compare with x @ W.T + b on a small case: W is (out, in), so x multiplies W.T",
    )


def check_qkv_projection(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `qkv_projection`: q, k, v = x @ Wq.T, x @ Wk.T, x @ Wv.T from one fused GEMM, also with narrower k and
    v."""
    if cases is None:
        cases = (
            qkv_cases([((5, 8), (8, 8, 8)), ((2, 3, 8), (8, 8, 8))], [torch.float32])
            + qkv_cases([((2, 4, 6), (6, 2, 2))], [torch.float64], seed=1)
            # the rules stated, each in a case: x of rank 1; a non-contiguous x and transposed weights
            + qkv_cases([((7,), (3, 3, 3)), ((3, 2, 8), (8, 4, 4), "lead", "T")], [torch.float32], seed=2)
        )
    rule = _gemm_plan(
        "one GEMM for q, k and v together",
        _qkv_plan,
        "stack the three weights into one (dq + dk + dv, in) matrix with torch.cat, run one GEMM over all rows, "
        "then split its columns into q, k and v",
        batched_hint="stacking the weights into a 3-D tensor makes a batched GEMM; torch.cat them into one 2-D "
        "(dq + dk + dv, in) matrix instead",
    )
    return run_check(
        f"{TASK}-qkv_projection",
        fn,
        cases,
        expected=_qkv64,
        judge=_judge_qkv,
        rules=[_NO_LINEAR, rule],
        hidden=hidden,
        proves="q, k, v = x @ Wq.T, x @ Wk.T, x @ Wv.T from one fused GEMM, also with narrower k and v",
        next_step="q is x @ Wq.T: check the order and widths of the column blocks you split off",
    )


def check_mlp(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `mlp`: linear(relu(linear(x, W1, b1)), W2, b2) with two GEMMs."""
    if cases is None:
        cases = (
            mlp_cases([((6, 5), 16, 3), ((2, 3, 5), 8, 5)], [torch.float32])
            + mlp_cases([((4, 7), 9, 2)], [torch.float64], seed=1)
            + mlp_cases([((7,), 4, 2), ((3, 2, 5), 6, 2, "lead")], [torch.float32], seed=2)
        )  # rank 1; strides
    rule = _gemm_plan(
        "two GEMMs: one per layer, each over all rows",
        _mlp_plan,
        "call your linear twice, with a ReLU (torch.relu) in between: linear(relu(linear(x, W1, b1)), W2, b2)",
    )
    return run_check(
        f"{TASK}-mlp",
        fn,
        cases,
        expected=_with_dtype(_mlp64),
        judge=_gemm_judge(_mlp_bound),
        rules=[_NO_LINEAR, rule],
        hidden=hidden,
        proves="linear(relu(linear(x, W1, b1)), W2, b2) with two GEMMs",
        next_step="check the ReLU sits between the two layers and each layer adds its own bias",
    )


def check_embedding_as_gemm(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `embedding_as_gemm`: table[ids] for ids of any shape, exactly, as one one-hot GEMM with no gather."""
    if cases is None:
        cases = (
            embedding_cases([((5,), 10, 4), ((2, 3), 7, 3)], [torch.float32])
            + embedding_cases([((4,), 6, 5, torch.int32)], [torch.float64], seed=1)
            # the rules stated, each in a case: a single 0-d id; a transposed (non-contiguous) table
            + embedding_cases([((), 5, 3), ((6,), 7, 4, torch.int64, "T")], [torch.float32], seed=2)
        )
    rule = _gemm_plan(
        "one GEMM: the one-hot matrix (n, V) times the table (V, D)",
        _embedding_plan,
        "flatten ids to n ids, build their (n, V) one-hot matrix in the table's dtype, multiply it by the (V, D) "
        "table, and reshape the (n, D) result to (*ids.shape, D)",
    )
    return run_check(
        f"{TASK}-embedding_as_gemm",
        fn,
        cases,
        expected=_embedding64,
        judge=_judge_embedding,
        rules=[_NO_GATHER, rule],
        hidden=hidden,
        proves="table[ids] for ids of any shape, exactly, as one one-hot GEMM with no gather",
        next_step="row i of one_hot @ table is the table row whose column holds the 1: check the "
        "one-hot has one 1 per row, in column ids[i], and the final reshape",
    )


def check_rnn_cell(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `rnn_cell`: tanh(x @ W_ih.T + h @ W_hh.T + b) with at most two GEMMs."""
    if cases is None:
        cases = (
            rnn_cases([((4, 3), 5), ((2, 3, 6), 4)], [torch.float32])
            + rnn_cases([((3, 2), 7)], [torch.float64], seed=1)
            # the rules stated, each in a case: one unbatched step (x of rank 1); non-contiguous x and h
            + rnn_cases([((3,), 2), ((3, 2, 6), 5, "lead")], [torch.float32], seed=2)
        )
    rule = _gemm_plan(
        "one GEMM per weight over all rows, or the two fused into one",
        _rnn_plan,
        "multiply all rows at once: x.reshape(-1, in) @ W_ih.T and h.reshape(-1, hidden) @ W_hh.T (or one GEMM of "
        "[x, h] and [W_ih, W_hh])",
    )
    return run_check(
        f"{TASK}-rnn_cell",
        fn,
        cases,
        expected=_with_dtype(_rnn64),
        judge=_gemm_judge(_rnn_bound),
        rules=[_NO_RNN_CELL, rule],
        hidden=hidden,
        proves="tanh(x @ W_ih.T + h @ W_hh.T + b) with at most two GEMMs",
        next_step="check each weight multiplies its own input (W_ih with x, W_hh with h) and tanh comes last",
    )


def check_gnn_layer(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `gnn_layer`: the GCN layer adj @ X @ W, multiplied in the order with fewer FLOPs."""
    if cases is None:
        cases = (
            gnn_cases([(6, 8, 2), (5, 2, 6)], [torch.float32])
            + gnn_cases([(7, 3, 3)], [torch.float64], seed=1)
            + gnn_cases([(8, 6, 3, "T", "stride")], [torch.float32], seed=2)
        )  # any strides of adj and X
    rule = _gemm_plan(
        "two GEMMs, in the cheaper order",
        _gnn_plan,
        "(adj @ X) @ W costs 2·N·N·F_in + 2·N·F_in·F_out FLOPs and adj @ (X @ W) costs "
        "2·N·F_in·F_out + 2·N·N·F_out: compare F_in with F_out and multiply the cheaper way",
    )
    return run_check(
        f"{TASK}-gnn_layer",
        fn,
        cases,
        expected=_with_dtype(_gnn64),
        judge=_gemm_judge(_gnn_bound),
        rules=[_NO_MULTI_DOT, rule],
        hidden=hidden,
        proves="the GCN layer adj @ X @ W, multiplied in the order with fewer FLOPs",
        next_step="W is (F_in, F_out), already (in, out): X @ W needs no transpose",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex03_layers-linear": (
        "One GEMM must cover every row of x whatever its rank: fold the leading dimensions into one, multiply, "
        "then give them back.",
        "`reshape(-1, in)` turns x into (M, in), M the product of the leading dimensions; `W.T` is (in, out); the "
        "GEMM gives (M, out), which reshapes to x's leading dimensions followed by out.",
        "y = b + x Wᵀ: `torch.addmm(input, mat1, mat2)` computes input + mat1 @ mat2 in one call, with the bias "
        "broadcast over the rows.",
    ),
    "ex03_layers-qkv_projection": (
        "The three projections read the same x: stack the three weights so that one GEMM does all of them.",
        "`torch.cat` of Wq (dq, in), Wk (dk, in) and Wv (dv, in) along dimension 0 is (dq + dk + dv, in). The rows "
        "of x, (M, in), times its transpose give (M, dq + dk + dv).",
        "x [Wq; Wk; Wv]ᵀ = [x Wqᵀ, x Wkᵀ, x Wvᵀ] side by side: cut the columns apart with `.split([dq, dk, dv], "
        "dim=1)` and reshape each to x's leading dimensions.",
    ),
    "ex03_layers-mlp": (
        "No new GEMM code: the block is your `linear` twice with a ReLU in between.",
        "(..., in) → linear with W1, b1 → (..., hidden) → ReLU → linear with W2, b2 → (..., out).",
        "ReLU is element-wise (`torch.relu`), so it keeps the shape; each of the two `linear` calls is one GEMM over "
        "all rows, which is exactly the two GEMMs the check expects.",
    ),
    "ex03_layers-embedding_as_gemm": (
        "Picking row ids[i] of the table is multiplying the table by a row vector that is 0 everywhere except for a "
        "1 at position ids[i].",
        "Flatten ids to n entries and build an (n, V) one-hot matrix in the table's dtype; (n, V) @ (V, D) is "
        "(n, D); reshape to ids' shape followed by D, which also covers a single 0-d id.",
        "A one-hot matrix without a gather: compare the ids as a column (n, 1) with `torch.arange(V)`, shape (V,). "
        "Broadcasting gives an (n, V) boolean matrix, True exactly where the column index equals the id; convert it "
        "to the table's dtype.",
    ),
    "ex03_layers-rnn_cell": (
        "Two products add up inside the tanh, x W_ihᵀ and h W_hhᵀ: two GEMMs over all rows, or one.",
        "For one GEMM: concatenate x (..., in) and h (..., hidden) along the features and fold the rows, giving "
        "(M, in + hidden); concatenate W_ih (hidden, in) and W_hh (hidden, hidden) along dimension 1, giving "
        "(hidden, in + hidden).",
        "[x, h] [W_ih, W_hh]ᵀ = x W_ihᵀ + h W_hhᵀ (block multiplication). Add b, apply `torch.tanh`, and reshape "
        "back to h's shape.",
    ),
    "ex03_layers-gnn_layer": (
        "Both orders give the same H; the check accepts only the cheaper one. Which feature count multiplies the "
        "N² term in each order?",
        "(A X) W costs 2N²·F_in + 2N·F_in·F_out and A (X W) costs 2N·F_in·F_out + 2N²·F_out. F_in is the first "
        "size of W and F_out the second.",
        "Associativity: (A X) W = A (X W). When F_out < F_in shrink the features first (X times W, then A times "
        "that); otherwise mix the nodes first.",
    ),
}
