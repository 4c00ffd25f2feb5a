"""nbgrader's exchange, through the classroom's exchange service (`service.py`): the `Exchange*` classes nbgrader's
`ExchangeFactory` is configured with, so the Assignments tab, the formgrader's Release button and `nbgrader
fetch_assignment/submit/list/fetch_feedback/release_assignment/release_feedback/collect` work unchanged.

How a class reaches the service (`backend`):
  - in a JupyterHub server (the Assignments tab, the formgrader, a JupyterLab terminal): over HTTP, with the
    server's own $JUPYTERHUB_API_TOKEN, which the hub resolves to its user: the service decides what that user may;
  - as the account that runs the service (the instructor's `./course collect/feedback/release`, run in a shell or
    with runuser, outside any hub server): straight from the service's store, a folder only that account can open
    (`ServiceExchange.store`): the operating system's file permissions are the authentication.

Selected in nbgrader's configuration by `select(c, url=..., store=...)`: the student's (written by `./course hub`)
and the course's (`grader/nbgrader_config.py`, from grader/classroom.json, `configure_from_classroom`).

Why this module is long: nbgrader's seven Exchange classes are small adapters over one backend, and the two ways to
that backend (HTTP, the store) must answer alike; kept together, a class cannot drift from the backend it adapts.
"""

from __future__ import annotations

import datetime
import fnmatch
import glob
import hashlib
import json
import os
import pwd
import secrets
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange import abc
from nbgrader.exchange.abc.exchange import ExchangeError
from traitlets import Bool, Dict, Unicode, default

from twoprim.exchange import service as svc
from twoprim.exchange.intake import Submission, admit

__all__ = [
    "ServiceExchange",
    "ExchangeFetchAssignment",
    "ExchangeFetchFeedback",
    "ExchangeList",
    "ExchangeReleaseAssignment",
    "ExchangeReleaseFeedback",
    "ExchangeSubmit",
    "ExchangeCollect",
    "select",
    "configure_from_classroom",
    "uses_service",
    "collect_from_service",
    "refused_in_service",
    "newest_submissions",
    "Remote",
    "Local",
    "CLASSES",
]

CLASSES = {
    "exchange": "ServiceExchange",
    "fetch_assignment": "ExchangeFetchAssignment",
    "fetch_feedback": "ExchangeFetchFeedback",
    "release_assignment": "ExchangeReleaseAssignment",
    "release_feedback": "ExchangeReleaseFeedback",
    "list": "ExchangeList",
    "submit": "ExchangeSubmit",
    "collect": "ExchangeCollect",
}
CLASSROOM_FILE = "classroom.json"
SEALED_SUBMIT = "twoprim.exchange.filesystem.ExchangeSubmit"  # nbgrader's submit, the folder then only its owner's
TIMEOUT = (10, 900)  # connect, then read: a 100 MB upload on a busy machine
URLS_ENV = "TWOPRIM_EXCHANGE_URLS"  # a hub serving several courses: {course id: its service's URL}, the user's own
COURSE_FIRST = {"released", "release_files", "release", "submit", "submissions", "release_feedback", "refusals"}


# --- the two ways to the service -----------------------------------------------------------------------------


