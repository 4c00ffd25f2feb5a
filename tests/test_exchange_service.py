"""The exchange service (twoprim/exchange/service.py) and nbgrader's classes that use it (client.py), without a hub.

The service runs on loopback in this process, with a stub in place of JupyterHub's HubAuth that knows three tokens
(the instructor's, ann's, ben's): a whole class cycle through nbgrader's own ExchangeFactory (release, fetch,
submit, list, collect into grader/submitted/ by intake.admit, release feedback, fetch feedback); what a student may
not do (submit as another, read another's submission or feedback, list the class, release), each refused with its
status and message; the size limit, named in the refusal; and a restart over the same store that loses nothing.
Quotas: the 51st submission and one past the stored bytes refused naming the limit (cut off as it arrives), and
collect listing the refusals. Once as the hub starts it (`python -m twoprim.exchange.service`, a stub for the hub's
API): its defaults, and its memory under its own limit while three 400 MB uploads arrive.
"""

from __future__ import annotations

import asyncio
import http.server
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
import requests
from tornado.httpserver import HTTPServer

from twoprim.exchange import service as svc

from .servers import free_port

COURSE = "two-primitives"
AID = "ex01_dot"
TOKENS = {"t-teach": "teach", "t-ann": "ann", "t-ben": "ben"}


class StubHubAuth:
    """What HubAuth.user_for_token answers: the model of the token's user (with the service's access scope)."""

    def __init__(self, scoped=True):
        self.scoped = scoped

    async def user_for_token(self, token, sync=True):
        if token == "t-noscope":
            return {"name": "cat", "kind": "user", "scopes": ["self"]}
        name = TOKENS.get(token)
        return name and {"name": name, "kind": "user", "scopes": [svc.SCOPE] if self.scoped else []}


class Running:
    """The service app on a free loopback port, in a thread of its own."""

    server: HTTPServer  # (once `run` has started it)

    def __init__(self, store: Path, **kw):
        self.store = svc.Store(store)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/services/{svc.NAME}/"
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            app = svc.make_app(self.store, StubHubAuth(), course=COURSE, instructors={"teach"}, **kw)
            self.server = app.listen(
                self.port, address="127.0.0.1", max_body_size=app.settings.get("max_body_size") or 10**9
            )
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def stop(self):
        async def close():
            self.server.stop()
            await self.server.close_all_connections()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def call(self, method, path, token=None, **kw):
        headers = {"Authorization": f"token {token}"} if token else {}
        return requests.request(method, self.url + "api/" + path, headers=headers, timeout=60, **kw)


def _notebook(text: str, pad: int = 0) -> bytes:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(text)])
    if pad:
        nb.cells.append(nbformat.v4.new_raw_cell("x" * pad))
    return nbformat.writes(nb).encode()


def _config(course: Path, assignment_dir: Path, url: str, token: str):
    from traitlets.config import Config

    c = Config()
    c.CourseDirectory.root = str(course)
    c.CourseDirectory.course_id = COURSE
    c.CourseDirectory.release_directory = "exercises"
    c.CourseDirectory.submitted_directory = "grader/submitted"
    c.CourseDirectory.feedback_directory = "grader/feedback"
    c.Exchange.assignment_dir = str(assignment_dir)
    from twoprim.exchange.client import select

    select(c, url=url)
    c.ServiceExchange.api_token = token
    return c


