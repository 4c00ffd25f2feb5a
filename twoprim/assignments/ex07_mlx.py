"""Checks for assignment ex07_mlx: the dot product, GEMM and attention on MLX arrays, counting MLX primitives, and
a short answer on lazy evaluation.

The learner's functions take and return MLX arrays. Every case builds fresh arrays for each call (MLX arrays can be
changed in place, so one call cannot disturb the next), runs the function, then traces it once more with
`mx.export_function` to see which primitives it builds: a rule such as "one GEMM" or "no built-in softmax" is
checked on that trace, whatever Python spelling produced it. Oracles convert the inputs to float64 (NumPy/torch).

Dtypes: float32 in every check; float64 in the visible checks (MLX has float64 on the CPU only, so float64 cases
always run on the CPU stream, also on a Mac); float16 in the hidden ones. MLX's CPU `exp` has float32 accuracy
even in float64 (about 1e-6 relative on [-10, 10], measured in lesson 07), so attention's float64 tolerance allows
for that.

Why this module is long: one assignment's checks on MLX (four graded functions and a short answer), with the MLX-to-
torch conversions the judges need, their messages and hints; split further, a check would sit apart from the
messages it gives.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from twoprim.core.cases import dtype_name
from twoprim.core.checks import ANSWERED, CallLog, Case, CheckResult, Mismatch, Rule, judge_values, run_check
from twoprim.topics import mlx as mlx_tools

if TYPE_CHECKING:  # MLX's types; at run time it may be missing
    import mlx.core as mx
    import mlx.nn as nn
else:
    try:
        import mlx.core as mx
        import mlx.nn as nn
    except ImportError:  # the package imports everywhere; the checks need MLX
        mx = nn = None

__all__ = [
    "MLX",
    "Function",
    "vector_cases",
    "gemm_cases",
    "attention_cases",
    "op_count_cases",
    "lazy_cases",
    "OP_COUNT_SUBJECTS",
    "LAZY_SCENARIO",
    "lazy_measurements",
    "check_mlx_dot",
    "check_mlx_gemm",
    "check_mlx_attention",
    "check_mlx_op_counts",
    "check_lazy_answer",
    "guard_vectors",
    "guard_gemm",
    "guard_attention",
    "guard_op_counts",
]

TASK = "ex07_mlx"


_FLOATING = ("float16", "bfloat16", "float32", "float64")
_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
MLX_EXP_REL_ERROR = 1e-6  # MLX's CPU exp on [-10, 10], float32 and float64 alike (lesson 07 measures it)


# ----------------------------------------------------------------------------------------------------------------
# Input guards: a clear error naming the shapes, never a silent broadcast
# ----------------------------------------------------------------------------------------------------------------


def _array(fn: str, name: str, value: Any, *, ndim: int | None = None, floating: bool = True):
    mlx_tools.need_mlx(TASK)
    if not isinstance(value, mx.array):
        kind = type(value).__name__
        if isinstance(value, torch.Tensor):
            hint = " (convert it with mx.array(t.numpy()) or twoprim.core.backends.to_mlx(t))"
        elif type(value).__module__.startswith("numpy"):
            hint = " (convert it with mx.array(...))"
        elif isinstance(value, (list, tuple, float, int)):
            hint = " (wrap it with mx.array(...))"
        else:
            hint = ""
        raise TypeError(f"{fn}: {name} must be an MLX array (mlx.core.array), got {kind}{hint}.")
    if ndim is not None and value.ndim != ndim:
        what = {1: "a 1-D vector", 2: "a 2-D matrix"}.get(ndim, f"{ndim}-D")
        raise ValueError(f"{fn}: {name} must be {what}, got shape {tuple(value.shape)} ({value.ndim}-D).")
    if floating and dtype_name(value.dtype) not in _FLOATING:
        raise TypeError(
            f"{fn}: {name} must be floating point (float16, bfloat16, float32 or float64), got "
            f"{dtype_name(value.dtype)}; convert it with {name}.astype(mx.float32)."
        )
    return value


def _same_dtype(fn: str, **arrays) -> None:
    items = list(arrays.items())
    n0, a0 = items[0]
    for name, a in items[1:]:
        if a.dtype != a0.dtype:
            raise TypeError(
                f"{fn}: {n0} is {dtype_name(a0.dtype)} but {name} is {dtype_name(a.dtype)}; convert one so both match."
            )


def _number(fn: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shape = getattr(value, "shape", None)
        shape = f" of shape {tuple(shape)}" if shape is not None else ""
        raise TypeError(f"{fn}: {name} must be a Python number (int or float), got {type(value).__name__}{shape}.")


def guard_vectors(fn: str, x: Any, w: Any) -> None:
    """x and w: 1-D floating MLX arrays of one length and dtype."""
    _array(fn, "x", x, ndim=1)
    _array(fn, "w", w, ndim=1)
    if x.shape != w.shape:
        raise ValueError(
            f"{fn}: x has shape {tuple(x.shape)}, w has shape {tuple(w.shape)}; a dot product needs "
            f"vectors of the same length (no broadcasting)."
        )
    _same_dtype(fn, x=x, w=w)


def guard_gemm(fn: str, alpha: Any, A: Any, B: Any, beta: Any, C: Any) -> None:
    """alpha, beta numbers; A (M, K), B (K, N), C (M, N), one floating dtype."""
    _number(fn, "alpha", alpha)
    _number(fn, "beta", beta)
    for name, value in (("A", A), ("B", B), ("C", C)):
        _array(fn, name, value, ndim=2)
    (M, K), (K2, N) = A.shape, B.shape
    if K != K2:
        raise ValueError(
            f"{fn}: A has shape {tuple(A.shape)} and B has shape {tuple(B.shape)}; A's columns (K = {K}) "
            f"must equal B's rows (K = {K2})."
        )
    if tuple(C.shape) != (M, N):
        raise ValueError(
            f"{fn}: A @ B has shape ({M}, {N}) but C has shape {tuple(C.shape)}; C must be exactly "
            f"(M, N) = ({M}, {N}) (no broadcasting)."
        )
    _same_dtype(fn, A=A, B=B, C=C)


def guard_attention(fn: str, q: Any, k: Any, v: Any, causal: Any) -> None:
    """q, k, v: (B, H, S, D) floating MLX arrays of one shape and dtype; causal a bool."""
    for name, value in (("q", q), ("k", k), ("v", v)):
        _array(fn, name, value, ndim=4)
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            f"{fn}: q has shape {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; all three must "
            f"be (B, H, S, D) with the same B, H, S and D."
        )
    _same_dtype(fn, q=q, k=k, v=v)
    if not isinstance(causal, bool):
        raise TypeError(f"{fn}: causal must be True or False, got {type(causal).__name__}.")


def guard_op_counts(fn: str, fun: Any, args: tuple) -> None:
    """fun callable; every argument an MLX array (the example inputs export_function traces with)."""
    mlx_tools.need_mlx(TASK)
    if not callable(fun):
        raise TypeError(
            f"{fn}: fun must be a function, got {type(fun).__name__}; pass the function itself, not its result."
        )
    for i, a in enumerate(args):
        if not isinstance(a, mx.array):
            raise TypeError(
                f"{fn}: argument {i + 1} after fun is {type(a).__name__}; mx.export_function traces "
                f"with MLX arrays only, so pass every example input as an mx.array."
            )


# ----------------------------------------------------------------------------------------------------------------
# Arguments as they appear in a check: values kept in float64, a fresh MLX array made for every call
# ----------------------------------------------------------------------------------------------------------------


class MLX:
    """One array argument of a case: exact values (float64 NumPy) and the MLX dtype to build it in.

    Printed by the checks as `MLX float32 array of shape (2, 3)`.
    """

    def __init__(self, values: np.ndarray, dtype: str):
        self.values, self.dtype = values, dtype

    @property
    def shape(self) -> tuple:
        return tuple(self.values.shape)

    def make(self):
        """A new MLX array with these values and dtype."""
        if self.dtype == "float64":
            return mx.array(self.values, dtype=mx.float64)
        return mx.array(self.values.astype(np.float32)).astype(getattr(mx, self.dtype))

    def torch(self) -> torch.Tensor:
        return torch.from_numpy(self.values)

    def __repr__(self) -> str:
        return f"{self.dtype} array of shape {self.shape}"


def _values(shape: tuple, dtype: str, rng: np.random.Generator, scale: float = 1.0) -> MLX:
    """Random normal values, rounded to `dtype` so the float64 oracle sees exactly what the learner gets."""
    v = rng.standard_normal(shape) * scale
    if dtype != "float64":
        mlx_tools.need_mlx(TASK)
        rounded = mx.array(v.astype(np.float32)).astype(getattr(mx, dtype)).astype(mx.float32)
        v = np.array(rounded).astype(np.float64)
    return MLX(v, dtype)


class Function:
    """The subject of an op-count case: builds a fresh (function, example arrays) pair for each call."""

    def __init__(self, name: str, description: str, build: Callable[[], tuple[Callable, tuple]]):
        self.name, self.description, self.build = name, description, build

    def __repr__(self) -> str:
        return f"`{self.name}`: {self.description}"


def _real(arg: Any) -> Any:
    return arg.make() if isinstance(arg, MLX) else arg


@dataclass
class _Record:
    """What one call of the learner's function did."""

    args: list
    out: Any = None
    counts: Counter | None = None  # primitives its trace builds
    trace_error: str | None = None  # why it could not be traced
    helpers: tuple = ()  # twoprim.topics.mlx helpers it called


