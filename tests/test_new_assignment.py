"""An assignment is added by the guide "Writing an assignment" (docs/guides/authors.md) alone, and the course's own
tests accept it.

A throw-away `ex98_axpy` is written in a copy of the course by those steps and nothing else: its checks module with
its hints (step 1); its nbgrader source, whose cells, grade ids and nbgrader metadata are read from the guide's two
tables (step 2); a row in the README's lesson table, as lesson 01's second assignment, and lesson 00's outline
rewritten (step 3); `./course generate` (step 4); a self-grade of the solution and of the blank student version
(step 5). Then, with the copy's own package, the very test functions of tests/test_outline.py, test_hints.py and
test_check_messages.py run on the copy, ex98 among its assignments. The repository itself is never changed.
"""
from __future__ import annotations

import json
import re
import subprocess
import textwrap

import nbformat
import pytest

from twoprim.config import ROOT
from twoprim.core.notebooks import assignments

from .accounts import clone_for

AID, MODULE, FN = "ex98_axpy", "ex98", "axpy"
CELLS_TABLE = "| cell | kind | grade id | nbgrader cell type | what it holds |"
METADATA_TABLE = "| nbgrader cell type | the cell's `metadata.nbgrader` |"
POINTS = {"V": 1, "H": 1}  # the visible and the hidden check's points, as the guide's table names them
GUIDE = ROOT / "docs" / "guides" / "authors.md"  # "Writing an assignment"

CHECKS = textwrap.dedent('''
    """Checks for assignment ex98_axpy: a·x + y (a throw-away assignment built by tests/test_new_assignment.py)."""
    from __future__ import annotations

    import torch

    from twoprim.core.checks import Case, CheckResult, judge_tensor, run_check


    def axpy_cases(sizes, dtypes=(torch.float32, torch.float64), seed: int = 0) -> list[Case]:
        """One case per size and dtype: a number and two seeded vectors."""
        gen = torch.Generator().manual_seed(seed)
        return [Case(f"n={n}, {str(d).removeprefix('torch.')}",
                     (1.5, torch.randn(n, generator=gen).to(d), torch.randn(n, generator=gen).to(d)))
                for n in sizes for d in dtypes]


    def check_axpy(fn, cases=None, *, hidden: int = 0) -> CheckResult:
        """a·x + y against a float64 oracle."""
        return run_check("ex98_axpy-axpy", fn, cases if cases is not None else axpy_cases([3, 17]),
                         expected=lambda a, x, y: (a * x.double() + y.double()).to(x.dtype),
                         judge=lambda got, want, case: judge_tensor(got, want, atol=1e-5, rtol=1e-5),
                         proves="a·x + y element by element", hidden=hidden,
                         next_step="scale x by a, then add y; keep x's dtype")


    HINTS: dict[str, tuple[str, ...]] = {
        "ex98_axpy-axpy": ("Multiplying a tensor by a Python number scales every element of it at once.",
                           "Two tensors of the same shape add element by element, with no loop needed."),
    }
''')

# What the author writes in each cell the guide's table lists (`{fn}`: the graded function)
SOURCES = {
    "intro": "# Assignment ex98_axpy: a·x + y\n\nBLAS's axpy: scale one vector and add another.",
    "setup": "import torch\n\nfrom twoprim import ex98, guards",
    "task": "## ex98_axpy-{fn}: a·x + y (1 + 1 points)\n\n`a` a number, `x` and `y` of shape (n,); returns a·x + y.",
    "solution": 'def {fn}(a, x, y):\n    """a·x + y, element by element."""\n    guards.same_length("{fn}", x=x, y=y)'
                "  # x: (n,), y: (n,)\n    ### BEGIN SOLUTION\n    return a * x + y\n    ### END SOLUTION",
    "visible check": "ex98.check_{fn}({fn}, hidden=2)",
    "hidden check": "# Hidden checks for {fn} (1 point): length 1 and a prime.\n### BEGIN HIDDEN TESTS\n"
                    "ex98.check_{fn}({fn}, ex98.axpy_cases([1, 101], seed=1)[:2])\n### END HIDDEN TESTS",
    "hints": 'from twoprim.hints import hints\n\nhints("{fn}")',
    "submit": "## Before you submit\n\nRestart the kernel and run all cells, or press **Validate**.",
    "self-grade": '# Save the notebook first.\nfrom twoprim.selfgrade import selfgrade\n\nselfgrade("ex98_axpy")',
}