class Remote:
    """The service over HTTP, as the hub user whose token this is."""

    def __init__(self, url: str, token: str):
        import requests

        self.url = url.rstrip("/") + "/api/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"token {token}"

    def _call(self, method: str, path: str, *, params=None, data: bytes | None = None):
        import requests

        try:
            response = self.session.request(
                method,
                self.url + path,
                params=params,
                data=data,
                timeout=TIMEOUT,
                headers={"Content-Type": "application/x-tar"} if data is not None else None,
            )
        except requests.RequestException as err:
            raise ExchangeError(
                f"the exchange service at {self.url} does not answer ({type(err).__name__}): is the "
                f"classroom (./course hub) running? Ask your instructor"
            ) from err
        if response.status_code >= 400:
            try:
                message = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:300] or response.reason
            raise ExchangeError(f"the exchange refused ({response.status_code}): {message}")
        return response

    def _json(self, method, path, **kw):
        return self._call(method, path, **kw).json()

    def _files(self, path) -> dict[str, bytes]:
        return svc.unpack(self._call("GET", path).content, what="the exchange's answer")

    def limits(self) -> dict:
        return self._json("GET", "limits")

    def released(self, course):
        return self._json("GET", f"assignments/{course}")

    def release_files(self, course, aid):
        return self._files(f"assignments/{course}/{aid}")

    def release(self, course, aid, files, *, force):
        return self._json("POST", f"assignments/{course}/{aid}", params={"force": int(force)}, data=svc.pack(files))

    def submit(self, course, aid, files, *, claimed=None):
        return self._json(
            "POST", f"submissions/{course}/{aid}", params={"as": claimed} if claimed else None, data=svc.pack(files)
        )

    def submissions(self, course, *, aid=None, student=None, everyone=False):
        params = {k: v for k, v in (("assignment", aid), ("student", student), ("all", int(everyone) or None)) if v}
        return self._json("GET", f"submissions/{course}", params=params)

    def submission_files(self, sid):
        return self._files(f"submission/{sid}")

    def feedback(self, sid):
        return self._files(f"feedback/{sid}")

    def release_feedback(self, course, aid, student, files):
        return self._json("POST", f"feedback/{course}/{aid}/{student}", data=svc.pack(files))

    def refusals(self, course, aid=None):
        return self._json("GET", f"refusals/{course}", params={"assignment": aid} if aid else None)


class Local:
    """The service's store itself, for the account that runs the service (the instructor): everything allowed."""

    def __init__(self, store: str | os.PathLike):
        self.store = svc.Store(store)
        self.name = pwd.getpwuid(os.getuid()).pw_name

    def limits(self):
        return {
            "max_file_bytes": svc.DEFAULT_MAX_FILE,
            "max_submission_bytes": svc.DEFAULT_MAX_SUBMISSION,
            "max_submissions": svc.DEFAULT_MAX_SUBMISSIONS,
            "max_stored_bytes": svc.DEFAULT_MAX_STORED,
        }

    def _do(self, call, *args, **kw):
        try:
            return call(*args, **kw)
        except svc.ExchangeRefusal as err:
            raise ExchangeError(f"the exchange refused: {err.message}") from err

    def released(self, course):
        return self._do(self.store.released, course)

    def release_files(self, course, aid):
        return self._do(self.store.release_files, course, aid)

    def release(self, course, aid, files, *, force):
        return self._do(self.store.release, course, aid, files, by=self.name, force=force)

    def submit(self, course, aid, files, *, claimed=None):
        if claimed and claimed != self.name:
            raise ExchangeError(f"you are {self.name}: you cannot submit as {claimed}")
        self._do(self.store.release_notebooks, course, aid)
        return self._do(self.store.submit, course, aid, self.name, files, max_file=svc.DEFAULT_MAX_FILE)

    def submissions(self, course, *, aid=None, student=None, everyone=False):
        return self._do(self.store.submissions, course, aid=aid, student=None if everyone else (student or self.name))

    def submission_files(self, sid):
        return self._do(self.store.submission, sid)["data"]

    def feedback(self, sid):
        return self._do(self.store.feedback, sid)

    def release_feedback(self, course, aid, student, files):
        files = dict(files)
        secret = files.pop(svc.SECRET, b"").decode()
        html = {rel[:-5]: data for rel, data in files.items() if rel.endswith(".html")}
        return {"id": self._do(self.store.set_feedback, course, aid, student, secret, html)}

    def refusals(self, course, aid=None):
        return self._do(self.store.refusals, course, aid)


def _store_readable(store: str) -> bool:
    return bool(store) and os.access(Path(store) / svc.Store.FILE, os.R_OK | os.W_OK)


