"""A failing check reads as the check in a notebook (and so in nbgrader's Validate dialog and in feedback, which
print the cell's error as the kernel sent it): the verdict, then the next step, within the first lines, and no
line of the course's own code; an error raised in the learner's code keeps the learner's frames, and only those."""

from __future__ import annotations

import re

import nbformat
from nbclient import NotebookClient

from twoprim.config import ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*m")
WRONG = """from twoprim import ex01
def cosine_similarity(query, keys):
    return keys @ query  # forgot to divide by the norms
ex01.check_cosine_similarity(cosine_similarity)"""
RAISES = """def helper(x):
    return x.no_such_attribute

def dot(x, w):
    return helper(x)
ex01.check_dot(dot)"""


def _errors(*sources: str) -> list[list[str]]:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    return [
        [ANSI.sub("", line) for line in "\n".join(o.traceback).splitlines()]
        for cell in nb.cells
        for o in cell.outputs
        if o.output_type == "error"
    ]


def test_a_failing_check_shows_its_verdict_and_next_step_first_and_no_course_code():
    wrong, raised = _errors(WRONG, RAISES)
    assert wrong[0].startswith("✘ ex01_dot-cosine_similarity: wrong result."), wrong
    assert wrong[1].lstrip().startswith("next:"), wrong[:5]
    assert any(line.lstrip().startswith("expected:") for line in wrong) and any(
        line.lstrip().startswith("got:") for line in wrong
    )
    for lines in (wrong, raised):
        assert not any("twoprim" in line or "site-packages" in line or "Traceback" in line for line in lines), lines

    assert raised[0].startswith("✘ ex01_dot-dot: `dot` raised AttributeError") and "next:" in raised[1], raised
    below = raised[raised.index("Your code raised it here:") + 1 :]
    frames = [line for line in below if line.lstrip().startswith("File ")]
    assert [line.rsplit(" in ", 1)[1] for line in frames] == ["dot", "helper"], below  # the learner's frames, in order
    assert "return x.no_such_attribute" in "\n".join(below)
    assert below[-1].startswith("AttributeError:"), below


def test_validate_shows_the_check_first_and_no_course_code(tmp_path):
    """What nbgrader's Validate dialog prints for a wrong cosine_similarity (the Validator's own text): the check's
    verdict and next step within its first five lines, and no line of the course's code."""
    from nbgrader.validator import Validator

    from .classroom import answered, solution_code

    wrong = solution_code("ex01_dot")["ex01_dot-cosine_similarity-solution"].replace(
        "return dots / norms.clamp_min(1e-8)", "return dots  # forgot the norms"
    )
    path = tmp_path / "ex01_dot.ipynb"
    nbformat.write(answered("ex01_dot", {"ex01_dot-cosine_similarity-solution": wrong}), str(path))
    result = Validator().validate(str(path))
    failed = {f["source"].split("(")[0]: f["error"] for f in result.get("failed", [])}
    assert set(failed) == {"ex01.check_cosine_similarity", "ex01.check_top_k"}, result  # top_k calls it
    lines = [ANSI.sub("", line) for line in failed["ex01.check_cosine_similarity"].splitlines()]
    head = "\n".join(lines[:5])
    assert lines[0].startswith("✘ ex01_dot-cosine_similarity: wrong result.") and "\n  next:" in head, lines[:8]
    assert not any("twoprim" in line or "site-packages" in line or "Traceback" in line for line in lines), lines
