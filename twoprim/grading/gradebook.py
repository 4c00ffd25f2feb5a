"""The course gradebook (nbgrader's, SQLite under grader/): which assignments and submissions it knows, and merging
one graded submission into it. Only the instructor's process writes it, one submission at a time."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import nbformat

from ..nbgrader_cli import COURSE_ID, nbgrader
from .submission import Outcome

__all__ = ["COURSE_ID", "gradebook_path", "released_notebooks", "submitted_students", "merge"]



def gradebook_path(root: Path) -> Path:
    """The course gradebook; nbgrader's Gradebook shells out to `alembic`, so this environment's bin/ goes on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return root / "grader" / "gradebook.db"


def released_notebooks(aid: str, root: Path) -> dict[str, nbformat.NotebookNode]:
    """The student version of each notebook of `aid`, as the gradebook knows it.

    The assignment is registered in the gradebook first if needed (generated into a scratch folder, leaving
    exercises/ alone); the released notebooks come from exercises/ when it has them, else from that generation.
    """
    from nbgrader.api import Gradebook, MissingEntry

    def known() -> list[str]:
        try:
            with Gradebook(f"sqlite:///{gradebook_path(root)}", COURSE_ID) as gb:
                return [nb.name for nb in gb.find_assignment(aid).notebooks]
        except MissingEntry:
            return []

    names = known()
    released = root / "exercises" / aid
    with tempfile.TemporaryDirectory() as scratch:
        if not names or not all((released / f"{n}.ipynb").is_file() for n in names):
            nbgrader(["generate_assignment", aid, "--force", f"--CourseDirectory.release_directory={scratch}"],
                     root=root, capture=True)
            names, released = known(), Path(scratch) / aid
        return {n: nbformat.read(str(released / f"{n}.ipynb"), as_version=4) for n in names}


def submitted_students(aid: str, root: Path) -> list[str]:
    base = root / "grader" / "submitted"
    return sorted(p.name for p in base.iterdir() if (p / aid).is_dir()) if base.is_dir() else []


def merge(aid: str, outcome: Outcome, root: Path) -> None:
    """Write one outcome into the course gradebook and grader/autograded (idempotent)."""
    from nbgrader.api import Gradebook, MissingEntry

    dest = root / "grader" / "autograded" / outcome.student / aid
    if dest.exists():
        shutil.rmtree(dest)
    if outcome.autograded_dir is not None:
        shutil.copytree(outcome.autograded_dir, dest)
    with Gradebook(f"sqlite:///{gradebook_path(root)}", COURSE_ID) as gb, warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy's autoflush notes inside nbgrader's API
        warnings.filterwarnings("ignore", message=".*not in session.*")
        gb.update_or_create_student(outcome.student)
        try:
            sub = gb.find_submission(aid, outcome.student)
        except MissingEntry:
            sub = gb.add_submission(aid, outcome.student)
        if outcome.timestamp:
            from nbgrader.utils import parse_utc

            sub.timestamp = parse_utc(outcome.timestamp)
        for nb in sub.notebooks:
            for grade in nb.grades:
                score = outcome.grades.get((nb.name, grade.name))
                grade.auto_score = score if outcome.status == "graded" else 0.0
                grade.needs_manual_grade = outcome.status == "graded" and score is None
            for comment in nb.comments:
                comment.auto_comment = outcome.comments.get((nb.name, comment.name))
        gb.db.commit()