def guide_table(header: str) -> list[list[str]]:
    """The rows of the guide's markdown table under `header` (indented in a list or not), as stripped cells."""
    lines = [line.strip() for line in GUIDE.read_text(encoding="utf-8").splitlines()]
    assert header in lines, f"{GUIDE.relative_to(ROOT)} has no table headed {header!r}: its step 2 lists the cells"
    rows = []
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def author_cells() -> list[dict]:
    """The cells of an assignment's source notebook as the guide lists them: role, kind, grade id (a template in
    `<aid>` and `<fn>`, or None), nbgrader metadata (a template in `<ID>` and `<P>`, or None), points, per function."""
    metadata = {kind: text.strip("`") for kind, text in guide_table(METADATA_TABLE)}
    cells = []
    for role, kind, gid, nbtype, _ in guide_table(CELLS_TABLE):
        typed = re.fullmatch(r"(.+?)(?: \((\w) points\))?", nbtype)
        cells.append({"role": role.split(",")[0], "per_function": "*per function*" in role, "kind": kind,
                      "gid": None if gid == "(none)" else gid.strip("`"),
                      "meta": None if nbtype == "(none)" else metadata[typed[1]], "points": typed[2]})
    return cells


def source_notebook() -> nbformat.NotebookNode:
    """solutions/ex98_axpy/ex98_axpy.ipynb from the guide's tables and the author's SOURCES."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    for spec in author_cells():
        for fn in [FN] if spec["per_function"] else [None]:
            make = nbformat.v4.new_code_cell if spec["kind"] == "code" else nbformat.v4.new_markdown_cell
            cell = make(SOURCES[spec["role"]].format(fn=fn))
            if spec["meta"]:
                gid = spec["gid"].replace("<aid>", AID).replace("<fn>", fn or "")
                points = str(POINTS[spec["points"]]) if spec["points"] else ""
                cell.metadata["nbgrader"] = json.loads(spec["meta"].replace('"<ID>"', json.dumps(gid))
                                                       .replace("<P>", points))
            nb.cells.append(cell)
    return nb


# The course's tests that run on the copy, ex98 among its assignments: each takes no argument, or (aid, fn[, how])
COURSE_TESTS = {
    "test_outline": ["test_the_outline_lists_every_lesson_on_disk_in_order",
                     "test_the_outline_names_every_assignment_and_only_graded_functions",
                     "test_lesson_00s_outline_cell_is_the_readme_outline",
                     "test_outline_status_finds_every_lesson_and_assignment_of_this_copy"],
    "test_hints": ["test_every_graded_function_has_two_or_three_hints", "test_no_hint_contains_a_solution_line",
                   "test_each_graded_function_has_an_ungraded_locked_hint_cell"],
    "test_check_messages": ["test_every_graded_function_of_these_assignments_is_here",
                            f"test_solution_passes_and_announces_hidden_checks[{AID}-{FN}]",
                            *(f"test_each_check_explains_wrong_value_shape_and_dtype[{AID}-{FN}-{how}]"
                              for how in ("value", "shape", "dtype"))],
}

# Run in the copy with its own package: steps 3 and 5, then the course's own tests on the copy (ex98 included)
PROBE = textwrap.dedent(f"""
    import importlib, json, sys, traceback
    from twoprim import catalog, grading
    from twoprim.core import notebooks
    from twoprim.config import ROOT
    sys.path.insert(0, str(ROOT))

    def run(module, name):
        test, _, args = name.partition("[")
        try:
            getattr(importlib.import_module(f"tests.{{module}}"), test)(*(args[:-1].split("-") if args else ()))
            return "passed"
        except Exception:  # a failed assertion, or any error the test meets on the copy
            return traceback.format_exc()[-2000:]

    out = {{"root": str(ROOT),
           "before_row": run("test_outline", "test_the_outline_names_every_assignment_and_only_graded_functions")}}
    readme = ROOT / "README.md"  # step 3: lesson 01's second assignment, then lesson 00's outline from the table
    text = readme.read_text(encoding="utf-8")
    [row] = [line for line in text.splitlines() if line.startswith("| `01_dot_product`")]
    readme.write_text(text.replace(row, row + "\\n| | `{AID}`: `{FN}` |"), encoding="utf-8")
    notebooks.write_outline()
    released = ROOT / "exercises" / {AID!r} / "{AID}.ipynb"
    full = grading.selfgrade({AID!r}, notebook=ROOT / "solutions" / {AID!r} / "{AID}.ipynb")
    blank = grading.selfgrade({AID!r}, notebook=released)
    out.update({{
        "ids": catalog.assignment_ids(), "module": catalog.checks_module({AID!r}).__name__,
        "hints_of": catalog.hints_of({AID!r}), "released": released.read_text(),
        "full": [full.outcome.status, full.outcome.score, full.outcome.max_score, full.describe()],
        "blank": [blank.outcome.status, blank.outcome.score, blank.outcome.max_score, blank.describe()],
        "outline": [r.lesson for r in notebooks.outline() if r.assignment == {AID!r}]}})
    out.update({{name: run(module, name) for module, names in {COURSE_TESTS!r}.items() for name in names}})
    from tests import test_check_messages
    out["messages_cover"] = [list(f) for f in test_check_messages.FUNCTIONS if f[0] == {AID!r}]
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def new_assignment(tmp_path_factory) -> dict:
    """The author's files (steps 1, 2 and 4) written into a clone of the course (the repository itself is never
    changed, so tests running beside this one never see ex98 come and go); then, in the clone's own package, steps 3
    and 5 and the course's tests (PROBE). Returns what they reported."""
    clone = tmp_path_factory.mktemp("author") / "course"
    clone.mkdir()
    venv = clone_for(clone)
    (clone / "twoprim" / "assignments" / f"{AID}.py").write_text(CHECKS)
    (clone / "solutions" / AID).mkdir()
    nbformat.write(source_notebook(), str(clone / "solutions" / AID / f"{AID}.ipynb"))
    generate = subprocess.run([str(clone / "course"), "generate", AID], capture_output=True, text=True, timeout=300,
                              cwd=ROOT)  # from another course folder: the clone still runs its own package
    assert generate.returncode == 0, generate.stdout + generate.stderr
    run = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], cwd=clone, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {"clone": clone, **json.loads(run.stdout.strip().splitlines()[-1])}