def _run(kind: str, c, aid: str = AID, **attrs):
    """nbgrader's ExchangeFactory.<kind>(...).start(), as the Assignments tab and the nbgrader apps call it."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeFactory

    coursedir = CourseDirectory(config=c)
    coursedir.assignment_id = aid
    for key, value in attrs.pop("coursedir", {}).items():
        setattr(coursedir, key, value)
    app = getattr(ExchangeFactory(config=c), kind)(coursedir=coursedir, authenticator=Authenticator(config=c), config=c)
    for key, value in attrs.items():
        setattr(app, key, value)
    return app, app.start()


@pytest.fixture
def room(tmp_path):
    course = tmp_path / "course"
    (course / "exercises" / AID).mkdir(parents=True)
    stub = _notebook("def dot(x, w):\n    raise NotImplementedError")
    (course / "exercises" / AID / f"{AID}.ipynb").write_bytes(stub)
    (course / "exercises" / AID / "data.csv").write_text("1,2\n")
    state = {
        "course": course,
        "tmp": tmp_path,
        "service": Running(tmp_path / "store", max_file=2_000_000, max_submission=8_000_000),
    }
    try:
        yield state
    finally:
        state["service"].stop()  # the one running now (a test may have restarted it)


def _home(room, who: str) -> Path:
    home = room["tmp"] / who
    home.mkdir(exist_ok=True)
    return home


def test_a_class_cycle_through_nbgrader_classes(room):
    """release, fetch, submit (twice), list, collect (the newest, the service's time), feedback, fetch feedback."""
    from nbgrader.exchange import ExchangeError

    from twoprim.exchange.client import Remote, collect_from_service, newest_submissions

    s, course = room["service"], room["course"]
    teach = _config(course, course, s.url, "t-teach")
    _run("ReleaseAssignment", teach)
    with pytest.raises(ExchangeError, match="released already: release it again with --force"):
        _run("ReleaseAssignment", teach)
    _run("ReleaseAssignment", teach, force=True)

    ann = _config(course, _home(room, "ann"), s.url, "t-ann")
    _, listed = _run("List", ann, aid="")
    assert [(a["assignment_id"], a["status"], [n["notebook_id"] for n in a["notebooks"]]) for a in listed] == [
        (AID, "released", [AID])
    ]
    _run("FetchAssignment", ann)
    mine = _home(room, "ann") / AID / f"{AID}.ipynb"
    assert mine.read_bytes() == (course / "exercises" / AID / f"{AID}.ipynb").read_bytes()
    assert (_home(room, "ann") / AID / "data.csv").read_text() == "1,2\n"
    _, listed = _run("List", ann, aid="")
    assert listed[0]["status"] == "fetched"

    mine.write_bytes(_notebook("def dot(x, w):\n    return 0  # first try"))
    first, _ = _run("Submit", ann)
    mine.write_bytes(_notebook("def dot(x, w):\n    return (x * w).sum()"))
    second, _ = _run("Submit", ann)
    assert second.submission["id"] > first.submission["id"]
    assert second.submission["timestamp"] >= first.submission["timestamp"]
    _, cached = _run("List", ann, cached=True)
    assert [len(a["submissions"]) for a in cached] == [2] and cached[0]["student_id"] == "ann"
    # both kept in the service, bytes as handed in
    kept = s.store.submissions(COURSE, aid=AID, student="ann")
    assert [r["id"] for r in kept] == [first.submission["id"], second.submission["id"]]
    assert b"first try" in s.store.submission(first.submission["id"])["data"][f"{AID}.ipynb"]

    subs = newest_submissions(Remote(s.url, "t-teach"), COURSE, AID)
    assert [(x.student, x.source) for x in subs] == [("ann", f"service submission {second.submission['id']}")]
    assert b"(x * w).sum()" in subs[0].files[f"{AID}.ipynb"] and "timestamp.txt" not in subs[0].files
    assert subs[0].claimed and subs[0].arrived.strftime("%Y-%m-%d %H:%M:%S.%f UTC") == second.submission["timestamp"]
    collect, _ = _run("Collect", teach)  # the formgrader's Collect button, `nbgrader collect`: intake.admit
    assert [r["student"] for r in collect.report.new] == ["ann"]
    collected = course / "grader" / "submitted" / "ann" / AID
    assert (collected / "timestamp.txt").read_text() == second.submission["timestamp"]  # the service's clock
    assert (collected / f"{AID}.ipynb").read_bytes() == mine.read_bytes()

    # feedback, as `nbgrader generate_feedback` leaves it: grader/feedback/<student>/<aid>/ with the secret
    feedback = course / "grader" / "feedback" / "ann" / AID
    feedback.mkdir(parents=True)
    (feedback / f"{AID}.html").write_text("<p>ex01_dot (Score: 15.0 / 15.0)</p>")
    for name in ("timestamp.txt", "submission_secret.txt"):
        (feedback / name).write_bytes((collected / name).read_bytes())
    _, cached = _run("List", ann, cached=True)
    assert [x["has_exchange_feedback"] for x in cached[0]["submissions"]] == [False, False]
    _run("ReleaseFeedback", teach)
    _, cached = _run("List", ann, cached=True)
    assert [x["has_exchange_feedback"] for x in cached[0]["submissions"]] == [False, True]
    _run("FetchFeedback", ann)
    html = _home(room, "ann") / AID / "feedback" / second.submission["timestamp"] / f"{AID}.html"
    assert "Score: 15.0 / 15.0" in html.read_text()
    _, cached = _run("List", ann, cached=True)
    newest = cached[0]["submissions"][-1]
    assert newest["has_local_feedback"] and not newest["feedback_updated"]
    assert newest["local_feedback_path"] == str(html.parent)

    # the instructor's own account reads the store directly (./course collect as the instructor, no token)
    (course / "grader" / "classroom.json").write_text(
        json.dumps({"exchange_kind": "service", "exchange_url": s.url, "exchange_store": str(s.store.folder)})
    )
    env = os.environ.pop("JUPYTERHUB_API_TOKEN", None)
    try:
        direct = collect_from_service(AID, course)
    finally:
        if env is not None:
            os.environ["JUPYTERHUB_API_TOKEN"] = env
    assert [(x.student, x.files) for x in direct] == [(x.student, x.files) for x in subs]


def test_a_student_cannot_act_for_another_or_see_the_class(room):
    """ben: --student ann refused (and nothing stored), ann's submission and feedback refused, the class's list and
    ann's list refused, releasing refused; with no token, or a token without the service's scope: refused."""
    from nbgrader.exchange import ExchangeError

    s, course = room["service"], room["course"]
    _run("ReleaseAssignment", _config(course, course, s.url, "t-teach"))
    for who in ("ann", "ben"):
        c = _config(course, _home(room, who), s.url, f"t-{who}")
        _run("FetchAssignment", c)
        if who == "ann":
            _run("Submit", c)
    ann_id = s.store.submissions(COURSE, student="ann")[0]["id"]
    ben = _config(course, _home(room, "ben"), s.url, "t-ben")
    with pytest.raises(
        ExchangeError, match="refused \\(403\\): you are ben \\(the hub says so\\): you cannot submit as ann"
    ):
        _run("Submit", ben, coursedir={"student_id": "ann"})
    assert [r["student"] for r in s.store.submissions(COURSE)] == ["ann"]  # nothing stored for the forged one

    body = svc.pack({f"{AID}.ipynb": _notebook("forged")})
    refused = {
        "submit as ann": s.call("POST", f"submissions/{COURSE}/{AID}", "t-ben", params={"as": "ann"}, data=body),
        "ann's submission": s.call("GET", f"submission/{ann_id}", "t-ben"),
        "ann's feedback": s.call("GET", f"feedback/{ann_id}", "t-ben"),
        "the class": s.call("GET", f"submissions/{COURSE}", "t-ben", params={"all": 1}),
        "ann's list": s.call("GET", f"submissions/{COURSE}", "t-ben", params={"student": "ann"}),
        "release": s.call("POST", f"assignments/{COURSE}/{AID}", "t-ben", params={"force": 1}, data=body),
        "feedback release": s.call("POST", f"feedback/{COURSE}/{AID}/ann", "t-ben", data=body),
    }
    expected = {
        "submit as ann": "you are ben (the hub says so): you cannot submit as ann",
        "ann's submission": f"ben may not read the submission of submission {ann_id}: it is another student's",
        "ann's feedback": f"ben may not read the feedback of submission {ann_id}: it is another student's",
        "the class": "ben may not list the class's submissions: a student sees only their own",
        "ann's list": "ben may not list ann's submissions",
        "release": f"ben may not release {AID}: only the instructor may",
        "feedback release": f"ben may not release feedback for {AID}: only the instructor may",
    }
    for what, response in refused.items():
        assert response.status_code == 403 and expected[what] in response.json()["error"], (what, response.text)
    with pytest.raises(ExchangeError, match="ben may not list the class's submissions"):
        _run("List", ben, inbound=True)
    assert [r["student"] for r in s.store.submissions(COURSE)] == ["ann"]
    # ben's own, with no `as` or `as` himself, is stored as his
    assert (
        s.call("POST", f"submissions/{COURSE}/{AID}", "t-ben", params={"as": "ben"}, data=body).json()["student"]
        == "ben"
    )
    mine = s.call("GET", f"submissions/{COURSE}", "t-ben").json()
    assert [r["student"] for r in mine] == ["ben"]
    # the instructor sees all
    assert sorted(
        r["student"] for r in s.call("GET", f"submissions/{COURSE}", "t-teach", params={"all": 1}).json()
    ) == ["ann", "ben"]
    none = s.call("GET", f"submissions/{COURSE}")
    assert none.status_code == 401 and "no token" in none.json()["error"]
    unknown = s.call("GET", f"submissions/{COURSE}", "t-forged")
    assert unknown.status_code == 401 and "does not know this token" in unknown.json()["error"]
    noscope = s.call("GET", f"submissions/{COURSE}", "t-noscope")
    assert noscope.status_code == 403 and svc.SCOPE in noscope.json()["error"]
    assert s.call("GET", "health").json()["service"] == svc.NAME  # the only thing it answers without a token


def test_size_limit_is_named_and_a_restart_keeps_every_submission(room, tmp_path):
    """A file over the configured limit (2 MB here) refused by the service (413) and by nbgrader submit, each naming
    the limit; one under it accepted. A link in a tar refused. Then a new service over the same store: every
    submission, its bytes and its arrival time are still there, and new ids continue after them."""
    from nbgrader.exchange import ExchangeError

    s, course = room["service"], room["course"]
    _run("ReleaseAssignment", _config(course, course, s.url, "t-teach"))
    big = _notebook("big", pad=2_100_000)
    small = _notebook("small", pad=1_500_000)
    over = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=svc.pack({f"{AID}.ipynb": big}))
    assert (
        over.status_code == 413
        and f"{AID}.ipynb is {svc.megabytes(len(big))}, over the limit of 2 MB per file" in over.json()["error"]
    ), over.text
    whole = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=b"\0" * 8_100_000)
    assert (
        whole.status_code == 413 and "over the limit of 8 MB for everything handed in at once" in whole.json()["error"]
    )
    link = io.BytesIO()
    with tarfile.open(fileobj=link, mode="w") as tar:
        info = tarfile.TarInfo(f"{AID}.ipynb")
        info.type, info.linkname = tarfile.SYMTYPE, "/srv/solutions/ex01_dot.ipynb"
        tar.addfile(info)
    linked = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=link.getvalue())
    assert linked.status_code == 400 and "is not a regular file" in linked.json()["error"]
    assert s.store.submissions(COURSE) == []

    ann = _config(course, _home(room, "ann"), s.url, "t-ann")
    _run("FetchAssignment", ann)
    mine = _home(room, "ann") / AID / f"{AID}.ipynb"
    mine.write_bytes(big)
    with pytest.raises(ExchangeError, match=f"{AID}.ipynb is .*, over the limit of 2 MB per file"):
        _run("Submit", ann)
    mine.write_bytes(small)
    done, _ = _run("Submit", ann)
    ben = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ben", data=svc.pack({f"{AID}.ipynb": small}))
    assert ben.status_code == 200
    before = s.store.submissions(COURSE)
    assert [r["student"] for r in before] == ["ann", "ben"]

    s.stop()
    again = Running(s.store.folder, max_file=2_000_000, max_submission=8_000_000)
    room["service"] = again  # the fixture stops this one
    listed = again.call("GET", f"submissions/{COURSE}", "t-teach", params={"all": 1}).json()
    assert [(r["id"], r["student"], r["timestamp"]) for r in listed] == [
        (r["id"], r["student"], r["timestamp"]) for r in before
    ]
    files = svc.unpack(again.call("GET", f"submission/{done.submission['id']}", "t-ann").content)
    assert files[f"{AID}.ipynb"] == small
    later = again.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=svc.pack({f"{AID}.ipynb": small}))
    assert later.json()["id"] > max(r["id"] for r in before)
    assert os.stat(s.store.folder).st_mode & 0o077 == 0 and os.stat(s.store.path).st_mode & 0o077 == 0


