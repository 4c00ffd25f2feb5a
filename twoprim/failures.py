"""The two exceptions a check speaks in, shared by `checks` (in the learner's kernel) and `verdicts` (in the
grader) without either importing the other's machinery."""
from __future__ import annotations

__all__ = ["CheckFailure", "Mismatch"]


class CheckFailure(AssertionError):
    """A check failed; the message is written for the learner (an AssertionError, so nbgrader scores the cell 0)."""


class Mismatch(Exception):
    """Raised by a judge: the answer is wrong, `detail` says how (becomes the 'got'/'error' lines)."""

    def __init__(self, detail: str, *, next_step: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.next_step = next_step
