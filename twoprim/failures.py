"""The two exceptions a check speaks in, shared by `checks` (in the learner's kernel) and `verdicts` (in the
grader) without either importing the other's machinery; and the words a form-only check prints, which
`twoprim.progress` reads (this module imports nothing, so progress can read them without torch)."""
from __future__ import annotations

__all__ = ["CheckFailure", "Mismatch", "ANSWERED"]

# Printed by every check that reads only the form of an answer (a short answer whose value is measured at grading
# time): progress counts such a check as answered, never as passing.
ANSWERED = "answered; graded when you self-grade"


class CheckFailure(AssertionError):
    """A check failed; the message is written for the learner (an AssertionError, so nbgrader scores the cell 0)."""


class Mismatch(Exception):
    """Raised by a judge: the answer is wrong, `detail` says how (becomes the 'got'/'error' lines); `expected`, when
    given, replaces the check's own description of the expected value (the detail then shows it in place)."""

    def __init__(self, detail: str, *, next_step: str | None = None, expected: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.next_step = next_step
        self.expected = expected
