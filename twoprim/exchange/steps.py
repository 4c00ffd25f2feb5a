"""The class's steps through the exchange, as `./course release`, `collect` and `extend` take them: a release with
its due date (written where students read it), a collect that says who is late, one student's extended deadline.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from twoprim.config import ROOT
from twoprim.core.errors import CourseError
from twoprim.grading.nbgrader_cli import nbgrader

__all__ = ["due_date", "extend", "exchange_root", "release", "collect", "collected"]


def due_date(text: str, flag: str = "--due"):
    """A due date with its time zone ("2026-12-09 23:59 UTC", "2026-12-09 23:59 Europe/Berlin", ISO 8601 or
    "... +0100" with an offset) as nbgrader stores it: naive UTC. Without a zone it is refused: nbgrader would read
    it as UTC."""
    import dateutil.parser
    import dateutil.tz

    example = f"e.g. {flag} '2026-12-09 23:59 Europe/Berlin' or {flag} '2026-12-09T23:59:00+01:00'"
    parts = text.split()
    try:
        if len(parts) == 3 and not parts[2].lstrip("+-").isdigit():  # a named zone: nbgrader's own format
            zone = dateutil.tz.gettz(parts[2])
            if zone is None:
                raise CourseError(f"{flag} {text!r}: {parts[2]!r} is not a time zone: {example}")
            when = dateutil.parser.parse(" ".join(parts[:2])).replace(tzinfo=zone)
        else:
            when = dateutil.parser.parse(text)
    except (ValueError, OverflowError) as err:
        raise CourseError(f"{flag} {text!r} is not a date and time ({err}): {example}") from err
    offset = when.utcoffset()
    if offset is None:  # naive: no time zone (or one that gives no offset)
        raise CourseError(f"{flag} {text!r} has no time zone, and a deadline must say which: {example}")
    return (when - offset).replace(tzinfo=None)


def extend(aid: str, student: str, until: str | None, *, root: Path = ROOT, db: str | None = None) -> str:
    """Let `student` submit `aid` until `until` (a date with its zone; None takes it back); what was done, in words.
    The student must be known: in the gradebook, in grader/submitted/, or in the classroom's roster."""
    import json

    from twoprim.grading.gradebook import database_url, gradebook, grant_extension, submitted_students

    url = database_url(root, db)
    when = due_date(until, flag="--until") if until is not None else None
    try:
        roster = json.loads((root / "grader" / "classroom.json").read_text()).get("students", [])
    except (OSError, ValueError, AttributeError):
        roster = []
    with gradebook(url) as gb:
        known = {s.id for s in gb.students} | set(submitted_students(aid, root)) | set(roster)
    if student not in known:
        raise CourseError(
            f"no student {student!r} in the gradebook, grader/submitted/ or the classroom's roster; "
            f"known: {', '.join(sorted(known)) or 'none yet'}"
        )
    due = grant_extension(aid, student, when, root, url)
    if when is None:
        return f"{student}'s extension of {aid} is taken back: due {due:%Y-%m-%d %H:%M} UTC, as for everyone"
    from twoprim.learner.deadlines import span

    return (
        f"{student} may submit {aid} until {when:%Y-%m-%d %H:%M} UTC ({span((when - due).total_seconds())} after "
        f"its due date, {due:%Y-%m-%d %H:%M} UTC); their late penalty follows it from now on"
    )


def exchange_root(root: Path = ROOT) -> Path:
    """The exchange the course's nbgrader configuration names ($TWOPRIM_EXCHANGE, the classroom's, or nbgrader's)."""
    from traitlets.config.loader import PyFileConfigLoader

    return Path(PyFileConfigLoader("nbgrader_config.py", path=str(root / "grader")).load_config().Exchange.root)


def release(aid: str, *, root: Path = ROOT, due: str | None = None):
    """Copy the student version of `aid` to the exchange, for students to fetch; `due`: its due date, recorded in
    the gradebook (submissions after it are late: the report says by how long, and nbgrader's late-submission
    plugin, if configured, sets the penalty). The gradebook's due date (from `due`, or set in the formgrader) is
    also written where students can read it (`twoprim.learner.deadlines`); returns it (naive UTC), or None."""
    from twoprim.grading.gradebook import database_url, gradebook, released_notebooks

    if due is not None:
        when = due_date(due)
        url = database_url(root)
        released_notebooks(aid, root, url)  # the assignment registered in the gradebook
        with gradebook(url) as gb:
            gb.update_or_create_assignment(aid, duedate=when)
    nbgrader(["release_assignment", aid, "--force"], root=root, capture=True, timeout=300)
    _seal_inbound(exchange_root(root))
    return _publish_due_date(aid, root)