class _Runner:
    """Wraps a learner's function for `run_check`: fresh arrays per call, float64 on the CPU stream, a trace."""

    def __init__(self, fn: Callable, *, trace: bool = True):
        self.fn, self.trace, self.last = fn, trace, None

    def wrapped(self) -> Callable:
        fn = self.fn
        if not callable(fn):
            return fn  # run_check explains that a function was expected

        @functools.wraps(fn)
        def call(*args, **kwargs):
            real = [_real(a) for a in args]
            record = _Record(real)
            self.last = record
            with _stream_for(args), mlx_tools.watching() as used:
                record.out = fn(*real, **kwargs)
            record.helpers = tuple(dict.fromkeys(used))
            if self.trace and mx is not None and isinstance(record.out, mx.array):
                record.counts, record.trace_error = _trace(fn, args, kwargs)
            return record.out

        return call


def _stream_for(args: Sequence) -> Any:
    """float64 runs on the CPU only: use the CPU stream for cases with float64 arrays."""
    if any(isinstance(a, MLX) and a.dtype == "float64" for a in args):
        return mx.stream(mx.cpu)
    return nullcontext()


def _trace(fn: Callable, args: Sequence, kwargs: dict) -> tuple[Counter | None, str | None]:
    """Primitives `fn` builds on these arguments (non-array arguments held fixed), or why it cannot be traced."""
    slots = [i for i, a in enumerate(args) if isinstance(a, MLX)]

    def traced(*arrays):
        full = [_real(a) for a in args]
        for i, arr in zip(slots, arrays, strict=True):
            full[i] = arr
        return fn(*full, **kwargs)

    try:
        with _stream_for(args):
            return mlx_tools.primitive_counts(traced, *[args[i].make() for i in slots]), None
    except Exception as err:  # noqa: BLE001 - reported to the learner by the rules
        return None, f"{type(err).__name__}: {err}"


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded)
# ----------------------------------------------------------------------------------------------------------------


