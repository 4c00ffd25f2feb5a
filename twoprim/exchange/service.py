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

Where it keeps what (`Store`, one SQLite file, `grader/exchange/exchange.sqlite` in the classroom):

    released    every release of an assignment (a new row each time; the newest is what students fetch)
    submissions one row per submission, never updated or deleted: id, student (the hub's name), arrival (the
                service's clock, naive UTC), the notebook secret nbgrader writes, the student's own timestamp.txt
    files       the bytes of every file of every submission
    feedback    the feedback HTML of a submission (the instructor's latest release of it)

The folder is the instructor's, mode 0700, inside grader/ (itself 0700): no student account can open it, and the
service runs as the instructor, so the instructor's own commands (`./course collect`, `feedback`, `release`)
read and write the same file without a token (the operating system is what authenticates them). A restart of the
service or the hub loses nothing: every submission is committed before its answer is sent.

HTTP API (all under the service's prefix, JSON errors {"error": message}; file sets travel as uncompressed tar):

    GET  api/health                                   no token needed: {"service": name}
    GET  api/limits                                   the size limits
    GET  api/assignments/<course>                     released assignments, each with your deadline ("due")
    GET  api/assignments/<course>/<aid>               the released files (tar)
    POST api/assignments/<course>/<aid>[?force=1]     (instructor) release: body = tar
    GET  api/submissions/<course>[?assignment=][&student=NAME|&all=1]   yours; another's or all: instructor only
    POST api/submissions/<course>/<aid>[?as=NAME]     submit: body = tar; `as` another name: refused (403)
    GET  api/submission/<id>                          its files (tar): its student or the instructor
    GET  api/feedback/<id>                            its feedback HTML (tar): its student or the instructor
    POST api/feedback/<course>/<aid>/<student>        (instructor) body = tar of <notebook>.html files and the
                                                      submission_secret.txt of the submission they grade

Why this module is long: the store (its tables and every query) and the HTTP API over it, where each handler
decides who may do what; split, a permission would sit apart from the data it guards.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import sqlite3
import logging
import tarfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from tornado import web

from twoprim.exchange.intake import MAX_BYTES, STAMP, check_name

__all__ = ["NAME", "Store", "ExchangeRefusal", "pack", "unpack", "make_app", "gradebook_deadlines", "main",
           "DEFAULT_MAX_FILE",
           "DEFAULT_MAX_SUBMISSION", "megabytes"]

NAME = "twoprim-exchange"                 # the service's name in JupyterHub (its URL prefix, its access scope)
SCOPE = f"access:services!service={NAME}"
DEFAULT_MAX_FILE = MAX_BYTES              # one notebook (or any file) of a submission: 100 MB
DEFAULT_MAX_SUBMISSION = 4 * MAX_BYTES    # everything one submission hands in
SECRET = "submission_secret.txt"          # nbgrader's per-submission secret (feedback is matched by it)
CLAIMED = "timestamp.txt"                 # the student's own clock: kept to show, never used


class ExchangeRefusal(Exception):
    """A request the exchange refuses: an HTTP status and a message that says why and what to do."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def megabytes(n: int) -> str:
    """'100 MB' or '1.5 MB': a byte count in decimal megabytes."""
    return f"{n / 1e6:,.1f} MB" if n % 1_000_000 else f"{n // 1_000_000:,} MB"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


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


def unpack(data: bytes, *, max_file: int | None = None, what: str = "the upload") -> dict[str, bytes]:
    """A tar of regular files back to relative path -> bytes. Refused (ExchangeRefusal): anything but regular
    files and folders (links, devices), a path that is not plainly relative, a file over `max_file` bytes."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if member.isdir():
                    continue
                why = check_name(member.name)
                if why:
                    raise ExchangeRefusal(400, f"{what}: {why}")
                if not member.isfile():
                    raise ExchangeRefusal(400, f"{what}: {member.name} is not a regular file (a link or a device): "
                                               f"only files are handed in")
                if max_file is not None and member.size > max_file:
                    raise ExchangeRefusal(413, f"{member.name} is {megabytes(member.size)}, over the limit of "
                                               f"{megabytes(max_file)} per file: make it smaller (clear large "
                                               f"outputs: Edit > Clear Outputs of All Cells, then save) and submit "
                                               f"again")
                if member.name in files:
                    raise ExchangeRefusal(400, f"{what}: {member.name} is in it twice")
                files[member.name] = tar.extractfile(member).read()
    except tarfile.TarError as err:
        raise ExchangeRefusal(400, f"{what} is not a tar of files ({err})") from err
    return files


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
CREATE INDEX IF NOT EXISTS submissions_by_assignment ON submissions (course, assignment, student);
"""


class Store:
    """The service's submissions, releases and feedback, in one SQLite file (see the module's docstring)."""

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

    # releases
    def release(self, course: str, aid: str, files: dict[str, bytes], *, by: str, force: bool) -> int:
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            if not force and db.execute("SELECT 1 FROM released WHERE course=? AND assignment=?",
                                        (course, aid)).fetchone():
                db.execute("ROLLBACK")
                raise ExchangeRefusal(409, f"{aid} is released already: release it again with --force (./course "
                                           f"release does) to replace what students fetch")
            cur = db.execute("INSERT INTO released (course, assignment, released_at, by, files) VALUES (?,?,?,?,?)",
                             (course, aid, _now().strftime(STAMP), by, pack(files)))
            db.execute("COMMIT")
            return cur.lastrowid

    def released(self, course: str) -> list[dict]:
        with self._db() as db:
            rows = db.execute("SELECT assignment, released_at, files FROM released r WHERE course=? AND version = "
                              "(SELECT MAX(version) FROM released WHERE course=r.course AND assignment=r.assignment)"
                              " ORDER BY assignment", (course,)).fetchall()
        return [{"assignment_id": aid, "released_at": at, "files": sorted(unpack(blob))} for aid, at, blob in rows]

    def release_files(self, course: str, aid: str) -> dict[str, bytes]:
        with self._db() as db:
            row = db.execute("SELECT files FROM released WHERE course=? AND assignment=? ORDER BY version DESC "
                             "LIMIT 1", (course, aid)).fetchone()
        if row is None:
            raise ExchangeRefusal(404, f"{aid} is not released (yet): ask your instructor")
        return unpack(row[0])

    # submissions
    def submit(self, course: str, aid: str, student: str, files: dict[str, bytes]) -> dict:
        """Keep a new submission: its files as handed in, stamped now. Never replaces one."""
        arrived = _now()
        secret = files.get(SECRET, b"").decode("utf-8", "replace").strip() or None
        claimed = files.get(CLAIMED, b"").decode("utf-8", "replace").strip()[:100] or None
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            cur = db.execute("INSERT INTO submissions (course, assignment, student, arrived, secret, claimed, bytes) "
                             "VALUES (?,?,?,?,?,?,?)", (course, aid, student, arrived.isoformat(), secret, claimed,
                                                         sum(map(len, files.values()))))
            sid = cur.lastrowid
            db.executemany("INSERT INTO files (submission, path, data) VALUES (?,?,?)",
                           [(sid, rel, data) for rel, data in files.items() if rel != CLAIMED])
            db.execute("COMMIT")
        return {"id": sid, "assignment_id": aid, "student": student, "timestamp": arrived.strftime(STAMP)}

    def submissions(self, course: str, *, aid: str | None = None, student: str | None = None) -> list[dict]:
        """Submissions (newest last) with their notebooks and feedback checksums; no bytes."""
        query = "SELECT id, assignment, student, arrived, claimed, bytes FROM submissions WHERE course=?"
        params: list = [course]
        if aid:
            query, params = query + " AND assignment=?", params + [aid]
        if student:
            query, params = query + " AND student=?", params + [student]
        with self._db() as db:
            rows = db.execute(query + " ORDER BY id", params).fetchall()
            out = []
            for sid, assignment, who, arrived, claimed, size in rows:
                paths = [p for (p,) in db.execute("SELECT path FROM files WHERE submission=? ORDER BY path", (sid,))]
                feedback = {nb: hashlib.md5(html).hexdigest() for nb, html in
                            db.execute("SELECT notebook, html FROM feedback WHERE submission=?", (sid,))}
                out.append({"id": sid, "assignment_id": assignment, "student": who,
                            "timestamp": datetime.datetime.fromisoformat(arrived).strftime(STAMP),
                            "arrived": arrived, "claimed": claimed, "bytes": size, "files": paths,
                            "notebooks": sorted(p[:-6] for p in paths if p.endswith(".ipynb") and "/" not in p),
                            "feedback": feedback})
        return out

    def submission(self, sid: int) -> dict:
        """One submission's record (as `submissions` gives it) with "course" and its files' bytes ("data")."""
        with self._db() as db:
            row = db.execute("SELECT course, assignment, student FROM submissions WHERE id=?", (sid,)).fetchone()
            if row is None:
                raise ExchangeRefusal(404, f"there is no submission {sid}")
            data = dict(db.execute("SELECT path, data FROM files WHERE submission=?", (sid,)).fetchall())
        record = next(s for s in self.submissions(row[0], aid=row[1], student=row[2]) if s["id"] == sid)
        return {**record, "course": row[0], "data": data}

    # feedback
    def set_feedback(self, course: str, aid: str, student: str, secret: str, html: dict[str, bytes]) -> int:
        """Attach feedback to the submission of `student` whose nbgrader secret is `secret`; its id."""
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT id FROM submissions WHERE course=? AND assignment=? AND student=? AND secret=? "
                             "ORDER BY id DESC LIMIT 1", (course, aid, student, secret.strip())).fetchone()
            if row is None:
                db.execute("ROLLBACK")
                raise ExchangeRefusal(404, f"no submission of {aid} by {student} has that submission secret: the "
                                           f"feedback must be for a submission collected from this exchange")
            at = _now().strftime(STAMP)
            db.executemany("INSERT OR REPLACE INTO feedback (submission, notebook, html, released_at) "
                           "VALUES (?,?,?,?)", [(row[0], nb, data, at) for nb, data in html.items()])
            db.execute("COMMIT")
            return row[0]

    def feedback(self, sid: int) -> dict[str, bytes]:
        with self._db() as db:
            return {f"{nb}.html": html for nb, html in
                    db.execute("SELECT notebook, html FROM feedback WHERE submission=?", (sid,))}


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
    def store(self) -> "Store":
        """The exchange's store."""
        return self.ex["store"]

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None))[1]
        message = exc.message if isinstance(exc, ExchangeRefusal) else (
            exc.log_message if isinstance(exc, web.HTTPError) and exc.log_message else self._reason)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message}))

    def _refuse(self, status: int, message: str):
        raise ExchangeRefusal(status, message)

    async def who(self) -> str:
        """The hub user the request's token belongs to (JupyterHub says, never the request)."""
        header = self.request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() not in ("token", "bearer") or not token.strip():
            self._refuse(401, "no token: the exchange service answers JupyterHub users only (nbgrader on the "
                              "hub sends your server's JUPYTERHUB_API_TOKEN)")
        model = await self.ex["hub_auth"].user_for_token(token.strip(), sync=False)
        if not model:
            self._refuse(401, "the hub does not know this token (expired or revoked): log in to the hub again")
        if model.get("kind", "user") != "user":
            self._refuse(403, f"{model.get('kind')} {model.get('name')} is not a user of the class")
        from jupyterhub.services.auth import check_scopes

        if not check_scopes({SCOPE}, set(model.get("scopes") or ())):
            self._refuse(403, f"{model['name']}'s token does not grant {SCOPE}: the hub must give it to users "
                              f"(./course hub does: load_roles and Spawner.server_token_scopes)")
        return model["name"]

    async def instructor(self, doing: str) -> str:
        name = await self.who()
        if name not in self.ex["instructors"]:
            self._refuse(403, f"{name} may not {doing}: only the instructor may")
        return name

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

    def _handle_request_exception(self, e):
        if isinstance(e, ExchangeRefusal):
            self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)

