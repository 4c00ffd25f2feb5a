"""The classroom's exchange as a JupyterHub service (`./course hub`'s default): students fetch, submit and fetch
feedback over HTTP; the hub says who is asking; the service stamps the time and keeps every byte on its side.

    JupyterHub ── starts ──> python -m twoprim.exchange.service      (as the instructor's account, on loopback)
    a student's server  ── Authorization: token $JUPYTERHUB_API_TOKEN ──>  /services/twoprim-exchange/api/...
                        <── who that token belongs to ── the hub (HubAuth.user_for_token)

Who is asking is the hub user the token belongs to, never a name in the request: `nbgrader submit ex01_dot
--student ann` sent by ben is refused (403), and nothing in a request can name the student a submission is stored
under. The token must carry `access:services!service=twoprim-exchange` (JupyterHub's scope for this service, which
`./course hub` grants every user and puts in each server's token). Only the instructor (the names given with
--instructor) may release, list the class, collect and release feedback; a student sees released assignments,
their own submissions and the feedback on their own submissions.

Where it keeps what (`Store`, in the folder `grader/exchange/` of the classroom):

    exchange.sqlite  released     every release of an assignment (a new row each time; the newest is fetched)
                     submissions  one row per submission, never updated or deleted: id, student (the hub's name),
                                  arrival (the service's clock, naive UTC), the notebook secret nbgrader writes, the
                                  student's own timestamp.txt, its size and file names
                     feedback     the feedback HTML of a submission (the instructor's latest release of it)
                     refusals     every submission the service refused, whose and why (collect lists them)
    submissions/<id>.tar          the bytes of each submission, as the tar it arrived in
    incoming/                     uploads arriving (streamed to disk, never held in memory), removed once stored

Quotas: per student and assignment at most `max_submissions` submissions (default 50) and `max_stored` bytes
(default 500 MB). Every upload is written to incoming/ as it arrives, 64 KiB at a time, and cut off (its partial
file removed) the moment it passes what the student may still store; the refusal names the limit, and is recorded.
Every submission is kept (none is pruned): it is the record of what was handed in and when, and the quotas bound
it. The service sets its own address-space limit at start (`--memory-mb`, RLIMIT_AS, default 512 MiB): it streams
every upload and download, so it holds about 110 MiB (its address space peaked at 289 MiB while three 400 MB
uploads arrived, tests/test_exchange_service.py), and a fault that made it hold an upload whole fails that
request with a MemoryError, not the machine.

The folder is the instructor's, mode 0700, inside grader/ (itself 0700): no student account can open it, and the
service runs as the instructor, so the instructor's own commands (`./course collect`, `feedback`, `release`)
read and write the same store without a token (the operating system is what authenticates them). A restart of the
service or the hub loses nothing: every submission is on disk (fsync) and committed before its answer is sent.

HTTP API (all under the service's prefix, JSON errors {"error": message}; file sets travel as uncompressed tar):

    GET  api/health                                   no token needed: {"service": name}
    GET  api/limits                                   the size limits and quotas
    GET  api/assignments/<course>                     released assignments, each with your deadline ("due")
    GET  api/assignments/<course>/<aid>               the released files (tar)
    POST api/assignments/<course>/<aid>[?force=1]     (instructor) release: body = tar
    GET  api/submissions/<course>[?assignment=][&student=NAME|&all=1]   yours; another's or all: instructor only
    POST api/submissions/<course>/<aid>[?as=NAME]     submit: body = tar; `as` another name: refused (403)
    GET  api/submission/<id>                          its files (tar): its student or the instructor
    GET  api/feedback/<id>                            its feedback HTML (tar): its student or the instructor
    POST api/feedback/<course>/<aid>/<student>        (instructor) body = tar of <notebook>.html files and the
                                                      submission_secret.txt of the submission they grade
    GET  api/refusals/<course>[?assignment=]          (instructor) the submissions refused, whose and why

Why this module is long: the store (its tables, files and every query) and the HTTP API over it, where each
handler decides who may do what and how much; split, a permission or a quota would sit apart from the data it guards.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import io
import json
import logging
import os
import resource
import sqlite3
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, cast
from urllib.parse import urlparse

from tornado import web
from tornado.http1connection import HTTP1Connection

from twoprim.exchange.intake import MAX_BYTES, STAMP, check_name, misplaced

__all__ = [
    "NAME",
    "Store",
    "ExchangeRefusal",
    "pack",
    "unpack",
    "make_app",
    "gradebook_deadlines",
    "main",
    "DEFAULT_MAX_FILE",
    "DEFAULT_MAX_SUBMISSION",
    "DEFAULT_MAX_SUBMISSIONS",
    "DEFAULT_MAX_STORED",
    "DEFAULT_MEMORY_MB",
    "megabytes",
    "over_count",
    "over_stored",
]

NAME = "twoprim-exchange"  # the service's name in JupyterHub (its URL prefix, its access scope)
SCOPE = f"access:services!service={NAME}"
DEFAULT_MAX_FILE = MAX_BYTES  # one notebook (or any file) of a submission: 100 MB
DEFAULT_MAX_SUBMISSION = 4 * MAX_BYTES  # everything one submission hands in
DEFAULT_MAX_SUBMISSIONS = 50  # submissions kept per student and assignment
DEFAULT_MAX_STORED = 500_000_000  # bytes kept per student and assignment (500 MB)
DEFAULT_MEMORY_MB = 512  # the service's address space (RLIMIT_AS), MiB: it peaks near 290
SECRET = "submission_secret.txt"  # nbgrader's per-submission secret (feedback is matched by it)
CLAIMED = "timestamp.txt"  # the student's own clock: kept to show, never used
CHUNK = 1 << 20  # what a download sends at a time
SEND_TIMEOUT_S = 300  # the longest a download waits for its client to take a piece


class ExchangeRefusal(Exception):
    """A request the exchange refuses: an HTTP status, a message that says why and what to do, and the limit it
    hit, if any ("submissions", "stored", "upload", "file"), as the refusals table records it."""

    def __init__(self, status: int, message: str, limit: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.limit = limit


def megabytes(n: int) -> str:
    """'100 MB' or '1.5 MB': a byte count in decimal megabytes."""
    return f"{n / 1e6:,.1f} MB" if n % 1_000_000 else f"{n // 1_000_000:,} MB"


def over_count(aid: str, have: int, limit: int) -> ExchangeRefusal:
    """The refusal of a submission past the quota of submissions (403)."""
    return ExchangeRefusal(
        403,
        f"you have handed in {aid} {have} times, the most the exchange keeps (the limit of "
        f"{limit} submissions per student and assignment): your newest submission is the one "
        f"that counts; if you must hand in again, ask your instructor",
        "submissions",
    )


def over_stored(aid: str, stored: int, size: int, limit: int, *, cut: bool = False) -> ExchangeRefusal:
    """The refusal of a submission that would pass the quota of stored bytes (413); `cut`: stopped on the way."""
    what = f"this submission passed {megabytes(size)} on its way in" if cut else f"this submission is {megabytes(size)}"
    return ExchangeRefusal(
        413,
        f"{what}, and you already have {megabytes(stored)} of {aid} in the exchange: over the "
        f"limit of {megabytes(limit)} stored per student and assignment. Make it smaller "
        f"(clear large outputs: Edit > Clear Outputs of All Cells, then save; leave data "
        f"files out) and submit again",
        "stored",
    )


def _over_upload(size: int, limit: int) -> ExchangeRefusal:
    return ExchangeRefusal(
        413,
        f"this upload is {megabytes(size)}, over the limit of {megabytes(limit)} for everything handed in at once",
        "upload",
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


# --- file sets as tar -----------------------------------------------------------------------------------------


def pack(files: dict[str, bytes]) -> bytes:
    """relative path -> bytes, as an uncompressed tar of regular files."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _members(tar: tarfile.TarFile, max_file: int | None, what: str):
    """The regular files of `tar`, each checked: a plain relative name, a regular file, at most `max_file` bytes,
    there once. Anything else is an ExchangeRefusal."""
    seen: set[str] = set()
    for member in tar:
        if member.isdir():
            continue
        why = check_name(member.name)
        if why:
            raise ExchangeRefusal(400, f"{what}: {why}")
        if not member.isfile():
            raise ExchangeRefusal(
                400, f"{what}: {member.name} is not a regular file (a link or a device): only files are handed in"
            )
        if max_file is not None and member.size > max_file:
            raise ExchangeRefusal(
                413,
                f"{member.name} is {megabytes(member.size)}, over the limit of "
                f"{megabytes(max_file)} per file: make it smaller (clear large "
                f"outputs: Edit > Clear Outputs of All Cells, then save) and submit "
                f"again",
                "file",
            )
        if member.name in seen:
            raise ExchangeRefusal(400, f"{what}: {member.name} is in it twice")
        seen.add(member.name)
        yield member


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo, size: int = -1) -> bytes:
    """A member's bytes (at most `size`): `_members` yields only regular files, which `extractfile` always opens."""
    f = tar.extractfile(member)
    assert f is not None
    return f.read(size)


