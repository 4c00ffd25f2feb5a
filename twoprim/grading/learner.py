"""A learner grading their own notebook exactly as an instructor's autograde would, hidden checks included, in a
throw-away course; the result is saved for `./course progress` and the feedback HTML kept."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from twoprim.config import ROOT
from twoprim.grading import sandbox
from twoprim.grading.cluster import MAX_ATTEMPTS
from twoprim.grading.execute import watching_cells
from twoprim.grading.gradebook import init_db, merge, released_notebooks, snapshot
from twoprim.grading.nbgrader_cli import generate_feedback
from twoprim.grading.reports import number
from twoprim.grading.submission import NOT_GRADED, Outcome, grade_task, make_task
from twoprim.grading.submitted import read_submission
from twoprim.learner.selfgrade import hidden_checks_problem

__all__ = ["SelfGrade", "selfgrade", "require_hidden_checks", "graded_tests", "source_digest"]


@dataclass
class SelfGrade:
    """A learner's self-grade of one notebook: the outcome, and the feedback HTML written for it."""

    assignment: str
    outcome: Outcome
    feedback: Path | None

    def describe(self) -> str:
        o = self.outcome
        if o.status != "graded":
            return f"{self.assignment}: could not be graded: {o.reason}"
        notes = [n for n in (o.reason or "").split("; ") if n and n != "all cells ran"]
        errors = [n for n in notes if n.startswith("error in ")]
        lines = [
            f"{self.assignment}: {number(o.score)} / {number(o.max_score)} points, hidden checks included "
            f"(the score an instructor's autograde gives this notebook)"
        ]
        for note in errors:  # what every later check failed because of: said first, in the words of the error
            lines.append(f"  ✘ {note}")
        if errors:
            lines.append(
                "    fix this first: the checks that need what that cell defines fail because of it, not "
                'because of your answers ("no result came back" below)'
            )
        for (_, gid), score in sorted(o.grades.items()):
            if not gid.endswith("-solution"):
                lines.append(f"  {'✔' if score else '✘'} {gid}: {number(score or 0)}")
        rest = [n for n in notes if n not in errors]
        if rest:
            lines.append(f"notes: {'; '.join(rest)}")
        if self.feedback:
            lines.append(f"feedback: {self.feedback}")
        return "\n".join(lines)

    def save(self, path: Path, notebook: Path) -> None:
        """grader/selfgrade/<aid>.json: the last self-grade of `notebook` (read by `./course progress`)."""
        o = self.outcome
        record = {
            "assignment": self.assignment,
            "notebook": str(notebook),
            "status": o.status,
            "reason": o.reason,
            "score": o.score,
            "max_score": o.max_score,
            "graded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "tests": {gid: score for (_, gid), score in sorted(o.grades.items()) if not gid.endswith("-solution")},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n")


def require_hidden_checks(aid: str, root: Path = ROOT) -> None:
    """Self-grading runs `aid`'s hidden checks (solutions/<aid>/): a copy of the course without them, or an account
    that cannot read them (a student on the classroom hub), is told to submit instead (`hidden_checks_problem`)."""
    problem = hidden_checks_problem(aid, root)
    if problem:
        raise SystemExit(f"error: {problem}") from None


