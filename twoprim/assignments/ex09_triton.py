"""Checks for assignment ex09_triton: three Triton kernels and their launch wrappers — a vector add, a row softmax
and a tiled GEMM with `tl.dot` over K's blocks — each writing into a given `out=` through its strides.

Every kernel runs in Triton's interpreter (Triton's `knobs.runtime.interpret`, the switch `TRITON_INTERPRET=1` sets,
turned on in this process only by `triton_tools.setup()` when this module is imported: importing it is the notebook's
setup) on CPU tensors, so the assignment is graded the same way on any machine; sizes stay small because the
interpreter runs each program in Python and NumPy. Every rule the exercise states has a visible case: sizes that
are multiples of the block and sizes that are not (masks), non-contiguous inputs and a non-contiguous `out` (the
strides of every input and output: `out_buffer`, NaN where out has no element, so a store through the wrong strides
shows), and float16/bfloat16 inputs whose sums must accumulate in float32.

Every launch a check sees is also compiled for two GPUs, sm_90 (H100/H200) and sm_80 (A100), by Triton's own compiler
on this CPU (`triton_compile`, cached by the kernel's source), with the specialisation Triton's launcher gives that
launch's arguments (aligned pointers, sizes divisible by 16, ints equal to 1): a kernel that would not compile for a
GPU fails with the compiler's message at the learner's line, and what the checks certify about the GEMM (tensor-core
instructions, `tl.dot` inside the loop over K, a float32 accumulator carried by that loop) and the softmax (float32
arithmetic) is read from the compiled TTIR and PTX, not inferred from the interpreter's numbers; the line printed
after ✔ is one launch's compile. A wrong result is diagnosed by what it looks like (`_diagnose_*`, `_stores`: only
the first or last block of K summed, the same first block every step, float16 accumulation, a matrix read through
its strides exchanged or ignored, out written through the wrong strides, a grid with an axis missing or exchanged,
wrong tiles on the ragged edge); when no cause fits, the message says so before the generic advice.

Visible checks run with the default cases below; the hidden checks in the solution notebook pass their own cases
(built with the same builders) and `hidden=0`. Oracles compute in float64 with torch.

Why this module is long: three kernels, each checked three ways (the interpreter's numbers, the rules of the
launch, the compiled IR), and each wrong result diagnosed by its cause; a diagnosis stays beside the judge that
calls it and the rule beside the evidence it reads, so that a message never drifts from what decides it. Compiling
itself, and reading TTIR and PTX, is `triton_compile`'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from twoprim.topics import triton_gemm as triton_tools

triton_tools.setup()  # before the learner's @triton.jit: the assignment always runs in the interpreter

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from twoprim.core import guards  # noqa: E402
from twoprim.core.cases import dtype_name, matrix, randn  # noqa: E402
from twoprim.core.checks import (  # noqa: E402
    GEMM_ATEN,
    GEMM_FUNCTIONS,
    Case,
    CheckResult,
    Mismatch,
    Rule,
    describe,
    eps,
    forbid,
    judge_tensor,
    run_check,
)
from twoprim.topics import triton_compiled as triton_compile  # noqa: E402
from twoprim.topics.gemm import matmul_cases  # noqa: E402  (lesson 02's (A, B) cases: seeded shapes, dtypes and layouts)

__all__ = [
    "add_cases",
    "softmax_cases",
    "matmul_cases",
    "strided_matmul_cases",
    "accumulation_cases",
    "out_buffer",
    "check_add_kernel",
    "check_softmax_kernel",
    "check_matmul_kernel",
    "guard_add",
    "guard_softmax",
    "guard_matmul",
]

TASK = "ex09_triton"
HALF = (torch.float16, torch.bfloat16)


# ----------------------------------------------------------------------------------------------------------------
# Guards (the first line of each wrapper)
# ----------------------------------------------------------------------------------------------------------------


def _on_cpu(fn: str, **tensors) -> None:
    for name, t in tensors.items():
        if t.device.type != triton_tools.device():
            raise ValueError(
                f"{fn}: {name} is on {t.device}, but kernels here run on {triton_tools.device()}; move it "
                f"with {name}.to('{triton_tools.device()}')."
            )


def _guard_out(fn: str, out, shape: tuple, dtype: torch.dtype) -> None:
    """out, when given: a floating tensor of the result's shape and dtype, any strides, where the kernels run."""
    if out is None:
        return
    guards.tensor(fn, "out", out)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(
            f"{fn}: out has shape {tuple(out.shape)}, but the result has shape {tuple(shape)}; pass an out "
            f"of that shape, or none (out=None: the function allocates it)."
        )
    if out.dtype != dtype:
        raise TypeError(
            f"{fn}: out is {out.dtype} but the inputs are {dtype}; the result keeps the inputs' dtype, so "
            f"pass an out of {dtype}."
        )
    _on_cpu(fn, out=out)


def guard_add(fn: str, x, y, out=None) -> None:
    """x and y: 1-D floating tensors of one length and dtype; out, when given, one more of them (any stride)."""
    guards.same_length(fn, x=x, y=y)
    _on_cpu(fn, x=x, y=y)
    _guard_out(fn, out, tuple(x.shape), x.dtype)


def guard_softmax(fn: str, x, out=None) -> None:
    """x: a 2-D floating tensor (M, N) with N >= 1; out, when given, (M, N) of x's dtype (any strides)."""
    guards.tensor(fn, "x", x, ndim=2)
    if x.shape[1] == 0:
        raise ValueError(f"{fn}: x has shape {tuple(x.shape)}; a softmax over rows needs at least one column.")
    _on_cpu(fn, x=x)
    _guard_out(fn, out, tuple(x.shape), x.dtype)


def guard_matmul(fn: str, A, B, out=None) -> None:
    """A (M, K) and B (K, N): 2-D floating CPU tensors of one dtype whose inner sizes agree; out, when given,
    (M, N) of their dtype (any strides)."""
    guards.matmul(fn, A, B)
    _on_cpu(fn, A=A, B=B)
    _guard_out(fn, out, (A.shape[0], B.shape[1]), A.dtype)


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run)
# ----------------------------------------------------------------------------------------------------------------

_LAYOUT_NOTE = {
    "contiguous": "",
    "transposed": ", column-major (transposed, non-contiguous)",
    "strided": ", every other column (stride 2, non-contiguous)",
}
_LAYOUT_WORDS = {
    "contiguous": "contiguous",
    "transposed": "column-major (transposed)",
    "strided": "every other column (stride 2)",
}
_OUT_NOTE = {
    "strided": "out every other {what} of a wider buffer (non-contiguous)",
    "transposed": "out column-major (transposed, non-contiguous)",
}
OUT_LAYOUTS = tuple(_OUT_NOTE)


def out_buffer(shape: Sequence[int], dtype: torch.dtype, layout: str) -> torch.Tensor:
    """An output of `shape` laid out as `layout` ("strided": every other element, or column, of a buffer twice as
    long or wide; "transposed": column-major), filled with NaN: memory no program has written."""
    if layout not in OUT_LAYOUTS:
        raise ValueError(f"out layout must be one of {', '.join(map(repr, OUT_LAYOUTS))}, got {layout!r}")
    if layout == "transposed" and len(shape) == 2:
        return torch.full((shape[1], shape[0]), float("nan"), dtype=dtype).T
    if len(shape) == 1:
        return torch.full((2 * shape[0],), float("nan"), dtype=dtype)[::2]
    return torch.full((shape[0], 2 * shape[1]), float("nan"), dtype=dtype)[:, ::2]


