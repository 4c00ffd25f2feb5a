"""`./course export ASSIGNMENT[=CANVAS_ID]... --roster ROSTER [--canvas]`: grades out to the LMS (instructor side).

The scores are the course's reports' (`./course report`, from the gradebook): after the late penalty, with every
extension applied. A submission the grader could not grade, or held for review, is exported blank, never as a 0,
and listed; so is a roster student with no submission.

The roster is either of:

- Canvas's own gradebook export, the CSV an instructor downloads from Canvas's gradebook (canvas-lms's
  GradebookExporter): a header `Student` (or `LastName`, `FirstName`), `ID`, `SIS User ID` (when SIS ids are shown),
  `SIS Login ID`, `Section`, then one column per assignment named `Assignment name (id)` and the totals; a second row
  `    Points Possible` (and before it, when an assignment is posted by hand, a `Manual Posting` row); then a row per
  student, Canvas's Test Student last. Comma- or semicolon-separated (Canvas's setting), with or without a byte-order
  mark. The course's student id is read from `SIS Login ID` (`--roster-id` names another column); a row without one
  (the Test Student) is skipped and listed. An assignment given without its Canvas id takes the id of the export's
  column of that name.
- a CSV with a column `id` (the course's student id, as in grader/submitted/) and, for Canvas, the columns `name`
  ("Last, First"), `canvas_id`, `sis_user_id`, `sis_login_id`, `section`.

`--canvas` writes Canvas's gradebook import format (Canvas Community, "How do I import grades in the Gradebook?"): the
columns Student, ID, SIS User ID, SIS Login ID, Section, then one per assignment named `name (canvas_id)`, then a
"Points Possible" row. Without `--canvas`: a plain CSV (student id, then one column per assignment) for any other LMS
or spreadsheet.

Every late submission is listed in the notes with its lateness (from the student's own deadline: `./course extend`)
and the penalty applied, and the notes state the late policy the course's nbgrader configuration sets
(`AssignLatePenalties.plugin_class`, nbgrader's `LateSubmissionPlugin` by default, whose `penalty_method` 'none' keeps
late work's points). The notes are printed and written beside the export (`<export>-notes.txt`): Canvas's import
takes no notes.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from twoprim.core.errors import CourseError

__all__ = [
    "CANVAS_COLUMNS",
    "Export",
    "parse_assignments",
    "read_roster",
    "canvas_assignment_ids",
    "late_policy",
    "lateness",
    "export",
    "ROSTER_ID",
]

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
ROSTER_CANVAS = {
    "Student": "name",
    "ID": "canvas_id",
    "SIS User ID": "sis_user_id",
    "SIS Login ID": "sis_login_id",
    "Section": "section",
}
ROSTER_ID = "SIS Login ID"  # the column of a Canvas gradebook export that holds the course's student id
_CANVAS_HEADER = {"ID", "SIS Login ID", "Section"}  # what every Canvas gradebook export's header has
_ASSIGNMENT_COLUMN = re.compile(r"^(.*) \((\d+)\)$")


@dataclass
class Export:
    """What an export wrote: the file, how many students, and who is blank or left out, and why."""

    path: Path
    rows: int
    notes: list[str] = field(default_factory=list)  # the late policy; who is late, blank or left out, and why
    notes_path: Path | None = None

    def describe(self) -> str:
        lines = [f"wrote {self.path}: {self.rows} student(s)"]
        if self.notes_path is not None:
            lines.append(f"wrote {self.notes_path}: the notes below")
        if self.notes:
            lines.append(f"{len(self.notes)} to look at:")
            lines += [f"  {n}" for n in self.notes]
        return "\n".join(lines)


def parse_assignments(
    specs: list[str], known: list[str], *, canvas: bool, ids: dict[str, str] | None = None
) -> dict[str, str]:
    """'ex01_dot=1234' -> {'ex01_dot': '1234'}; the Canvas id is required with --canvas, unless `ids` (a Canvas
    gradebook export's assignment columns: name -> id) has the assignment."""
    out = {}
    for spec in specs:
        aid, _, canvas_id = spec.partition("=")
        if aid not in known:
            raise CourseError(f"no assignment {aid!r}; known: {', '.join(known)}.")
        if canvas and not canvas_id.strip() and ids and aid in ids:
            canvas_id = ids[aid]
        if canvas and not canvas_id.strip().isdigit():
            raise CourseError(
                f"{spec!r}: Canvas needs each assignment's numeric id, as in its gradebook export's "
                f"column 'Assignment name (id)': write {aid}=ID, or give that export as --roster with a "
                f"column named {aid} (ID)"
            )
        out[aid] = canvas_id.strip()
    return out


def _read_csv(path: Path) -> list[list[str]]:
    """The CSV's rows (a byte-order mark dropped; comma, semicolon or tab as Canvas's setting makes it)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            text = f.read()
    except OSError as err:
        raise CourseError(
            f"cannot read the roster {path}: {err.strerror}; give --roster Canvas's gradebook export "
            f"or a CSV with a column `id`"
        ) from err
    except UnicodeDecodeError as err:
        raise CourseError(
            f"the roster {path} is not UTF-8 text (byte {err.start}): export it from Canvas again, or "
            f"save it as CSV UTF-8"
        ) from err
    first = text.split("\n", 1)[0]
    delimiter = max((",", ";", "\t"), key=first.count)
    return [row for row in csv.reader(text.splitlines(), delimiter=delimiter) if any(c.strip() for c in row)]


def _canvas_name(value: str) -> str:
    """A name as Canvas exports it: one that starts with = is written ="..." (so that a spreadsheet shows it)."""
    m = re.fullmatch(r'="(.*)"', value)
    return m.group(1) if m else value


def canvas_assignment_ids(path: Path) -> dict[str, str]:
    """Assignment name -> Canvas id, from a Canvas gradebook export's columns `name (id)` ({} for another CSV)."""
    rows = _read_csv(path)
    header = [c.strip() for c in rows[0]] if rows else []
    if not set(header) >= _CANVAS_HEADER:
        return {}
    return {m.group(1): m.group(2) for c in header if (m := _ASSIGNMENT_COLUMN.match(c))}


def _canvas_export(path: Path, header: list[str], rows: list[list[str]], id_column: str) -> tuple[list, list]:
    """The students of a Canvas gradebook export, keyed as the course's roster, and the rows skipped (why)."""
    if id_column not in header:
        raise CourseError(
            f"the roster {path} is a Canvas gradebook export without a column {id_column!r} (it has "
            f"{', '.join(header[:6])}, ...): name the column that holds the course's student ids with "
            f"--roster-id"
        )
    people, skipped = [], []
    for row in rows[1:]:
        cell = dict(zip(header, (c.strip() for c in row), strict=False))
        first = (row[0] if row else "").strip()
        if first == "Points Possible" or (not cell.get("ID") and not cell.get(id_column)):
            continue  # the points row, or the Manual Posting row
        name = _canvas_name(
            cell.get("Student") or ", ".join(filter(None, (cell.get("LastName"), cell.get("FirstName"))))
        )
        if not cell.get(id_column):
            skipped.append(
                f"{name or 'a row'} (Canvas ID {cell.get('ID') or '?'}) has no {id_column}: not "
                f"exported (Canvas's Test Student has none)"
            )
            continue
        people.append(
            {
                "id": cell[id_column],
                "name": name,
                "canvas_id": cell.get("ID", ""),
                "sis_user_id": cell.get("SIS User ID", ""),
                "sis_login_id": cell.get("SIS Login ID", ""),
                "section": cell.get("Section", ""),
            }
        )
    return people, skipped


class Roster(list):
    """The roster's students (dicts keyed id, name, canvas_id, sis_user_id, sis_login_id, section) and the rows of a
    Canvas export skipped, with why (`skipped`)."""

    skipped: list[str]
    canvas_export: bool


def read_roster(path: Path, *, canvas: bool, id_column: str = ROSTER_ID) -> Roster:
    """The roster's students: from Canvas's gradebook export (the course's id from `id_column`), or from a CSV with
    `id` (and Canvas's columns with `canvas`); refused with what is missing."""
    rows = _read_csv(path)
    header = [c.strip() for c in rows[0]] if rows else []
    skipped: list[str] = []
    is_canvas = set(header) >= _CANVAS_HEADER and ("Student" in header or "LastName" in header)
    if is_canvas:
        people, skipped = _canvas_export(path, header, rows, id_column)
    else:
        need = ["id", *(ROSTER_CANVAS.values() if canvas else ())]
        missing = [c for c in need if c not in header]
        if len(rows) < 2 or missing:
            raise CourseError(
                f"the roster {path} has no {', '.join(f'`{c}`' for c in missing) or 'rows'} column"
                f"{'s' if len(missing) > 1 else ''}; it needs {', '.join(need)} (one row per student), "
                f"or give Canvas's gradebook export (Grades > Export > Export Entire Gradebook)"
            )
        people = [{k: (v or "").strip() for k, v in zip(header, row, strict=False)} for row in rows[1:]]
    if not people:
        raise CourseError(f"the roster {path} lists no student")
    seen = set()
    for person in people:
        if person["id"] in seen:
            raise CourseError(f"the roster {path} lists {person['id']!r} twice")
        seen.add(person["id"])
    roster = Roster(people)
    roster.skipped, roster.canvas_export = skipped, is_canvas
    return roster


def late_policy(root: Path) -> str:
    """The late policy grader/nbgrader_config.py sets, in words (as `nbgrader autograde`'s AssignLatePenalties and
    the course's gradebook apply it)."""
    from nbgrader.preprocessors import AssignLatePenalties
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root / "grader")).load_config()
    assigner = AssignLatePenalties(config=config)
    assigner.init_plugin()
    plugin = assigner.plugin_inst
    name = f"{type(plugin).__module__}.{type(plugin).__qualname__}"
    method = getattr(plugin, "penalty_method", None)
    where = "grader/nbgrader_config.py"
    if name == "nbgrader.plugins.latesubmission.LateSubmissionPlugin" and method == "none":
        return (
            f"late policy: none (nbgrader's LateSubmissionPlugin, penalty_method 'none', the default): a late "
            f"submission keeps all its points; c.LateSubmissionPlugin.penalty_method = 'zero' in {where} scores "
            f"it 0, c.AssignLatePenalties.plugin_class names a plugin of your own"
        )
    if name == "nbgrader.plugins.latesubmission.LateSubmissionPlugin" and method == "zero":
        return (
            f"late policy: zero (nbgrader's LateSubmissionPlugin, penalty_method 'zero', set in {where}): a late "
            f"submission scores 0"
        )
    return (
        f"late policy: {name} (c.AssignLatePenalties.plugin_class in {where})"
        + (f", penalty_method {method!r}" if method else "")
        + ": the penalties below are the ones it gave"
    )