def vector_cases(lengths: Sequence[int], dtypes: Sequence[str] = ("float32",), *, seed: int = 0) -> list[Case]:
    """(x, w) pairs of random vectors for every length × dtype."""
    rng = np.random.default_rng(seed)
    return [
        Case(f"length {n}, {dt}", (_values((n,), dt, rng), _values((n,), dt, rng))) for dt in dtypes for n in lengths
    ]


def gemm_cases(
    shapes: Sequence[tuple[int, int, int]],
    dtypes: Sequence[str] = ("float32",),
    *,
    scalars: Sequence[tuple[float, float]] = ((0.75, -1.5),),
    nan_c: bool = False,
    seed: int = 0,
) -> list[Case]:
    """(alpha, A (M, K), B (K, N), beta, C (M, N)) for every (M, N, K) × dtype, cycling through `scalars`.

    With `nan_c`, C is all NaN and beta is 0: BLAS semantics say C is then ignored, not multiplied by 0.
    """
    rng = np.random.default_rng(seed)
    cases = []
    for dt in dtypes:
        for i, (M, N, K) in enumerate(shapes):
            alpha, beta = scalars[i % len(scalars)]
            A, B = _values((M, K), dt, rng), _values((K, N), dt, rng)
            if nan_c:
                beta, C = 0.0, MLX(np.full((M, N), np.nan), dt)
            else:
                C = _values((M, N), dt, rng)
            note = ", C all NaN and beta = 0" if nan_c else ""
            cases.append(Case(f"M={M}, N={N}, K={K}, {dt}, alpha={alpha}, beta={beta}{note}", (alpha, A, B, beta, C)))
    return cases


def attention_cases(
    shapes: Sequence[tuple[int, int, int, int]],
    dtypes: Sequence[str] = ("float32",),
    *,
    causal: Sequence[bool] = (False, True),
    score_scale: float = 1.0,
    seed: int = 0,
) -> list[Case]:
    """(q, k, v) of shape (B, H, S, D) for every shape × dtype × causal.

    `score_scale` multiplies q and k: with 10, scores reach the hundreds and exp() of an unshifted score overflows
    (float32 above 88.7, float16 above 11.1), so only a stable softmax (subtract the row max) passes.
    """
    rng = np.random.default_rng(seed)
    cases = []
    for dt in dtypes:
        for B, H, S, D in shapes:
            for c in causal:
                q = _values((B, H, S, D), dt, rng, score_scale)
                k = _values((B, H, S, D), dt, rng, score_scale)
                v = _values((B, H, S, D), dt, rng)
                note = f", q and k × {score_scale:g} (large scores)" if score_scale != 1.0 else ""
                cases.append(Case(f"B={B}, H={H}, S={S}, D={D}, {dt}, causal={c}{note}", (q, k, v), {"causal": c}))
    return cases


# Functions whose primitives a learner's mlx_op_counts must count. Each builds its model afresh with a fixed seed.
def _seeded(seed: int):
    mx.random.seed(seed)
    return np.random.default_rng(seed)


def _arr(rng: np.random.Generator, *shape: int):
    return mx.array(rng.standard_normal(shape).astype(np.float32))


def _evaluated(model):
    mx.eval(model.parameters())
    return model


def _build_linear():
    rng = _seeded(1)
    layer = _evaluated(nn.Linear(8, 16))
    return (lambda x: layer(x)), (_arr(rng, 3, 8),)


def _build_mlp():
    rng = _seeded(2)
    model = _evaluated(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
    return (lambda x: model(x)), (_arr(rng, 3, 8),)


def _build_two_outputs():
    rng = _seeded(3)
    c = _arr(rng, 4, 5)  # a constant captured by the function

    def two_outputs(a, b):
        return a @ b, mx.addmm(c, a, b, alpha=2.0, beta=0.5)

    return two_outputs, (_arr(rng, 4, 6), _arr(rng, 6, 5))


def _build_mlp_no_bias_3d():
    rng = _seeded(4)
    model = _evaluated(nn.Sequential(nn.Linear(8, 32, bias=False), nn.GELU(), nn.Linear(32, 8, bias=False)))
    return (lambda x: model(x)), (_arr(rng, 2, 5, 8),)


def _build_lazy_linear():
    rng = _seeded(5)
    layer = nn.Linear(6, 3)  # parameters never evaluated: their initialisation is traced too
    return (lambda x: layer(x)), (_arr(rng, 4, 6),)


def _build_sdpa():
    rng = _seeded(6)

    def fast_attention(q, k, v):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask="causal")

    return fast_attention, tuple(_arr(rng, 1, 2, 5, 16) for _ in range(3))


def _build_conv():
    rng = _seeded(7)
    conv = _evaluated(nn.Conv2d(3, 4, kernel_size=3, padding=1))
    return (lambda x: conv(x)), (_arr(rng, 1, 6, 6, 3),)


def _build_train_step():
    rng = _seeded(8)
    model = _evaluated(nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 2)))

    def loss_fn(m, x, y):
        return nn.losses.mse_loss(m(x), y)

    loss_and_grad = nn.value_and_grad(model, loss_fn)

    def train_step(x, y):
        loss, grads = loss_and_grad(model, x, y)
        return [loss] + [g for _, g in _flatten(grads)]

    return train_step, (_arr(rng, 4, 5), _arr(rng, 4, 2))


