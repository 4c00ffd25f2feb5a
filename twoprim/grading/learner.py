"""A learner grading their own notebook exactly as an instructor's autograde would, hidden checks included, in a
throw-away course; the result is saved for `./course progress` and the feedback HTML kept."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from twoprim.grading import sandbox
from twoprim.grading.nbgrader_cli import generate_feedback
from twoprim.core.notebooks import ROOT, assignments
from twoprim.grading.reports import number
from twoprim.grading.submission import Outcome
from twoprim.grading.cluster import autograde

__all__ = ["SelfGrade", "selfgrade"]


@dataclass
class SelfGrade:
    assignment: str
    outcome: Outcome
    feedback: Path | None

    def describe(self) -> str:
        o = self.outcome
        if o.status != "graded":
            return f"{self.assignment}: could not be graded: {o.reason}"
        notes = [n for n in (o.reason or "").split("; ") if n and n != "all cells ran"]
        errors = [n for n in notes if n.startswith("error in ")]
        lines = [f"{self.assignment}: {number(o.score)} / {number(o.max_score)} points, hidden checks included "
                 f"(the score an instructor's autograde gives this notebook)"]
        for note in errors:  # what every later check failed because of: said first, in the words of the error
            lines.append(f"  ✘ {note}")
        if errors:
            lines.append("    fix this first: the checks that need what that cell defines fail because of it, not "
                         "because of your answers (\"no result came back\" below)")
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
        record = {"assignment": self.assignment, "notebook": str(notebook), "status": o.status, "reason": o.reason,
                  "score": o.score, "max_score": o.max_score,
                  "graded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "tests": {gid: score for (_, gid), score in sorted(o.grades.items())
                            if not gid.endswith("-solution")}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n")


def require_hidden_checks(aid: str, root: Path = ROOT) -> None:
    """Self-grading runs `aid`'s hidden checks (solutions/<aid>/): a copy of the course without them, or an account
    that cannot read them (a student on the classroom hub), is told to submit instead."""
    hidden = root / "solutions" / aid / f"{aid}.ipynb"
    try:
        hidden.open("rb").close()
    except OSError as err:
        if not isinstance(err, PermissionError) and assignments(root):
            return  # not one of this course's assignments (a typo): the caller names the ones there are
        why = ("this account cannot read it (on the classroom hub only the instructor can)"
               if isinstance(err, PermissionError) else "this copy of the course has none (a class's copy, given "
                                                        "to students without the hidden checks)")
        raise SystemExit(f"error: self-grading runs the hidden checks in {hidden}, and {why}. Submit {aid} instead "
                         f"(the Assignments tab on the classroom hub): the instructor's grading runs them, and its "
                         f"feedback comes back to you. The visible checks in your notebook need nothing more.") from None


def selfgrade(aid: str, *, notebook: Path | None = None, root: Path = ROOT) -> SelfGrade:
    """Grade a learner's own notebook of `aid` exactly as autograde grades a submission, hidden checks included,
    in a throw-away course; write the feedback HTML to grader/selfgrade/<aid>.html."""
    require_hidden_checks(aid, root)
    notebook = Path(notebook) if notebook else root / "exercises" / aid / f"{aid}.ipynb"
    if not notebook.is_file():
        raise SystemExit(f"error: {notebook} does not exist; pass the notebook you worked in with --notebook PATH")
    with tempfile.TemporaryDirectory(prefix=f"selfgrade-{aid}-") as tmp:
        course = Path(tmp)
        (course / "grader").mkdir()
        shutil.copy(root / "grader" / "nbgrader_config.py", course / "grader")
        shutil.copytree(root / "solutions" / aid, course / "solutions" / aid)
        if (root / "exercises" / aid).is_dir():
            shutil.copytree(root / "exercises" / aid, course / "exercises" / aid)
        target = course / "grader" / "submitted" / "learner" / aid
        target.mkdir(parents=True)
        shutil.copy(notebook, target / f"{aid}.ipynb")

        (target / "timestamp.txt").write_text(time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime()))
        # the learner's own code: isolated where possible, never held by the audit; graded into the throw-away
        # course's own SQLite gradebook, whatever TWOPRIM_DB names
        [outcome] = autograde(aid, root=course, progress=False, unisolated=sandbox.missing() is not None,
                              trust=["learner"], db=f"sqlite:///{course / 'grader' / 'gradebook.db'}", force=True,
                              in_process=True)
        feedback = None
        if outcome.status == "graded":
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                generate_feedback(aid, "learner", root=course, db_url=f"sqlite:///{course / 'grader' / 'gradebook.db'}")
            html = course / "grader" / "feedback" / "learner" / aid / f"{aid}.html"
            if html.is_file():
                feedback = root / "grader" / "selfgrade" / f"{aid}.html"
                feedback.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(html, feedback)
        outcome.autograded = {}
        result = SelfGrade(aid, outcome, feedback)
        result.save(root / "grader" / "selfgrade" / f"{aid}.json", notebook)
        return result
