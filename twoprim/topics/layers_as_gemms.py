"""Layers as GEMMs (lesson 03; lesson 08 reads its transformer block too): which GEMMs a layer runs, their (M, N, K)
and FLOPs, and how much of a model's work they are. How a GEMM's shape sets its speed is lesson 08's
(`topics.gemm_shapes`).

Notation: a GEMM multiplies A (M, K) by B (K, N) into C (M, N) and costs 2·M·N·K FLOPs (one multiply and one add per
term). A batched GEMM (`bmm`) runs `batch` such products in one call.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from twoprim.core.record import CallLog, FlopRule, count_other_flops, record_calls
from twoprim.topics.plots import format_table

# Lesson 08 (and lesson 03's tables) as released read these as `layers.X`: they moved to lesson 08's module and
# to the shared plots, and still resolve here, imported on first use.
MOVED = {
    **dict.fromkeys(
        ["h200", "arithmetic_intensity", "device_tflops", "gemm_sweep", "round_mantissa", "relative_error"],
        "twoprim.topics.gemm_shapes",
    ),
    **dict.fromkeys(["format_table", "sweep_plot", "bars"], "twoprim.topics.plots"),
}

__all__ = [
    "Gemm",
    "gemm_mnk",
    "gemms_of",
    "record_gemms",
    "FlopShare",
    "flop_share",
    "OTHER_FLOPS_PER_ELEMENT",
    "time_share",
    "op_tree",
    "TransformerBlock",
    "GemmRow",
    "transformer_gemms",
    *MOVED,
]


# ----------------------------------------------------------------------------------------------------------------
# What a recorded GEMM op was: (batch, M, N, K)
# ----------------------------------------------------------------------------------------------------------------

_ADDS_C_FIRST = {"addmm", "addmv", "addbmm", "baddbmm", "addr", "_addmm_activation"}


@dataclass(frozen=True)
class Gemm:
    """One dot/GEMV/GEMM ATen op as a GEMM: `batch` products of A (M, K) @ B (K, N)."""

    op: str
    batch: int
    M: int
    N: int
    K: int

    @property
    def flops(self) -> int:
        """2·batch·M·N·K: one multiply and one add per term."""
        return 2 * self.batch * self.M * self.N * self.K

    def __str__(self) -> str:
        times = f"{self.batch} × " if self.batch != 1 else ""
        return f"{self.op} {times}({self.M}, {self.K}) @ ({self.K}, {self.N})"


def gemm_mnk(op: str, shapes: Sequence[Sequence[int]]) -> Gemm:
    """Read a recorded GEMM-family op (name and operand shapes, as in `CallLog.gemms`) as (batch, M, N, K).

    `mv` is a GEMM with N = 1, `dot` one with M = N = 1, `outer` one with K = 1; `addbmm` sums its batch into one
    (M, N) result, so it is one GEMM whose K is batch·K.
    """
    shapes = [tuple(s) for s in shapes]
    if op in _ADDS_C_FIRST:
        shapes = shapes[1:]  # the first operand is the C that is added
    a = shapes[0]
    b = shapes[1] if len(shapes) > 1 else tuple[int, ...]()  # (no second operand: an empty shape)
    if op in ("dot", "vdot"):
        return Gemm(op, 1, 1, 1, a[0])
    if op in ("outer", "ger", "addr"):
        return Gemm(op, 1, a[0], b[0], 1)
    if op == "addbmm":
        return Gemm(op, 1, a[1], b[2], a[0] * a[2])
    # mm, addmm, mv, addmv, bmm, baddbmm, matmul, linear: A (..., M, K) or (K,), B (..., K, N) or (K,)
    K = a[-1]
    M = a[-2] if len(a) >= 2 else 1
    N = b[-1] if len(b) >= 2 else 1
    if op == "linear":  # aten.linear(x, W): W is (N, K)
        N = b[0] if b else 1
        M = math.prod(a[:-1]) if len(a) >= 2 else 1
        return Gemm(op, 1, M, N, K)
    batch_dims = torch.broadcast_shapes(a[:-2] if len(a) > 2 else (), b[:-2] if len(b) > 2 else ())
    return Gemm(op, math.prod(batch_dims), M, N, K)


def gemms_of(log: CallLog) -> list[Gemm]:
    """Every GEMM-family op a `record_calls()` block ran, in order, as `Gemm`s."""
    return [gemm_mnk(op, shapes) for op, shapes in log.gemms]


def record_gemms(fn: Callable, *args, **kwargs) -> list[Gemm]:
    """Run `fn(*args, **kwargs)` without autograd and return the GEMMs it ran."""
    with torch.no_grad(), record_calls() as log:
        fn(*args, **kwargs)
    return gemms_of(log)


# ----------------------------------------------------------------------------------------------------------------
# The share of FLOPs in GEMMs
# ----------------------------------------------------------------------------------------------------------------

# FLOPs per output element for the ops FlopCounterMode does not count. These are estimates with a stated rule:
# every element-wise op (torch tags it `pointwise`) costs 1 per output element, exp and tanh included, so they are
# a lower bound; softmax is max, subtract, exp, sum and divide (5); layer norm is mean, subtract, square, mean,
# normalise, scale and shift (≈ 8); a reduction costs 1 per input element. Views, copies, concatenations, gathers
# and tensor creation move data and cost 0 FLOPs.
OTHER_FLOPS_PER_ELEMENT = {
    "_softmax": 5,
    "_log_softmax": 5,
    "native_layer_norm": 8,
    "native_group_norm": 8,
    "native_batch_norm": 8,
    "_native_batch_norm_legit_no_training": 8,
}
FLOP_RULE = FlopRule(
    elementwise=None,  # every op torch tags pointwise
    reductions=frozenset(
        {
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "var",
            "std",
            "var_mean",
            "linalg_vector_norm",
            "norm",
            "prod",
            "logsumexp",
            "aminmax",
        }
    ),
    fused=OTHER_FLOPS_PER_ELEMENT,
    free=frozenset(
        {"clone", "_to_copy", "copy_", "fill_", "zero_", "lift_fresh", "lift_fresh_copy"}
    ),  # pointwise-tagged copies
)


@dataclass
class FlopShare:
    """FLOPs of one forward pass: GEMM ops counted by FlopCounterMode, every other op estimated (see
    `OTHER_FLOPS_PER_ELEMENT`); `moved` lists the ops counted as 0 FLOPs (data movement) with their call counts."""

    gemm: dict
    other: dict
    moved: dict = field(default_factory=dict)

    @property
    def gemm_total(self) -> int:
        return sum(self.gemm.values())

    @property
    def other_total(self) -> int:
        return sum(self.other.values())

    @property
    def share(self) -> float:
        """Fraction of all FLOPs that ran inside GEMM ops."""
        total = self.gemm_total + self.other_total
        return self.gemm_total / total if total else 0.0

    def table(self) -> str:
        total = self.gemm_total + self.other_total
        rows = [
            (f"GEMM  {op}", f"{n:,}", f"{n / total:.2%}") for op, n in sorted(self.gemm.items(), key=lambda kv: -kv[1])
        ]
        rows += [
            (f"other {op}", f"{n:,}", f"{n / total:.2%}") for op, n in sorted(self.other.items(), key=lambda kv: -kv[1])
        ]
        rows.append(("total", f"{total:,}", "100.00%"))
        return format_table(rows, ("op", "FLOPs", "share"))


def flop_share(fn: Callable, *args, **kwargs) -> FlopShare:
    """Run `fn(*args, **kwargs)` once without autograd; FLOPs in GEMMs (FlopCounterMode) vs all other ops."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter, count_other_flops(FLOP_RULE) as other:
        fn(*args, **kwargs)
    gemm = {getattr(op, "__name__", str(op)): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return FlopShare(gemm, dict(other.flops), dict(other.zero))


@contextlib.contextmanager
def _quiet_stderr():
    """Hide what C++ writes to stderr (the profiler prints two trace lines per run) for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def op_tree(
    fn: Callable,
    *args,
    max_depth: int = 2,
    skip: Iterable[str] = ("aten::as_strided", "aten::resolve_conj", "aten::empty", "aten::empty_strided"),
) -> str:
    """The ATen ops `fn(*args)` runs, as torch.profiler sees them: nested calls indented, with input shapes."""
    skip = set(skip)
    with (
        torch.no_grad(),
        _quiet_stderr(),
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof,
    ):
        fn(*args)
    lines = []

    def walk(event, depth):
        if event.name in skip or depth > max_depth:
            return
        shapes = [list(s) for s in event.input_shapes if s]
        lines.append(f"{'    ' * depth}{event.name}  {shapes}")
        for child in event.cpu_children:
            walk(child, depth + 1)

    events = prof.events()
    assert events is not None  # (None only before the profile has run)
    for event in events:
        if event.cpu_parent is None:
            walk(event, 0)
    return "\n".join(lines)


# Calls whose whole time counts as GEMM time: the GEMM ops, and the torch-level calls that exist only to run one
# (linear, matmul, einsum), with everything inside them: transposes, the copies matmul makes of non-contiguous inputs.
_GEMM_EVENTS = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::addbmm",
    "aten::mv",
    "aten::addmv",
    "aten::dot",
    "aten::_addmm_activation",
    "aten::convolution",
    "aten::linear",
    "aten::matmul",
    "aten::einsum",
}


def time_share(fn: Callable, *args, repeats: int = 5) -> dict:
    """CPU time of `fn(*args)` split into GEMM ops and everything else, measured with torch.profiler.

    Returns {"gemm_s", "other_s", "share", "by_op"}: seconds per call inside GEMM calls (`linear`, `matmul`, `mm`,
    `addmm`, `bmm`, ... with everything they run inside, e.g. addmm's bias copy), seconds in every other op (self
    time), the GEMM fraction, and self seconds per op name. Python time between ops is not counted.
    """
    with torch.no_grad():
        fn(*args)  # warm-up: first calls allocate and pick kernels
        with _quiet_stderr(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(repeats):
                fn(*args)
    recorded = prof.events()
    assert recorded is not None  # (None only before the profile has run)
    events = list(recorded)
    gemm_us = 0.0
    inside_gemm: set[int] = set()
    for e in events:
        if e.name in _GEMM_EVENTS and e.id not in inside_gemm:
            gemm_us += e.cpu_time_total
            stack = list(e.cpu_children)
            while stack:
                child = stack.pop()
                inside_gemm.add(child.id)
                stack.extend(child.cpu_children)
    by_op: Counter = Counter()
    for e in events:
        by_op[e.name.removeprefix("aten::")] += e.self_cpu_time_total / 1e6 / repeats
    total_us = sum(e.self_cpu_time_total for e in events)
    other_us = max(total_us - gemm_us, 0.0)
    return {
        "gemm_s": gemm_us / 1e6 / repeats,
        "other_s": other_us / 1e6 / repeats,
        "share": gemm_us / total_us if total_us else 0.0,
        "by_op": dict(by_op),
    }


# ----------------------------------------------------------------------------------------------------------------
# A small transformer block whose GEMMs can be listed by hand
# ----------------------------------------------------------------------------------------------------------------


class TransformerBlock(nn.Module):
    """Pre-norm transformer block on x (B, S, E): x + attention(LN(x)), then x + MLP(LN(x)).

    Written out op by op (no fused attention kernel) so that every GEMM is visible: a fused Q/K/V projection,
    Q·Kᵀ and weights·V as batched GEMMs over B·H heads, the output projection, and the two MLP layers.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(
                f"d_model={d_model} is not a multiple of n_heads={n_heads}: every head gets "
                f"d_model / n_heads features, which must be a whole number."
            )
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)  # weight (3E, E): Q, K and V in one GEMM
        self.proj = nn.Linear(d_model, d_model)  # weight (E, E)
        self.up = nn.Linear(d_model, d_ff)  # weight (d_ff, E)
        self.down = nn.Linear(d_ff, d_model)  # weight (E, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, E = x.shape
        H, D = self.n_heads, self.head_dim
        qkv = self.qkv(self.ln1(x))  # (B·S, E) @ (E, 3E) -> (B, S, 3E)
        q, k, v = qkv.view(B, S, 3, H, D).permute(2, 0, 3, 1, 4)  # each (B, H, S, D)
        scores = (q @ k.transpose(-2, -1)) * D**-0.5  # B·H × (S, D) @ (D, S) -> (B, H, S, S)
        heads = scores.softmax(dim=-1) @ v  # B·H × (S, S) @ (S, D) -> (B, H, S, D)
        x = x + self.proj(heads.transpose(1, 2).reshape(B, S, E))  # (B·S, E) @ (E, E)
        return x + self.down(F.gelu(self.up(self.ln2(x))))  # (B·S, E) @ (E, d_ff), then @ (d_ff, E)


