"""The course gradebook: nbgrader's own schema on SQLite (grader/gradebook.db, the default) or on PostgreSQL
(`--db postgresql://user@host:5432/dbname` or `TWOPRIM_DB`), which many machines can share; nbgrader takes any
SQLAlchemy URL, so the formgrader and every nbgrader command use the same database.

Beside nbgrader's tables the course keeps one of its own, `twoprim_autograde`: for every graded submission the
digest of the files that were graded, its status (graded, failed, flagged) and reason, the worker that graded it
and how long it took. Its row is written in the same transaction as the submission's grades, so a submission is
either committed whole or not at all: a run that stops half way (a database that went away) is finished by running
it again, which grades only what is not committed in its current form.

Only the instructor's process writes the gradebook, one submission per transaction; grading workers never open it
(they get an assignment-only SQLite `snapshot` to run nbgrader in). Credentials never live in a file of the course:
a PostgreSQL URL names the user and host, and libpq finds the password in `PGPASSWORD` or `~/.pgpass`.

Why this module is long: nbgrader's schema on two databases (SQLite and PostgreSQL) with the course's own tables beside
it, and the merges, extensions, late penalties and not-graded records that read and write them, each in one transaction.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

from twoprim.config import COURSE_ID
from twoprim.core.errors import CourseError
from twoprim.grading.nbgrader_cli import generate_assignment, in_process_alembic
from twoprim.grading.submitted import (
    NotRegularFile,
    read_regular,
    read_submission,
    submission_files,
    submitted_students,
)

if TYPE_CHECKING:
    from nbgrader.plugins import LateSubmissionPlugin

__all__ = [
    "DB_ENV",
    "GradebookUnavailable",
    "database_url",
    "display_url",
    "gradebook",
    "init_db",
    "gradebook_path",
    "released_notebooks",
    "submitted_students",
    "submission_files",
    "read_submission",
    "read_regular",
    "NotRegularFile",
    "digest",
    "snapshot",
    "committed",
    "statuses",
    "merge",
    "scratch_gradebooks",
    "create_db",
    "record_not_graded",
    "not_graded",
]

DB_ENV = "TWOPRIM_DB"
TABLE = "twoprim_autograde"
EXTENSIONS = "twoprim_extension"
NOT_GRADED_TABLE = "twoprim_not_graded"
UNTIL = "%Y-%m-%dT%H:%M:%SZ"


class GradebookUnavailable(CourseError):
    """The database cannot be reached (or went away); the message names it and what to do."""


_SCRATCH: list[str] = []  # folders whose SQLite gradebooks are thrown away after the run


def _no_waiting_for_the_disk(connection, _record) -> None:
    """An SQLite gradebook in a scratch folder (the assignment's snapshot, a worker's copy of it) is written without
    syncing to disk: nbgrader commits a few hundred times creating one, and nothing in it outlives the run."""
    import sqlite3

    if not _SCRATCH or not isinstance(connection, sqlite3.Connection):
        return
    path = next((row[2] for row in connection.execute("PRAGMA database_list") if row[1] == "main"), "")
    if path and any(os.path.commonpath([path, folder]) == folder for folder in _SCRATCH):
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("PRAGMA journal_mode = MEMORY")


@contextlib.contextmanager
def scratch_gradebooks(folder: Path) -> Iterator[None]:
    """While inside, SQLite gradebooks under `folder` (throw-away ones) are written without waiting for the disk; the
    course gradebook never is."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _no_waiting_for_the_disk):
        event.listen(Engine, "connect", _no_waiting_for_the_disk)
    entry = os.path.realpath(folder)
    _SCRATCH.append(entry)
    try:
        yield
    finally:
        _SCRATCH.remove(entry)


def gradebook_path(root: Path) -> Path:
    """The default SQLite gradebook; nbgrader shells out to `alembic`, so this environment's bin/ goes on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return root / "grader" / "gradebook.db"


def database_url(root: Path, db: str | None = None) -> str:
    """The gradebook's SQLAlchemy URL: `db`, else $TWOPRIM_DB, else grader/gradebook.db. PostgreSQL URLs are given
    psycopg 3 as their driver (`postgresql://` alone would ask SQLAlchemy for psycopg2)."""
    url = (db or os.environ.get(DB_ENV) or "").strip()
    if not url:
        return f"sqlite:///{gradebook_path(root)}"
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if scheme == "sqlite":
        return url
    raise CourseError(
        f"the gradebook URL {display_url(url)!r} is neither SQLite nor PostgreSQL: pass "
        f"--db postgresql://USER@HOST:5432/DBNAME (the password from PGPASSWORD or ~/.pgpass) or "
        f"sqlite:///PATH, or unset {DB_ENV} to use grader/gradebook.db"
    )


def display_url(url: str) -> str:
    """The URL with any password masked, for messages."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url).replace("postgresql+psycopg://", "postgresql://")