def _with_out(case: Case, shape: Sequence[int], dtype: torch.dtype, out: str | None) -> Case:
    if out is None:
        return case
    what = "element" if len(shape) == 1 else "column"
    return Case(
        f"{case.label}; {_OUT_NOTE[out].format(what=what)}",
        case.args,
        {**case.kwargs, "out": out_buffer(shape, dtype, out)},
    )


def add_cases(
    lengths: Sequence[int],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    strided: bool = False,
    out: str | None = None,
    seed: int = 0,
) -> list[Case]:
    """(x, y) of every length × dtype; `strided`: x every other element of a buffer twice as long (stride 2) and y
    every third (stride 3); `out` ("strided"): the result written into every other element of a NaN buffer."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for n in lengths:
            if strided:
                x, y = (torch.randn(k * n, generator=gen, dtype=torch.float64).to(dtype)[::k] for k in (2, 3))
            else:
                x, y = (randn((n,), dtype, gen) for _ in range(2))
            note = ", x every other element and y every third (strides 2 and 3, non-contiguous)" if strided else ""
            cases.append(_with_out(Case(f"length {n}, {dtype_name(dtype)}{note}", (x, y)), (n,), dtype, out))
    return cases


def softmax_cases(
    shapes: Sequence[tuple[int, int]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    layout: str = "contiguous",
    scale: float = 1.0,
    out: str | None = None,
    seed: int = 0,
) -> list[Case]:
    """x (M, N) for every shape × dtype; `scale` multiplies the values (large ones overflow exp without the max);
    `out` ("strided", "transposed"): the result written into a non-contiguous NaN buffer."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for m, n in shapes:
            x = matrix(m, n, dtype, gen, layout, scale)
            note = f", values × {scale:g} (exp overflows without subtracting the row max)" if scale > 10 else ""
            cases.append(
                _with_out(
                    Case(f"x ({m}, {n}), {dtype_name(dtype)}{_LAYOUT_NOTE[layout]}{note}", (x,)), (m, n), dtype, out
                )
            )
    return cases


