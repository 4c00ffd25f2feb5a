"""Checks for assignment ex02_gemm: GEMM as loops, as M·N dots, as K outer products, with BLAS semantics, tiled,
and its FLOP count.

Visible checks run with the default cases below; the hidden checks in the solution notebook pass their own cases
(built with the same builders) and `hidden=0`. Oracles compute in float64 with torch; `gemm_flops` is compared
with what `torch.utils.flop_counter.FlopCounterMode` counts at check time. Shapes are always given as (M, N, K):
A is M×K, B is K×N, C is M×N.

The rules each exercise states are checked on what ran: every dot/GEMV/GEMM ATen op is recorded with its operands'
shapes (in-place and `out=` forms included) while the learner's function runs. Lesson 02's loops
(`twoprim.gemm.matmul_spec`, `python_loop_order`) are `matmul_loops` itself and `flop_counter` is `gemm_flops`'s
oracle: an answer that calls them is refused (`no_grader_calls`).

Why this module is long: six graded functions, each with its case builders, its check, its judge and the diagnoses of
its common mistakes (a tile loop that misses the ragged edge, C read when beta is 0, strides ignored), and their hints.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral

import torch
from torch.utils.flop_counter import FlopCounterMode

from twoprim.core import guards
from twoprim.core.cases import dtype_name, matrix
from twoprim.core.checks import (
    GEMM_ATEN,
    GEMM_FUNCTIONS,
    CallLog,
    Case,
    CheckResult,
    Mismatch,
    Rule,
    counted,
    describe,
    forbid,
    judge_tensor,
    no_grader_calls,
    reduction_tolerance,
    run_check,
)
from twoprim.core.record import gemm_flops
from twoprim.topics import gemm as gemm_topic
from twoprim.topics.gemm import LAYOUT_NOTES, matmul_cases, shape_label

__all__ = [
    "matmul_cases",
    "tiled_cases",
    "gemm_cases",
    "flops_cases",
    "check_matmul_loops",
    "check_matmul_dots",
    "check_matmul_outer",
    "check_gemm",
    "check_matmul_tiled",
    "check_gemm_flops",
    "guard_matmul",
    "guard_gemm",
    "guard_tile",
    "guard_sizes",
    "flop_counter",
    "uses",
]

TASK = "ex02_gemm"
_DTYPES = (torch.float32, torch.float64)


# ----------------------------------------------------------------------------------------------------------------
# Guards: the first line of every ex02 function
# ----------------------------------------------------------------------------------------------------------------

guard_matmul = guards.matmul  # A (M, K) and B (K, N): 2-D floating tensors of one dtype, inner sizes equal


def guard_gemm(fn: str, alpha, A, B, beta, C) -> None:
    """alpha, beta numbers; A (M, K), B (K, N), C (M, N) exactly (no broadcasting), all of one dtype."""
    guards.scalar(fn, "alpha", alpha)
    guards.scalar(fn, "beta", beta)
    guard_matmul(fn, A, B)
    guards.tensor(fn, "C", C, ndim=2)
    want = (A.shape[0], B.shape[1])
    if tuple(C.shape) != want:
        raise ValueError(
            f"{fn}: C has shape {tuple(C.shape)} but A @ B has shape {want} (A {tuple(A.shape)}, "
            f"B {tuple(B.shape)}); C must have exactly that shape (no broadcasting)."
        )
    if C.dtype != A.dtype:
        raise TypeError(f"{fn}: A and B are {A.dtype} but C is {C.dtype}; convert one so all match.")


def guard_tile(fn: str, tile) -> None:
    """tile is a positive int."""
    if isinstance(tile, bool) or not isinstance(tile, Integral):
        raise TypeError(f"{fn}: tile must be an int, got {type(tile).__name__}.")
    if tile < 1:
        raise ValueError(f"{fn}: tile={tile}; a tile needs at least one row and column (tile >= 1).")


def guard_sizes(fn: str, M, N, K) -> None:
    """M, N and K are positive ints."""
    for name, value in (("M", M), ("N", N), ("K", K)):
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__} {value!r}.")
        if value < 1:
            raise ValueError(f"{fn}: {name}={value}; GEMM sizes are at least 1.")


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run)
# ----------------------------------------------------------------------------------------------------------------


def tiled_cases(
    shapes: Sequence[tuple[int, int, int, int]],
    dtypes: Sequence[torch.dtype] = _DTYPES,
    *,
    layout: str = "contiguous",
    seed: int = 0,
) -> list[Case]:
    """(A, B, tile) for every (M, N, K, tile) × dtype."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for M, N, K, tile in shapes:
            A, B = matrix(M, K, dtype, gen, layout), matrix(K, N, dtype, gen, layout)
            label = f"{shape_label(M, N, K)}, tile={tile}, {dtype_name(dtype)}{LAYOUT_NOTES[layout]}"
            cases.append(Case(label, (A, B, tile)))
    return cases