@dataclass(frozen=True)
class GemmRow:
    """One GEMM of a model: `count` products of A (M, K) @ B (K, N) (count > 1: one per head, a batched GEMM)."""

    name: str
    count: int
    M: int
    N: int
    K: int

    @property
    def flops(self) -> int:
        return 2 * self.count * self.M * self.N * self.K


def transformer_gemms(
    batch: int, seq: int, d_model: int, n_heads: int, d_ff: int, vocab: int | None = None
) -> list[GemmRow]:
    """Every GEMM of one `TransformerBlock` forward on (batch, seq, d_model), in the order it runs; with `vocab`,
    also the language-model head that turns each token's vector into vocabulary logits."""
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not a multiple of n_heads={n_heads}.")
    rows, D = batch * seq, d_model // n_heads
    out = [
        GemmRow("Q/K/V projection", 1, rows, 3 * d_model, d_model),
        GemmRow("scores Q·Kᵀ", batch * n_heads, seq, seq, D),
        GemmRow("weights·V", batch * n_heads, seq, D, seq),
        GemmRow("output projection", 1, rows, d_model, d_model),
        GemmRow("MLP up", 1, rows, d_ff, d_model),
        GemmRow("MLP down", 1, rows, d_model, d_ff),
    ]
    if vocab:
        out.append(GemmRow("LM head", 1, rows, vocab, d_model))
    return out


def __getattr__(name: str):
    """A name that moved to lesson 08's module or the shared plots (MOVED), from there."""
    if name in MOVED:
        import importlib

        return getattr(importlib.import_module(MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
