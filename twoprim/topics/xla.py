"""What XLA builds, seen from inside: jaxprs, StableHLO, optimized HLO, and their GEMMs (lesson 10, ex10_xla's
ground truth).

`jax.jit(f)` goes through three texts, and each can be printed:

1. **jaxpr** (`jax.make_jaxpr(f)(*args)`): JAX's own trace, one equation per primitive (`dot_general`, `add`,
   `max`, ...); a call to a jitted or custom-derivative function holds a nested jaxpr (`jit`, `custom_jvp_call`).
2. **StableHLO** (`jax.jit(f).lower(*args).as_text()`): the MLIR module handed to XLA, one operation per statement
   (`%0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] ...`).
3. **optimized HLO** (`.compile().as_text()`): what XLA made of it: computations of instructions
   (`%x = f32[64,4096]{1,0} dot(%a, %b), lhs_contracting_dims={1}, ...`), element-wise work grouped into
   *fusions* whose bodies are separate computations (`calls=%fused_computation.3`).

Ops are counted from the structure of each text, never by searching for a word: an instruction's name
(`%add.1 = ... broadcast(...)`) and its metadata (`op_name="jit(mlp)/dot_general"`) mention ops it does not run.

Every GEMM is a `dot_general`: its dimension numbers name the contracting dimensions (summed over: K) and the batch
dimensions (one independent GEMM each); the remaining, free, dimensions of the left operand make M and those of the
right make N (`gemm_shape`). JAX stays on the CPU here: importing this module sets `jax_platforms` to "cpu" before
any backend starts (no accelerator is probed, nothing is downloaded). Nothing here holds a count: the ex10_xla
checks measure with these functions at grading time, on the JAX that is installed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax

jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402 - after the platform is chosen
from jax.extend.core import ClosedJaxpr, Jaxpr, jaxprs_in_params  # noqa: E402

__all__ = [
    "jaxpr",
    "stablehlo",
    "hlo",
    "jaxpr_ops",
    "hlo_ops",
    "hlo_instructions",
    "hlo_computations",
    "fusions",
    "gemm_shape",
    "gemm_flops",
    "dot_dims",
    "gemm_counts",
    "grad_of_sum",
    "word_count",
    "module_kind",
    "uses",
    "check_dims",
    "without_source_tables",
]

_USES: Counter = Counter()


def uses() -> Counter:
    """How many times each counting and measuring function of this module has been called (a copy): a check sees
    whether a learner's function called the grader's ground truth."""
    return Counter(_USES)


# ----------------------------------------------------------------------------------------------------------------
# The three texts
# ----------------------------------------------------------------------------------------------------------------


def jaxpr(f: Callable, *args) -> ClosedJaxpr:
    """JAX's trace of f(*args): `jax.make_jaxpr(f)(*args)`."""
    return jax.make_jaxpr(f)(*args)


def stablehlo(f: Callable, *args) -> str:
    """The StableHLO module `jax.jit(f)` hands to XLA for these arguments (`.lower(*args).as_text()`)."""
    return jax.jit(f).lower(*args).as_text()


def hlo(f: Callable, *args) -> str:
    """The HLO module XLA compiled for the CPU, after its optimizations (`.lower(*args).compile().as_text()`)."""
    text = jax.jit(f).lower(*args).compile().as_text()
    assert text is not None  # (None only for a backend without a text form; the CPU has one)
    return text


def module_kind(text: str) -> str:
    """ "hlo" for an HLO module's text (it starts `HloModule`), "stablehlo" for an MLIR module's."""
    if not isinstance(text, str):
        raise TypeError(f"expected the text of an HLO or StableHLO module (a str), got {type(text).__name__}")
    head = text.lstrip()
    if head.startswith("HloModule"):
        return "hlo"
    if re.search(r"^\s*module\b", text, re.M):
        return "stablehlo"
    raise ValueError(
        "this text is neither an HLO module (it would start with 'HloModule') nor a StableHLO module "
        f"(a line starting 'module'); it starts: {head[:80]!r}"
    )


