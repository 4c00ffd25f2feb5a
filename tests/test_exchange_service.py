"""The exchange service (twoprim/exchange/service.py) and nbgrader's classes that use it (client.py), without a hub.

The service runs on loopback in this process, with a stub in place of JupyterHub's HubAuth that knows three tokens
(the instructor's, ann's, ben's): a whole class cycle through nbgrader's own ExchangeFactory (release, fetch,
submit, list, collect into grader/submitted/ by intake.admit, release feedback, fetch feedback); what a student may
not do (submit as another, read another's submission or feedback, list the class, release), each refused with its
status and message; the size limit, named in the refusal; and a restart over the same store that loses nothing.
"""
from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import tarfile
import threading
from pathlib import Path

import nbformat
import pytest
import requests

from twoprim.exchange import service as svc

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

    def __init__(self, store: Path, **kw):
        self.store = svc.Store(store)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/services/{svc.NAME}/"
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            app = svc.make_app(self.store, StubHubAuth(), course=COURSE, instructors={"teach"}, **kw)
            self.server = app.listen(self.port, address="127.0.0.1", max_body_size=app.settings.get(
                "max_body_size") or 10**9)
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
    state = {"course": course, "tmp": tmp_path,
             "service": Running(tmp_path / "store", max_file=2_000_000, max_submission=8_000_000)}
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

    from twoprim.exchange.client import collect_from_service, Remote, newest_submissions

    s, course = room["service"], room["course"]
    teach = _config(course, course, s.url, "t-teach")
    _run("ReleaseAssignment", teach)
    with pytest.raises(ExchangeError, match="released already: release it again with --force"):
        _run("ReleaseAssignment", teach)
    _run("ReleaseAssignment", teach, force=True)

    ann = _config(course, _home(room, "ann"), s.url, "t-ann")
    _, listed = _run("List", ann, aid="")
    assert [(a["assignment_id"], a["status"], [n["notebook_id"] for n in a["notebooks"]]) for a in listed] == \
        [(AID, "released", [AID])]
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
    (course / "grader" / "classroom.json").write_text(json.dumps(
        {"exchange_kind": "service", "exchange_url": s.url, "exchange_store": str(s.store.folder)}))
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
    with pytest.raises(ExchangeError, match="refused \\(403\\): you are ben \\(the hub says so\\): you cannot submit "
                                            "as ann"):
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
    assert s.call("POST", f"submissions/{COURSE}/{AID}", "t-ben", params={"as": "ben"}, data=body).json()["student"] \
        == "ben"
    mine = s.call("GET", f"submissions/{COURSE}", "t-ben").json()
    assert [r["student"] for r in mine] == ["ben"]
    # the instructor sees all
    assert sorted(r["student"] for r in s.call("GET", f"submissions/{COURSE}", "t-teach", params={"all": 1}).json()) \
        == ["ann", "ben"]
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
    assert over.status_code == 413 and f"{AID}.ipynb is {svc.megabytes(len(big))}, over the limit of 2 MB per file" \
        in over.json()["error"], over.text
    whole = s.call("POST", f"submissions/{COURSE}/{AID}", "t-ann", data=b"\0" * 8_100_000)
    assert whole.status_code == 413 and "over the limit of 8 MB for everything handed in at once" in \
        whole.json()["error"]
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
    assert [(r["id"], r["student"], r["timestamp"]) for r in listed] == \
        [(r["id"], r["student"], r["timestamp"]) for r in before]
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

    common = dict(course=tmp_path / "course", venv=tmp_path / "venv", proxy=tmp_path / "chp",
                  exchange=tmp_path / "exchange", instructor="teach", students=("ann", "ben"), port=8000,
                  hub_port=8001, proxy_api_port=8002)
    plan = Plan(**common, service_port=8003, max_file_mb=50)
    (tmp_path / "run").mkdir()
    config = write_run_folder(plan, tmp_path / "run")
    hub = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
    [service] = [s for s in hub.JupyterHub.services if s["name"] == svc.NAME]  # (beside the idle culler)
    assert service["user"] == "teach" and service["url"] == "http://127.0.0.1:8003"
    assert service["command"][-8:] == ["--course", COURSE, "--instructor", "teach", "--max-file-mb", "50",
                                       "--gradebook", f"sqlite:///{tmp_path / 'course' / 'grader' / 'gradebook.db'}"]
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
    assert "ExchangeFactory" not in student and student.Exchange.root == str(tmp_path / "exchange")


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
        seen = {who: {e["assignment_id"]: e["due"] for e in running.call("GET", f"assignments/{COURSE}", tok).json()}
                for tok, who in TOKENS.items()}
        assert seen["ann"] == {AID: "2026-12-11T12:00:00Z", "ex02_gemm": "2026-12-16T22:59:00Z"}
        assert seen["ben"] == seen["teach"] == {AID: "2026-12-09T22:59:00Z", "ex02_gemm": "2026-12-16T22:59:00Z"}
        assert running.call("GET", f"assignments/{COURSE}").status_code == 401  # a token, as for everything else
    finally:
        running.stop()
