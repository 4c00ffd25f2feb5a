"""ex01_dot's rule "your own code": the lesson's loop `twoprim.reference.dot_spec` is `dot_loop`'s answer, so a
function that calls it is refused by the visible checks, while the solutions, and a dot_spec called outside the
function, pass. (The rest of ex01's checks are tested in tests/test_checks.py.) About 1 s."""

from __future__ import annotations

import pytest
import torch

from twoprim.assignments import ex01_dot as ex01
from twoprim.topics import dot_product as reference

from .conftest import fails
from .visible_rules import named


@pytest.mark.parametrize(
    "check, cheat",
    [
        (ex01.check_dot_loop, lambda x, w: reference.dot_spec(x, w)),
        (ex01.check_dot, lambda x, w: torch.tensor(reference.dot_spec(x, w), dtype=x.dtype)),
        (ex01.check_neuron, lambda x, w, b: torch.tensor(reference.dot_spec(x, w), dtype=x.dtype) + b),
    ],
    ids=["dot_loop", "dot", "neuron"],
)
def test_calling_the_lessons_loop_is_refused(check, cheat):
    msg = fails(check, named(check.__name__.removeprefix("check_"), cheat))
    assert "breaks a rule of this exercise: your own code: no calls to dot_spec" in msg, msg
    assert "found:    it called twoprim.reference.dot_spec ×1" in msg and "next:" in msg, msg


def test_dot_spec_called_outside_the_function_is_not_held_against_it(sol01):
    x = torch.randn(5, dtype=torch.float64)
    assert reference.dot_spec(x, x) == pytest.approx(float(x @ x))  # a learner comparing with the spec in a cell
    ex01.check_dot_loop(sol01["dot_loop"])
    ex01.check_neuron(sol01["neuron"])