@dataclass(frozen=True)
class GemmCase(Case):
    """A gemm case that remembers C as it was before the call (to prove C was left unchanged)."""

    C_before: torch.Tensor | None = None


def gemm_cases(
    specs: Sequence[tuple[int, int, int, float, float]],
    dtypes: Sequence[torch.dtype] = _DTYPES,
    *,
    fill_c: str | None = None,
    layout: str = "contiguous",
    seed: int = 0,
) -> list[GemmCase]:
    """(alpha, A, B, beta, C) for every (M, N, K, alpha, beta) × dtype; `fill_c` "nan" or "inf" fills C with it.

    With layout "transposed" or "strided", C is a non-contiguous view too.
    """
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for M, N, K, alpha, beta in specs:
            A, B = matrix(M, K, dtype, gen, layout), matrix(K, N, dtype, gen, layout)
            C = matrix(M, N, dtype, gen, layout)
            notes = [shape_label(M, N, K), f"alpha={alpha!r}", f"beta={beta!r}", dtype_name(dtype)]
            if fill_c is not None:
                C.fill_(float(fill_c))
                notes.append(f"C full of {fill_c}")
            label = ", ".join(notes) + LAYOUT_NOTES[layout].replace("A and B", "A, B and C")
            cases.append(GemmCase(label, (alpha, A, B, beta, C), C_before=C.clone()))
    return cases


def flops_cases(shapes: Sequence[tuple[int, int, int]]) -> list[Case]:
    """(M, N, K) as Python ints."""
    return [Case(f"M={M}, N={N}, K={K}", (M, N, K)) for M, N, K in shapes]


def _listing(ops: list, limit: int = 3) -> str:
    shown = [f"aten.{op} on {' and '.join(str(s) for s in shapes)}" for op, shapes in ops[:limit]]
    more = f" (and {len(ops) - limit} more)" if len(ops) > limit else ""
    return "; ".join(shown) + more


def _mnk(case: Case) -> tuple[int, int, int]:
    A, B = (case.args[1], case.args[2]) if isinstance(case, GemmCase) else case.args[:2]
    return A.shape[0], B.shape[1], A.shape[1]


# ----------------------------------------------------------------------------------------------------------------
# Rules
# ----------------------------------------------------------------------------------------------------------------

_REDUCTIONS = {"sum", "nansum", "cumsum", "mean", "prod"}
_NUMPY = {"numpy", "__array__"}

_PYTHON_LOOPS = forbid(
    "Python loops: no dot, matrix-vector or matrix-matrix product and no vectorised sum",
    GEMM_FUNCTIONS | _REDUCTIONS | _NUMPY,
    GEMM_ATEN | _REDUCTIONS,
    next_step="loop over i, j and k in Python and add A[i][k] * B[k][j] to a running Python float for each C[i, j] "
    "(A.tolist() gives the numbers as nested lists)",
)

_NO_NUMPY = forbid(
    "torch only: no conversion to NumPy",
    _NUMPY,
    next_step="stay in torch: NumPy's matmul would do the work this exercise asks you to write",
)


