"""The two exceptions a check speaks in, shared by `checks` (in the learner's kernel) and `verdicts` (in the
grader) without either importing the other's machinery; and the words a form-only check prints, which
`twoprim.learner.progress` reads (this module imports nothing, so progress can read them without torch)."""

from __future__ import annotations

__all__ = ["CheckFailure", "Mismatch", "ANSWERED"]

# Printed by every check that reads only the form of an answer (a short answer whose value is measured at grading
# time): progress counts such a check as answered, never as passing.
ANSWERED = "answered; graded when you self-grade"


class CheckFailure(AssertionError):
    """A check failed; the message is written for the learner (an AssertionError, so nbgrader scores the cell 0).

    In a notebook, in nbgrader's Validate dialog and in feedback it reads as the check, not as a stack through the
    course's code: IPython shows what `_render_traceback_` returns (and ipykernel sends it as the cell's error, which
    Validate and feedback print). The verdict comes first, then the next step, then the case; when the learner's
    own code raised, its traceback follows, cut to the learner's frames."""

    not_written = False  # the learner's function is still the stub (it raised NotImplementedError): no blame passed on

    def _render_traceback_(self) -> list[str]:
        lines = str(self).splitlines() or [type(self).__name__]
        nexts = [i for i, line in enumerate(lines) if line.lstrip().startswith("next:")]
        if nexts and nexts[0] > 1:  # what to do, right under what went wrong
            lines = [
                lines[0],
                *(lines[i] for i in nexts),
                *(line for i, line in enumerate(lines[1:], 1) if i not in nexts),
            ]
        cause = self.__cause__
        if cause is not None and cause.__traceback__ is not None:
            import traceback

            frames = [f for f in traceback.extract_tb(cause.__traceback__) if _learners(f.filename)]
            if frames:
                lines += ["", "Your code raised it here:"]
                lines += [line for chunk in traceback.format_list(frames) for line in chunk.rstrip("\n").splitlines()]
                lines += [line.rstrip("\n") for line in traceback.format_exception_only(type(cause), cause)]
        return lines


def _learners(filename: str) -> bool:
    """Whether a frame is the learner's code: a notebook cell or their own file, not the course's package, the
    standard library or an installed library."""
    import os
    import sys
    import sysconfig

    if filename.startswith("<") and not filename.startswith(("<ipython-input", "<string")):
        return False
    path = os.path.realpath(filename)
    course = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # twoprim/
    libraries = {
        os.path.realpath(p)
        for p in (
            sysconfig.get_paths()["stdlib"],
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
            sys.prefix,
            sys.base_prefix,
        )
    }
    return not (path.startswith(course + os.sep) or any(path.startswith(lib + os.sep) for lib in libraries))


class Mismatch(Exception):
    """Raised by a judge: the answer is wrong, `detail` says how (becomes the 'got'/'error' lines); `expected`, when
    given, replaces the check's own description of the expected value (the detail then shows it in place)."""

    def __init__(self, detail: str, *, next_step: str | None = None, expected: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.next_step = next_step
        self.expected = expected
