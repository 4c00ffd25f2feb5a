"""nbgrader grades ex01_dot as an instructor would: solutions score full marks, the blank student version zero,
and one wrong function loses exactly that function's points. Scores come from the gradebook, not from logs."""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from twoprim.course import nbgrader
from twoprim.notebooks import ROOT

AID = "ex01_dot"


def _solution_code() -> dict[str, str]:
    """grade_id -> the solution cell's code without the nbgrader markers."""
    nb = nbformat.read(str(ROOT / "solutions" / AID / f"{AID}.ipynb"), as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            lines = [l for l in cell.source.splitlines() if l.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
            out[meta["grade_id"]] = "\n".join(lines)
    return out


def _submission(overrides: dict[str, str] | None = None, *, answered: bool = True) -> nbformat.NotebookNode:
    """The committed student version, with every solution cell answered (then `overrides` applied)."""
    nb = nbformat.read(str(ROOT / "exercises" / AID / f"{AID}.ipynb"), as_version=4)
    answers = {**(_solution_code() if answered else {}), **(overrides or {})}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    return nb


def _replace(grade_id: str, old: str, new: str) -> dict[str, str]:
    code = _solution_code()[grade_id]
    assert old in code, f"{old!r} not in the solution of {grade_id}"
    return {grade_id: code.replace(old, new)}


STUDENTS = {
    "perfect": _submission(),
    "blank": _submission(answered=False),
    # top_k ranks worst-first: only top_k's 2 + 2 points are lost.
    "wrong_top_k": _submission(_replace(f"{AID}-top_k-solution", "descending=True", "descending=False")),
    # dot calls torch.dot, which the exercise forbids: dot's 1 + 2 points are lost, neuron (built on it) keeps its.
    "forbidden_dot": _submission(_replace(f"{AID}-dot-solution", "(x * w).sum()", "torch.dot(x, w)")),
}

POINTS = {"dot_loop": (1, 1), "dot": (1, 2), "neuron": (1, 1), "cosine_similarity": (2, 2), "top_k": (2, 2)}
MAX_SCORE = sum(a + b for a, b in POINTS.values())


def _scores_without(*functions: str) -> dict[str, float]:
    scores = {}
    for fn, (visible, hidden) in POINTS.items():
        lost = fn in functions
        scores[f"{AID}-{fn}"] = 0.0 if lost else float(visible)
        scores[f"{AID}-{fn}-hidden"] = 0.0 if lost else float(hidden)
    return scores


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    (course / "grader").mkdir()
    shutil.copy(ROOT / "grader" / "nbgrader_config.py", course / "grader")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    nbgrader(["generate_assignment", AID, "--force"], root=course, capture=True)
    for student, nb in STUDENTS.items():
        target = course / "grader" / "submitted" / student / AID
        target.mkdir(parents=True)
        nbformat.write(nb, str(target / f"{AID}.ipynb"))
    nbgrader(["autograde", AID, "--force"], root=course, capture=True)
    return course


def _grades(course: Path, student: str) -> tuple[float, float, dict[str, float]]:
    with Gradebook(f"sqlite:///{course / 'grader' / 'gradebook.db'}", "two-primitives") as gb:
        sub = gb.find_submission(AID, student)
        per_test = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
        return sub.score, sub.max_score, per_test


def test_solution_scores_full_marks(graded):
    score, max_score, per_test = _grades(graded, "perfect")
    assert max_score == MAX_SCORE
    assert per_test == _scores_without()
    assert score == MAX_SCORE


def test_blank_student_version_scores_zero(graded):
    score, max_score, per_test = _grades(graded, "blank")
    assert (score, max_score) == (0.0, MAX_SCORE)
    assert set(per_test.values()) == {0.0}


@pytest.mark.parametrize("student, lost", [("wrong_top_k", "top_k"), ("forbidden_dot", "dot")])
def test_one_wrong_function_loses_exactly_its_points(graded, student, lost):
    score, _, per_test = _grades(graded, student)
    assert per_test == _scores_without(lost)
    assert score == MAX_SCORE - sum(POINTS[lost])


def test_submitted_files_are_not_modified(graded):
    for student, nb in STUDENTS.items():
        on_disk = nbformat.read(str(graded / "grader" / "submitted" / student / AID / f"{AID}.ipynb"), as_version=4)
        assert [c.source for c in on_disk.cells] == [c.source for c in nb.cells]
