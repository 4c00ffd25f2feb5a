"""Checks that teach.

Every check runs a learner's function on named cases and compares it with an oracle (torch in float64). On the
first failure it raises `CheckFailure` (an `AssertionError`, so nbgrader scores the cell 0) with a message that
says what was tried, what was expected, what came back, the error against the stated tolerance, and one next
step. On success it prints what was proved and how many hidden checks grading still runs.

Rules an exercise states ("no `torch.dot`", "one matrix-vector product") are enforced by recording every torch
function and every ATen op the learner's code runs (`twoprim.core.record.record_calls`).

A wrong tensor is shown where it is wrong: the first wrong element by its coordinates and, given `Axis` names, what
they mean (batch 0, row 1 = channel 0 at kernel offset (0, 1)); the rows around it, expected above got; and, when
the values are right but in another order, which axes look swapped. A failure of a function that calls another
graded function whose own check failed says first to fix that one. A check that reads only an answer's form says
"answered" (`ANSWERED`), never ✔.

Why this module is long: it is the one place every check goes through, in the kernel and in the grader (running
the cases, judging recorded results, the messages for each way to fail, readable differences, which failure is
whose); split further, a message would sit apart from the judge that decides it.
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import math
import os
import types
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from twoprim.core import verdicts
from twoprim.core.cases import dtype_name
from twoprim.core.failures import ANSWERED, CheckFailure, Mismatch
from twoprim.core.record import GEMM_ATEN, GEMM_FUNCTIONS, CallLog, record_calls

__all__ = [
    "Case",
    "CheckFailure",
    "Mismatch",
    "Rule",
    "Axis",
    "CallLog",
    "record_calls",
    "run_check",
    "describe",
    "eps",
    "reduction_tolerance",
    "elementwise_tolerance",
    "forbid",
    "GEMM_FUNCTIONS",
    "GEMM_ATEN",
    "ANSWERED",
    "expected_values",
    "keep_expected",
    "no_grader_calls",
    "counted",
]


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: a label a person can read, the arguments, and a seed-free payload."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    """A rule an exercise states, checked on the `CallLog` of every case.

    `test(log, case)` returns None when the rule holds, or a sentence saying what the code did instead.
    """

    name: str
    test: Callable[[CallLog, Case], str | None]
    next_step: str


class _RuleLike(Protocol):
    """What `run_check` reads of a rule: a `Rule`, or an object that sets its next step as it tests (ex09's and
    ex11's compiled-code rules)."""

    name: str
    next_step: str

    def test(self, log: CallLog, case: Case) -> str | None: ...


def forbid(what: str, functions: Iterable[str] = (), aten: Iterable[str] = (), *, next_step: str) -> Rule:
    """A rule that fails when any of the named torch functions or ATen ops ran."""
    functions, aten = frozenset(functions), frozenset(aten)

    def test(log: CallLog, case: Case) -> str | None:
        hits = log.used(functions, aten)
        if hits:
            return f"it called {', '.join(sorted(hits))}, which this exercise rules out ({what})"
        return None

    return Rule(what, test, next_step)


def counted(fn: Callable, counter: collections.Counter) -> Callable:
    """`fn`, counting each call in `counter` under its name: how a module marks its ground-truth functions for
    `no_grader_calls`. Wrapped rather than edited, so `inspect.getsource` still shows `fn`'s own code."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        counter[fn.__name__] += 1
        return fn(*args, **kwargs)

    return call


def no_grader_calls(
    fn: Callable,
    uses: dict[str, Callable[[], collections.Counter]],
    *,
    next_step: str,
    call: Callable[..., Any] | None = None,
    why: str = "the grader's ground truth",
    rule: str | None = None,
) -> tuple[Callable, Rule]:
    """The rule "your own code": a check's reference functions are the grader's ground truth, and an answer that
    calls them proves nothing. `uses` maps each module holding such functions to its counter of their calls
    (`twoprim.topics.convolution.uses`, ...). Returns `fn` wrapped so that each call notes which of them it used,
    and the `Rule` that fails when the last call used any ("it called twoprim.topics.xla.hlo_ops ×1").
    The rule is named "your own code: no calls to `why`, in `uses`' modules", or `rule` when given.
    `call(fn, *args, **kwargs)` runs `fn` (its default calls it as it is): to unpack a case's arguments, or to run
    it outside the recorder."""
    used: collections.Counter = collections.Counter()
    name = rule or f"your own code: no calls to {why}, in {', '.join(uses)}"
    if not callable(fn):  # run_check says what was passed instead
        return fn, Rule(name, lambda log, case: None, next_step)

    @functools.wraps(fn)
    def watched(*args, **kwargs):
        before = {module: count() for module, count in uses.items()}
        try:
            return call(fn, *args, **kwargs) if call is not None else fn(*args, **kwargs)
        finally:
            used.clear()
            for module, count in uses.items():
                used.update({f"{module}.{called}": n for called, n in (count() - before[module]).items()})

    def test(log: CallLog, case: Case) -> str | None:
        if used:
            return "it called " + ", ".join(f"{called} ×{n}" for called, n in sorted(used.items()))
        return None

    return watched, Rule(name, test, next_step)


# ----------------------------------------------------------------------------------------------------------------
# Describing values
# ----------------------------------------------------------------------------------------------------------------


def describe(value: Any) -> str:
    """A short description: dtype and shape for tensors (plus strides when not contiguous)."""
    if isinstance(value, torch.Tensor):
        text = f"{dtype_name(value.dtype)} tensor of shape {tuple(value.shape)}"
        if not value.is_contiguous():
            text += f" (non-contiguous, strides {value.stride()})"
        return text
    if type(value).__module__.startswith("mlx") and hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"MLX {str(value.dtype).replace('mlx.core.', '')} array of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)) and len(value) > 6:
        return f"{type(value).__name__} of length {len(value)}"
    if isinstance(value, float):
        return f"float {value:.6g}"
    return f"{type(value).__name__} {value!r}"


def _short_values(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1)
        if flat.numel() == 0:
            return "[]"
        shown = ", ".join(f"{float(v):.6g}" if value.is_floating_point() else str(int(v)) for v in flat[:6])
        return f"[{shown}{', ...' if flat.numel() > 6 else ''}]" if value.dim() else shown
    return repr(value)


def describe_call(fn_name: str, case: Case) -> str:
    """'dot(float32 tensor of shape (3,), ...)': the call a case makes, its arguments described."""
    parts = [describe(a) for a in case.args] + [f"{k}={describe(v)}" for k, v in case.kwargs.items()]
    return f"{fn_name}({', '.join(parts)})"


# ----------------------------------------------------------------------------------------------------------------
# Tolerances
# ----------------------------------------------------------------------------------------------------------------


def eps(dtype: torch.dtype) -> float:
    """The machine epsilon of `dtype` (`torch.finfo(dtype).eps`): the unit every tolerance here is a multiple of."""
    return torch.finfo(dtype).eps


def reduction_tolerance(dtype: torch.dtype, abs_sum: float, *, k: float = 4.0) -> float:
    """Error bound for a sum of products: k·eps(dtype)·Σ|xᵢwᵢ| (plus a floor so exact zeros compare)."""
    return k * eps(dtype) * abs_sum + torch.finfo(dtype).tiny


def elementwise_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for results that round a few times per element."""
    return {
        torch.float64: (1e-10, 1e-9),
        torch.float32: (1e-5, 1e-5),
        torch.float16: (1e-2, 1e-2),
        torch.bfloat16: (5e-2, 5e-2),
    }.get(dtype, (1e-5, 1e-5))


# ----------------------------------------------------------------------------------------------------------------
# Judges: compare what came back with what was expected; raise Mismatch with a readable detail
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """What one dimension of a result holds, for messages: its name and, when it flattens several axes (row-major),
    their names and sizes, e.g. `Axis("row", (("channel", 3), ("kernel row", 3), ("kernel column", 3)))`."""

    name: str
    parts: tuple[tuple[str, int], ...] = ()

    def factors(self, size: int) -> list[tuple[str, int]]:
        """The axes this dimension of `size` flattens: its parts when they multiply to `size`, else itself."""
        if len(self.parts) > 1 and math.prod(s for _, s in self.parts) == size:
            return list(self.parts)
        return [(self.name, size)]

    def at(self, i: int, size: int) -> str:
        """'row 1 (channel 0, kernel row 0, kernel column 1)': the index and what it means."""
        factors = self.factors(size)
        if len(factors) == 1:
            return f"{self.name} {i}"
        coords = _unravel(i, [s for _, s in factors])
        return f"{self.name} {i} (" + ", ".join(f"{n} {c}" for (n, _), c in zip(factors, coords, strict=True)) + ")"


def _unravel(flat: int, shape: Sequence[int]) -> list[int]:
    coords = []
    for size in reversed(shape):
        coords.append(flat % size)
        flat //= size
    return coords[::-1]


def _axes_for(shape: Sequence[int], axes: Sequence[Axis] | None) -> list[Axis]:
    if axes is not None and len(axes) == len(shape):
        return list(axes)
    n = len(shape)
    names = [f"dim {d} index" for d in range(n - 2)] + (["row", "column"] if n >= 2 else ["element"] * n)
    return [Axis(name) for name in names]


def judge_tensor(
    got: Any,
    expected: torch.Tensor,
    *,
    atol: float,
    rtol: float,
    what: str = "the result",
    axes: Sequence[Axis] | None = None,
) -> str:
    """Type, shape, dtype, then values. Returns a summary of the error for the pass message. `axes` says what each
    dimension holds, so that a wrong element is named by its meaning and a reordering of axes is recognised."""
    if not isinstance(got, torch.Tensor):
        raise Mismatch(
            f"{describe(got)}, but {what} should be a {dtype_name(expected.dtype)} tensor of shape "
            f"{tuple(expected.shape)}",
            next_step="return a torch tensor (not a Python number, list or NumPy array)",
        )
    if got.shape != expected.shape:
        reordered = ""
        if sorted(got.shape) == sorted(expected.shape) and got.dim() > 1:
            reordered = (
                " (the same sizes in another order: a transpose or permute of the axes is missing or one too many)"
            )
        raise Mismatch(
            f"shape {tuple(got.shape)}, expected shape {tuple(expected.shape)}{reordered}",
            next_step="write the shape of every intermediate in a comment and check which step adds, drops or "
            "broadcasts a dimension",
        )
    if got.dtype != expected.dtype:
        raise Mismatch(
            f"dtype {dtype_name(got.dtype)}, expected {dtype_name(expected.dtype)} (the input's dtype)",
            next_step="keep the computation in the input's dtype: avoid creating tensors with a fixed dtype, "
            "or build them with dtype=x.dtype",
        )
    return judge_values(got, expected, atol=atol, rtol=rtol, axes=axes)


_PREVIEW = 8  # results with at most this many elements are shown whole; larger ones around the first wrong element


def judge_values(
    got: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float, axes: Sequence[Axis] | None = None
) -> str:
    """Values of `got` against `expected` within atol + rtol·|expected|: the error summary, or Mismatch naming the
    first wrong element."""
    g, e = got.detach().to(torch.float64), expected.detach().to(torch.float64)
    if g.numel() == 0:
        return "empty result"
    if g.shape != e.shape:
        raise Mismatch(f"shape {tuple(g.shape)}, expected shape {tuple(e.shape)}")
    shape = tuple(g.shape)
    nan_mismatch = torch.isnan(g) != torch.isnan(e)
    if nan_mismatch.any():
        i = int(nan_mismatch.reshape(-1).nonzero()[0])
        raise Mismatch(
            f"NaN where a number was expected (or the reverse) at {_where(i, shape, axes)}: got "
            f"{float(g.reshape(-1)[i]):.6g}, expected {float(e.reshape(-1)[i]):.6g}",
            next_step="look for a division by zero or an overflow (exp of a large number)",
        )
    inf_mismatch = (torch.isinf(g) | torch.isinf(e)) & (g != e) & ~torch.isnan(e)
    if inf_mismatch.any():
        i = int(inf_mismatch.reshape(-1).nonzero()[0])
        raise Mismatch(
            f"an infinity where the expected value is finite (or the reverse) at {_where(i, shape, axes)}: "
            f"got {float(g.reshape(-1)[i]):.6g}, expected {float(e.reshape(-1)[i]):.6g}",
            next_step="look for an overflow: in float16 anything above 65504 becomes inf",
        )
    numbers = ~torch.isnan(e)
    diff = torch.where(numbers & ~torch.isinf(e), (g - e).abs(), torch.zeros_like(g))
    allowed = atol + rtol * e.abs()
    bad = (diff > allowed) & numbers
    summary = _error_summary(diff, e, bad, numbers, atol, rtol)
    if not bad.any():
        return summary
    i = int(bad.reshape(-1).nonzero()[0])
    if g.numel() <= _PREVIEW:
        where = ""
        if g.numel() > 1:
            where = (
                f"\n  first wrong element: {_where(i, shape, axes)}, got {float(g.reshape(-1)[i]):.8g}, "
                f"expected {float(e.reshape(-1)[i]):.8g}"
            )
        raise Mismatch(f"{describe(got)}: {_short_values(got)}{where}\n  error:    {summary}")
    lines = [
        f"{describe(got)}: {int(bad.sum())} of {g.numel()} elements wrong",
        f"  first wrong element: {_where(i, shape, axes)}: got {float(g.reshape(-1)[i]):.8g}, expected "
        f"{float(e.reshape(-1)[i]):.8g}",
    ]
    lines += _window(g, e, bad, _unravel(i, shape), _axes_for(shape, axes))
    order, next_step = _reordering(g, e, atol, rtol, _axes_for(shape, axes))
    if order:
        lines.append(f"  order:    {order}")
    lines.append(f"  error:    {summary}")
    raise Mismatch("\n".join(lines), next_step=next_step, expected=describe(expected))


def _where(flat: int, shape: tuple, axes: Sequence[Axis] | None) -> str:
    """'[0, 1, 0] = batch 0, row 1 (channel 0, kernel row 0, kernel column 1), column 0': coordinates, and with
    `axes` what they mean."""
    coords = _unravel(flat, shape)
    text = f"[{', '.join(map(str, coords))}]"
    if axes is not None and len(axes) == len(shape):
        text += " = " + ", ".join(a.at(c, n) for a, c, n in zip(axes, coords, shape, strict=True))
    return text


class ErrorSummary(str):
    """A judge's account of a result's error: its text is what the messages show, its numbers say how close it came
    to failing (`closeness`), so that a check reports its worst case without reading its own words back."""

    abs_error: float
    rel_error: float
    atol: float
    rtol: float

    def __new__(cls, abs_error: float, rel_error: float, atol: float, rtol: float, note: str = ""):
        text = (
            f"max abs error {abs_error:.2e}, max rel error {rel_error:.2e}; tolerance abs {atol:.1e} + rel "
            f"{rtol:.1e}{note}"
        )
        summary = super().__new__(cls, text)
        summary.abs_error, summary.rel_error, summary.atol, summary.rtol = abs_error, rel_error, atol, rtol
        return summary

    @property
    def closeness(self) -> float:
        """The largest absolute error as a fraction of the absolute tolerance (1 or more would have failed)."""
        return self.abs_error / max(self.atol, 1e-300)


def _error_summary(diff, e, bad, numbers, atol: float, rtol: float) -> ErrorSummary:
    """The largest absolute and relative errors against the tolerance. The relative error is taken where the
    expected value is not 0 (divided by 0 it means nothing); wrong values where 0 was expected are said apart."""
    max_abs = float(diff.max())
    nonzero = numbers & (e != 0)
    max_rel = float((diff[nonzero] / e[nonzero].abs()).max()) if nonzero.any() else 0.0
    note = ""
    at_zero = bad & (e == 0)
    if at_zero.any():
        note = (
            f"; {int(at_zero.sum())} wrong where the expected value is exactly 0 (got up to "
            f"{float(diff[at_zero].max()):.3g} there; no relative error is defined at 0)"
        )
    elif not nonzero.any():
        note = " (every expected value is 0, so only the absolute error means something)"
    return ErrorSummary(max_abs, max_rel, atol, rtol, note)


def _num(v: float) -> str:
    return f"{v:.5g}"


def _window(g, e, bad, coords: list[int], axes: list[Axis]) -> list[str]:
    """Expected and got side by side around the first wrong element: up to 4 rows and 8 columns of the last two
    dimensions, at the wrong element's leading coordinates; wrong values marked with *."""
    if g.dim() == 0:
        return []
    lead = coords[:-2]
    if g.dim() == 1:
        G, E, B, r, c = g[None], e[None], bad[None], 0, coords[0]
    else:
        G, E, B, r, c = g[tuple(lead)], e[tuple(lead)], bad[tuple(lead)], coords[-2], coords[-1]
    rows, cols = G.shape
    r0 = max(0, min(r - 1, rows - 4))
    c0 = max(0, min(c - 3, cols - _PREVIEW))
    r1, c1 = min(rows, r0 + 4), min(cols, c0 + _PREVIEW)
    col_axis = axes[-1]
    row_axis = axes[-2] if g.dim() > 1 else None
    at = ", ".join(f"{a.name} {i}" for a, i in zip(axes, lead, strict=False))
    head = f"  around it{', at ' + at if at else ''} (* marks a wrong value):"
    labels = [f"{row_axis.name} {i}" if row_axis else "" for i in range(r0, r1)]
    width = max(len(x) for x in labels) + 2
    cells = {
        (i, j): (_num(float(E[i, j])), _num(float(G[i, j])) + ("*" if bool(B[i, j]) else " "))
        for i in range(r0, r1)
        for j in range(c0, c1)
    }
    w = max(max(len(a), len(b)) for a, b in cells.values()) + 1
    lines = [
        head,
        " " * 4
        + f"{col_axis.name:>{width + 9}}"
        + "".join(f"{j:>{w}}" for j in range(c0, c1))
        + (" ..." if c1 < cols else ""),
    ]
    for k, i in enumerate(range(r0, r1)):
        lines.append(
            " " * 4 + f"{labels[k]:<{width}}expected " + "".join(f"{cells[i, j][0] + ' ':>{w}}" for j in range(c0, c1))
        )
        lines.append(" " * 4 + f"{'':<{width}}     got " + "".join(f"{cells[i, j][1]:>{w}}" for j in range(c0, c1)))
    return [line.rstrip() for line in lines]


_MAX_REORDER_AXES = 7
_MAX_REORDER_NUMEL = 4_000_000


def _reordering(g, e, atol: float, rtol: float, axes: list[Axis]) -> tuple[str, str | None]:
    """When `g` holds the values of `e` in another order: which of the axes that `axes` names look swapped, found by
    trying every order of them (a sentence and a next step); ("", None) when the values differ."""
    if g.numel() > _MAX_REORDER_NUMEL or g.numel() < 2:
        return "", None
    gs, es = torch.sort(g.reshape(-1)).values, torch.sort(e.reshape(-1)).values
    if not bool(((gs - es).abs() <= atol + rtol * es.abs()).all()):
        return "", None
    factors = [f for axis, size in zip(axes, g.shape, strict=False) for f in axis.factors(size) if f[1] > 1]
    same = "the same values as expected, in another order"
    if len(factors) < 2 or len(factors) > _MAX_REORDER_AXES:
        return same + ": the values are right, their positions are not", None
    names, sizes = [n for n, _ in factors], [s for _, s in factors]
    E, flat = e.reshape(sizes), g.reshape(-1)
    identity = tuple(range(len(sizes)))
    for perm in sorted(
        itertools.permutations(identity), key=lambda p: sum(a != b for a, b in zip(p, identity, strict=True))
    ):
        if perm == identity:
            continue
        moved = E.permute(perm).reshape(-1)
        if bool(((moved - flat).abs() <= atol + rtol * moved.abs()).all()):
            return _describe_reordering(names, perm, same)
    return same + ", but not any reordering of its axes: the values are right, their positions are not", None


def _describe_reordering(names: list[str], perm: tuple, same: str) -> tuple[str, str]:
    moved = [k for k in range(len(perm)) if perm[k] != k]
    lo, hi = moved[0], moved[-1] + 1
    want, got = names[lo:hi], [names[perm[k]] for k in range(lo, hi)]
    swap = ""
    if len(moved) == 2:
        swap = f"{names[moved[0]]} and {names[moved[1]]} look swapped"
    else:
        for s in range(1, len(want)):
            if got == want[s:] + want[:s]:
                swap = f"({', '.join(want[:s])}) and ({', '.join(want[s:])}) look swapped"
                break
    text = (
        f"{same}: {swap + ' — ' if swap else ''}your result has the axes ({', '.join(got)}) where the expected "
        f"one has ({', '.join(want)})"
    )
    step = (
        f"put the axes in the order ({', '.join(names)}) before the final reshape: permute ({', '.join(got)}) "
        f"into ({', '.join(want)})"
    )
    return text, step


# ----------------------------------------------------------------------------------------------------------------
# The runner
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class CheckResult:
    """What a passing check returns: its task, how many cases passed, the worst case's error summary."""

    task: str
    cases: int
    summary: str
    answered: bool = False  # a form-only check: the answer's value is graded later (ANSWERED)

    def __repr__(self) -> str:  # shows nicely if a learner evaluates a check as the last line of a cell
        if self.answered:
            return f"CheckResult({self.task!r}, answered: only the form was checked)"
        return f"CheckResult({self.task!r}, passed {self.cases} cases)"


def run_check(
    task: str,
    fn: Callable,
    cases: Sequence[Case],
    *,
    expected: Callable[..., Any],
    judge: Callable[[Any, Any, Case], str],
    proves: str,
    rules: Sequence[Rule | _RuleLike] = (),
    hidden: int = 0,
    next_step: str = "",
    quiet: bool = False,
    form_only: bool = False,
) -> CheckResult:
    """Run `fn` on every case; compare with `expected(*args, **kwargs)` through `judge`; enforce `rules`.

    `task` is the id used everywhere (nbgrader grade_id, heading, message). `hidden` is the number of hidden
    checks grading adds for this function (0 inside the hidden checks themselves). `form_only`: the judge reads only
    the answer's form (its value is measured when grading), so a pass says "answered", never ✔.

    When the check fails and `fn` calls another graded function of the same assignment whose own check failed (in
    this kernel, or for this submission in the grader), the message says so first: fix that one first.
    """
    if not callable(fn):
        raise CheckFailure(
            f"✘ {task}: expected a function, got {describe(fn)}. Pass the function itself, "
            f"without calling it: check(my_function), not check(my_function(...))."
        )
    name = getattr(fn, "__name__", "your function")
    labels = [c.label for c in cases]
    replay = verdicts.current_replay()
    uses: set[str] = set()
    try:
        if replay is not None:  # in the grader: judge what the submission's kernel recorded, never run its code
            summaries = _judge_recorded(
                task, fn, cases, replay, expected=expected, judge=judge, next_step=next_step, uses=uses
            )
        else:
            uses |= _calls(fn)
            summaries = _run_cases(
                task, fn, name, cases, expected=expected, judge=judge, rules=rules, next_step=next_step, uses=uses
            )
    except CheckFailure as failure:
        _remember(task, fn, name, labels, passed=False)
        blamed = [] if getattr(failure, "not_written", False) else _failing_dependencies(task, fn, name, uses)
        if blamed:  # (a function that is itself a stub blames nothing else)
            raise CheckFailure(_blame(task, name, blamed, str(failure))) from failure.__cause__
        raise
    if replay is None and os.environ.get(verdicts.CAPTURE_ENV):  # a kernel being graded: the grader judges
        if not quiet:
            print(f"○ {task}: {len(cases)} case{'s' if len(cases) != 1 else ''} recorded for the grader to judge.")
        return CheckResult(task, len(cases), "", answered=True)
    _remember(task, fn, name, labels, passed=True)
    result = CheckResult(task, len(cases), _worst(summaries), answered=form_only)
    if not quiet:
        if form_only:
            aid = task.split("-", 1)[0]
            message = (
                f"○ {task}: {ANSWERED} (`./course selfgrade {aid}`) or when your work is graded; only its "
                f"form was checked here: {proves}."
            )
        else:
            message = f"✔ {task}: {proves} — passed {len(cases)} case{'s' if len(cases) != 1 else ''}"
            if result.summary:
                message += f" ({result.summary})"
            message += "."
        if hidden:
            message += (
                f"\n  Grading runs {hidden} more hidden check{'s' if hidden != 1 else ''} on this function; "
                f"passing here does not guarantee those."
            )
        print(message)
    return result


# ----------------------------------------------------------------------------------------------------------------
# A failure caused by another graded function: which checks failed, and which of the learner's functions a
# function calls (the names its code uses, nested functions and comprehensions included)
# ----------------------------------------------------------------------------------------------------------------

_KERNEL_OUTCOMES: dict[tuple[str, str], dict] = {}  # in a kernel: (assignment, function) -> outcome
_REPLAY_OUTCOMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # in the grader: one per submission


def _outcomes() -> dict:
    replay = verdicts.current_replay()
    if replay is None:
        return _KERNEL_OUTCOMES
    return _REPLAY_OUTCOMES.setdefault(replay, {})


def _target(fn: Any) -> Any:
    """The learner's own function behind wrappers (functools.wraps sets __wrapped__)."""
    try:
        return inspect.unwrap(fn)
    except Exception:  # noqa: BLE001 - a callable whose __wrapped__ chain is odd is taken as it is
        return fn


def _calls(fn: Any) -> set[str]:
    """Names of the functions, defined beside `fn` (the same module: a notebook's), that its code refers to."""
    target = _target(fn)
    code, found = getattr(target, "__code__", None), set()
    if not isinstance(code, types.CodeType):
        return found
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names |= set(c.co_names)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    scope = getattr(target, "__globals__", {})
    module = getattr(target, "__module__", None)
    for n in names:
        value = scope.get(n)
        if n != target.__name__ and isinstance(value, types.FunctionType) and value.__module__ == module:
            found.add(n)
    return set(sorted(found)[:20])


def _remember(task: str, fn: Any, name: str, labels: list[str], *, passed: bool) -> None:
    """Record how this check of `name` ended; a redefined function (another object) starts a fresh record."""
    aid, key = task.split("-", 1)[0], hash(tuple(labels))
    outcomes = _outcomes()
    target = None if verdicts.current_replay() is not None else _target(fn)
    entry = outcomes.get((aid, name))
    if entry is None or (target is not None and entry["ref"] is not None and entry["ref"]() is not target):
        try:
            ref = weakref.ref(target) if target is not None else None
        except TypeError:
            ref = None
        entry = {"task": task, "ref": ref, "failed": set()}
        outcomes[(aid, name)] = entry
    (entry["failed"].discard if passed else entry["failed"].add)(key)


def _failing_dependencies(task: str, fn: Any, name: str, uses: set[str]) -> list[tuple[str, str]]:
    """(function, its check's task) for each function `fn` calls whose check failed, most recently run first."""
    aid = task.split("-", 1)[0]
    outcomes = _outcomes()
    in_kernel = verdicts.current_replay() is None
    scope = getattr(_target(fn), "__globals__", {}) if in_kernel else {}
    found = []
    for dep in sorted(uses - {name}):
        entry = outcomes.get((aid, dep))
        if not entry or not entry["failed"]:
            continue
        if in_kernel and entry["ref"] is not None and _target(scope.get(dep)) is not entry["ref"]():
            continue  # redefined since its check failed: unknown until that check runs again
        found.append((dep, entry["task"]))
    return found


def _blame(task: str, name: str, blamed: list[tuple[str, str]], message: str) -> str:
    deps = " and ".join(f"`{dep}`" for dep, _ in blamed)
    tasks = ", ".join(t for _, t in blamed)
    verb = "fails its check" if len(blamed) == 1 else "fail their checks"
    return (
        f"✘ {task}: {deps} {verb} ({tasks}); fix {'it' if len(blamed) == 1 else 'them'} first.\n"
        f"  why:      `{name}` calls {deps}, so what this check reports below may come from {deps}, not from "
        f"`{name}`; run this check again once {deps} pass{'es' if len(blamed) == 1 else ''}.\n"
        + "\n".join("  " + line if line.startswith("✘") else line for line in message.splitlines())
    )


def _raised_elsewhere(err: BaseException, fn: Any, uses: set[str]) -> str | None:
    """The name of the function `fn` calls in which `err` was raised (innermost frame), when it is one of `uses`."""
    tb, last = err.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return None
    code = last.tb_frame.f_code
    if code is getattr(_target(fn), "__code__", None):
        return None
    return code.co_name if code.co_name in uses else None


def _not_written(task: str, name: str) -> CheckFailure:
    failure = CheckFailure(
        f"✘ {task}: `{name}` is not written yet (it raised NotImplementedError).\n"
        f"  next:     replace `raise NotImplementedError()` with your code, run that cell, then this one again."
    )
    failure.not_written = True
    return failure


def _raised(task: str, name: str, case: Case, tried: str, error: str) -> CheckFailure:
    return CheckFailure(
        f"✘ {task}: `{name}` raised {error}\n  case:     {case.label}\n  tried:    {tried}\n"
        f"  next:     run the call under `tried` yourself in a new cell to step through your code; those shapes are "
        f"the ones that broke it."
    )


def _broke(task: str, rule: str, case: Case, tried: str, found: str, next_step: str) -> CheckFailure:
    return CheckFailure(
        f"✘ {task}: the answer breaks a rule of this exercise: {rule}.\n  case:     {case.label}\n"
        f"  tried:    {tried}\n  found:    {found}\n  next:     {next_step}"
    )


def _wrong(
    task: str, case: Case, tried: str, want: Any, bad: Mismatch, next_step: str, layout: str = ""
) -> CheckFailure:
    expected = bad.expected if getattr(bad, "expected", None) else _describe_expected(want)
    return CheckFailure(
        f"✘ {task}: wrong result.\n  case:     {case.label}\n  tried:    {tried}\n"
        f"  expected: {expected}\n  got:      {bad.detail}\n"
        + (f"  layout:   {layout}\n" if layout else "")
        + f"  next:     {bad.next_step or next_step}"
    )


def as_contiguous(t: torch.Tensor) -> torch.Tensor | None:
    """`t`'s memory read as if `t` were contiguous (row-major from its storage offset): the values code that ignores
    t's strides sees. None when t is contiguous or its storage ends before that read would."""
    if not isinstance(t, torch.Tensor) or t.is_contiguous() or t.numel() == 0:
        return None
    if t.storage_offset() + t.numel() > t.untyped_storage().nbytes() // t.element_size():
        return None
    strides = [1] * t.dim()
    for d in range(t.dim() - 2, -1, -1):
        strides[d] = strides[d + 1] * t.shape[d + 1]
    return torch.as_strided(t.detach(), t.shape, strides, t.storage_offset()).clone()


def _layout_cause(
    fn: Any, case: Case, got: Any, bad: Mismatch, expected: Callable, judge: Callable, earlier: Sequence[Case] = ()
) -> str:
    """For a wrong result on a case with non-contiguous tensor arguments: which arguments' strides the code ignored,
    when reading them as if contiguous gives exactly what came back; else, when every case before it (all passed)
    was contiguous, that the code depends on memory layout. "" otherwise, or when the judge already said it."""
    said = f"{bad.detail} {bad.next_step}"
    if "as if" in said and "contiguous" in said:
        return ""
    loose = [i for i, a in enumerate(case.args) if isinstance(a, torch.Tensor) and not a.is_contiguous()]
    if not loose or len(loose) > 4:
        return ""
    try:
        params = list(inspect.signature(_target(fn)).parameters)
    except (TypeError, ValueError):
        params = []
    for size in range(1, len(loose) + 1):
        for chosen in itertools.combinations(loose, size):
            args = list(case.args)
            for i in chosen:
                args[i] = as_contiguous(args[i])
            if any(args[i] is None for i in chosen):
                continue
            try:
                read = replace(case, args=tuple(args))
                judge(got, expected(*read.args, **read.kwargs), read)
            except Exception:  # noqa: BLE001 - not this reading (a Mismatch, or an oracle refusing it)
                continue
            names = [f"`{params[i]}`" if i < len(params) else f"argument {i + 1}" for i in chosen]
            strides = ", ".join(f"{n} strides {case.args[i].stride()}" for n, i in zip(names, chosen, strict=True))
            which = " and ".join(names)
            were = "it were" if size == 1 else "they were"
            return (
                f"what came back is the right result for {which} read as if {were} contiguous ({strides}): "
                f"the code ignores the strides of a non-contiguous input, reading its "
                f"memory in row-major order. Index the tensor itself (torch ops follow the strides), or make a "
                f"contiguous copy (reshape, .contiguous()) before anything that reads raw memory"
            )
    if earlier and all(_contiguous_args(c) for c in earlier):
        strides = ", ".join(
            f"{f'`{params[i]}`' if i < len(params) else f'argument {i + 1}'} strides {case.args[i].stride()}"
            for i in loose
        )
        return (
            f"the {len(earlier)} case{'s' if len(earlier) != 1 else ''} before this one, all contiguous, passed; "
            f"this is the first with a non-contiguous input ({strides}): the code depends on the memory layout "
            f"somewhere (strides it computes itself from the shape, view, as_strided, data_ptr), while torch ops "
            f"on the tensor itself follow its strides"
        )
    return ""


def _contiguous_args(case: Case) -> bool:
    return all(a.is_contiguous() for a in (*case.args, *case.kwargs.values()) if isinstance(a, torch.Tensor))


def _run_cases(task, fn, name, cases, *, expected, judge, rules, next_step, uses) -> list[str]:
    """Call `fn` on every case (recording what ran), enforce the rules, judge; when the kernel is being graded,
    also record each case's outcome for the grader (`verdicts.start_capture`), with the functions `fn` calls."""
    capture = verdicts.start_capture(task, name, [c.label for c in cases])
    note = {"uses": ",".join(sorted(uses))} if uses else {}
    summaries = []
    for index, case in enumerate(cases):
        tried = describe_call(name, case)
        # Expected values come before the learner's call, which may change its inputs in place; except while the
        # kernel is graded: then they must not exist until the call has returned and its result is recorded (a
        # function that searches the caller's frames finds nothing), and the grader judges on its own copy.
        want = expected(*case.args, **case.kwargs) if capture is None else None
        with record_calls() as log:
            try:
                got = fn(*case.args, **case.kwargs)
            except NotImplementedError as err:
                elsewhere = _raised_elsewhere(err, fn, uses)
                if elsewhere:  # a stub `name` calls, not `name` itself
                    error = f"NotImplementedError in `{elsewhere}`, which is not written yet"
                    if capture:
                        capture.add("raised", error=error, **note)
                    raise _raised(task, name, case, tried, error) from None
                if capture:
                    capture.add("not_written", **note)
                raise _not_written(task, name) from None
            except CheckFailure:
                raise
            except Exception as err:
                if capture:
                    capture.add("raised", error=f"{type(err).__name__}: {err}", **note)
                raise _raised(task, name, case, tried, f"{type(err).__name__}: {err}") from err
        for rule in rules:
            broken = rule.test(log, case)
            if broken:
                if capture:
                    capture.add("broken", rule=rule.name, found=broken, next_step=rule.next_step, **note)
                raise _broke(task, rule.name, case, tried, broken, rule.next_step)
        if capture:  # the grader judges it, on expected values of its own: nothing to compute here
            capture.add("ok", got, **note)
            continue
        try:
            summaries.append(judge(got, want, case))
        except Mismatch as bad:
            raise _wrong(
                task,
                case,
                tried,
                want,
                bad,
                next_step,
                _layout_cause(fn, case, got, bad, expected, judge, cases[:index]),
            ) from None
    return summaries


# In a grading worker: the expected value of every case judged so far. Cases are built from a test cell's trusted
# source with fixed seeds, so the same cell gives the same cases and the same expected values for every submission;
# a worker computes each once (the oracle of ex06 traces graphs: seconds per submission otherwise).
_EXPECTED: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
_EXPECTED_MAX = 2048


def expected_values(cell: str) -> dict[tuple, Any]:
    """The expected values this process keeps for one test cell (`verdicts.cell_digest`), by case."""
    return {key: value for key, value in _EXPECTED.items() if key[0] == cell}


def has_expected(keys) -> bool:
    """Whether this process still keeps an expected value for every one of `keys` (the cache is bounded)."""
    return all(key in _EXPECTED for key in keys)


def keep_expected(values: dict[tuple, Any]) -> int:
    """Keep expected values computed elsewhere by the grader (`twoprim.grading.oracle`) as if computed here; a
    value already kept here stays. Returns how many were new."""
    new = 0
    for key, value in values.items():
        if key not in _EXPECTED:
            _EXPECTED[key] = value
            new += 1
    while len(_EXPECTED) > _EXPECTED_MAX:
        _EXPECTED.popitem(last=False)
    return new


def _expected_for(replay, task: str, labels: list[str], index: int, expected: Callable, case: Case) -> Any:
    key = (verdicts.current_cell(), task, tuple(labels), index)
    if key[0] is None:
        return expected(*case.args, **case.kwargs)
    if key in _EXPECTED:
        _EXPECTED.move_to_end(key)
        return _EXPECTED[key]
    want = _EXPECTED[key] = expected(*case.args, **case.kwargs)
    while len(_EXPECTED) > _EXPECTED_MAX:
        _EXPECTED.popitem(last=False)
    return want


def _judge_recorded(task, fn, cases, replay, *, expected, judge, next_step, uses) -> list[str]:
    """The grader's side of a check: expected values computed here, compared with the values the kernel recorded
    for the same cases; the kernel's own verdict is never read. `uses` receives the functions the kernel saw the
    learner's function call (only ever used to word a message)."""
    if replay.priming:  # no submission: only the expected values, kept for the submissions to come
        for i, case in enumerate(cases):
            _expected_for(replay, task, [c.label for c in cases], i, expected, case)
        return []
    capture = replay.find(task, [c.label for c in cases])
    if capture is None:
        raise CheckFailure(
            f"✘ {task}: no result of this check came back from the notebook's kernel: the check did not run there "
            f"(a cell before it stopped the notebook, or the notebook replaced the check).\n"
            f"  next:     restart the kernel and run every cell from the top; the check must run as given. If every "
            f"check says this, a cell near the top failed: the grading report names it."
        )
    name = str(capture.get("fn") or getattr(fn, "__name__", "your function"))
    for entry in capture["cases"]:
        if isinstance(entry, dict):
            uses |= {u for u in str(entry.get("uses", "")).split(",") if u.isidentifier()}
    summaries = []
    for i, case in enumerate(cases):
        tried = describe_call(name, case)
        want = _expected_for(replay, task, [c.label for c in cases], i, expected, case)
        entry = capture["cases"][i] if i < len(capture["cases"]) else None
        if not isinstance(entry, dict) or entry.get("status") not in ("ok", "raised", "not_written", "broken"):
            raise CheckFailure(
                f"✘ {task}: the kernel recorded no result for this case.\n  case:     {case.label}\n"
                f"  tried:    {tried}\n  next:     restart the kernel and run every cell from the top."
            )
        if entry["status"] == "not_written":
            raise _not_written(task, name)
        if entry["status"] == "raised":
            raise _raised(task, name, case, tried, str(entry.get("error", "an error")))
        if entry["status"] == "broken":
            raise _broke(
                task,
                str(entry.get("rule", "")),
                case,
                tried,
                str(entry.get("found", "")),
                str(entry.get("next_step", "")),
            )
        got = verdicts.decode(entry.get("value"))
        try:
            summaries.append(judge(got, want, case))
        except Mismatch as bad:
            raise _wrong(
                task, case, tried, want, bad, next_step, _layout_cause(fn, case, got, bad, expected, judge, cases[:i])
            ) from None
    return summaries


def _describe_expected(want: Any) -> str:
    if isinstance(want, torch.Tensor):
        return f"{describe(want)}: {_short_values(want)}"
    if type(want) in (tuple, list) and want and all(isinstance(w, torch.Tensor) for w in want):
        return f"{type(want).__name__} of {len(want)}: " + "; ".join(_describe_expected(w) for w in want)
    return repr(want)


def _worst(summaries: Sequence[str]) -> str:
    """The summary closest to failing (the largest absolute error as a fraction of its tolerance), said as the worst
    case; "" when no judge measured an error."""
    measured = [s for s in summaries if isinstance(s, ErrorSummary)]
    if not measured:
        return ""
    return str(max(measured, key=lambda s: s.closeness)).replace("max abs error", "worst case: max abs error")