@web.stream_request_body
class _Upload(_Base):
    """A tar body, refused as soon as it is larger than a whole submission may be."""

    def prepare(self):
        self._body, self._over = io.BytesIO(), False
        length = self.request.headers.get("Content-Length")
        limit = self.ex["max_submission"]
        if length and length.isdigit() and int(length) > limit:
            self._refuse(413, f"this upload is {megabytes(int(length))}, over the limit of {megabytes(limit)} "
                              f"for everything handed in at once")

    def data_received(self, chunk: bytes) -> None:
        if self._over or self._body.tell() + len(chunk) > self.ex["max_submission"]:
            self._over = True  # refused once the body is in (an error raised here would only drop the line)
            return
        self._body.write(chunk)

    def files(self, *, limit: int | None, what: str) -> dict[str, bytes]:
        if self._over:
            self._refuse(413, f"this upload is over the limit of {megabytes(self.ex['max_submission'])} for "
                              f"everything handed in at once")
        return unpack(self._body.getvalue(), max_file=limit, what=what)

class _Health(_Base):
    """GET api/health: no token needed."""

    def get(self):
        self.send_json({"service": NAME, "course": self.ex["course"]})

class _Limits(_Base):
    """GET api/limits: the size limits."""

    async def get(self):
        await self.who()
        self.send_json({"max_file_bytes": self.ex["max_file"], "max_submission_bytes": self.ex["max_submission"]})