def _dots_only() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        M, N, K = _mnk(case)
        other = [(op, s) for op, s in log.gemms if op not in ("dot", "vdot")]
        if other:
            return (
                f"it ran {_listing(other)}: a matrix-vector or matrix-matrix product, where every C[i, j] must "
                f"be one dot product of two vectors"
            )
        dots = log.gemms
        if not dots:
            return "it ran no dot op: the products and sums came from element-wise operations instead of torch.dot"
        wrong = [(op, s) for op, s in dots if s != ((K,), (K,))]
        if wrong:
            return (
                f"it ran {_listing(wrong, 1)}, but every dot pairs row i of A with column j of B: two vectors of "
                f"length K = {K}"
            )
        if len(dots) != M * N:
            return (
                f"it ran {len(dots)} dot ops for a {M}×{N} result; each C[i, j] is exactly one dot, so M·N = "
                f"{M * N} in all"
            )
        return None

    return Rule(
        "one dot per element: exactly M·N dot ops (torch.dot), each of length K, and no matrix products",
        test,
        "for every i and j, C[i, j] = torch.dot(A[i, :], B[:, j]); no @ on matrices, no torch.mv or mm",
    )


_NO_GEMM_EXCEPT_OUTER = forbid(
    "no dot, matrix-vector or matrix-matrix product (outer products only)",
    (GEMM_FUNCTIONS - {"outer", "ger"}) | _NUMPY,
    GEMM_ATEN - {"outer", "ger"},
    next_step="build each outer product with torch.outer(A[:, k], B[k, :]) (or A[:, k, None] * B[None, k, :]) and "
    "add the K of them up; A[:, k:k+1] @ B[k:k+1, :] is a GEMM, so it is not allowed here",
)


def _outer_vectorised() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        M, N, K = _mnk(case)
        limit = 10 * K + 20
        if M * N > 1 and log.total > limit:
            return (
                f"it ran {log.total} ATen ops for M={M}, N={N}, K={K}; one outer product per k takes a handful "
                f"of ops each, at most about {limit} here, so this loops over the elements of C in Python"
            )
        return None

    return Rule(
        "a loop over k only: each outer product is one vectorised operation, not a loop over i and j",
        test,
        "for k in range(K): C += torch.outer(A[:, k], B[k, :]) — one (M, N) update per k",
    )


def _c_unchanged() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        if not isinstance(case, GemmCase) or case.C_before is None:
            return None
        C, before = case.args[4], case.C_before
        same = (before == C) | (torch.isnan(C) & torch.isnan(before))
        if not bool(same.all()):
            i = int((~same).reshape(-1).nonzero()[0])
            r, c = divmod(i, C.shape[1])
            return (
                f"C changed in place: C[{r}, {c}] was {float(before.reshape(-1)[i]):.6g} before the call and is "
                f"{float(C.reshape(-1)[i]):.6g} after it"
            )
        return None

    return Rule(
        "C is left unchanged: gemm returns a new tensor",
        test,
        "compute into a new tensor (alpha * (A @ B) + beta * C creates one); avoid in-place ops on C such as "
        "C.mul_(beta), C += ... or C[...] = ...",
    )


def _one_plain_product() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        fused = [(op, s) for op, s in log.gemms if op.rstrip("_") in ("addmm", "addmv", "addr", "baddbmm", "addbmm")]
        if fused:
            return f"it ran {_listing(fused)}, the library's own α·A·B + β·C, which this exercise asks you to write"
        if len(log.gemms) > 1:
            return f"it ran {len(log.gemms)} dot/GEMM ops ({_listing(log.gemms)}), where one A @ B is enough"
        return None

    return Rule(
        "one plain matrix product A @ B, scaled and added yourself (no torch.addmm)",
        test,
        "compute P = A @ B once; the result is alpha * P + beta * C, or alpha * P alone when beta == 0",
    )