def _flatten(tree):
    from mlx.utils import tree_flatten

    return tree_flatten(tree)


def _build_compiled():
    rng = _seeded(9)

    @mx.compile
    def block(x, w):
        h = x @ w
        return h * mx.sigmoid(1.702 * h) + 0.5

    return block, (_arr(rng, 4, 8), _arr(rng, 8, 8))


def _build_norm_embed():
    rng = _seeded(10)
    embed = nn.Embedding(11, 8)
    norm = nn.LayerNorm(8)
    proj = nn.Linear(8, 3)
    for m in (embed, norm, proj):
        _evaluated(m)

    def embed_norm_project(ids):
        return proj(norm(embed(ids)))

    return embed_norm_project, (mx.array(rng.integers(0, 11, size=(2, 5)).astype(np.int32)),)


OP_COUNT_SUBJECTS: dict[str, tuple[str, Callable]] = {
    "linear": ("nn.Linear(8, 16) on x (3, 8), parameters evaluated", _build_linear),
    "mlp": ("Linear(8, 16) → ReLU → Linear(16, 4) on x (3, 8), parameters evaluated", _build_mlp),
    "two_outputs": (
        "returns (a @ b, mx.addmm(c, a, b, alpha=2, beta=0.5)) with c a captured constant",
        _build_two_outputs,
    ),
    "mlp_no_bias_3d": (
        "Linear(8, 32, bias=False) → GELU → Linear(32, 8, bias=False) on x (2, 5, 8)",
        _build_mlp_no_bias_3d,
    ),
    "lazy_linear": ("nn.Linear(6, 3) whose parameters were never evaluated, on x (4, 6)", _build_lazy_linear),
    "sdpa": ("mx.fast.scaled_dot_product_attention, causal, on q, k, v (1, 2, 5, 16)", _build_sdpa),
    "conv": ("nn.Conv2d(3, 4, kernel_size=3, padding=1) on x (1, 6, 6, 3) (MLX is channels-last)", _build_conv),
    "train_step": (
        "a training step: nn.value_and_grad of an MLP's MSE loss, returning the loss and 4 gradients",
        _build_train_step,
    ),
    "compiled": ("an mx.compile'd block: x @ w, then h · sigmoid(1.702 h) + 0.5", _build_compiled),
    "norm_embed": (
        "nn.Embedding(11, 8) → nn.LayerNorm(8) → nn.Linear(8, 3) on int32 token ids (2, 5)",
        _build_norm_embed,
    ),
}


def op_count_cases(names: Sequence[str]) -> list[Case]:
    """One case per named subject of OP_COUNT_SUBJECTS: (Function, its example arrays as MLX placeholders)."""
    mlx_tools.need_mlx(TASK)
    cases = []
    for name in names:
        description, build = OP_COUNT_SUBJECTS[name]
        subject = Function(name, description, build)
        _, example = build()
        shown = tuple(MLX(np.zeros(a.shape), dtype_name(a.dtype)) for a in example)  # only for the "tried" line
        cases.append(Case(f"{name}: {description}", (subject,) + shown))
    return cases


# The short answer's scenario. The notebook shows exactly this code (a test keeps the two identical).
LAZY_SCENARIO = """\
mx.random.seed(7)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))  # parameters: never evaluated
x = mx.random.normal((8, 32))                                           # never evaluated either
y = model(x)                                                            # (8, 32) -> (8, 10)
"""

LAZY_QUESTIONS = {
    "pending_before_eval": "primitives waiting to run behind y when `y = model(x)` returns",
    "pending_after_eval": "primitives still waiting behind y after `mx.eval(y)`",
    "pending_with_parameters_evaluated": "primitives waiting behind y had `mx.eval(model.parameters())` run just "
    "before `y = model(x)`",
}


def _run_scenario() -> dict:
    ns = {"mx": mx, "nn": nn}
    exec(LAZY_SCENARIO, ns)  # noqa: S102 - the course's own scenario
    return ns


def lazy_measurements() -> dict[str, int]:
    """Measure the scenario's answers now, on this machine: pending primitives counted with mx.export_to_dot."""
    mlx_tools.need_mlx(TASK)
    ns = _run_scenario()
    before = sum(mlx_tools.pending_counts(ns["y"]).values())
    mx.eval(ns["y"])
    after = sum(mlx_tools.pending_counts(ns["y"]).values())
    ns = _run_scenario()
    mx.eval(ns["model"].parameters())
    y = ns["model"](ns["x"])
    with_parameters = sum(mlx_tools.pending_counts(y).values())
    return {
        "pending_before_eval": before,
        "pending_after_eval": after,
        "pending_with_parameters_evaluated": with_parameters,
    }


def lazy_cases(questions: Sequence[str]) -> list[Case]:
    """One case per question of LAZY_QUESTIONS named, labelled with the question."""
    return [Case(f"{q}: {LAZY_QUESTIONS[q]}", (), {"question": q}) for q in questions]


# ----------------------------------------------------------------------------------------------------------------
# Expected values (float64) and judging MLX arrays
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Expected:
    """An expected MLX result: float64 values, the dtype and shape it must come back in, and its tolerance."""

    values: torch.Tensor
    dtype: str
    atol: float
    rtol: float

    def __repr__(self) -> str:
        flat = self.values.reshape(-1)
        shown = ", ".join(f"{float(v):.6g}" for v in flat[:6]) + (", ..." if flat.numel() > 6 else "")
        return f"{self.dtype} MLX array of shape {tuple(self.values.shape)}: [{shown}]"