def _shape(cell, aid: str, fn: str) -> tuple:
    """A cell's kind, grade id (in `aid` and `fn`) and nbgrader flags, points aside."""
    meta = dict(cell.metadata.get("nbgrader", {}))
    gid, _ = meta.pop("grade_id", None), meta.pop("points", None)
    return cell.cell_type, gid and gid.replace(f"{aid}-", "<aid>-").replace(f"-{fn}", "-<fn>"), meta


def conforms(aid: str) -> list[str]:
    """Where solutions/<aid>'s first and last cells differ from the guide's table (its first function's cells)."""
    real = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4).cells
    cells, expected = author_cells(), source_notebook().cells
    ids = {c["gid"] for c in cells}
    solved = [c for c in real if c.metadata.get("nbgrader", {}).get("solution")]
    fn = solved[0].metadata["nbgrader"]["grade_id"].removeprefix(f"{aid}-").removesuffix("-solution")
    real = [c for c in real if _shape(c, aid, fn)[1] in ids | {None}]  # an assignment's own Read-only cells aside
    head = next(i for i, c in enumerate(cells) if c["per_function"]) + sum(c["per_function"] for c in cells)
    tail = len(cells) - head
    pairs = list(zip(expected[:head], real[:head])) + list(zip(expected[-tail:], real[-tail:]))
    return [f"{_shape(have, aid, fn)} where the guide has {_shape(want, AID, FN)}" for want, have in pairs
            if _shape(want, AID, FN) != _shape(have, aid, fn)]


# Assignments whose notebook does not have the guide's cells yet, and why (each is checked to be still so)
NOT_YET = {"ex06_compile": "its introduction (the first cell) has no grade id ex06_compile-intro"}


def test_the_guide_lists_every_cell_this_test_writes():
    assert {c["role"] for c in author_cells()} == set(SOURCES), "the guide lists a cell this test does not write"


@pytest.mark.parametrize("aid", assignments())
def test_every_assignment_has_the_cells_the_guide_lists(aid):
    wrong = conforms(aid)
    if aid in NOT_YET:
        assert wrong, f"{aid} has the guide's cells now: remove it from NOT_YET"
    else:
        assert wrong == [], f"solutions/{aid}: " + "; ".join(wrong)


def test_a_new_assignment_is_found_and_graded_from_its_own_files(new_assignment):
    found = new_assignment
    assert found["root"] == str(found["clone"]), "the probe must run on the clone's own package"
    assert AID in found["ids"] and found["module"] == f"twoprim.assignments.{AID}"
    assert found["outline"] == ["01_dot_product"], "ex98 is lesson 01's second assignment"
    assert list(found["hints_of"]) == [f"{AID}-{FN}"]
    assert "raise NotImplementedError()" in found["released"] and "BEGIN HIDDEN" not in found["released"]
    status, score, max_score, said = found["full"]
    assert (status, score, max_score) == ("graded", 2.0, 2.0), said
    status, score, max_score, said = found["blank"]
    assert (score, max_score) == (0.0, 2.0), said
    assert not (ROOT / "twoprim" / "assignments" / f"{AID}.py").exists() and not (ROOT / "solutions" / AID).exists()


def test_without_its_outline_row_the_outline_test_fails(new_assignment):
    assert "each assignment in solutions/ appears once in README.md's lesson table" in new_assignment["before_row"]


@pytest.mark.parametrize("name", [name for names in COURSE_TESTS.values() for name in names])
def test_the_course_tests_pass_on_it(new_assignment, name):
    assert new_assignment[name] == "passed", new_assignment[name]


def test_the_message_tests_cover_it(new_assignment):
    assert new_assignment["messages_cover"] == [[AID, FN]]