def _createdb_command(url: str) -> str:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return (
        f"createdb -h {u.host or 'localhost'} -p {u.port or 5432}"
        + (f" -U {u.username}" if u.username else "")
        + f" {u.database}"
    )


def _explain(url: str, err: Exception) -> GradebookUnavailable:
    detail = " ".join(str(getattr(err, "orig", None) or err).split())[:300]
    if re.search(r'database ".*" does not exist', detail):
        from sqlalchemy.engine import make_url

        return GradebookUnavailable(
            f"the gradebook's database {make_url(url).database!r} does not exist on "
            f"{display_url(url)} ({detail}). `./course db-init --db URL` creates it when the "
            f"URL's user may create databases; otherwise the server's administrator creates "
            f"it: {_createdb_command(url)}"
        )
    return GradebookUnavailable(
        f"the gradebook at {display_url(url)} cannot be reached ({type(err).__name__}: "
        f"{detail}). Start the database or check the URL; for PostgreSQL the password comes "
        f"from PGPASSWORD or ~/.pgpass, and `./course db-init --db URL` creates the tables"
    )


@contextlib.contextmanager
def gradebook(url: str) -> Iterator:
    """nbgrader's Gradebook on `url`, with a connection problem raised as `GradebookUnavailable`."""
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import DBAPIError, OperationalError

    in_process_alembic()  # a new gradebook's schema revision, without nbgrader's `alembic heads` process
    try:
        gb = Gradebook(url, COURSE_ID)
    except (OperationalError, DBAPIError) as err:
        raise _explain(url, err) from err
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy's autoflush notes in nbgrader's API
            warnings.filterwarnings("ignore", message=".*not in session.*")
            yield gb
    except (OperationalError, DBAPIError) as err:
        raise _explain(url, err) from err
    finally:
        with contextlib.suppress(Exception):
            gb.close()


def _tables():
    """The course's own tables beside nbgrader's: each submission's autograde row, and the extensions granted with
    `./course extend` (until when a student may submit, in UTC; kept apart from nbgrader's submission row, which
    does not exist before the student submits)."""
    from sqlalchemy import Column, Float, MetaData, String, Table, Text

    metadata = MetaData()
    autograde = Table(
        TABLE,
        metadata,
        Column("assignment", String(128), primary_key=True),
        Column("student", String(128), primary_key=True),
        Column("digest", String(64), nullable=False),
        Column("status", String(16), nullable=False),
        Column("reason", Text, nullable=False),
        Column("score", Float),
        Column("max_score", Float),
        Column("seconds", Float),
        Column("worker", String(256)),
        Column("graded_at", String(32)),
    )
    extension = Table(
        EXTENSIONS,
        metadata,
        Column("assignment", String(128), primary_key=True),
        Column("student", String(128), primary_key=True),
        Column("until", String(32), nullable=False),
        Column("granted_at", String(32), nullable=False),
    )
    Table(
        NOT_GRADED_TABLE,
        metadata,  # a submission the grader could not grade (its fault): why, and when
        Column("assignment", String(128), primary_key=True),
        Column("student", String(128), primary_key=True),
        Column("digest", String(64), nullable=False),
        Column("reason", Text, nullable=False),
        Column("at", String(32), nullable=False),
    )
    return autograde, extension


def _table():
    return _tables()[0]


def _not_graded_table():
    return _tables()[0].metadata.tables[NOT_GRADED_TABLE]


def record_not_graded(aid: str, student: str, reason: str, url: str, *, digest_of: str = "") -> None:
    """Note that `student`'s submission of `aid` could not be graded, through a fault of the grader, and why; no
    grade is written or changed (an earlier one stays, with its autograded notebook), and `committed` does not count
    it, so the next run grades it."""
    from sqlalchemy import delete

    table = _not_graded_table()
    with gradebook(url) as gb:
        table.metadata.create_all(gb.engine, tables=[table])
        gb.db.execute(delete(table).where(table.c.assignment == aid, table.c.student == student))
        gb.db.execute(
            table.insert().values(
                assignment=aid,
                student=student,
                digest=digest_of,
                reason=reason,
                at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )
        )
        gb.db.commit()


