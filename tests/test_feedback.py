"""When a notebook's setup cell (or an answer cell) fails in grading, the terminal and the report say so first, with
the cell and the error, instead of only a zero per check ("no result came back"): `execution_notes` (autograde's
reason for each student, in the report) and `SelfGrade.describe` (what `./course selfgrade` prints).

The autograded notebook is built the way nbclient leaves one: error outputs where cells raised."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_output

from twoprim import grading
from twoprim.config import ROOT
from twoprim.grading.submission import execution_notes

AID = "ex01_dot"


def _autograded(folder: Path, errors: dict[str, tuple[str, str]]) -> nbformat.NotebookNode:
    """The student version of ex01_dot as autograde leaves it: `errors` (grade id -> (ename, evalue)) raised, and
    every check failing as the grader says when its kernel recorded nothing."""
    nb = nbformat.read(str(ROOT / "exercises" / AID / f"{AID}.ipynb"), as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if gid in errors:
            ename, evalue = errors[gid]
            cell.outputs = [new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])]
        elif cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            text = f"✘ {gid}: no result of this check came back from the notebook's kernel"
            cell.outputs = [new_output("error", ename="CheckFailure", evalue=text, traceback=[text])]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / f"{AID}.ipynb"))
    return nb


def _graded(notes: list[str]) -> grading.SelfGrade:
    nb = nbformat.read(str(ROOT / "solutions" / AID / f"{AID}.ipynb"), as_version=4)
    outcome = grading.Outcome("learner", status="graded", reason="; ".join(notes) or "all cells ran")
    outcome.grades = {
        (AID, c.metadata["nbgrader"]["grade_id"]): 0.0
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
    }
    outcome.max_score = float(
        sum(
            c.metadata["nbgrader"]["points"]
            for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
        )
    )
    return grading.SelfGrade(AID, outcome, None)


def test_a_setup_cell_that_cannot_import_the_course_is_reported_first(tmp_path):
    nb = _autograded(
        tmp_path,
        {
            f"{AID}-setup": ("ModuleNotFoundError", "No module named 'twoprim'"),
            f"{AID}-dot-hints": ("ValueError", "no hints for 'dot'"),
        },
    )
    setup = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == f"{AID}-setup")
    notes = execution_notes(tmp_path, [AID])
    assert notes[0].startswith(
        f"error in {AID}-setup (cell {setup + 1}): ModuleNotFoundError: No module named "
        f"'twoprim' (the kernel cannot import the course package"
    ), notes
    assert "running ./course once repairs it" in notes[0]
    assert len(notes) == 2 and notes[1].startswith("failing checks: ex01_dot-dot_loop"), notes  # hints score nothing
    assert all("; " not in n for n in notes), "a note must survive the report's '; '-joined reason"

    lines = _graded(notes).describe().splitlines()
    assert lines[0].startswith(f"{AID}: 0 / 15 points")
    assert lines[1] == f"  ✘ {notes[0]}", lines  # the cause, before the fifteen zeros it explains
    assert lines[2].startswith("    fix this first:")
    assert lines[3].startswith(f"  ✘ {AID}-") and lines[-1].startswith("notes: failing checks:")


def test_a_failing_setup_cell_of_another_kind_and_a_cell_the_student_added(tmp_path):
    nb = _autograded(tmp_path, {f"{AID}-setup": ("RuntimeError", "Numpy is not available\nmore detail")})
    nb.cells.insert(
        3,
        nbformat.v4.new_code_cell(
            "import my_helpers",
            outputs=[
                new_output("error", ename="ModuleNotFoundError", evalue="No module named 'my_helpers'", traceback=[])
            ],
        ),
    )
    nbformat.write(nb, str(tmp_path / f"{AID}.ipynb"))
    notes = execution_notes(tmp_path, [AID])
    assert notes[0] == (
        f"error in {AID}-setup (cell 2): RuntimeError: Numpy is not available (the setup cell: every "
        f"check after it fails because of this, not because of the answers)"
    ), notes
    assert notes[1] == "error in cell 4: ModuleNotFoundError: No module named 'my_helpers'", notes
    lines = _graded(notes).describe().splitlines()
    assert lines[1:3] == [f"  ✘ {notes[0]}", f"  ✘ {notes[1]}"]


def test_a_notebook_without_cell_errors_reports_only_its_failing_checks(tmp_path):
    _autograded(tmp_path, {})
    notes = execution_notes(tmp_path, [AID])
    assert len(notes) == 1 and notes[0].startswith("failing checks:")
    lines = _graded(notes).describe().splitlines()
    assert not any(line.startswith("  ✘ error in") for line in lines) and lines[1].startswith(f"  ✘ {AID}-")
