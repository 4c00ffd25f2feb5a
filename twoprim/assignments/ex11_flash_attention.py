"""Checks for assignment ex11_flash_attention: a FlashAttention forward kernel in Triton and its launch wrapper, for
(B, H, S, D) inputs in float32, float16 and bfloat16, causal or not, any S and any strides.

Every kernel runs in Triton's interpreter on CPU tensors (`triton_tools.setup()`, run when this module is imported),
so the assignment is graded the same way on any machine; sizes stay small because the interpreter runs each program
in Python and NumPy. The values are compared with `F.scaled_dot_product_attention` in float64 (`flash.reference`)
within each dtype's tolerance (`flash.tolerance`). Every rule the exercise states has a visible case: S a multiple of
the blocks and not, S smaller than a block, D of 16, 32 and 64, causal and not, all three dtypes, q, k and v as views
of a (B, S, H, D) tensor (the layout multi-head attention makes), and scores large enough that exp overflows without
the running max.

What makes it FlashAttention is read from the compiled kernel, not from its numbers: every launch a check sees is
compiled for sm_90 (H100/H200) by Triton's own compiler on this CPU, as Triton's launcher specialises that launch
(`triton_compile.compile_launch`'s specialisation, kept by `triton_tools.launches`), and its TTIR and PTX must show
two `tt.dot` in the loop over key blocks, both on the tensor cores (one pass through the PTX loop does the
multiply-adds both need), m, l and the accumulator carried by that loop in float32, and no global store but O's tile
after the loop (nothing written and read back). The interpreter's record of each program's `tl.dot` calls shows that
K and V are streamed in blocks, not loaded whole. A wrong output is read for its cause (`_diagnose`): the softmax
scale missing or mis-scaled, the causal mask off by one at the diagonal, the accumulator or the running sum not
rescaled when the running max grows (simulated block by block for each block size, with the error by how often a
row's max grew), masked scores filled with 0 instead of −inf, strides ignored, heads or query blocks no program
computed, rows of NaN; when no cause fits, the message says so before the generic advice.

Why this module is long: one kernel checked three ways (the interpreter's values, the launch's records, the compiled
IR), and each wrong output diagnosed by a simulation of its cause; a diagnosis stays beside the judge that calls it
and a rule beside the evidence it reads. Compiling and reading TTIR and PTX is `triton_compile`'s; the loop's
evidence in words, the tolerances and the oracle are `flash_attention`'s (lesson 11's topic).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

from twoprim.topics import triton_gemm as triton_tools

triton_tools.setup()  # before the learner's @triton.jit: the assignment always runs in the interpreter

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from twoprim.core import guards  # noqa: E402
from twoprim.core.cases import dtype_name  # noqa: E402
from twoprim.core.checks import (  # noqa: E402
    GEMM_ATEN,
    GEMM_FUNCTIONS,
    Axis,
    Case,
    CheckResult,
    Mismatch,
    Rule,
    as_contiguous,
    forbid,
    judge_tensor,
    run_check,
)
from twoprim.topics import flash_attention as flash  # noqa: E402
from twoprim.topics import triton_compiled as triton_compile  # noqa: E402

__all__ = ["attention_cases", "check_flash_attention_kernel", "guard_attention", "DTYPES"]

TASK = "ex11_flash_attention"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HALF = (torch.float16, torch.bfloat16)
AXES = (Axis("batch"), Axis("head"), Axis("query"), Axis("feature"))
BLOCKS = (16, 32, 64, 128)  # the block sizes a diagnosis tries
LOOP_S = 64  # from this S on, a kernel must take more than one block of keys


# ----------------------------------------------------------------------------------------------------------------
# The guard (the wrapper's first line)
# ----------------------------------------------------------------------------------------------------------------


def guard_attention(fn: str, q, k, v) -> None:
    """q, k, v: (B, H, S, D) tensors of one shape and one dtype (float32, float16 or bfloat16), D a power of two from
    16 to 128, on the device Triton's kernels use here."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        guards.tensor(fn, name, t, ndim=4)
        if t.dtype not in DTYPES:
            raise TypeError(
                f"{fn}: {name} is {t.dtype}; tl.dot multiplies float32, float16 and bfloat16 blocks, "
                f"and this exercise grades those three: convert it with {name}.float() (or .half(), "
                f".bfloat16())."
            )
        if t.device.type != triton_tools.device():
            raise ValueError(
                f"{fn}: {name} is on {t.device}, but kernels here run on {triton_tools.device()}; move it "
                f"with {name}.to('{triton_tools.device()}')."
            )
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            f"{fn}: q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} differ; this kernel "
            f"takes one (B, H, S, D) shape for all three (self-attention)."
        )
    guards.same_dtype(fn, q=q, k=k, v=v)
    D, S = q.shape[3], q.shape[2]
    if D < 16 or D > 128 or D & (D - 1):
        raise ValueError(
            f"{fn}: head size D = {D}; the kernel loads a whole row of D features with tl.arange(0, D), "
            f"which needs a power of two, and tl.dot needs every block dimension ≥ 16: use D in 16, 32, "
            f"64, 128."
        )
    if S < 1 or q.shape[0] < 1 or q.shape[1] < 1:
        raise ValueError(f"{fn}: q has shape {tuple(q.shape)}; B, H and S must be at least 1.")


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run)
# ----------------------------------------------------------------------------------------------------------------