def not_graded(aid: str, url: str) -> dict[str, dict]:
    """student -> {digest, reason, at} of each submission of `aid` the grader could not grade, and has not since."""
    from sqlalchemy import select

    table = _not_graded_table()
    with gradebook(url) as gb:
        if not gb.engine.dialect.has_table(gb.db.connection(), NOT_GRADED_TABLE):
            return {}
        rows = gb.db.execute(select(table).where(table.c.assignment == aid)).mappings().all()
    return {row["student"]: dict(row) for row in rows}


def init_db(url: str) -> None:
    """Create nbgrader's schema and the course's tables where they are missing (idempotent)."""
    with gradebook(url) as gb:
        _table().metadata.create_all(gb.engine)


def create_db(url: str) -> bool:
    """For a PostgreSQL gradebook, create its database (through the server's `postgres` one, as the URL's user) when
    there is none of that name; True when created. Without the right, an error names the administrator's `createdb`."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError, OperationalError

    u = make_url(url)
    if not u.drivername.startswith("postgresql") or not u.database:
        return False
    engine = create_engine(u.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            if conn.execute(text("select 1 from pg_database where datname = :n"), {"n": u.database}).scalar():
                return False
            conn.execute(text(f'CREATE DATABASE "{u.database.replace(chr(34), chr(34) * 2)}"'))
            return True
    except (OperationalError, DBAPIError) as err:
        detail = " ".join(str(getattr(err, "orig", None) or err).split())[:300]
        if "permission denied" in detail.lower():
            raise GradebookUnavailable(
                f"{u.username or 'this user'} may not create the database {u.database!r} on "
                f"{display_url(url)} ({detail}); the server's administrator creates it, "
                f"owned by {u.username or 'you'}: {_createdb_command(url)} -O "
                f"{u.username or 'USER'}; then run ./course db-init again"
            ) from err
        raise _explain(url, err) from err
    finally:
        engine.dispose()


def released_notebooks(aid: str, root: Path, url: str | None = None) -> dict:
    """The student version of each notebook of `aid`, as the gradebook knows it.

    The assignment is registered in the gradebook first if needed (generated into a scratch folder, leaving
    exercises/ alone); the released notebooks come from exercises/ when it has them, else from that generation.
    """
    import nbformat
    from nbgrader.api import MissingEntry

    url = url or database_url(root)

    def known() -> list[str]:
        with gradebook(url) as gb:
            try:
                return [nb.name for nb in gb.find_assignment(aid).notebooks]
            except MissingEntry:
                return []

    names = known()
    released = root / "exercises" / aid
    with tempfile.TemporaryDirectory() as scratch:
        if not names or not all((released / f"{n}.ipynb").is_file() for n in names):
            _generate(aid, root, url, Path(scratch))
            names, released = known(), Path(scratch) / aid
        return {n: nbformat.read(str(released / f"{n}.ipynb"), as_version=4) for n in names}


def _generate(aid: str, root: Path, url: str, release: Path) -> None:
    """nbgrader generate_assignment `aid` into `release`, registering it in the gradebook at `url`."""
    gradebook_path(root)  # PATH for alembic
    generate_assignment(aid, root=root, release=release, db_url=url)


def snapshot(aid: str, root: Path, url: str, dest: Path) -> Path:
    """An SQLite gradebook holding only assignment `aid` (its notebooks and cells, no student), for workers to run
    nbgrader's autograde in: they never see the course gradebook or any other student's grades."""
    with tempfile.TemporaryDirectory() as scratch:
        db = dest / f"{aid}-snapshot.db"
        db.unlink(missing_ok=True)
        _generate(aid, root, f"sqlite:///{db}", Path(scratch))
    return db


def digest(files: dict[str, bytes], *extra: bytes) -> str:
    """What was graded, as one hash: the submission's files and the assignment's source (`extra`)."""
    h = hashlib.sha256()
    for name, data in sorted(files.items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for data in extra:
        h.update(b"\1" + hashlib.sha256(data).digest())
    return h.hexdigest()


def committed(aid: str, url: str) -> dict[str, str]:
    """student -> digest of the submission committed for `aid` (graded or failed; a flagged one is not done)."""
    from sqlalchemy import select

    init_db(url)
    table = _table()
    with gradebook(url) as gb:
        rows = gb.db.execute(
            select(table.c.student, table.c.digest, table.c.status).where(table.c.assignment == aid)
        ).all()
    return {student: d for student, d, status in rows if status != "flagged"}


def statuses(aid: str, url: str) -> dict[str, dict]:
    """student -> the course's row for their last graded submission of `aid` (status, reason, worker, ...)."""
    from sqlalchemy import select

    table = _table()
    with gradebook(url) as gb:
        if not gb.engine.dialect.has_table(gb.db.connection(), TABLE):
            return {}
        rows = gb.db.execute(select(table).where(table.c.assignment == aid)).mappings().all()
    return {row["student"]: dict(row) for row in rows}


