"""Self-checks at the end of each lesson: the learner answers, the course says whether it holds and why.

Lessons ship with `...` as every answer, so they run top to bottom; a self-check never raises.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["ask", "reveal"]

_REVEALS: dict[str, str] = {}


def _matches(answer: Any, expected: Any, rel: float) -> bool:
    if isinstance(expected, bool) or isinstance(answer, bool):
        return answer is expected
    if isinstance(expected, (int, float)) and isinstance(answer, (int, float)):
        return math.isclose(answer, expected, rel_tol=rel, abs_tol=0 if expected else 1e-12)
    if isinstance(expected, str) and isinstance(answer, str):
        return answer.strip().lower() == expected.strip().lower()
    if isinstance(expected, (list, tuple)) and isinstance(answer, (list, tuple)):
        return len(answer) == len(expected) and all(_matches(a, e, rel) for a, e in zip(answer, expected, strict=True))
    return answer == expected


def ask(question_id: str, answer: Any, expected: Any, *, why: str, rel: float = 1e-6) -> None:
    """Compare `answer` with `expected` and print ✔ or ✘ with the reason; `...` means not answered yet."""
    _REVEALS[question_id] = f"{question_id}: {expected!r}. {why}"
    if answer is Ellipsis:
        print(f"{question_id}: not answered yet. Replace ... with your answer and run this cell again.")
    elif _matches(answer, expected, rel):
        print(f"✔ {question_id}: right. {why}")
    else:
        print(
            f"✘ {question_id}: you answered {answer!r}, which is not it. Think again and rerun the cell, or call "
            f"twoprim.learner.selfcheck.reveal({question_id!r}) in a new cell to see the answer."
        )


def reveal(question_id: str) -> None:
    """Show the answer to a self-check and why (run the question's cell first)."""
    print(_REVEALS.get(question_id, f"{question_id}: run the cell that asks it first, then reveal."))
