"""Committed notebooks are clean; lessons run top to bottom; exercises/ is exactly what nbgrader generates."""
from __future__ import annotations

import filecmp
from pathlib import Path

import nbformat
import pytest

from twoprim.course import generate
from twoprim.core.notebooks import ROOT, assignments, execute, is_clean, lessons

NOTEBOOKS = sorted(p for d in ("lessons", "solutions", "exercises") for p in (ROOT / d).rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts)


def test_course_has_its_notebooks():
    names = {p.relative_to(ROOT).as_posix() for p in NOTEBOOKS}
    assert {"lessons/00_start_here.ipynb", "lessons/01_dot_product.ipynb", "solutions/ex01_dot/ex01_dot.ipynb",
            "exercises/ex01_dot/ex01_dot.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_committed_notebook_is_clean(path: Path):
    problems = is_clean(nbformat.read(str(path), as_version=4))
    assert not problems, f"{path.relative_to(ROOT)} is not clean ({'; '.join(problems)}): run `./course clean {path.relative_to(ROOT)}`"


def test_exercises_are_generated_from_solutions(tmp_path: Path):
    written = generate(into=tmp_path)
    assert {p.parent.name for p in written} == set(assignments()), "every assignment must generate a student version"
    for path in written:
        committed = ROOT / "exercises" / path.parent.name / path.name
        assert committed.exists(), f"{committed.relative_to(ROOT)} is missing: run `make exercises` and commit it"
        assert filecmp.cmp(path, committed, shallow=False), (
            f"{committed.relative_to(ROOT)} differs from what nbgrader generates from solutions/: exercises/ is "
            f"generated, never edited by hand. Run `make exercises` and commit the result.")
    extra = {p.parent.name for p in (ROOT / "exercises").glob("*/*.ipynb")} - set(assignments())
    assert not extra, f"exercises/ has assignments with no source in solutions/: {sorted(extra)}"


def test_student_version_hides_solutions_and_hidden_tests():
    for aid in assignments():
        student = (ROOT / "exercises" / aid / f"{aid}.ipynb").read_text()
        assert "BEGIN SOLUTION" not in student and "BEGIN HIDDEN TESTS" not in student
        assert "raise NotImplementedError()" in student
        source = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)
        hidden = [c.source for c in source.cells if "BEGIN HIDDEN TESTS" in c.source]
        assert hidden, f"{aid} has no hidden tests"
        for cell in hidden:
            body = cell.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0].strip()
            assert body and body not in student


@pytest.mark.notebook
@pytest.mark.parametrize("path", lessons(), ids=lambda p: p.name)
def test_lesson_runs_top_to_bottom(path: Path, record_property):
    nb, secs = execute(path, timeout=300)
    record_property("lesson_seconds", (path.name, secs))
    print(f"{path.name}: {secs:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert any(c.cell_type == "code" and c.outputs for c in nb.cells), "a lesson that prints nothing taught nothing"