def unpack(
    data: bytes | os.PathLike | io.IOBase | sqlite3.Blob, *, max_file: int | None = None, what: str = "the upload"
) -> dict[str, bytes]:
    """A tar of regular files (bytes, a path or an open file) back to relative path -> bytes. Refused
    (ExchangeRefusal): anything but regular files and folders (links, devices), a path that is not plainly
    relative, a file over `max_file` bytes."""
    try:
        with _open_tar(data) as tar:
            return {m.name: _read(tar, m) for m in _members(tar, max_file, what)}
    except tarfile.TarError as err:
        raise ExchangeRefusal(400, f"{what} is not a tar of files ({err})") from err


def scan(
    path: os.PathLike | sqlite3.Blob,
    *,
    max_file: int | None = None,
    what: str = "the upload",
    small: tuple[str, ...] = (),
) -> tuple[list[str], dict[str, bytes]]:
    """A tar file's regular files, checked as `unpack` checks them, without reading them: their names, and the
    bytes of the `small` ones (at most 4 KB each: the secret, the student's timestamp)."""
    names, read = [], {}
    try:
        with _open_tar(path) as tar:
            for member in _members(tar, max_file, what):
                names.append(member.name)
                if member.name in small:
                    read[member.name] = _read(tar, member, 4096)
    except tarfile.TarError as err:
        raise ExchangeRefusal(400, f"{what} is not a tar of files ({err})") from err
    return names, read


def _open_tar(source) -> tarfile.TarFile:
    if isinstance(source, (bytes, bytearray)):
        return tarfile.open(fileobj=io.BytesIO(source), mode="r:")
    if isinstance(source, (str, os.PathLike)):
        return tarfile.open(source, mode="r:")
    return tarfile.open(fileobj=source, mode="r:")


# --- the store ------------------------------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS released (
    version INTEGER PRIMARY KEY AUTOINCREMENT, course TEXT NOT NULL, assignment TEXT NOT NULL,
    released_at TEXT NOT NULL, by TEXT NOT NULL, files BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, course TEXT NOT NULL, assignment TEXT NOT NULL, student TEXT NOT NULL,
    arrived TEXT NOT NULL, secret TEXT, claimed TEXT, bytes INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    submission INTEGER NOT NULL REFERENCES submissions(id), path TEXT NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (submission, path));
CREATE TABLE IF NOT EXISTS feedback (
    submission INTEGER NOT NULL REFERENCES submissions(id), notebook TEXT NOT NULL, html BLOB NOT NULL,
    released_at TEXT NOT NULL, PRIMARY KEY (submission, notebook));
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT, course TEXT NOT NULL, assignment TEXT NOT NULL, student TEXT NOT NULL,
    at TEXT NOT NULL, status INTEGER NOT NULL, limit_hit TEXT, message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS submissions_by_assignment ON submissions (course, assignment, student);