# ----------------------------------------------------------------------------------------------------------------
# Counting ops from structure
# ----------------------------------------------------------------------------------------------------------------


def _sub_jaxprs(eqn) -> Iterator[Jaxpr]:
    for sub in jaxprs_in_params(eqn.params):
        yield sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub


def _jaxpr_counts(j: Jaxpr, counts: Counter) -> Counter:
    for eqn in j.eqns:
        counts[eqn.primitive.name] += 1
        for sub in _sub_jaxprs(eqn):
            _jaxpr_counts(sub, counts)
    return counts


def jaxpr_ops(closed: ClosedJaxpr | Jaxpr) -> Counter:
    """Counter of primitive names over a jaxpr's equations, nested jaxprs (jit, custom_jvp_call, checkpoint, ...)
    included, each counted once per equation that calls it."""
    _USES["jaxpr_ops"] += 1
    j = closed.jaxpr if isinstance(closed, ClosedJaxpr) else closed
    if not isinstance(j, Jaxpr):
        raise TypeError(f"jaxpr_ops: expected a jaxpr (jax.make_jaxpr(f)(*args)), got {type(closed).__name__}")
    return _jaxpr_counts(j, Counter())


# An HLO instruction: `[ROOT] %name = <shape> opcode(operands), attributes`. The shape is an array type with an
# optional layout (`f32[64,1024]{1,0}`, `pred[]`) or a tuple of them in parentheses (`(f32[2], s32[])`).
_HLO_HEAD = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*")
_HLO_ARRAY = re.compile(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?")
_HLO_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_HLO_COMPUTATION = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->\s*.*\{\s*$")


def _skip_shape(line: str, i: int) -> int | None:
    """Index just past the shape starting at line[i], or None if none starts there."""
    if line.startswith("(", i):
        depth = 0
        for j in range(i, len(line)):
            depth += {"(": 1, ")": -1}.get(line[j], 0)
            if depth == 0:
                return j + 1
        return None
    m = _HLO_ARRAY.match(line, i)
    return m.end() if m else None


def _hlo_opcode(line: str) -> str | None:
    head = _HLO_HEAD.match(line)
    if not head:
        return None
    end = _skip_shape(line, head.end())
    if end is None:
        return None
    op = _HLO_OPCODE.match(line, end)
    return op.group(1) if op else None


def hlo_computations(text: str) -> dict[str, list[tuple[str, str]]]:
    """{computation name: [(opcode, instruction line), ...]} of an HLO module, in order; the entry computation is
    named as in the text (e.g. "main.1")."""
    comps: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in text.splitlines():
        head = _HLO_COMPUTATION.match(line)
        if head and "=" not in line.split("(", 1)[0]:
            current = head.group(2)
            comps[current] = []
            continue
        if line.strip() == "}":
            current = None
            continue
        if current is not None:
            op = _hlo_opcode(line)
            if op is not None:
                comps[current].append((op, line.strip()))
    return comps


def hlo_instructions(text: str) -> list[tuple[str, str]]:
    """(opcode, line) of every instruction of an HLO module, every computation (fused ones included)."""
    _USES["hlo_instructions"] += 1
    return [item for body in hlo_computations(text).values() for item in body]


# A StableHLO (MLIR) operation statement: optional results `%0 = ` / `%0:2 = ` / `%a, %b = `, then the operation's
# name with its dialect (`stablehlo.add`, `func.func`, or quoted in MLIR's generic form "stablehlo.add").
_MLIR_OP = re.compile(r'^\s*(?:%[\w#.$\-]+(?::\d+)?(?:\s*,\s*%[\w#.$\-]+(?::\d+)?)*\s*=\s*)?"?([a-z_][\w]*\.[\w.]+)"?')


def hlo_ops(text: str) -> Counter:
    """Counter of op names of an HLO or StableHLO module's text, read from its structure.

    HLO: the opcode of every instruction in every computation (`dot`, `fusion`, `parameter`, `broadcast`, ...).
    StableHLO: the operations of the stablehlo dialect, each the op that starts a statement, by its full name
    (`stablehlo.dot_general`, `stablehlo.return` inside a region); the module's scaffolding (`module`, `func.func`,
    `call`, `return`) is not counted, nor is an op named inside another's attributes (`stablehlo.reduce(...)
    applies stablehlo.add` is one reduce)."""
    _USES["hlo_ops"] += 1
    if module_kind(text) == "hlo":
        return Counter(op for op, _ in hlo_instructions(text))
    counts: Counter = Counter()
    for line in text.splitlines():
        if line.lstrip().startswith(("//", "#", "^")):
            continue
        m = _MLIR_OP.match(line)
        if m and m.group(1).startswith("stablehlo."):
            counts[m.group(1)] += 1
    return counts


def fusions(text: str) -> list[dict[str, Any]]:
    """Every `fusion` instruction of an optimized HLO module: {"name", "kind" (kLoop, kOutput, kCustom, ...),
    "calls" (the fused computation), "backend" (the kind its backend config names, e.g. "__ynn_fusion"; "" when
    none), "ops" (Counter of the opcodes inside it, parameters left out)}."""
    _USES["fusions"] += 1
    comps = hlo_computations(text)
    out = []
    for body in comps.values():
        for op, line in body:
            if op != "fusion":
                continue
            named = re.match(r"^(?:ROOT\s+)?%?([\w.\-]+)", line)
            assert named is not None  # (every instruction line starts with its name)
            name = named.group(1)
            kind = re.search(r"\bkind=(\w+)", line)
            calls = re.search(r"\bcalls=%?([\w.\-]+)", line)
            backend = re.search(r'"fusion_config":\{"kind":"(\w+)"', line)
            inside = Counter(o for o, _ in comps.get(calls.group(1), [])) if calls else Counter()
            inside.pop("parameter", None)
            out.append(
                {
                    "name": name,
                    "kind": kind.group(1) if kind else "",
                    "calls": calls.group(1) if calls else "",
                    "backend": backend.group(1) if backend else "",
                    "ops": inside,
                }
            )
    return out


_SOURCE_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def without_source_tables(text: str) -> tuple[str, int]:
    """An optimized HLO module's text without its source-location tables (`FileNames`, `FunctionNames`,
    `FileLocations`, `StackFrames`: the Python frames each op was traced from; in a notebook they run through
    ipykernel's own frames), and how many lines were left out. Instructions keep their metadata."""
    kept, dropped, skipping = [], 0, False
    for line in text.splitlines():
        if line.strip() in _SOURCE_TABLES:
            skipping = True
        if skipping:
            if not line.strip():
                skipping = False
            else:
                dropped += 1
                continue
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip() + "\n", dropped


def word_count(text: str, word: str) -> int:
    """How many times `word` appears in `text` as a substring (what searching a dump for it counts)."""
    return text.count(word)


# ----------------------------------------------------------------------------------------------------------------
# dot_general as a GEMM
# ----------------------------------------------------------------------------------------------------------------


def _dims(dims: Any) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]]:
    try:
        (lc, rc), (lb, rb) = dims
        return (tuple(int(d) for d in lc), tuple(int(d) for d in rc)), (
            tuple(int(d) for d in lb),
            tuple(int(d) for d in rb),
        )
    except (TypeError, ValueError):
        raise ValueError(
            f"dimension numbers are ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)), as "
            f"in a jaxpr's dimension_numbers=(([1], [0]), ([], [])); got {dims!r}"
        ) from None


