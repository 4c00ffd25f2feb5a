"""The course commands' one error: a problem its user can fix, said with how (`./course` prints it and exits 1).

Raised by the instructor's and the author's side (grading, the exchange, the classroom, analytics, `./course`); it
lives in the core, under all of them, so that none imports another's module for it.
"""

from __future__ import annotations

__all__ = ["CourseError"]


class CourseError(SystemExit):
    """A problem the user can fix; the message says how."""

    def __init__(self, message: str):
        super().__init__(f"error: {message}")