"""
# Columns added since the first stores (a store from an earlier class gains them, empty, when opened): the tar file
# of a submission (its files were rows of `files` before) and its file names.
ADDED = {"submissions": {"stored": "TEXT", "paths": "TEXT"}}


class Store:
    """The service's submissions, releases and feedback: one SQLite file and a tar file per submission (see the
    module's docstring)."""

    FILE = "exchange.sqlite"

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / self.FILE
        if not self.folder.is_dir():
            self.folder.mkdir(mode=0o700, parents=True)
        old = os.umask(0o077)
        try:
            with self._db() as db:
                db.executescript(SCHEMA)
                for table, columns in ADDED.items():
                    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                    for column, kind in columns.items():
                        if column not in have:
                            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        finally:
            os.umask(old)

    @contextmanager
    def _db(self):
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # committed = on disk: a crash after "submitted" loses nothing
            db.execute("PRAGMA foreign_keys=ON")
            yield db
        finally:
            db.close()

    def _folder(self, name: str) -> Path:
        """A folder of the store (made 0700 when first written, by the account that writes it: the service's)."""
        folder = self.folder / name
        folder.mkdir(mode=0o700, exist_ok=True)
        return folder

    def incoming(self) -> Path:
        """Where uploads are written as they arrive."""
        return self._folder("incoming")

    def stage(self, data: bytes) -> Path:
        """`data` (a tar) written to a new file in incoming/, as an upload would be; its path."""
        fd, name = tempfile.mkstemp(prefix="upload-", suffix=".tar", dir=self.incoming())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return Path(name)

    def clear_incoming(self) -> None:
        """Remove what uploads cut short by a stop left in incoming/ (when the service starts)."""
        folder = self.folder / "incoming"
        for path in folder.iterdir() if folder.is_dir() else ():
            path.unlink(missing_ok=True)

    def _tar_of(self, stored: str | None) -> Path | None:
        return self.folder / "submissions" / stored if stored else None

    # releases
    def release(self, course: str, aid: str, files: dict[str, bytes] | Path, *, by: str, force: bool) -> int:
        """Keep a new release of `aid` (its files, or a tar file of them, which is checked and removed)."""
        path = self.stage(pack(files)) if isinstance(files, dict) else Path(files)
        try:
            scan(path, what=f"the release of {aid}")
            size = path.stat().st_size
            with self._db() as db, open(path, "rb") as f:
                db.execute("BEGIN IMMEDIATE")
                if (
                    not force
                    and db.execute("SELECT 1 FROM released WHERE course=? AND assignment=?", (course, aid)).fetchone()
                ):
                    db.execute("ROLLBACK")
                    raise ExchangeRefusal(
                        409,
                        f"{aid} is released already: release it again with --force (./course "
                        f"release does) to replace what students fetch",
                    )
                cur = db.execute(
                    "INSERT INTO released (course, assignment, released_at, by, files) VALUES (?,?,?,?,zeroblob(?))",
                    (course, aid, _now().strftime(STAMP), by, size),
                )
                version = cur.lastrowid
                assert version is not None  # (an INSERT's row)
                with db.blobopen("released", "files", version) as blob:  # copied in pieces, never whole
                    while chunk := f.read(CHUNK):
                        blob.write(chunk)
                db.execute("COMMIT")
                return version
        finally:
            path.unlink(missing_ok=True)

    def released(self, course: str) -> list[dict]:
        with self._db() as db:
            rows = db.execute(
                "SELECT assignment, released_at, version FROM released r WHERE course=? AND version = "
                "(SELECT MAX(version) FROM released WHERE course=r.course AND assignment=r.assignment)"
                " ORDER BY assignment",
                (course,),
            ).fetchall()
            out = []
            for aid, at, version in rows:
                with db.blobopen("released", "files", version, readonly=True) as blob:
                    out.append({"assignment_id": aid, "released_at": at, "files": sorted(scan(blob)[0])})
        return out

    def _release_version(self, db, course: str, aid: str) -> int:
        row = db.execute(
            "SELECT version FROM released WHERE course=? AND assignment=? ORDER BY version DESC LIMIT 1", (course, aid)
        ).fetchone()
        if row is None:
            raise ExchangeRefusal(404, f"{aid} is not released (yet): ask your instructor")
        return row[0]

    def release_files(self, course: str, aid: str) -> dict[str, bytes]:
        with (
            self._db() as db,
            db.blobopen("released", "files", self._release_version(db, course, aid), readonly=True) as blob,
        ):
            return unpack(blob)

    @contextmanager
    def release_tar(self, course: str, aid: str):
        """The newest release of `aid` as an open tar, read in pieces (a download sends it as it reads)."""
        with (
            self._db() as db,
            db.blobopen("released", "files", self._release_version(db, course, aid), readonly=True) as blob,
        ):
            yield blob

    def release_notebooks(self, course: str, aid: str) -> list[str]:
        """The notebooks of the newest release of `aid` (a 404 refusal when there is none)."""
        with self.release_tar(course, aid) as blob:
            return [name for name in scan(blob)[0] if name.endswith(".ipynb")]

    # submissions
    def usage(self, course: str, aid: str, student: str) -> tuple[int, int]:
        """How many submissions of `aid` the store keeps for `student`, and their bytes."""
        with self._db() as db:
            return self._usage(db, course, aid, student)

    @staticmethod
    def _usage(db, course, aid, student) -> tuple[int, int]:
        count, size = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM submissions WHERE course=? AND assignment=? AND student=?",
            (course, aid, student),
        ).fetchone()
        return count, size

    def submit(
        self,
        course: str,
        aid: str,
        student: str,
        files: dict[str, bytes] | Path,
        *,
        max_submissions: int | None = DEFAULT_MAX_SUBMISSIONS,
        max_stored: int | None = DEFAULT_MAX_STORED,
        max_file: int | None = None,
    ) -> dict:
        """Keep a new submission (its files, or a tar file of them, which is moved into the store or removed),
        stamped now. Never replaces one. Refused (ExchangeRefusal, naming what): a file or a name `unpack` refuses,
        no notebook or one not where the release put it, the student's quota of submissions or bytes passed."""
        path = self.stage(pack(files)) if isinstance(files, dict) else Path(files)
        kept = None
        try:
            what = f"the submission of {aid}"
            names, small = scan(path, max_file=max_file, what=what, small=(SECRET, CLAIMED))
            if not any(rel.endswith(".ipynb") for rel in names):
                raise ExchangeRefusal(400, f"{what} has no notebook: submit from the folder you fetched")
            try:
                why = misplaced(aid, self.release_notebooks(course, aid), names)
            except ExchangeRefusal:  # not released: nothing to compare with (the service refuses that before)
                why = None
            if why:
                raise ExchangeRefusal(400, f"{what}: {why}", "notebook")
            size = path.stat().st_size
            secret = small.get(SECRET, b"").decode("utf-8", "replace").strip() or None
            claimed = small.get(CLAIMED, b"").decode("utf-8", "replace").strip()[:100] or None
            with open(path, "rb+") as f:
                os.fsync(f.fileno())  # on disk before the student is told "submitted"
            arrived = _now()
            with self._db() as db:
                db.execute("BEGIN IMMEDIATE")  # the quota and the new row in one transaction: two at once cannot pass
                count, stored = self._usage(db, course, aid, student)
                if max_submissions is not None and count >= max_submissions:
                    db.execute("ROLLBACK")
                    raise over_count(aid, count, max_submissions)
                if max_stored is not None and stored + size > max_stored:
                    db.execute("ROLLBACK")
                    raise over_stored(aid, stored, size, max_stored)
                cur = db.execute(
                    "INSERT INTO submissions (course, assignment, student, arrived, secret, claimed, "
                    "bytes, paths) VALUES (?,?,?,?,?,?,?,?)",
                    (
                        course,
                        aid,
                        student,
                        arrived.isoformat(),
                        secret,
                        claimed,
                        size,
                        json.dumps(sorted(n for n in names if n != CLAIMED)),
                    ),
                )
                sid = cur.lastrowid
                kept = self._folder("submissions") / f"{sid}.tar"
                os.replace(path, kept)
                _fsync_folder(kept.parent)
                db.execute("UPDATE submissions SET stored=? WHERE id=?", (kept.name, sid))
                db.execute("COMMIT")
                kept = None
        finally:
            path.unlink(missing_ok=True)
            if kept is not None:  # moved in, but the row was not committed
                kept.unlink(missing_ok=True)
        return {"id": sid, "assignment_id": aid, "student": student, "timestamp": arrived.strftime(STAMP)}

    def submissions(self, course: str, *, aid: str | None = None, student: str | None = None) -> list[dict]:
        """Submissions (newest last) with their notebooks and feedback checksums; no bytes."""
        query = "SELECT id, assignment, student, arrived, claimed, bytes, paths FROM submissions WHERE course=?"
        params: list = [course]
        if aid:
            query, params = query + " AND assignment=?", params + [aid]
        if student:
            query, params = query + " AND student=?", params + [student]
        with self._db() as db:
            rows = db.execute(query + " ORDER BY id", params).fetchall()
            out = []
            for sid, assignment, who, arrived, claimed, size, paths in rows:
                if paths is None:  # kept as rows of `files` (a store from an earlier class)
                    paths = [
                        p for (p,) in db.execute("SELECT path FROM files WHERE submission=? ORDER BY path", (sid,))
                    ]
                else:
                    paths = json.loads(paths)
                feedback = {
                    nb: hashlib.md5(html).hexdigest()
                    for nb, html in db.execute("SELECT notebook, html FROM feedback WHERE submission=?", (sid,))
                }
                out.append(
                    {
                        "id": sid,
                        "assignment_id": assignment,
                        "student": who,
                        "timestamp": datetime.datetime.fromisoformat(arrived).strftime(STAMP),
                        "arrived": arrived,
                        "claimed": claimed,
                        "bytes": size,
                        "files": paths,
                        "notebooks": sorted(p[:-6] for p in paths if p.endswith(".ipynb") and "/" not in p),
                        "feedback": feedback,
                    }
                )
        return out

    def _row(self, sid: int) -> tuple[str, str, str, str | None]:
        with self._db() as db:
            row = db.execute(
                "SELECT course, assignment, student, stored FROM submissions WHERE id=?", (sid,)
            ).fetchone()
        if row is None:
            raise ExchangeRefusal(404, f"there is no submission {sid}")
        return row

    @contextmanager
    def submission_tar(self, sid: int):
        """Submission `sid`'s files as an open tar (without the student's timestamp.txt when it is from rows)."""
        stored = self._tar_of(self._row(sid)[3])
        if stored is None:
            with self._db() as db:
                data = dict(db.execute("SELECT path, data FROM files WHERE submission=?", (sid,)).fetchall())
            yield io.BytesIO(pack(data))
            return
        with open(stored, "rb") as f:
            yield f

    def submission(self, sid: int) -> dict:
        """One submission's record (as `submissions` gives it) with "course" and its files' bytes ("data")."""
        course, aid, student, _ = self._row(sid)
        with self.submission_tar(sid) as f:
            data = unpack(f)
        data.pop(CLAIMED, None)
        record = next(s for s in self.submissions(course, aid=aid, student=student) if s["id"] == sid)
        return {**record, "course": course, "data": data}

    # refusals
    def refuse(self, course: str, aid: str, student: str, refusal: ExchangeRefusal) -> None:
        """Record a refused submission (collect tells the instructor)."""
        with self._db() as db:
            db.execute(
                "INSERT INTO refusals (course, assignment, student, at, status, limit_hit, message) "
                "VALUES (?,?,?,?,?,?,?)",
                (course, aid, student, _now().isoformat(), refusal.status, refusal.limit, refusal.message),
            )

    def refusals(self, course: str, aid: str | None = None) -> list[dict]:
        """Every refused submission (of `aid`), oldest first."""
        query = "SELECT assignment, student, at, status, limit_hit, message FROM refusals WHERE course=?"
        params: list = [course]
        if aid:
            query, params = query + " AND assignment=?", params + [aid]
        with self._db() as db:
            rows = db.execute(query + " ORDER BY id", params).fetchall()
        return [
            dict(zip(("assignment_id", "student", "at", "status", "limit", "message"), row, strict=True))
            for row in rows
        ]

    # feedback
    def set_feedback(self, course: str, aid: str, student: str, secret: str, html: dict[str, bytes]) -> int:
        """Attach feedback to the submission of `student` whose nbgrader secret is `secret`; its id."""
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT id FROM submissions WHERE course=? AND assignment=? AND student=? AND secret=? "
                "ORDER BY id DESC LIMIT 1",
                (course, aid, student, secret.strip()),
            ).fetchone()
            if row is None:
                db.execute("ROLLBACK")
                raise ExchangeRefusal(
                    404,
                    f"no submission of {aid} by {student} has that submission secret: the "
                    f"feedback must be for a submission collected from this exchange",
                )
            at = _now().strftime(STAMP)
            db.executemany(
                "INSERT OR REPLACE INTO feedback (submission, notebook, html, released_at) VALUES (?,?,?,?)",
                [(row[0], nb, data, at) for nb, data in html.items()],
            )
            db.execute("COMMIT")
            return row[0]

    def feedback(self, sid: int) -> dict[str, bytes]:
        with self._db() as db:
            return {
                f"{nb}.html": html
                for nb, html in db.execute("SELECT notebook, html FROM feedback WHERE submission=?", (sid,))
            }


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the HTTP service -----------------------------------------------------------------------------------------