def test_the_hub_configuration_runs_the_service_or_keeps_the_shared_folder(tmp_path):
    """./course hub's files for one run: by default a managed service run as the instructor on loopback, the scope
    in every user's role and server token, and the students' nbgrader selecting the service's classes with its URL
    (loaded by traitlets as nbgrader loads it); with --exchange-kind filesystem none of that."""
    from traitlets.config.loader import PyFileConfigLoader

    from twoprim.classroom.hub_config import Plan, write_run_folder

    common: dict[str, Any] = dict(
        course=tmp_path / "course",
        venv=tmp_path / "venv",
        proxy=tmp_path / "chp",
        exchange=tmp_path / "exchange",
        instructor="teach",
        students=("ann", "ben"),
        port=8000,
        hub_port=8001,
        proxy_api_port=8002,
    )
    plan = Plan(**common, service_port=8003, max_file_mb=50)
    (tmp_path / "run").mkdir()
    config = write_run_folder(plan, tmp_path / "run")
    hub = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
    [service] = [s for s in hub.JupyterHub.services if s["name"] == svc.NAME]  # (beside the idle culler)
    assert service["user"] == "teach" and service["url"] == "http://127.0.0.1:8003"
    assert service["command"][-14:] == [
        "--course",
        COURSE,
        "--instructor",
        "teach",
        "--max-file-mb",
        "50",
        "--max-submissions",
        "50",
        "--max-stored-mb",
        "500",
        "--memory-mb",
        "512",
        "--gradebook",
        f"sqlite:///{tmp_path / 'course' / 'grader' / 'gradebook.db'}",
    ]
    assert svc.SCOPE in hub.Spawner.server_token_scopes
    assert {"name": "user", "scopes": ["self", svc.SCOPE]} in hub.JupyterHub.load_roles
    student = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path / "run" / "student")).load_config()
    assert student.ExchangeFactory.submit == "twoprim.exchange.client.ExchangeSubmit"
    assert student.ServiceExchange.service_url == f"http://127.0.0.1:8003/services/{svc.NAME}/"

    plain = Plan(**common, exchange_kind="filesystem")
    (tmp_path / "run-fs").mkdir()
    config = write_run_folder(plain, tmp_path / "run-fs")
    hub = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
    services = hub.JupyterHub.services if "services" in hub.JupyterHub else []
    assert svc.NAME not in [s["name"] for s in (services if isinstance(services, list) else services.get_value([]))]
    assert "server_token_scopes" not in hub.Spawner
    student = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path / "run-fs" / "student")).load_config()
    assert student.Exchange.root == str(tmp_path / "exchange")
    # the shared folder's submit seals each submission's folder (only its owner may change it)
    assert dict(student.ExchangeFactory) == {"submit": "twoprim.exchange.filesystem.ExchangeSubmit"}