def backend(url: str, store: str = "", token: str | None = None):
    """HTTP with the hub token when there is one (a hub server); else the store, when this account can open it."""
    token = token if token is not None else os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if token and url:
        return Remote(url, token)
    if _store_readable(store):
        return Local(store)
    if not url:
        raise ExchangeError(
            "no exchange service is configured (ServiceExchange.service_url): run this on the "
            "classroom's hub, where ./course hub configures it"
        )
    raise ExchangeError(
        f"the exchange service at {url} answers JupyterHub users only, and this process has no "
        f"JUPYTERHUB_API_TOKEN: run it in your JupyterLab on the hub (a terminal there has one)"
        + (f", or as the account that owns {store}" if store else "")
    )


# --- nbgrader's classes --------------------------------------------------------------------------------------


class ServiceExchange(abc.Exchange):
    """nbgrader's exchange over the classroom's exchange service (HTTP, the hub's token): the shared settings and
    calls."""

    service_url = Unicode(help="The exchange service's URL, e.g. http://127.0.0.1:PORT/services/twoprim-exchange/").tag(
        config=True
    )
    store = Unicode(
        "", help="The service's store (a folder only its account can read): that account's commands read it directly"
    ).tag(config=True)
    api_token = Unicode(
        help="The hub token sent to the service (default: $JUPYTERHUB_API_TOKEN, the one the hub "
        "gives each user's server)"
    ).tag(config=True)
    path_includes_course = Bool(False, help="Fetch into <assignment_dir>/<course>/<assignment>").tag(config=True)
    coursedir: CourseDirectory  # nbgrader's trait (allow_none): every app that runs an exchange sets it
    service_urls = Dict(
        help="A hub serving several courses: course id -> that course's exchange service URL, for "
        "the courses this user is in (default: $TWOPRIM_EXCHANGE_URLS, which ./course hub "
        "sets in each server from the user's nbgrader-COURSE groups)"
    ).tag(config=True)

    @default("service_urls")
    def _urls_default(self):
        try:
            urls = json.loads(os.environ.get(URLS_ENV) or "{}")
        except ValueError:
            return {}
        return urls if isinstance(urls, dict) else {}

    @default("service_url")
    def _url_default(self):
        return os.environ.get("TWOPRIM_EXCHANGE_URL", "")

    @default("api_token")
    def _token_default(self):
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    _backend = None

    @property
    def exchange(self):
        if self._backend is None:
            try:
                self._backend = backend(self.service_url, self.store, self.api_token)
            except ExchangeError as err:
                self.fail(str(err))
        return self._backend

    _backends = None

    def backend_for(self, course: str | None):
        """The service of `course` on a hub of several courses (its own URL), else the one exchange."""
        if not self.service_urls or not course:
            return self.exchange
        if course not in self.service_urls:
            self.fail(f"{course!r} is not one of your courses on this hub ({', '.join(sorted(self.service_urls))})")
        self._backends = self._backends or {}
        if course not in self._backends:
            try:
                self._backends[course] = backend(self.service_urls[course], "", self.api_token)
            except ExchangeError as err:
                self.fail(str(err))
        return self._backends[course]

    def call(self, method: str, *args, course: str | None = None, **kw):
        if course is None and method in COURSE_FIRST and args:
            course = args[0]
        try:
            return getattr(self.backend_for(course), method)(*args, **kw)
        except ExchangeError as err:
            self.fail(str(err))

    def courses(self) -> list[str]:
        """The course ids to list: the one configured, else (several courses on one hub) each of the user's."""
        if self.coursedir.course_id or not self.service_urls:
            return [self.course_id()]
        return sorted(self.service_urls)

    def course_id(self) -> str:
        if not self.coursedir.course_id:
            self.fail("No course id specified. Re-run with --course flag.")
        return self.coursedir.course_id

    def local_dir(self, aid: str, course: str | None = None) -> str:
        parts = [course or self.coursedir.course_id, aid] if self.path_includes_course else [aid]
        return os.path.abspath(os.path.join(self.assignment_dir, *parts))

    def gather(self, folder: str, *, limit: int | None = None) -> dict[str, bytes]:
        """The regular files under `folder` (nbgrader's CourseDirectory.ignore patterns left out; links skipped)."""
        files: dict[str, bytes] = {}
        ignore = list(self.coursedir.ignore)
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = [
                d
                for d in dirnames
                if not any(fnmatch.fnmatch(d, p) for p in ignore) and not os.path.islink(os.path.join(dirpath, d))
            ]
            for name in filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, folder).replace(os.sep, "/")
                if any(fnmatch.fnmatch(name, p) for p in ignore) or rel in (svc.SECRET, svc.CLAIMED):
                    continue
                if os.path.islink(path) or not os.path.isfile(path):
                    self.log.warning("Skipping %s: not a regular file", rel)
                    continue
                size = os.path.getsize(path)
                if limit is not None and size > limit:
                    self.fail(
                        f"{rel} is {svc.megabytes(size)}, over the limit of {svc.megabytes(limit)} per file: "
                        f"make it smaller (clear large outputs: Edit > Clear Outputs of All Cells, then save) "
                        f"and submit again"
                    )
                with open(path, "rb") as f:
                    files[rel] = f.read()
        return files

    def init_src(self):
        pass

    def init_dest(self):
        pass

    def copy_files(self):
        pass