def _tiles_only() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        A, B, tile = case.args
        M, N, K = _mnk(case)
        not_mm = [(op, s) for op, s in log.gemms if op.rstrip("_") not in ("mm", "addmm")]
        if not_mm:
            return (
                f"it ran {_listing(not_mm)}; the tiles are multiplied with 2-D matrix products (@, torch.mm or "
                f"torch.addmm), not dot products, matrix-vector or batched products"
            )
        too_big = [(op, s) for op, s in log.gemms if any(d > tile for shape in s for d in shape)]
        if too_big:
            return (
                f"it ran {_listing(too_big, 1)} with tile={tile}: an operand larger than one tile (every "
                f"dimension must be at most {tile}), so this is not a tiled product"
            )
        done = sum(gemm_flops(op, s) for op, s in log.gemms)
        want = 2 * M * N * K
        if not log.gemms:
            return "it ran no matrix product at all; the work on each tile is one small GEMM (A_tile @ B_tile)"
        if done < want:
            return (
                f"its tile GEMMs did {done:,} FLOPs, but a product of these sizes needs 2·M·N·K = {want:,}: "
                f"some tiles were never multiplied (the last tile of a row or column is smaller when {tile} "
                f"does not divide M, N or K)"
            )
        if done > want:
            return (
                f"its tile GEMMs did {done:,} FLOPs, more than the 2·M·N·K = {want:,} needed: some tile "
                f"products ran twice, or on padded tiles"
            )
        return None

    return Rule(
        "tiled: every GEMM op multiplies tiles of at most tile×tile, and together they do exactly 2·M·N·K FLOPs",
        test,
        "loop i0 over range(0, M, tile), j0 over range(0, N, tile), k0 over range(0, K, tile); add "
        "A[i0:i0+tile, k0:k0+tile] @ B[k0:k0+tile, j0:j0+tile] into C[i0:i0+tile, j0:j0+tile]",
    )


# ----------------------------------------------------------------------------------------------------------------
# Oracles and judges
# ----------------------------------------------------------------------------------------------------------------


