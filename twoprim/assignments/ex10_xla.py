"""Checks for assignment ex10_xla: count the ops of HLO and StableHLO modules from their structure, read a
dot_general as a GEMM (batch, M, N, K) and its FLOPs, and count the GEMMs of a model's forward pass and gradient.

Nothing here holds a count. The texts a check hands `count_hlo_ops` are lowered and compiled by the installed JAX
when the check runs, and every expected value is measured then by the grader's own code (`twoprim.topics.xla`): on
another JAX release, where XLA fuses differently or a jaxpr gains an op, the checks stay right.

The functions the checks trace are defined here (`SUBJECTS`), each with a one-line description so a failure says
what was tried. Visible checks use the lesson's MLP and attention scores; the hidden checks in the solution notebook
name other subjects (a scan, a layer norm, a convolution, nested jitted functions, a checkpointed block).

Why this module is long: one assignment's checks (four graded functions), with the functions they trace, the texts
they lower and compile, and a message for each way a wrong answer is known to go wrong; split further, a check would
sit apart from the subjects and messages it needs.
"""

from __future__ import annotations

import itertools
import numbers
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from twoprim.core.checks import Case, CheckResult, Mismatch, no_grader_calls, run_check
from twoprim.core.counting import as_counter, difference
from twoprim.topics import xla as xla_tools

# isort: split
# jax after xla_tools, which puts JAX on the CPU
import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
    "SUBJECTS",
    "Subject",
    "Module",
    "module_cases",
    "dims_cases",
    "model_cases",
    "check_count_hlo_ops",
    "check_dot_general_gemm",
    "check_dot_general_flops",
    "check_gemm_counts",
    "guard_text",
    "guard_dims",
]

TASK = "ex10_xla"


# ----------------------------------------------------------------------------------------------------------------
# The functions the checks trace: each builds (f, example arrays) afresh, float32, seeded-free (zeros: only shapes
# matter to a trace)
# ----------------------------------------------------------------------------------------------------------------


