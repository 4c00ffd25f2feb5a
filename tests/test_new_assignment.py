"""An assignment is added in one place: the files the README's "Writing an assignment" lists, and nothing else.

A throw-away assignment `ex98_axpy` is written from those files alone (its checks module with its hints, its
nbgrader source), its student version generated, and then graded as a learner's self-grade would be: the solution
scores full marks, the blank version zero, and its hints are found by name. Nothing else in the package is edited.
"""
from __future__ import annotations

import shutil
import textwrap

import nbformat
import pytest

from twoprim import catalog, grading, hints
from twoprim.course import generate
from twoprim.notebooks import ROOT

AID, MODULE = "ex98_axpy", "ex98"

CHECKS = textwrap.dedent('''
    """Checks for assignment ex98_axpy (a throw-away assignment built by tests/test_new_assignment.py)."""
    from __future__ import annotations

    import torch

    from .checks import Case, CheckResult, judge_tensor, run_check

    TASK = "ex98_axpy"


    def axpy_cases(sizes, dtypes=(torch.float32, torch.float64), seed: int = 0) -> list[Case]:
        gen = torch.Generator().manual_seed(seed)
        return [Case(f"n={n}, {str(d).removeprefix('torch.')}",
                     (1.5, torch.randn(n, generator=gen).to(d), torch.randn(n, generator=gen).to(d)))
                for n in sizes for d in dtypes]


    def check_axpy(fn, cases=None, *, hidden: int = 0) -> CheckResult:
        cases = cases if cases is not None else axpy_cases([3, 17])
        return run_check(f"{TASK}-axpy", fn, cases,
                         expected=lambda a, x, y: (a * x.double() + y.double()).to(x.dtype),
                         judge=lambda got, want, case: judge_tensor(got, want, atol=1e-5, rtol=1e-5),
                         proves="a·x + y element by element", hidden=hidden, next_step="return a * x + y")


    HINTS: dict[str, tuple[str, ...]] = {
        "ex98_axpy-axpy": ("Scale x first.", "Then add y element by element."),
    }
''')


def _cell(kind: str, source: str, gid: str | None = None, **meta):
    make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
    cell = make(source)
    if gid:
        cell.metadata["nbgrader"] = {"grade_id": gid, "schema_version": 3, "locked": not meta.get("solution", False),
                                     "solution": False, "grade": False, "task": False, **meta}
    return cell


def _source_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = [
        _cell("markdown", "# Assignment ex98_axpy", f"{AID}-intro"),
        _cell("code", "import torch\n\nfrom twoprim import ex98", f"{AID}-setup"),
        _cell("markdown", f"## {AID}-axpy: a·x + y (1 + 1 points)"),
        _cell("code", 'def axpy(a, x, y):\n    """a·x + y."""\n    ### BEGIN SOLUTION\n    return a * x + y\n'
                      "    ### END SOLUTION", f"{AID}-axpy-solution", solution=True),
        _cell("code", "ex98.check_axpy(axpy, hidden=2)", f"{AID}-axpy", grade=True, points=1),
        _cell("code", "# Hidden checks for axpy (1 point): length 1 and a prime.\n### BEGIN HIDDEN TESTS\n"
                      "ex98.check_axpy(axpy, ex98.axpy_cases([1, 101], seed=1)[:2])\n### END HIDDEN TESTS",
              f"{AID}-axpy-hidden", grade=True, points=1),
        _cell("code", 'from twoprim.hints import hints\n\nhints("axpy")', f"{AID}-axpy-hints"),
    ]
    return nb


@pytest.fixture(scope="module")
def new_assignment():
    """The author's files, written into the course and removed afterwards (whatever happens)."""
    module = ROOT / "twoprim" / f"{MODULE}.py"
    written = [module, ROOT / "solutions" / AID, ROOT / "exercises" / AID, ROOT / "grader" / "selfgrade"]
    assert not any(p.exists() for p in written[:3]), f"{AID} exists already: remove it"
    had_selfgrade = written[3].exists()
    try:
        module.write_text(CHECKS)
        (ROOT / "solutions" / AID).mkdir()
        nbformat.write(_source_notebook(), str(ROOT / "solutions" / AID / f"{AID}.ipynb"))
        catalog.all_hints.cache_clear()
        catalog.hints_of.cache_clear()
        generate([AID], into=ROOT / "exercises")  # a throw-away gradebook: the course's is never touched
        yield
    finally:
        for path in written[:3]:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        for stale in (written[3].glob(f"{AID}.*") if had_selfgrade else []):
            stale.unlink()
        if not had_selfgrade and written[3].exists():
            shutil.rmtree(written[3])
        catalog.all_hints.cache_clear()
        catalog.hints_of.cache_clear()


def test_a_new_assignment_is_found_and_graded_from_its_own_files(new_assignment):
    assert AID in catalog.assignment_ids()
    assert catalog.checks_module(AID).__name__ == f"twoprim.{MODULE}"
    assert catalog.hints_of(AID) == {f"{AID}-axpy": ("Scale x first.", "Then add y element by element.")}
    released = ROOT / "exercises" / AID / f"{AID}.ipynb"
    assert "raise NotImplementedError()" in released.read_text() and "BEGIN HIDDEN" not in released.read_text()

    full = grading.selfgrade(AID, notebook=ROOT / "solutions" / AID / f"{AID}.ipynb")
    assert full.outcome.status == "graded", full.outcome.reason
    assert (full.outcome.score, full.outcome.max_score) == (2.0, 2.0), full.describe()
    blank = grading.selfgrade(AID, notebook=released)
    assert (blank.outcome.score, blank.outcome.max_score) == (0.0, 2.0), blank.describe()


def test_hints_of_a_module_are_read_without_importing_it(new_assignment):
    table = {gid: texts for aid in catalog.assignment_ids() for gid, texts in catalog.hints_of(aid).items()}
    assert f"{AID}-axpy" in table and set(hints.HINTS) <= set(table)