@functools.lru_cache(maxsize=8)
def _late_plugin(config_folder: str) -> LateSubmissionPlugin:
    """The late-submission plugin the course's nbgrader configuration names (`AssignLatePenalties.plugin_class`,
    nbgrader's `LateSubmissionPlugin` by default, whose `penalty_method` is 'none' unless configured)."""
    from nbgrader.plugins import LateSubmissionPlugin
    from nbgrader.preprocessors import AssignLatePenalties
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=config_folder).load_config()
    assigner = AssignLatePenalties(config=config)
    assigner.init_plugin()
    # typed as any BasePlugin; nbgrader itself calls late_submission_penalty on it
    return cast(LateSubmissionPlugin, assigner.plugin_inst)


def late_penalties(gb, sub, root: Path) -> None:
    """Each notebook's late-submission penalty, as `nbgrader autograde`'s `AssignLatePenalties` sets it: from the
    submission's time and the assignment's due date (plus the student's extension) in the course gradebook, by the
    configured plugin, kept between 0 and the notebook's score; None when on time (or no due date)."""
    gb.db.expire(sub)  # the grades were just written: scores are recomputed by the database
    until = _extensions(gb, sub.assignment.name).get(sub.student.id)
    if until is not None:  # the course's extension, against today's due date (one set through nbgrader's API stays)
        due = sub.assignment.duedate
        sub.extension = until - due if due is not None and until > due else None
        gb.db.flush()
        gb.db.expire(sub)
    late = sub.total_seconds_late
    for nb in sub.notebooks:
        gb.db.expire(nb)
        nb.late_submission_penalty = None
        if late > 0:
            penalty = _late_plugin(str(root / "grader")).late_submission_penalty(sub.student.id, nb.score, late)
            if penalty is not None:
                nb.late_submission_penalty = min(max(0.0, penalty), nb.score)


def _extensions(gb, aid: str) -> dict[str, datetime.datetime]:
    """student -> until when they may submit `aid` (naive UTC), from `./course extend`."""
    from sqlalchemy import select

    table = _tables()[1]
    if not gb.engine.dialect.has_table(gb.db.connection(), EXTENSIONS):
        return {}
    rows = gb.db.execute(select(table.c.student, table.c.until).where(table.c.assignment == aid)).all()
    return {student: datetime.datetime.strptime(until, UNTIL) for student, until in rows}


def extensions(aid: str, url: str) -> dict[str, datetime.datetime]:
    """Each student's own deadline for assignment `aid` in the gradebook at `url` (student -> due date, UTC)."""
    with gradebook(url) as gb:
        return _extensions(gb, aid)


def _due(gb, aid: str) -> datetime.datetime | None:
    from nbgrader.api import MissingEntry

    try:
        return gb.find_assignment(aid).duedate
    except MissingEntry:
        return None


def due_date(aid: str, url: str) -> datetime.datetime | None:
    """`aid`'s due date in the gradebook (naive UTC), or None: not set, or the assignment not there yet."""
    with gradebook(url) as gb:
        return _due(gb, aid)