class _Assignments(_Base):
    """GET api/assignments/<course>: released assignments, each with the caller's deadline."""

    async def get(self, course):
        name = await self.who()
        listing = self.store.released(self.course(course))
        due: dict[str, str] = {}
        if self.ex["deadlines"] is not None:
            try:
                due = self.ex["deadlines"](name)
            except Exception:  # noqa: BLE001 - the gradebook unreadable: the listing still answers
                logging.getLogger(NAME).exception("could not read the due dates from the gradebook")
        for entry in listing:
            entry["due"] = due.get(entry["assignment_id"])  # this student's deadline, or None
        self.send_json(listing)

class _Assignment(_Upload):
    """GET (fetch) and POST (the instructor's release) api/assignments/<course>/<aid>."""

    async def get(self, course, aid):
        await self.who()
        self.send_tar(self.store.release_files(self.course(course), aid))

    async def post(self, course, aid):
        name = await self.instructor(f"release {aid}")
        files = self.files(limit=None, what=f"the release of {aid}")
        force = self.get_argument("force", "0") in ("1", "true", "yes")
        version = self.store.release(self.course(course), aid, files, by=name, force=force)
        self.send_json({"assignment_id": aid, "version": version, "files": sorted(files)})

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
        self.send_json(self.store.submissions(self.course(course), aid=aid,
                                         student=None if everyone else (student or name)))