def _describe_value(value: Any) -> str:
    if mx is not None and isinstance(value, mx.array):
        return f"{dtype_name(value.dtype)} MLX array of shape {tuple(value.shape)}"
    if isinstance(value, torch.Tensor):
        return f"a torch {str(value.dtype)[6:]} tensor of shape {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a NumPy {value.dtype} array of shape {value.shape}"
    return f"{type(value).__name__} {value!r}"[:200]


def _to_torch(a) -> torch.Tensor:
    """An MLX array's values as a torch tensor of the same dtype (evaluates it)."""
    name = dtype_name(a.dtype)
    if name == "bfloat16":
        return torch.from_numpy(np.array(a.astype(mx.float32))).to(torch.bfloat16)
    return torch.from_numpy(np.array(a))


def _judge_array(got: Any, want: Expected, case: Case) -> str:
    shape = tuple(want.values.shape)
    if not isinstance(got, mx.array):
        raise Mismatch(
            f"{_describe_value(got)}, but the result should be a {want.dtype} MLX array of shape {shape}",
            next_step="return the MLX array your MLX operations built (not a torch tensor, NumPy array or "
            "Python number)",
        )
    if tuple(got.shape) != shape:
        raise Mismatch(
            f"shape {tuple(got.shape)}, expected shape {shape}",
            next_step="write the shape of every intermediate in a comment and check which step adds, "
            "drops or broadcasts a dimension",
        )
    if dtype_name(got.dtype) != want.dtype:
        raise Mismatch(
            f"dtype {dtype_name(got.dtype)}, expected {want.dtype} (the input's dtype)",
            next_step="keep the computation in the input's dtype: build any new array with "
            "dtype=x.dtype, and use Python numbers (they adopt the array's dtype)",
        )
    try:
        return judge_values(_to_torch(got), want.values, atol=want.atol, rtol=want.rtol)
    except Mismatch as bad:
        nan_c = len(case.args) == 5 and case.args[3] == 0 and bool(np.isnan(case.args[4].values).any())
        step = (
            (
                "beta is 0, so BLAS does not read C at all: 0 · NaN is NaN, so leave C out of the sum when beta == 0 "
                "(mx.addmm already does)"
            )
            if nan_c and "NaN" in bad.detail
            else bad.next_step
        )
        raise Mismatch(bad.detail.replace(" tensor of shape", " MLX array of shape", 1), next_step=step) from None


def _tiny(dtype: str) -> float:
    return {"float16": 6e-8, "bfloat16": 1e-38, "float32": 1e-38, "float64": 1e-300}[dtype]


def _expected_dot(x: MLX, w: MLX) -> Expected:
    xv, wv = x.torch(), w.torch()
    abs_sum = float((xv * wv).abs().sum())
    return Expected(torch.dot(xv, wv), x.dtype, 4 * _EPS[x.dtype] * abs_sum + _tiny(x.dtype), _EPS[x.dtype])


def _expected_gemm(alpha: float, A: MLX, B: MLX, beta: float, C: MLX) -> Expected:
    a, b = A.torch(), B.torch()
    out = alpha * (a @ b)
    bound = abs(alpha) * float((a.abs() @ b.abs()).max()) if a.numel() and b.numel() else 0.0
    if beta != 0:
        c = C.torch()
        out = out + beta * c
        bound += abs(beta) * float(c.abs().max())
    return Expected(out, A.dtype, 4 * _EPS[A.dtype] * bound + _tiny(A.dtype), _EPS[A.dtype])


def _expected_attention(q: MLX, k: MLX, v: MLX, causal: bool = False) -> Expected:
    """torch's scaled_dot_product_attention in float64, with a first-order bound on the rounding error.

    Scores s = q·kᵀ/√D carry an error up to δ = 3u·(|q|·|k|ᵀ)/√D (u: the dtype's unit roundoff, at least MLX's
    exp accuracy); softmax turns that into an error of at most 4·(1 − max p)·max δ·max|v| in a row of the output
    (none when one key takes all the weight), plus 4u·(p·|v|) for rounding p and p·v.
    """
    qt, kt, vt = q.torch(), k.torch(), v.torch()
    S, D = q.shape[-2], q.shape[-1]
    out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    scores = qt @ kt.transpose(-1, -2) / math.sqrt(D)
    spread = (qt.abs() @ kt.abs().transpose(-1, -2)) / math.sqrt(D)
    if causal:
        future = ~torch.ones(S, S, dtype=torch.bool).tril()
        scores, spread = scores.masked_fill(future, -math.inf), spread.masked_fill(future, 0.0)
    p = torch.softmax(scores, dim=-1)
    unit = max(_EPS[q.dtype], MLX_EXP_REL_ERROR)
    v_max = vt.abs().amax(dim=(-2, -1), keepdim=True)
    bound = 4 * (1 - p.amax(-1, keepdim=True)) * 3 * unit * spread.amax(-1, keepdim=True) * v_max + 4 * unit * (
        p @ vt.abs()
    )
    return Expected(out, q.dtype, float(bound.max()) + _tiny(q.dtype), 0.0)


# ----------------------------------------------------------------------------------------------------------------
# Rules, checked on what the learner's function built (its trace) and called
# ----------------------------------------------------------------------------------------------------------------