def check_dims(dims: Any, lhs_shape: Sequence[int], rhs_shape: Sequence[int]) -> None:
    """ValueError naming what is wrong when `dims` is not a valid dot_general of these shapes."""
    (lc, rc), (lb, rb) = _dims(dims)
    for side, shape, dd in (("lhs", lhs_shape, lc + lb), ("rhs", rhs_shape, rc + rb)):
        bad = [d for d in dd if not 0 <= d < len(shape)]
        if bad:
            raise ValueError(
                f"{side} has {len(shape)} dimensions (shape {tuple(shape)}); dimension {bad[0]} does not exist"
            )
        if len(set(dd)) != len(dd):
            raise ValueError(f"{side}: a dimension is named twice among its contracting and batch dimensions {dd}")
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise ValueError(
            f"lhs and rhs must name as many contracting ({len(lc)} vs {len(rc)}) and batch ({len(lb)} vs "
            f"{len(rb)}) dimensions"
        )
    for kind, ld, rd in (("contracting", lc, rc), ("batch", lb, rb)):
        for a, b in zip(ld, rd, strict=True):
            if lhs_shape[a] != rhs_shape[b]:
                raise ValueError(f"{kind} dimension lhs[{a}] = {lhs_shape[a]} does not match rhs[{b}] = {rhs_shape[b]}")