class _Submit(_Upload):
    """POST api/submissions/<course>/<aid>: a submission, stored as the hub user who sends it."""

    async def post(self, course, aid):
        name = await self.who()
        claimed = self.get_argument("as", None)
        if claimed and claimed != name:
            self._refuse(403, f"you are {name} (the hub says so): you cannot submit as {claimed}; a submission "
                              f"is always stored as the hub user who sends it")
        self.course(course)
        self.store.release_files(course, aid)  # 404 unless released
        files = self.files(limit=self.ex["max_file"], what=f"the submission of {aid}")
        if not any(rel.endswith(".ipynb") for rel in files):
            self._refuse(400, f"the submission of {aid} has no notebook: submit from the folder you fetched")
        self.send_json(self.store.submit(course, aid, name, files))

class _Submission(_Base):
    """GET api/submission/<id>: its files, to its student or the instructor."""

    async def get(self, sid):
        name = await self.who()
        record = self._mine(name, int(sid), "submission")
        self.send_tar(record["data"])

    def _mine(self, name: str, sid: int, what: str) -> dict:
        record = self.store.submission(sid)  # 404 when there is none
        if record["student"] != name and name not in self.ex["instructors"]:
            self._refuse(403, f"{name} may not read the {what} of submission {sid}: it is another student's; "
                              f"only its student and the instructor may")
        return record

class _Feedback(_Submission):
    """GET api/feedback/<id>: its feedback HTML, to its student or the instructor."""

    async def get(self, sid):
        name = await self.who()
        self._mine(name, int(sid), "feedback")
        self.send_tar(self.store.feedback(int(sid)))

