"""Checks for assignment ex08_triton: three Triton kernels and their launch wrappers — a vector add, a row softmax
and a tiled GEMM with `tl.dot` over K's blocks.

Every kernel runs in Triton's interpreter (`TRITON_INTERPRET=1`, set by `triton_tools.setup()` when this module is
imported) on CPU tensors, so the assignment is graded the same way on any machine; sizes stay small because the
interpreter runs each program in Python and NumPy. The cases are sizes that are not a multiple of the block (masks),
non-contiguous inputs (strides), and float16/bfloat16 inputs whose sums must accumulate in float32.

Visible checks run with the default cases below; the hidden checks in the solution notebook pass their own cases
(built with the same builders) and `hidden=0`. Oracles compute in float64 with torch.
"""
from __future__ import annotations

from typing import Callable, Sequence

from . import triton_tools

triton_tools.setup()  # before the learner's @triton.jit: the assignment always runs in the interpreter

import torch  # noqa: E402

from . import guards  # noqa: E402
from .cases import dtype_name, matrix  # noqa: E402
from .ex02 import matmul_cases  # noqa: E402  (lesson 02's (A, B) cases: seeded shapes, dtypes and layouts)
from .checks import GEMM_ATEN, GEMM_FUNCTIONS, Case, CheckResult, Mismatch, Rule, forbid, judge_tensor, run_check  # noqa: E402

__all__ = [
    "add_cases", "softmax_cases", "matmul_cases", "accumulation_cases",
    "check_add_kernel", "check_softmax_kernel", "check_matmul_kernel",
    "guard_add", "guard_softmax", "guard_matmul",
]

TASK = "ex08_triton"
HALF = (torch.float16, torch.bfloat16)


# ----------------------------------------------------------------------------------------------------------------
# Guards (the first line of each wrapper)
# ----------------------------------------------------------------------------------------------------------------

def _on_cpu(fn: str, **tensors) -> None:
    for name, t in tensors.items():
        if t.device.type != triton_tools.device():
            raise ValueError(f"{fn}: {name} is on {t.device}, but kernels here run on {triton_tools.device()}; move it "
                             f"with {name}.to('{triton_tools.device()}').")


def guard_add(fn: str, x, y) -> None:
    """x and y: 1-D floating tensors of one length and dtype."""
    guards.same_length(fn, x=x, y=y)
    _on_cpu(fn, x=x, y=y)


def guard_softmax(fn: str, x) -> None:
    """x: a 2-D floating tensor (M, N) with N >= 1."""
    guards.tensor(fn, "x", x, ndim=2)
    if x.shape[1] == 0:
        raise ValueError(f"{fn}: x has shape {tuple(x.shape)}; a softmax over rows needs at least one column.")
    _on_cpu(fn, x=x)


def guard_matmul(fn: str, A, B) -> None:
    """A (M, K) and B (K, N): 2-D floating CPU tensors of one dtype whose inner sizes agree."""
    guards.matmul(fn, A, B)
    _on_cpu(fn, A=A, B=B)


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run)
# ----------------------------------------------------------------------------------------------------------------

_LAYOUT_NOTE = {"contiguous": "", "transposed": ", column-major (transposed, non-contiguous)",
                "strided": ", every other column (stride 2, non-contiguous)"}


def add_cases(lengths: Sequence[int], dtypes: Sequence[torch.dtype] = (torch.float32,), *, strided: bool = False,
              seed: int = 0) -> list[Case]:
    """(x, y) of every length × dtype; `strided`: every other element of a twice-as-long buffer (stride 2)."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for n in lengths:
            if strided:
                x, y = (torch.randn(2 * n, generator=gen, dtype=torch.float64).to(dtype)[::2] for _ in range(2))
            else:
                x, y = (torch.randn(n, generator=gen, dtype=torch.float64).to(dtype) for _ in range(2))
            note = ", every other element (stride 2, non-contiguous)" if strided else ""
            cases.append(Case(f"length {n}, {dtype_name(dtype)}{note}", (x, y)))
    return cases


def softmax_cases(shapes: Sequence[tuple[int, int]], dtypes: Sequence[torch.dtype] = (torch.float32,), *,
                  layout: str = "contiguous", scale: float = 1.0, seed: int = 0) -> list[Case]:
    """x (M, N) for every shape × dtype; `scale` multiplies the values (large ones overflow exp without the max)."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for m, n in shapes:
            x = matrix(m, n, dtype, gen, layout, scale)
            note = f", values × {scale:g} (exp overflows without subtracting the row max)" if scale > 10 else ""
            cases.append(Case(f"x ({m}, {n}), {dtype_name(dtype)}{_LAYOUT_NOTE[layout]}{note}", (x,)))
    return cases


