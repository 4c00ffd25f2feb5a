"""A synthetic class: student submissions built from the committed student version and the solutions, including
every kind of bad submission an instructor meets. Used by the grading tests and scripts/bench_autograde.py."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path

import nbformat

from twoprim.config import ROOT

TIMESTAMP = "2026-11-30 09:00:00.000000 UTC"
SECRET = "random"  # `nbgrader submit` writes a random secret beside the notebook (feedback needs it): one per student


def course_copy(base: Path, *aids: str) -> Path:
    """A throw-away course at `base`: the grader's configuration and, for each of `aids`, its source and its
    student version (what grading an assignment needs; the repository's own grader/ is never touched)."""
    (base / "grader").mkdir(parents=True)
    shutil.copy(ROOT / "grader" / "nbgrader_config.py", base / "grader")
    for aid in aids:
        shutil.copytree(ROOT / "solutions" / aid, base / "solutions" / aid)
        shutil.copytree(ROOT / "exercises" / aid, base / "exercises" / aid)
    return base


def solution_code(aid: str) -> dict[str, str]:
    """grade_id -> the solution cell's code without the nbgrader markers."""
    nb = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            out[meta["grade_id"]] = "\n".join(
                line
                for line in cell.source.splitlines()
                if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
            )
    return out


def student_version(aid: str) -> nbformat.NotebookNode:
    return nbformat.read(str(ROOT / "exercises" / aid / f"{aid}.ipynb"), as_version=4)


def answered(aid: str, overrides: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """The student version with every solution cell answered, then `overrides` (grade_id -> code) applied."""
    nb = student_version(aid)
    answers = {**solution_code(aid), **(overrides or {})}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    return nb


def cell_index(nb: nbformat.NotebookNode, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def prepend(aid: str, grade_id: str, code: str) -> nbformat.NotebookNode:
    """Answered, with `code` run at the top of the solution cell `grade_id`."""
    return answered(aid, {grade_id: code + "\n" + solution_code(aid)[grade_id]})


def write(
    submitted: Path,
    student: str,
    aid: str,
    nb: nbformat.NotebookNode | str | bytes | None,
    *,
    timestamp: str | None = TIMESTAMP,
    extra: dict[str, str] | None = None,
    secret: str | bytes | None = SECRET,
) -> Path:
    """Put a submission at grader/submitted/<student>/<aid>/ the way `nbgrader collect` lays it out."""
    folder = submitted / student / aid
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{aid}.ipynb"
    if isinstance(nb, nbformat.NotebookNode):
        nbformat.write(nb, str(path))
    elif isinstance(nb, str):
        path.write_text(nb)
    elif isinstance(nb, bytes):
        path.write_bytes(nb)
    if timestamp is not None:
        (folder / "timestamp.txt").write_text(timestamp)
    if secret == SECRET:
        secret = hashlib.sha256(f"{student}/{aid}".encode()).hexdigest()[:32]
    if isinstance(secret, bytes):
        (folder / "submission_secret.txt").write_bytes(secret)
    elif secret is not None:
        (folder / "submission_secret.txt").write_text(secret)
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)
    return folder


def bad_ex01_class(submitted: Path) -> None:
    """The ex01_dot class of the grading tests: correct, blank, and every bad submission."""
    aid = "ex01_dot"
    sol = lambda fn: f"{aid}-{fn}-solution"  # noqa: E731
    w = lambda student, nb, **kw: write(submitted, student, aid, nb, **kw)  # noqa: E731
    w("perfect", answered(aid))
    w("blank", student_version(aid))
    w(
        "wrong_top_k",
        answered(aid, {sol("top_k"): solution_code(aid)[sol("top_k")].replace("descending=True", "descending=False")}),
    )
    w("infinite_loop", prepend(aid, sol("dot_loop"), "while True:\n    pass"))
    w(
        "swallows_interrupt",
        prepend(
            aid,
            sol("dot_loop"),
            "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n        pass",
        ),
    )
    w("os_exit", prepend(aid, sol("top_k"), "import os\nos._exit(3)"))
    w("segfault", prepend(aid, sol("top_k"), "import ctypes\nctypes.string_at(0)"))
    w("memory_bomb", prepend(aid, sol("top_k"), "hog = bytearray(64 * 2**30)"))
    w("many_lines", prepend(aid, sol("neuron"), "for i in range(100_000):\n    print(i)"))
    w("one_huge_line", prepend(aid, sol("neuron"), "print('x' * 20_000_000)"))
    w(
        "limits_probe",
        prepend(
            aid,
            sol("dot_loop"),
            "import resource\nprint('address space limit', resource.getrlimit(resource.RLIMIT_AS)[0])",
        ),
    )
    w(
        "warning_in_test",
        answered(
            aid,
            {
                sol("dot"): solution_code(aid)[sol("dot")].replace(
                    "    return (x * w).sum()",
                    "    import warnings\n    warnings.warn('a learner warning')\n    return (x * w).sum()",
                )
            },
        ),
    )

    nb = answered(aid)
    del nb.cells[cell_index(nb, f"{aid}-dot")]
    w("deleted_test_cell", nb)
    nb = answered(aid)
    nb.cells[cell_index(nb, f"{aid}-dot")].source = "pass  # the check was in the way"
    w("edited_test_cell", nb)
    nb = answered(aid)
    i = cell_index(nb, f"{aid}-dot")
    duplicate = copy.deepcopy(nb.cells[i])
    duplicate["id"] = "pasted-copy"
    nb.cells.insert(i + 1, duplicate)
    w("duplicated_test_cell", nb)
    nb = answered(aid)
    i = cell_index(nb, f"{aid}-top_k-hidden")
    old = nb.cells[i]
    nb.cells[i] = nbformat.v4.new_markdown_cell(old.source, metadata=old.metadata)
    w("markdown_test_cell", nb)
    nb = answered(aid)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    w("stripped_metadata", nb)
    nb = answered(aid)
    nb.cells[cell_index(nb, f"{aid}-top_k")].metadata["nbgrader"]["grade_id"] = "my_renamed_cell"
    w("renamed_grade_id", nb)

    text = nbformat.writes(answered(aid))
    w("truncated", text[: len(text) // 2])
    w("not_json", "I could not get Jupyter to work so here is my answer: return (x * w).sum()")
    w("missing_notebook", None)
    w(
        "extra_files",
        answered(aid),
        extra={"scratch.ipynb": nbformat.writes(student_version(aid)), "notes.txt": "my notes"},
    )
    w("numpy_py", answered(aid), extra={"numpy.py": "raise ImportError('a numpy.py beside the notebook')"})
    w("torch_py", answered(aid), extra={"torch.py": "raise ImportError('a torch.py beside the notebook')"})
    w("bad_timestamp", answered(aid), timestamp="the day before the deadline, honest")
    w("no_timestamp", answered(aid), timestamp=None)

    # what reaches grader/submitted/ besides notebooks: every kind is refused or graded with its reason
    w("empty", "")
    text = nbformat.writes(answered(aid))
    w("binary", gzip.compress(text.encode(), mtime=0))  # a compressed notebook
    w("wrong_nbformat", json.dumps({**json.loads(text), "nbformat": 3}))  # v4 cells under a version 3 label
    folder = w("renamed_notebook", None)
    nbformat.write(answered(aid), str(folder / f"{aid} (1).ipynb"))
    folder = w("folder_in_place", None)
    (folder / f"{aid}.ipynb").mkdir()
    nbformat.write(answered(aid), str(folder / f"{aid}.ipynb" / f"{aid}.ipynb"))
    folder = w("link_to_classmate", None)
    os.symlink(f"../../perfect/{aid}/{aid}.ipynb", folder / f"{aid}.ipynb")
    folder = w("link_to_shadow", None)
    os.symlink("/etc/shadow", folder / f"{aid}.ipynb")
    folder = w("fifo_in_place", None)
    os.mkfifo(folder / f"{aid}.ipynb")
    w("latin1", text.replace("Compute", "Calculé").encode("latin-1", "replace"))
    w("utf16", text.encode("utf-16"))
    w("bom", b"\xef\xbb\xbf" + text.encode())
    w("crlf", text.replace("\n", "\r\n").encode())
    nb = answered(aid)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("A long essay. " * 400_000))  # 5.6 MB of markdown
    w("huge_markdown", nb)
    nb = answered(aid)
    nb.cells[1:1] = [
        nbformat.v4.new_markdown_cell(f"note {i}") if i % 2 else nbformat.v4.new_code_cell("") for i in range(3000)
    ]
    w("thousands_of_cells", nb)
    w("endless_sleep", answered(aid, {sol("dot_loop"): "import time\n\ndef dot_loop(x, w):\n    time.sleep(10**6)"}))
    w(
        "process_bomb",
        prepend(
            aid, sol("top_k"), "import subprocess\nkids = [subprocess.Popen(['sleep', '600']) for _ in range(100_000)]"
        ),
    )
    w("no_secret", answered(aid), secret=None)
    w("garbage_secret", answered(aid), secret=b"\xff\xfe\x00garbage")

    # what a student changes in the notebook's structure is undone: graded by the assignment's own cells
    nb = answered(aid)
    for cell in nb.cells:  # every answer cell marked as a graded cell of 5 points (nbgrader: "No such grade cell")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.metadata["nbgrader"].update(grade=True, points=5)
    w("answers_marked_graded", nb)
    nb = student_version(aid)
    for cell in nb.cells:  # a blank notebook that rewrites its grading: answers graded and locked, tests worth 100
        meta = cell.metadata.get("nbgrader", {})  # and passing, a bonus cell of its own
        if meta.get("solution"):
            meta.update(grade=True, points=5, solution=False, locked=True)
        elif meta.get("grade"):
            meta["points"] = 100
            cell.source = "print('passed')"
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "print('bonus')",
            metadata={
                "nbgrader": {
                    "grade": True,
                    "solution": False,
                    "locked": True,
                    "grade_id": "bonus",
                    "points": 100,
                    "schema_version": 3,
                }
            },
        )
    )
    w("blank_rewrites_grading", nb)
    w("another_assignment", student_version("ex02_gemm"))
    w("nbformat_v3", nbformat.writes(nbformat.convert(answered(aid), 3)))  # Jupyter's format before 2015: upgraded