class _ReleaseFeedback(_Upload):
    """POST api/feedback/<course>/<aid>/<student>: the instructor's feedback for a submission."""

    async def post(self, course, aid, student):
        await self.instructor(f"release feedback for {aid}")
        files = self.files(limit=None, what=f"the feedback of {student} for {aid}")
        secret = files.pop(SECRET, b"").decode("utf-8", "replace")
        html = {rel[:-5]: data for rel, data in files.items() if rel.endswith(".html") and "/" not in rel}
        if not secret or not html:
            self._refuse(400, f"the feedback of {student} for {aid} needs its {SECRET} and <notebook>.html files")
        sid = self.store.set_feedback(self.course(course), aid, student, secret, html)
        self.send_json({"id": sid, "notebooks": sorted(html)})


def make_app(store: Store, hub_auth, *, course: str, instructors: set[str], prefix: str = f"/services/{NAME}/",
             max_file: int = DEFAULT_MAX_FILE, max_submission: int = DEFAULT_MAX_SUBMISSION, deadlines=None):
    """The tornado application. `hub_auth`: JupyterHub's HubAuth (or, in tests, anything with an async
    `user_for_token(token, sync=False)` that returns the hub's model of the token's owner, or None). `deadlines`:
    student -> {assignment: their deadline} (`gradebook_deadlines`), shown beside each released assignment."""
    settings = dict(store=store, hub_auth=hub_auth, course=course, instructors=frozenset(instructors),
                    max_file=max_file, max_submission=max_submission, deadlines=deadlines)

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
    ]
    return web.Application(routes, max_body_size=max_submission + 1024 * 1024, exchange=settings)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m twoprim.exchange.service", description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, required=True, help="the folder of the store (0700, the service's own)")
    p.add_argument("--course", required=True, help="nbgrader's course id")
    p.add_argument("--instructor", action="append", default=[], help="a hub user who may release and collect")
    p.add_argument("--max-file-mb", type=float, default=DEFAULT_MAX_FILE / 1e6,
                   help=f"the largest file of a submission, in MB (default {DEFAULT_MAX_FILE / 1e6:g})")
    p.add_argument("--max-submission-mb", type=float, default=None,
                   help="the largest submission, in MB (default: 4 times --max-file-mb)")
    p.add_argument("--gradebook", default=None, metavar="URL",
                   help="the course's gradebook, whose due dates (and each student's extension) students see")
    p.add_argument("--url", default=os.environ.get("JUPYTERHUB_SERVICE_URL", ""),
                   help="where to listen (default $JUPYTERHUB_SERVICE_URL, which JupyterHub sets)")
    p.add_argument("--off-loopback", action="store_true",
                   help="allow --url on an address other than loopback (a pod of its own in Kubernetes, reached "
                        "only through the cluster's network)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Serve the exchange (JupyterHub starts it: `python -m twoprim.exchange.service --store ... --course ...`)."""
    import asyncio

    from jupyterhub.services.auth import HubAuth

    args = _parser().parse_args(argv)
    url = urlparse(args.url)
    if not url.port or (url.hostname not in ("127.0.0.1", "localhost", "::1") and not args.off_loopback):
        raise SystemExit(f"error: the exchange listens on loopback only, not {args.url!r}: give --url "
                         f"http://127.0.0.1:PORT (JupyterHub's services entry sets it), or add --off-loopback")
    max_file = int(args.max_file_mb * 1e6)
    max_submission = int(args.max_submission_mb * 1e6) if args.max_submission_mb else 4 * max_file
    store = Store(args.store)
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{NAME}/")
    app = make_app(store, HubAuth(), course=args.course, instructors=set(args.instructor), prefix=prefix,
                   max_file=max_file, max_submission=max_submission,
                   deadlines=gradebook_deadlines(args.gradebook) if args.gradebook else None)
    logging.basicConfig(level=logging.INFO, format="[%(levelname).1s %(asctime)s " + NAME + "] %(message)s")

    async def serve():
        app.listen(url.port, address=url.hostname, max_body_size=max_submission + 1024 * 1024)
        logging.info("serving %s on %s (store %s, instructors %s, at most %s a file)", args.course, args.url,
                     store.path, ", ".join(sorted(args.instructor)) or "none", megabytes(max_file))
        await asyncio.Event().wait()  # serve until JupyterHub stops the service (SIGTERM) or Ctrl-C

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