def strided_matmul_cases(
    shapes: Sequence[tuple[int, int, int]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    a: str = "transposed",
    b: str = "strided",
    out: str = "strided",
    seed: int = 0,
) -> list[Case]:
    """(A, B) with A laid out as `a` and B as `b` (lesson 02's layouts), and C written into `out`: every one of
    the six strides differs from a contiguous matrix's."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for M, N, K in shapes:
            A, B = matrix(M, K, dtype, gen, a), matrix(K, N, dtype, gen, b)
            label = f"M={M}, N={N}, K={K}, {dtype_name(dtype)}; A {_LAYOUT_WORDS[a]}, B {_LAYOUT_WORDS[b]}"
            cases.append(_with_out(Case(label, (A, B)), (M, N), dtype, out))
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
        cases.append(
            Case(
                f"M={M}, N={N}, K={K}, {dtype_name(dtype)}: one term 64 and {K - 1} terms near 0.01 per "
                f"output (float32 accumulation needed)",
                (A.to(dtype), B.to(dtype)),
            )
        )
    return cases


# ----------------------------------------------------------------------------------------------------------------
# Rules: the kernel computes the result, the wrapper only launches it
# ----------------------------------------------------------------------------------------------------------------


def _traced(fn: Callable, seen: list) -> Callable:
    """`fn` with the Triton kernels each call launches recorded into seen[0] and what it returned into seen[1]. Given
    `out=`, the call's value for the judge is out's whole buffer (`memory_of`): out's elements and the gaps between
    them, which no program may write; whether `fn` returned out itself is a rule (`_returns_out`)."""
    if not callable(fn):
        return fn

    def call(*args, **kwargs):
        with triton_tools.launches() as launched:
            seen[:] = [launched, None]
            result = fn(*args, **kwargs)
        seen[1] = result
        out = kwargs.get("out")
        return memory_of(out) if isinstance(out, torch.Tensor) else result

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "your function")
    return call


def memory_of(out: torch.Tensor) -> torch.Tensor:
    """A copy of the whole buffer `out` is a view of, as a 1-D tensor of out's dtype: out's element (i, j) is at
    i·out.stride(0) + j·out.stride(1) + out.storage_offset()."""
    storage = out.untyped_storage()
    return torch.empty(0, dtype=out.dtype).set_(storage, 0, (storage.nbytes() // out.element_size(),), (1,)).clone()


def _returns_out(seen: list) -> Rule:
    """Given out=, the wrapper writes into out and returns it (as torch's out= arguments do)."""

    def test(log, case) -> str | None:
        out = case.kwargs.get("out")
        if not isinstance(out, torch.Tensor):
            return None
        got = seen[1] if len(seen) > 1 else None
        if (
            isinstance(got, torch.Tensor)
            and got.data_ptr() == out.data_ptr()
            and got.shape == out.shape
            and got.stride() == out.stride()
        ):
            return None
        written = not bool(torch.isnan(out).all())
        what = describe(got) if isinstance(got, torch.Tensor) else f"{type(got).__name__} {got!r}"[:80]
        if not written:
            return (
                f"given out (strides {out.stride()}), it returned {what} and left out unwritten: the kernel "
                f"wrote somewhere else"
            )
        return f"given out, it wrote into out but returned {what}, not out itself"

    return Rule(
        "given out=, the wrapper writes the result into out through out's strides and returns out",
        test,
        "when out is given, launch the kernel on out (its pointer and its strides) and return out; allocate "
        "a new contiguous tensor only when out is None",
    )


def _launches(kernel, seen: list) -> Rule:
    return triton_tools.launched_rule(
        kernel,
        seen,
        computes="the result",
        next_step="launch the kernel with {name}[grid](...) and return the tensor it wrote",
    )


LOOP_K = 64  # from this K on, BLOCK_K ≥ K (the whole of K in one tl.dot, a loop that runs once) breaks the rule


def _dot_over_k(kernel, seen: list) -> Rule:
    """When run (the interpreter sees every call), a loop that takes more than one block of K once K > LOOP_K: a
    BLOCK_K as large as K compiles to tl.dot inside a loop that runs once. (The loop itself is read from the compiled
    TTIR: `_compiled`.)"""
    name = getattr(getattr(kernel, "fn", kernel), "__name__", "the kernel")

    def test(log, case) -> str | None:
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
                return (
                    f"for K = {K} each program called tl.dot once, on a block {once[0]} wide along K: with "
                    f"BLOCK_K ≥ K the loop over K runs once, one block as wide as K, not a walk over K's blocks"
                )
        return None

    return Rule(
        "the GEMM kernel multiplies blocks with tl.dot inside a loop over K",
        test,
        "loop over K in steps of BLOCK_K; in each step load a (BLOCK_M, BLOCK_K) block of A and a "
        "(BLOCK_K, BLOCK_N) block of B and add tl.dot of the two to a float32 accumulator; keep BLOCK_K "
        "fixed (32), whatever K is",
    )


# ----------------------------------------------------------------------------------------------------------------
# Compiled for a GPU: what the TTIR and PTX say (`triton_compile`)
# ----------------------------------------------------------------------------------------------------------------

TARGETS = tuple(triton_compile.TARGETS)  # ("sm_90", "sm_80")


def _source_line(kernel, line: int | None) -> str:
    """`line` of the file or notebook cell that defines `kernel`, as the learner wrote it."""
    import linecache

    fn = getattr(kernel, "fn", kernel)
    filename = getattr(getattr(fn, "__code__", None), "co_filename", "")
    text = linecache.getline(filename, line).strip() if line and filename else ""
    return f"line {line} of the cell that defines it: `{text}`" if text else (f"line {line}" if line else "")


def _compile_failure(kernel, c) -> str:
    """The compiler's own message, and the learner's line it points at."""
    where = _source_line(kernel, c.error_line)
    return (
        f"it does not compile for {c.target} (Triton's compiler, the one a GPU would run; the interpreter is more "
        f"lenient): {c.error}" + (f"\n            at {where}" if where else "")
    )


def _gemm_problem(kernel, c) -> tuple[str, str] | None:
    """What the compiled GEMM does that the exercise rules out, and the next step; None when it holds."""
    dots = c.dots()
    counts = c.tensor_core()
    if not any(counts.values()):
        said = f"compiled for {c.target}, its PTX has no tensor-core instruction (0 wgmma.mma_async, 0 mma.sync)"
        if not dots:
            said += ": its TTIR has no tt.dot, so every product runs on the ordinary FP32 units"
        else:
            said += (
                f": Triton turned the products at {_source_line(kernel, dots[0].line) or 'one line'} into a "
                f"tt.dot with inputPrecision = {dots[0].precision}, which runs as FP32 multiply-adds"
            )
        return said, (
            "multiply the blocks with tl.dot (its default precision): that is what the compiler maps onto the "
            "matrix units (mma.sync, wgmma)"
        )
    looped = [d for d in dots if d.in_loop]
    if not looped:
        where = _source_line(kernel, dots[0].line) if dots else ""
        return (
            f"compiled for {c.target}, its TTIR has tt.dot outside any scf.for{' (' + where + ')' if where else ''}:"
            f" one block of K, not a loop over K's blocks",
            "loop over K in steps of BLOCK_K and call tl.dot once per step",
        )
    carried = [t for t in c.loop_carried() if t.startswith("tensor<") and "ptr" not in t]
    tile = [t for t in carried if re.match(r"tensor<" + re.escape(looped[0].shape) + r"x", t)]
    half = [t for t in tile if triton_compile._element(t) != "f32"]
    if half:
        kind = triton_compile._element(half[0])
        return (
            f"compiled for {c.target}, the loop over K carries its accumulator as {half[0]} (TTIR: scf.for ... -> "
            f"{half[0]}): each block's float32 product is rounded to {kind} before the next block is added",
            "carry the sum from one block of K to the next in float32, and convert to C's dtype once, when storing",
        )
    if any(d.acc != "f32" for d in looped):
        bad = next(d for d in looped if d.acc != "f32")
        return (
            f"compiled for {c.target}, tt.dot accumulates in {bad.acc} ({bad.a}·{bad.b} -> {bad.acc}, "
            f"{_source_line(kernel, bad.line)})",
            "let tl.dot accumulate in float32 (its default)",
        )
    return None


def _softmax_problem(kernel, c) -> tuple[str, str] | None:
    """16-bit inputs: arithmetic on 16-bit tensors in the compiled softmax."""
    if c.signature.get(next(iter(c.signature), ""), "") not in ("*fp16", "*bf16"):
        return None
    half = [(op, t, line) for op, t, line in c.arithmetic() if t in ("f16", "bf16")]
    if not half:
        rounded = c.rounded_midway()
        if rounded:
            t, line = rounded[0]
            return (
                f"compiled for {c.target}, the kernel rounds a value to {t} (arith.truncf, "
                f"{_source_line(kernel, line)}) and goes on computing with it: every rounding to 16 bits before "
                f"the store loses precision",
                "keep every intermediate in float32; only the store converts",
            )
        return None
    op, t, line = half[0]
    return (
        f"compiled for {c.target}, the kernel computes {op} on {t} tensors ({_source_line(kernel, line)}): "
        f"{len(half)} arithmetic op(s) in 16 bits, each rounding to {t}",
        "convert the loaded row to float32 before any arithmetic; the store converts back",
    )


class _Compiled:
    """A rule (as `checks.Rule`: name, test, next_step): every launch of `kernel` in a case, compiled for sm_90 and
    sm_80, compiles, and for `kind` "matmul" / "softmax" the compiled code does what the exercise asks. Its next step
    depends on what it found. The first launch of each pointer type goes into `evidence`, with its case: the line
    the check prints after ✔ is that launch, compiled as Triton's launcher specialises it."""

    def __init__(self, kernel, seen: list, kind: str, evidence: dict):
        self.kernel, self.seen, self.evidence = kernel, seen, evidence
        self.judge = {"matmul": _gemm_problem, "softmax": _softmax_problem}.get(kind)
        name = getattr(getattr(kernel, "fn", kernel), "__name__", "the kernel")
        self.name = f"{name} compiles for a GPU (sm_90, sm_80) and the compiled code does what the exercise asks"
        self.next_step = ""

    def test(self, log, case) -> str | None:
        launched = (self.seen[0] if self.seen else triton_tools.Launches()).of(self.kernel)
        for launch in launched[:2]:
            if "*fp64" in launch.signature.values():
                continue  # the exercise's GPU contract is float32 and 16-bit inputs (a float32 accumulator)
            pointers = {k: v for k, v in launch.signature.items() if v.startswith("*")}
            self.evidence.setdefault(next(iter(pointers.values()), "?"), (launch, case.label))
            # verified once per kernel source, pointer types and options, on the first launch that has them, with
            # that launch's own specialisation (alignment, sizes divisible by 16, ints equal to 1: `Launch.attrs`):
            # another BLOCK or size, or another alignment, is the same code with the same tl.dot, loop and types
            key = (
                triton_compile._quick_key(launch.fn, pointers, {}, "", 0, 0),
                tuple(sorted(launch.options.items())),
            )  # the kernel's code and its jit helpers' code
            if key[0] is not None and key in _VERIFIED:
                continue
            for target in TARGETS:
                c = launch.compiled(target)
                if c.error:
                    self.next_step = (
                        "fix what the compiler names at that line: the interpreter runs code that a "
                        "GPU's compiler refuses (lesson 09, 'What the interpreter does not model')"
                    )
                    return _compile_failure(self.kernel, c)
                found = self.judge(self.kernel, c) if self.judge else None
                if found:
                    self.next_step = found[1]
                    return found[0]
            if key[0] is not None:
                _VERIFIED.add(key)
        return None


_VERIFIED: set = set()  # (kernel code, pointer types, options) of kernels whose compiled code passed


def _hardware_line(name: str, evidence: dict, kind: str) -> str:
    """What the compiled kernel is on the hardware, for the first launch of the check with 16-bit (else float32)
    pointers, compiled as Triton's launcher specialises it: per target, tensor-core instructions (GEMM),
    asynchronous copies, registers per thread and spills, shared memory per program and occupancy on the GPU the
    target stands for."""
    if not evidence:
        return ""
    pointer = next((p for p in ("*fp16", "*bf16", "*fp32") if p in evidence), next(iter(evidence)))
    launch, label = evidence[pointer]
    compiled = {target: launch.compiled(target) for target in TARGETS}
    lines = [
        f"  compiled by Triton's compiler on this CPU (no GPU needed) as Triton's launcher specialises the "
        f"launch of case '{label}': {compiled[TARGETS[0]].specialisation()}"
    ]
    for target, c in compiled.items():
        text = f"    {c.summary()}"
        if kind == "matmul" and c.dots():
            d = c.dots()[0]
            precision = f", inputPrecision = {d.precision}" if d.a == "f32" else ""
            text += (
                f"\n      TTIR: tt.dot {d.a}·{d.b} -> {d.acc} inside scf.for over K{precision}; TTGIR: "
                f"{c.mma_layout() or 'no matrix-unit layout'}"
            )
            counts = c.tensor_core()
            if target == "sm_90" and not counts["wgmma.mma_async"]:
                text += (
                    f"; no wgmma: a wgmma instruction spans a warpgroup of 4 warps and 64 rows, a "
                    f"{d.shape.split('x')[0]}-row tile with {c.num_warps} warps gives it less"
                )
        lines.append(text)
    return "\n".join(lines)


_NO_TORCH_ADD = forbid(
    "the wrapper does no arithmetic: the kernel adds",
    {"add", "__add__", "__radd__", "add_", "__iadd__", "sum", "numpy"},
    {"add", "add_", "sum"},
    next_step="allocate the output with torch.empty and let the kernel write x + y into it",
)
_NO_TORCH_SOFTMAX = forbid(
    "the wrapper does no arithmetic: the kernel computes the softmax",
    {
        "softmax",
        "log_softmax",
        "exp",
        "exp_",
        "amax",
        "max",
        "logsumexp",
        "sum",
        "div",
        "__truediv__",
        "sub",
        "__sub__",
        "numpy",
    },
    {"_softmax", "softmax", "_log_softmax", "exp", "amax", "max", "logsumexp", "sum", "div", "sub"},
    next_step="allocate the output with torch.empty and let one program per row load, exponentiate and normalise",
)
_NO_TORCH_GEMM = forbid(
    "no torch matmul in the wrapper: the kernel's tl.dot does every product",
    GEMM_FUNCTIONS | {"numpy"},
    GEMM_ATEN,
    next_step="allocate C with torch.empty and launch the kernel on a grid of C's blocks",
)


# ----------------------------------------------------------------------------------------------------------------
# Oracles and judges
# ----------------------------------------------------------------------------------------------------------------

_UNRECOGNISED = "none of the causes this check recognises fits the wrong values ({checked}); the usual suspects:"


def _with_cause(bad: Mismatch, found: tuple[str, str] | None, generic: str, checked: str | None) -> Mismatch:
    """The judge's Mismatch with the cause read from the wrong output (a `cause:` line and its own next step). When
    the values were read and no cause fits (`checked`: what was looked for), the message says so and gives the
    generic list; when they could not be read (a wrong type, shape or dtype), the judge's own next step stays."""
    if found is not None:
        return Mismatch(f"{bad.detail}\n  cause:    {found[0]}", next_step=found[1], expected=bad.expected)
    if checked is None:
        if bad.next_step is None:
            bad.next_step = generic
        return bad
    return Mismatch(
        f"{bad.detail}\n  cause:    {_UNRECOGNISED.format(checked=checked)}", next_step=generic, expected=bad.expected
    )


def _close(x: torch.Tensor, y: torch.Tensor, tol: float) -> bool:
    return x.shape == y.shape and bool(((x - y).abs() <= tol).all())  # NaN is never close


def _diagnosable(got: Any, shape: tuple, dtype: torch.dtype) -> bool:
    return isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(shape) and got.dtype == dtype


def _read_as(t: torch.Tensor, strides: Sequence[int]) -> torch.Tensor | None:
    """t's memory read through `strides` instead of its own (what a kernel that uses the wrong strides loads), or
    None when that read leaves t's buffer."""
    strides = tuple(int(s) for s in strides)
    if strides == tuple(t.stride()) or any(s < 0 for s in strides):
        return None
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, strides, strict=False)) if t.numel() else 0
    if t.untyped_storage().nbytes() < (last + 1) * t.element_size():
        return None
    return torch.as_strided(t, t.shape, strides, t.storage_offset())


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(torch.tensor(list(shape[i + 1 :]), dtype=torch.int64).prod()) for i in range(len(shape)))