def _untraceable(record: _Record) -> str | None:
    if record.trace_error is None:
        return None
    if "eval" in record.trace_error:
        return (
            "it evaluates an array while building its result (mx.eval, .item(), print, np.array(...) or a "
            "conversion to torch inside the function), so MLX cannot trace it; return the lazy MLX array and "
            "let the caller evaluate it"
        )
    return f"MLX could not trace it ({record.trace_error})"


def _gemm_rule(runner: _Runner, wanted: int, what: str, next_step: str) -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        record = runner.last
        if record is None or record.counts is None:
            return _untraceable(record) if record is not None else None
        n = mlx_tools.gemm_count(record.counts)
        if n == wanted:
            return None
        built = mlx_tools.format_counts(record.counts, limit=8)
        if n == 0:
            return f"it built no GEMM primitive (Matmul or AddMM); its graph: {built}"
        enough = f"{wanted} {'is' if wanted == 1 else 'are'} enough"
        return f"it built {n} GEMM primitives where {enough}; its graph: {built}"

    return Rule(what, test, next_step)


def _no_torch() -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        if log.functions or log.aten:
            used = sorted(set(log.functions) | {f"aten.{op}" for op in log.aten})
            return f"it computed with torch ({', '.join(used[:6])}), not MLX"
        return None

    return Rule(
        "computed with MLX operations",
        test,
        "use MLX operations on the MLX arrays you are given (mx.matmul, @, mx.exp, ...), not torch",
    )


def _no_primitives(runner: _Runner, names: dict[str, str], what: str, next_step: str) -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        record = runner.last
        if record is None or record.counts is None:
            return None  # the GEMM rule explains why there is no trace
        hits = [f"{name} ({why})" for name, why in names.items() if record.counts.get(name)]
        return f"it built {', '.join(hits)}" if hits else None

    return Rule(what, test, next_step)


def _c_unchanged(runner: _Runner) -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        record = runner.last
        if record is None:
            return None
        original, after = case.args[4].values, _to_torch(record.args[4]).double().numpy()
        if not np.array_equal(original, after, equal_nan=True):
            return "C changed during the call: it was modified in place (C += ..., C[...] = ...)"
        return None

    return Rule(
        "returns a new array and leaves C unchanged",
        test,
        "build the result as a new array (mx.addmm returns one); never assign into C",
    )


