"""Every rule an exercise states has a visible case (issue #43): the helpers the assignments' tests use to show it.

A wrong answer that breaks exactly one stated rule passes the visible cases that are not about that rule (the visible
check as it was before the rule's case was added: each was appended at the end of its check's list) and fails the
visible check itself, on the rule's case, with a message about its own mistake.
"""

from __future__ import annotations

import contextlib
import functools
import io
import sys
from collections.abc import Callable
from typing import Any

from twoprim.core.checks import Case, CheckFailure, as_contiguous


class _Captured(Exception):
    pass


def visible_cases(check: Callable) -> list[Case]:
    """The cases `check` runs when called as a notebook's visible check cell calls it (its default cases)."""
    module: Any = sys.modules[check.__module__]  # its run_check is swapped for a spy, then put back
    found: list[Case] = []

    def spy(task, fn, cases, **kwargs):
        found.extend(cases)
        raise _Captured

    original = module.run_check
    module.run_check = spy
    try:
        check(lambda *args, **kwargs: None)
    except _Captured:
        pass
    finally:
        module.run_check = original
    assert found, f"{check.__name__} ran no cases"
    return found


def ignores_strides(fn: Callable, *positions: int) -> Callable:
    """`fn` as code that reads the memory of its non-contiguous tensor arguments in row-major order, ignoring their
    strides (what code through `data_ptr`, `as_strided` with strides of its own, or a compiled kernel that takes no
    strides does); only the arguments at `positions` when given."""

    @functools.wraps(fn)
    def wrong(*args, **kwargs):
        read = [as_contiguous(a) if not positions or i in positions else None for i, a in enumerate(args)]
        return fn(*[a if r is None else r for a, r in zip(args, read, strict=True)], **kwargs)

    return wrong


def named(name: str, fn: Callable) -> Callable:
    """`fn` under the graded function's name (messages name the function they checked)."""
    fn.__name__ = fn.__qualname__ = name
    return fn


def assert_rule_is_visible(check: Callable, wrong: Callable, is_rule_case: Callable[[Case], bool], *says: str) -> str:
    """`wrong` passes every visible case of `check` but the rule's own, fails the visible check on a case of the rule,
    and the message says each of `says`. Returns the message."""
    cases = visible_cases(check)
    rule = [c for c in cases if is_rule_case(c)]
    assert rule, f"{check.__name__} has no visible case for this rule"
    others = [c for c in cases if not is_rule_case(c)]
    with contextlib.redirect_stdout(io.StringIO()):
        check(wrong, others)  # passes: the visible check without the rule's case
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(wrong)
    except CheckFailure as failure:
        msg = str(failure)
    else:
        raise AssertionError(f"{check.__name__} passed a wrong answer that breaks the rule of {rule[0].label!r}")
    assert any(f"case:     {c.label}" in msg for c in rule), f"it failed on another case than the rule's:\n{msg}"
    for said in says:
        assert said in msg, f"expected {said!r} in:\n{msg}"
    return msg