def _as_contiguous(t: torch.Tensor) -> torch.Tensor | None:
    """t's storage read as if t were contiguous (the values a kernel that ignores t's strides loads), or None."""
    return _read_as(t, _contiguous_strides(t.shape))


def _exchanged(t: torch.Tensor) -> torch.Tensor | None:
    """A 2-D t read with its two strides exchanged (the row stride used for columns and the reverse), or None."""
    return _read_as(t, tuple(reversed(t.stride()))) if t.dim() == 2 and t.shape[0] > 1 and t.shape[1] > 1 else None


BLOCKS = (16, 32, 64, 128)  # the block sizes a diagnosis tries


# ---- out=: the result written into a given, non-contiguous buffer --------------------------------------------


def _out_values(memory: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out's elements, read from the copy of its whole buffer (`memory_of`)."""
    return torch.as_strided(memory, out.shape, out.stride(), out.storage_offset())


def _stores(memory: torch.Tensor, want: torch.Tensor, case: Case, tol: float) -> tuple[str, str] | None:
    """Where the result went instead of out's elements, read from out's whole buffer: written as if out were
    contiguous, through its strides exchanged, or through an input's strides."""
    out = case.kwargs["out"]
    g = memory.double()
    inputs = [
        (name, t)
        for name, t in zip(
            ("x", "y") if len(case.args) == 2 and want.dim() == 1 else (("A", "B") if len(case.args) == 2 else ("x",)),
            case.args,
            strict=False,
        )
        if isinstance(t, torch.Tensor) and t.shape == out.shape
    ]
    tries = [(_contiguous_strides(out.shape), "as if out were contiguous (from out's first element on)")]
    if out.dim() == 2:
        tries += [
            ((out.stride(0), 1), f"each row as if contiguous: the store ignores out's column stride ({out.stride(1)})"),
            (
                (out.shape[1], out.stride(1)),
                f"with the rows {out.shape[1]} apart: the store ignores out's row stride ({out.stride(0)})",
            ),
            (tuple(reversed(out.stride())), "through out's two strides exchanged (rows where columns go)"),
        ]
    tries += [(tuple(t.stride()), f"through {name}'s strides {tuple(t.stride())}, not out's") for name, t in inputs]
    for strides, how in tries:
        if tuple(strides) == tuple(out.stride()):
            continue
        last = out.storage_offset() + sum((n - 1) * s for n, s in zip(out.shape, strides, strict=False))
        if last >= memory.numel():
            continue
        if _close(torch.as_strided(g, out.shape, strides, out.storage_offset()), want.double(), tol):
            return (
                f"out's buffer holds the right values, written {how}; out's strides are {tuple(out.stride())}",
                "store element (i, j) of the result at out_ptr + i * (out's row stride) + j * (out's column "
                "stride), with out's own strides passed to the kernel"
                if out.dim() == 2
                else "store element i at out_ptr + i * stride_out, with out.stride(0) passed as stride_out",
            )
    return None


def _judge_into(memory, want: torch.Tensor, case: Case, judge: Callable, tol: float) -> str:
    """A case with out=: `memory` is out's whole buffer (NaN where given). out's elements are judged by `judge` (with
    its causes), after a look at where else the values went; the buffer's other elements must stay NaN."""
    out = case.kwargs["out"]
    if not _diagnosable(memory, (memory.numel(),), want.dtype) or memory.dim() != 1:
        return judge(memory, want, case)  # not what the check's wrapper records: the judge says what came back
    values = _out_values(memory, out)
    if not _close(values.double(), want.double(), tol):
        found = _stores(memory, want, case, tol)
        if found:
            try:
                judge_tensor(values, want, atol=tol, rtol=0.0, what="out")
            except Mismatch as bad:
                raise _with_cause(bad, found, "", None) from None
    summary = judge(values, want, case)
    inside = torch.zeros(memory.numel(), dtype=torch.bool)
    inside[_out_values(torch.arange(memory.numel()), out).reshape(-1)] = True
    touched = (~inside & ~torch.isnan(memory)).nonzero().flatten()
    if len(touched):
        raise Mismatch(
            f"out's {out.numel()} elements are right, but {len(touched)} element(s) of the buffer out is a "
            f"view of, outside out, were written too (the first at offset {int(touched[0])} of the "
            f"buffer; out's strides are {tuple(out.stride())})",
            next_step="store only at out's own elements: offsets times out's strides, masked to the result's size",
        )
    return summary


# ---- add -------------------------------------------------------------------------------------------------------

_ADD_CHECKED = "each input's stride, the last partial block, each program's own block"


def _diagnose_add(got: torch.Tensor, case: Case) -> tuple[str, str] | None:
    x, y = case.args
    g, want = got.double(), x.double() + y.double()
    tol = 2 * eps(x.dtype) * float(want.abs().max() or 1)
    reads = {
        "x": {
            "its own stride": x,
            "stride 1 (as if contiguous)": _read_as(x, (1,)),
            f"y's stride {y.stride(0)}": _read_as(x, y.stride()),
        },
        "y": {
            "its own stride": y,
            "stride 1 (as if contiguous)": _read_as(y, (1,)),
            f"x's stride {x.stride(0)}": _read_as(y, x.stride()),
        },
    }
    for how_x, xs in reads["x"].items():
        for how_y, ys in reads["y"].items():
            if xs is None or ys is None or (xs is x and ys is y) or not _close(g, xs.double() + ys.double(), tol):
                continue
            wrong = [
                f"x through {how_x} instead of its stride {x.stride(0)}" if xs is not x else "",
                f"y through {how_y} instead of its stride {y.stride(0)}" if ys is not y else "",
            ]
            return (
                f"out equals the sum with {' and '.join(w for w in wrong if w)}: each input must be read through "
                f"its own stride",
                "load element i of x at x_ptr + i * stride_x and of y at y_ptr + i * "
                "stride_y, with x.stride(0) and y.stride(0) passed in that order",
            )
    bad = (~((g - want).abs() <= tol)).nonzero().flatten()
    n = x.shape[0]
    if len(bad) == 0:
        return None
    first = int(bad[0])
    for b in reversed(BLOCKS):
        if n > b and n % b and first >= (n // b) * b:
            return (
                f"only the last, partial block is wrong (elements {first}..{n - 1} of {n}, past the last multiple "
                f"of {b}): its lanes past n are not handled",
                "mask the last block's loads and stores with offsets "
                "< n, and launch triton.cdiv(n, BLOCK) programs (n // BLOCK drops the partial block)",
            )
    for b in BLOCKS:
        if first == b and n > b:
            return (
                f"the first {b} elements are right and {len(bad)} after them wrong: the programs after the first do "
                f"not cover their own block",
                "each program's offsets start at its program id times BLOCK",
            )
    return None


def _judge_add_values(got, want, case: Case) -> str:
    x = case.args[0]
    try:
        return judge_tensor(got, want, atol=torch.finfo(x.dtype).tiny, rtol=eps(x.dtype))
    except Mismatch as bad:
        ok = _diagnosable(got, want.shape, x.dtype)
        raise _with_cause(
            bad,
            _diagnose_add(got, case) if ok else None,
            "is every index covered by exactly one program (pid * BLOCK + tl.arange(0, BLOCK)), "
            "masked at n, and does every load and the store use its own tensor's stride?",
            _ADD_CHECKED if ok else None,
        ) from None


def _judge_add(got, want, case: Case) -> str:
    if "out" in case.kwargs:
        x = case.args[0]
        return _judge_into(got, want, case, _judge_add_values, 2 * eps(x.dtype) * float(want.double().abs().max() or 1))
    return _judge_add_values(got, want, case)


# ---- softmax ---------------------------------------------------------------------------------------------------


def _softmax64(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


def _rows(rows: list[int]) -> str:
    return ", ".join(map(str, rows[:6])) + (", ..." if len(rows) > 6 else "")


_SOFTMAX_CHECKED = "x's strides, 16-bit arithmetic, rows no program wrote, the padding lanes, the row's maximum"


def _diagnose_softmax(got: torch.Tensor, case: Case) -> tuple[str, str] | None:
    x = case.args[0]
    M, N = x.shape
    g, want = got.double(), torch.softmax(x.double(), -1)
    tol = 4 * eps(x.dtype) + 1e-6
    for read, how in (
        (_as_contiguous(x), "as if x were contiguous"),
        (_exchanged(x), "with x's two strides exchanged"),
    ):
        if read is not None and _close(g, torch.softmax(read.double(), -1), tol):
            return (
                f"out equals the softmax of x's memory read {how}: the loads do not use x's strides "
                f"{x.stride()} as they are",
                "load element (i, j) at x_ptr + i * stride_xm + j * stride_xn, with "
                "x.stride(0) and x.stride(1) passed in that order",
            )
    if x.dtype in HALF:
        xs = x.to(x.dtype)
        shifted = xs - xs.max(-1, keepdim=True).values
        in_half = (
            shifted.float().exp().to(x.dtype)
            / shifted.float().exp().to(x.dtype).float().sum(-1, keepdim=True).to(x.dtype)
        ).double()
        if _close(g, in_half, eps(x.dtype)) and not _close(g, want, tol):
            return (
                f"out matches a softmax whose exp and sum were rounded to {dtype_name(x.dtype)}: the arithmetic "
                f"ran in {dtype_name(x.dtype)}",
                "convert the loaded row to float32 before any arithmetic",
            )
    bad_rows = [i for i in range(M) if not _close(g[i], want[i], tol)]
    sums = g.sum(-1)
    if bad_rows and len(bad_rows) < M and all(_close(g[i], want[i], tol) for i in range(M) if i not in bad_rows):
        return (
            f"rows {_rows(bad_rows)} (of {M}) are wrong, the others right",
            "one program per row: the grid is "
            "(M,) and program i reads and writes row i only, through the row strides of x and of out",
        )
    off = [i for i in bad_rows if abs(float(sums[i]) - 1) > 1e-2]
    if off:
        pad = _next_pow2(N) - N
        extra = (
            f"; the row has {N} values in a block of {N + pad}: {pad} padding lanes that must add nothing"
            if pad
            else ""
        )
        return (
            f"rows {_rows(off)} sum to {float(sums[off[0]]):.4g} instead of 1{extra}",
            "the padding lanes must load as -inf (exp gives 0) and the sum must be over the row's own values",
        )
    return None


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _judge_softmax_values(got, want, case: Case) -> str:
    x = case.args[0]
    atol, rtol = (1e-7, 1e-5) if x.dtype == torch.float32 else (1e-6, eps(x.dtype))
    generic = (
        "each program owns one row: load it with other=-inf where the mask is off, convert to float32, "
        "subtract the row's max, exponentiate, divide by the sum, store in the row's place (both strides of x "
        "and both of out matter)"
    )
    if x.dtype in HALF:
        generic += (
            "; in float16/bfloat16 the max, exp and sum must run in float32 (and the interpreter cannot "
            "compute on bfloat16 at all)"
        )
    try:
        return judge_tensor(got, want, atol=atol, rtol=rtol, what="the softmax")
    except Mismatch as bad:
        ok = _diagnosable(got, x.shape, x.dtype)
        raise _with_cause(
            bad, _diagnose_softmax(got, case) if ok else None, generic, _SOFTMAX_CHECKED if ok else None
        ) from None


def _judge_softmax(got, want, case: Case) -> str:
    if "out" in case.kwargs:
        return _judge_into(got, want, case, _judge_softmax_values, 4 * eps(case.args[0].dtype) + 1e-6)
    return _judge_softmax_values(got, want, case)


# ---- matmul ----------------------------------------------------------------------------------------------------


def _matmul64(A: torch.Tensor, B: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return (A.double() @ B.double()).to(A.dtype)


_MATMUL_CHECKED = (
    "the blocks of K summed, the accumulator's precision, each matrix's strides, the grid's axes, the "
    "ragged edges, which tiles are wrong"
)


def _span(lo: int, hi: int) -> str:
    return f"{lo}" if hi - lo == 1 else f"{lo}–{hi - 1}"


def _diagnose_matmul(got: torch.Tensor, case: Case) -> tuple[str, str] | None:
    """Which way the GEMM went wrong, read from C: the loop over K (only its first or last block summed, the same
    first block every step), the accumulator rounded to 16 bits after every block, a matrix read through the wrong
    strides, a grid with an axis missing or exchanged, wrong tiles on the ragged edge or elsewhere."""
    A, B = case.args
    g, A64, B64 = got.double(), A.double(), B.double()
    exact = A64 @ B64
    bound = float((A64.abs() @ B64.abs()).max()) if A.numel() and B.numel() else 0.0
    tol = 4 * eps(torch.float32) * bound + (eps(A.dtype) * float(exact.abs().max()) if A.dtype in HALF else 0.0)
    tol = max(tol, 1e-30)
    if _close(g, exact, tol):
        return None
    return (
        _k_loop_cause(g, A64, B64, tol)
        or _half_sum_cause(g, A, B, bound, tol)
        or _stride_cause(g, A, B, exact, tol)
        or _grid_cause(~((g - exact).abs() <= tol))
    )


def _k_loop_cause(g, A64, B64, tol: float) -> tuple[str, str] | None:
    """C as the loop over K went wrong: only its first block, the same first block every step, only its last."""
    K = A64.shape[1]
    for bk in BLOCKS:
        if bk >= K:
            continue
        steps = -(-K // bk)
        first = A64[:, :bk] @ B64[:bk]
        if _close(g, first, tol):
            return (
                f"C equals the product of the first {bk} columns of A with the first {bk} rows of B: only the "
                f"first block of K contributes (K = {K}: {steps} blocks of {bk})",
                "every step of the loop over K must add its block's product to the accumulator, which lives "
                "outside the loop",
            )
        repeated = sum(
            (A64[:, : min(bk, K - k0)] @ B64[: min(bk, K - k0)] for k0 in range(0, K, bk)), torch.zeros_like(first)
        )
        if _close(g, steps * first, tol) or _close(g, repeated, tol):
            return (
                f"C equals the product of the first block of K (columns 0–{bk - 1} of A, rows 0–{bk - 1} of B) "
                f"added {steps} times, once per step of the loop over K (K = {K}): every step loads the same "
                f"first block; the offsets along K never advance with the loop",
                "in both loads, offset K by the loop's position: (k0 + tl.arange(0, BLOCK_K)) times stride_ak "
                "for A and times stride_bk for B (or move both blocks of pointers BLOCK_K along K after every "
                "step)",
            )
        last = ((K - 1) // bk) * bk
        if last > 0 and _close(g, A64[:, last:] @ B64[last:], tol):
            return (
                f"C equals the product of the last block of K only (columns {last}..{K - 1} of A): each step "
                f"replaces the accumulator instead of adding to it",
                "add each block's tl.dot to the accumulator",
            )
    return None


def _half_sum_cause(g, A, B, bound: float, tol: float) -> tuple[str, str] | None:
    """C as a sum rounded to float16/bfloat16 after every block of K."""
    if A.dtype not in HALF:
        return None
    (M, K), N = A.shape, B.shape[1]
    A64, B64 = A.double(), B.double()
    for bk in BLOCKS:
        if bk >= K:
            continue
        acc = torch.zeros(M, N, dtype=torch.float64)
        for k0 in range(0, K, bk):
            acc = (acc + (A64[:, k0 : k0 + bk] @ B64[k0 : k0 + bk]).float().double()).to(A.dtype).double()
        if _close(g, acc, eps(A.dtype) * bound):
            err = float((g - A64 @ B64).abs().max())
            return (
                f"C matches a sum rounded to {dtype_name(A.dtype)} after every block of {bk}: error "
                f"{err:.3g} where float32 accumulation errs by at most {tol:.2g}; it grows with K "
                f"({-(-K // bk)} roundings here)",
                "accumulate in float32 across all of K's blocks and round to C's dtype once, at the store",
            )
    return None


def _stride_cause(g, A, B, exact, tol: float) -> tuple[str, str] | None:
    """C as A or B read through the wrong strides (as if contiguous, or exchanged), or stored transposed."""
    (M, _), N = A.shape, B.shape[1]
    A64, B64 = A.double(), B.double()
    for name, t, rows, cols in (("A", A, "stride_am", "stride_ak"), ("B", B, "stride_bk", "stride_bn")):
        for read, how in (
            (_as_contiguous(t), f"read as if it were contiguous: the loads ignore {name}'s strides {t.stride()}"),
            (
                _exchanged(t),
                f"read through its two strides exchanged: {name}'s rows stepped by "
                f"{cols} and its columns by {rows} ({name}.stride() is {t.stride()})",
            ),
        ):
            if read is None:
                continue
            product = (read.double() @ B64) if name == "A" else (A64 @ read.double())
            if _close(g, product, tol):
                return (
                    f"C equals the product with {name} {how}",
                    f"load element (i, j) of {name} at {name.lower()}_ptr + i * {rows} + j * {cols}, with "
                    f"{name}.stride(0) passed as {rows} and {name}.stride(1) as {cols}",
                )
    if M == N and M > 1 and _close(g, exact.T, tol):
        return (
            "C holds the transpose of A·B: the store exchanged rows and columns (C's two strides, or the "
            "roles of the row and column offsets, swapped)",
            "store tile element (i, j) at c_ptr + i * stride_cm + j * stride_cn, i along M and j along N",
        )
    return None


def _grid_cause(bad: torch.Tensor) -> tuple[str, str] | None:
    """C's wrong elements (`bad`, NaN counted wrong) as a grid went wrong: its axes exchanged, an axis with one
    program, tiles on the ragged edge left out, or some tiles wrong and the others right."""
    M, N = bad.shape

    def tiles_of(b: int) -> tuple[int, int, list]:
        tm, tn = -(-M // b), -(-N // b)
        return (
            tm,
            tn,
            [[bool(bad[i * b : (i + 1) * b, j * b : (j + 1) * b].any()) for j in range(tn)] for i in range(tm)],
        )

    for b in BLOCKS:  # the smallest tile that explains it
        tm, tn, tiles = tiles_of(b)
        gm, gn = -(-N // b), -(-M // b)  # a grid launched with its axes exchanged: cdiv(N, b) × cdiv(M, b) programs
        if tm * tn < 2 or (tm, tn) == (gm, gn):
            continue
        if all((i < gm and j < gn) != tiles[i][j] for i in range(tm) for j in range(tn)):
            return (
                f"with {b}×{b} tiles, C has {tm}×{tn} tiles but the right ones form a {min(gm, tm)}×{min(gn, tn)} "
                f"block (rows < {min(M, gm * b)}, columns < {min(N, gn * b)}) and the rest are wrong: the "
                f"grid's axes are exchanged (cdiv(N, BLOCK_N) programs along the axis that picks rows)",
                "program_id(0) picks the block of rows, so the grid's first axis has one program per block of M "
                "rows; program_id(1) picks the block of columns",
            )
    rows_bad, cols_bad = bad.any(1), bad.any(0)
    for c in BLOCKS:  # a grid with one program along an axis: only the first block of columns (or rows) written
        for axis, size, other, right, wrong, pid in (
            ("columns", N, M, not bool(bad[:, :c].any()), bool(cols_bad[c:].all()), 1),
            ("rows", M, N, not bool(bad[:c].any()), bool(rows_bad[c:].all()), 0),
        ):
            if not (c < size and right and wrong):
                continue
            whole = size - c >= c or other % 16  # a whole block wrong, or the other axis's ragged edge right
            if not whole:
                continue
            span, rest = _span(0, c), _span(c, size)
            along = "N's blocks of columns" if pid == 1 else "M's blocks of rows"
            return (
                f"{axis} {span} are right in every {'row' if pid == 1 else 'column'} and every one of {axis} "
                f"{rest} is wrong: only the programs with program_id({pid}) = 0 ran, so a whole axis of the grid "
                f"is missing (one program along {along}: a 1-D grid over {'M' if pid == 1 else 'N'} only?)",
                "launch a 2-D grid, (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N)): program_id(0) picks the "
                "block of rows, program_id(1) the block of columns",
            )
    for b in reversed(BLOCKS):  # the largest tile whose elements are all right or all wrong
        tm, tn, tiles = tiles_of(b)
        uniform = all(
            bool(bad[i * b : (i + 1) * b, j * b : (j + 1) * b].all()) == tiles[i][j]
            for i in range(tm)
            for j in range(tn)
        )
        wrong = [(i, j) for i in range(tm) for j in range(tn) if tiles[i][j]]
        if tm * tn < 2 or not uniform or len(wrong) == tm * tn:
            continue
        names = ", ".join(
            f"rows {i * b}-{min(M, (i + 1) * b) - 1} × columns {j * b}-{min(N, (j + 1) * b) - 1}" for i, j in wrong[:4]
        ) + (", ..." if len(wrong) > 4 else "")
        if all((i == tm - 1 and M % b) or (j == tn - 1 and N % b) for i, j in wrong):
            return (
                f"with {b}×{b} tiles, only tiles on the ragged edge are wrong ({names}); the full tiles are right",
                "launch triton.cdiv(M, BLOCK_M) × triton.cdiv(N, BLOCK_N) programs (not M // BLOCK_M) and mask "
                "the last blocks: rows ≥ M and columns ≥ N neither loaded nor stored, k ≥ K loaded as 0",
            )
        return (
            f"with {b}×{b} tiles, {len(wrong)} of {tm * tn} tiles are wrong ({names}), the others right",
            "look at how a program finds its tile from its program ids, and where it stores it",
        )
    return None


def _judge_matmul_values(got, want, case: Case) -> str:
    A, B = case.args
    bound = float((A.double().abs() @ B.double().abs()).max()) if A.numel() and B.numel() else 0.0
    # float32 accumulation of K products (exact in float32 for half inputs), then one rounding to the output dtype
    atol = 4 * eps(torch.float32) * bound + torch.finfo(A.dtype).tiny
    rtol = 4 * eps(torch.float32) if A.dtype == torch.float32 else eps(A.dtype)
    try:
        return judge_tensor(got, want, atol=atol, rtol=rtol, what="C")
    except Mismatch as bad:
        generic = (
            "check the masks of the last blocks (rows >= M, columns >= N, k >= K must load 0), that every load "
            "and the store use both strides of their matrix, that the grid has cdiv(M, BLOCK_M) × cdiv(N, "
            "BLOCK_N) programs, and that the sum over K's blocks is kept in float32"
        )
        ok = _diagnosable(got, want.shape, A.dtype)
        raise _with_cause(
            bad, _diagnose_matmul(got, case) if ok else None, generic, _MATMUL_CHECKED if ok else None
        ) from None


def _judge_matmul(got, want, case: Case) -> str:
    if "out" in case.kwargs:
        A, B = case.args
        bound = float((A.double().abs() @ B.double().abs()).max()) if A.numel() and B.numel() else 0.0
        tol = 4 * eps(torch.float32) * bound + eps(A.dtype) * float(want.double().abs().max() or 0) + 1e-30
        return _judge_into(got, want, case, _judge_matmul_values, tol)
    return _judge_matmul_values(got, want, case)


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def check_add_kernel(add_kernel, add: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `add_kernel`: add_kernel adds two vectors block by block, masking the last block, reading x and y and
    writing out through their own strides (run in the interpreter), and compiles for sm_90 and sm_80 (Triton's
    compiler, every launch)."""
    if cases is None:
        cases = (
            add_cases([1024, 100, 1], [torch.float32, torch.float16])
            + add_cases([1000], [torch.float32], strided=True, seed=4)
            + add_cases([256], [torch.float32], strided=True, out="strided", seed=5)
        )
    seen: list = []
    evidence: dict = {}
    result = run_check(
        f"{TASK}-add_kernel",
        _traced(add, seen),
        cases,
        expected=lambda x, y, out=None: (x.double() + y.double()).to(x.dtype),
        judge=_judge_add,
        rules=[
            _launches(add_kernel, seen),
            _NO_TORCH_ADD,
            _returns_out(seen),
            _Compiled(add_kernel, seen, "add", evidence),
        ],
        proves="add_kernel adds two vectors block by block, masking the last block, reading x and y "
        "and writing out through their own strides (run in the interpreter), and compiles for "
        "sm_90 and sm_80 (Triton's compiler, every launch)",
        hidden=hidden,
        next_step="one program per BLOCK elements: offsets pid * BLOCK + tl.arange(0, BLOCK), a mask "
        "offsets < n on every load and store",
    )
    _print_hardware("add_kernel", evidence, "add")
    return result


def check_softmax_kernel(
    softmax_kernel, softmax: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0
) -> CheckResult:
    """Check `softmax_kernel`: softmax_kernel computes a stable softmax of each row in one program, through both
    strides of x and of out (run in the interpreter); compiled for sm_90 and sm_80, its arithmetic on
    float16/bfloat16 rows runs in float32 (read from the TTIR: no arith or math op on a 16-bit tensor)."""
    if cases is None:
        cases = (
            softmax_cases([(4, 50), (3, 128), (1, 1)], [torch.float32, torch.float16], seed=1)
            + softmax_cases([(2, 64)], [torch.float32], scale=200.0, seed=2)
            + softmax_cases([(5, 40)], [torch.float32], layout="transposed", seed=3)
            + softmax_cases([(5, 64)], [torch.float32], layout="strided", out="strided", seed=4)
            + softmax_cases([(3, 50)], [torch.float16], layout="transposed", out="transposed", seed=5)
        )
    seen: list = []
    evidence: dict = {}
    result = run_check(
        f"{TASK}-softmax_kernel",
        _traced(softmax, seen),
        cases,
        expected=_softmax64,
        judge=_judge_softmax,
        rules=[
            _launches(softmax_kernel, seen),
            _NO_TORCH_SOFTMAX,
            _returns_out(seen),
            _Compiled(softmax_kernel, seen, "softmax", evidence),
        ],
        proves="softmax_kernel computes a stable softmax of each row in one program, through both "
        "strides of x and of out (run in the interpreter); compiled for sm_90 and sm_80, its "
        "arithmetic on float16/bfloat16 rows runs in float32 (read from the TTIR: no arith or "
        "math op on a 16-bit tensor)",
        hidden=hidden,
        next_step="softmax(x)ᵢ = exp(xᵢ − max x) / Σⱼ exp(xⱼ − max x), one row per program",
    )
    _print_hardware("softmax_kernel", evidence, "softmax")
    return result


def check_matmul_kernel(
    matmul_kernel, matmul: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0
) -> CheckResult:
    """Check `matmul_kernel`: matmul_kernel computes C = A·B with masks on the ragged edges, through the strides of
    A, B and C (run in the interpreter, which also counted one tl.dot per block of K in every program); compiled for
    sm_90 and sm_80, its PTX multiplies on the tensor cores (mma.sync/wgmma) and its TTIR has tt.dot inside the
    scf.for over K with a float32 accumulator carried by that loop."""
    if cases is None:
        cases = (
            matmul_cases([(16, 16, 16), (37, 45, 70)], [torch.float32, torch.float16], seed=3)
            + matmul_cases([(20, 33, 40)], [torch.bfloat16], layout="transposed", seed=4)
            + strided_matmul_cases([(64, 64, 64)], [torch.float32], seed=5)
            + strided_matmul_cases(
                [(37, 45, 70)], [torch.float16], a="strided", b="transposed", out="transposed", seed=6
            )
        )
    seen: list = []
    evidence: dict = {}
    result = run_check(
        f"{TASK}-matmul_kernel",
        _traced(matmul, seen),
        cases,
        expected=_matmul64,
        judge=_judge_matmul,
        rules=[
            _launches(matmul_kernel, seen),
            _NO_TORCH_GEMM,
            _returns_out(seen),
            _Compiled(matmul_kernel, seen, "matmul", evidence),
            _dot_over_k(matmul_kernel, seen),
        ],
        proves="matmul_kernel computes C = A·B with masks on the ragged edges, through the strides of "
        "A, B and C (run in the interpreter, which also counted one tl.dot per block of K in "
        "every program); compiled for sm_90 and sm_80, its PTX multiplies on the tensor cores "
        "(mma.sync/wgmma) and its TTIR has tt.dot inside the scf.for over K with a float32 "
        "accumulator carried by that loop",
        hidden=hidden,
        next_step="C[i, j] = Σₖ A[i, k]·B[k, j]: a grid of (BLOCK_M, BLOCK_N) tiles of C, each summing "
        "tl.dot over K's blocks",
    )
    _print_hardware("matmul_kernel", evidence, "matmul")
    return result


def _print_hardware(name: str, evidence: dict, kind: str) -> None:
    """After a passing check in the learner's kernel; not in the grader, which never runs the kernel's code, nor in a
    kernel being graded, whose checks only record (no one reads the line there, and it may cost a compile)."""
    from twoprim.core import verdicts

    if verdicts.current_replay() is None and not os.environ.get(verdicts.CAPTURE_ENV):
        line = _hardware_line(name, evidence, kind)
        if line:
            print(line)


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex09_triton-add_kernel": (
        "Lesson 09's ReLU is the pattern: each program owns one block of indices, found from its program id and "
        "`tl.arange`, and the wrapper launches as many programs as there are blocks.",
        "Element i of x lives at `x_ptr + i * stride_x`, element i of y at y's own stride, and the sum goes to out "
        "through out's stride. A boolean mask comparing the indices with n keeps the last, partial block from "
        "reading or writing past the end.",
        "The wrapper writes into `out` when it is given, else allocates one (`torch.empty`, x's dtype); it passes all "
        "three strides, launches `triton.cdiv(n, BLOCK)` programs with BLOCK by keyword, and returns out.",
    ),
    "ex09_triton-softmax_kernel": (
        "One program per row, and the whole row fits in one block, as in lesson 09's row reduction: BLOCK_N is the "
        "next power of two at or above N, and the mask covers the padding.",
        "Padding must not change the result: load it as minus infinity, since exp of that is 0. Element (i, j) is "
        "at `x_ptr + i * stride_xm + j * stride_xn`, and out has two strides of its own.",
        "Convert the loaded row to float32 before any arithmetic, subtract its maximum so exp never overflows, and "
        "divide by the sum; the store converts back to the output's dtype.",
    ),
    "ex09_triton-matmul_kernel": (
        "Each program computes one (BLOCK_M, BLOCK_N) tile of C; the grid is two-dimensional, one axis for blocks "
        "of rows and one for blocks of columns, as in lesson 09's fixed-size GEMM.",
        "Lesson 09's GEMM needed sizes that are multiples of its blocks and contiguous matrices. Here row offsets "
        "times a row stride plus column offsets times a column stride give each block of pointers, and a mask of "
        "the same shape with `other=0.0` makes the ragged edges contribute nothing.",
        "Start from a float32 block of zeros and add `tl.dot` of the A block and the B block at every step of a loop "
        "over K; convert to C's element type only in the final `tl.store`, masked to rows < M and columns < N, "
        "through C's own strides.",
    ),
}


def warm_up() -> None:
    """Run by a grading forkserver once, before it forks the first ex09 kernel (`twoprim.grading.forkserver`): the first
    compile in a process pays about a second for the compiler's own start (LLVM, libdevice, the backends), which every
    kernel would pay again. Compiles a small kernel of this module for both targets, in a throwaway cache."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        saved = os.environ.get(triton_compile.ENV_CACHE)
        os.environ[triton_compile.ENV_CACHE] = folder
        try:
            for target in TARGETS:
                triton_compile.compile_kernel(
                    _warm_up_kernel, {"x_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64}, target
                )
        finally:
            os.environ.pop(triton_compile.ENV_CACHE) if saved is None else os.environ.__setitem__(
                triton_compile.ENV_CACHE, saved
            )
        triton_compile._MEMORY.clear()


def _warm_up_kernel(x_ptr, n, BLOCK: tl.constexpr):
    """x[i] = 2·x[i]: the smallest kernel that runs the whole compiler (`warm_up`); a Python function, which
    `triton_compile.compile_kernel` compiles as it would a `@triton.jit` one."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