def _zeros(*shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    return tuple(np.zeros(s, np.float32) for s in shapes)


def _mlp(x, w1, b1, w2, b2):
    return jnp.maximum(x @ w1 + b1, 0) @ w2 + b2  # (M, K) @ (K, H) -> (M, H); (M, H) @ (H, N) -> (M, N)


def _scores(q, k):
    return jnp.einsum("bhqd,bhkd->bhqk", q, k)  # (B, H, S, D) · (B, H, S, D) -> (B, H, S, S)


def _attention(x, wq, wk, wv, wo):
    q, k, v = x @ wq, x @ wk, x @ wv  # (B, S, E) @ (E, E) -> (B, S, E)
    s = jnp.einsum("bqe,bke->bqk", q, k) / np.sqrt(x.shape[-1])
    return jnp.einsum("bqk,bke->bqe", jax.nn.softmax(s, axis=-1), v) @ wo


def _mlp3(x, w1, w2, w3):
    return jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3


@jax.jit
def _block(h, w):
    return jax.nn.relu(h @ w)


def _nested(x, w1, w2):
    return _block(_block(x, w1), w2)  # one jitted block, called twice


@jax.jit
def _tanh_layer(h, w):
    return jnp.tanh(h @ w)


def _jitted(x, w1, w2, w3):
    return _tanh_layer(_tanh_layer(x, w1), w2) @ w3  # a jitted layer called twice, then a plain projection


def _loop(x, w, v):
    return lax.fori_loop(0, 4, lambda i, h: jnp.tanh(h @ w), x) @ v  # 4 steps of one body, then a projection


def _remat(x, w1, w2):
    return jax.checkpoint(lambda h: jnp.tanh(h @ w1) @ w2)(x)  # recomputed in the backward pass


def _layer_norm(x, g, w):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return ((x - mu) / jnp.sqrt(var + 1e-5) * g) @ w


def _scan(x, w):
    def step(h, _):
        return jnp.tanh(h @ w), None

    return lax.scan(step, x, None, length=3)[0]


def _conv(x, k, w):
    y = lax.conv_general_dilated(x, k, (1, 1), "SAME")  # (N, C, H, W) * (O, C, 3, 3) -> (N, O, H, W)
    return y.reshape(y.shape[0], -1) @ w


class Subject:
    """A function the checks trace: its name, what it computes, and its example arguments' shapes."""

    def __init__(self, name: str, description: str, fn: Callable, shapes: Sequence[tuple[int, ...]]):
        self.name, self.description, self.fn, self.shapes = name, description, fn, tuple(map(tuple, shapes))

    def build(self) -> tuple[Callable, tuple[np.ndarray, ...]]:
        return self.fn, _zeros(*self.shapes)

    def __repr__(self) -> str:
        return f"`{self.name}`: {self.description}, arguments {', '.join(str(s) for s in self.shapes)}"


SUBJECTS: dict[str, Subject] = {
    s.name: s
    for s in [
        Subject("mlp", "relu(x @ w1 + b1) @ w2 + b2 (lesson 10)", _mlp, [(8, 16), (16, 32), (32,), (32, 4), (4,)]),
        Subject("scores", "einsum('bhqd,bhkd->bhqk', q, k) (lesson 10)", _scores, [(2, 3, 5, 8), (2, 3, 5, 8)]),
        Subject(
            "attention",
            "single-head attention: x @ wq, x @ wk, x @ wv, softmax(q kᵀ/√E) v, then @ wo",
            _attention,
            [(2, 5, 8)] + [(8, 8)] * 4,
        ),
        Subject("mlp3", "tanh(tanh(x @ w1) @ w2) @ w3, no biases", _mlp3, [(6, 10), (10, 12), (12, 12), (12, 3)]),
        Subject(
            "nested",
            "a jitted block relu(h @ w) called twice (a nested jaxpr, jax.nn.relu inside)",
            _nested,
            [(4, 8), (8, 8), (8, 8)],
        ),
        Subject(
            "remat",
            "jax.checkpoint(tanh(x @ w1) @ w2): the backward pass recomputes the block",
            _remat,
            [(4, 8), (8, 8), (8, 8)],
        ),
        Subject("layer_norm", "layer norm of x (scale g), then @ w", _layer_norm, [(4, 8), (8,), (8, 6)]),
        Subject("scan", "lax.scan of h = tanh(h @ w), 3 steps (a loop: HLO while)", _scan, [(4, 8), (8, 8)]),
        Subject(
            "conv",
            "a 3×3 convolution (lax.conv_general_dilated), flattened, then @ w",
            _conv,
            [(2, 3, 6, 6), (4, 3, 3, 3), (144, 5)],
        ),
        Subject(
            "jitted",
            "a jitted layer tanh(h @ w) called twice, then @ w3 (each call a `jit` equation holding a jaxpr)",
            _jitted,
            [(4, 6), (6, 6), (6, 6), (6, 3)],
        ),
        Subject(
            "loop",
            "lax.fori_loop of h = tanh(h @ w), 4 steps, then @ v (a `scan` in the jaxpr, a while loop in HLO)",
            _loop,
            [(3, 5), (5, 5), (5, 2)],
        ),
    ]
}


def _grad(subject: Subject) -> Subject:
    g = xla_tools.grad_of_sum(subject.fn, len(subject.shapes) - 1)
    return Subject(
        f"grad {subject.name}", f"the gradient of Σ {subject.name} with respect to its parameters", g, subject.shapes
    )


# ----------------------------------------------------------------------------------------------------------------
# Input guards: a clear error naming what is wrong
# ----------------------------------------------------------------------------------------------------------------


def guard_text(fn: str, text: Any) -> str:
    """text is an HLO module's text (`HloModule ...`) or a StableHLO module's (`module @... {`); returns its kind."""
    if not isinstance(text, str):
        what = type(text).__name__
        hint = ""
        if hasattr(text, "as_text"):
            hint = " (call .as_text() on it first)"
        elif hasattr(text, "jaxpr"):
            hint = " (a jaxpr: pass jax.jit(f).lower(*args).as_text() instead)"
        raise TypeError(f"{fn}: text must be the text of an HLO or StableHLO module (a str), got {what}{hint}.")
    try:
        return xla_tools.module_kind(text)
    except ValueError as err:
        raise ValueError(f"{fn}: {err}") from None


def guard_dims(fn: str, dims: Any, lhs_shape: Any, rhs_shape: Any) -> None:
    """dims = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)), valid for these shapes."""
    for name, shape in (("lhs_shape", lhs_shape), ("rhs_shape", rhs_shape)):
        if not isinstance(shape, (tuple, list)) or not all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) and int(s) >= 0 for s in shape
        ):
            raise TypeError(f"{fn}: {name} must be a tuple of sizes (ints ≥ 0), e.g. (64, 1024), got {shape!r}.")
    try:
        xla_tools.check_dims(dims, lhs_shape, rhs_shape)
    except ValueError as err:
        raise ValueError(f"{fn}: {err}.") from None


