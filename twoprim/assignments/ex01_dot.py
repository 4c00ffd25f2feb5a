"""Checks for assignment ex01_dot: the dot product, a neuron, cosine similarity and top-k search.

Visible checks run with the default cases below; the hidden checks in the solution notebook pass their own cases
(built with the same builders) and `hidden=0`. Oracles compute in float64 with torch. `twoprim.reference.dot_spec`,
the lesson's loop, is `dot_loop` itself: an answer that calls it is refused (`no_grader_calls`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from twoprim.core.cases import randn
from twoprim.core.checks import (
    GEMM_ATEN,
    GEMM_FUNCTIONS,
    CallLog,
    Case,
    CheckResult,
    ErrorSummary,
    Mismatch,
    Rule,
    describe,
    forbid,
    judge_tensor,
    no_grader_calls,
    reduction_tolerance,
    run_check,
)
from twoprim.topics import dot_product

__all__ = [
    "vector_cases",
    "neuron_cases",
    "search_cases",
    "tie_cases",
    "check_dot_loop",
    "check_dot",
    "check_neuron",
    "check_cosine_similarity",
    "check_top_k",
]

TASK = "ex01_dot"


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run)
# ----------------------------------------------------------------------------------------------------------------


def vector_cases(
    lengths: Sequence[int],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    noncontiguous: bool = False,
    seed: int = 0,
) -> list[Case]:
    """Pairs (x, w) of random vectors for every length × dtype."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    layout = "strided" if noncontiguous else "contiguous"  # strided: every other element, stride 2
    for dtype in dtypes:
        for n in lengths:
            x, w = randn((n,), dtype, gen, layout), randn((n,), dtype, gen, layout)
            note = ", non-contiguous" if noncontiguous else ""
            cases.append(Case(f"length {n}, {str(dtype)[6:]}{note}", (x, w)))
    return cases


def neuron_cases(
    lengths: Sequence[int], dtypes: Sequence[torch.dtype] = (torch.float32,), *, seed: int = 0
) -> list[Case]:
    """(x, w, b) with b alternately a Python float and a 0-d tensor of the input's dtype."""
    cases = []
    for i, case in enumerate(vector_cases(lengths, dtypes, seed=seed)):
        x, w = case.args
        b = 0.5 - i if i % 2 == 0 else torch.tensor(0.25 * i, dtype=x.dtype)
        cases.append(Case(f"{case.label}, bias {'float' if i % 2 == 0 else '0-d tensor'}", (x, w, b)))
    return cases