LAYOUTS = {
    "contiguous": "",
    "heads_interleaved": "; q, k, v views of a (B, S, H, D) tensor, as multi-head attention "
    "makes them (non-contiguous)",
}


def attention_cases(
    shapes: Sequence[tuple[int, int, int, int]],
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    *,
    causal: bool = False,
    layout: str = "contiguous",
    logits: float | None = None,
    seed: int = 0,
) -> list[Case]:
    """(q, k, v) and causal for every (B, H, S, D) × dtype. `layout` "heads_interleaved": q, k and v are
    `x.transpose(1, 2)` of (B, S, H, D) tensors (strides (S·H·D, D, H·D, 1)); `logits`: q and k scaled so that the
    largest |q·k|/√D is about that large (exp overflows float32 above 88.7 unless the running max is subtracted)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for B, H, S, D in shapes:
            if layout == "heads_interleaved":
                q, k, v = (
                    torch.randn(B, S, H, D, generator=gen, dtype=torch.float64).transpose(1, 2) for _ in range(3)
                )
            else:
                q, k, v = (torch.randn(B, H, S, D, generator=gen, dtype=torch.float64) for _ in range(3))
            note = ""
            if logits:
                top = float((q @ k.transpose(-1, -2)).abs().max()) / math.sqrt(D)
                f = math.sqrt(logits / top)
                q, k = q * f, k * f
                top = float((q.to(dtype).double() @ k.to(dtype).double().transpose(-1, -2)).abs().max()) / math.sqrt(D)
                note = f"; scores q·k/√D up to ±{top:.0f} (exp overflows float32 past 88.7 without the running max)"
            q, k, v = (t.to(dtype) for t in (q, k, v))
            label = (
                f"(B, H, S, D) = {(B, H, S, D)}, {dtype_name(dtype)}, {'causal' if causal else 'not causal'}"
                f"{LAYOUTS[layout]}{note}"
            )
            cases.append(Case(label, (q, k, v), {"causal": causal}))
    return cases


def _default_cases() -> list[Case]:
    return (
        attention_cases([(1, 2, 64, 32)], [torch.float32], seed=1)
        + attention_cases([(2, 2, 100, 32)], [torch.float16], seed=2)
        + attention_cases([(1, 2, 20, 16)], [torch.float32], causal=True, seed=3)
        + attention_cases([(2, 1, 100, 64)], [torch.bfloat16], causal=True, seed=4)
        + attention_cases([(1, 2, 77, 32)], [torch.float16], causal=True, layout="heads_interleaved", seed=5)
        + attention_cases([(1, 1, 48, 32)], [torch.float32], logits=300.0, seed=6)
        + attention_cases([(1, 1, 40, 16)], [torch.float16], causal=True, logits=150.0, seed=7)
    )


# ----------------------------------------------------------------------------------------------------------------
# Rules: the wrapper launches the kernel, which streams the keys and compiles to FlashAttention
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


def _launched(seen: list) -> triton_tools.Launches:
    return seen[0] if seen else triton_tools.Launches()


def _name(kernel) -> str:
    return getattr(getattr(kernel, "fn", kernel), "__name__", "the kernel")


def _launches(kernel, seen: list) -> Rule:
    return triton_tools.launched_rule(
        kernel,
        seen,
        computes="the attention",
        next_step="allocate O with torch.empty and launch {name}[grid](...) on it; return O",
    )


_NO_TORCH = forbid(
    "the wrapper does no arithmetic: the kernel computes the attention",
    GEMM_FUNCTIONS
    | {
        "softmax",
        "log_softmax",
        "scaled_dot_product_attention",
        "exp",
        "exp_",
        "amax",
        "max",
        "logsumexp",
        "sum",
        "div",
        "__truediv__",
        "mul",
        "__mul__",
        "numpy",
    },
    GEMM_ATEN
    | {
        "_softmax",
        "_log_softmax",
        "exp",
        "amax",
        "max",
        "logsumexp",
        "sum",
        "div",
        "mul",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
    },
    next_step="the wrapper allocates O (torch.empty), computes the grid and the scale 1/√D as a Python float, and "
    "launches the kernel; every product, exp and sum happens in the kernel",
)


def _streams_keys(kernel, seen: list) -> Rule:
    """Run in the interpreter (which records every program's tl.dot calls): for S > LOOP_S some program takes more
    than one block of keys, two tl.dot per block."""

    def test(log, case) -> str | None:
        S = case.args[0].shape[2]
        observed = [launch.dots for launch in _launched(seen).of(kernel) if launch.dots is not None]
        if observed and not any(calls for dots in observed for calls in dots.values()):
            return f"{_name(kernel)} ran without calling tl.dot: the products were computed another way"
        if S <= LOOP_S:
            return None
        for dots in observed:
            most = max((len(calls) for calls in dots.values()), default=0)
            if most <= 2:
                widths = sorted({w for calls in dots.values() for w in calls})
                return (
                    f"for S = {S} no program called tl.dot more than {most} time(s) (sums over {widths}): one "
                    f"block of keys covers all {S} keys, so the loop over key blocks runs once; FlashAttention "
                    f"streams K and V through the chip one block at a time"
                )
        return None

    return Rule(
        "the kernel streams K and V in blocks of keys: two tl.dot per block, whatever S is",
        test,
        "keep BLOCK_N fixed (32 or 64) whatever S is, and loop over the keys in steps of BLOCK_N, two tl.dot per step",
    )


def _source_line(kernel, line: int | None) -> str:
    """`line` of the file or notebook cell that defines `kernel`, as the learner wrote it."""
    import linecache

    fn = getattr(kernel, "fn", kernel)
    filename = getattr(getattr(fn, "__code__", None), "co_filename", "")
    text = linecache.getline(filename, line).strip() if line and filename else ""
    return f"line {line}: `{text}`" if text else (f"line {line}" if line else "a line the compiler did not name")


_FUSE = (
    "keep each (BLOCK_M, BLOCK_N) tile of scores on the chip: compute it with tl.dot, fold it into m, l and the "
    "accumulator in the same step of the loop, and let it go; the kernel's only store is O's tile, after the loop"
)


def _store_problem(kernel, ev, at: str) -> tuple[str, str] | None:
    """What the kernel stores that FlashAttention does not (a tile written and read back, a store inside the loop,
    a store to anything but O), and the next step; None when it stores O only, once."""
    trips = ev.round_trips()
    if trips:
        s, load = trips[0]
        tile = "×".join(map(str, s.shape)) or "scalar"
        return (
            f"{at}, the kernel stores a {tile} {s.element} tile to {', '.join(s.arguments)} "
            f"({_source_line(kernel, s.line)}){' inside a loop' if s.in_loop else ''} and loads it back "
            f"({_source_line(kernel, load.line)}): the scores make a round trip through global memory, the S×S "
            f"traffic FlashAttention exists to avoid (right values, not FlashAttention)",
            _FUSE,
        )
    inside = [s for s in ev.stores if s.in_loop]
    if inside:
        s = inside[0]
        return (
            f"{at}, the kernel stores a {'×'.join(map(str, s.shape))} {s.element} tile to "
            f"{', '.join(s.arguments)} inside the loop over key blocks ({_source_line(kernel, s.line)}): a tile "
            f"goes to global memory for every block of keys",
            _FUSE,
        )
    targets = sorted({a for s in ev.stores for a in s.arguments})
    if len(targets) > 1:
        return (
            f"{at}, the kernel stores to {', '.join(targets)}: FlashAttention's forward pass writes only O",
            "store O's (BLOCK_M, D) tile once, after the loop; keep everything else in registers",
        )
    return None


def _flash_problem(kernel, c) -> tuple[str, str] | None:
    """What the compiled kernel does that FlashAttention does not, and the next step; None when it is FlashAttention:
    nothing written and read back, no store inside the loop or to anything but O, two tt.dot in the loop over key
    blocks with both products on the tensor cores, and m, l and the accumulator carried in float32."""
    ev = flash.loop_evidence(c)
    at = f"compiled for {c.target}"
    stored = _store_problem(kernel, ev, at)
    if stored is not None:
        return stored
    dots = c.dots()
    if ev.loop is None:
        if not dots:
            return (
                f"{at}, its TTIR has no tt.dot: both products run on the ordinary FP32 units, not the tensor cores",
                "compute the scores with tl.dot(q, tl.trans(k)) and the output with tl.dot(p, v), inside the loop "
                "over key blocks",
            )
        return (
            f"{at}, its TTIR has tt.dot outside any scf.for ({_source_line(kernel, dots[0].line)}): the keys are "
            f"not streamed block by block",
            "loop over the keys in steps of BLOCK_N and call both tl.dot inside the loop",
        )
    if len(ev.dots) < 2:
        d = ev.dots[0]
        cubes = [r for r in ev.reductions if len(r.shape) == 3]
        other = (
            f"; the other product ({_source_line(kernel, cubes[0].line)}) is a broadcast multiply and a tl.sum "
            f"over a {'×'.join(map(str, cubes[0].shape))} block, which runs on the FP32 units"
            if cubes
            else "; the other product is not a tl.dot"
        )
        return (
            f"{at}, the loop over key blocks holds one tt.dot ({_source_line(kernel, d.line)}){other}: one of the "
            f"two products of attention is not on the tensor cores",
            "compute both products with tl.dot: the scores as tl.dot(q, tl.trans(k)) and the output as "
            "tl.dot(p.to(v.dtype), v), with p converted to the input type as the tensor cores want",
        )
    full = [d for d in ev.dots if d.a == "f32" and d.precision == "ieee"]
    if full or ev.macs < ev.needed:
        d = full[0] if full else None
        said = (
            f"{at}, one pass through the loop does {ev.macs:,} multiply-adds on the tensor cores where its two "
            f"products need {ev.needed:,}"
        )
        if d is not None:
            said += (
                f": the product at {_source_line(kernel, d.line)} is a tt.dot of {d.a}·{d.b} at full float32 "
                f"precision (inputPrecision = ieee; Triton makes such a dot of a broadcast multiply and tl.sum), "
                f"which runs as FP32 multiply-adds"
            )
        return said, (
            "multiply p by v with tl.dot(p.to(v.dtype), v): the probabilities in the input type, summed in "
            "float32 on the tensor cores"
        )
    state = ev.state()
    half = [t for t in state["rows"] + state["tiles"] if triton_compile._element(t) != "f32"]
    if half:
        return (
            f"{at}, the loop over key blocks carries {', '.join(half)} from one block to the next: m, l and the "
            f"accumulator are rounded to {triton_compile._element(half[0])} at every block",
            "keep m, l and the accumulator in float32 (tl.full/tl.zeros with dtype=tl.float32) and convert to "
            "O's type once, at the store",
        )
    if not state["tiles"] or len(state["rows"]) < 2:
        return (
            f"{at}, the loop over key blocks carries {', '.join(ev.carried) or 'nothing'}: FlashAttention carries "
            f"the running max m and sum l (BLOCK_M,) and the (BLOCK_M, D) accumulator from one block to the next",
            "start m at -inf, l and the accumulator at 0 before the loop and update all three in every step",
        )
    bad = [d for d in ev.dots if d.acc != "f32"]
    if bad:
        return (
            f"{at}, tt.dot accumulates in {bad[0].acc} ({_source_line(kernel, bad[0].line)})",
            "let tl.dot accumulate in float32, its default",
        )
    return None


def _loop_compiled_away(c) -> bool:
    """Whether this launch's specialisation removed the kernel's loops: an int argument equal to 1 (S = 1, say) is
    compiled in as a constant, a loop that runs once is folded, and the TTIR has no scf.for left. Such a compile says
    nothing about the loop over key blocks; the check's other launches do."""
    return bool(c.ones) and "scf.for" not in c.ttir


_VERIFIED: set = set()  # (kernel code, pointer types, options, flags) whose sm_90 compile passed


class _Compiled:
    """A rule (`checks.Rule`'s name, test, next_step): the launches of a case compile for sm_90, and the compiled
    kernel is FlashAttention (`_flash_problem`). Verified once per kernel code, pointer types, options and boolean
    constexprs (causal or not: another code path), on the first launch that has them, as it specialises; the first
    launch of each pointer type goes into `evidence` for the line after ✔."""

    def __init__(self, kernel, seen: list, evidence: dict):
        self.kernel, self.seen, self.evidence = kernel, seen, evidence
        self.name = (
            f"{_name(kernel)} compiles for a GPU (sm_90) to FlashAttention: two tl.dot on the tensor cores "
            f"in the loop over key blocks, float32 m, l and accumulator, O the only tensor stored"
        )
        self.next_step = ""

    def test(self, log, case) -> str | None:
        for launch in _launched(self.seen).of(self.kernel)[:1]:
            pointers = {k: v for k, v in launch.signature.items() if v.startswith("*")}
            kept = self.evidence.get(next(iter(pointers.values()), "?"))
            if kept is None or case.args[0].shape[2] > kept[2]:  # the longest S of each type: a loop that repeats
                self.evidence[next(iter(pointers.values()), "?")] = (launch, case.label, case.args[0].shape[2])
            flags = tuple(sorted((k, v) for k, v in launch.constexprs.items() if isinstance(v, bool)))
            key = (
                triton_compile._quick_key(launch.fn, pointers, {}, "", 0, 0),
                tuple(sorted(launch.options.items())),
                flags,
            )
            if key[0] is not None and key in _VERIFIED:
                continue
            c = launch.compiled("sm_90")
            if c.error:
                where = _source_line(self.kernel, c.error_line) if c.error_line else ""
                self.next_step = (
                    "fix what the compiler names at that line: the interpreter runs code that a GPU's "
                    "compiler refuses (lesson 09, 'What the interpreter does not model')"
                )
                return f"it does not compile for sm_90 (Triton's compiler, the one a GPU would run): {c.error}" + (
                    f"\n            at {where}" if where else ""
                )
            if _loop_compiled_away(c):  # S = 1 compiled in: no loop left to read; the case's values still count
                continue
            found = _flash_problem(self.kernel, c)
            if found:
                self.next_step = found[1]
                return found[0]
            if key[0] is not None:
                _VERIFIED.add(key)
        return None


def _hardware_line(evidence: dict) -> str:
    """What the compiled kernel is, for the first launch with 16-bit pointers (else float32): per target (sm_90, sm_80)
    its summary and its loop over key blocks in words."""
    if not evidence:
        return ""
    pointer = next((p for p in ("*fp16", "*bf16", "*fp32") if p in evidence), next(iter(evidence)))
    launch, label, _ = evidence[pointer]
    lines = []
    for target in triton_compile.TARGETS:
        c = launch.compiled(target)
        if c.error:
            continue
        if not lines:
            lines.append(
                f"  compiled by Triton's compiler on this CPU (no GPU needed) as Triton's launcher specialises "
                f"the launch of case '{label}': {c.specialisation()}"
            )
        lines.append(f"    {c.summary()}")
        lines += [f"      {line}" for line in flash.loop_evidence(c).lines()]
    return "\n".join(lines)


def _print_hardware(evidence: dict) -> None:
    """After a passing check in the learner's kernel; not in the grader, nor in a kernel being graded."""
    from twoprim.core import verdicts

    if verdicts.current_replay() is None and not os.environ.get(verdicts.CAPTURE_ENV):
        line = _hardware_line(evidence)
        if line:
            print(line)


# ----------------------------------------------------------------------------------------------------------------
# The judge, and the causes read from a wrong output
# ----------------------------------------------------------------------------------------------------------------


def _expected(q, k, v, causal=False):
    return flash.reference(q, k, v, causal)


_CHECKED = (
    "the softmax scale, the causal mask at the diagonal, the rescaling of the accumulator and of l when the "
    "running max grows, masked scores filled with 0, the inputs' strides, heads and query blocks no program "
    "computed, NaN rows"
)
_GENERIC = (
    "compare your kernel with lesson 11 step by step: q block loaded once, m = -inf, l = 0, acc = 0; per key "
    "block s = tl.dot(q, tl.trans(k)) * scale, masked to -inf (keys ≥ S and, when causal, keys after the "
    "query), m_new = max(m, rowmax s), alpha = exp(m − m_new), p = exp(s − m_new), l = l·alpha + rowsum p, "
    "acc = acc·alpha + tl.dot(p, v); after the loop O = acc / l"
)


def _judge(got, want, case: Case) -> str:
    q, k, v = case.args
    atol, rtol = flash.tolerance(q, k, v)
    try:
        return judge_tensor(got, want, atol=atol, rtol=rtol, what="O", axes=AXES)
    except Mismatch as bad:
        readable = isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype
        found = _diagnose(got, case) if readable else None
        if found is not None:
            raise Mismatch(f"{bad.detail}\n  cause:    {found[0]}", next_step=found[1], expected=bad.expected) from None
        if not readable:
            raise
        raise Mismatch(
            f"{bad.detail}\n  cause:    none of the causes this check recognises fits the wrong values "
            f"({_CHECKED}); the usual suspects:",
            next_step=_GENERIC,
            expected=bad.expected,
        ) from None


def _masked(q, k, v, keep: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(q·kᵀ·scale, keys where `keep` (S, S) is False hidden)·v in float64; NaN rows where nothing is kept."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    return torch.softmax(s.masked_fill(~keep, -math.inf), dim=-1) @ v.double()


def _blocked(
    q,
    k,
    v,
    causal: bool,
    bn: int,
    *,
    acc_rescaled: bool = True,
    l_rescaled: bool = True,
    zero: str = "",
    bm: int | None = None,
) -> torch.Tensor:
    """The kernel's loop simulated in float64 with key blocks of `bn`: the running max m, the sum l and the
    accumulator, each rescaled or not; masked scores set to -inf, or to 0 where `zero` says ("all": every masked
    score, "padding": keys past S, "causal": keys after the query); with `bm`, a causal program stops after the key
    block that holds its last query row (blocks above the diagonal skipped), else every program sees every block."""
    B, H, S, D = q.shape
    q64, k64, v64 = q.double(), k.double(), v.double()
    rows = torch.arange(S)
    hi = torch.clamp((rows // bm + 1) * bm, max=S) if causal and bm else torch.full((S,), S)
    m = torch.full((B, H, S), -math.inf, dtype=torch.float64)
    l = torch.zeros(B, H, S, dtype=torch.float64)  # noqa: E741 - l: the softmax's running sum, as lesson 05 writes it
    acc = torch.zeros(B, H, S, D, dtype=torch.float64)
    for j0 in range(0, int(hi.max()), bn):
        cols = torch.arange(j0, j0 + bn)
        inside = cols < S
        kb = k64[:, :, cols.clamp(max=S - 1)] * inside[:, None]  # padding keys load as 0
        vb = v64[:, :, cols.clamp(max=S - 1)] * inside[:, None]
        s = (q64 @ kb.transpose(-1, -2)) / math.sqrt(D)  # (B, H, S, bn)
        pad = ~inside[None, :].expand(S, bn)
        after = (cols[None, :] > rows[:, None]) & ~pad if causal else torch.zeros(S, bn, dtype=torch.bool)
        s = s.masked_fill(pad | after, -math.inf)
        if zero in ("all", "padding"):
            s = s.masked_fill(pad, 0.0)
        if zero in ("all", "causal"):
            s = s.masked_fill(after, 0.0)
        active = (j0 < hi)[:, None]  # (S, 1): rows whose loop takes this block
        m_new = torch.maximum(m, s.amax(-1))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new[..., None])
        l_new = (l * alpha if l_rescaled else l) + p.sum(-1)
        acc_new = (acc * alpha[..., None] if acc_rescaled else acc) + p @ vb
        m = torch.where(active[:, 0], m_new, m)
        l = torch.where(active[:, 0], l_new, l)  # noqa: E741 - l: the softmax's running sum, as lesson 05 writes it
        acc = torch.where(active, acc_new, acc)
    return acc / l[..., None]


def _near(g: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, rows: torch.Tensor | None = None) -> bool:
    """Every element of g within atol + rtol·|ref| of ref (on `rows` of the query axis only, when given)."""
    if rows is not None:
        g, ref = g[:, :, rows], ref[:, :, rows]
    return g.shape == ref.shape and bool(((g - ref).abs() <= atol + rtol * ref.abs()).all())


def _fits(g: torch.Tensor, wrong: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> bool:
    """O is what a mistake computes, and that mistake shows in this case (its result is not the right one)."""
    return _near(g, wrong, atol, rtol) and not _near(wrong, want, atol, rtol)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _diagnose(got: torch.Tensor, case: Case) -> tuple[str, str] | None:
    """Which way the kernel went wrong, read from O: see the module's docstring for the causes, in the order tried."""
    q, k, v = case.args
    causal = bool(case.kwargs.get("causal", False))
    B, H, S, D = q.shape
    atol, rtol = flash.tolerance(q, k, v)
    atol, rtol = 4 * atol, 4 * rtol  # a simulation in float64 of a kernel that rounds as the right one does
    g = got.double()
    want = flash.reference(q, k, v, causal).double()
    return (
        _scale_cause(g, q, k, v, causal, want, atol, rtol)
        or _mask_cause(g, q, k, v, causal, want, atol, rtol)
        or _rescale_cause(g, q, k, v, causal, want, atol, rtol)
        or _zero_cause(g, q, k, v, causal, want, atol, rtol)
        or _stride_cause(g, q, k, v, causal, want, atol, rtol)
        or _where_cause(g, want, atol, rtol, S)
        or _nan_cause(g, q, k, causal)
    )


def _scale_cause(g, q, k, v, causal, want, atol, rtol) -> tuple[str, str] | None:
    import torch.nn.functional as F

    D = q.shape[-1]
    right = 1 / math.sqrt(D)
    for scale, what, step in (
        (
            1.0,
            "no scale at all: the scores are q·k, not q·k/√D",
            "multiply the scores by scale = 1/√D (passed "
            "from the wrapper as 1.0 / math.sqrt(D)) before the running max",
        ),
        (
            1 / D,
            f"q·k/D, not q·k/√D: the scale 1/√D = {right:.4g} applied twice, or 1/D",
            "apply the scale 1/√D once, to the scores",
        ),
        (
            math.log(2) / math.sqrt(D),
            "q·k/√D·ln 2: tl.exp2 of the scores without the factor log2(e) = 1.4427",
            "with tl.exp2, multiply the scores (and m) by scale·log2(e), since exp(x) = exp2(x·log2 e); or use tl.exp",
        ),
        (
            math.log2(math.e) / math.sqrt(D),
            "q·k/√D·log2(e): the factor log2(e) for tl.exp2, with tl.exp",
            "use tl.exp2 with the scores scaled by 1/√D·log2(e), or tl.exp with 1/√D alone",
        ),
    ):
        other = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale)
        if _fits(g, other, want, atol, rtol):
            return f"O equals attention whose softmax takes {what}", step
    return None


def _mask_cause(g, q, k, v, causal, want, atol, rtol) -> tuple[str, str] | None:
    S, D = q.shape[2], q.shape[3]
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    scale = 1 / math.sqrt(D)
    if causal:
        if S > 1:
            rows = torch.arange(1, S)
            wrong = _masked(q, k, v, j < i, scale)
            if _near(g, wrong, atol, rtol, rows) and not _near(wrong, want, atol, rtol, rows):
                nan = "; row 0 sees no key at all, so it comes out NaN (0/0)" if bool(g[:, :, 0].isnan().any()) else ""
                return (
                    f"O equals causal attention in which query i sees keys 0..i−1 only: the mask hides the "
                    f"diagonal (key i itself){nan}",
                    "keep key j for query i when j <= i (offs_n[None, :] <= offs_m[:, None]), the diagonal included",
                )
        if _fits(g, _masked(q, k, v, j <= i + 1, scale), want, atol, rtol):
            return (
                "O equals causal attention in which query i also sees key i+1: the mask is one key past the diagonal",
                "keep key j for query i when j <= i, not j <= i + 1 (or j < i + 1)",
            )
        if _fits(g, _masked(q, k, v, torch.ones(S, S, dtype=torch.bool), scale), want, atol, rtol):
            return (
                "O equals attention without the causal mask: every query saw every key, also the ones after it",
                "when CAUSAL, set the scores of keys j > i to -inf before the running max",
            )
    elif S > 1 and _fits(g, _masked(q, k, v, j <= i, scale), want, atol, rtol):
        return (
            "O equals causal attention, but this case has causal=False: the mask was applied anyway",
            "pass causal to the kernel (a tl.constexpr) and mask only when it is True",
        )
    return None


def _rescale_cause(g, q, k, v, causal, want, atol, rtol) -> tuple[str, str] | None:
    S = q.shape[2]
    for bn in BLOCKS:
        if bn >= S:
            continue
        for acc_ok, l_ok in ((False, True), (True, False), (False, False)):
            wrong = _blocked(q, k, v, causal, bn, acc_rescaled=acc_ok, l_rescaled=l_ok)
            if not _fits(g, wrong, want, atol, rtol):
                continue
            what = {
                (False, True): "the accumulator is not",
                (True, False): "the running sum l is not",
                (False, False): "neither the accumulator nor l is",
            }[(acc_ok, l_ok)]
            grew = flash.max_growths(q, k, bn, causal)
            err = (g - want).abs().amax(-1)
            by = [
                f"{_count(n, 'time')}: {float(err[grew == n].max()):.2g}"
                for n in range(1, int(grew.max()) + 1)
                if (grew == n).any()
            ]
            right = f"largest error {float(err[grew == 0].max()):.2g}" if (grew == 0).any() else "none in this case"
            return (
                f"O matches the loop over blocks of {bn} keys ({-(-S // bn)} blocks for S = {S}) in which {what} "
                f"rescaled by exp(m_old − m_new) when the running max grows: the queries whose max never grew "
                f"after the first block are right ({right}), those whose max grew are wrong (largest error by how "
                f"often it grew, {'; '.join(by)}); with one block of keys nothing needs the rescale, and the more "
                f"key blocks, the more queries it spoils",
                "when a block raises the running max from m to m_new, every term summed so far was exp(s − m): "
                "multiply both l and the accumulator by alpha = exp(m − m_new) before adding the new block's "
                "rowsum(p) and p·v",
            )
    return None


def _zero_cause(g, q, k, v, causal, want, atol, rtol) -> tuple[str, str] | None:
    S = q.shape[2]
    zeros = ("all", "causal", "padding") if causal else ("padding",)
    for bn in BLOCKS:
        ragged = S % bn != 0
        for zero in zeros:
            if zero == "padding" and not ragged:
                continue
            for bm in (None,) + BLOCKS if causal else (None,):
                wrong = _blocked(q, k, v, causal, bn, zero=zero, bm=bm)
                if not _fits(g, wrong, want, atol, rtol):
                    continue
                which = {
                    "all": "the masked scores (keys past S and keys after the query)",
                    "causal": "the scores of keys after the query",
                    "padding": f"the scores of the "
                    f"{-(-S // bn) * bn - S} padding keys past S = {S} in the last block of {bn}",
                }[zero]
                return (
                    f"O matches the loop over blocks of {bn} keys with {which} set to 0 instead of −inf: "
                    f"exp(0 − m) gives each of them a weight in l (and in the accumulator, with its row of v)",
                    "fill masked scores with -inf (tl.where(keep, s, float('-inf'))): exp(−inf) = 0 adds nothing; "
                    "a key loaded as 0 still scores q·0 = 0, so the keys past S need the mask too",
                )
    return None


def _stride_cause(g, q, k, v, causal, want, atol, rtol) -> tuple[str, str] | None:
    loose = [(name, t) for name, t in (("q", q), ("k", k), ("v", v)) if not t.is_contiguous()]
    if not loose:
        return None
    args = {"q": q, "k": k, "v": v}
    for name, t in loose:
        read = as_contiguous(t)
        if read is None:
            return None
        args[name] = read
    if _fits(g, flash.reference(args["q"], args["k"], args["v"], causal).double(), want, atol, rtol):
        names = ", ".join(name for name, _ in loose)
        return (
            f"O equals attention of {names} read as if contiguous: the loads ignore their strides "
            f"({'; '.join(f'{n}.stride() = {t.stride()}' for n, t in loose)})",
            "address element (b, h, s, d) of each input as ptr + b·stride_b + h·stride_h + s·stride_s + "
            "d·stride_d, with that tensor's own four strides passed to the kernel",
        )
    return None


def _where_cause(g, want, atol, rtol, S: int) -> tuple[str, str] | None:
    """Heads, or query blocks, that no program (or the wrong one) computed."""
    B, H = g.shape[:2]
    right = [
        [_near(g[b : b + 1, h : h + 1], want[b : b + 1, h : h + 1], atol, rtol) for h in range(H)] for b in range(B)
    ]
    wrong = [(b, h) for b in range(B) for h in range(H) if not right[b][h]]
    if wrong and len(wrong) < B * H:
        for b, h in wrong:
            for b2 in range(B):
                for h2 in range(H):
                    if (b2, h2) != (b, h) and _near(
                        g[b : b + 1, h : h + 1], want[b2 : b2 + 1, h2 : h2 + 1], atol, rtol
                    ):
                        return (
                            f"O[{b}, {h}] holds the attention of batch {b2}, head {h2}: the program for (b, h) "
                            f"reads another head",
                            "with program_id(1) = b·H + h, take b = pid // H and h = pid % H, "
                            "and offset each tensor by b·stride_b + h·stride_h",
                        )
        names = ", ".join(f"({b}, {h})" for b, h in wrong[:6]) + (", ..." if len(wrong) > 6 else "")
        return (
            f"the (batch, head) pairs {names} are wrong, the other {B * H - len(wrong)} right",
            "launch one program per query block and (b, h) pair: grid (triton.cdiv(S, BLOCK_M), B * H), and "
            "find b and h from program_id(1)",
        )
    if wrong:
        ok = [s for s in range(S) if _near(g[:, :, s : s + 1], want[:, :, s : s + 1], atol, rtol)]
        for bm in BLOCKS:
            last = (S // bm) * bm
            if S % bm and last and ok == list(range(last)):
                return (
                    f"queries 0–{last - 1} are right and the ragged last block (queries {last}–{S - 1}) is wrong",
                    "launch triton.cdiv(S, BLOCK_M) programs (not S // BLOCK_M), and mask the rows ≥ S of the "
                    "last block in its loads and its store",
                )
        for bm in BLOCKS:
            if bm < S and ok == list(range(bm)):
                return (
                    f"queries 0–{bm - 1} are right in every head and every query from {bm} on is wrong: only the "
                    f"first block of {bm} queries was computed",
                    "launch triton.cdiv(S, BLOCK_M) programs along "
                    "the first axis of the grid, program_id(0) picking the block of queries",
                )
    return None


def _nan_cause(g, q, k, causal) -> tuple[str, str] | None:
    bad = ~torch.isfinite(g)
    if not bad.any():
        return None
    D = q.shape[3]
    rows = sorted({int(s) for s in bad.any(-1).nonzero()[:, 2]})
    top = float((q.double() @ k.double().transpose(-1, -2)).abs().max()) / math.sqrt(D)
    shown = ", ".join(map(str, rows[:6])) + (", ..." if len(rows) > 6 else "")
    return (
        f"queries {shown} of O are NaN or inf (the scores reach ±{top:.0f}): exp overflowed (e^88.7 is float32's "
        f"largest) or a row's sum l was 0 and O = 0/0",
        "start m at -inf and subtract the running max before every exp: p = exp(s − m_new), alpha = exp(m − "
        "m_new); every query sees at least key 0, so l > 0 after the first block",
    )


# ----------------------------------------------------------------------------------------------------------------
# The check
# ----------------------------------------------------------------------------------------------------------------


def check_flash_attention_kernel(
    flash_attention_kernel, flash_attention: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0
) -> CheckResult:
    """Check `flash_attention_kernel`: it computes softmax(q·kᵀ/√D + causal mask)·v for (B, H, S, D) inputs in
    float32, float16 and bfloat16, any S and any strides, streaming K and V in blocks (run in the interpreter, against
    SDPA in float64); compiled for sm_90 as each launch specialises it, it is FlashAttention: two tt.dot in the loop
    over key blocks, both on the tensor cores, float32 m, l and accumulator, and O its only store, after the loop."""
    if cases is None:
        cases = _default_cases()
    seen: list = []
    evidence: dict = {}
    result = run_check(
        f"{TASK}-flash_attention_kernel",
        _traced(flash_attention, seen),
        cases,
        expected=_expected,
        judge=_judge,
        rules=[
            _launches(flash_attention_kernel, seen),
            _NO_TORCH,
            _streams_keys(flash_attention_kernel, seen),
            _Compiled(flash_attention_kernel, seen, evidence),
        ],
        proves="flash_attention_kernel computes softmax(q·kᵀ/√D + causal mask)·v for (B, H, S, D) inputs in float32, "
        "float16 and bfloat16, any S and any strides, every program streaming K and V in blocks of keys (run "
        "in the interpreter, against scaled_dot_product_attention in float64); compiled for sm_90 as each "
        "launch specialises it, its TTIR has two tt.dot inside the scf.for over key blocks with m, l and the "
        "accumulator carried in float32, its PTX loop does both products on the tensor cores, and its only "
        "global store is O's tile, after the loop",
        hidden=hidden,
        next_step="O = softmax(q·kᵀ/√D + mask)·v: one program per block of queries and (batch, head), streaming "
        "blocks of keys with the online softmax of lesson 05",
    )
    _print_hardware(evidence)
    return result


# ----------------------------------------------------------------------------------------------------------------
# Hints: least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex11_flash_attention-flash_attention_kernel": (
        "Lesson 11 builds every piece on one head: a block of queries kept on the chip, a loop over blocks of keys "
        "with two tl.dot each, and the running max, sum and accumulator of lesson 05's online softmax.",
        "The grid has one program per block of BLOCK_M queries along its first axis and one per (batch, head) pair "
        "along its second; program_id(1) gives the batch by integer division by H and the head by the remainder. "
        "Every tensor is addressed through its own four strides.",
        "Masked scores must weigh nothing: keys at or past S, and with causal=True keys after the query, become minus "
        "infinity before the running max. The loop of a causal program can stop after the block holding its last "
        "query, and the first block always holds key 0, so no row's sum is zero.",
    ),
}


def warm_up() -> None:
    """Run by a grading forkserver once, before it forks the first ex11 kernel: the compiler's first start (LLVM,
    libdevice, the backends), paid here once instead of by every submission. A small kernel, in a throwaway cache."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        saved = os.environ.get(triton_compile.ENV_CACHE)
        os.environ[triton_compile.ENV_CACHE] = folder
        try:
            triton_compile.compile_kernel(
                _warm_up_kernel, {"x_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64}, "sm_90"
            )
        finally:
            os.environ.pop(triton_compile.ENV_CACHE) if saved is None else os.environ.__setitem__(
                triton_compile.ENV_CACHE, saved
            )
        triton_compile._MEMORY.clear()
        triton_compile._BY_CODE.clear()


def _warm_up_kernel(x_ptr, n, BLOCK: tl.constexpr):
    """x[i] = 2·x[i]: the smallest kernel that runs the whole compiler (`warm_up`)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