def _product64(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return A.double() @ B.double()


def _matmul_expected(A, B, *rest) -> torch.Tensor:
    return _product64(A, B).to(A.dtype)


def _matmul_tolerance(A: torch.Tensor, B: torch.Tensor, extra: torch.Tensor | float = 0.0) -> float:
    """k·eps·max over C of (Σₖ |A[i, k]·B[k, j]| + |extra|), with k growing like √K for long sequential sums."""
    scale = (A.double().abs() @ B.double().abs()) + (extra.abs() if isinstance(extra, torch.Tensor) else abs(extra))
    K = A.shape[1]
    return reduction_tolerance(A.dtype, float(scale.max()) if scale.numel() else 0.0, k=4.0 + math.sqrt(K))


def _judge_matmul(got, want, case: Case) -> str:
    A, B = case.args[:2]
    return judge_tensor(got, want, atol=_matmul_tolerance(A, B), rtol=torch.finfo(A.dtype).eps, what="C")


def _gemm_expected(alpha, A, B, beta, C) -> torch.Tensor:
    out = float(alpha) * _product64(A, B)
    if float(beta) != 0.0:  # BLAS: with beta == 0, C is not read (NaN or inf in it do not matter)
        out = out + float(beta) * C.double()
    return out.to(A.dtype)


def _judge_gemm(got, want, case: Case) -> str:
    alpha, A, B, beta, C = case.args
    if (
        isinstance(got, torch.Tensor)
        and got.numel()
        and C.numel()
        and (got is C or got.untyped_storage().data_ptr() == C.untyped_storage().data_ptr())
    ):
        raise Mismatch(
            "C itself (or a view of C's memory), but gemm returns a new tensor",
            next_step="build the result as a new tensor, e.g. alpha * (A @ B) + beta * C, and leave C alone",
        )
    c_bad = bool((~torch.isfinite(C)).any())
    if (
        float(beta) == 0.0
        and c_bad
        and isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and bool((~torch.isfinite(got) & torch.isfinite(want)).any())
    ):
        raise Mismatch(
            f"{describe(got)} with NaN or inf in it, but beta = {beta!r} and C holds NaN or inf: 0·NaN is NaN in "
            f"floating point, so beta * C spreads it",
            next_step="when beta == 0, BLAS (and torch.addmm) do not read C at all: return alpha * (A @ B) without "
            "touching C",
        )
    extra = 0.0 if float(beta) == 0.0 else float(beta) * C.double()
    atol = _matmul_tolerance(A, B, extra) * max(abs(float(alpha)), 1.0)
    return judge_tensor(got, want, atol=atol, rtol=torch.finfo(A.dtype).eps, what="alpha·A·B + beta·C")


def flop_counter(M: int, N: int, K: int) -> int:
    """What torch's FlopCounterMode counts for one (M, K) @ (K, N) product (on meta tensors: nothing is computed)."""
    with FlopCounterMode(display=False) as counter:
        torch.mm(torch.empty(M, K, device="meta"), torch.empty(K, N, device="meta"))
    return int(counter.get_total_flops())


_USES: Counter = Counter()
flop_counter = counted(flop_counter, _USES)


def uses() -> Counter:
    """How many times `flop_counter`, gemm_flops's oracle, has been called (a copy)."""
    return Counter(_USES)


def _judge_flops(got, want, case: Case) -> str:
    M, N, K = case.args
    if isinstance(got, bool) or not isinstance(got, Integral):
        if isinstance(got, float) and got == want:
            raise Mismatch(
                f"{describe(got)}: the right number as a float, but FLOP counts are exact integers",
                next_step="return a Python int (2 * M * N * K with int arguments stays an int; avoid "
                "`/` and floats such as 2.0 or 1e9)",
            )
        raise Mismatch(
            f"{describe(got)}, but gemm_flops returns a Python int",
            next_step="return 2 * M * N * K as a plain int (not a tensor, tuple or float)",
        )
    if got == want:
        return ""
    hints = {  # later entries win when two formulas give the same number: the likeliest mistake comes last
        2 * M * K: "that leaves out N: there are M·N elements in C, each a dot of length K",
        2 * K * N: "that leaves out M: there are M·N elements in C, each a dot of length K",
        2 * M * N: "that is 2 FLOPs per element of C, but each element is a dot product of length K",
        M * N * (2 * K - 1): "that counts K − 1 additions per element; the convention (and FlopCounterMode) counts a "
        "multiply and an add for each of the K terms: 2·K per element",
        M * N * K: "that is the number of multiply-adds; each one is 2 FLOPs (a multiply and an add)",
    }
    raise Mismatch(
        f"int {got:,}; FlopCounterMode counted {want:,} for a ({M}, {K}) @ ({K}, {N}) product",
        next_step=hints.get(got, "C has M·N elements, each a dot product of length K: K multiplies and K adds"),
    )


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def _own(fn: Callable, next_step: str) -> tuple[Callable, Rule]:
    """`fn` watched for calls to lesson 02's loops and to gemm_flops's oracle, and the rule that refuses them."""
    return no_grader_calls(
        fn,
        {"twoprim.gemm": gemm_topic.uses, "twoprim.ex02": uses},
        next_step=next_step,
        why="lesson 02's loops (matmul_spec, python_loop_order) or flop_counter, this check's oracle",
    )


def _strided_matmul_cases() -> list[Case]:
    """The rule "any strides" in visible cases: A and B transposed (column-major), and every other column."""
    return matmul_cases([(3, 4, 5)], [torch.float32], layout="transposed", seed=1) + matmul_cases(
        [(2, 3, 5)], [torch.float64], layout="strided", seed=2
    )


def check_matmul_loops(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `matmul_loops`: three Python loops compute C[i, j] = Σₖ A[i, k]·B[k, j], in the input's dtype."""
    cases = cases if cases is not None else matmul_cases([(2, 3, 4), (4, 5, 3)]) + _strided_matmul_cases()
    fn, own = _own(
        fn, "write the three loops yourself; matmul_spec is the answer the lesson times, not a building block"
    )
    return run_check(
        f"{TASK}-matmul_loops",
        fn,
        cases,
        expected=_matmul_expected,
        judge=_judge_matmul,
        rules=[_PYTHON_LOOPS, own],
        proves="three Python loops compute C[i, j] = Σₖ A[i, k]·B[k, j], in the input's dtype",
        hidden=hidden,
        next_step="C[i, j] is the sum over k of A[i, k] * B[k, j], for every i and j",
    )


def check_matmul_dots(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `matmul_dots`: C is M·N dot products: C[i, j] = A[i, :]·B[:, j], one torch.dot each."""
    cases = cases if cases is not None else matmul_cases([(3, 4, 5), (6, 2, 7)]) + _strided_matmul_cases()
    return run_check(
        f"{TASK}-matmul_dots",
        fn,
        cases,
        expected=_matmul_expected,
        judge=_judge_matmul,
        rules=[_NO_NUMPY, _dots_only()] if callable(fn) else [],
        proves="C is M·N dot products: C[i, j] = A[i, :]·B[:, j], one torch.dot each",
        hidden=hidden,
        next_step="C[i, j] pairs row i of A with column j of B",
    )


def check_matmul_outer(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `matmul_outer`: C is the sum of K outer products: C = Σₖ A[:, k] ⊗ B[k, :], with no dot or GEMM."""
    cases = cases if cases is not None else matmul_cases([(4, 5, 3), (8, 9, 2)]) + _strided_matmul_cases()
    return run_check(
        f"{TASK}-matmul_outer",
        fn,
        cases,
        expected=_matmul_expected,
        judge=_judge_matmul,
        rules=[_NO_GEMM_EXCEPT_OUTER, _outer_vectorised()],
        proves="C is the sum of K outer products: C = Σₖ A[:, k] ⊗ B[k, :], with no dot or GEMM",
        hidden=hidden,
        next_step="outer product k is column k of A times row k of B: shape (M, N)",
    )


def check_gemm(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `gemm`: BLAS semantics α·A·B + β·C in a new tensor, C unchanged, C ignored when β = 0."""
    if cases is None:
        cases = (
            gemm_cases([(3, 4, 5, 1.5, 0.5), (4, 2, 3, -1.0, 2.0)])
            + gemm_cases([(3, 3, 2, 2.0, 0.0)], [torch.float32], fill_c="nan", seed=1)
            + gemm_cases([(2, 3, 4, -1.0, 0.0)], [torch.float64], fill_c="inf", seed=2)
            + gemm_cases([(4, 3, 5, 2, -1)], [torch.float64], layout="transposed", seed=3)
            + gemm_cases([(3, 5, 2, 0.0, 0.5)], [torch.float32], layout="strided", seed=4)
        )
    return run_check(
        f"{TASK}-gemm",
        fn,
        cases,
        expected=_gemm_expected,
        judge=_judge_gemm,
        rules=[_NO_NUMPY, _c_unchanged(), _one_plain_product()] if callable(fn) else [],
        proves="BLAS semantics α·A·B + β·C in a new tensor, C unchanged, C ignored when β = 0",
        hidden=hidden,
        next_step="the result is alpha * (A @ B) + beta * C",
    )


def check_matmul_tiled(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `matmul_tiled`: a tiled product: GEMMs on tiles of at most tile×tile, edge tiles included, equal A @ B."""
    if cases is None:  # the rules stated, each in a case: multiples and not; a tile larger than the matrices; strides
        cases = (
            tiled_cases([(8, 8, 8, 4), (10, 7, 9, 4)])
            + tiled_cases([(5, 6, 7, 16)], [torch.float64], seed=1)
            + tiled_cases([(9, 10, 7, 4)], [torch.float32], layout="transposed", seed=2)
            + tiled_cases([(7, 5, 6, 3)], [torch.float64], layout="strided", seed=3)
        )
    return run_check(
        f"{TASK}-matmul_tiled",
        fn,
        cases,
        expected=_matmul_expected,
        judge=_judge_matmul,
        rules=[_NO_NUMPY, _tiles_only()] if callable(fn) else [],
        proves="a tiled product: GEMMs on tiles of at most tile×tile, edge tiles included, equal A @ B",
        hidden=hidden,
        next_step="C's tile (i0, j0) is the sum over k0 of A's tile (i0, k0) @ B's tile (k0, j0)",
    )


def check_gemm_flops(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `gemm_flops`: 2·M·N·K, the FLOP count FlopCounterMode measures for an (M, K) @ (K, N) product."""
    cases = cases if cases is not None else flops_cases([(3, 4, 5), (1, 4096, 4096), (4096, 4096, 4096)])
    fn, own = _own(fn, "count with arithmetic on M, N and K: flop_counter is the oracle this check compares with")
    return run_check(
        f"{TASK}-gemm_flops",
        fn,
        cases,
        expected=flop_counter,
        judge=_judge_flops,
        rules=[own],
        proves="2·M·N·K, the FLOP count FlopCounterMode measures for an (M, K) @ (K, N) product",
        hidden=hidden,
        next_step="count the multiplies and adds: M·N elements, K of each per element",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex02_gemm-matmul_loops": (
        "Three nested loops: i over the rows of A (M), j over the columns of B (N), and k over the shared dimension "
        "(K). Only the innermost loop adds.",
        "Read the numbers out once with `.tolist()` (nested Python lists), make an (M, N) result tensor of A's "
        "dtype, and write each finished C[i, j] into it.",
        "C[i, j] = Σₖ A[i, k]·B[k, j], accumulated in a Python float that starts again at 0 for every (i, j).",
    ),
    "ex02_gemm-matmul_dots": (
        "Which two vectors meet in C[i, j]? Row i of A and column j of B, both of length K.",
        "Two loops, i over M and j over N, and one `torch.dot` per pair: row i of A is (K,), column j of B is (K,), "
        "and their dot is a 0-d tensor you store at C[i, j] of an (M, N) result.",
        "C[i, j] = A[i, :]·B[:, j]: M·N dots of length K, exactly what the check counts.",
    ),
    "ex02_gemm-matmul_outer": (
        "Turn the loops inside out: loop over k only, and let each step update all of C at once.",
        "Column k of A is (M,) and row k of B is (N,); their outer product is (M, N), the shape of C. Start C at "
        "zeros and add one outer product per k.",
        "C = Σₖ A[:, k] ⊗ B[k, :] with (u ⊗ v)ᵢⱼ = uᵢvⱼ: `torch.outer(u, v)`, or a column (M, 1) times a row "
        "(1, N) by broadcasting.",
    ),
    "ex02_gemm-gemm": (
        "Three parts of BLAS's contract: the product A·B once, scaled by alpha; beta·C added only when beta is not "
        "0; and C itself never changed.",
        "A (M, K) @ B (K, N) is (M, N), the shape of C. An expression such as alpha · product + beta · C builds a "
        "new tensor, so C stays as it was (no `+=` on C).",
        "When beta == 0, return alpha times the product without touching C at all: 0·NaN is NaN in IEEE "
        "arithmetic, so multiplying C by 0 is not the same as not reading it.",
    ),
    "ex02_gemm-matmul_tiled": (
        "Three loops again, but over the corners of tiles: rows of C, columns of C and the shared K, each stepping "
        "by `tile` (`range(0, M, tile)` and so on).",
        "For corners i0, j0, k0: take the tile of A at rows i0…, columns k0… and the tile of B at rows k0…, "
        "columns j0…, each at most tile long, and add their product into C's tile at rows i0…, columns j0…. A slice "
        "that runs past the end stops at the edge, so the last tiles come out smaller by themselves.",
        "Block matrix identity: C[i0, j0] = Σ over k0 of A[i0, k0] · B[k0, j0], each a plain `@` on tiles, "
        "accumulated into the same tile of a C that starts at zeros.",
    ),
    "ex02_gemm-gemm_flops": (
        "Count one dot product first: a dot of length K has K multiplications and K additions (counting the add "
        "into the running total).",
        "C has M·N elements, and each one is a dot product of length K.",
        "A multiply-add is 2 FLOPs, so the product costs 2 FLOPs per term and has M·N·K terms. Return a Python int.",
    ),
}