def search_cases(
    shapes: Sequence[tuple[int, int]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    k: int | None = None,
    zero_key: bool = False,
    noncontiguous: bool = False,
    seed: int = 0,
) -> list[Case]:
    """(query (D,), keys (N, D)) and, when `k` is given, k (clipped to N)."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for n, d in shapes:
            query = randn((d,), dtype, gen)
            keys = randn((n, d), dtype, gen, "transposed" if noncontiguous else "contiguous")
            notes = [f"N={n} keys of D={d}", str(dtype)[6:]]
            if noncontiguous:
                notes.append("keys transposed (non-contiguous)")
            if zero_key:
                keys = keys.clone() if not noncontiguous else keys
                keys[n // 2] = 0
                notes.append(f"key {n // 2} is all zeros")
            args = (query, keys) if k is None else (query, keys, min(k, n))
            if k is not None:
                notes.append(f"k={min(k, n)}")
            cases.append(Case(", ".join(notes), args))
    return cases


def tie_cases(dtypes: Sequence[torch.dtype] = (torch.float32,), *, seed: int = 0) -> list[Case]:
    """Integer-valued keys with exact ties: duplicated rows and rows scaled by 2 have equal cosine."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        base = torch.randint(-3, 4, (5, 6), generator=gen).to(dtype)
        base[base.abs().sum(1) == 0, 0] = 1  # no zero rows here
        query = torch.randint(-3, 4, (6,), generator=gen).to(dtype)
        query[0] = 2
        # rows: 0 1 2 3 4, then a copy of row 2, 2 × row 0, a copy of row 4
        keys = torch.cat([base, base[2:3], 2 * base[0:1], base[4:5]])
        cases.append(
            Case(
                f"ties: key 5 copies key 2, key 6 is 2 × key 0, key 7 copies key 4; {str(dtype)[6:]}, k=8",
                (query, keys, 8),
            )
        )
    return cases


# ----------------------------------------------------------------------------------------------------------------
# Oracles (float64 torch)
# ----------------------------------------------------------------------------------------------------------------


def _dot64(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.dot(x.double(), w.double())


def _dot_expected(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _dot64(x, w).to(x.dtype)


def _abs_sum(x: torch.Tensor, w: torch.Tensor) -> float:
    return float((x.double() * w.double()).abs().sum())


def _cosine64(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(query.double()[None, :], keys.double(), dim=-1)


# ----------------------------------------------------------------------------------------------------------------
# Rules
# ----------------------------------------------------------------------------------------------------------------

_NO_GEMM = forbid(
    "no torch.dot, @, matmul, einsum or any other built-in dot product",
    GEMM_FUNCTIONS | {"numpy"},
    GEMM_ATEN,
    next_step="multiply the two vectors element-wise and add up the products yourself, in torch",
)

_NO_VECTOR_REDUCTION = forbid(
    "a Python loop over the elements: no vectorised product or sum",
    GEMM_FUNCTIONS | {"sum", "nansum", "cumsum", "mean", "prod", "numpy"},
    GEMM_ATEN | {"sum", "cumsum", "mean"},
    next_step="write `for i in range(len(x)):` and add x[i] * w[i] to a running Python float",
)


def _vectorised(max_ops: int = 12, min_length: int = 16) -> Rule:
    """The number of ATen ops must not grow with the length: no Python loop over elements."""

    def test(log: CallLog, case: Case) -> str | None:
        n = case.args[0].shape[0]
        if n >= min_length and log.total > max_ops:
            return (
                f"it ran {log.total} ATen ops for vectors of length {n}; a vectorised dot product runs a "
                f"handful whatever the length, so this loops in Python"
            )
        return None

    return Rule(
        "vectorised: a fixed number of tensor ops, whatever the length",
        test,
        "replace the loop by one element-wise product and one sum over the whole vectors",
    )


def _one_gemv() -> Rule:
    gemm_ops = GEMM_ATEN

    def test(log: CallLog, case: Case) -> str | None:
        used = {f"aten.{op}": n for op, n in log.aten.items() if op in gemm_ops}
        count = sum(used.values())
        if count == 1:
            return None
        if count == 0:
            return (
                "it ran no matrix-vector product: the N similarities came from element-wise products and sums instead"
            )
        n_keys = case.args[1].shape[0]
        listing = ", ".join(f"{op} ×{n}" for op, n in used.items())
        loop = f" — one per key for {n_keys} keys, a Python loop" if count == n_keys else ""
        return f"it ran {count} dot/GEMM ops ({listing}){loop}"

    return Rule(
        "one matrix-vector product for all keys",
        test,
        "compute every key's dot with the query at once as keys @ query (N, D) @ (D,) -> (N,), and the "
        "norms with torch.linalg.vector_norm",
    )


_NO_BUILTIN_COSINE = forbid(
    "no torch.nn.functional.cosine_similarity",
    {"cosine_similarity", "numpy"},
    next_step="divide the dot products by the product of the norms yourself",
)


def _own(fn: Callable) -> tuple[Callable, Rule]:
    """`fn` watched for calls to the lesson's loop `twoprim.reference.dot_spec`, and the rule that refuses them."""
    return no_grader_calls(
        fn,
        {"twoprim.reference": dot_product.uses},
        why="dot_spec, the lesson's loop, which is this answer",
        next_step="write the loop (or the vectorised product) yourself; dot_spec is the answer "
        "the check compares with, not a building block",
    )


# ----------------------------------------------------------------------------------------------------------------
# Judges
# ----------------------------------------------------------------------------------------------------------------


def _judge_dot(got, want, case: Case) -> str:
    x, w = case.args
    tol = reduction_tolerance(x.dtype, _abs_sum(x, w))
    return judge_tensor(got, want, atol=tol, rtol=torch.finfo(x.dtype).eps)


def _judge_float(got, want, case: Case) -> str:
    x, w = case.args
    if isinstance(got, torch.Tensor):
        raise Mismatch(
            f"{describe(got)}, but dot_loop returns a Python float",
            next_step="accumulate into a Python float (total = 0.0) and return it; float(t) converts a "
            "one-element tensor",
        )
    if not isinstance(got, float):
        raise Mismatch(f"{describe(got)}, but dot_loop returns a Python float", next_step="return float(total)")
    tol = reduction_tolerance(x.dtype, _abs_sum(x, w))
    err = abs(got - float(want))
    summary = ErrorSummary(err, err / max(abs(float(want)), 1e-300), tol, 0.0)
    if not err <= tol:
        raise Mismatch(
            f"{got!r}\n  error:    {summary}",
            next_step="check that the loop visits every index once, from 0 to len(x) - 1",
        )
    return summary


def _judge_neuron(got, want, case: Case) -> str:
    x, w, b = case.args
    tol = reduction_tolerance(x.dtype, _abs_sum(x, w) + abs(float(b)))
    return judge_tensor(got, want, atol=tol, rtol=torch.finfo(x.dtype).eps)


def _judge_cosine(got, want, case: Case) -> str:
    query, keys = case.args[:2]
    eps = torch.finfo(query.dtype).eps
    atol = 8 * eps * max(math.sqrt(query.shape[0]), 4.0)
    return judge_tensor(got, want, atol=atol, rtol=0.0, what="the N similarities")


def _expected_top_k(query, keys, k) -> torch.Tensor:
    sims = _cosine64(query, keys)
    return torch.sort(sims, descending=True, stable=True).indices[:k]


def _judge_top_k(got, want, case: Case) -> str:
    query, keys, k = case.args
    n = keys.shape[0]
    if not isinstance(got, torch.Tensor) or got.is_floating_point() or got.dtype == torch.bool:
        raise Mismatch(
            f"{describe(got)}, but top_k returns a 1-D integer tensor of {k} key indices",
            next_step="return indices (e.g. from torch.sort(...).indices), not similarity values",
        )
    if got.shape != (k,):
        raise Mismatch(
            f"shape {tuple(got.shape)}, expected ({k},): one index per requested key",
            next_step="keep only the first k indices of the ranking",
        )
    idx = [int(i) for i in got]
    if any(not 0 <= i < n for i in idx):
        raise Mismatch(f"indices {idx}, but keys are numbered 0..{n - 1}")
    if len(set(idx)) != len(idx):
        dup = next(i for i in idx if idx.count(i) > 1)
        raise Mismatch(f"indices {idx}: key {dup} appears twice", next_step="rank each key once")
    sims = _cosine64(query, keys)
    tol = 8 * torch.finfo(query.dtype).eps * max(math.sqrt(query.shape[0]), 4.0)
    exp = [int(i) for i in want]
    for rank, (g, e) in enumerate(zip(idx, exp, strict=True)):
        if g == e:
            continue
        sg, se = float(sims[g]), float(sims[e])
        if sg == se:
            raise Mismatch(
                f"indices {idx}: at rank {rank} keys {g} and {e} tie (similarity {sg:.6g}) and {g} came first",
                next_step="break ties by the lower key index: a stable sort (torch.sort(..., stable=True)) keeps "
                "equal similarities in index order",
            )
        if abs(sg - se) > tol:
            raise Mismatch(
                f"indices {idx}\n  at rank {rank}: key {g} (similarity {sg:.6g}) where key {e} (similarity "
                f"{se:.6g}) belongs",
                next_step="rank by cosine similarity, largest first (descending), and keep the first k",
            )
    return ""


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def check_dot_loop(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `dot_loop`: a Python loop of multiply-adds equals x·w and returns a float."""
    cases = cases if cases is not None else vector_cases([1, 3, 10], [torch.float32, torch.float64])
    fn, own = _own(fn)
    return run_check(
        f"{TASK}-dot_loop",
        fn,
        cases,
        expected=_dot64,
        judge=_judge_float,
        rules=[_NO_VECTOR_REDUCTION, own],
        proves="a Python loop of multiply-adds equals x·w and returns a float",
        hidden=hidden,
        next_step="multiply x[i] by w[i] for every i and add the products",
    )


def check_dot(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `dot`: a vectorised x·w without built-in dot products, in the input's dtype."""
    if cases is None:  # the rules stated, each in a case: float16 keeps its dtype too; a non-contiguous view
        cases = (
            vector_cases([3, 64, 1000], [torch.float32, torch.float64])
            + vector_cases([33], [torch.float16], seed=3)
            + vector_cases([31], noncontiguous=True, seed=4)
        )
    fn, own = _own(fn)
    return run_check(
        f"{TASK}-dot",
        fn,
        cases,
        expected=_dot_expected,
        judge=_judge_dot,
        rules=[_NO_GEMM, _vectorised(), own],
        proves="a vectorised x·w without built-in dot products, in the input's dtype",
        hidden=hidden,
        next_step="(x * w) is the element-wise product; its sum over all elements is the dot product",
    )


def check_neuron(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `neuron`: a neuron's pre-activation x·w + b, with b a number or a 0-d tensor."""
    if cases is None:  # float16 too: x·w + b keeps x's dtype whatever b is (a number or a 0-d tensor)
        cases = neuron_cases([4, 100], [torch.float32, torch.float64]) + neuron_cases([20], [torch.float16], seed=3)
    fn, own = _own(fn)
    return run_check(
        f"{TASK}-neuron",
        fn,
        cases,
        expected=lambda x, w, b: (_dot64(x, w) + float(b)).to(x.dtype),
        judge=_judge_neuron,
        rules=[own],
        proves="a neuron's pre-activation x·w + b, with b a number or a 0-d tensor",
        hidden=hidden,
        next_step="reuse your dot(x, w) and add b",
    )


def check_cosine_similarity(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `cosine_similarity`: cosine similarity of one query against N keys, with one matrix-vector product."""
    if cases is None:  # the rules stated, each in a case: a key of all zeros has similarity 0; transposed keys
        cases = (
            search_cases([(5, 8), (100, 32)], [torch.float32, torch.float64])
            + search_cases([(9, 5)], [torch.float64], zero_key=True, seed=3)
            + search_cases([(11, 3)], [torch.float32], noncontiguous=True, seed=4)
        )
    return run_check(
        f"{TASK}-cosine_similarity",
        fn,
        cases,
        expected=lambda q, keys: _cosine64(q, keys).to(q.dtype),
        judge=_judge_cosine,
        rules=[_NO_BUILTIN_COSINE, _one_gemv()],
        proves="cosine similarity of one query against N keys, with one matrix-vector product",
        hidden=hidden,
        next_step="similarity = (keys @ query) / (‖keys‖ per row × ‖query‖)",
    )


def check_top_k(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `top_k`: the k most similar keys, best first, ties to the lower index."""
    if cases is None:
        cases = search_cases([(10, 8), (200, 16)], [torch.float32], k=3) + tie_cases([torch.float64])
    return run_check(
        f"{TASK}-top_k",
        fn,
        cases,
        expected=_expected_top_k,
        judge=_judge_top_k,
        rules=[_NO_BUILTIN_COSINE],
        proves="the k most similar keys, best first, ties to the lower index",
        hidden=hidden,
        next_step="sort the similarities in descending order and keep the first k indices",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex01_dot-dot_loop": (
        "Look at the loop version in lesson 01: one index i runs over the length of x, and every step is Python "
        "arithmetic on single numbers, no tensor operation.",
        "Keep a running total as a Python float that starts at zero. Turn x[i] and w[i] into Python floats with "
        "`float(...)` before you multiply them, so nothing vectorised runs.",
        "x·w = x₀w₀ + x₁w₁ + … + xₙ₋₁wₙ₋₁, one term added per iteration. Return the float itself, not a tensor.",
    ),
    "ex01_dot-dot": (
        "Two whole-tensor operations are enough: which element-wise operation pairs xᵢ with wᵢ, and which "
        "reduction adds up the n results?",
        "The element-wise product has shape (n,), like x; reducing it over everything gives shape (), a 0-d tensor "
        "that keeps x's dtype.",
        "x·w = Σᵢ (x ⊙ w)ᵢ, the sum of the element-wise (Hadamard) product: `*` between two tensors multiplies "
        "element by element, and `.sum()` with no dimension adds everything.",
    ),
    "ex01_dot-neuron": (
        "You already wrote the hard part: a neuron's pre-activation is your dot product plus one number.",
        "`dot(x, w)` is a 0-d tensor; adding b, a number or a 0-d tensor, gives a 0-d tensor again.",
        "z = x·w + b. Call the `dot` you defined above, not a built-in, so the rules of `dot` still hold.",
    ),
    "ex01_dot-cosine_similarity": (
        "Split the formula in two: the numerators q·kⱼ for every key, and the denominators ‖q‖‖kⱼ‖ for every key. "
        "Each is one vectorised expression.",
        "keys (N, D) times query (D,) is a matrix-vector product of shape (N,): all numerators at once. The norms "
        "of the rows of keys form an (N,) vector; the query's norm is 0-d and broadcasts.",
        "cos = (K q) / max(‖kⱼ‖‖q‖, 1e-8). `torch.linalg.vector_norm` with `dim=1` gives row norms, and "
        "`clamp_min` applies the floor, so an all-zero key gets 0 / 1e-8 = 0.",
    ),
    "ex01_dot-top_k": (
        "Rank by your `cosine_similarity`: the answer is the positions of the largest similarities, largest first.",
        "Sorting the (N,) similarities in decreasing order also gives the permutation of indices, shape (N,); keep "
        "its first k entries.",
        "Ties keep index order only with a stable sort: `torch.sort` takes `stable=True` (and `descending=True`), "
        "`torch.topk` promises nothing about ties. The sort's `.indices` are what you return.",
    ),
}