def test_the_hubs_quota_options_reach_the_service_and_nonsense_is_refused(tmp_path):
    """./course hub --max-submissions/--max-stored-mb: defaults 50 and 500, given to the service's command; 0 or less
    refused, saying what to give."""
    from traitlets.config.loader import PyFileConfigLoader

    from twoprim.classroom.hub import _parser
    from twoprim.classroom.hub_config import Plan, write_run_folder
    from twoprim.classroom.limits import protected
    from twoprim.core.errors import CourseError

    plan = Plan(
        course=tmp_path / "course",
        venv=tmp_path / "venv",
        proxy=tmp_path / "chp",
        exchange=tmp_path / "x",
        instructor="teach",
        students=("ann",),
        port=8000,
        hub_port=8001,
        proxy_api_port=8002,
        service_port=8003,
    )
    defaults = _parser().parse_args([])
    assert (defaults.max_submissions, defaults.max_stored_mb) == (50, 500.0)
    given = protected(plan, _parser().parse_args(["--max-submissions", "20", "--max-stored-mb", "250"]))
    (tmp_path / "run").mkdir()
    config = write_run_folder(given, tmp_path / "run")
    [service] = [
        s
        for s in PyFileConfigLoader(config.name, path=str(config.parent)).load_config().JupyterHub.services
        if s["name"] == svc.NAME
    ]
    command = service["command"]
    assert (
        command[command.index("--max-submissions") + 1] == "20"
        and command[command.index("--max-stored-mb") + 1] == "250"
    )
    for flag in ("--max-submissions", "--max-stored-mb"):
        with pytest.raises(CourseError, match=f"{flag} 0 is not a positive number: give the most each student"):
            protected(plan, _parser().parse_args([flag, "0"]))