def gradebook_deadlines(url: str):
    """student -> {assignment: that student's deadline, "YYYY-MM-DDTHH:MM:SSZ"}: the due date in the course's
    gradebook at `url`, or the student's extension when later, read anew at each request, so a due date set or moved
    in the formgrader or by `./course release --due` or `extend` is what students see next."""

    def read(student: str) -> dict[str, str]:
        from twoprim.grading.gradebook import extensions, gradebook

        with gradebook(url) as gb:
            due = {a.name: a.duedate for a in gb.assignments if a.duedate is not None}
        for aid in list(due):
            extended = extensions(aid, url).get(student)
            if extended is not None and extended > due[aid]:
                due[aid] = extended
        return {aid: when.strftime("%Y-%m-%dT%H:%M:%SZ") for aid, when in due.items()}

    return read


# --- the HTTP API: one handler per route; each decides who may do what -----------------------------------------


class _Base(web.RequestHandler):
    """What every handler of the exchange shares: who is asking (the hub says), refusals as JSON, replies."""

    @property
    def ex(self) -> dict:
        """The exchange's settings (`make_app`'s arguments): store, hub_auth, course, instructors, limits."""
        return self.settings["exchange"]

    @property
    def store(self) -> Store:
        """The exchange's store."""
        return self.ex["store"]

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None))[1]
        message = (
            exc.message
            if isinstance(exc, ExchangeRefusal)
            else (exc.log_message if isinstance(exc, web.HTTPError) and exc.log_message else self._reason)
        )
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message}))

    def _refuse(self, status: int, message: str):
        raise ExchangeRefusal(status, message)

    async def who(self) -> str:
        """The hub user the request's token belongs to (JupyterHub says, never the request)."""
        header = self.request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() not in ("token", "bearer") or not token.strip():
            self._refuse(
                401,
                "no token: the exchange service answers JupyterHub users only (nbgrader on the "
                "hub sends your server's JUPYTERHUB_API_TOKEN)",
            )
        model = await self.ex["hub_auth"].user_for_token(token.strip(), sync=False)
        if not model:
            self._refuse(401, "the hub does not know this token (expired or revoked): log in to the hub again")
        if model.get("kind", "user") != "user":
            self._refuse(403, f"{model.get('kind')} {model.get('name')} is not a user of the class")
        from jupyterhub.services.auth import check_scopes

        scope = self.ex["scope"]
        if not check_scopes({scope}, set(model.get("scopes") or ())):
            self._refuse(
                403,
                f"{model['name']}'s token does not grant {scope}: the hub gives it to the course's "
                f"users only (./course hub: load_roles and Spawner.server_token_scopes; on a hub of "
                f"several courses, the course's nbgrader-COURSE group)",
            )
        return model["name"]

    async def instructor(self, doing: str) -> str:
        name = await self.who()
        self.only_instructor(name, doing)
        return name

    def only_instructor(self, name: str, doing: str) -> None:
        if name not in self.ex["instructors"]:
            self._refuse(403, f"{name} may not {doing}: only the instructor may")

    def course(self, course: str) -> str:
        if course != self.ex["course"]:
            self._refuse(404, f"this exchange serves the course {self.ex['course']!r}, not {course!r}")
        return course

    def send_json(self, value) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(value))

    def send_tar(self, files: dict[str, bytes]) -> None:
        self.set_header("Content-Type", "application/x-tar")
        self.finish(pack(files))

    async def send_file(self, f) -> None:
        """An open tar, sent a piece at a time (each written to the socket before the next is read); a client that
        takes no piece for SEND_TIMEOUT_S is dropped."""
        import asyncio

        self.set_header("Content-Type", "application/x-tar")
        while chunk := f.read(CHUNK):
            self.write(chunk)
            try:
                await asyncio.wait_for(self.flush(), SEND_TIMEOUT_S)
            except TimeoutError:
                logging.getLogger(NAME).warning(
                    "%s took no data for %d s: download dropped", self.request.uri, SEND_TIMEOUT_S
                )
                # tornado's HTTPServer serves every request over an HTTP1Connection (typed as the abstract one)
                cast(HTTP1Connection, self.request.connection).close()
                return
        self.finish()

    def _handle_request_exception(self, e):
        if isinstance(e, ExchangeRefusal):
            self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)


