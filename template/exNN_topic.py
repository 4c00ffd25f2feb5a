"""Checks for assignment exNN_topic: a·x + y, BLAS's axpy, element by element in x's dtype.

The template of an assignment's checks module (docs/guides/authors.md, "Writing an assignment"): copied to
twoprim/assignments/<id>.py, its placeholder id and short name replaced (the guide's commands do it). Its one graded
function, `axpy`, is a complete example: replace it with yours, keeping the parts in this order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from twoprim.core.cases import dtype_name, randn
from twoprim.core.checks import Case, CheckResult, elementwise_tolerance, forbid, judge_tensor, run_check

__all__ = ["axpy_cases", "check_axpy"]

TASK = "exNN_topic"


# ----------------------------------------------------------------------------------------------------------------
# Case builders (seeded, so a failing case is the same on every run): the hidden checks call them with other sizes
# ----------------------------------------------------------------------------------------------------------------


def axpy_cases(
    lengths: Sequence[int], dtypes: Sequence[torch.dtype] = (torch.float32, torch.float64), *, seed: int = 0
) -> list[Case]:
    """(a, x, y) for every length × dtype: a number and two seeded vectors of that length."""
    gen = torch.Generator().manual_seed(seed)
    return [
        Case(f"length {n}, {dtype_name(dtype)}", (1.5, randn((n,), dtype, gen), randn((n,), dtype, gen)))
        for dtype in dtypes
        for n in lengths
    ]


# ----------------------------------------------------------------------------------------------------------------
# The oracle (float64), the judge, and the rules the exercise states
# ----------------------------------------------------------------------------------------------------------------


def _axpy64(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """a·x + y computed in float64, returned in x's dtype: what a correct answer rounds to."""
    return (a * x.double() + y.double()).to(x.dtype)


def _judge_axpy(got, want, case: Case) -> str:
    atol, rtol = elementwise_tolerance(case.args[1].dtype)
    return judge_tensor(got, want, atol=atol, rtol=rtol, what="a·x + y")


_NO_NUMPY = forbid(
    "torch only: no conversion to NumPy",
    {"numpy", "__array__"},
    next_step="compute with the tensors themselves: a * x + y",
)


# ----------------------------------------------------------------------------------------------------------------
# The checks: one per graded function
# ----------------------------------------------------------------------------------------------------------------


def check_axpy(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `axpy`: a·x + y element by element, in x's dtype."""
    cases = cases if cases is not None else axpy_cases([3, 17])
    return run_check(
        f"{TASK}-axpy",
        fn,
        cases,
        expected=_axpy64,
        judge=_judge_axpy,
        rules=[_NO_NUMPY],
        proves="a·x + y element by element, in x's dtype",
        hidden=hidden,
        next_step="scale x by a, then add y; keep x's dtype",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "exNN_topic-axpy": (
        "Multiplying a tensor by a Python number scales every element of it at once.",
        "Two tensors of the same shape add element by element, with no loop needed.",
    ),
}