def accumulation_cases(dtypes: Sequence[torch.dtype] = HALF, *, K: int = 1024, seed: int = 0) -> list[Case]:
    """Half-precision inputs whose products sum to much more than each term: row i of A is 0.01·(1 + i/100) except
    for one large entry 64 in column 0, B is all ones. Accumulated in float16/bfloat16, the small terms vanish
    against the large partial sum; in float32 they add up."""
    cases = []
    for dtype in dtypes:
        M, N = 5, 3
        A = (0.01 * (1 + torch.arange(M, dtype=torch.float64) / 100))[:, None].repeat(1, K)
        A[:, 0] = 64.0
        B = torch.ones(K, N, dtype=torch.float64)
        cases.append(Case(f"M={M}, N={N}, K={K}, {dtype_name(dtype)}: one term 64 and {K - 1} terms near 0.01 per "
                          f"output (float32 accumulation needed)", (A.to(dtype), B.to(dtype))))
    return cases


# ----------------------------------------------------------------------------------------------------------------
# Rules: the kernel computes the result, the wrapper only launches it
# ----------------------------------------------------------------------------------------------------------------

def _traced(fn: Callable, seen: list) -> Callable:
    """`fn` with the Triton kernels each call launches recorded into seen[0]."""
    if not callable(fn):
        return fn

    def call(*args, **kwargs):
        with triton_tools.launches() as launched:
            seen[:] = [launched]
            return fn(*args, **kwargs)

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "your function")
    return call


def _launches(kernel, seen: list) -> Rule:
    want = getattr(kernel, "fn", kernel)
    name = getattr(want, "__name__", "the kernel")

    def test(log, case) -> str | None:
        launched = seen[0] if seen else triton_tools.Launches()
        if want in launched.functions():
            return None
        if not launched.calls:
            return f"it launched no Triton kernel: the result came from torch or Python, not from {name}"
        return f"it launched {', '.join(sorted(set(launched.names())))}, but not {name}"

    return Rule(f"the wrapper launches {name}, which computes the result", test,
                f"launch the kernel with {name}[grid](...) and return the tensor it wrote")


LOOP_K = 64  # from this K on, BLOCK_K ≥ K (the whole of K in one tl.dot, a loop that runs once) breaks the rule


def _dot_over_k(kernel, seen: list) -> Rule:
    """tl.dot inside a loop in the source, and when run (the interpreter sees every call) a loop that takes more than
    one block of K once K > LOOP_K: a BLOCK_K as large as K passes the source check with a loop that runs once."""
    name = getattr(getattr(kernel, "fn", kernel), "__name__", "the kernel")

    def test(log, case) -> str | None:
        static = triton_tools.dot_in_loop(kernel)
        if static is not None:
            return static
        K = case.args[0].shape[-1]
        launched = (seen[0] if seen else triton_tools.Launches()).of(kernel)
        observed = [launch.dots for launch in launched if launch.dots is not None]
        if observed and not any(calls for dots in observed for calls in dots.values()):
            return f"{name} ran without calling tl.dot: the products were computed another way"
        if K <= LOOP_K:
            return None
        for dots in observed:
            once = [calls[0] for calls in dots.values() if len(calls) == 1 and calls[0] >= K]
            if once:
                return (f"for K = {K} each program called tl.dot once, on a block {once[0]} wide along K: with "
                        f"BLOCK_K ≥ K the loop over K runs once, one block as wide as K, not a walk over K's blocks")
        return None

    return Rule("the GEMM kernel multiplies blocks with tl.dot inside a loop over K", test,
                "loop over K in steps of BLOCK_K; in each step load a (BLOCK_M, BLOCK_K) block of A and a "
                "(BLOCK_K, BLOCK_N) block of B and add tl.dot of the two to a float32 accumulator; keep BLOCK_K "
                "fixed (32), whatever K is")


