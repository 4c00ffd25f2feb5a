"""ex10_xla and lesson 10: the op counts agree with the compiled texts read another way (MLIR's own parser, XLA's
cost analysis); each check names the cause on at least three wrong versions per function; the rule against calling
the grader's code holds; bad input gets a named error."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest

from twoprim.assignments import ex10_xla as ex10
from twoprim.topics import xla as xla_tools

from .conftest import fails, solution_namespace
from .visible_rules import assert_rule_is_visible

# isort: split
# jax after twoprim.topics.xla, which puts JAX on the CPU
import jax
import jax.numpy as jnp
from jax import lax


@pytest.fixture(scope="module")
def sol10():
    """The ex10_xla solution functions."""
    return solution_namespace("ex10_xla")


def _lesson_mlp(x, w1, b1, w2, b2):
    return jnp.maximum(x @ w1 + b1, 0) @ w2 + b2


LESSON_ARGS = tuple(np.zeros(s, np.float32) for s in [(64, 1024), (1024, 4096), (4096,), (4096, 1024), (1024,)])


def _mlir_walk(text: str) -> Counter:
    """Every operation of a StableHLO module, as MLIR's own parser sees it."""
    from jax._src.interpreters import mlir
    from jax.extend.mlir import ir

    counts: Counter = Counter()

    def visit(op):
        counts[op.name] += 1
        return ir.WalkResult.ADVANCE

    ir.Module.parse(text, context=mlir.make_ir_context()).operation.walk(visit)
    return counts


# ---- lesson 10's counts, against the texts read another way


def test_lesson_mlp_counts_agree_with_the_compiled_texts():
    closed = xla_tools.jaxpr(_lesson_mlp, *LESSON_ARGS)
    assert xla_tools.jaxpr_ops(closed)["dot_general"] == 2 == len(xla_tools.dot_dims(closed))  # one per layer
    stablehlo = xla_tools.stablehlo(_lesson_mlp, *LESSON_ARGS)
    walked = _mlir_walk(stablehlo)
    ours = xla_tools.hlo_ops(stablehlo)
    assert ours == Counter({k: v for k, v in walked.items() if k.startswith("stablehlo.")})
    hlo = xla_tools.hlo(_lesson_mlp, *LESSON_ARGS)
    ops = xla_tools.hlo_ops(hlo)
    # every instruction line has exactly one ' = ' before its opcode; the opcode regex agrees with a plain one
    assert ops["dot"] == len(re.findall(r"= \S+ dot\(", hlo)) == 2
    assert ops["fusion"] == len(re.findall(r"= \S+ fusion\(", hlo)) == len(xla_tools.fusions(hlo))
    assert xla_tools.word_count(hlo, "dot") > ops["dot"]  # the trap the lesson shows: words over-count
    assert xla_tools.word_count(hlo, "fusion") > ops["fusion"]
    dots_in_fusions = sum(f["ops"]["dot"] for f in xla_tools.fusions(hlo))
    entry_dots = sum(op == "dot" for op, _ in xla_tools.hlo_computations(hlo)[_entry(hlo)])
    assert dots_in_fusions + entry_dots == ops["dot"]
    assert xla_tools.gemm_counts(_lesson_mlp, *LESSON_ARGS) == (2, 5)  # 2 forward; + dW1, dW2, dh backward


def _entry(hlo: str) -> str:
    entry = re.search(r"^ENTRY %?([\w.\-]+)", hlo, re.M)
    assert entry, hlo
    return entry.group(1)


def test_stablehlo_with_regions_and_compact_reduces_differs_from_mlir_only_where_stated():
    f = xla_tools.grad_of_sum(_lesson_mlp, 4)
    text = xla_tools.stablehlo(f, *LESSON_ARGS)
    walked = Counter({k: v for k, v in _mlir_walk(text).items() if k.startswith("stablehlo.")})
    ours = xla_tools.hlo_ops(text)
    compact = len(re.findall(r"applies stablehlo\.add", text))
    assert compact > 0
    # `stablehlo.reduce(...) applies stablehlo.add` holds a region (add + return) that the text does not write out
    assert walked - ours == Counter({"stablehlo.add": compact, "stablehlo.return": compact})
    assert ours - walked == Counter()
    scan = ex10.SUBJECTS["scan"]
    fn, args = scan.build()
    text = xla_tools.stablehlo(fn, *args)
    walked = Counter({k: v for k, v in _mlir_walk(text).items() if k.startswith("stablehlo.")})
    assert xla_tools.hlo_ops(text) == walked and walked["stablehlo.return"] == 2  # while's cond and body regions


