"""An assignment is added by the guide "Writing an assignment" (docs/guides/authors.md) alone, from the template, and
the course's own tests accept it.

A throw-away `ex01b_axpy`, lesson 01's second assignment (the guide's numbering rule), is added in a copy of the course
(a git repository of its own) by the guide's steps and nothing else: its step 1's commands, run as the guide writes
them (the template copied, its placeholders replaced); a row in README.md's lesson table under lesson 01's (step 3);
`./course generate` (step 4); a self-grade of the solution and of the blank student version (step 5). Then, with the
copy's own package, the very test functions of tests/test_outline.py, test_hints.py and test_check_messages.py run on
the copy, ex01b among its assignments; and the files the steps changed are exactly those of the guide's table "The
files it touches". The template itself has the cells of the guide's tables, and so has every assignment. The
repository itself is never changed.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap

import nbformat
import pytest

from twoprim.config import ASSIGNMENT_ID, ROOT
from twoprim.core.notebooks import assignments

from .accounts import clone_for

AID, FN = "ex01b_axpy", "axpy"  # the template's one function, kept: the author writes nothing more in step 2
_ID = ASSIGNMENT_ID.fullmatch(AID)
assert _ID, AID
SHORT = _ID[1]
PLACEHOLDER = "exNN_topic"  # the template's id
TEMPLATE = ROOT / "template" / f"{PLACEHOLDER}.ipynb"
GUIDE = ROOT / "docs" / "guides" / "authors.md"  # "Writing an assignment"
FILES_TABLE = "| file | written by |"
CELLS_TABLE = "| cell | kind | grade id | nbgrader cell type | what it holds |"
METADATA_TABLE = "| nbgrader cell type | the cell's `metadata.nbgrader` |"
COPY_STEP = "1. **Copy the template**"


def guide_table(header: str) -> list[list[str]]:
    """The rows of the guide's markdown table under `header` (indented in a list or not), as stripped cells."""
    lines = [line.strip() for line in GUIDE.read_text(encoding="utf-8").splitlines()]
    assert header in lines, f"{GUIDE.relative_to(ROOT)} has no table headed {header!r}"
    rows = []
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def guide_commands() -> str:
    """The shell commands of the guide's step 1, as written there."""
    text = GUIDE.read_text(encoding="utf-8")
    assert COPY_STEP in text, f"{GUIDE.relative_to(ROOT)} has no step {COPY_STEP!r}"
    block = text.split(COPY_STEP, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return textwrap.dedent(block)


def guide_files() -> tuple[set[str], set[str]]:
    """The files the guide says adding AID touches: (those every assignment touches, those it may)."""
    required, optional = set(), set()
    for file, written_by in guide_table(FILES_TABLE):
        path = file.strip("`").replace("<aid>", AID).replace("<short>", SHORT)
        (optional if "optionally" in written_by else required).add(path)
    return required, optional


def author_cells() -> list[dict]:
    """The cells of an assignment's source notebook as the guide lists them: role, kind, grade id (a template in
    `<aid>` and `<fn>`, or None), nbgrader metadata (a template in `<ID>` and `<P>`, or None), per function."""
    metadata = {kind: text.strip("`") for kind, text in guide_table(METADATA_TABLE)}
    cells = []
    for role, kind, gid, nbtype, _ in guide_table(CELLS_TABLE):
        typed = re.fullmatch(r"(.+?)(?: \((\w) points\))?", nbtype)
        assert typed, nbtype
        cells.append(
            {
                "role": role.split(",")[0],
                "per_function": "*per function*" in role,
                "kind": kind,
                "gid": None if gid == "(none)" else gid.strip("`"),
                "meta": None if nbtype == "(none)" else metadata[typed[1]],
            }
        )
    return cells


def guide_notebook(aid: str, fn: str, points=lambda gid: 1) -> list[tuple[str, dict | None]]:
    """The cells the guide's tables give an assignment `aid` of one graded function `fn`: (kind, its
    `metadata.nbgrader` or None), test cells worth `points(grade_id)`."""
    cells = []
    for spec in author_cells():
        meta = None
        if spec["meta"]:
            gid = spec["gid"].replace("<aid>", aid).replace("<fn>", fn)
            meta = json.loads(spec["meta"].replace('"<ID>"', json.dumps(gid)).replace("<P>", str(points(gid))))
        cells.append((spec["kind"], meta))
    return cells


def _shape(kind: str, meta: dict | None, aid: str, fn: str) -> tuple:
    """A cell's kind, grade id (in `aid` and `fn`) and nbgrader flags, points aside."""
    meta = dict(meta or {})
    gid, _ = meta.pop("grade_id", None), meta.pop("points", None)
    return kind, gid and gid.replace(f"{aid}-", "<aid>-").replace(f"-{fn}", "-<fn>"), meta


def _cells(path) -> list[tuple[str, dict | None]]:
    return [(c.cell_type, c.metadata.get("nbgrader")) for c in nbformat.read(str(path), as_version=4).cells]


def conforms(aid: str) -> list[str]:
    """Where solutions/<aid>'s first and last cells differ from the guide's table (its first function's cells)."""
    real = _cells(ROOT / "solutions" / aid / f"{aid}.ipynb")
    cells, expected = author_cells(), guide_notebook(AID, FN)
    ids = {c["gid"] for c in cells}
    solved = [meta for _, meta in real if meta and meta.get("solution")]
    fn = solved[0]["grade_id"].removeprefix(f"{aid}-").removesuffix("-solution")
    real = [c for c in real if _shape(*c, aid, fn)[1] in ids | {None}]  # an assignment's own Read-only cells aside
    head = next(i for i, c in enumerate(cells) if c["per_function"]) + sum(c["per_function"] for c in cells)
    tail = len(cells) - head
    pairs = list(zip(expected[:head], real[:head], strict=False)) + list(
        zip(expected[-tail:], real[-tail:], strict=False)
    )
    return [
        f"{_shape(*have, aid, fn)} where the guide has {_shape(*want, AID, FN)}"
        for want, have in pairs
        if _shape(*want, AID, FN) != _shape(*have, aid, fn)
    ]


# Assignments whose notebook does not have the guide's cells yet, and why (each is checked to be still so)
NOT_YET = {"ex06_compile": "its introduction (the first cell) has no grade id ex06_compile-intro"}


def test_the_template_has_exactly_the_cells_and_metadata_the_guide_lists():
    have = _cells(TEMPLATE)
    want = guide_notebook(
        PLACEHOLDER, FN, points=lambda gid: next(m.get("points") for _, m in have if m and m["grade_id"] == gid)
    )
    assert have == want, f"{TEMPLATE.relative_to(ROOT)}'s cells differ from the guide's tables (step 2)"


@pytest.mark.parametrize("aid", assignments())
def test_every_assignment_has_the_cells_the_guide_lists(aid):
    wrong = conforms(aid)
    if aid in NOT_YET:
        assert wrong, f"{aid} has the guide's cells now: remove it from NOT_YET"
    else:
        assert wrong == [], f"solutions/{aid}: " + "; ".join(wrong)


def test_the_guides_id_rule_is_the_course_s():
    """The id the test adds is one the guide's numbering rule allows, and its short name the one it says."""
    assert SHORT == "ex01b" and ASSIGNMENT_ID.fullmatch(PLACEHOLDER) is None  # the template is never an assignment
    assert "aid=" in guide_commands() and PLACEHOLDER in guide_commands()


# The course's tests that run on the copy, ex01b among its assignments: each takes no argument, tmp_path, or
# (aid, fn[, how])
COURSE_TESTS = {
    "test_outline": [
        "test_the_outline_lists_every_lesson_on_disk_in_order",
        "test_the_outline_names_every_assignment_and_only_graded_functions",
        "test_lesson_00s_outline_cell_is_the_readme_outline",
        "test_outline_status_finds_every_lesson_and_assignment_of_this_copy",
        "test_outline_status_marks_what_a_copy_does_not_hold",
        "test_every_assignment_id_follows_the_numbering_rule",
    ],
    "test_hints": [
        "test_every_graded_function_has_two_or_three_hints",
        "test_no_hint_contains_a_solution_line",
        "test_each_graded_function_has_an_ungraded_locked_hint_cell",
    ],
    "test_check_messages": [
        "test_every_graded_function_of_these_assignments_is_here",
        f"test_solution_passes_and_announces_hidden_checks[{AID}-{FN}]",
        *(
            f"test_each_check_explains_wrong_value_shape_and_dtype[{AID}-{FN}-{how}]"
            for how in ("value", "shape", "dtype")
        ),
    ],
}

# Run in the copy with its own package: a course test by name (module, name) -> "passed" or its traceback
RUN = textwrap.dedent("""
    import importlib, inspect, json, sys, tempfile, traceback
    from pathlib import Path
    from twoprim.config import ROOT
    sys.path.insert(0, str(ROOT))

    def run(module, name):
        test, _, args = name.partition("[")
        try:
            fn = getattr(importlib.import_module(f"tests.{module}"), test)
            if "tmp_path" in inspect.signature(fn).parameters:
                fn(Path(tempfile.mkdtemp()))
            else:
                fn(*(args[:-1].split("-") if args else ()))
            return "passed"
        except Exception:  # a failed assertion, or any error the test meets on the copy
            return traceback.format_exc()[-2000:]
""")

# Before step 3: the outline's test fails on the copy, and says why
BEFORE_ROW = RUN + textwrap.dedent("""
    print(json.dumps(run("test_outline", "test_the_outline_names_every_assignment_and_only_graded_functions")))
""")

# After step 4: step 5, what the course finds, and the course's own tests on the copy (ex01b included)
PROBE = RUN + textwrap.dedent(f"""
    from twoprim import catalog, grading
    from twoprim.core import notebooks
    released = ROOT / "exercises" / {AID!r} / "{AID}.ipynb"
    full = grading.selfgrade({AID!r}, notebook=ROOT / "solutions" / {AID!r} / "{AID}.ipynb")
    blank = grading.selfgrade({AID!r}, notebook=released)
    out = {{"root": str(ROOT), "ids": catalog.assignment_ids(), "module": catalog.checks_module({AID!r}).__name__,
           "short": catalog.checks_module_name({AID!r}), "hints_of": catalog.hints_of({AID!r}),
           "released": released.read_text(),
           "full": [full.outcome.status, full.outcome.score, full.outcome.max_score, full.describe()],
           "blank": [blank.outcome.status, blank.outcome.score, blank.outcome.max_score, blank.describe()],
           "outline": [r.lesson for r in notebooks.outline() if r.assignment == {AID!r}]}}
    out.update({{name: run(module, name) for module, names in {COURSE_TESTS!r}.items() for name in names}})
    from tests import test_check_messages
    out["messages_cover"] = [list(f) for f in test_check_messages.FUNCTIONS if f[0] == {AID!r}]
    print(json.dumps(out))
""")


def _git(clone, *args) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=author", "-c", "user.email=author@example.org", *args],
        cwd=clone,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def _python(venv, clone, code: str):
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], cwd=clone, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def new_assignment(tmp_path_factory) -> dict:
    """The guide's steps in a clone of the course, a git repository of its own (the repository itself is never
    changed, so tests running beside this one never see ex01b come and go); returns what they reported."""
    clone = tmp_path_factory.mktemp("author") / "course"
    clone.mkdir()
    venv = clone_for(clone)
    _git(clone, "init", "-q")
    _git(clone, "add", "-A")
    _git(clone, "commit", "-q", "-m", "the course as the author found it")
    commands = guide_commands()  # step 1, as the guide writes it, for this id
    script = re.sub(r"^aid=\S+$", f"aid={AID}", commands, count=1, flags=re.M)
    assert script != commands, f"the guide's step 1 sets no aid=: {commands}"
    copy = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=clone, capture_output=True, text=True, timeout=60
    )
    assert copy.returncode == 0, f"the guide's step 1 failed:\n{script}\n{copy.stdout}{copy.stderr}"
    before_row = _python(venv, clone, BEFORE_ROW)
    readme = clone / "README.md"  # step 3: the row under lesson 01's, its lesson cell empty
    text = readme.read_text(encoding="utf-8")
    [row] = [line for line in text.splitlines() if line.startswith("| `01_dot_product`")]
    readme.write_text(text.replace(row, row + f"\n| | `{AID}`: `{FN}` |"), encoding="utf-8")
    generate = subprocess.run(
        [str(clone / "course"), "generate", AID], capture_output=True, text=True, timeout=300, cwd=ROOT
    )  # from another course folder: the clone still runs its own package
    assert generate.returncode == 0, generate.stdout + generate.stderr
    found = _python(venv, clone, PROBE)
    status = _git(clone, "status", "--porcelain", "--untracked-files=all")
    return {
        "clone": clone,
        "before_row": before_row,
        "generated": generate.stdout,
        "changed": sorted(line[3:] for line in status.splitlines()),
        **found,
    }


