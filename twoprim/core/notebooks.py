"""Notebook files: read, clean (no outputs, only the metadata that matters), execute with timing; and the course
outline, whose one source is the lesson table in README.md (lesson 00's outline cell is written from it).

nbformat is imported where a function needs it: this module names the course root for every graded kernel, and
nbformat's import (jsonschema and its format checkers) costs over a second of CPU that a kernel never needs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

__all__ = [
    "lessons",
    "assignments",
    "clean",
    "is_clean",
    "execute",
    "code_of",
    "OutlineRow",
    "outline",
    "outline_cell",
    "outline_status",
    "write_outline",
    "answers",
]

from twoprim.config import ASSIGNMENT_ID, ROOT  # ROOT's home is config; lessons released before named it here

KEEP_NOTEBOOK_METADATA = ("kernelspec", "language_info")
KEEP_CELL_METADATA = ("nbgrader", "editable", "deletable", "tags")


def lessons(root: Path = ROOT) -> list[Path]:
    """Every lesson notebook (lessons/NN_*.ipynb), in order."""
    return sorted((root / "lessons").glob("[0-9][0-9]_*.ipynb"))


def assignments(root: Path = ROOT) -> list[str]:
    """Assignment ids: every solutions/<id>/<id>.ipynb."""
    return sorted(p.parent.name for p in (root / "solutions").glob("*/*.ipynb") if p.stem == p.parent.name)


# ----------------------------------------------------------------------------------------------------------------
# The course outline: README.md's lesson table is its one source
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutlineRow:
    """One row of the README's lesson table: the lesson, its topic, its assignment and that assignment's functions."""

    lesson: str  # "01_dot_product"
    topic: str  # what the lesson covers, as README says it
    assignment: str | None  # "ex01_dot", or None for a lesson without one
    functions: str  # "`dot_loop`, `dot`, ..." as README lists them ("" without an assignment)


_LESSON_CELL = re.compile(r"^`(\d\d_\w+)` — (.+)$")
_ASSIGNMENT_CELL = re.compile(rf"^`(?P<aid>{ASSIGNMENT_ID.pattern})`(?:: (?P<functions>.+))?$")
OUTLINE_HEADING = "## The outline"
OUTLINE_LESSON = Path("lessons") / "00_start_here.ipynb"


def outline(root: Path = ROOT) -> list[OutlineRow]:
    """The course outline: every row of the `| lesson | assignment |` table in README.md ("The course").
    A row whose lesson cell is empty holds another assignment of the lesson above it (one row per assignment).
    Empty when this copy of the course has no README.md."""
    readme = Path(root) / "README.md"
    if not readme.is_file():
        return []
    rows, inside = [], False
    for line in readme.read_text(encoding="utf-8").splitlines():
        if re.fullmatch(r"\|\s*lesson\s*\|\s*assignment\s*\|", line.strip()):
            inside = True
            continue
        if not inside:
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if set("".join(cells)) <= set("- "):
            continue  # the | --- | --- | line
        lesson = _LESSON_CELL.match(cells[0])
        if len(cells) != 2 or not (lesson or (not cells[0] and cells[1] and rows)):
            raise ValueError(
                f"README.md's lesson table has a row that is not | `NN_name` — topic | `exNN_id`: "
                f"functions | (or an empty assignment; or an empty lesson: another assignment of the "
                f"lesson above): {line!r}"
            )
        work = _ASSIGNMENT_CELL.match(cells[1]) if cells[1] else None
        if cells[1] and not work:
            raise ValueError(f"README.md's lesson table: the assignment cell {cells[1]!r} is not `exNN_id`: functions")
        name, topic = (lesson[1], lesson[2]) if lesson else (rows[-1].lesson, rows[-1].topic)
        rows.append(OutlineRow(name, topic, work["aid"] if work else None, (work["functions"] or "") if work else ""))
    return rows


def outline_cell(root: Path = ROOT) -> str:
    """Lesson 00's outline cell (markdown), written from README.md's lesson table."""
    lines = [OUTLINE_HEADING, "", "| lesson | what it covers | its assignment |", "| --- | --- | --- |"]
    previous = None
    for row in outline(root):
        work = (
            f"`{row.assignment}`: {row.functions}"
            if row.functions
            else (f"`{row.assignment}`" if row.assignment else "")
        )
        lesson = "| | |" if row.lesson == previous else f"| `{row.lesson}` | {row.topic} |"  # its second assignment
        lines.append(f"{lesson} {work} |")
        previous = row.lesson
    lines += [
        "",
        "This is the outline in the course's `README.md`. The course is released lesson by lesson: the cell "
        "below lists what your copy holds, and a lesson or assignment marked *coming* has not been released "
        "yet.",
    ]
    return "\n".join(lines)


def outline_status(root: Path = ROOT) -> str:
    """Each lesson and assignment of the outline, with its file in this copy or "coming"."""
    root = Path(root)
    rows = outline(root)
    if not rows:  # a copy without README.md: what is here
        return "\n".join(f"{p.stem[:2]}  lesson: {p.relative_to(root)}" for p in lessons(root))
    out = []
    for row in rows:
        lesson = root / "lessons" / f"{row.lesson}.ipynb"
        shown = str(lesson.relative_to(root)) if lesson.is_file() else "coming"
        work = "-"
        if row.assignment:
            exercise = root / "exercises" / row.assignment / f"{row.assignment}.ipynb"
            work = str(exercise.relative_to(root)) if exercise.is_file() else f"{row.assignment} coming"
        out.append(f"{row.lesson[:2]}  lesson: {shown:40}  assignment: {work}")
    return "\n".join(out)


def write_outline(root: Path = ROOT) -> Path | None:
    """Rewrite lesson 00's outline cell from README.md's lesson table (`./course generate` does, after an edit of the
    table); returns lesson 00's path, or None when its outline already is the table's (nothing written)."""
    import nbformat

    path = Path(root) / OUTLINE_LESSON
    nb = nbformat.read(str(path), as_version=4)
    [cell] = [c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith(OUTLINE_HEADING)]
    if cell.source == outline_cell(root):
        return None
    cell.source = outline_cell(root)
    write_clean(nb, path)
    return path


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip outputs, execution counts and all metadata but the kernel's and nbgrader's (in place)."""
    import nbformat

    meta = nb.metadata
    kept = {k: meta[k] for k in KEEP_NOTEBOOK_METADATA if k in meta}
    if "language_info" in kept:
        kept["language_info"] = {"name": kept["language_info"].get("name", "python")}
    if "kernelspec" in kept:
        ks = kept["kernelspec"]
        kept["kernelspec"] = {
            "display_name": ks.get("display_name", "Python 3"),
            "language": ks.get("language", "python"),
            "name": ks.get("name", "python3"),
        }
    nb.metadata = nbformat.from_dict(kept)
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({k: cell.metadata[k] for k in KEEP_CELL_METADATA if k in cell.metadata})
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def is_clean(nb: nbformat.NotebookNode) -> list[str]:
    """What is not clean about a notebook, as readable problems (empty when clean)."""
    problems = []
    extra = set(nb.metadata) - set(KEEP_NOTEBOOK_METADATA)
    if extra:
        problems.append(f"notebook metadata {sorted(extra)}")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None):
            problems.append(f"cell {i} has outputs or an execution count")
        extra = set(cell.metadata) - set(KEEP_CELL_METADATA)
        if extra:
            problems.append(f"cell {i} metadata {sorted(extra)}")
    return problems


def write_clean(nb: nbformat.NotebookNode, path: Path) -> None:
    """Write `nb` to `path` cleaned as every committed notebook is (no outputs, only nbgrader's metadata)."""
    import nbformat

    nbformat.write(clean(nb), str(path))


def answers(nb: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> the code of each cell a student answers (nbgrader's solution cells), in the notebook's order,
    with trailing blanks gone: what collect compares for copies and `./course similarity` fingerprints."""
    out = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "code" and meta.get("solution") and meta.get("grade_id"):
            out[meta["grade_id"]] = "\n".join(line.rstrip() for line in cell.source.strip().splitlines())
    return out


def code_of(path: Path, *, graded_tests: bool = False) -> list[str]:
    """The code cells' sources; nbgrader test cells (grade without solution) only when `graded_tests`."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        is_test = meta.get("grade", False) and not meta.get("solution", False)
        if is_test and not graded_tests:
            continue
        out.append(cell.source)
    return out


def execute(path: Path, *, timeout: int = 600, cwd: Path | None = None) -> tuple[nbformat.NotebookNode, float]:
    """Run a notebook top to bottom in a fresh kernel; return the executed notebook and the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd or path.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - start