DIMS = [(d, lhs, rhs) for d, lhs, rhs, _ in ex10.VISIBLE_DIMS] + [
    ((((3,), (2,)), ((0, 1), (1, 0))), (2, 4, 8, 16), (4, 2, 16, 8)),
    ((((), ()), ((), ())), (5,), (7,)),
    ((((0,), (1,)), ((), ())), (12, 3, 4), (6, 12)),
    ((((1,), (1,)), ((0,), (0,))), (3, 5, 2, 7), (3, 5, 4)),
]


@pytest.mark.parametrize("dims,lhs,rhs", DIMS, ids=lambda v: str(v).replace(" ", ""))
def test_gemm_shape_agrees_with_xla_and_the_result_shape(dims, lhs, rhs):
    b, m, n, k = xla_tools.gemm_shape(dims, lhs, rhs)
    a, c = np.ones(lhs, np.float32), np.ones(rhs, np.float32)
    out = lax.dot_general(a, c, dims)
    assert math.prod(out.shape) == b * m * n  # result: (batch..., lhs free..., rhs free...)
    assert float(out.reshape(-1)[0]) == k  # ones: each element sums K products
    compiled = jax.jit(lambda p, q: lax.dot_general(p, q, dims)).lower(a, c).compile()
    cost = compiled.cost_analysis()
    assert cost is not None  # (XLA's CPU backend analyses its cost)
    xla = cost["flops"]
    if dims[0][0]:
        assert xla == xla_tools.gemm_flops(dims, lhs, rhs)  # 2·batch·M·N·K, as the course counts
    else:  # nothing contracted (an outer product): XLA counts the multiplies only; the course keeps 2·M·N·K
        assert xla * 2 == xla_tools.gemm_flops(dims, lhs, rhs)


# ---- the checks: the solution passes; wrong versions are named


@pytest.mark.parametrize("name", ["count_hlo_ops", "dot_general_gemm", "dot_general_flops", "gemm_counts"])
def test_solution_passes_and_says_what_it_proved(sol10, name, capsys):
    getattr(ex10, f"check_{name}")(sol10[name], hidden=3)
    out = capsys.readouterr().out
    assert out.startswith(f"✔ ex10_xla-{name}: ") and "Grading runs 3 more hidden checks" in out


def test_solution_passes_every_subject(sol10):
    every = [(n, s) for n in [*ex10.SUBJECTS, *(f"grad {n}" for n in ex10.SUBJECTS)] for s in ("stablehlo", "hlo")]
    ex10.check_count_hlo_ops(sol10["count_hlo_ops"], ex10.module_cases(every))
    ex10.check_gemm_counts(sol10["gemm_counts"], ex10.model_cases(list(ex10.SUBJECTS)))