def _no_course_helpers(runner: _Runner) -> Rule:
    def test(log: CallLog, case: Case) -> str | None:
        record = runner.last
        if record is not None and record.helpers:
            return f"it called {', '.join(record.helpers)}, the course's own counter (the one grading compares with)"
        return None

    return Rule(
        "count with mx.export_function yourself",
        test,
        "call mx.export_function(callback, fun, *args) with a callback that counts the primitive entries",
    )


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def check_mlx_dot(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `mlx_dot`: x·w on MLX arrays as one Matmul primitive, in the input's dtype."""
    mlx_tools.need_mlx(TASK)
    if cases is None:  # float16 too: every function keeps the input's dtype
        cases = vector_cases([3, 64, 1000], ["float32", "float64"]) + vector_cases([33], ["float16"], seed=1)
    runner = _Runner(fn)
    rules = [
        _no_torch(),
        _gemm_rule(
            runner,
            1,
            "one MLX dot product: a single Matmul primitive",
            "use MLX's dot product, mx.inner(x, w) or x @ w: one Matmul, not an element-wise product and a sum",
        ),
    ]
    return run_check(
        f"{TASK}-mlx_dot",
        runner.wrapped(),
        cases,
        expected=_expected_dot,
        judge=_judge_array,
        rules=rules,
        hidden=hidden,
        proves="x·w on MLX arrays as one Matmul primitive, in the input's dtype",
        next_step="mx.inner(x, w) (or x @ w) returns the 0-d array x·w",
    )


def check_mlx_gemm(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `mlx_gemm`: α·A·B + β·C on MLX arrays with one GEMM primitive, a new array, C ignored when β = 0."""
    mlx_tools.need_mlx(TASK)
    if cases is None:
        cases = (
            gemm_cases([(4, 3, 5), (32, 16, 64)], ["float32", "float64"], scalars=[(0.75, -1.5), (2.0, 0.5)])
            + gemm_cases([(3, 5, 4)], ["float32"], nan_c=True, seed=1)
            + gemm_cases([(5, 4, 6)], ["float16"], scalars=[(-2.0, 0.25)], seed=2)
        )  # float16 keeps its dtype
    runner = _Runner(fn)
    rules = [
        _no_torch(),
        _c_unchanged(runner),
        _gemm_rule(
            runner,
            1,
            "one GEMM primitive (AddMM or Matmul)",
            "mx.addmm(C, A, B, alpha=alpha, beta=beta) is the whole GEMM in one primitive",
        ),
    ]
    return run_check(
        f"{TASK}-mlx_gemm",
        runner.wrapped(),
        cases,
        expected=_expected_gemm,
        judge=_judge_array,
        rules=rules,
        hidden=hidden,
        proves="α·A·B + β·C on MLX arrays with one GEMM primitive, a new array, C ignored when β = 0",
        next_step="alpha * (A @ B) + beta * C, and when beta == 0 leave C out entirely (0 · NaN is NaN)",
    )


def check_mlx_attention(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `mlx_attention`: softmax(Q·Kᵀ/√D)·V on (B, H, S, D) MLX arrays with two Matmuls and a stable softmax,
    causal and not, equal to torch's scaled_dot_product_attention."""
    mlx_tools.need_mlx(TASK)
    if cases is None:
        cases = (
            attention_cases([(1, 2, 5, 8), (2, 3, 16, 4)], ["float32", "float64"])
            + attention_cases([(1, 2, 9, 8)], ["float32"], causal=(False,), score_scale=10.0, seed=1)
            # float16 keeps its dtype, and its exp overflows above 11.1: large scores in float16
            + attention_cases([(1, 2, 7, 8)], ["float16"], causal=(True,), score_scale=10.0, seed=2)
        )
    runner = _Runner(fn)
    rules = [
        _no_torch(),
        _no_primitives(
            runner,
            {
                "Softmax": "mx.softmax or nn.softmax, or mx.fast.scaled_dot_product_attention, which falls back to it "
                "on the CPU",
                "ScaledDotProductAttention": "mx.fast.scaled_dot_product_attention",
            },
            "attention written with matmuls and your own stable softmax",
            "compute the scores with @, then exp(s - max(s)) / sum(exp(s - max(s))) yourself, then @ v",
        ),
        _gemm_rule(
            runner,
            2,
            "two batched GEMMs: Q·Kᵀ and P·V (Matmul ×2, whatever B and H are)",
            "use q @ k.swapaxes(-1, -2) for all batches and heads at once, and one more @ for P·V; no Python "
            "loop over B or H",
        ),
    ]
    return run_check(
        f"{TASK}-mlx_attention",
        runner.wrapped(),
        cases,
        expected=_expected_attention,
        judge=_judge_array,
        rules=rules,
        hidden=hidden,
        proves="softmax(Q·Kᵀ/√D)·V on (B, H, S, D) MLX arrays with two Matmuls and a stable softmax, "
        "causal and not, equal to torch's scaled_dot_product_attention",
        next_step="scores (B, H, S, S) = q @ kᵀ / √D; causal: −inf above the diagonal; stable softmax "
        "along the last axis; then @ v",
    )


def _expected_counts(subject: Function, *shown) -> Counter:
    fun, args = subject.build()
    return mlx_tools.primitive_counts(fun, *args)


class _OpCountRunner(_Runner):
    """mlx_op_counts gets the real function and its example arrays built afresh from the case's Function."""

    def wrapped(self) -> Callable:
        fn = self.fn
        if not callable(fn):
            return fn

        @functools.wraps(fn)
        def call(subject: Function, *shown):
            fun, args = subject.build()
            record = _Record([fun, *args])
            self.last = record
            with mlx_tools.watching() as used:
                record.out = fn(fun, *args)
            record.helpers = tuple(dict.fromkeys(used))
            return record.out

        return call


def _judge_counts(got: Any, want: Counter, case: Case) -> str:
    if not isinstance(got, Mapping):
        raise Mismatch(
            f"{_describe_value(got)}, but mlx_op_counts returns a Counter of primitive names",
            next_step="return collections.Counter({'AddMM': 2, ...}) filled by your callback",
        )
    bad_keys = [k for k in got if not isinstance(k, str)]
    bad_values = [k for k, n in got.items() if isinstance(n, bool) or not isinstance(n, (int, np.integer))]
    if bad_keys or bad_values:
        raise Mismatch(
            f"a {type(got).__name__} with {'non-string keys ' + repr(bad_keys[:3]) if bad_keys else ''}"
            f"{'non-integer counts for ' + repr(bad_values[:3]) if bad_values else ''}",
            next_step="key by the entry's 'name' (a string), and count with integers",
        )
    got_c = Counter({k: int(n) for k, n in got.items() if n})
    if got_c == want:
        return ""
    missing = want - got_c
    extra = got_c - want
    lines = [f"{mlx_tools.format_counts(got_c, limit=12)}"]
    if missing:
        lines.append(f"  missing:  {mlx_tools.format_counts(missing)}")
    if extra:
        lines.append(f"  extra:    {mlx_tools.format_counts(extra)}")
    hint = "count one per entry whose entry['type'] == 'primitive', keyed by entry['name']"
    if set(extra) & {"inputs", "outputs", "constants", "keyword_inputs", "primitive"}:
        hint = (
            "the callback also sees entries for the inputs, outputs and constants: count only those whose "
            "entry['type'] == 'primitive', by entry['name']"
        )
    elif any(k.startswith("Compiled") for k in extra) or {"Copy", "Sum"} & set(extra):
        hint = (
            "those are the names of a pending graph (mx.export_to_dot after running fun): trace fun with "
            "mx.export_function instead, which never runs it, sees through mx.compile and calls reductions "
            "'Reduce'"
        )
    elif got_c and sum(got_c.values()) == 2 * sum(want.values()):
        hint = "every primitive is counted twice: trace the function once, with one callback"
    elif not got_c:
        hint = (
            "nothing was counted: pass your callback as the first argument of mx.export_function(callback, fun, *args)"
        )
    raise Mismatch("\n".join(lines), next_step=hint)


def check_mlx_op_counts(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `mlx_op_counts`: primitive counts equal to what mx.export_function reports, measured now on the same
    functions."""
    mlx_tools.need_mlx(TASK)
    cases = cases if cases is not None else op_count_cases(["linear", "mlp", "two_outputs"])
    runner = _OpCountRunner(fn, trace=False)
    return run_check(
        f"{TASK}-mlx_op_counts",
        runner.wrapped(),
        cases,
        expected=_CountsOracle(),
        judge=_judge_counts,
        rules=[_no_course_helpers(runner)],
        hidden=hidden,
        proves="primitive counts equal to what mx.export_function reports, measured now on the same functions",
        next_step="count the entries with entry['type'] == 'primitive' by entry['name']",
    )


class _CountsOracle:
    """Expected counts, measured at check time with twoprim.topics.mlx (the course's ground truth)."""

    def __call__(self, subject: Function, *shown) -> Counter:
        return _PrintableCounter(_expected_counts(subject))


class _PrintableCounter(Counter):
    def __repr__(self) -> str:
        return f"Counter({mlx_tools.format_counts(self)}), measured now with mx.export_function"


def _judge_answer(got: Any, want: int, case: Case) -> str:
    question = case.kwargs["question"]
    if not isinstance(got, Mapping):
        raise Mismatch(
            f"lazy_answer() returned {_describe_value(got)}; it returns a dict with the keys {list(LAZY_QUESTIONS)}",
            next_step="return {'pending_before_eval': ..., 'pending_after_eval': ..., "
            "'pending_with_parameters_evaluated': ...} with whole numbers",
        )
    for key in LAZY_QUESTIONS:  # the form of every part, so that no hidden point is lost to a typo
        if key not in got:
            raise Mismatch(
                f"a dict without the key {key!r} (its keys: {sorted(map(str, got))})",
                next_step=f"add the key {key!r}: the number of {LAZY_QUESTIONS[key]}",
            )
        value = got[key]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise Mismatch(
                f"{key} = {value!r}, but each answer is a count: a whole number (an int), 0 or more",
                next_step="count the primitives and write the number, e.g. 12",
            )
    value = got[question]
    if int(value) != want:
        raise Mismatch(
            f"{question} = {int(value)}",
            next_step="build the scenario in a new cell and count the pending primitives behind y with "
            "mx.export_to_dot (lesson 07: looking at the graph); remember that the parameters "
            "and x are lazy too",
        )
    return ""


class _LazyOracle:
    def __init__(self):
        self.measured: dict[str, int] | None = None

    def __call__(self, question: str) -> int:
        if self.measured is None:
            self.measured = lazy_measurements()
        return self.measured[question]


def check_lazy_answer(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `lazy_answer`: its counts of pending MLX nodes against the graph measured now (visible: one measured, the
    rest by form)."""
    mlx_tools.need_mlx(TASK)
    proves = "the numbers agree with the pending graph measured now with mx.export_to_dot"
    if cases is None:  # visible: one value measured, the other two read for their form only
        cases = lazy_cases(["pending_after_eval"])
        unchecked = [q for q in LAZY_QUESTIONS if q != "pending_after_eval"]
        proves = (
            f"pending_after_eval agrees with the pending graph measured now with mx.export_to_dot; "
            f"{' and '.join(unchecked)}: {ANSWERED} (`./course selfgrade {TASK}`) or when your work is graded "
            f"(only their form was checked here: whole numbers, 0 or more)"
        )
    if callable(fn):
        answer = fn

        @functools.wraps(answer)
        def ask(question: str):
            return answer()
    else:
        ask = fn
    return run_check(
        f"{TASK}-lazy_answer",
        ask,
        cases,
        expected=_LazyOracle(),
        judge=_judge_answer,
        hidden=hidden,
        proves=proves,
        next_step="count the pending primitives behind y with mx.export_to_dot",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex07_mlx-mlx_dot": (
        "MLX has its own dot product; the check wants exactly one `Matmul` primitive, not a `Multiply` and a sum.",
        "Two (n,) vectors give a 0-d array: `mx.inner`, `mx.matmul` and `@` each do it in one primitive.",
        "Return the lazy result as it is: no `mx.eval`, `.item()` or `print` inside the function.",
    ),
    "ex07_mlx-mlx_gemm": (
        "Two cases: beta == 0, where C must not be read at all, and every other beta.",
        "The general case is one call: `mx.addmm` takes C, A, B and the keyword arguments alpha and beta, and "
        "returns a new array. Never write into C.",
        "For beta == 0, scale the plain product (M, K) @ (K, N) → (M, N) by alpha and leave C out entirely, since "
        "0·NaN is NaN.",
    ),
    "ex07_mlx-mlx_attention": (
        "The same steps as attention in torch: scores, scale by 1/√D, the causal mask, your own stable softmax, "
        "the weighted sum of v; two `@` in all.",
        "`k.swapaxes(-1, -2)` is (B, H, D, S), so q @ it is (B, H, S, S). For causal, compare `mx.arange(S)` as a "
        "column with itself as a row to get an (S, S) boolean, and let `mx.where` put −inf where a key comes after "
        "the query.",
        "Stable softmax: subtract each row's maximum (`max` with `axis=-1, keepdims=True`), `mx.exp`, divide by "
        "the row sum. Then weights (B, H, S, S) @ v (B, H, S, D).",
    ),
    "ex07_mlx-mlx_op_counts": (
        "Evaluate nothing: `mx.export_function` takes a callback, the function and its example arguments; it traces "
        "the function and calls the callback once per entry of the graph.",
        "Make a `Counter` before tracing, and let a callback defined inside your function add to it.",
        "Count only the entries whose 'type' is 'primitive', under their 'name'; return the Counter once "
        "`export_function` has returned.",
    ),
    "ex07_mlx-lazy_answer": (
        "Measure in a new cell: run the scenario's four lines again, then export the graph behind y "
        "(`mx.export_to_dot`, as lesson 07 does) and count its primitive nodes.",
        "After `mx.eval(y)` nothing is pending behind y. With `mx.eval(model.parameters())` before "
        "`y = model(x)`, the parameters' random initialisation has already run; without it, it is pending too.",
        "A primitive with several outputs counts once: count primitive nodes, not arrays. Write the three whole "
        "numbers into the dict `lazy_answer` returns.",
    ),
}