def graded_tests(aid: str, root: Path = ROOT) -> list[tuple[str, float]]:
    """(grade_id, points) of every graded test cell of `aid`, in notebook order (the rows of a self-grade's table)."""
    import nbformat

    rows = []
    for path in sorted((root / "solutions" / aid).glob("*.ipynb")):
        for cell in nbformat.read(str(path), as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
                rows.append((meta["grade_id"], float(meta.get("points", 0))))
    return rows


# What a self-grade needs of the assignment, the same for every notebook graded: its released notebooks, the
# snapshot gradebook nbgrader grades in and the throw-away course's gradebook with the assignment registered.
# Computed once per process (a warm grader keeps it: `twoprim.grading.warm`), keyed by the assignment's files.
_PREPARED: dict[str, tuple[dict[str, str], bytes, bytes]] = {}


def source_digest(aid: str, root: Path) -> str:
    """What a self-grade's preparation of `aid` depends on: its source (solutions/) and nbgrader's configuration;
    not the learner's own notebook in exercises/, which changes with every save (the release is generated from the
    source, into a fresh gradebook)."""
    h = hashlib.sha256(aid.encode())
    for folder in (root / "solutions" / aid,):
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_file() and ".ipynb_checkpoints" not in path.parts:
                h.update(str(path.relative_to(root)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    h.update((root / "grader" / "nbgrader_config.py").read_bytes())
    return h.hexdigest()


def _prepare(aid: str, root: Path, course: Path, url: str) -> tuple[dict, bytes]:
    """(released notebooks, snapshot) for grading in the throw-away `course`, whose gradebook at `url` then has
    the assignment registered (for its feedback): generated by nbgrader on first use, then reused."""
    import nbformat

    key = source_digest(aid, root)
    if key not in _PREPARED:
        init_db(url)
        released = released_notebooks(aid, course, url)
        with tempfile.TemporaryDirectory(prefix="selfgrade-snap-") as tmp:
            snap = snapshot(aid, course, url, Path(tmp)).read_bytes()
        _PREPARED[key] = (
            {n: nbformat.writes(nb) for n, nb in released.items()},
            snap,
            (course / "grader" / "gradebook.db").read_bytes(),
        )
    released, snap, db = _PREPARED[key]
    (course / "grader" / "gradebook.db").write_bytes(db)
    return {n: nbformat.reads(t, as_version=4) for n, t in released.items()}, snap


def _course(aid: str, notebook: Path, root: Path, course: Path) -> None:
    """The throw-away course: the configuration, the assignment's source and release, the notebook submitted."""
    (course / "grader").mkdir()
    shutil.copy(root / "grader" / "nbgrader_config.py", course / "grader")
    shutil.copytree(root / "solutions" / aid, course / "solutions" / aid)
    if (root / "exercises" / aid).is_dir():
        shutil.copytree(root / "exercises" / aid, course / "exercises" / aid)
    target = course / "grader" / "submitted" / "learner" / aid
    target.mkdir(parents=True)
    shutil.copy(notebook, target / f"{aid}.ipynb")
    (target / "timestamp.txt").write_text(time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime()))


def selfgrade(
    aid: str, *, notebook: Path | None = None, root: Path = ROOT, on_cell=None, on_result=None, dry: bool = False
) -> SelfGrade:
    """Grade a learner's own notebook of `aid` exactly as autograde grades a submission (the same task,
    `grade_task`, sandboxed, verdicts judged here), hidden checks included, in a throw-away course; write the
    feedback HTML to grader/selfgrade/<aid>.html. `on_cell(cell, "start" | "end")` is told of every cell nbgrader
    runs; `on_result(SelfGrade)` gets the result as soon as it is known, before the feedback is written. `dry`:
    the released notebook as it is handed out, graded the same way to warm what grading `aid` needs (a warm
    grader preparing it, `twoprim.grading.warm`); nothing is saved or written."""
    require_hidden_checks(aid, root)
    notebook = Path(notebook) if notebook else root / ("solutions" if dry else "exercises") / aid / f"{aid}.ipynb"
    if not notebook.is_file():
        raise SystemExit(f"error: {notebook} does not exist; pass the notebook you worked in with --notebook PATH")
    with tempfile.TemporaryDirectory(prefix=f"selfgrade-{aid}-") as tmp:
        course = Path(tmp)
        _course(aid, notebook, root, course)
        url = f"sqlite:///{course / 'grader' / 'gradebook.db'}"  # its own gradebook, whatever TWOPRIM_DB names
        released, snap = _prepare(aid, root, course, url)
        if dry:  # the blank release in place of the notebook: what a learner starts from, no answer run
            import nbformat

            for name, nb in released.items():
                nbformat.write(nb, str(course / "grader" / "submitted" / "learner" / aid / f"{name}.ipynb"))
        files, refused = read_submission(aid, "learner", course)
        # the learner's own code: isolated where possible, never held by the audit
        task = make_task(
            aid,
            "learner",
            files,
            root=course,
            released=released,
            trusted=True,
            unisolated=sandbox.missing() is not None,
            refused=refused,
        )
        with watching_cells(on_cell):
            outcome = grade_task(task, snap)
            for _ in range(MAX_ATTEMPTS - 1):  # a fault of the grader is tried again, as autograde does
                if outcome.status != NOT_GRADED:
                    break
                outcome = grade_task(task, snap)
        autograded, outcome.autograded = outcome.autograded, {}
        result = SelfGrade(aid, outcome, None)
        if dry:
            return result
        result.save(root / "grader" / "selfgrade" / f"{aid}.json", notebook)
        if on_result is not None:
            on_result(result)
        if outcome.status == "graded":
            result.feedback = _feedback(aid, outcome, autograded, root, course, url)
        return result


def _feedback(aid: str, outcome: Outcome, autograded: dict, root: Path, course: Path, url: str) -> Path | None:
    """The feedback HTML of a graded self-grade, copied to grader/selfgrade/<aid>.html (None if nbgrader made none)."""
    outcome.autograded = autograded
    try:
        merge(aid, outcome, course, url)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            generate_feedback(aid, "learner", root=course, db_url=url)
    finally:
        outcome.autograded = {}
    html = course / "grader" / "feedback" / "learner" / aid / f"{aid}.html"
    if not html.is_file():
        return None
    feedback = root / "grader" / "selfgrade" / f"{aid}.html"
    feedback.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(html, feedback)
    return feedback
