"""`./course feedback`: each graded student's feedback HTML, generated and released to the exchange one student at a
time, so that one odd submission never stops the class. Every graded submission gets its feedback generated: one with
no readable timestamp.txt (a folder placed by hand) is released under the time its notebook reached
grader/submitted/; one without a usable submission_secret.txt, the key by which the exchange matches feedback to
the student's submission, has its feedback generated in grader/feedback/ and is listed for the instructor to hand
over. Only a submission with no grade (failed, held, not graded, not yet graded) has no feedback, listed with why."""

from __future__ import annotations

import contextlib
import datetime
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

from twoprim.config import ROOT
from twoprim.grading.gradebook import NotRegularFile, database_url, read_regular, statuses, submitted_students

__all__ = ["Released", "release_feedback"]


@dataclass
class Released:
    """What `./course feedback` did: the students whose feedback was released (with a note where it took one), those
    whose feedback was generated but cannot go through the exchange (why), and those who have none (why)."""

    assignment: str
    released: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)  # student -> why no feedback was generated
    generated: dict[str, str] = field(default_factory=dict)  # student -> why their generated feedback was not released
    notes: dict[str, str] = field(default_factory=dict)  # student -> what their released feedback took

    def describe(self) -> str:
        lines = [
            f"feedback for {self.assignment} released to {len(self.released)} student(s) through the exchange "
            f"(HTML in grader/feedback/)"
        ]
        lines += [f"  {student}: {note}" for student, note in sorted(self.notes.items())]
        if self.generated:
            lines.append(
                f"generated but not released through the exchange for {len(self.generated)} (hand it to them yourself):"
            )
            lines += [f"  {student}: {why}" for student, why in sorted(self.generated.items())]
        if self.held:
            lines.append(f"no feedback for {len(self.held)}:")
            lines += [f"  {student}: {why}" for student, why in sorted(self.held.items())]
        return "\n".join(lines)


def _last_error(result: dict) -> str:
    text = "\n".join(filter(None, [result.get("error", ""), result.get("log", "")]))
    errors = [
        line.split("]", 1)[-1].strip()
        for line in text.splitlines()
        if "ERROR" in line or "Error" in line or "error" in line
    ]
    return (errors[-1] if errors else " ".join(text.split())[-200:] or "no reason given")[:300]


def _why_not(aid: str, student: str, row: dict | None, root: Path) -> str | None:
    """Why `student` has no feedback on `aid` to generate (no grade), or None."""
    if row is None:
        return "not graded yet: run ./course autograde first"
    if row["status"] != "graded":
        return f"{row['status']} in grading, so there is no feedback to give (the report says why)"
    autograded = root / "grader" / "autograded" / student / aid
    if not autograded.is_dir() or not any(autograded.glob("*.ipynb")):
        return f"no autograded notebook in grader/autograded/{student}/{aid}/: grade it again with --student {student}"
    return None


def _unmatchable(aid: str, student: str, root: Path) -> str | None:
    """Why the exchange cannot match `student`'s feedback to their submission (its submission_secret.txt), or None."""
    autograded = root / "grader" / "autograded" / student / aid
    submitted = f"grader/submitted/{student}/{aid}/"
    try:
        secret = read_regular(autograded / "submission_secret.txt")
    except FileNotFoundError:
        return (
            f"no submission_secret.txt in {submitted} (nbgrader submit writes it; a folder placed by hand has "
            f"none), and the exchange finds a student's feedback by it"
        )
    except (NotRegularFile, OSError) as err:
        return (
            f"submission_secret.txt of {submitted} is unreadable ({err}), "
            "and the exchange finds a student's feedback by it"
        )
    try:
        if not secret.decode("utf-8").strip():
            return f"submission_secret.txt in {submitted} is empty, and the exchange finds a student's feedback by it"
    except UnicodeDecodeError as err:
        return (
            f"submission_secret.txt in {submitted} is not text (byte {err.start}: {err.reason}), and the exchange "
            f"finds a student's feedback by it"
        )
    return None


def _arrival(aid: str, student: str, root: Path) -> str | None:
    """A note when `student`'s submission has no readable time (timestamp.txt), after writing one into their
    feedback folder (nbgrader's release reads it): the time its notebook reached grader/submitted/."""
    from nbgrader.utils import parse_utc

    feedback = root / "grader" / "feedback" / student / aid
    try:
        parse_utc(read_regular(feedback / "timestamp.txt").decode("utf-8").strip())
        return None
    except Exception:  # noqa: BLE001 - missing, not a regular file, not text or not a time: written below
        pass
    folder = root / "grader" / "submitted" / student / aid
    times = [os.lstat(p).st_ctime for p in folder.glob("*.ipynb") if not p.is_symlink()] if folder.is_dir() else []
    when = datetime.datetime.fromtimestamp(min(times) if times else os.lstat(feedback).st_ctime, datetime.UTC)
    stamp = when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    (feedback / "timestamp.txt").unlink(missing_ok=True)
    (feedback / "timestamp.txt").write_text(stamp)
    return (
        f"its timestamp.txt in grader/submitted/{student}/{aid}/ is missing or unreadable: released under the "
        f"time its notebook reached grader/submitted/, {stamp}"
    )


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
            if why is not None:
                result.held[student] = why
                continue
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                generated = api.generate_feedback(aid, student, force=True)
            if not generated.get("success"):
                result.held[student] = f"nbgrader could not generate the feedback: {_last_error(generated)}"
                continue
            unmatchable = _unmatchable(aid, student, root)
            if unmatchable is not None:
                result.generated[student] = f"{unmatchable}; the feedback is in grader/feedback/{student}/{aid}/"
                continue
            note = _arrival(aid, student, root)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                released = api.release_feedback(aid, student)
            if not released.get("success"):
                result.held[student] = (
                    f"nbgrader could not release the feedback to the exchange: "
                    f"{_last_error(released)}; it is in grader/feedback/{student}/{aid}/"
                )
                continue
            result.released.append(student)
            if note:
                result.notes[student] = note
    finally:
        os.chdir(cwd)
    return result
