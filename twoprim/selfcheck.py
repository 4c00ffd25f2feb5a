"""Self-checks at the end of each lesson: the learner answers, the course says whether it holds and why.

Lessons ship with `...` as every answer, so they run top to bottom; a self-check never raises.
"""
from __future__ import annotations

import math
from typing import Any

__all__ = ["ask"]


def _matches(answer: Any, expected: Any, rel: float) -> bool:
    if isinstance(expected, (int, float)) and isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return math.isclose(answer, expected, rel_tol=rel, abs_tol=0 if expected else 1e-12)
    if isinstance(expected, str) and isinstance(answer, str):
        return answer.strip().lower() == expected.strip().lower()
    return answer == expected


def ask(question_id: str, answer: Any, expected: Any, *, why: str, rel: float = 1e-6) -> bool | None:
    """Compare `answer` with `expected`; print ✔/✘ and the reason. Returns None while unanswered (`...`)."""
    if answer is Ellipsis:
        print(f"{question_id}: not answered yet. Replace ... with your answer and run this cell again.")
        return None
    if _matches(answer, expected, rel):
        print(f"✔ {question_id}: right. {why}")
        return True
    print(f"✘ {question_id}: you answered {answer!r}, which is not it. Think again, then rerun. "
          f"(Reveal: call twoprim.selfcheck.reveal({question_id!r}) in a new cell.)")
    _REVEALS[question_id] = f"{expected!r}: {why}"
    return False


_REVEALS: dict[str, str] = {}


def reveal(question_id: str) -> None:
    """Show the answer to a self-check the learner got wrong."""
    print(_REVEALS.get(question_id, f"{question_id}: answer it once first (any answer), then reveal."))