@web.stream_request_body
class _Upload(_Base):
    """A tar body, written to a file in the store's incoming/ as it arrives and cut off (the file removed) as soon
    as it passes what this upload may be (`allowance`); refused then once the rest has arrived."""

    user: str | None = None
    _file: IO[bytes] | None = None
    _path: Path | None = None
    _over: ExchangeRefusal | None = None
    _size = 0

    @property
    def me(self) -> str:
        """The hub user this request is from (`prepare` asked the hub before any handler runs)."""
        assert self.user is not None
        return self.user

    async def prepare(self):
        self.user = await self.who()
        if self.request.method != "POST":
            return
        limit = await self.allowance()
        length = self.request.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > limit:
            raise self.too_big(int(length))
        fd, name = tempfile.mkstemp(prefix="upload-", suffix=".tar", dir=self.store.incoming())
        self._file, self._path = os.fdopen(fd, "wb"), Path(name)

    async def allowance(self) -> int:
        """The most this upload may be, in bytes (asked again as it arrives)."""
        return self.ex["max_submission"]

    def too_big(self, size: int, *, cut: bool = False) -> ExchangeRefusal:
        """The refusal of an upload of `size` bytes, over the allowance."""
        return _over_upload(size, self.ex["max_submission"])

    def limit_now(self) -> int:
        """The allowance while the upload arrives (the submission's changes as others arrive)."""
        return self.ex["max_submission"]

    def data_received(self, chunk: bytes) -> None:
        if self._file is None:  # cut off already: the rest is read and dropped
            return
        self._size += len(chunk)
        if self._size > self.limit_now():
            self._over = self.too_big(self._size, cut=True)
            self._discard()
            return
        self._file.write(chunk)

    def staged(self) -> Path:
        """The upload's file, complete; refused when it was cut off."""
        if self._over is not None:
            raise self._over
        assert self._file is not None and self._path is not None  # (prepare opened it for this POST)
        self._file.close()
        self._file = None
        return self._path

    def _discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    def on_finish(self):
        self._discard()

    def on_connection_close(self):
        self._discard()
        super().on_connection_close()