def _gradebook_with_due_dates(folder: Path, due: dict):
    """An nbgrader gradebook with these due dates (naive UTC): what the formgrader or ./course release writes."""
    from nbgrader.api import Gradebook

    url = f"sqlite:///{folder / 'gradebook.db'}"
    with Gradebook(url, COURSE) as gb:
        for aid, when in due.items():
            gb.update_or_create_assignment(aid, duedate=when)
    return url


def test_each_student_sees_their_own_deadline_read_from_the_gradebook_at_each_request(tmp_path):
    """Students cannot read the gradebook (nbgrader#943), and no folder is shared with them: the listing of released
    assignments carries each one's due date, read from the gradebook at each request (a date moved in the formgrader
    shows at once), and a student's own extension, never another's."""
    import datetime

    from twoprim.grading.gradebook import grant_extension

    due = datetime.datetime(2026, 12, 9, 22, 59)
    url = _gradebook_with_due_dates(tmp_path, {AID: due})
    running = Running(tmp_path / "store", deadlines=svc.gradebook_deadlines(url))
    try:
        for aid in (AID, "ex02_gemm"):
            running.store.release(COURSE, aid, {f"{aid}.ipynb": _notebook("pass")}, by="teach", force=False)
        listing = {e["assignment_id"]: e["due"] for e in running.call("GET", f"assignments/{COURSE}", "t-ann").json()}
        assert listing == {AID: "2026-12-09T22:59:00Z", "ex02_gemm": None}
        grant_extension(AID, "ann", datetime.datetime(2026, 12, 11, 12), tmp_path, url)
        _gradebook_with_due_dates(tmp_path, {"ex02_gemm": datetime.datetime(2026, 12, 16, 22, 59)})  # formgrader
        seen = {
            who: {e["assignment_id"]: e["due"] for e in running.call("GET", f"assignments/{COURSE}", tok).json()}
            for tok, who in TOKENS.items()
        }
        assert seen["ann"] == {AID: "2026-12-11T12:00:00Z", "ex02_gemm": "2026-12-16T22:59:00Z"}
        assert seen["ben"] == seen["teach"] == {AID: "2026-12-09T22:59:00Z", "ex02_gemm": "2026-12-16T22:59:00Z"}
        assert running.call("GET", f"assignments/{COURSE}").status_code == 401  # a token, as for everything else
    finally:
        running.stop()


# --- quotas, streaming, the service's memory ------------------------------------------------------------------


def _tar_stream(files: dict[str, int], chunk: int = 1 << 20):
    """A tar of files of zeros (name -> size), made as it is sent: (its length, the generator of its bytes)."""
    heads = {}
    for name, size in files.items():
        info = tarfile.TarInfo(name)
        info.size, info.mode = size, 0o644
        heads[name] = info.tobuf(format=tarfile.PAX_FORMAT)
    length = sum(len(heads[n]) + s + (-s) % 512 for n, s in files.items()) + 1024

    def body():
        zeros = bytes(chunk)
        for name, size in files.items():
            yield heads[name]
            left = size
            while left:
                n = min(chunk, left)
                yield zeros[:n]
                left -= n
            yield bytes((-size) % 512)
        yield bytes(1024)

    return length, body


