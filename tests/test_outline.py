"""One course outline: README.md's lesson table is the source; lesson 00's outline cell is written from it
(`./course generate` runs `twoprim.core.notebooks.write_outline()`), its outline code cell reads it at run time, and
both agree with the lessons and assignments on disk. An assignment's id follows the authors' guide's numbering rule: the
number of its lesson's row, a letter for the lesson's second. Lesson 00 says what README says about hidden checks and
self-grading."""

from __future__ import annotations

import re

import nbformat
import pytest

from twoprim.config import ASSIGNMENT_ID, ROOT
from twoprim.core import notebooks
from twoprim.core.catalog import id_problem
from twoprim.core.notebooks import assignments, lessons, outline

LESSON_00 = ROOT / notebooks.OUTLINE_LESSON


def _graded_functions(aid: str) -> set[str]:
    nb = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"].removeprefix(f"{aid}-")
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
        and not c.metadata["nbgrader"].get("solution")
        and not c.metadata["nbgrader"]["grade_id"].endswith("-hidden")
    }


def test_the_outline_lists_every_lesson_on_disk_in_order():
    assert list(dict.fromkeys(row.lesson for row in outline())) == [p.stem for p in lessons()], (
        "README.md's lesson table must list every lessons/NN_*.ipynb, in order; after editing it, rewrite lesson "
        "00's outline with ./course generate ASSIGNMENT (any assignment: it rewrites lesson 00's outline too)"
    )
    assert {row.lesson[:2] for row in outline()} >= {"00", "08", "09"}  # lessons 00-09, 09_triton_gemm among them


def test_the_outline_names_every_assignment_and_only_graded_functions():
    rows = {row.assignment: row for row in outline() if row.assignment}
    assert sorted(row.assignment for row in outline() if row.assignment) == assignments(), (
        "each assignment in solutions/ appears once in README.md's lesson table"
    )
    for aid, row in rows.items():
        named = set(re.findall(r"`(\w+)`", row.functions))
        assert named and named <= _graded_functions(aid), (aid, named - _graded_functions(aid))


def test_a_row_without_a_lesson_is_another_assignment_of_the_lesson_above(tmp_path):
    (tmp_path / "README.md").write_text(
        "| lesson | assignment |\n| --- | --- |\n"
        "| `01_dot_product` — dots | `ex01_dot`: `dot` |\n| | `ex01b_axpy`: `axpy` |\n"
        "| `02_gemm` — GEMM | |\n"
    )
    rows = outline(tmp_path)
    assert [(r.lesson, r.topic, r.assignment, r.functions) for r in rows] == [
        ("01_dot_product", "dots", "ex01_dot", "`dot`"),
        ("01_dot_product", "dots", "ex01b_axpy", "`axpy`"),
        ("02_gemm", "GEMM", None, ""),
    ]
    assert "| `01_dot_product` | dots | `ex01_dot`: `dot` |\n| | | `ex01b_axpy`: `axpy` |\n" in notebooks.outline_cell(
        tmp_path
    )
    (tmp_path / "README.md").write_text("| lesson | assignment |\n| --- | --- |\n| | `ex01b_axpy`: `axpy` |\n")
    with pytest.raises(ValueError, match="an empty lesson: another assignment of the lesson above"):
        outline(tmp_path)


def test_progress_takes_each_assignment_of_a_lesson_before_the_next_lesson(tmp_path):
    """With two assignments for lesson 01, the next step is the first one's unfinished check, not lesson 02."""
    from twoprim.learner import progress

    (tmp_path / "README.md").write_text(
        "| lesson | assignment |\n| --- | --- |\n| `01_dot_product` — dots | `ex01_dot`: "
        "`dot` |\n| | `ex01b_axpy`: `axpy` |\n| `02_gemm` — GEMM | |\n"
    )
    done = [
        progress.LessonStatus(name, tmp_path / "lessons" / f"{name}.ipynb", ran, "")
        for name, ran in (("01_dot_product", True), ("02_gemm", False))
    ]
    work = [
        progress.AssignmentStatus(
            aid,
            tmp_path / "exercises" / aid / f"{aid}.ipynb",
            "ran",
            checks={fn: check},
            selfgrade={"score": 1, "max_score": 1, "stale": "", "failing": []},
        )
        for aid, fn, check in (("ex01b_axpy", "axpy", progress.PASS), ("ex01_dot", "dot", progress.TODO))
    ]
    assert progress._next_step(tmp_path, done, work).startswith("make `dot` pass its check in exercises/ex01_dot/")