_NO_TORCH_ADD = forbid("the wrapper does no arithmetic: the kernel adds", {"add", "__add__", "__radd__", "add_",
                       "__iadd__", "sum", "numpy"}, {"add", "add_", "sum"},
                       next_step="allocate the output with torch.empty and let the kernel write x + y into it")
_NO_TORCH_SOFTMAX = forbid(
    "the wrapper does no arithmetic: the kernel computes the softmax",
    {"softmax", "log_softmax", "exp", "exp_", "amax", "max", "logsumexp", "sum", "div", "__truediv__", "sub",
     "__sub__", "numpy"},
    {"_softmax", "softmax", "_log_softmax", "exp", "amax", "max", "logsumexp", "sum", "div", "sub"},
    next_step="allocate the output with torch.empty and let one program per row load, exponentiate and normalise")
_NO_TORCH_GEMM = forbid("no torch matmul in the wrapper: the kernel's tl.dot does every product",
                        GEMM_FUNCTIONS | {"numpy"}, GEMM_ATEN,
                        next_step="allocate C with torch.empty and launch the kernel on a grid of C's blocks")


# ----------------------------------------------------------------------------------------------------------------
# Oracles and judges
# ----------------------------------------------------------------------------------------------------------------

def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def _judge_add(got, want, case: Case) -> str:
    x = case.args[0]
    try:
        return judge_tensor(got, want, atol=torch.finfo(x.dtype).tiny, rtol=_eps(x.dtype))
    except Mismatch as bad:
        if bad.next_step is None:
            bad.next_step = ("look at the element it names: is its index covered by exactly one program "
                             "(pid * BLOCK + tl.arange(0, BLOCK)), and do the loads use each input's stride?")
        raise