def test_a_new_assignment_is_found_and_graded_from_its_own_files(new_assignment):
    found = new_assignment
    assert found["root"] == str(found["clone"]), "the probe must run on the clone's own package"
    assert AID in found["ids"] and found["module"] == f"twoprim.assignments.{AID}" and found["short"] == SHORT
    assert found["outline"] == ["01_dot_product"], "ex01b is lesson 01's second assignment"
    assert list(found["hints_of"]) == [f"{AID}-{FN}"]
    assert "raise NotImplementedError()" in found["released"] and "BEGIN HIDDEN" not in found["released"]
    assert PLACEHOLDER not in found["released"] and f"from twoprim import {SHORT}, guards" in found["released"]
    status, score, max_score, said = found["full"]
    assert (status, score, max_score) == ("graded", 2.0, 2.0), said
    status, score, max_score, said = found["blank"]
    assert (score, max_score) == (0.0, 2.0), said


def test_it_touches_only_the_files_the_guide_names(new_assignment):
    required, optional = guide_files()
    changed = set(new_assignment["changed"])
    assert required <= changed, f"the guide says these change, and they did not: {sorted(required - changed)}"
    assert changed <= required | optional, (
        f"adding {AID} by the guide changed files its table 'The files it touches' does not name: "
        f"{sorted(changed - required - optional)}"
    )
    assert "generated lessons/00_start_here.ipynb" in new_assignment["generated"]


def test_without_its_outline_row_the_outline_test_fails(new_assignment):
    assert "each assignment in solutions/ appears once in README.md's lesson table" in new_assignment["before_row"]


@pytest.mark.parametrize("name", [name for names in COURSE_TESTS.values() for name in names])
def test_the_course_tests_pass_on_it(new_assignment, name):
    assert new_assignment[name] == "passed", new_assignment[name]


def test_the_message_tests_cover_it(new_assignment):
    assert new_assignment["messages_cover"] == [[AID, FN]]