class _Health(_Base):
    """GET api/health: no token needed."""

    def get(self):
        self.send_json({"service": NAME, "course": self.ex["course"]})


class _Limits(_Base):
    """GET api/limits: the size limits and quotas."""

    async def get(self):
        await self.who()
        self.send_json(
            {
                "max_file_bytes": self.ex["max_file"],
                "max_submission_bytes": self.ex["max_submission"],
                "max_submissions": self.ex["max_submissions"],
                "max_stored_bytes": self.ex["max_stored"],
            }
        )


class _Assignments(_Base):
    """GET api/assignments/<course>: released assignments, each with the caller's deadline."""

    async def get(self, course):
        name = await self.who()
        listing = self.store.released(self.course(course))
        due: dict[str, str] = {}
        if self.ex["deadlines"] is not None:
            try:
                due = self.ex["deadlines"](name)
            except Exception:
                logging.getLogger(NAME).exception("could not read the due dates from the gradebook")
        for entry in listing:
            entry["due"] = due.get(entry["assignment_id"])  # this student's deadline, or None
        self.send_json(listing)


class _Assignment(_Upload):
    """GET (fetch) and POST (the instructor's release) api/assignments/<course>/<aid>."""

    async def get(self, course, aid):
        with self.store.release_tar(self.course(course), aid) as blob:
            await self.send_file(blob)

    async def allowance(self) -> int:
        self.only_instructor(self.me, f"release {self.path_args[1]}")
        return await super().allowance()

    async def post(self, course, aid):
        force = self.get_argument("force", "0") in ("1", "true", "yes")
        version = self.store.release(self.course(course), aid, self.staged(), by=self.me, force=force)
        self.send_json(
            {
                "assignment_id": aid,
                "version": version,
                "files": next(a["files"] for a in self.store.released(course) if a["assignment_id"] == aid),
            }
        )


class _Submissions(_Base):
    """GET api/submissions/<course>: the caller's submissions; another's or all: instructor only."""

    async def get(self, course):
        name = await self.who()
        everyone = self.get_argument("all", "0") in ("1", "true", "yes")
        student = self.get_argument("student", None) or None
        if (everyone or (student and student != name)) and name not in self.ex["instructors"]:
            whose = "the class's submissions" if everyone else f"{student}'s submissions"
            self._refuse(403, f"{name} may not list {whose}: a student sees only their own")
        aid = self.get_argument("assignment", None) or None
        self.send_json(
            self.store.submissions(self.course(course), aid=aid, student=None if everyone else (student or name))
        )