def test_lesson_00s_outline_cell_is_the_readme_outline():
    nb = nbformat.read(str(LESSON_00), as_version=4)
    [cell] = [c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith(notebooks.OUTLINE_HEADING)]
    assert cell.source == notebooks.outline_cell(), (
        "lessons/00_start_here.ipynb's outline differs from README.md's lesson table: run ./course generate "
        "ASSIGNMENT (any assignment: it rewrites lesson 00's outline too) and commit both"
    )
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any("outline_status()" in source for source in code), "lesson 00 lists the outline from README at run time"


def test_outline_status_finds_every_lesson_and_assignment_of_this_copy():
    text = notebooks.outline_status()
    for path in lessons():
        assert f"lesson: {path.relative_to(ROOT)}" in text
    for aid in assignments():
        assert f"assignment: exercises/{aid}/{aid}.ipynb" in text
    assert "coming" not in text


def test_outline_status_marks_what_a_copy_does_not_hold(tmp_path):
    (tmp_path / "README.md").write_text((ROOT / "README.md").read_text())
    (tmp_path / "lessons").mkdir()
    (tmp_path / "lessons" / "00_start_here.ipynb").write_bytes(LESSON_00.read_bytes())
    lines = notebooks.outline_status(tmp_path).splitlines()
    assert lines[0].startswith("00  lesson: lessons/00_start_here.ipynb")
    assert lines[1].startswith("01  lesson: coming") and lines[1].endswith("assignment: ex01_dot coming")
    # a line per row of the outline: a lesson with a second assignment has two (the guide's continuation row)
    assert [line[:2] for line in lines] == [row.lesson[:2] for row in outline()]
    assert {line[:2] for line in lines} == {p.stem[:2] for p in lessons()}


def test_every_assignment_id_follows_the_numbering_rule():
    """The authors' guide's rule: exNN_topic, NN the number of the lesson whose row it is in; the lesson's second
    assignment (the next row, its lesson cell empty) exNNb_topic, a third exNNc_...; no two share a short name."""
    seen: dict[str, int] = {}
    for row in outline():
        if row.assignment:
            nth = seen[row.lesson] = seen.get(row.lesson, -1) + 1
            want = f"ex{row.lesson[:2]}{'abcdefghijklmnopqrstuvwxyz'[nth] if nth else ''}"
            found = ASSIGNMENT_ID.fullmatch(row.assignment)
            assert found and found[1] == want, (
                f"{row.assignment} is lesson {row.lesson}'s assignment number {nth + 1}: its id starts {want}_ "
                f"(docs/guides/authors.md, the numbering rule)"
            )
            assert id_problem(row.assignment, assignments()) is None


def test_an_id_off_the_rule_is_refused_with_the_rule():
    assert "ids are exNN_topic, NN the two-digit number of the lesson" in (id_problem("ex1_axpy", ["ex01_dot"]) or "")
    clash = id_problem("ex01_axpy", ["ex01_dot", "ex01_axpy"]) or ""
    assert "ex01_axpy and ex01_dot have the same short name, ex01" in clash and "ex01b_" in clash
    assert id_problem("ex01b_axpy", ["ex01_dot", "ex01b_axpy"]) is None


def test_lesson_00_says_selfgrade_runs_the_hidden_checks():
    text = "\n".join(c.source for c in nbformat.read(str(LESSON_00), as_version=4).cells)
    assert "they are not in your copy and run only when the instructor grades" not in text.replace("\n", " ")
    assert "./course selfgrade ex01_dot" in text and "hidden checks included" in text
    readme = (ROOT / "README.md").read_text()
    assert "./course selfgrade ex01_dot" in readme and "hidden checks included" in readme