# ----------------------------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------------------------


class Module:
    """One text a count_hlo_ops case hands the learner: which subject, which stage, the text itself."""

    def __init__(self, subject: Subject, stage: str):
        f, args = subject.build()
        self.subject, self.stage = subject, stage
        self.text = xla_tools.stablehlo(f, *args) if stage == "stablehlo" else xla_tools.hlo(f, *args)

    def __repr__(self) -> str:
        what = "StableHLO (lowered)" if self.stage == "stablehlo" else "optimized HLO (compiled)"
        return f"the {what} text of {self.subject!r}"  # (its source-location tables vary with the caller)


def _subject(name: str) -> Subject:
    if name.startswith("grad "):
        return _grad(SUBJECTS[name[5:]])
    return SUBJECTS[name]


def module_cases(specs: Sequence[tuple[str, str]]) -> list[Case]:
    """Cases (Module,) for count_hlo_ops: (subject name, "stablehlo" or "hlo"); "grad NAME" is its gradient."""
    cases = []
    for name, stage in specs:
        module = Module(_subject(name), stage)
        cases.append(Case(repr(module), (module,)))
    return cases


def dims_cases(items: Sequence[tuple[Any, tuple, tuple, str]]) -> list[Case]:
    """Cases (dims, lhs_shape, rhs_shape) for dot_general_gemm and dot_general_flops, each with what it is."""
    return [Case(f"{what}: dims {dims}, lhs {lhs}, rhs {rhs}", (dims, lhs, rhs)) for dims, lhs, rhs, what in items]


def model_cases(names: Sequence[str]) -> list[Case]:
    """Cases (Subject,) for gemm_counts."""
    return [Case(repr(SUBJECTS[n]), (SUBJECTS[n],)) for n in names]


# ----------------------------------------------------------------------------------------------------------------
# Running the learner's function: real arguments in, and the rule "don't call the grader"
# ----------------------------------------------------------------------------------------------------------------


def _real(arg: Any) -> Any:
    return arg.text if isinstance(arg, Module) else arg