def gemm_shape(dims: Any, lhs_shape: Sequence[int], rhs_shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of dot_general: batch = Π batch sizes, K = Π contracting sizes, M = Π lhs free sizes,
    N = Π rhs free sizes."""
    _USES["gemm_shape"] += 1
    check_dims(dims, lhs_shape, rhs_shape)
    (lc, rc), (lb, rb) = _dims(dims)
    batch = math.prod(lhs_shape[d] for d in lb)
    k = math.prod(lhs_shape[d] for d in lc)
    m = math.prod(s for d, s in enumerate(lhs_shape) if d not in lc + lb)
    n = math.prod(s for d, s in enumerate(rhs_shape) if d not in rc + rb)
    return int(batch), int(m), int(n), int(k)


def gemm_flops(dims: Any, lhs_shape: Sequence[int], rhs_shape: Sequence[int]) -> int:
    """FLOPs of dot_general = 2·batch·M·N·K (one multiply and one add per term)."""
    _USES["gemm_flops"] += 1
    b, m, n, k = gemm_shape(dims, lhs_shape, rhs_shape)
    return 2 * b * m * n * k


def dot_dims(closed: ClosedJaxpr) -> list[tuple[tuple, tuple, tuple]]:
    """(dimension_numbers, lhs shape, rhs shape) of every dot_general in a jaxpr, nested ones included."""
    _USES["dot_dims"] += 1
    out = []

    def walk(j: Jaxpr) -> None:
        for eqn in j.eqns:
            if eqn.primitive.name == "dot_general":
                (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
                dims = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
                # a dot_general's operands are ShapedArrays; jax types an aval as the AbstractValue they subclass
                lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape  # pyright: ignore[reportAttributeAccessIssue]
                out.append((dims, tuple(lhs), tuple(rhs)))
            for sub in _sub_jaxprs(eqn):
                walk(sub)

    walk(closed.jaxpr if isinstance(closed, ClosedJaxpr) else closed)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Forward and gradient GEMM counts
# ----------------------------------------------------------------------------------------------------------------


def grad_of_sum(f: Callable, n_params: int) -> Callable:
    """g(x, *params) = the gradient of Σ f(x, *params) with respect to every parameter (all but the first argument)."""

    def loss(params, x):
        return jnp.sum(f(x, *params))

    def g(x, *params):
        if len(params) != n_params:
            raise TypeError(f"expected {n_params} parameters, got {len(params)}")
        return jax.grad(loss)(params, x)

    return g


def gemm_counts(f: Callable, *args) -> tuple[int, int]:
    """(forward, gradient): dot_general equations in the jaxpr of f(*args), and in the jaxpr of the gradient of
    Σ f(*args) with respect to every argument after the first (`grad_of_sum`); nested jaxprs counted at each call."""
    _USES["gemm_counts"] += 1
    if not args:
        raise ValueError("gemm_counts needs the input and at least one parameter: f(x, *params)")
    forward = jaxpr_ops(jaxpr(f, *args))["dot_general"]
    gradient = jaxpr_ops(jaxpr(grad_of_sum(f, len(args) - 1), *args))["dot_general"]
    return forward, gradient
