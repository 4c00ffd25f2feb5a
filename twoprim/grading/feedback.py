"""`./course feedback`: each graded student's feedback HTML, generated and released to the exchange one student at a
time, so that one odd submission (no submission_secret.txt, an unreadable timestamp.txt, a failed grade) never
stops the class: every student who can get feedback gets it, and the others are listed with the reason."""
from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

from twoprim.core.notebooks import ROOT
from twoprim.grading.gradebook import NotRegularFile, database_url, read_regular, statuses, submitted_students

__all__ = ["Released", "release_feedback"]


@dataclass
class Released:
    """What `./course feedback` did: the students whose feedback was released, and those held with why."""
    assignment: str
    released: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)   # student -> why no feedback was released

    def describe(self) -> str:
        lines = [f"feedback for {self.assignment} released to {len(self.released)} student(s) through the exchange "
                 f"(HTML in grader/feedback/)" + (f"; not released to {len(self.held)}:" if self.held else "")]
        lines += [f"  {student}: {why}" for student, why in sorted(self.held.items())]
        return "\n".join(lines)


def _last_error(result: dict) -> str:
    text = "\n".join(filter(None, [result.get("error", ""), result.get("log", "")]))
    errors = [line.split("]", 1)[-1].strip() for line in text.splitlines()
              if "ERROR" in line or "Error" in line or "error" in line]
    return (errors[-1] if errors else " ".join(text.split())[-200:] or "no reason given")[:300]


def _why_not(aid: str, student: str, row: dict | None, root: Path) -> str | None:
    """Why `student` cannot get feedback on `aid`, or None."""
    from nbgrader.utils import parse_utc

    if row is None:
        return "not graded yet: run ./course autograde first"
    if row["status"] != "graded":
        return f"{row['status']} in grading, so there is no feedback to give (the report says why)"
    autograded = root / "grader" / "autograded" / student / aid
    if not autograded.is_dir() or not any(autograded.glob("*.ipynb")):
        return f"no autograded notebook in grader/autograded/{student}/{aid}/: grade it again with --student {student}"
    submitted = f"grader/submitted/{student}/{aid}/"
    try:
        secret = read_regular(autograded / "submission_secret.txt")
    except FileNotFoundError:
        return (f"no submission_secret.txt in {submitted} (nbgrader submit writes it; a folder placed by hand has "
                f"none): the exchange could not match the feedback to the student's submission. Ask them to submit "
                f"through nbgrader, collect, grade again")
    except (NotRegularFile, OSError) as err:
        return f"submission_secret.txt of {submitted} is unreadable ({err})"
    try:
        if not secret.decode("utf-8").strip():
            return f"submission_secret.txt in {submitted} is empty"
    except UnicodeDecodeError as err:
        return (f"submission_secret.txt in {submitted} is not text (byte {err.start}: {err.reason}): the exchange "
                f"could not match the feedback to the student's submission")
    try:
        stamp = read_regular(autograded / "timestamp.txt").decode("utf-8", "replace")
        parse_utc(stamp.strip())
    except FileNotFoundError:
        return (f"no readable timestamp.txt in {submitted} (missing or not a date): nbgrader releases feedback "
                f"under the submission's time")
    except (NotRegularFile, OSError) as err:
        return f"timestamp.txt of {submitted} is unreadable ({err})"
    except Exception:  # noqa: BLE001 - whatever the parser says, the text is not a time
        return f"timestamp.txt in {submitted} is not a time ({stamp.strip()[:40]!r})"
    return None


def release_feedback(aid: str, *, root: Path = ROOT, db: str | None = None) -> Released:
    """Generate and release the feedback of every graded student of `aid`, each on their own; return who got it
    and, for each of the others, why not."""
    from nbgrader.apps.api import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    url = database_url(root, db)
    rows = statuses(aid, url)
    result = Released(aid)
    grader = root / "grader"
    config = PyFileConfigLoader("nbgrader_config.py", path=str(grader)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = url
    cwd = os.getcwd()
    os.chdir(grader)
    try:
        api = NbGraderAPI(config=config)
        for student in sorted(set(rows) | set(submitted_students(aid, root))):
            why = _why_not(aid, student, rows.get(student), root)
            if why is None:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    generated = api.generate_feedback(aid, student, force=True)
                    released = api.release_feedback(aid, student) if generated.get("success") else None
                if not generated.get("success"):
                    why = f"nbgrader could not generate the feedback: {_last_error(generated)}"
                elif not released.get("success"):
                    why = f"nbgrader could not release the feedback to the exchange: {_last_error(released)}"
            if why is None:
                result.released.append(student)
            else:
                result.held[student] = why
    finally:
        os.chdir(cwd)
    return result
