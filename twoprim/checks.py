"""Checks that teach.

Every check runs a learner's function on named cases and compares it with an oracle (torch in float64). On the
first failure it raises `CheckFailure` (an `AssertionError`, so nbgrader scores the cell 0) with a message that
says what was tried, what was expected, what came back, the error against the stated tolerance, and one next
step. On success it prints what was proved and how many hidden checks grading still runs.

Rules an exercise states ("no `torch.dot`", "one matrix-vector product") are enforced by recording every torch
function and every ATen op the learner's code runs (`twoprim.record.record_calls`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from . import verdicts
from .failures import CheckFailure, Mismatch
from .record import GEMM_ATEN, GEMM_FUNCTIONS, CallLog, record_calls

__all__ = [
    "Case", "CheckFailure", "Mismatch", "Rule", "CallLog", "record_calls", "run_check", "describe",
    "reduction_tolerance", "elementwise_tolerance", "forbid", "GEMM_FUNCTIONS", "GEMM_ATEN",
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


def forbid(what: str, functions: Iterable[str] = (), aten: Iterable[str] = (), *, next_step: str) -> Rule:
    """A rule that fails when any of the named torch functions or ATen ops ran."""
    functions, aten = frozenset(functions), frozenset(aten)

    def test(log: CallLog, case: Case) -> str | None:
        hits = log.used(functions, aten)
        if hits:
            return f"it called {', '.join(sorted(hits))}, which this exercise rules out ({what})"
        return None

    return Rule(what, test, next_step)


# ----------------------------------------------------------------------------------------------------------------
# Describing values
# ----------------------------------------------------------------------------------------------------------------

def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def describe(value: Any) -> str:
    """A short description: dtype and shape for tensors (plus strides when not contiguous)."""
    if isinstance(value, torch.Tensor):
        text = f"{_dtype_name(value.dtype)} tensor of shape {tuple(value.shape)}"
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
    parts = [describe(a) for a in case.args] + [f"{k}={describe(v)}" for k, v in case.kwargs.items()]
    return f"{fn_name}({', '.join(parts)})"


# ----------------------------------------------------------------------------------------------------------------
# Tolerances
# ----------------------------------------------------------------------------------------------------------------

def eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def reduction_tolerance(dtype: torch.dtype, abs_sum: float, *, k: float = 4.0) -> float:
    """Error bound for a sum of products: k·eps(dtype)·Σ|xᵢwᵢ| (plus a floor so exact zeros compare)."""
    return k * eps(dtype) * abs_sum + torch.finfo(dtype).tiny


def elementwise_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for results that round a few times per element."""
    return {torch.float64: (1e-10, 1e-9), torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2),
            torch.bfloat16: (5e-2, 5e-2)}.get(dtype, (1e-5, 1e-5))


# ----------------------------------------------------------------------------------------------------------------
# Judges: compare what came back with what was expected; raise Mismatch with a readable detail
# ----------------------------------------------------------------------------------------------------------------

def judge_tensor(got: Any, expected: torch.Tensor, *, atol: float, rtol: float, what: str = "the result") -> str:
    """Type, shape, dtype, then values. Returns a summary of the error for the pass message."""
    if not isinstance(got, torch.Tensor):
        raise Mismatch(
            f"{describe(got)}, but {what} should be a {_dtype_name(expected.dtype)} tensor of shape "
            f"{tuple(expected.shape)}",
            next_step="return a torch tensor (not a Python number, list or NumPy array)")
    if got.shape != expected.shape:
        raise Mismatch(
            f"shape {tuple(got.shape)}, expected shape {tuple(expected.shape)}",
            next_step="write the shape of every intermediate in a comment and check which step adds, drops or "
                      "broadcasts a dimension")
    if got.dtype != expected.dtype:
        raise Mismatch(
            f"dtype {_dtype_name(got.dtype)}, expected {_dtype_name(expected.dtype)} (the input's dtype)",
            next_step="keep the computation in the input's dtype: avoid creating tensors with a fixed dtype, "
                      "or build them with dtype=x.dtype")
    return judge_values(got, expected, atol=atol, rtol=rtol)