def lateness(seconds: float) -> str:
    """'2 h 31 min', '3 d 4 h', '45 s': how late, in words a person reads."""
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{days} d" if days else "",
        f"{hours} h" if hours else "",
        f"{minutes} min" if minutes and not days else "",
        f"{secs} s" if seconds < 60 else "",
    ]
    return " ".join(p for p in parts if p) or "0 s"


def _scores(aid: str, root: Path, url: str) -> tuple[dict[str, dict], float]:
    """student -> their report row for `aid` (score after the late penalty, status), and the maximum score."""
    from twoprim.grading import write_reports

    write_reports(aid, root=root, url=url)
    with open(root / "grader" / "reports" / f"{aid}.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    top = max((float(r["max_score"]) for r in rows.values() if r.get("max_score")), default=0.0)
    return rows, top


def _cell(sid: str, aid: str, row: dict | None, notes: list[str]) -> str:
    """The score exported for `sid` on `aid` ("" when there is none to give, with a note why)."""
    if row is None:
        notes.append(f"{sid}: no submission of {aid}: left blank")
        return ""
    if row["status"] in ("graded", "failed") and row["score"] != "":
        late = float(row.get("seconds_late") or 0)
        if late > 0:
            penalty = float(row.get("late_penalty") or 0)
            notes.append(
                f"{sid}: {aid} submitted {lateness(late)} late ({late:.0f} s after their deadline); late "
                f"penalty {penalty:g} of {row['max_score']} points applied: {row['score']} exported"
            )
        return row["score"]
    notes.append(f"{sid}: {aid} is {row['status']} ({row['reason']}): left blank, not 0")
    return ""


def export(
    assignments: dict[str, str],
    roster_path: Path,
    *,
    root: Path,
    url: str,
    canvas: bool,
    out: Path | None = None,
    id_column: str = ROSTER_ID,
) -> Export:
    """Every student of the roster with their score on each assignment, written as a CSV (Canvas's import format with
    `canvas`), and its notes beside it: the late policy, who was late and their penalty, who is blank or left out."""
    roster = read_roster(roster_path, canvas=canvas, id_column=id_column)
    results = {aid: _scores(aid, root, url) for aid in assignments}
    notes: list[str] = [late_policy(root), *roster.skipped]
    enrolled = {r["id"] for r in roster}
    for aid, (rows, _) in results.items():
        for student in sorted(set(rows) - enrolled):
            notes.append(
                f"{student} has a submission of {aid} but is not in the roster: not exported "
                f"(add them to {roster_path.name} if they belong to the class)"
            )
    columns = [f"{aid} ({cid})" if canvas else aid for aid, cid in assignments.items()]
    out = out or root / "grader" / "reports" / f"export-{'canvas' if canvas else 'grades'}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*CANVAS_COLUMNS, *columns] if canvas else ["student", *columns])
        if canvas:
            writer.writerow(["Points Possible", "", "", "", "", *(f"{results[aid][1]:g}" for aid in assignments)])
        for person in roster:
            sid = person["id"]
            cells = [_cell(sid, aid, results[aid][0].get(sid), notes) for aid in assignments]
            head = [person.get(ROSTER_CANVAS[c], "") for c in CANVAS_COLUMNS] if canvas else [sid]
            writer.writerow([*head, *cells])
    notes_path = out.with_name(f"{out.stem}-notes.txt")
    notes_path.write_text("\n".join(notes) + "\n", encoding="utf-8")
    return Export(out, len(roster), notes, notes_path)