class _Submit(_Upload):
    """POST api/submissions/<course>/<aid>: a submission, stored as the hub user who sends it, within the
    student's quota for the assignment (submissions and bytes), checked before, while and after it arrives.
    Every refusal of an identified student is recorded (collect lists them)."""

    _stored = 0

    @property
    def _key(self) -> tuple[str, str, str]:
        return (self.path_args[0], self.path_args[1], self.me)

    async def allowance(self) -> int:
        course, aid = self.path_args
        claimed = self.get_argument("as", None)
        if claimed and claimed != self.user:
            self._refuse(
                403,
                f"you are {self.user} (the hub says so): you cannot submit as {claimed}; a "
                f"submission is always stored as the hub user who sends it",
            )
        self.course(course)
        self.store.release_notebooks(course, aid)  # 404 unless released
        count, self._stored = self.store.usage(course, aid, self.me)
        arriving = self.ex["arriving"].setdefault(self._key, {})
        if count + len(arriving) >= self.ex["max_submissions"]:
            raise over_count(aid, count + len(arriving), self.ex["max_submissions"])
        arriving[id(self)] = 0
        return self.limit_now()

    def limit_now(self) -> int:
        """The upload limit, and what the student may still store: their quota less what they keep and what their
        other uploads arriving now already hold."""
        arriving = self.ex["arriving"].get(self._key, {})
        arriving[id(self)] = self._size
        others = sum(size for who, size in arriving.items() if who != id(self))
        return min(self.ex["max_submission"], self.ex["max_stored"] - self._stored - others)

    def too_big(self, size: int, *, cut: bool = False) -> ExchangeRefusal:
        if size > self.ex["max_submission"]:
            return _over_upload(size, self.ex["max_submission"])
        others = sum(s for who, s in self.ex["arriving"].get(self._key, {}).items() if who != id(self))
        return over_stored(self.path_args[1], self._stored + others, size, self.ex["max_stored"], cut=cut)

    async def post(self, course, aid):
        self.send_json(
            self.store.submit(
                course,
                aid,
                self.me,
                self.staged(),
                max_submissions=self.ex["max_submissions"],
                max_stored=self.ex["max_stored"],
                max_file=self.ex["max_file"],
            )
        )

    def _handle_request_exception(self, e):
        if isinstance(e, ExchangeRefusal) and self.user is not None and len(self.path_args) == 2:
            try:
                self.store.refuse(self.path_args[0], self.path_args[1], self.user, e)
            except sqlite3.Error:
                logging.getLogger(NAME).exception("could not record a refusal")
            logging.getLogger(NAME).info("refused %s's submission of %s: %s", self.user, self.path_args[1], e.message)
        super()._handle_request_exception(e)

    def on_finish(self):
        self._done()
        super().on_finish()

    def on_connection_close(self):
        self._done()
        super().on_connection_close()

    def _done(self) -> None:
        if self.user is None:
            return
        arriving = self.ex["arriving"].get(self._key)
        if arriving is not None:
            arriving.pop(id(self), None)
            if not arriving:
                self.ex["arriving"].pop(self._key, None)


class _Submission(_Base):
    """GET api/submission/<id>: its files, to its student or the instructor."""

    async def get(self, sid):
        name = await self.who()
        self._mine(name, int(sid), "submission")
        with self.store.submission_tar(int(sid)) as f:
            await self.send_file(f)

    def _mine(self, name: str, sid: int, what: str) -> None:
        _, _, student, _ = self.store._row(sid)  # 404 when there is none
        if student != name and name not in self.ex["instructors"]:
            self._refuse(
                403,
                f"{name} may not read the {what} of submission {sid}: it is another student's; "
                f"only its student and the instructor may",
            )


class _Feedback(_Submission):
    """GET api/feedback/<id>: its feedback HTML, to its student or the instructor."""

    async def get(self, sid):
        name = await self.who()
        self._mine(name, int(sid), "feedback")
        self.send_tar(self.store.feedback(int(sid)))


class _ReleaseFeedback(_Upload):
    """POST api/feedback/<course>/<aid>/<student>: the instructor's feedback for a submission."""

    async def allowance(self) -> int:
        self.only_instructor(self.me, f"release feedback for {self.path_args[1]}")
        return await super().allowance()

    async def post(self, course, aid, student):
        files = unpack(self.staged(), what=f"the feedback of {student} for {aid}")
        secret = files.pop(SECRET, b"").decode("utf-8", "replace")
        html = {rel[:-5]: data for rel, data in files.items() if rel.endswith(".html") and "/" not in rel}
        if not secret or not html:
            self._refuse(400, f"the feedback of {student} for {aid} needs its {SECRET} and <notebook>.html files")
        sid = self.store.set_feedback(self.course(course), aid, student, secret, html)
        self.send_json({"id": sid, "notebooks": sorted(html)})


class _Refusals(_Base):
    """GET api/refusals/<course>[?assignment=]: the submissions refused (instructor only)."""

    async def get(self, course):
        await self.instructor("list the refused submissions")
        aid = self.get_argument("assignment", None) or None
        self.send_json(self.store.refusals(self.course(course), aid))


def make_app(
    store: Store,
    hub_auth,
    *,
    course: str,
    instructors: set[str],
    prefix: str = f"/services/{NAME}/",
    max_file: int = DEFAULT_MAX_FILE,
    max_submission: int = DEFAULT_MAX_SUBMISSION,
    max_submissions: int = DEFAULT_MAX_SUBMISSIONS,
    max_stored: int = DEFAULT_MAX_STORED,
    deadlines=None,
    scope: str = SCOPE,
):
    """The tornado application. `hub_auth`: JupyterHub's HubAuth (or, in tests, anything with an async
    `user_for_token(token, sync=False)` that returns the hub's model of the token's owner, or None). `deadlines`:
    student -> {assignment: their deadline} (`gradebook_deadlines`), shown beside each released assignment.
    `max_submissions` and `max_stored`: each student's quota per assignment. `scope`: the hub scope a token needs
    (a hub of several courses runs one service per course, each named, and reached, for its own course)."""
    settings = dict(
        store=store,
        hub_auth=hub_auth,
        course=course,
        instructors=frozenset(instructors),
        max_file=max_file,
        max_submission=max_submission,
        max_submissions=max_submissions,
        max_stored=max_stored,
        deadlines=deadlines,
        arriving={},
        scope=scope,
    )

    segment = r"([^/+*]+)"
    p = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    routes = [
        (rf"{p}api/health", _Health),
        (rf"{p}api/limits", _Limits),
        (rf"{p}api/assignments/{segment}", _Assignments),
        (rf"{p}api/assignments/{segment}/{segment}", _Assignment),
        (rf"{p}api/submissions/{segment}", _Submissions),
        (rf"{p}api/submissions/{segment}/{segment}", _Submit),
        (rf"{p}api/submission/(\d+)", _Submission),
        (rf"{p}api/feedback/(\d+)", _Feedback),
        (rf"{p}api/feedback/{segment}/{segment}/{segment}", _ReleaseFeedback),
        (rf"{p}api/refusals/{segment}", _Refusals),
    ]
    return web.Application(routes, max_body_size=max_submission + 1024 * 1024, exchange=settings)