def judge_values(got: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float) -> str:
    g, e = got.detach().to(torch.float64), expected.detach().to(torch.float64)
    if g.numel() == 0:
        return "empty result"
    nan_mismatch = torch.isnan(g) != torch.isnan(e)
    if nan_mismatch.any():
        i = int(nan_mismatch.reshape(-1).nonzero()[0])
        raise Mismatch(f"NaN where a number was expected (or the reverse) at flat index {i}: got "
                       f"{float(g.reshape(-1)[i]):.6g}, expected {float(e.reshape(-1)[i]):.6g}",
                       next_step="look for a division by zero or an overflow (exp of a large number)")
    both = ~torch.isnan(e)
    g, e = g[both], e[both]
    inf_mismatch = torch.isinf(g) | torch.isinf(e)
    if (inf_mismatch & (g != e)).any():
        raise Mismatch("an infinity where the expected value is finite (or the reverse)",
                       next_step="look for an overflow: in float16 anything above 65504 becomes inf")
    diff = (g - e).abs()
    diff[torch.isinf(e)] = 0.0
    allowed = atol + rtol * e.abs()
    max_abs = float(diff.max())
    rel = diff / e.abs().clamp_min(torch.finfo(torch.float64).tiny)
    max_rel = float(rel.max())
    summary = f"max abs error {max_abs:.2e}, max rel error {max_rel:.2e}; tolerance abs {atol:.1e} + rel {rtol:.1e}"
    bad = diff > allowed
    if bad.any():
        i = int(bad.reshape(-1).nonzero()[0])
        where = ""
        if g.numel() > 1:
            where = (f"\n  first wrong element: flat index {i}, got {float(g.reshape(-1)[i]):.8g}, "
                     f"expected {float(e.reshape(-1)[i]):.8g}")
        raise Mismatch(f"{describe(got)}: {_short_values(got)}{where}\n  error:    {summary}")
    return summary


# ----------------------------------------------------------------------------------------------------------------
# The runner
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class CheckResult:
    task: str
    cases: int
    summary: str

    def __repr__(self) -> str:  # shows nicely if a learner evaluates a check as the last line of a cell
        return f"CheckResult({self.task!r}, passed {self.cases} cases)"


def run_check(
    task: str,
    fn: Callable,
    cases: Sequence[Case],
    *,
    expected: Callable[..., Any],
    judge: Callable[[Any, Any, Case], str],
    proves: str,
    rules: Sequence[Rule] = (),
    hidden: int = 0,
    next_step: str = "",
    quiet: bool = False,
) -> CheckResult:
    """Run `fn` on every case; compare with `expected(*args, **kwargs)` through `judge`; enforce `rules`.

    `task` is the id used everywhere (nbgrader grade_id, heading, message). `hidden` is the number of hidden
    checks grading adds for this function (0 inside the hidden checks themselves).
    """
    if not callable(fn):
        raise CheckFailure(f"✘ {task}: expected a function, got {describe(fn)}. Pass the function itself, "
                           f"without calling it: check(my_function), not check(my_function(...)).")
    name = getattr(fn, "__name__", "your function")
    replay = verdicts.current_replay()
    if replay is not None:  # in the grader: judge what the submission's kernel recorded, never run its code
        summaries = _judge_recorded(task, fn, cases, replay, expected=expected, judge=judge, next_step=next_step)
    else:
        summaries = _run_cases(task, fn, name, cases, expected=expected, judge=judge, rules=rules,
                               next_step=next_step)
    result = CheckResult(task, len(cases), _worst(summaries))
    if not quiet:
        message = f"✔ {task}: {proves} — passed {len(cases)} case{'s' if len(cases) != 1 else ''}"
        if result.summary:
            message += f" ({result.summary})"
        message += "."
        if hidden:
            message += (f"\n  Grading runs {hidden} more hidden check{'s' if hidden != 1 else ''} on this function; "
                        f"passing here does not guarantee those.")
        print(message)
    return result


def _not_written(task: str, name: str) -> CheckFailure:
    return CheckFailure(
        f"✘ {task}: `{name}` is not written yet (it raised NotImplementedError).\n"
        f"  next:     replace `raise NotImplementedError()` with your code, run that cell, then this one again.")


def _raised(task: str, name: str, case: Case, tried: str, error: str) -> CheckFailure:
    return CheckFailure(
        f"✘ {task}: `{name}` raised {error}\n  case:     {case.label}\n  tried:    {tried}\n"
        f"  next:     run that call yourself in a new cell to see the full traceback; the shapes above are the ones "
        f"that broke it.")


def _broke(task: str, rule: str, case: Case, tried: str, found: str, next_step: str) -> CheckFailure:
    return CheckFailure(
        f"✘ {task}: the answer breaks a rule of this exercise: {rule}.\n  case:     {case.label}\n"
        f"  tried:    {tried}\n  found:    {found}\n  next:     {next_step}")


def _wrong(task: str, case: Case, tried: str, want: Any, bad: Mismatch, next_step: str) -> CheckFailure:
    return CheckFailure(
        f"✘ {task}: wrong result.\n  case:     {case.label}\n  tried:    {tried}\n"
        f"  expected: {_describe_expected(want)}\n  got:      {bad.detail}\n  next:     {bad.next_step or next_step}")


