"""An assignment is added in one place: the files the README's "Writing an assignment" lists, and nothing else.

A throw-away assignment `ex98_axpy` is written from those files alone (its checks module with its hints, its
nbgrader source), its student version generated, and then graded as a learner's self-grade would be: the solution
scores full marks, the blank version zero, and its hints are found by name. Nothing else in the package is edited.
"""
from __future__ import annotations

import json
import subprocess
import textwrap

import nbformat
import pytest

from twoprim.core.notebooks import ROOT

from .accounts import clone_for

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
        _cell("code", 'from twoprim.learner.hints import hints\n\nhints("axpy")', f"{AID}-axpy-hints"),
    ]
    return nb


@pytest.fixture(scope="module")
def new_assignment(tmp_path_factory) -> dict:
    """The author's files, written into a clone of the course (the repository itself is never changed, so tests
    running beside this one never see ex98 come and go); then the clone's own commands and package, as an author
    would use them: `./course generate`, the catalog, the hints, and a self-grade of the solution and of the blank
    student version. Returns what they reported."""
    clone = tmp_path_factory.mktemp("author") / "course"
    clone.mkdir()
    venv = clone_for(clone)
    (clone / "twoprim" / f"{MODULE}.py").write_text(CHECKS)
    (clone / "solutions" / AID).mkdir()
    nbformat.write(_source_notebook(), str(clone / "solutions" / AID / f"{AID}.ipynb"))
    generate = subprocess.run([str(clone / "course"), "generate", AID], capture_output=True, text=True, timeout=300,
                              cwd=ROOT)  # from another course folder: the clone still runs its own package
    assert generate.returncode == 0, generate.stdout + generate.stderr
    probe = textwrap.dedent(f"""
        import json
        from twoprim import catalog, grading, hints
        from twoprim.core.notebooks import ROOT
        released = ROOT / "exercises" / {AID!r} / "{AID}.ipynb"
        full = grading.selfgrade({AID!r}, notebook=ROOT / "solutions" / {AID!r} / "{AID}.ipynb")
        blank = grading.selfgrade({AID!r}, notebook=released)
        print(json.dumps({{
            "root": str(ROOT), "ids": catalog.assignment_ids(), "module": catalog.checks_module({AID!r}).__name__,
            "hints_of": catalog.hints_of({AID!r}), "all_hints": sorted(hints.HINTS),
            "every_table": sorted(g for a in catalog.assignment_ids() for g in catalog.hints_of(a)),
            "released": released.read_text(),
            "full": [full.outcome.status, full.outcome.score, full.outcome.max_score, full.describe()],
            "blank": [blank.outcome.status, blank.outcome.score, blank.outcome.max_score, blank.describe()]}}))
    """)
    run = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=clone, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {"clone": clone, **json.loads(run.stdout.strip().splitlines()[-1])}


def test_a_new_assignment_is_found_and_graded_from_its_own_files(new_assignment):
    found = new_assignment
    assert found["root"] == str(found["clone"]), "the probe must run on the clone's own package"
    assert AID in found["ids"] and found["module"] == f"twoprim.{MODULE}"
    assert found["hints_of"] == {f"{AID}-axpy": ["Scale x first.", "Then add y element by element."]}
    assert "raise NotImplementedError()" in found["released"] and "BEGIN HIDDEN" not in found["released"]
    status, score, max_score, said = found["full"]
    assert (status, score, max_score) == ("graded", 2.0, 2.0), said
    status, score, max_score, said = found["blank"]
    assert (score, max_score) == (0.0, 2.0), said
    assert not (ROOT / "twoprim" / f"{MODULE}.py").exists() and not (ROOT / "solutions" / AID).exists()


def test_hints_of_a_module_are_read_without_importing_it(new_assignment):
    assert f"{AID}-axpy" in new_assignment["every_table"]
    assert set(new_assignment["all_hints"]) <= set(new_assignment["every_table"])