_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(\([^=]*?\)|\S+)\s+([a-z][\w\-]*)\(")


def _by_name(text):
    """Wrong: keys instructions by their name (left of '='), not their opcode."""
    if text.lstrip().startswith("HloModule"):
        return Counter(m.group(2) for m in map(_INSTR.match, text.splitlines()) if m)
    return Counter(re.findall(r"^\s*%\S+ = (stablehlo\.\w+)", text, re.M))


def _entry_only(text):
    """Wrong: counts the ENTRY computation only."""
    body = text.split("\nENTRY", 1)[-1]
    return Counter(m.group(4) for m in map(_INSTR.match, body.splitlines()) if m)


def _no_root(text):
    """Wrong: skips the ROOT instruction of every computation."""
    return Counter(m.group(4) for m in map(_INSTR.match, text.splitlines()) if m and not m.group(1))


def _words(text):
    """Wrong: counts words: every `name(` anywhere, metadata and names included."""
    names = ("dot", "fusion", "parameter", "broadcast", "add", "maximum", "constant")
    return Counter({n: text.count(n + "(") + text.count(n + '"') for n in names})


def _no_dialect(text):
    """Wrong: drops the dialect prefix of StableHLO ops."""
    return Counter(re.findall(r"^\s*(?:%\S+ = )?stablehlo\.(\w+)", text, re.M))


def _scaffolding(text):
    """Wrong: also counts module, func.func and return."""
    return Counter(re.findall(r'^\s*(?:%\S+ = )?"?([a-z_]+(?:\.\w+)?)\b', text, re.M))


@pytest.mark.parametrize(
    "wrong,cases,cause",
    [
        (_by_name, [("mlp", "hlo")], "instruction names"),
        (_entry_only, [("mlp", "hlo")], "only the ENTRY computation was counted"),
        (_no_root, [("mlp", "hlo")], "the lines starting 'ROOT' are instructions too"),
        (_words, [("mlp", "hlo")], "a name or metadata"),
        (_no_dialect, [("mlp", "stablehlo")], "with their dialect"),
        (_scaffolding, [("mlp", "stablehlo")], "scaffolding"),
    ],
)
def test_count_hlo_ops_names_the_cause(wrong, cases, cause):
    msg = fails(ex10.check_count_hlo_ops, wrong, ex10.module_cases(cases))
    assert "wrong result" in msg or "differs" in msg, msg
    assert cause in msg, msg


def _gemm_from(sol, transform):
    return lambda dims, lhs, rhs: transform(sol(dims, lhs, rhs), dims, lhs, rhs)


@pytest.mark.parametrize(
    "transform,cause",
    [
        (lambda r, d, lhs, rr: (r[0], r[2], r[1], r[3]), "they are swapped"),
        (lambda r, d, lhs, rr: (1, r[0] * r[1], r[2], r[3]), "batch dimensions are not part of M"),
        (lambda r, d, lhs, rr: (r[0], r[1], r[2], lhs[d[0][0][0]] if d[0][0] else 1), "not only the first"),
        (lambda r, d, lhs, rr: (r[0], lhs[0], r[2], r[3]), "lhs_shape[0]"),
        (lambda r, d, lhs, rr: [float(v) for v in r], "each a Python int"),
    ],
)
def test_dot_general_gemm_names_the_cause(sol10, transform, cause):
    msg = fails(ex10.check_dot_general_gemm, _gemm_from(sol10["dot_general_gemm"], transform))
    assert cause in msg, msg


@pytest.mark.parametrize(
    "wrong,cause",
    [
        (lambda g: lambda *a: math.prod(g(*a)), "a multiply-add is 2 FLOPs"),
        (lambda g: lambda *a: 2 * math.prod(g(*a)[1:]), "multiply by batch too"),
        (lambda g: lambda *a: float(2 * math.prod(g(*a))), "return an int"),
        (lambda g: lambda *a: 2 * math.prod(g(*a)) * g(*a)[3], "count K once"),
    ],
)
def test_dot_general_flops_names_the_cause(sol10, wrong, cause):
    msg = fails(ex10.check_dot_general_flops, wrong(sol10["dot_general_gemm"]))
    assert cause in msg, msg


def _flat(f, x, *params):
    """Wrong: does not look inside nested jaxprs."""

    def count(g, *a):
        return sum(e.primitive.name == "dot_general" for e in jax.make_jaxpr(g)(*a).jaxpr.eqns)

    return count(f, x, *params), count(lambda p: jax.grad(lambda q: jnp.sum(f(x, *q)))(p), params)


def _from_stablehlo(f, x, *params):
    """Wrong: counts the lowered StableHLO's dot_generals."""
    grad = jax.grad(lambda p: jnp.sum(f(x, *p)))
    return (
        jax.jit(f).lower(x, *params).as_text().count("stablehlo.dot_general"),
        jax.jit(grad).lower(params).as_text().count("stablehlo.dot_general"),
    )


@pytest.mark.parametrize(
    "wrong,subjects,cause",
    [
        (lambda sol: lambda f, *a: sol(f, *a)[::-1], ["mlp"], "the order is (forward, gradient)"),
        (
            lambda sol: lambda f, *a: (sol(f, *a)[0], sol(f, *a)[1] - sol(f, *a)[0]),
            ["mlp"],
            "holds the forward pass too",
        ),
        (lambda sol: _flat, ["nested"], "count the dot_generals inside it too"),
        (lambda sol: _from_stablehlo, ["mlp"], "lowered StableHLO's count"),
        (
            lambda sol: lambda f, x, *p: (sol(f, x, *p)[0], sol(lambda *a: f(*a), x, *p)[1] + 1),
            ["mlp"],
            "with respect to the parameters only",
        ),
    ],
)
def test_gemm_counts_names_the_cause(sol10, wrong, subjects, cause):
    msg = fails(ex10.check_gemm_counts, wrong(sol10["gemm_counts"]), ex10.model_cases(subjects))
    assert cause in msg, msg


def test_calling_the_grader_is_caught():
    msg = fails(ex10.check_gemm_counts, lambda f, *a: xla_tools.gemm_counts(f, *a))
    assert "it called twoprim.topics.xla.gemm_counts" in msg
    msg = fails(ex10.check_count_hlo_ops, xla_tools.hlo_ops)
    assert "twoprim.topics.xla.hlo_ops" in msg


# ---- bad input


def test_guards_name_what_is_wrong():
    with pytest.raises(TypeError, match=r"call \.as_text\(\) on it first"):
        ex10.guard_text("count_hlo_ops", jax.jit(_lesson_mlp).lower(*LESSON_ARGS))
    with pytest.raises(ValueError, match="neither an HLO module"):
        ex10.guard_text("count_hlo_ops", "hello")
    with pytest.raises(ValueError, match=r"contracting dimension lhs\[1\] = 3 does not match rhs\[0\] = 4"):
        ex10.guard_dims("dot_general_gemm", (((1,), (0,)), ((), ())), (2, 3), (4, 5))
    with pytest.raises(ValueError, match="dimension 2 does not exist"):
        ex10.guard_dims("dot_general_gemm", (((2,), (0,)), ((), ())), (2, 3), (3, 5))
    with pytest.raises(TypeError, match="lhs_shape must be a tuple of sizes"):
        ex10.guard_dims("dot_general_gemm", (((1,), (0,)), ((), ())), "2x3", (3, 5))


# ---- every rule ex10 states has a visible case (issue #43): a wrong answer breaking only that rule passed the visible
# check before its case was added, and fails it now with a message about its own mistake


def _counting(mode):
    """gemm_counts that walks nested jaxprs, but: "flat" not at all, "no-scan" not into a loop's body, "per-step" a
    loop body once per step, "once" a jaxpr called twice only once."""
    from jax.extend.core import jaxprs_in_params

    def dots(jaxpr, seen):
        n = 0
        for eqn in jaxpr.eqns:
            n += eqn.primitive.name == "dot_general"
            if mode == "flat" or (mode == "no-scan" and eqn.primitive.name == "scan"):
                continue
            times = eqn.params.get("length", 1) if mode == "per-step" and eqn.primitive.name == "scan" else 1
            for sub in jaxprs_in_params(eqn.params):
                sub = getattr(sub, "jaxpr", sub)
                if mode == "once" and id(sub) in seen:
                    continue
                seen.add(id(sub))
                n += times * dots(sub, seen)
        return n

    def gemm_counts(f, x, *params):
        grad = jax.grad(lambda p: jnp.sum(f(x, *p)))
        return dots(jax.make_jaxpr(f)(x, *params).jaxpr, set()), dots(jax.make_jaxpr(grad)(params).jaxpr, set())

    return gemm_counts


_NESTED = lambda c: c.label.startswith(("`jitted`", "`loop`"))  # noqa: E731


@pytest.mark.parametrize(
    "mode, rule, says",
    [
        (
            "flat",
            _NESTED,
            (
                "nested jaxprs were not counted: the dot_generals inside `jit` equations are missing",
                "the forward jaxpr: 2 inside `jit`",
            ),
        ),
        ("no-scan", _NESTED, ("nested jaxprs were not counted: the dot_generals inside `scan` equations are missing",)),
        ("per-step", _NESTED, ("a loop body counts once, not once per step",)),
        ("once", _NESTED, ("a nested jaxpr counts each time an equation calls it",)),
    ],
)
def test_gemm_counts_rules_on_nested_jaxprs_are_in_its_visible_check(mode, rule, says):
    assert_rule_is_visible(ex10.check_gemm_counts, _counting(mode), rule, *says)


def test_count_hlo_ops_statements_without_a_result_are_in_its_visible_check(sol10):
    def count_hlo_ops(text):
        """Wrong: counts StableHLO statements with a result only (`%x = stablehlo.op`), not `stablehlo.return`."""
        if text.lstrip().startswith("HloModule"):
            return sol10["count_hlo_ops"](text)
        return Counter(re.findall(r"^\s*%\S+ = (stablehlo\.\w+)", text, re.M))

    assert_rule_is_visible(
        ex10.check_count_hlo_ops,
        count_hlo_ops,
        lambda c: "`loop`" in c.label,
        "stablehlo.return: expected 2, got 0",
        "statements without a result",
    )


def test_the_printed_hlo_leaves_out_only_the_source_location_tables():
    """Lesson 10 prints the compiled MLP without the tables of Python frames (in a notebook, ipykernel's) that the
    module carries: every computation and instruction stays, with its metadata."""
    text = xla_tools.hlo(_lesson_mlp, *LESSON_ARGS)
    shown, left_out = xla_tools.without_source_tables(text)
    assert left_out > 0 and all(table not in shown for table in ("FileNames", "FunctionNames", "StackFrames"))
    assert xla_tools.hlo_ops(shown) == xla_tools.hlo_ops(text) and "ENTRY" in shown and "metadata=" in shown
    assert len(shown.splitlines()) + left_out <= len(text.splitlines())