def grant_extension(aid: str, student: str, until: datetime.datetime | None, root: Path, url: str) -> datetime.datetime:
    """Let `student` submit `aid` until `until` (naive UTC; None takes the extension back) and return the due date.
    Refused without a due date, or for an `until` not after it. A grade already written gets its late penalty again
    at once; one graded later gets it when merged."""
    from nbgrader.api import MissingEntry
    from sqlalchemy import delete

    init_db(url)
    table = _tables()[1]
    with gradebook(url) as gb:
        due = _due(gb, aid)
        if due is None:
            raise CourseError(
                f"{aid} has no due date, so there is nothing to extend: give it one with "
                f"./course release {aid} --due 'YYYY-MM-DD HH:MM ZONE'"
            )
        if until is not None and until <= due:
            raise CourseError(
                f"{until:%Y-%m-%d %H:%M} UTC is not after {aid}'s due date, {due:%Y-%m-%d %H:%M} UTC: "
                f"an extension gives more time"
            )
        gb.db.execute(delete(table).where(table.c.assignment == aid, table.c.student == student))
        if until is not None:
            gb.db.execute(
                table.insert().values(
                    assignment=aid,
                    student=student,
                    until=until.strftime(UNTIL),
                    granted_at=time.strftime(UNTIL, time.gmtime()),
                )
            )
        try:
            sub = gb.find_submission(aid, student)
        except MissingEntry:
            sub = None
        if sub is not None:
            if until is None:
                sub.extension = None
                gb.db.flush()  # before late_penalties expires the object, which would drop an unflushed change
            late_penalties(gb, sub, root)
        gb.db.commit()
    return due


def refresh_late_penalties(aid: str, root: Path, url: str) -> None:
    """Every submission's late penalty of `aid` under the current due dates, extensions and policy (one
    transaction, nothing graded again): a deadline moved after grading applies at the next autograde."""
    with gradebook(url) as gb:
        for sub in gb.assignment_submissions(aid):
            late_penalties(gb, sub, root)
        gb.db.commit()


def merge(aid: str, outcome, root: Path, url: str | None = None, *, digest_of: str = "") -> None:
    """Write one outcome: its autograded notebooks into grader/autograded/<student>/<aid>/, then its grades, its
    late penalty (`late_penalties`) and the course's row into the gradebook, in one transaction (idempotent: merging
    again overwrites)."""
    from nbgrader.api import MissingEntry
    from nbgrader.utils import parse_utc
    from sqlalchemy import delete
    from sqlalchemy import delete as _delete

    url = url or database_url(root)
    if outcome.status not in ("graded", "failed", "flagged"):  # NOT_GRADED: the grader's fault, never a grade
        raise ValueError(f"{outcome.student}: an outcome {outcome.status!r} is not merged (record_not_graded)")
    dest = root / "grader" / "autograded" / outcome.student / aid
    _replace_folder(dest, outcome.autograded)
    table = _table()
    with gradebook(url) as gb:
        gb.update_or_create_student(outcome.student)
        try:
            sub = gb.find_submission(aid, outcome.student)
        except MissingEntry:
            sub = gb.add_submission(aid, outcome.student)
        if outcome.timestamp:
            sub.timestamp = parse_utc(outcome.timestamp)
        for nb in sub.notebooks:
            for grade in nb.grades:
                score = outcome.grades.get((nb.name, grade.name))
                grade.auto_score = score if outcome.status == "graded" else 0.0
                grade.needs_manual_grade = outcome.status == "graded" and score is None
            for comment in nb.comments:
                comment.auto_comment = outcome.comments.get((nb.name, comment.name))
        gb.db.flush()
        late_penalties(gb, sub, root)
        gb.db.execute(delete(table).where(table.c.assignment == aid, table.c.student == outcome.student))
        if gb.engine.dialect.has_table(gb.db.connection(), NOT_GRADED_TABLE):
            pending = _not_graded_table()
            gb.db.execute(_delete(pending).where(pending.c.assignment == aid, pending.c.student == outcome.student))
        gb.db.execute(
            table.insert().values(
                assignment=aid,
                student=outcome.student,
                digest=digest_of,
                status=outcome.status,
                reason=outcome.reason,
                score=outcome.score,
                max_score=outcome.max_score,
                seconds=outcome.seconds,
                worker=outcome.worker,
                graded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )
        )
        gb.db.commit()


def _replace_folder(dest: Path, files: dict[str, bytes]) -> None:
    """grader/autograded/<student>/<aid>/ becomes exactly `files` (none: no folder), swapped in whole: the earlier
    folder is removed only once the new one is complete."""
    fresh = dest.with_name(f".{dest.name}.new")
    old = dest.with_name(f".{dest.name}.old")
    for leftover in (fresh, old):
        if leftover.exists():
            shutil.rmtree(leftover)
    if files:
        fresh.mkdir(parents=True)
        for name, data in files.items():
            (fresh / Path(name).name).write_bytes(data)
    if dest.exists():
        dest.rename(old)
    if files:
        fresh.rename(dest)
    if old.exists():
        shutil.rmtree(old)