def _softmax64(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


def _judge_softmax(got, want, case: Case) -> str:
    x = case.args[0]
    atol, rtol = (1e-7, 1e-5) if x.dtype == torch.float32 else (1e-6, _eps(x.dtype))
    try:
        return judge_tensor(got, want, atol=atol, rtol=rtol, what="the softmax")
    except Mismatch as bad:
        if bad.next_step is None:
            bad.next_step = ("each program owns one row: load it with other=-inf where the mask is off, convert to "
                             "float32, subtract the row's max, exponentiate, divide by the sum, store in the row's "
                             "place (both strides of x matter)")
            if x.dtype in HALF:
                bad.next_step += ("; in float16/bfloat16 the max, exp and sum must run in float32 (and the "
                                  "interpreter cannot compute on bfloat16 at all)")
        raise


def _matmul64(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return (A.double() @ B.double()).to(A.dtype)


def _judge_matmul(got, want, case: Case) -> str:
    A, B = case.args
    bound = float((A.double().abs() @ B.double().abs()).max()) if A.numel() and B.numel() else 0.0
    # float32 accumulation of K products (exact in float32 for half inputs), then one rounding to the output dtype
    atol = 4 * _eps(torch.float32) * bound + torch.finfo(A.dtype).tiny
    rtol = 4 * _eps(torch.float32) if A.dtype == torch.float32 else _eps(A.dtype)
    try:
        return judge_tensor(got, want, atol=atol, rtol=rtol, what="C")
    except Mismatch as bad:
        if bad.next_step is None:
            if A.dtype in HALF:
                bad.next_step = ("accumulate in float32: acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), "
                                 "acc += tl.dot(a, b), and convert to C's dtype only when storing")
            else:
                bad.next_step = ("check the masks of the last blocks (rows >= M, columns >= N, k >= K must load 0), "
                                 "and that every load uses both strides of its matrix")
        raise


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------

def check_add_kernel(add_kernel, add: Callable, cases: Sequence[Case] | None = None, *,
                     hidden: int = 0) -> CheckResult:
    cases = cases if cases is not None else add_cases([1, 100, 1000], [torch.float32, torch.float16])
    seen: list = []
    return run_check(f"{TASK}-add_kernel", _traced(add, seen), cases, expected=lambda x, y: (x.double() + y.double()).to(x.dtype),
                     judge=_judge_add, rules=[_launches(add_kernel, seen), _NO_TORCH_ADD],
                     proves="add_kernel adds two vectors block by block, masking the last block", hidden=hidden,
                     next_step="one program per BLOCK elements: offsets pid * BLOCK + tl.arange(0, BLOCK), a mask "
                               "offsets < n on every load and store")


def check_softmax_kernel(softmax_kernel, softmax: Callable, cases: Sequence[Case] | None = None, *,
                         hidden: int = 0) -> CheckResult:
    if cases is None:
        cases = (softmax_cases([(1, 1), (4, 50), (3, 130)], [torch.float32, torch.float16], seed=1)
                 + softmax_cases([(2, 64)], [torch.float32], scale=200.0, seed=2))
    seen: list = []
    return run_check(f"{TASK}-softmax_kernel", _traced(softmax, seen), cases, expected=_softmax64,
                     judge=_judge_softmax, rules=[_launches(softmax_kernel, seen), _NO_TORCH_SOFTMAX],
                     proves="softmax_kernel computes a stable softmax of each row in one program, in float32",
                     hidden=hidden,
                     next_step="softmax(x)ᵢ = exp(xᵢ − max x) / Σⱼ exp(xⱼ − max x), one row per program")


def check_matmul_kernel(matmul_kernel, matmul: Callable, cases: Sequence[Case] | None = None, *,
                        hidden: int = 0) -> CheckResult:
    if cases is None:
        cases = (matmul_cases([(16, 16, 16), (37, 45, 70)], [torch.float32, torch.float16], seed=3)
                 + matmul_cases([(20, 33, 40)], [torch.bfloat16], layout="transposed", seed=4))
    seen: list = []
    return run_check(f"{TASK}-matmul_kernel", _traced(matmul, seen), cases, expected=_matmul64,
                     judge=_judge_matmul, rules=[_launches(matmul_kernel, seen), _NO_TORCH_GEMM,
                                                 _dot_over_k(matmul_kernel, seen)],
                     proves="matmul_kernel computes C = A·B from tl.dot on blocks, looping over K, accumulating in "
                            "float32, with masks on the ragged edges", hidden=hidden,
                     next_step="C[i, j] = Σₖ A[i, k]·B[k, j]: a grid of (BLOCK_M, BLOCK_N) tiles of C, each summing "
                               "tl.dot over K's blocks")


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex08_triton-add_kernel": (
        "Lesson 09's vector add is the pattern: each program owns one block of indices, found from its program id "
        "and `tl.arange`, and the wrapper launches as many programs as there are blocks.",
        "Element i of x lives at `x_ptr + i * stride_x`, whatever its layout. A boolean mask comparing the indices "
        "with n keeps the last, partial block from reading or writing past the end.",
        "The wrapper only allocates the output (`torch.empty`, x's dtype) and launches: the grid is a tuple with "
        "`triton.cdiv(n, BLOCK)` programs, and the kernel's BLOCK is passed by keyword.",
    ),
    "ex08_triton-softmax_kernel": (
        "One program per row, and the whole row fits in one block: BLOCK_N is the next power of two at or above N, "
        "and the mask covers the padding.",
        "Padding must not change the result: load it as minus infinity, since exp of that is 0. Element (i, j) is "
        "at `x_ptr + i * stride_xm + j * stride_xn`.",
        "Convert the loaded row to float32 before any arithmetic, subtract its maximum so exp never overflows, and "
        "divide by the sum; the store converts back to the output's dtype.",
    ),
    "ex08_triton-matmul_kernel": (
        "Each program computes one (BLOCK_M, BLOCK_N) tile of C; the grid is two-dimensional, one axis for blocks "
        "of rows and one for blocks of columns.",
        "Inside, a Python `for` loop walks K in steps of BLOCK_K. Row offsets as a column (`[:, None]`) plus column "
        "offsets as a row (`[None, :]`) give a 2-D block of pointers; a mask of the same shape with `other=0.0` "
        "makes the ragged edges contribute nothing.",
        "Start from a float32 block of zeros and add `tl.dot` of the A block and the B block at every step; convert "
        "to C's element type only in the final `tl.store`, masked to rows < M and columns < N.",
    ),
}