def limit_memory(megabytes_: float) -> int:
    """Lower this process's address-space limit (RLIMIT_AS) to `megabytes_` MB (never raises it); the limit set."""
    want = int(megabytes_ * 2**20)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_AS, (want, want))
    return want


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m twoprim.exchange.service", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--store", type=Path, required=True, help="the folder of the store (0700, the service's own)")
    p.add_argument("--course", required=True, help="nbgrader's course id")
    p.add_argument("--instructor", action="append", default=[], help="a hub user who may release and collect")
    p.add_argument(
        "--max-file-mb",
        type=float,
        default=DEFAULT_MAX_FILE / 1e6,
        help=f"the largest file of a submission, in MB (default {DEFAULT_MAX_FILE / 1e6:g})",
    )
    p.add_argument(
        "--max-submission-mb",
        type=float,
        default=None,
        help="the largest submission, in MB (default: 4 times --max-file-mb)",
    )
    p.add_argument(
        "--max-submissions",
        type=int,
        default=DEFAULT_MAX_SUBMISSIONS,
        help=f"submissions kept per student and assignment (default {DEFAULT_MAX_SUBMISSIONS}); the next is refused",
    )
    p.add_argument(
        "--max-stored-mb",
        type=float,
        default=DEFAULT_MAX_STORED / 1e6,
        help=f"MB kept per student and assignment, all their submissions together (default "
        f"{DEFAULT_MAX_STORED / 1e6:g}); an upload that would pass it is cut off",
    )
    p.add_argument(
        "--memory-mb",
        type=float,
        default=DEFAULT_MEMORY_MB,
        help=f"the service's own address-space limit, in MiB (RLIMIT_AS, default {DEFAULT_MEMORY_MB}; 0: none)",
    )
    p.add_argument(
        "--gradebook",
        default=None,
        metavar="URL",
        help="the course's gradebook, whose due dates (and each student's extension) students see",
    )
    p.add_argument(
        "--url",
        default=os.environ.get("JUPYTERHUB_SERVICE_URL", ""),
        help="where to listen (default $JUPYTERHUB_SERVICE_URL, which JupyterHub sets)",
    )
    p.add_argument(
        "--off-loopback",
        action="store_true",
        help="allow --url on an address other than loopback (a pod of its own in Kubernetes, reached "
        "only through the cluster's network)",
    )
    return p


BODY_TIMEOUT_S = 900  # the longest an upload may take to arrive (the client's read timeout): a stalled one ends


def main(argv: list[str] | None = None) -> int:
    """Serve the exchange (JupyterHub starts it: `python -m twoprim.exchange.service --store ... --course ...`)."""
    import asyncio

    from jupyterhub.services.auth import HubAuth

    args = _parser().parse_args(argv)
    url = urlparse(args.url)
    if not url.port or (url.hostname not in ("127.0.0.1", "localhost", "::1") and not args.off_loopback):
        raise SystemExit(
            f"error: the exchange listens on loopback only, not {args.url!r}: give --url "
            f"http://127.0.0.1:PORT (JupyterHub's services entry sets it), or add --off-loopback"
        )
    for flag, value in (
        ("--max-submissions", args.max_submissions),
        ("--max-stored-mb", args.max_stored_mb),
        ("--max-file-mb", args.max_file_mb),
    ):
        if not value > 0:
            raise SystemExit(f"error: {flag} {value:g} is not a positive number: give the most it allows")
    if args.memory_mb < 0:
        raise SystemExit(f"error: --memory-mb {args.memory_mb:g} is negative: give MiB, or 0 for no limit")
    max_file = int(args.max_file_mb * 1e6)
    max_submission = int(args.max_submission_mb * 1e6) if args.max_submission_mb else 4 * max_file
    logging.basicConfig(level=logging.INFO, format="[%(levelname).1s %(asctime)s " + NAME + "] %(message)s")
    memory = limit_memory(args.memory_mb) if args.memory_mb else None
    store = Store(args.store)
    store.clear_incoming()  # uploads a stop cut short: none of them was stored
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{NAME}/")
    app = make_app(
        store,
        HubAuth(),
        course=args.course,
        instructors=set(args.instructor),
        prefix=prefix,
        max_file=max_file,
        max_submission=max_submission,
        max_submissions=args.max_submissions,
        max_stored=int(args.max_stored_mb * 1e6),
        deadlines=gradebook_deadlines(args.gradebook) if args.gradebook else None,
        scope=f"access:services!service={os.environ.get('JUPYTERHUB_SERVICE_NAME') or NAME}",
    )

    async def serve():
        app.listen(
            url.port, address=url.hostname, max_body_size=max_submission + 1024 * 1024, body_timeout=BODY_TIMEOUT_S
        )
        logging.info(
            "serving %s on %s (store %s, instructors %s, at most %s a file, %d submissions and %s per "
            "student and assignment, address space %s)",
            args.course,
            args.url,
            store.folder,
            ", ".join(sorted(args.instructor)) or "none",
            megabytes(max_file),
            args.max_submissions,
            megabytes(int(args.max_stored_mb * 1e6)),
            f"{memory / 2**20:g} MiB" if memory else "unlimited",
        )
        await asyncio.Event().wait()  # serve until JupyterHub stops the service (SIGTERM) or Ctrl-C

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