def _collect_as_the_instructor(room) -> str:
    """`./course collect` (steps.collect) as the service's account: from the store, no token."""
    from twoprim.exchange import steps

    course = room["course"]
    (course / "grader").mkdir(exist_ok=True)
    (course / "grader" / "classroom.json").write_text(
        json.dumps(
            {
                "exchange_kind": "service",
                "exchange_url": room["service"].url,
                "exchange_store": str(room["service"].store.folder),
            }
        )
    )
    env = os.environ.pop("JUPYTERHUB_API_TOKEN", None)
    try:
        return steps.collect(AID, root=course)
    finally:
        if env is not None:
            os.environ["JUPYTERHUB_API_TOKEN"] = env


def test_the_51st_submission_is_refused_naming_the_limit_and_collect_lists_it(tmp_path):
    """The default quota (50 submissions per student and assignment): 50 accepted; the 51st refused (403) before
    its body is stored, by the service and through nbgrader's submit (the Assignments tab's error), each naming the
    limit; another student and another assignment are untouched; collect names who was refused and how often."""
    from nbgrader.exchange import ExchangeError

    course = tmp_path / "course"
    (course / "exercises" / AID).mkdir(parents=True)
    (course / "exercises" / AID / f"{AID}.ipynb").write_bytes(_notebook("def dot(x, w):\n    pass"))
    room = {"course": course, "tmp": tmp_path, "service": Running(tmp_path / "store")}  # the defaults
    s = room["service"]
    try:
        _run("ReleaseAssignment", _config(course, course, s.url, "t-teach"))
        s.store.release(COURSE, "ex02_gemm", {"ex02_gemm.ipynb": _notebook("pass")}, by="teach", force=False)
        assert s.call("GET", "limits", "t-ann").json()["max_submissions"] == svc.DEFAULT_MAX_SUBMISSIONS == 50
        body = svc.pack({f"{AID}.ipynb": _notebook("def dot(x, w):\n    return (x * w).sum()")})
        for n in range(50):
            answer = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=body)
            assert answer.status_code == 200, (n, answer.text)
        limit = "the limit of 50 submissions per student and assignment"
        over = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=body)
        assert (
            over.status_code == 403
            and f"you have handed in {AID} 50 times" in over.json()["error"]
            and limit in over.json()["error"]
        ), over.text
        ann = _config(course, _home(room, "ann"), s.url, "t-ann")
        _run("FetchAssignment", ann)
        with pytest.raises(ExchangeError, match=f"refused \\(403\\): you have handed in {AID} 50 times.*{limit}"):
            _run("Submit", ann)
        assert len(s.store.submissions(COURSE, student="ann")) == 50
        assert list(s.store.incoming().iterdir()) == []  # nothing of the refused ones kept
        assert s.call("POST", f"submissions/{COURSE}/{AID}", "t-ben", data=body).status_code == 200
        other = svc.pack({"ex02_gemm.ipynb": _notebook("pass")})
        assert s.call("POST", f"submissions/{COURSE}/ex02_gemm", "t-ann", data=other).status_code == 200

        recorded = s.store.refusals(COURSE, AID)
        assert [(r["student"], r["status"], r["limit"]) for r in recorded] == [("ann", 403, "submissions")] * 2
        assert s.call("GET", f"refusals/{COURSE}", "t-ben").status_code == 403  # the instructor's only
        text = _collect_as_the_instructor(room)
        assert f"2 new submission(s) of {AID} collected (ann, ben)" in text, text
        lines = text.splitlines()
        head = lines.index(
            "2 submission(s) refused by the exchange service, from 1 student(s) (each was told why; "
            "what they handed in before stands):"
        )
        assert (
            lines[head + 1].startswith("  ann: 2 time(s) (2 over the quota of submissions); the last, ")
            and limit in lines[head + 1]
        ), text
        report = json.loads((course / "grader" / "reports" / f"{AID}-collect.json").read_text())
        assert [r["student"] for r in report["refused"]] == ["ann", "ann"]
    finally:
        s.stop()