def _run_cases(task, fn, name, cases, *, expected, judge, rules, next_step) -> list[str]:
    """Call `fn` on every case (recording what ran), enforce the rules, judge; when the kernel is being graded,
    also record each case's outcome for the grader (`verdicts.start_capture`)."""
    capture = verdicts.start_capture(task, name, [c.label for c in cases])
    summaries = []
    for case in cases:
        tried = describe_call(name, case)
        # Expected values come before the learner's call, which may change its inputs in place; except while the
        # kernel is graded: then they must not exist until the call has returned and its result is recorded (a
        # function that searches the caller's frames finds nothing), and the grader judges on its own copy.
        want = expected(*case.args, **case.kwargs) if capture is None else None
        with record_calls() as log:
            try:
                got = fn(*case.args, **case.kwargs)
            except NotImplementedError:
                if capture:
                    capture.add("not_written")
                raise _not_written(task, name) from None
            except CheckFailure:
                raise
            except Exception as err:  # noqa: BLE001 - the learner's error is reported, with the case
                if capture:
                    capture.add("raised", error=f"{type(err).__name__}: {err}")
                raise _raised(task, name, case, tried, f"{type(err).__name__}: {err}") from err
        for rule in rules:
            broken = rule.test(log, case)
            if broken:
                if capture:
                    capture.add("broken", rule=rule.name, found=broken, next_step=rule.next_step)
                raise _broke(task, rule.name, case, tried, broken, rule.next_step)
        if capture:
            capture.add("ok", got)
            want = expected(*case.args, **case.kwargs)
        try:
            summaries.append(judge(got, want, case))
        except Mismatch as bad:
            raise _wrong(task, case, tried, want, bad, next_step) from None
    return summaries


def _judge_recorded(task, fn, cases, replay, *, expected, judge, next_step) -> list[str]:
    """The grader's side of a check: expected values computed here, compared with the values the kernel recorded
    for the same cases; the kernel's own verdict is never read."""
    capture = replay.find(task, [c.label for c in cases])
    if capture is None:
        raise CheckFailure(
            f"✘ {task}: no result of this check came back from the notebook's kernel: the check did not run there "
            f"(a cell before it stopped the notebook, or the notebook replaced the check).\n"
            f"  next:     restart the kernel and run every cell from the top; the check must run as given.")
    name = str(capture.get("fn") or getattr(fn, "__name__", "your function"))
    summaries = []
    for i, case in enumerate(cases):
        tried = describe_call(name, case)
        want = expected(*case.args, **case.kwargs)
        entry = capture["cases"][i] if i < len(capture["cases"]) else None
        if not isinstance(entry, dict) or entry.get("status") not in ("ok", "raised", "not_written", "broken"):
            raise CheckFailure(f"✘ {task}: the kernel recorded no result for this case.\n  case:     {case.label}\n"
                               f"  tried:    {tried}\n  next:     restart the kernel and run every cell from the top.")
        if entry["status"] == "not_written":
            raise _not_written(task, name)
        if entry["status"] == "raised":
            raise _raised(task, name, case, tried, str(entry.get("error", "an error")))
        if entry["status"] == "broken":
            raise _broke(task, str(entry.get("rule", "")), case, tried, str(entry.get("found", "")),
                         str(entry.get("next_step", "")))
        got = verdicts.decode(entry.get("value"))
        try:
            summaries.append(judge(got, want, case))
        except Mismatch as bad:
            raise _wrong(task, case, tried, want, bad, next_step) from None
    return summaries


def _describe_expected(want: Any) -> str:
    if isinstance(want, torch.Tensor):
        return f"{describe(want)}: {_short_values(want)}"
    if type(want) in (tuple, list) and want and all(isinstance(w, torch.Tensor) for w in want):
        return f"{type(want).__name__} of {len(want)}: " + "; ".join(_describe_expected(w) for w in want)
    return repr(want)


def _worst(summaries: Sequence[str]) -> str:
    """The summary closest to failing: the largest absolute error as a fraction of its tolerance."""
    best, worst = "", -1.0
    for s in summaries:
        try:
            err = float(s.split("max abs error ")[1].split(",")[0])
            tol = float(s.split("tolerance abs ")[1].split(" ")[0])
        except (IndexError, ValueError):
            continue
        if err / max(tol, 1e-300) > worst:
            best, worst = s, err / max(tol, 1e-300)
    return best.replace("max abs error", "worst case: max abs error") if best else ""
