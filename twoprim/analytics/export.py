"""`./course export ASSIGNMENT[=CANVAS_ID]... --roster ROSTER [--canvas]`: grades out to the LMS (instructor side).

The scores are the course's reports' (`./course report`, from the gradebook): after the late penalty, with every
extension applied. A submission the grader could not grade, or held for review, is exported blank, never as a 0,
and listed; so is a roster student with no submission.

The roster is a CSV with a column `id` (the course's student id, as in grader/submitted/) and, for Canvas, the
columns of Canvas's own gradebook export: `name` ("Last, First"), `canvas_id`, `sis_user_id`, `sis_login_id`,
`section`. `--canvas` writes Canvas's gradebook import format (Canvas Community, "How do I import grades in the
Gradebook?"): the columns Student, ID, SIS User ID, SIS Login ID, Section, then one per assignment named
`name (canvas_id)`, then a "Points Possible" row. Without `--canvas`: a plain CSV (student id, then one column per
assignment) for any other LMS or spreadsheet.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from twoprim.grading.nbgrader_cli import CourseError

__all__ = ["CANVAS_COLUMNS", "Export", "parse_assignments", "read_roster", "export"]

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
ROSTER_CANVAS = {"Student": "name", "ID": "canvas_id", "SIS User ID": "sis_user_id",
                 "SIS Login ID": "sis_login_id", "Section": "section"}


@dataclass
class Export:
    """What an export wrote: the file, how many students, and who is blank or left out, and why."""

    path: Path
    rows: int
    notes: list[str] = field(default_factory=list)  # who is blank or left out, and why

    def describe(self) -> str:
        lines = [f"wrote {self.path}: {self.rows} student(s)"]
        if self.notes:
            lines.append(f"{len(self.notes)} to look at:")
            lines += [f"  {n}" for n in self.notes]
        return "\n".join(lines)


def parse_assignments(specs: list[str], known: list[str], *, canvas: bool) -> dict[str, str]:
    """'ex01_dot=1234' -> {'ex01_dot': '1234'}; the Canvas id is required with --canvas."""
    out = {}
    for spec in specs:
        aid, _, canvas_id = spec.partition("=")
        if aid not in known:
            raise CourseError(f"no assignment {aid!r}; known: {', '.join(known)}.")
        if canvas and not canvas_id.strip().isdigit():
            raise CourseError(f"{spec!r}: Canvas needs each assignment's numeric id, as in its gradebook export's "
                              f"column 'Assignment name (id)': write {aid}=ID")
        out[aid] = canvas_id.strip()
    return out


def read_roster(path: Path, *, canvas: bool) -> list[dict[str, str]]:
    """The roster's rows (a CSV with `id`, and Canvas's columns with `canvas`), refused with what is missing."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
            fields = [c.strip() for c in (rows[0].keys() if rows else [])]
    except OSError as err:
        raise CourseError(f"cannot read the roster {path}: {err.strerror}; give --roster a CSV with a column `id`")
    need = ["id", *(ROSTER_CANVAS.values() if canvas else ())]
    missing = [c for c in need if c not in fields]
    if not rows or missing:
        raise CourseError(f"the roster {path} has no {', '.join(f'`{c}`' for c in missing) or 'rows'} column"
                          f"{'s' if len(missing) > 1 else ''}; it needs {', '.join(need)} (one row per student)")
    seen = set()
    for row in rows:
        sid = row["id"].strip()
        if sid in seen:
            raise CourseError(f"the roster {path} lists {sid!r} twice")
        seen.add(sid)
    return [{k.strip(): (v or "").strip() for k, v in row.items()} for row in rows]


def _scores(aid: str, root: Path, url: str) -> tuple[dict[str, dict], float]:
    """student -> their report row for `aid` (score after the late penalty, status), and the maximum score."""
    from twoprim.grading import write_reports

    write_reports(aid, root=root, url=url)
    with open(root / "grader" / "reports" / f"{aid}.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    top = max((float(r["max_score"]) for r in rows.values() if r.get("max_score")), default=0.0)
    return rows, top


def export(assignments: dict[str, str], roster_path: Path, *, root: Path, url: str, canvas: bool,
           out: Path | None = None) -> Export:
    """Every student of the roster with their score on each assignment, written as a CSV (Canvas's import format with
    `canvas`)."""
    roster = read_roster(roster_path, canvas=canvas)
    results = {aid: _scores(aid, root, url) for aid in assignments}
    notes: list[str] = []
    enrolled = {r["id"] for r in roster}
    for aid, (rows, _) in results.items():
        for student in sorted(set(rows) - enrolled):
            notes.append(f"{student} has a submission of {aid} but is not in the roster: not exported "
                         f"(add them to {roster_path.name} if they belong to the class)")
    columns = [f"{aid} ({cid})" if canvas else aid for aid, cid in assignments.items()]
    out = out or root / "grader" / "reports" / f"export-{'canvas' if canvas else 'grades'}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*CANVAS_COLUMNS, *columns] if canvas else ["student", *columns])
        if canvas:
            writer.writerow(["Points Possible", "", "", "", "",
                             *(f"{results[aid][1]:g}" for aid in assignments)])
        for person in roster:
            sid = person["id"]
            cells = []
            for aid in assignments:
                row = results[aid][0].get(sid)
                if row is None:
                    cells.append("")
                    notes.append(f"{sid}: no submission of {aid}: left blank")
                elif row["status"] in ("graded", "failed") and row["score"] != "":
                    cells.append(row["score"])
                else:
                    cells.append("")
                    notes.append(f"{sid}: {aid} is {row['status']} ({row['reason']}): left blank, not 0")
            head = [person[ROSTER_CANVAS[c]] for c in CANVAS_COLUMNS] if canvas else [sid]
            writer.writerow([*head, *cells])
    return Export(out, len(roster), notes)