def _seal_inbound(exchange: Path) -> None:
    """The sticky and set-group-ID bits on the exchange's inbound folder (nbgrader makes it 0733, writable by every
    student): a student may still hand in, but only the owner of a submission may rename or delete it (sticky), and
    each submission's folder belongs to the inbound folder's group, the instructor's (set-group-ID), so the course's
    submit (`filesystem.ExchangeSubmit`) can make it readable by the instructor and no other student."""
    import stat

    from twoprim.config import COURSE_ID

    inbound = exchange / COURSE_ID / "inbound"
    with contextlib.suppress(OSError):
        st = inbound.lstat()
        bits = stat.S_ISVTX | stat.S_ISGID
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & bits != bits:
            inbound.chmod(stat.S_IMODE(st.st_mode) | bits)


def collect(aid: str, *, root: Path = ROOT) -> str:
    """Take every student's newest submission of `aid` from the exchange into grader/submitted/, trusting only
    what the exchange observed (who made it, when it arrived: `twoprim.exchange`); what was taken in, set aside
    and flagged, then what is there now and who submitted after the due date (`collected`). A due date changed in
    the formgrader since the release reaches the students' deadlines file here too."""
    from twoprim.exchange import client, filesystem, intake

    refused: list[dict] = []
    if client.uses_service(root):  # the classroom's exchange service: the hub said who sent each one
        submissions, set_aside = client.collect_from_service(aid, root), []
        refused = client.refused_in_service(aid, root)  # over a quota or a limit: the service recorded each
    else:
        submissions, set_aside = filesystem.gather(aid, exchange_root(root))
    report = intake.admit(aid, submissions, set_aside, root=root, refused=refused)
    _publish_due_date(aid, root)
    return f"{report}\n{collected(aid, root=root)}"


def _publish_due_date(aid: str, root: Path):
    """Write `aid`'s due date in the gradebook where students read it (`twoprim.learner.deadlines`), or take it out
    when it has none; returns it."""
    from twoprim.exchange.client import uses_service
    from twoprim.grading.gradebook import database_url
    from twoprim.grading.gradebook import due_date as due_in_gradebook
    from twoprim.learner import deadlines

    when = due_in_gradebook(aid, database_url(root))
    if uses_service(root):  # the classroom's exchange service reads it from the gradebook at each request
        return when
    exchange = exchange_root(root)
    if deadlines.read(exchange).get(aid) != when:
        deadlines.publish(exchange, aid, when)
    return when


def collected(aid: str, *, root: Path = ROOT) -> str:
    """'3 submission(s) of ex01_dot in grader/submitted/; due ... UTC: 1 late (bob 3 h 0 min 9 s); alice's extension
    runs to ...': from each submission's timestamp.txt (lateness to the second), the gradebook's due date and the
    extensions (`./course extend`)."""
    from nbgrader.utils import parse_utc

    from twoprim.grading.gradebook import database_url, extensions, submitted_students
    from twoprim.grading.gradebook import due_date as due_in_gradebook
    from twoprim.learner.deadlines import span

    students = submitted_students(aid, root)
    line = f"{len(students)} submission(s) of {aid} in grader/submitted/"
    due = due_in_gradebook(aid, database_url(root))
    if due is None:
        return f"{line} (no due date)"
    extended = extensions(aid, database_url(root))
    late, unknown = [], []
    for student in students:
        try:
            at = parse_utc((root / "grader" / "submitted" / student / aid / "timestamp.txt").read_text().strip())
        except (OSError, ValueError, OverflowError):
            unknown.append(student)
            continue
        theirs = max(due, extended.get(student, due))
        if at > theirs:
            late.append(f"{student} {span((at - theirs).total_seconds(), exact=True)}")
    parts = [f"{len(late)} late" + (f" ({', '.join(late)})" if late else "")]
    parts += [f"{s}'s extension runs to {extended[s]:%Y-%m-%d %H:%M} UTC" for s in students if s in extended]
    if unknown:
        parts.append(f"no readable submission time: {', '.join(unknown)}")
    return f"{line}; due {due:%Y-%m-%d %H:%M} UTC: " + "; ".join(parts)