def _check(task: str, fn: Callable, cases: Sequence[Case], unpack: Callable[[tuple], tuple], **kwargs) -> CheckResult:
    watched, own = no_grader_calls(
        fn,
        {"twoprim.topics.xla": xla_tools.uses},
        call=lambda f, *args, **kw: f(*unpack(args), **kw),
        rule="your own code: no calls to twoprim.topics.xla (the grader's ground truth)",
        next_step="write it yourself from the text, the dimension numbers or the jaxpr, as lesson 10 shows",
    )
    return run_check(f"{TASK}-{task}", watched, cases, rules=[own], **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# count_hlo_ops
# ----------------------------------------------------------------------------------------------------------------


class _Counts(Counter):
    def __repr__(self) -> str:
        return "Counter(" + ", ".join(f"{k!r}: {v}" for k, v in self.most_common()) + ")"


def _expected_ops(module: Module) -> Counter:
    return _Counts(xla_tools.hlo_ops(module.text))


def _ops_hint(module: Module, want: Counter, got: Counter) -> str:
    text, hlo = module.text, module.stage == "hlo"
    names = set(got) - set(want)
    if not got:
        return "nothing was counted: read the text line by line and find the operation each statement runs" + (
            ": `%name = <shape> opcode(operands), ...`" if hlo else ": `%0 = stablehlo.op ...`"
        )
    if (
        hlo
        and names
        and any(n.split(".")[0] in want for n in names)
        and any(("." in n or n[-1:].isdigit()) for n in names)
    ):
        return (
            "those are instruction names (the left of '='): %add.1 can be a broadcast. The opcode is the word "
            "after the shape on the right, just before '('"
        )
    over = [n for n in got if n in want and got[n] > want[n]]
    if over and all(got[n] >= want[n] for n in want):
        return (
            f"more {over[0]} than there are such statements: a name or metadata "
            '(op_name="jit(f)/dot_general") mentions an op it does not run; take the op only from where a '
            "statement names it, not from any word"
        )
    if not hlo and any(f"stablehlo.{n}" in want for n in got):
        return "name StableHLO ops as written, with their dialect: 'stablehlo.dot_general', not 'dot_general'"
    if not hlo and any(not n.startswith("stablehlo.") for n in got):
        return (
            "count only operations of the stablehlo dialect, named as written ('stablehlo.add'); `module`, "
            "`func.func`, `call` and `return` are the module's scaffolding"
        )
    if hlo:
        comps = xla_tools.hlo_computations(text)
        entry = next((c for c in comps if f"ENTRY %{c} " in text or f"ENTRY {c} " in text), None)
        roots = Counter(op for body in comps.values() for op, line in body if line.startswith("ROOT"))
        if entry and got == Counter(op for op, _ in comps[entry]):
            return (
                "only the ENTRY computation was counted: a fusion's body, a while loop's body and condition are "
                "computations of their own above it (calls=%fused_computation...), and their ops count too"
            )
        if roots and got + roots == want:
            return "the lines starting 'ROOT' are instructions too (the one whose value a computation returns)"
        if got["parameter"] < want["parameter"]:
            return "`parameter(0)` is an instruction too, in every computation"
    if not hlo and got["stablehlo.return"] < want["stablehlo.return"] and want["stablehlo.return"]:
        return "statements without a result (`stablehlo.return %x`, inside a region) are operations too"
    if not hlo and got["stablehlo.reduce"] < want["stablehlo.reduce"]:
        return "`%3 = stablehlo.reduce(%2 init: %c) applies stablehlo.add ...` is one stablehlo.reduce"
    if not hlo and sum((got - want).values()) and any(n in {"stablehlo.add", "stablehlo.maximum"} for n in got - want):
        return (
            "`stablehlo.reduce(...) applies stablehlo.add` names the add inside the reduce's attributes: count "
            "only the op that starts a statement"
        )
    return "print the text beside your counter and compare them op by op"


def _judge_ops(got: Any, want: Counter, case: Case) -> str:
    counts = as_counter(
        got,
        "count_hlo_ops",
        build="build a collections.Counter: counts[op] += 1 for every operation",
        key="key the counter by the op's name as a string, e.g. 'dot' or 'stablehlo.add'",
    )
    if counts != want:
        raise Mismatch(
            f"{dict(counts)!r}\n  differs:  {difference(want, counts)}", next_step=_ops_hint(case.args[0], want, counts)
        )
    return ""


# The rules the task states, each in a visible case: every computation (fusion bodies; a while loop's body and
# condition), statements without a result (`stablehlo.return` in a loop's regions), tuple shapes, names and metadata
VISIBLE_MODULES = [
    ("mlp", "stablehlo"),
    ("mlp", "hlo"),
    ("scores", "stablehlo"),
    ("grad mlp", "hlo"),
    ("grad mlp", "stablehlo"),
    ("loop", "stablehlo"),
    ("loop", "hlo"),
]


def check_count_hlo_ops(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `count_hlo_ops`: op names counted from the structure of StableHLO and optimized HLO modules, every
    computation and region included, names and metadata not mistaken for ops."""
    cases = cases if cases is not None else module_cases(VISIBLE_MODULES)
    return _check(
        "count_hlo_ops",
        fn,
        cases,
        lambda args: tuple(map(_real, args)),
        expected=_expected_ops,
        judge=_judge_ops,
        hidden=hidden,
        proves="op names counted from the structure of StableHLO and optimized HLO modules, every "
        "computation and region included, names and metadata not mistaken for ops",
        next_step="HLO: the opcode after each instruction's shape; StableHLO: the stablehlo.* op that "
        "starts each statement",
    )


# ----------------------------------------------------------------------------------------------------------------
# dot_general_gemm and dot_general_flops
# ----------------------------------------------------------------------------------------------------------------


def _ints(got: Any, n: int, what: str, form: str) -> tuple[int, ...]:
    if (
        isinstance(got, (tuple, list))
        and len(got) == n
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in got)
    ):
        return tuple(int(v) for v in got)
    raise Mismatch(
        f"{type(got).__name__} {got!r}"[:200] + f", but {what} returns {form}",
        next_step=f"return {form}, each a Python int (int(...) turns a NumPy integer into one)",
    )


def _gemm_hint(dims, lhs, rhs, want: tuple, got: tuple) -> str:
    (lc, rc), (lb, rb) = xla_tools._dims(dims)
    b, m, n, k = want
    if got == (b, n, m, k):
        return "M comes from the left operand's free dimensions and N from the right's: they are swapped"
    if got[0] == 1 and b != 1 and got[1] in (b * m, m):
        return (
            "batch dimensions are not part of M: they make `batch` independent GEMMs, batch = Π of the lhs_batch sizes"
        )
    if got[3] != k and lc and got[3] == lhs[lc[0]]:
        return "K is the product of the sizes of every contracting dimension, not only the first"
    free_l = [d for d in range(len(lhs)) if d not in lc + lb]
    if got[1] != m and free_l and got[1] == lhs[free_l[0]]:
        return "M is the product of every free lhs dimension (neither contracting nor batch), not only one"
    if got[1] != m and len(lhs) >= 1 and got[1] == lhs[0]:
        return "M is not lhs_shape[0]: take the lhs dimensions that are neither contracting nor batch"
    if got[2] != n and len(rhs) >= 1 and got[2] == rhs[-1]:
        return "N is not rhs_shape[-1]: take the rhs dimensions that are neither contracting nor batch"
    return (
        "free lhs dims → M, free rhs dims → N, contracting → K, batch → batch; each the product of its sizes; "
        "write each dimension's role beside the shapes"
    )


def _judge_gemm(got: Any, want: tuple, case: Case) -> str:
    value = _ints(got, 4, "dot_general_gemm", "a tuple (batch, M, N, K)")
    if value != want:
        dims, lhs, rhs = case.args
        raise Mismatch(f"{value}", next_step=_gemm_hint(dims, lhs, rhs, want, value))
    return ""


def _judge_flops(got: Any, want: int, case: Case) -> str:
    if isinstance(got, bool) or not isinstance(got, numbers.Integral):
        if isinstance(got, float) and got == want:
            raise Mismatch(
                f"float {got!r}, the right number as a float",
                next_step="return an int: FLOPs are counted exactly (use * and //, not /, or int(...))",
            )
        raise Mismatch(
            f"{type(got).__name__} {got!r}, but dot_general_flops returns an int",
            next_step="return 2·batch·M·N·K as a Python int",
        )
    got = int(got)
    if got == want:
        return ""
    b, m, n, k = xla_tools.gemm_shape(*case.args)
    hint = "FLOPs = 2·batch·M·N·K: one multiply and one add for every term of every dot product"
    if got * 2 == want:
        hint = "a multiply-add is 2 FLOPs: 2·batch·M·N·K, not batch·M·N·K"
    elif b > 1 and got * b == want:
        hint = "every batch index is a GEMM of its own: multiply by batch too"
    elif got == 2 * m * n * k * b * k or got == 2 * b * m * n:
        hint = "count K once, from the contracting dimensions: 2·batch·M·N·K"
    raise Mismatch(f"{got}", next_step=hint)


VISIBLE_DIMS = [
    ((((1,), (0,)), ((), ())), (64, 1024), (1024, 4096), "the MLP's first layer x @ w1"),
    ((((3,), (3,)), ((0, 1), (0, 1))), (2, 4, 8, 16), (2, 4, 8, 16), "attention scores bhqd,bhkd->bhqk"),
    ((((0,), (0,)), ((), ())), (64, 1024), (64, 4096), "a weight gradient xᵀ @ dy"),
    ((((2,), (0,)), ((), ())), (4, 7, 32), (32, 5), "3-D x @ w: (B, S, E) @ (E, F)"),
    ((((1, 2), (0, 1)), ((), ())), (6, 3, 5), (3, 5, 9), "two contracting dimensions"),
]


def _expected_gemm(dims, lhs, rhs) -> tuple:
    return xla_tools.gemm_shape(dims, lhs, rhs)


def _expected_flops(dims, lhs, rhs) -> int:
    return xla_tools.gemm_flops(dims, lhs, rhs)


def check_dot_general_gemm(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `dot_general_gemm`: dot_general dimension numbers read as (batch, M, N, K): batch, contracting and free
    dimensions on both sides, several of each."""
    cases = cases if cases is not None else dims_cases(VISIBLE_DIMS)
    return _check(
        "dot_general_gemm",
        fn,
        cases,
        lambda args: args,
        expected=_expected_gemm,
        judge=_judge_gemm,
        hidden=hidden,
        proves="dot_general dimension numbers read as (batch, M, N, K): batch, contracting and free "
        "dimensions on both sides, several of each",
        next_step="mark every dimension of each operand as batch, contracting or free",
    )


def check_dot_general_flops(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `dot_general_flops`: dot_general FLOPs equal to 2·batch·M·N·K."""
    cases = cases if cases is not None else dims_cases(VISIBLE_DIMS)
    return _check(
        "dot_general_flops",
        fn,
        cases,
        lambda args: args,
        expected=_expected_flops,
        judge=_judge_flops,
        hidden=hidden,
        proves="dot_general FLOPs equal to 2·batch·M·N·K",
        next_step="2·batch·M·N·K from your dot_general_gemm",
    )


# ----------------------------------------------------------------------------------------------------------------
# gemm_counts
# ----------------------------------------------------------------------------------------------------------------


def _expected_counts(subject: Subject) -> tuple[int, int]:
    f, args = subject.build()
    return xla_tools.gemm_counts(f, *args)


def _judge_counts(got: Any, want: tuple, case: Case) -> str:
    value = _ints(got, 2, "gemm_counts", "a tuple (forward, gradient) of GEMM counts")
    if value == want:
        return ""
    subject: Subject = case.args[0]
    f, args = subject.build()
    fw, gr = want
    hint = (
        "count dot_general equations in jax.make_jaxpr(f)(*args), and in the jaxpr of the gradient of "
        "jnp.sum(f(x, *params)) with respect to every parameter"
    )
    if value == (gr, fw):
        hint = "the order is (forward, gradient)"
    elif value[1] == gr - fw and fw:
        hint = (
            "the gradient's jaxpr holds the forward pass too (it is recomputed there): count every dot_general "
            "in it, not only the backward ones"
        )
    else:
        lowered = [
            xla_tools.hlo_ops(xla_tools.stablehlo(g, *args))["stablehlo.dot_general"]
            for g in (f, xla_tools.grad_of_sum(f, len(args) - 1))
        ]
        with_x = xla_tools.jaxpr_ops(
            xla_tools.jaxpr(jax.grad(lambda *a: jnp.sum(f(*a)), argnums=tuple(range(len(args)))), *args)
        )["dot_general"]
        jaxprs = (
            xla_tools.jaxpr(f, *args).jaxpr,
            xla_tools.jaxpr(xla_tools.grad_of_sum(f, len(args) - 1), *args).jaxpr,
        )
        nested = _nested_cause(value, jaxprs)
        if value == tuple(lowered) and value != want:
            hint = (
                "that is the lowered StableHLO's count: lowering drops work whose result is unused and writes a "
                "function called twice once. Count the jaxpr's dot_general equations instead"
            )
        elif nested:
            hint = nested
        elif value[1] == with_x and value[0] == fw:
            hint = "take the gradient with respect to the parameters only (every argument after the first), not x"
    raise Mismatch(f"{value}", next_step=hint)


def _dots(j, *, skip: frozenset = frozenset(), per_step: bool = False, seen: set | None = None) -> int:
    """dot_general equations of jaxpr `j` counted as a mistaken count would: not looking inside the equations whose
    primitive is in `skip`, a scan body once per step (`per_step`), a nested jaxpr only the first time it is met
    (`seen`)."""
    n = 0
    for eqn in j.eqns:
        n += eqn.primitive.name == "dot_general"
        if eqn.primitive.name in skip:
            continue
        times = int(eqn.params.get("length", 1)) if per_step and eqn.primitive.name == "scan" else 1
        for sub in xla_tools._sub_jaxprs(eqn):
            if seen is not None:
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
            n += times * _dots(sub, skip=skip, per_step=per_step, seen=seen)
    return n


def _holders(j, found: Counter | None = None) -> Counter:
    """{primitive: dot_generals inside its nested jaxprs} over the equations of `j` that hold a jaxpr, at any depth
    (a dot_general is credited to every equation around it)."""
    found = Counter() if found is None else found
    for eqn in j.eqns:
        for sub in xla_tools._sub_jaxprs(eqn):
            inside = _dots(sub)
            if inside:
                found[eqn.primitive.name] += inside
            _holders(sub, found)
    return found


def _nested_cause(value: tuple, jaxprs: tuple) -> str:
    """Why `value` is what counting the forward and gradient `jaxprs` without looking inside some nested jaxprs,
    counting a loop body per step, or a jaxpr called twice only once would give; "" when none of those gives it."""
    holders = _holders(jaxprs[0]) + _holders(jaxprs[1])
    names = sorted(holders)
    for size in range(1, len(names) + 1):  # the smallest set of holders whose jaxprs, left out, give `value`
        for skipped in itertools.combinations(names, size):
            if value == tuple(_dots(j, skip=frozenset(skipped)) for j in jaxprs):
                which = " and ".join(f"`{n}`" for n in skipped)
                parts = []
                for what, j in zip(("the forward jaxpr", "the gradient's"), jaxprs, strict=True):
                    inside = {n: k for n, k in sorted(_holders(j).items()) if n in skipped}
                    if inside:
                        parts.append(f"{what}: " + ", ".join(f"{k} inside `{n}`" for n, k in inside.items()))
                where = "; ".join(parts)
                return (
                    f"nested jaxprs were not counted: the dot_generals inside {which} equations are missing "
                    f"({where}). An equation of a jitted function (`jit`), a custom derivative "
                    f"(`custom_jvp_call`), a checkpoint or a loop (`scan`, `while`, `cond`) holds a jaxpr of its "
                    f"own in eqn.params: count the dot_generals inside it too, each time it is called "
                    f"(jax.extend.core.jaxprs_in_params finds them)"
                )
    if "scan" in holders and value == tuple(_dots(j, per_step=True) for j in jaxprs):
        return (
            "a loop body counts once, not once per step: a `scan` equation holds its body's jaxpr once, whatever "
            "its length (the GEMM runs length times, but it is one dot_general equation)"
        )
    if value == tuple(_dots(j, seen=set()) for j in jaxprs):
        return (
            "a nested jaxpr counts each time an equation calls it: a jitted function called twice is two `jit` "
            "equations holding the same jaxpr, and its dot_generals count twice"
        )
    return ""


def _unpack_subject(args: tuple) -> tuple:
    (subject,) = args
    f, arrays = subject.build()
    return (f, *arrays)


# The rules the task states, each in a visible case: the gradient with respect to the parameters, nested jaxprs
# counted at each call (a jitted layer called twice), a loop body counted once (not once per step)
VISIBLE_MODELS = ["mlp", "scores", "attention", "jitted", "loop"]


def check_gemm_counts(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `gemm_counts`: forward and gradient GEMM counts equal to the dot_general equations in the jaxprs."""
    cases = cases if cases is not None else model_cases(VISIBLE_MODELS)
    return _check(
        "gemm_counts",
        fn,
        cases,
        _unpack_subject,
        expected=_expected_counts,
        judge=_judge_counts,
        hidden=hidden,
        proves=f"forward and gradient GEMM counts equal to the dot_general equations the grader finds in "
        f"the jaxprs now (JAX {jax.__version__})",
        next_step="count dot_general equations in the forward jaxpr and in the gradient's",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex10_xla-count_hlo_ops": (
        "Print the text and look at one instruction and one StableHLO statement: what stands left of '=', what "
        "stands right of it, and where the op's own name is.",
        "HLO: an instruction is `[ROOT] %name = <shape> opcode(operands), attributes`, and a module has several "
        "computations (every fusion body is one); StableHLO: a statement is `%0 = stablehlo.op ...` or, without a "
        "result, `stablehlo.return ...`.",
        "A regular expression anchored at the start of a line (re.match) that skips the name, the '=' and the shape "
        "(an array type such as f32[64,1024]{1,0}, or a tuple in parentheses) leaves the opcode just before '('. "
        "Words elsewhere on the line (names, metadata, `applies stablehlo.add`) never count.",
    ),
    "ex10_xla-dot_general_gemm": (
        "Give every dimension of each operand one role: batch, contracting, or free (neither).",
        "batch = product of the lhs batch sizes; K = product of the lhs contracting sizes; M = product of the lhs "
        "free sizes; N = product of the rhs free sizes. A product over no dimension is 1.",
        "For the attention scores bhqd,bhkd->bhqk: b and h are batch, d is contracting, q is the only free lhs "
        "dimension and k the only free rhs one.",
    ),
    "ex10_xla-dot_general_flops": (
        "Every output element of every batch is a dot product of length K.",
        "A dot product of length K costs K multiplies and K adds: 2·K FLOPs, as GEMM's 2·M·N·K.",
    ),
    "ex10_xla-gemm_counts": (
        "Trace with jax.make_jaxpr: each equation has a primitive (eqn.primitive.name); the GEMMs are the "
        "dot_general ones.",
        "The gradient is jax.grad of a scalar: the sum of f's output, as a function of the parameters (every argument "
        "after x). Trace that gradient function and count its dot_generals the same way.",
        "Some equations (a jitted function, jax.nn.relu, jax.checkpoint) carry a jaxpr of their own in eqn.params: "
        "jax.extend.core.jaxprs_in_params(eqn.params) lists them; count inside them too, every time they are called.",
    ),
}