def _write(dest: str, files: dict[str, bytes], *, only_missing: bool = False, log=None) -> None:
    for rel, data in sorted(files.items()):
        path = os.path.join(dest, *rel.split("/"))
        if only_missing and os.path.lexists(path):
            continue
        if only_missing and log:
            log.warning("Replacing missing file '%s'", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


class ExchangeFetchAssignment(abc.ExchangeFetchAssignment, ServiceExchange):
    """`nbgrader fetch_assignment` from the exchange service."""

    def init_src(self):
        self.files = self.call("release_files", self.course_id(), self.coursedir.assignment_id)

    def init_dest(self):
        self.dest_path = self.local_dir(self.coursedir.assignment_id)
        if os.path.isdir(self.dest_path) and not self.replace_missing_files:
            self.fail(f"You already have a copy of the assignment in this directory: {self.coursedir.assignment_id}")

    def copy_files(self):
        exists = os.path.isdir(self.dest_path)
        _write(self.dest_path, self.files, only_missing=exists, log=self.log)
        self.log.info("Fetched as: %s %s", self.coursedir.course_id, self.coursedir.assignment_id)


class ExchangeSubmit(abc.ExchangeSubmit, ServiceExchange):
    """`nbgrader submit` to the exchange service, which stores it as the hub user who sends it."""

    def init_src(self):
        self.src_path = self.local_dir(self.coursedir.assignment_id)
        if not os.path.isdir(self.src_path):
            self.fail(f"Assignment not found at: {self.src_path}")

    def init_dest(self):
        self.course_id()
        student = self.coursedir.student_id
        self.claimed = student if student and student != "*" else None

    def check_filename_diff(self, released: list[str], submitted: list[str]) -> None:
        missing = sorted(set(released) - set(submitted))
        extra = sorted(set(submitted) - set(released))
        if missing and self.strict:
            self.fail(
                f"Assignment {self.coursedir.assignment_id} not submitted. There are missing notebooks for "
                f"the submission: {', '.join(missing)}"
            )
        if missing or extra:
            self.log.warning(
                "Possible missing notebooks (%s) and/or extra notebooks (%s) submitted for %s",
                ", ".join(missing) or "none",
                ", ".join(extra) or "none",
                self.coursedir.assignment_id,
            )

    def copy_files(self):
        course, aid = self.coursedir.course_id, self.coursedir.assignment_id
        limit = self.call("limits", course=course).get("max_file_bytes")
        files = self.gather(self.src_path, limit=limit)
        released = next((a for a in self.call("released", course) if a["assignment_id"] == aid), None)
        if released is None:
            self.fail(f"{aid} is not released: there is nothing to submit it to")
        self.check_filename_diff(
            [f for f in released["files"] if f.endswith(".ipynb")], [f for f in files if f.endswith(".ipynb")]
        )
        # the student's quota and where the notebooks are: the service checks them, says which limit, and records
        # the refusal for the instructor's collect
        files[svc.SECRET] = secrets.token_hex(64).encode()
        files[svc.CLAIMED] = self.timestamp.encode()  # the student's clock: shown to the instructor, never used
        answer = self.call("submit", course, aid, files, claimed=self.claimed)
        self.log.info("Submitted as: %s %s %s (submission %s)", course, aid, answer["timestamp"], answer["id"])
        self.submission = answer


class ExchangeList(abc.ExchangeList, ServiceExchange):
    """`nbgrader list`: released assignments, and the caller's submissions with their feedback."""

    def _submitted(self, record: dict, course: str) -> dict:
        aid = record["assignment_id"]
        local = self.local_dir(aid, course)
        info = {
            "course_id": course,
            "student_id": record["student"],
            "assignment_id": aid,
            "timestamp": record["timestamp"],
            "status": "submitted",
            "path": f"{self.service_url}#{record['id']}",
            "submission_id": record["id"],
            "notebooks": [],
        }
        for nb in record["notebooks"]:
            here = os.path.join(local, "feedback", record["timestamp"], f"{nb}.html")
            has_local = os.path.isfile(here)
            there = record["feedback"].get(nb)
            updated = False
            if has_local and there:
                with open(here, "rb") as f:
                    updated = hashlib.md5(f.read()).hexdigest() != there
            info["notebooks"].append(
                {
                    "notebook_id": nb,
                    "path": f"{info['path']}/{nb}.ipynb",
                    "has_local_feedback": has_local,
                    "has_exchange_feedback": bool(there),
                    "local_feedback_path": here if has_local else None,
                    "feedback_updated": updated,
                }
            )
        nbs = info["notebooks"]
        info["has_local_feedback"] = bool(nbs) and all(n["has_local_feedback"] for n in nbs)
        info["has_exchange_feedback"] = bool(nbs) and all(n["has_exchange_feedback"] for n in nbs)
        info["feedback_updated"] = any(n["feedback_updated"] for n in nbs)
        info["local_feedback_path"] = (
            os.path.join(local, "feedback", record["timestamp"]) if info["has_local_feedback"] else None
        )
        return info

    def list_files(self):
        return [entry for course in self.courses() for entry in self._list(course)]

    def _list(self, course: str) -> list[dict]:
        aid = self.coursedir.assignment_id or None
        if self.inbound or self.cached:
            student = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else None
            records = self.call("submissions", course, aid=aid, student=student, everyone=self.inbound)
            groups: dict[tuple, list] = {}
            for record in records:
                groups.setdefault((record["student"], record["assignment_id"]), []).append(
                    self._submitted(record, course)
                )
            assignments = [
                {
                    "course_id": course,
                    "student_id": who,
                    "assignment_id": a,
                    "status": "submitted",
                    "submissions": sorted(subs, key=lambda s: s["timestamp"]),
                }
                for (who, a), subs in sorted(groups.items())
            ]
            self.log.info("Submitted assignments:")
            for assignment in assignments:
                for info in assignment["submissions"]:
                    self.log.info("%s %s %s %s", course, info["student_id"], info["assignment_id"], info["timestamp"])
            return assignments
        assignments = []
        for released in self.call("released", course):
            if aid and released["assignment_id"] != aid:
                continue
            name = released["assignment_id"]
            local = self.local_dir(name, course)
            info = {"course_id": course, "assignment_id": name}
            if os.path.exists(local):
                info.update(
                    status="fetched",
                    path=local,
                    notebooks=[
                        {"notebook_id": Path(p).stem, "path": os.path.abspath(p)}
                        for p in sorted(glob.glob(os.path.join(local, "*.ipynb")))
                    ],
                )
            else:
                path = f"{self.service_url}#{name}"
                info.update(
                    status="released",
                    path=path,
                    notebooks=[
                        {"notebook_id": f[:-6], "path": f"{path}/{f}"}
                        for f in released["files"]
                        if f.endswith(".ipynb") and "/" not in f
                    ],
                )
            assignments.append(info)
        self.log.info("Released assignments:")
        for info in assignments:
            self.log.info(
                "%s %s%s", course, info["assignment_id"], " (already downloaded)" if info["status"] == "fetched" else ""
            )
        return assignments

    def remove_files(self):
        self.fail("the exchange service keeps every release and submission: nothing is removed from it")


class ExchangeFetchFeedback(abc.ExchangeFetchFeedback, ServiceExchange):
    """`nbgrader fetch_feedback`: the feedback on the caller's own submissions."""

    def init_src(self):
        aid = self.coursedir.assignment_id
        self.records = [r for r in self.call("submissions", self.course_id(), aid=aid or None) if r["feedback"]]
        if not self.records:
            self.log.warning("No feedback yet for %s", aid or "any assignment")

    def init_dest(self):
        pass

    def copy_files(self):
        for record in self.records:
            dest = os.path.join(self.local_dir(record["assignment_id"]), "feedback", record["timestamp"])
            files = {
                rel: data
                for rel, data in self.call("feedback", record["id"], course=self.coursedir.course_id).items()
                if rel.endswith(".html") and "/" not in rel
            }
            _write(dest, files)
            for rel in files:
                self.log.info("Fetched feedback: %s", os.path.join(dest, rel))


class ExchangeReleaseAssignment(abc.ExchangeReleaseAssignment, ServiceExchange):
    """`nbgrader release_assignment` (the instructor's) to the exchange service."""

    def init_src(self):
        aid = self.coursedir.assignment_id
        self.src_path = self.coursedir.format_path(self.coursedir.release_directory, ".", aid)
        if not os.path.isdir(self.src_path):
            source = self.coursedir.format_path(self.coursedir.source_directory, ".", aid)
            if os.path.isdir(source):
                self.fail(
                    f"Assignment found in '{source}' but not '{self.src_path}', run `nbgrader "
                    f"generate_assignment` first."
                )
            self.fail(f"Assignment not found at: {self.src_path}")

    def copy_files(self):
        course, aid = self.course_id(), self.coursedir.assignment_id
        files = self.gather(self.src_path)
        answer = self.call("release", course, aid, files, force=self.force)
        self.log.info(
            "Released as: %s %s (%s)",
            course,
            aid,
            answer if isinstance(answer, int) else f"version {answer.get('version')}",
        )


class ExchangeReleaseFeedback(abc.ExchangeReleaseFeedback, ServiceExchange):
    """`nbgrader release_feedback` (the instructor's): each student's feedback HTML, matched by its secret."""

    def copy_files(self):
        course, aid = self.course_id(), self.coursedir.assignment_id
        exclude = set(filter(None, (self.coursedir.student_id_exclude or "").split(",")))
        student = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else "*"
        pattern = self.coursedir.format_path(self.coursedir.feedback_directory, student, aid)
        for folder in sorted(glob.glob(pattern)):
            who = Path(folder).parent.name
            if who in exclude:
                continue
            files = {Path(p).name: Path(p).read_bytes() for p in glob.glob(os.path.join(folder, "*.html"))}
            secret = Path(folder, svc.SECRET)
            if not files or not secret.is_file():
                self.log.warning("Skipping %s: no feedback HTML or no %s in %s", who, svc.SECRET, folder)
                continue
            files[svc.SECRET] = secret.read_bytes()
            answer = self.call("release_feedback", course, aid, who, files)
            self.log.info("Released feedback for '%s' on %s/%s (submission %s)", who, course, aid, answer["id"])


class ExchangeCollect(abc.ExchangeCollect, ServiceExchange):
    """`nbgrader collect` (the instructor's): each student's newest submission, through the intake's checks."""

    def copy_files(self):
        course, aid = self.course_id(), self.coursedir.assignment_id
        subs = newest_submissions(self.exchange, course, aid)
        report = admit(aid, subs, [], root=Path(self.coursedir.root), refused=self.call("refusals", course, aid))
        for line in str(report).splitlines():
            self.log.info(line)
        self.report = report


# --- the course's side ---------------------------------------------------------------------------------------


def _arrived(record: dict) -> datetime.datetime:
    return datetime.datetime.fromisoformat(record["arrived"])


def newest_submissions(exchange, course: str, aid: str) -> list[Submission]:
    """Each student's newest submission of `aid`, as intake takes them (earlier ones stay in the service)."""
    newest: dict[str, dict] = {}
    for record in exchange.submissions(course, aid=aid, everyone=True):
        if record["student"] not in newest or record["id"] > newest[record["student"]]["id"]:
            newest[record["student"]] = record
    out = []
    for student, record in sorted(newest.items()):
        files = exchange.submission_files(record["id"])
        files.pop(svc.CLAIMED, None)
        out.append(
            Submission(
                student=student,
                files=files,
                arrived=_arrived(record),
                source=f"service submission {record['id']}",
                claimed=record.get("claimed"),
            )
        )
    return out


def classroom(root: Path) -> dict:
    """The classroom's settings (grader/classroom.json) as a dict, or {} where there are none."""
    try:
        return json.loads((Path(root) / "grader" / CLASSROOM_FILE).read_text())
    except (OSError, ValueError):
        return {}


def uses_service(root: Path) -> bool:
    """Whether the course's classroom (grader/classroom.json, written by ./course hub) uses the exchange service."""
    return classroom(root).get("exchange_kind") == "service"


def collect_from_service(aid: str, root: Path) -> list[Submission]:
    """Each student's newest submission of `aid` in the classroom's exchange service, for `intake.admit`: the
    student the hub authenticated, the bytes, the service's arrival time. As the service's account (the instructor)
    read from its store; elsewhere over HTTP with $JUPYTERHUB_API_TOKEN (the instructor's)."""
    from twoprim.config import COURSE_ID
    from twoprim.core.errors import CourseError

    room = classroom(root)
    try:
        return newest_submissions(
            backend(room.get("exchange_url", ""), room.get("exchange_store", "")),
            room.get("course_id") or COURSE_ID,
            aid,
        )
    except ExchangeError as err:
        raise CourseError(str(err)) from err


def refused_in_service(aid: str, root: Path) -> list[dict]:
    """Every submission of `aid` the classroom's exchange service refused (over a quota, a size, a misplaced
    notebook...): student, time, the limit hit and the message the student saw; for collect's report."""
    from twoprim.config import COURSE_ID
    from twoprim.core.errors import CourseError

    room = classroom(root)
    try:
        return backend(room.get("exchange_url", ""), room.get("exchange_store", "")).refusals(
            room.get("course_id") or COURSE_ID, aid
        )
    except ExchangeError as err:
        raise CourseError(str(err)) from err


def select(c, *, url: str, store: str = "") -> None:
    """Point nbgrader's ExchangeFactory at this module's classes (`c`: a traitlets config)."""
    for trait, name in CLASSES.items():
        setattr(c.ExchangeFactory, trait, f"{__name__}.{name}")
    c.ServiceExchange.service_url = url
    if store:
        c.ServiceExchange.store = store


def config_text(url: str) -> str:
    """The lines of an nbgrader_config.py that select the service (a student's, written by ./course hub)."""
    lines = [f"c.ExchangeFactory.{trait} = {f'{__name__}.{name}'!r}" for trait, name in CLASSES.items()]
    return "\n".join([*lines, f"c.ServiceExchange.service_url = {url!r}"]) + "\n"


def configure_from_classroom(c, grader: str | os.PathLike) -> bool:
    """In the course's nbgrader configuration: when grader/classroom.json says the classroom uses the exchange
    service, select it (with its store, which only the instructor's account can open). True when it did. Otherwise
    (nbgrader's shared folder) submit seals each submission's folder (`filesystem.ExchangeSubmit`)."""
    room = classroom(Path(grader).parent)
    if room.get("exchange_kind") != "service":
        c.ExchangeFactory.submit = SEALED_SUBMIT
        return False
    select(c, url=room.get("exchange_url", ""), store=room.get("exchange_store", ""))
    return True