def test_an_upload_past_the_stored_quota_is_cut_off_on_its_way_in(room):
    """A lowered quota (3 MB per student and assignment): a declared upload that would pass it refused at once; one
    streamed without a length cut off as it passes the limit (its partial file gone while the rest still arrives),
    refused (413) naming the limit; one whose sender goes away half way leaves nothing; nbgrader's submit shows the
    refusal; a submission that fits what is left (so nothing of the abandoned one was counted) still goes in."""
    from nbgrader.exchange import ExchangeError

    s = room["service"]
    s.stop()
    s = room["service"] = Running(
        room["tmp"] / "store", max_file=2_000_000, max_submission=8_000_000, max_stored=3_000_000
    )
    _run("ReleaseAssignment", _config(room["course"], room["course"], s.url, "t-teach"))
    limit = "over the limit of 3 MB stored per student and assignment"
    first = svc.pack({f"{AID}.ipynb": _notebook("first", pad=1_900_000)})
    assert s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=first).status_code == 200
    second = svc.pack({f"{AID}.ipynb": _notebook("second", pad=1_500_000)})
    declared = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=second)
    assert declared.status_code == 413 and limit in declared.json()["error"], declared.text

    incoming = s.store.incoming()
    length, body = _tar_stream({f"{AID}.ipynb": 1_000_000, "data.bin": 1_500_000}, chunk=100_000)
    seen = {}

    def watched():
        sent = 0
        for piece in body():
            yield piece
            sent += len(piece)
            if "arriving" not in seen and sent > 600_000:  # being written to disk as it arrives
                deadline = time.monotonic() + 10
                while not any(p.stat().st_size for p in incoming.iterdir()) and time.monotonic() < deadline:
                    time.sleep(0.02)
                seen["arriving"] = [p.stat().st_size for p in incoming.iterdir()]
            if "cut" not in seen and sent > 1_500_000:  # past what ann may still store (about 1 MB)
                deadline = time.monotonic() + 10
                while list(incoming.iterdir()) and time.monotonic() < deadline:
                    time.sleep(0.02)
                seen["cut"] = list(incoming.iterdir())  # gone while the rest is still to come

    streamed = requests.post(
        s.url + f"api/submissions/{COURSE}/{AID}", data=watched(), timeout=60, headers={"Authorization": "token t-ann"}
    )
    assert streamed.status_code == 413 and "passed" in streamed.json()["error"] and limit in streamed.json()["error"], (
        streamed.text
    )
    assert len(seen["arriving"]) == 1 and 0 < seen["arriving"][0] < length and seen["cut"] == [], seen
    assert list(incoming.iterdir()) == [] and len(s.store.submissions(COURSE)) == 1
    assert len(list((s.store.folder / "submissions").iterdir())) == 1

    # an upload whose sender goes away half way: its partial file removed, nothing of it counted afterwards
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as raw:
        raw.sendall(
            f"POST /services/{svc.NAME}/api/submissions/{COURSE}/{AID} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: token t-ann\r\nContent-Length: 900000\r\n\r\n".encode()
            + bytes(400_000)
        )
        deadline = time.monotonic() + 10
        while not list(incoming.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert list(incoming.iterdir()), "the upload never reached incoming/"
    deadline = time.monotonic() + 10
    while list(incoming.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(incoming.iterdir()) == [] and len(s.store.submissions(COURSE)) == 1

    ann = _config(room["course"], _home(room, "ann"), s.url, "t-ann")
    _run("FetchAssignment", ann)
    mine = _home(room, "ann") / AID / f"{AID}.ipynb"
    mine.write_bytes(_notebook("third", pad=1_500_000))
    with pytest.raises(ExchangeError, match=f"refused \\(413\\): this submission is .*{limit}"):
        _run("Submit", ann)
    mine.write_bytes(_notebook("fits", pad=1_000_000))  # with the first, just under 3 MB
    done, _ = _run("Submit", ann)
    assert [r["id"] for r in s.store.submissions(COURSE)][-1] == done.submission["id"]
    assert [r["limit"] for r in s.store.refusals(COURSE, AID)] == ["stored"] * 3


def test_a_notebook_not_where_the_release_put_it_is_refused_naming_the_path(room):
    """ex01_dot.ipynb inside a folder of the submission, and no notebook where the release put it: refused (400)
    naming the expected path, and recorded."""
    s = room["service"]
    _run("ReleaseAssignment", _config(room["course"], room["course"], s.url, "t-teach"))
    nested = s.call(
        "POST", f"submissions/{COURSE}/{AID}", "t-ann", data=svc.pack({f"sub/{AID}.ipynb": _notebook("mine")})
    )
    assert (
        nested.status_code == 400
        and f"sub/{AID}.ipynb is not where the release put it: the notebook must be "
        f"{AID}.ipynb, as fetched ({AID}/{AID}.ipynb)"
        in nested.json()["error"]
    ), nested.text
    other = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=svc.pack({"scratch.ipynb": _notebook("x")}))
    assert (
        other.status_code == 400
        and f"expected {AID}/{AID}.ipynb; this submission has scratch.ipynb" in other.json()["error"]
    ), other.text
    assert s.store.submissions(COURSE) == [] and [r["limit"] for r in s.store.refusals(COURSE)] == ["notebook"] * 2


class _StubHub(http.server.BaseHTTPRequestHandler):
    """JupyterHub's /hub/api/user, as HubAuth asks it: the model of the token's user, with the service's scope."""

    def do_GET(self):
        token = self.headers.get("Authorization", "").split(" ")[-1]
        name = TOKENS.get(token)
        if not self.path.rstrip("/").endswith("/api/user") or name is None:
            self.send_response(403)
            self.end_headers()
            return
        body = json.dumps({"name": name, "kind": "user", "scopes": [svc.SCOPE]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.mark.timeout(120)
def test_the_service_stays_under_its_memory_limit_while_three_400_MB_uploads_arrive(tmp_path):
    """`python -m twoprim.exchange.service` as the hub starts it (its defaults, a gradebook; a stub in place of the
    hub's API): it lowers its own address space to 512 MiB, and its quotas are 50 submissions and 500 MB. Three
    students' 400 MB submissions arrive at once (1.2 GB, generated as they are sent): all three are stored whole, and
    the service's resident memory, sampled throughout and its peak (VmHWM), stays under its limit and grows by far
    less than one upload."""
    import psutil

    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StubHub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    port = free_port()
    url = f"http://127.0.0.1:{port}/services/{svc.NAME}/api/"
    env = {
        **os.environ,
        "JUPYTERHUB_API_URL": f"http://127.0.0.1:{hub.server_address[1]}/hub/api",
        "JUPYTERHUB_API_TOKEN": "the-service's-own",
        "JUPYTERHUB_SERVICE_NAME": svc.NAME,
    }
    env.pop("JUPYTERHUB_SERVICE_PREFIX", None)
    log = open(tmp_path / "service.log", "w+")  # noqa: SIM115 - read while the service runs, closed in the finally
    import datetime

    gradebook = _gradebook_with_due_dates(tmp_path, {AID: datetime.datetime(2026, 12, 9, 22, 59)})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "twoprim.exchange.service",
            "--store",
            str(tmp_path / "store"),
            "--course",
            COURSE,
            "--instructor",
            "teach",
            "--url",
            f"http://127.0.0.1:{port}",
            "--gradebook",
            gradebook,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(url + "health", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (
                f"the service did not answer within 60 s:\n{log.seek(0) or log.read()}"
            )
            time.sleep(0.2)
        limit = 512 * 2**20
        service = psutil.Process(proc.pid)
        assert service.rlimit(psutil.RLIMIT_AS) == (limit, limit)  # its own, set as it started
        limits = requests.get(url + "limits", headers={"Authorization": "token t-ann"}, timeout=30).json()
        assert (limits["max_submissions"], limits["max_stored_bytes"]) == (50, 500_000_000), limits
        release = requests.post(
            url + f"assignments/{COURSE}/{AID}",
            headers={"Authorization": "token t-teach"},
            data=svc.pack({f"{AID}.ipynb": _notebook("pass")}),
            timeout=30,
        )
        assert release.ok, release.text
        listed = requests.get(url + f"assignments/{COURSE}", headers={"Authorization": "token t-ann"}, timeout=30)
        assert listed.json()[0]["due"] == "2026-12-09T22:59:00Z", listed.text  # read from the gradebook

        before = service.memory_info().rss
        samples, done = [], threading.Event()

        def sample():
            while not done.is_set():
                samples.append(service.memory_info().rss)
                time.sleep(0.02)

        files = {f"{AID}.ipynb": 100_000_000, "a.bin": 100_000_000, "b.bin": 100_000_000, "c.bin": 100_000_000}
        length, body = _tar_stream(files)
        answers = {}

        def upload(token):
            try:
                answers[token] = requests.post(
                    url + f"submissions/{COURSE}/{AID}",
                    data=body(),
                    timeout=120,
                    headers={"Authorization": f"token {token}"},
                )
            except requests.RequestException as err:  # the service dropped it: said below, with its log
                answers[token] = err

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.monotonic()
        uploads = [threading.Thread(target=upload, args=(t,)) for t in ("t-ann", "t-ben", "t-teach")]
        for t in uploads:
            t.start()
        for t in uploads:
            t.join(100)
        took = time.monotonic() - started
        done.set()
        sampler.join(10)
        log.seek(0)
        assert len(answers) == 3 and all(getattr(a, "status_code", None) == 200 for a in answers.values()), (
            {t: getattr(a, "text", repr(a))[:300] for t, a in answers.items()},
            log.read()[-3000:],
        )
        status = {
            line.split(":")[0]: int(line.split()[1]) * 1024
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            if line.startswith("Vm")
        }
        peak = status["VmHWM"]  # the peak of its resident memory, as the kernel counted it
        kept = sorted(p.stat().st_size for p in (tmp_path / "store" / "submissions").iterdir())
        assert kept == [length] * 3, kept
        assert max(samples) < limit and peak < limit, (max(samples), peak, limit)
        assert max(samples) - before < 64 * 2**20 and peak - before < 64 * 2**20, (before, max(samples), peak)
        print(
            f"3 uploads of {length / 1e6:.0f} MB in {took:.1f} s; service RSS {before / 2**20:.0f} MiB before, "
            f"{max(samples) / 2**20:.0f} MiB at most while they arrived (VmHWM {peak / 2**20:.0f} MiB), "
            f"{len(samples)} samples; address space at most {status['VmPeak'] / 2**20:.0f} MiB of its limit "
            f"{limit / 2**20:.0f} MiB"
        )
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        hub.shutdown()
        log.close()
