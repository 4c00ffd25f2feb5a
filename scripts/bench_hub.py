"""Load driver: a whole class logs in to the classroom hub at once (Monday, 9 a.m.), as real clients do.

    sudo .venv/bin/python scripts/bench_hub.py --students 15 [--window 60] [--memory-mb 2048] [--browsers 2]
                                               [--lab-polls 10] [--out FILE.json]

It copies the course to a folder every account can pass (tests/accounts.py), starts `./course hub` there on a
free loopback port with throwaway accounts, releases ex01_dot as the instructor, and then each simulated student,
starting at an even spread over `--window` seconds:

    login     the hub's login form (GET for its _xsrf cookie, POST name and password: PAM)
    spawn     POST /hub/api/users/NAME/server with that cookie, then polls the hub until the server is ready
              (what the spawn-pending page does); then a token for their own server (POST .../tokens)
    fetch     the Assignments tab's Fetch (nbgrader's /assignments/fetch, through the exchange service)
    open      GET the notebook (the contents API), and PUT it back answered (what typing and saving does)
    kernel    a session for the notebook (POST /api/sessions), its websocket, and the first code cell's reply
    cells     every other code cell run in order, over the same websocket (a student's Run All)
    validate  nbgrader's Validate button (/assignments/validate: the whole notebook in a fresh kernel)
    submit    the Submit button (/assignments/submit, through the exchange service)

With `--lab-polls S`, each student's JupyterLab page stays open from their server's start to their Submit and
asks for the running kernels and sessions every S s, as JupyterLab's page does every 10 s (the server counts it as
activity, so a slow step does not look idle to the culler); without it, only the steps' own requests are made, as
in the runs recorded in data/capacity/.

With `--browsers K`, K students more log in among them in a real Chromium (Debian's, through Playwright) and are
timed as a student sees it: `browser_lab` (the login form until their JupyterLab has rendered, the spawn page in
between) and `browser_first_cell` (lesson 01 opened in it and its first code cell run until its prompt shows [1]).

Every request goes through the hub's proxy on loopback (each user's server at NAME.localhost: the Host header).
Counts and time are bounded (`--deadline`); the hub, the servers and the accounts are removed at the end. It
reports each step's p50/p95/max latency, every failure with its cause, the machine's peak memory (MemTotal -
MemAvailable) and each student's (the RSS of their server, zygote and kernels, summed from /proc; their PSS, which
counts a page their kernels share with their zygote once; what their control group holds against their limit), the
CPU's use, and how many kernels were forked from a zygote (twoprim/learner/warm_kernels.py, from the hub's log),
and writes them as JSON with `--out`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

AID = "ex01_dot"
COURSE_ID = "two-primitives"
STEPS = ("login", "spawn", "fetch", "open", "kernel", "cells", "validate", "submit")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
START_S = 240  # the hub's table: accounts, the environment probe, JupyterHub and its proxy
REQUEST_S = 300  # one request at most (a Validate on a loaded machine is the longest)
# JupyterLab's page asks its server for the running kernels and sessions this often (its services' polls), which the
# server counts as activity: a student whose page is open is never idle to the culler, however long a step takes
LAB_POLL_S = 10.0


# --- the classroom: a copy of the course and ./course hub in it ---------------------------------------------------


# a log line of a request that succeeded (the hub's, the servers' and the proxy's), left out of what a failure shows
_SUCCEEDED = re.compile(r"\] (1\d\d|2\d\d|3\d\d) (GET|PUT|POST|PATCH|DELETE|HEAD) |info.*: (1|2|3)\d\d ")


class Classroom:
    """`./course hub` over a copy of the course, with throwaway accounts; `with Classroom(...) as room:`."""

    def __init__(self, n: int, *, hub_args: tuple[str, ...] = (), tag: str | None = None, base: Path | None = None):
        tag = tag or secrets.token_hex(2)
        self.instructor = f"tpl{tag}i"
        self.students = [f"tpl{tag}s{i:02d}" for i in range(n)]
        self.hub_args = hub_args
        self.base_given = base
        self.proc = None
        self.passwords: dict[str, str] = {}

    def __enter__(self) -> Classroom:
        from tests.accounts import clone_for, point_venv_at, shared_python, shared_tmp
        from twoprim.classroom.hub_checks import free_port

        if os.geteuid() != 0:
            raise SystemExit("error: the classroom makes a Unix account per student: run as root (sudo)")
        self.base = self.base_given or shared_tmp("twoprim-load-")
        try:
            python = shared_python(self.base / "python")
            self.course = self.base / "course"
            self.course.mkdir()
            point_venv_at(clone_for(self.course, node_modules=True), python)
            self.port = free_port()
            self.log_path = self.base / "hub.log"
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        self.log = self.log_path.open("a")
        self.proc = subprocess.Popen(
            [
                str(self.course / "course"),
                "hub",
                "--students",
                ",".join(self.students),
                "--instructor",
                self.instructor,
                "--port",
                str(self.port),
                *self.hub_args,
            ],
            cwd=self.course,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_ctrl_c_when_orphaned,
            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HOME": "/root"},
        )
        deadline = time.monotonic() + START_S
        while True:
            text = self.text()
            rows = {
                m.group(1): m.group(2) for m in re.finditer(r"^  (\S+)\s+(?:instructor|student)\s+(\S+)\s", text, re.M)
            }
            if "classroom is running" in text and all(a in rows for a in [self.instructor, *self.students]):
                self.passwords = rows
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"./course hub exited ({self.proc.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no table from ./course hub within {START_S} s:\n{self.tail()}")
            time.sleep(0.5)
        self.url = f"http://127.0.0.1:{self.port}"
        released = self.course_command("release", AID)
        if released.returncode != 0 and "already" not in released.stdout + released.stderr:
            raise RuntimeError(f"./course release {AID} failed:\n{released.stdout}{released.stderr}")

    def course_command(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """`./course ARGS` as the instructor, as their terminal runs it."""
        user = pwd.getpwnam(self.instructor)
        env = {
            "PATH": SYSTEM_PATH,
            "LANG": "C.UTF-8",
            "HOME": user.pw_dir,
            "USER": user.pw_name,
            "LOGNAME": user.pw_name,
        }
        return subprocess.run(
            [str(self.course / "course"), *args],
            cwd=self.course,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            user=user.pw_uid,
            group=user.pw_gid,
            extra_groups=[],
        )

    def text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def tail(self, n: int = 40) -> str:
        return "\n".join([line for line in self.text().splitlines() if not _SUCCEEDED.search(line)][-n:])

    def lines_about(self, name: str, n: int = 30) -> list[str]:
        """The hub's log lines (its own, the proxy's, the servers' and the services') that name `name`, but for
        requests that succeeded: what happened to that student, for a failure's report."""
        return [line[:400] for line in self.text().splitlines() if name in line and not _SUCCEEDED.search(line)][-n:]

    def stop(self) -> int | None:
        """Ctrl-C to the hub (bounded wait, then SIGKILL); its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()
        return self.proc.returncode

    def __exit__(self, *exc) -> None:
        from tests.accounts import delete_account

        try:
            self.stop()
        finally:
            for name in [self.instructor, *self.students]:
                with contextlib.suppress(Exception):
                    delete_account(name)
            if self.base_given is None and getattr(self, "base", None):
                shutil.rmtree(self.base, ignore_errors=True)


def _ctrl_c_when_orphaned() -> None:
    """If the driver dies, the hub gets the Ctrl-C that stops it and everything it started."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


# --- one student -------------------------------------------------------------------------------------------------


@dataclass
class Student:
    """One simulated student: their account, what they answer, and what each step took."""

    name: str
    password: str
    notebook: dict  # the notebook they save and submit (nbformat JSON)
    times: dict[str, float] = field(default_factory=dict)
    failure: str = ""  # the step that failed and why
    cell_errors: list[str] = field(default_factory=list)  # cells whose code raised (a wrong answer's check)
    validate: dict = field(default_factory=dict)
    token: str = ""
    finished: float = 0.0  # time.monotonic() when their last step (Submit) answered; 0: not finished
    polls: int = 0  # their JupyterLab page's polls that the server answered (`LabPage`)


class Client:
    """HTTP to the hub and to one user's server through the proxy (the Host header picks the server)."""

    def __init__(self, url: str, port: int, name: str):
        import requests

        self.requests = requests
        self.hub = requests.Session()  # the hub at localhost (its cookies are for that host, as in a browser)
        self.url, self.port, self.name = url, port, name
        self.hub_url = f"http://localhost:{port}"
        self.server = requests.Session()
        self.server.headers["Host"] = f"{name}.localhost:{port}"
        self.base = f"{url}/user/{name}/"
        self.xsrf_token = ""

    def xsrf(self) -> dict[str, str]:
        """The header the hub's API wants with its cookie (the token its pages give their scripts)."""
        return {"X-XSRFToken": self.xsrf_token}

    def check(self, response, what: str):
        """`response`, or StepError naming `what` when it failed."""
        if response.status_code >= 400:
            raise StepError(f"{what}: HTTP {response.status_code} {response.text[:300]}")
        return response


def login(c: Client, password: str) -> None:
    """The login form, as a browser fills it."""
    c.check(c.hub.get(f"{c.hub_url}/hub/login", timeout=REQUEST_S), "GET /hub/login")
    r = c.hub.post(
        f"{c.hub_url}/hub/login?next=",
        data={"username": c.name, "password": password, "_xsrf": c.hub.cookies.get("_xsrf", "")},
        allow_redirects=False,
        timeout=REQUEST_S,
    )
    if r.status_code != 302:
        raise StepError(f"login: HTTP {r.status_code} (expected a redirect) {r.text[:300]}")
    # the session cookie is for .localhost (every user's host too); Python's cookie jar files a dotless host as
    # "localhost.local" and so never sends it back to localhost, as a browser does: give it that host as well
    from http.cookiejar import Cookie
    from typing import cast

    for cookie in cast("list[Cookie]", list(c.hub.cookies)):  # a CookieJar yields Cookies (typed as str)
        if cookie.domain == ".localhost":
            c.hub.cookies.set(cookie.name, cookie.value, domain="localhost.local", path=cookie.path)
    home = c.check(c.hub.get(f"{c.hub_url}/hub/home", timeout=REQUEST_S), "GET /hub/home").text
    found = re.search(r'xsrf_token: "([^"]+)"', home)  # the token the hub's pages give their scripts
    if not found:
        raise StepError("the hub's home page has no xsrf_token for its API calls")
    c.xsrf_token = found.group(1)


def spawn(c: Client, deadline: float) -> str:
    """Start the server and wait until the hub says it is ready; a token for it (what the browser's OAuth gets)."""
    api = f"{c.hub_url}/hub/api/users/{c.name}"
    r = c.hub.post(f"{api}/server", headers=c.xsrf(), timeout=REQUEST_S)
    if r.status_code not in (201, 202, 400):  # 400: already running
        raise StepError(f"POST {api}/server: HTTP {r.status_code} {r.text[:300]}")
    started, since = time.monotonic(), _clock()
    while True:
        state = c.check(c.hub.get(api, headers=c.xsrf(), timeout=REQUEST_S), f"GET {api}").json()
        server = state.get("servers", {}).get("", {})
        if server.get("ready"):
            break
        if not server.get("pending") and not server:
            raise StepError(f"the server of {c.name} stopped while starting (the hub's log says why)")
        if time.monotonic() > deadline:
            raise StepError(
                f"the server of {c.name} was not ready before the deadline: waited "
                f"{time.monotonic() - started:.0f} s (since {since}); the hub last said {server}"
            )
        time.sleep(0.5)
    r = c.check(
        c.hub.post(
            f"{api}/tokens", headers=c.xsrf(), json={"note": "load test", "expires_in": 3600}, timeout=REQUEST_S
        ),
        f"POST {api}/tokens",
    )
    token = r.json()["token"]
    c.server.headers["Authorization"] = f"token {token}"
    return token


class LabPage:
    """What an open JupyterLab page does while its student works: every `every` s it asks their server for the
    running kernels and sessions, as JupyterLab's polls do (a poll that fails is skipped, as the page skips it).
    `every=None`: no page (the requests of the steps alone, as recorded in data/capacity/ until 2026-12-05).
    Leaving the block closes the page: the polls stop within `every` + their own bound."""

    def __init__(self, c: Client, every: float | None):
        self.every, self.polls, self.failed = every, 0, 0
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        if every:
            self.session = c.requests.Session()  # its own: a requests.Session is not shared between threads
            self.session.headers.update(c.server.headers)  # the server's host and the student's token
            self.urls = [c.base + "api/kernels", c.base + "api/sessions"]
            self.thread = threading.Thread(target=self._run, name=f"lab-page-{c.name}", daemon=True)

    def __enter__(self) -> LabPage:
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, exc_type, *_) -> None:
        self.close(quiet=exc_type is not None)  # a step's own failure is the one to report

    def _run(self) -> None:
        assert self.every is not None
        while not self.stopped.wait(self.every):
            for url in self.urls:
                try:
                    ok = self.session.get(url, timeout=self.every).status_code < 400
                except OSError:  # requests' errors are OSErrors: a refused or timed-out poll
                    ok = False
                self.polls += ok
                self.failed += not ok

    def close(self, quiet: bool = False) -> None:
        self.stopped.set()
        if self.thread is None:
            return
        assert self.every is not None
        if self.thread.is_alive():  # a poll in flight ends within its timeout (connect and each read, per URL)
            self.thread.join(timeout=4 * self.every + 5)
        if self.thread.is_alive():  # its session is left to it
            if not quiet:
                raise StepError(f"the page's polls did not stop within {4 * self.every + 5:.0f} s of closing it")
            return
        self.session.close()


def _form(c: Client, path: str, data: dict, what: str) -> dict:
    r = c.check(c.server.post(c.base + path, data=data, timeout=REQUEST_S), what)
    return r.json()


def fetch(c: Client) -> None:
    """The Fetch button. nbgrader answers with the assignment list whatever the fetch did (HTTP 200; its server
    log has the error): the list must show it fetched."""
    answer = _form(c, "assignments/fetch", {"course_id": COURSE_ID, "assignment_id": AID}, "Fetch")
    rows = answer.get("value") if isinstance(answer, dict) else None
    if not isinstance(rows, list) or not any(
        r.get("assignment_id") == AID and r.get("status") == "fetched" for r in rows
    ):
        raise StepError(f"Fetch did not fetch {AID} (the student's server log says why): {str(answer)[:300]}")


NOTEBOOK = f"exercises/{AID}/{AID}.ipynb"


def open_and_answer(c: Client, notebook: dict) -> dict:
    """The fetched notebook opened, then saved with the student's answers; returns what was fetched."""
    fetched = c.check(c.server.get(c.base + "api/contents/" + NOTEBOOK, timeout=REQUEST_S), "GET notebook").json()
    c.check(
        c.server.put(
            c.base + "api/contents/" + NOTEBOOK,
            json={"type": "notebook", "format": "json", "content": notebook},
            timeout=REQUEST_S,
        ),
        "PUT notebook",
    )
    return fetched


class StepError(Exception):
    """A request that failed, with what it was."""


def _clock() -> str:
    """The wall clock to the hundredth, as the hub's log writes it (to match a failure with its lines)."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 100):02d}"


class Waiting:
    """One bounded wait on a kernel's websocket: what it waits for, since when, and what it has seen (for the
    StepError that says why it ended)."""

    def __init__(self, what: str, bound: float):
        self.what, self.bound = what, bound
        self.started, self.wall = time.monotonic(), _clock()
        self.deadline = self.started + bound
        self.mine: set[str] = set()  # the msg_ids of this wait's own requests
        self.last, self.last_at, self.messages, self.pings = "", 0.0, 0, 0

    def saw(self, msg: dict) -> None:
        kind, content = msg.get("msg_type") or msg["header"]["msg_type"], msg.get("content", {})
        state = f" {content['execution_state']}" if kind == "status" else ""
        mine = "" if msg.get("parent_header", {}).get("msg_id") in self.mine else ", for another request"
        self.last = f"{kind}{state} ({msg.get('channel', '?')}{mine})"
        self.last_at, self.messages = time.monotonic(), self.messages + 1

    def said(self, waited_for: str, progress: str = "") -> str:
        """What was waited for, since when, and what was seen meanwhile."""
        now = time.monotonic()
        last = f"{self.last}, {now - self.last_at:.1f} s ago" if self.messages else "no message"
        return (
            f"{self.what}: waited {now - self.started:.1f} s (bound {self.bound:g} s, since {self.wall}) for "
            f"{waited_for}{'; ' + progress if progress else ''}; last seen: {last}; {self.messages} messages "
            f"and {self.pings} pings from the server meanwhile"
        )


class Kernel:
    """A notebook's kernel over its websocket, as JupyterLab runs cells. Each read waits at most the time left
    before its deadline: the server's pings (answered here) and messages for other requests never extend it."""

    READY_S = 60  # the kernel_info handshake at most (jupyter_server's kernel_info_timeout)
    NUDGE_S = 0.5  # kernel_info re-sent this often until IOPub answers (jupyter_server's nudge)

    def __init__(self, c: Client, path: str, timeout: float = REQUEST_S):
        r = c.check(
            c.server.post(
                c.base + "api/sessions",
                json={"path": path, "type": "notebook", "name": path, "kernel": {"name": "python3"}},
                timeout=REQUEST_S,
            ),
            "POST api/sessions",
        )
        self.session = r.json()
        self.id = self.session["kernel"]["id"]
        self._open(
            f"ws://127.0.0.1:{c.port}/user/{c.name}/api/kernels/{self.id}/channels",
            timeout,
            host=f"{c.name}.localhost:{c.port}",
            username=c.name,
            header=[f"Authorization: token {c.server.headers['Authorization'][6:]}"],
        )

    @classmethod
    def at(cls, url: str, *, timeout: float, header: tuple[str, ...] = (), username: str = "") -> Kernel:
        """The kernel whose channels websocket is `url` (ws://HOST/api/kernels/ID/channels), ready to run cells."""
        kernel = cls.__new__(cls)
        kernel.session, kernel.id = {}, url.rstrip("/").split("/")[-2]
        kernel._open(url, timeout, header=list(header), username=username)
        return kernel

    def _open(self, url: str, timeout: float, *, header: list[str], username: str, host: str | None = None) -> None:
        import websocket

        self.timeout, self.username, self.client_id = timeout, username, secrets.token_hex(16)
        started = time.monotonic()
        try:
            self.ws = websocket.create_connection(
                f"{url}?session_id={self.client_id}", timeout=timeout, host=host, header=header
            )
        except (websocket.WebSocketException, OSError) as err:  # when, for the hub's log lines of the same moment
            raise StepError(
                f"the kernel's websocket did not open ({time.monotonic() - started:.1f} s after "
                f"asking, at {_clock()}): {type(err).__name__}: {err}"
            ) from err
        self.ready()

    def _send(self, msg_type: str, content: dict, wait: Waiting) -> str:
        """Send a shell request as part of `wait`; its msg_id."""
        import websocket

        msg_id = secrets.token_hex(8)
        self.ws.settimeout(max(0.01, wait.deadline - time.monotonic()))  # a full send buffer waits no longer
        try:
            self.ws.send(
                json.dumps(
                    {
                        "header": {
                            "msg_id": msg_id,
                            "msg_type": msg_type,
                            "session": self.client_id,
                            "username": self.username,
                            "version": "5.3",
                            "date": "",
                        },
                        "parent_header": {},
                        "metadata": {},
                        "channel": "shell",
                        "buffers": [],
                        "content": content,
                    }
                )
            )
        except (websocket.WebSocketException, OSError) as err:
            raise StepError(wait.said(f"{msg_type} to be sent", f"{type(err).__name__}: {err}")) from err
        wait.mine.add(msg_id)
        return msg_id

    def _next(self, wait: Waiting, waited_for: str, until: float | None = None) -> dict | None:
        """The next kernel message, or None once `until` (the wait's deadline by default) has passed. Each read
        waits at most the time left: a ping (answered by websocket-client) or any frame ends the read, and the
        deadline stays where it was."""
        import websocket
        from websocket import ABNF

        until = wait.deadline if until is None else until
        while (left := until - time.monotonic()) > 0:
            self.ws.settimeout(left)
            try:
                opcode, frame = self.ws.recv_data_frame(control_frame=True)
            except websocket.WebSocketTimeoutException:
                return None
            except (websocket.WebSocketException, OSError) as err:
                raise StepError(
                    wait.said(waited_for, f"the kernel's websocket closed at {_clock()}: {type(err).__name__}: {err}")
                ) from err
            if opcode == ABNF.OPCODE_CLOSE:
                raise StepError(
                    wait.said(
                        waited_for,
                        f"the server closed the kernel's websocket at {_clock()} "
                        f"({frame.data[2:].decode(errors='replace')!r})",
                    )
                )
            if opcode == ABNF.OPCODE_PING:
                wait.pings += 1
            elif opcode == ABNF.OPCODE_TEXT:
                msg = json.loads(frame.data)
                wait.saw(msg)
                return msg
        return None

    def ready(self, timeout: float | None = None) -> None:
        """Wait until the kernel answers: a kernel_info_reply on shell and an IOPub status for that request, what
        JupyterLab's KernelConnection waits for before it sends a cell; kernel_info is sent again every NUDGE_S
        until IOPub answers, as jupyter_server's nudge does. Then this websocket's IOPub subscription is live and a
        kernel that has just (re)started cannot lose the first cell's output (its status and stream messages are
        published before a subscription that is not yet live)."""
        waited_for = "a kernel_info_reply on shell and an IOPub status for it"
        wait = Waiting("the kernel's readiness", min(self.timeout, self.READY_S) if timeout is None else timeout)
        reply = iopub = False
        while not (reply and iopub):
            if time.monotonic() >= wait.deadline:
                raise StepError(
                    wait.said(
                        waited_for,
                        f"kernel_info_request sent {len(wait.mine)} times; "
                        + (
                            "IOPub answered, no kernel_info_reply"
                            if iopub
                            else f"{'a' if reply else 'no'} kernel_info_reply, no IOPub status for any"
                        ),
                    )
                )
            if not iopub:  # no answer on IOPub yet: nudge again (a reply on shell alone does not prove IOPub)
                self._send("kernel_info_request", {}, wait)
            nudge = wait.deadline if iopub else min(wait.deadline, time.monotonic() + self.NUDGE_S)
            while not (reply and iopub) and (msg := self._next(wait, waited_for, nudge)) is not None:
                kind, content = msg.get("msg_type") or msg["header"]["msg_type"], msg.get("content", {})
                if kind == "status" and content.get("execution_state") == "dead":
                    raise StepError(wait.said(waited_for, "the kernel is dead"))
                if msg.get("parent_header", {}).get("msg_id") in wait.mine:
                    reply = reply or kind == "kernel_info_reply"
                    iopub = iopub or (kind == "status" and msg.get("channel") == "iopub")
        self.is_ready = True

    def execute(self, code: str) -> tuple[str, str]:
        """Run `code`; (status, text of its outputs and errors). Raises StepError if the kernel dies or restarts,
        or when its execute_reply or the idle status after it does not come within the timeout (saying which)."""
        if not self.is_ready:
            self.ready()
        first = code.strip().splitlines()[0] if code.strip() else ""
        wait = Waiting(f"the cell `{first[:60]}{'…' if len(first) > 60 else ''}`", self.timeout)
        msg_id = self._send(
            "execute_request",
            {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
            wait,
        )
        out, status, idle, replied = [], None, False, 0.0

        def waited_for() -> str:
            return (
                "its idle status on IOPub (and the output before it)"
                if status is not None
                else f"its execute_reply on shell{' (its idle status came)' if idle else ''}"
            )

        while (msg := self._next(wait, waited_for())) is not None:  # reply (shell) and idle (iopub): either order
            kind, content = msg.get("msg_type") or msg["header"]["msg_type"], msg.get("content", {})
            if kind == "status" and content.get("execution_state") in ("restarting", "dead"):
                self.is_ready = False  # restarted: the next cell waits until it answers again
                raise StepError(
                    f"the kernel {content['execution_state']} while running a cell "
                    f"({time.monotonic() - wait.started:.1f} s into it, at {_clock()})"
                )
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if kind == "stream":
                out.append(content.get("text", ""))
            elif kind in ("execute_result", "display_data"):
                out.append(content.get("data", {}).get("text/plain", ""))
            elif kind == "error":
                out.append(f"{content.get('ename')}: {content.get('evalue')}")
            elif kind == "execute_reply":
                status, replied = content.get("status"), time.monotonic() - wait.started
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
            if idle and status is not None:
                return status, "".join(out)
        text = "".join(out)
        progress = (f"its execute_reply came ({status}, {replied:.1f} s in); " if status is not None else "") + (
            f"output so far: {text[-200:]!r}" if text else "no output"
        )
        raise StepError(wait.said(waited_for(), progress))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()


def code_cells(notebook: dict) -> list[str]:
    return [
        "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
    ]


LOW_MEMORY = threading.Event()  # set by the Sampler: the machine is nearly out of memory, start no further step
LOW_MEMORY_MB = 1500


def run_student(
    s: Student, url: str, port: int, deadline: float, keep_kernel: bool = True, lab_polls_s: float | None = None
) -> Student:
    """Every step of one student, timed; the first failure ends their run (and is recorded with its cause).
    `keep_kernel=False`: the notebook's kernel is shut down after its cells (the student closes it).
    `lab_polls_s`: their JupyterLab page polls the server this often from their server's start to their Submit
    (`LabPage`), then is closed."""
    c = Client(url, port, s.name)
    step = "login"

    def timed(name: str, fn, *args):
        nonlocal step
        step = name
        if LOW_MEMORY.is_set():
            raise StepError(f"not started: the machine had under {LOW_MEMORY_MB} MB available (the driver's guard)")
        started = time.monotonic()
        result = fn(*args)
        s.times[name] = time.monotonic() - started
        return result

    try:
        timed("login", login, c, s.password)
        s.token = timed("spawn", spawn, c, deadline)
        with LabPage(c, lab_polls_s) as page:
            timed("fetch", fetch, c)
            timed("open", open_and_answer, c, s.notebook)
            cells = code_cells(s.notebook)
            kernel = timed("kernel", lambda: _first_cell(c, cells, s))
            try:
                timed("cells", lambda: [_cell(kernel, code, s) for code in cells[1:]])
            finally:
                if not keep_kernel:
                    kernel.close()
                    c.server.delete(c.base + f"api/sessions/{kernel.session['id']}", timeout=REQUEST_S)
            s.validate = timed("validate", _form, c, "assignments/validate", {"path": NOTEBOOK}, "Validate")
            if not s.validate.get("success"):
                raise StepError(f"Validate did not run: ...{str(s.validate.get('value'))[-500:]}")  # the error's end
            submitted = timed(
                "submit", _form, c, "assignments/submit", {"course_id": COURSE_ID, "assignment_id": AID}, "Submit"
            )
            if isinstance(submitted, dict) and submitted.get("success") is False:
                raise StepError(f"Submit: {str(submitted.get('value'))[:300]}")
        s.polls = page.polls
        s.finished = time.monotonic()  # their server's last activity (the page closed): from here on they are idle
    except Exception as err:  # noqa: BLE001 - every failure is counted with its cause, never raised past the student
        cause = str(err) if isinstance(err, StepError) else f"{type(err).__name__}: {err}"
        s.failure = f"{step}: {cause}"
        if not isinstance(err, (StepError, OSError)):
            s.failure += "\n" + traceback.format_exc(limit=3)
    return s


def _first_cell(c: Client, cells: list[str], s: Student) -> Kernel:
    kernel = Kernel(c, NOTEBOOK)
    _cell(kernel, cells[0], s)
    return kernel


def _cell(kernel: Kernel, code: str, s: Student) -> None:
    status, text = kernel.execute(code)
    if status != "ok":
        s.cell_errors.append(text.strip().splitlines()[-1][:200] if text.strip() else status)


# --- a student in a real browser ------------------------------------------------------------------------------------

BROWSER_STEPS = ("browser_lab", "browser_first_cell")


def browser_session(port: int, name: str, password: str, path: str, timeout_s: float = 300) -> dict:
    """One student in a real Chromium (Debian's, driven by Playwright, tests/chromium.py): the hub's login form (at
    localhost:`port`, the host its cookies and users' subdomains belong to)
    until their JupyterLab has rendered (the hub's spawn page in between), then `path` opened in it and its first
    code cell run as a student runs it (click, Ctrl+Enter) until its prompt shows [1]. Returns the seconds of each
    of BROWSER_STEPS and `title`, the notebook's first rendered line."""
    from playwright.sync_api import sync_playwright

    from tests.chromium import launch

    times: dict = {}
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            page.set_default_timeout(timeout_s * 1000)
            started = time.monotonic()
            page.goto(f"http://localhost:{port}/hub/login")  # the hub's host (its cookies and users' subdomains)
            page.fill("#username_input", name)
            page.fill("#password_input", password)
            page.click("#login_submit", no_wait_after=True)
            page.wait_for_url(re.compile(rf"^http://{name}\.localhost:{port}/user/{name}/lab"))
            page.locator("#jp-main-dock-panel").wait_for()
            times["browser_lab"] = time.monotonic() - started
            started = time.monotonic()
            page.goto(f"http://{name}.localhost:{port}/user/{name}/lab/tree/{path}")
            notebook = page.locator(".jp-NotebookPanel:visible")
            page.locator("#jp-main-statusbar").get_by_text(re.compile(r"^[^|]+ \| Idle$")).wait_for()
            first = notebook.locator(".jp-CodeCell").first
            first.locator(".jp-InputPrompt").click()
            page.keyboard.press("Control+Enter")
            first.locator(".jp-InputPrompt", has_text="[1]").wait_for()
            times["browser_first_cell"] = time.monotonic() - started
            times["title"] = notebook.locator(".jp-MarkdownCell").first.inner_text().splitlines()[0]
        finally:
            browser.close()
    return times


def _run_browser(s: Student, port: int) -> Student:
    try:
        got = browser_session(port, s.name, s.password, LESSON)
        s.times.update({k: v for k, v in got.items() if k in BROWSER_STEPS})
    except Exception as err:  # noqa: BLE001 - counted with its cause, never raised past the student
        s.failure = f"browser: {type(err).__name__}: {str(err)[:300]}"
    return s


LESSON = "lessons/01_dot_product.ipynb"  # what a browser student opens: the lesson, copied into every home


# --- measuring: memory and CPU from /proc -------------------------------------------------------------------------


class Sampler(threading.Thread):
    """Samples /proc every `every` s: the machine's memory in use, each student's RSS (their server and kernels),
    what their control group holds against their memory limit, and the CPU's busy share; every `pss_every` s each
    student's PSS (their processes' proportional set size, /proc/PID/smaps_rollup: a page shared by n processes
    counts 1/n to each, so pages their kernels share with their zygote count once), a slower read."""

    def __init__(self, uids: dict[int, str], every: float = 0.5, pss_every: float = 5.0):
        super().__init__(daemon=True)
        self.uids, self.every, self.pss_every = uids, every, pss_every
        self.stopped = threading.Event()
        self.peak_machine = 0
        self.peak_student: dict[str, int] = {}
        self.peak_pss: dict[str, int] = {}
        self.peak_group: dict[str, int] = {}
        self.cpu_student: dict[str, float] = {}  # CPU seconds of their processes (reaped kernels included)
        self.cpu: list[float] = []
        self.base_used = _machine_used()

    def run(self) -> None:
        last, pss_at = _cpu_times(), 0.0
        while not self.stopped.wait(self.every):
            self.peak_machine = max(self.peak_machine, _machine_used())
            if _available() < LOW_MEMORY_MB * 2**20:
                LOW_MEMORY.set()
            for name, (rss, cpu) in _by_user(self.uids).items():
                self.peak_student[name] = max(self.peak_student.get(name, 0), rss)
                self.cpu_student[name] = max(self.cpu_student.get(name, 0.0), cpu)
            for name in self.uids.values():
                charged = _group_memory(name)
                if charged is not None:
                    self.peak_group[name] = max(self.peak_group.get(name, 0), charged)
            if time.monotonic() - pss_at >= self.pss_every:
                pss_at = time.monotonic()
                for name, pss in _pss_by_user(self.uids).items():
                    self.peak_pss[name] = max(self.peak_pss.get(name, 0), pss)
            now = _cpu_times()
            busy, total = now[0] - last[0], now[1] - last[1]
            if total > 0:
                self.cpu.append(busy / total)
            last = now

    def stop(self) -> dict:
        self.stopped.set()
        self.join(timeout=5)
        per = sorted(self.peak_student.values())
        pss, group = sorted(self.peak_pss.values()), sorted(self.peak_group.values())
        return {
            "machine_peak_mb": self.peak_machine / 2**20,
            "machine_before_mb": self.base_used / 2**20,
            "student_peak_mb": {n: v / 2**20 for n, v in sorted(self.peak_student.items())},
            "student_peak_mb_median": statistics.median(per) / 2**20 if per else 0,
            "student_peak_mb_max": per[-1] / 2**20 if per else 0,
            "student_pss_peak_mb": {n: v / 2**20 for n, v in sorted(self.peak_pss.items())},
            "student_pss_peak_mb_median": statistics.median(pss) / 2**20 if pss else 0,
            "student_pss_peak_mb_max": pss[-1] / 2**20 if pss else 0,
            "student_group_peak_mb": {n: v / 2**20 for n, v in sorted(self.peak_group.items())},
            "student_group_peak_mb_median": statistics.median(group) / 2**20 if group else 0,
            "student_group_peak_mb_max": group[-1] / 2**20 if group else 0,
            "cpu_mean": statistics.fmean(self.cpu) if self.cpu else 0,
            "cpu_max": max(self.cpu, default=0),
            "student_cpu_s": dict(sorted(self.cpu_student.items())),
            "student_cpu_s_median": statistics.median(self.cpu_student.values()) if self.cpu_student else 0,
            "cpus": os.cpu_count(),
        }


def _machine_used() -> int:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) * 1024


def _available() -> int:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(info["MemAvailable"].split()[0]) * 1024


def _cpu_times() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


TICK = os.sysconf("SC_CLK_TCK")


def _by_user(uids: dict[int, str]) -> dict[str, tuple[int, float]]:
    """name -> (RSS bytes, CPU seconds) of that user's processes now; CPU counts what their reaped children used
    (a Validate's kernel, once the server has reaped it) and so only grows while their server runs."""
    out: dict[str, tuple[int, float]] = {}
    for folder in Path("/proc").glob("[0-9]*"):
        try:  # a process's folder is its owner's: a stat, not two reads, for each of the machine's processes
            if folder.stat().st_uid not in uids:
                continue
            text = (folder / "status").read_text()
            stat = (folder / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        uid = re.search(r"^Uid:\s+(\d+)", text, re.M)
        rss = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
        if uid and rss and int(uid.group(1)) in uids:
            name = uids[int(uid.group(1))]
            cpu = sum(int(x) for x in stat[11:15]) / TICK  # utime, stime, cutime, cstime
            have = out.get(name, (0, 0.0))
            out[name] = (have[0] + int(rss.group(1)) * 1024, have[1] + cpu)
    return out


def _pss_by_user(uids: dict[int, str]) -> dict[str, int]:
    """name -> PSS bytes of that user's processes now (/proc/PID/smaps_rollup, readable by root)."""
    out: dict[str, int] = {}
    for folder in Path("/proc").glob("[0-9]*"):
        try:
            uid = folder.stat().st_uid
            if uid not in uids:
                continue
            found = re.search(r"^Pss:\s+(\d+) kB", (folder / "smaps_rollup").read_text(), re.M)
        except (OSError, IndexError):
            continue
        if found:
            out[uids[uid]] = out.get(uids[uid], 0) + int(found.group(1)) * 1024
    return out


def _group_memory(name: str) -> int | None:
    """What the student's control group holds against their memory limit now, bytes (None: no group)."""
    from twoprim.classroom.limits import find_hierarchy

    hierarchy = find_hierarchy()
    if hierarchy is None:
        return None
    folder = hierarchy.memory / name
    try:
        text = (folder / ("memory.current" if hierarchy.version == 2 else "memory.usage_in_bytes")).read_text()
    except OSError:
        return None
    return int(text)


def warm_kernel_lines(log: str) -> dict:
    """What the hub's log says of students' kernels (twoprim/learner/warm_kernels.py): how many were forked from
    their server's zygote, how many started the usual way and why, how many forked kernels ended without their
    server's stopping them (a kill at the memory limit among them), how many zygotes were retired for kernels that
    died at start, and how long each zygote took to be ready."""
    usual = re.findall(r"started the usual way: the zygote cannot serve it: (.*)", log)
    ready = [float(x) for x in re.findall(r"the zygote \(pid \d+\) is ready, ([\d.]+) s after", log)]
    ended = re.findall(r"ended [\d.]+ s after its fork, not stopped by its server: (.*)", log)
    return {
        "forked": len(re.findall(r"forked from the zygote", log)),
        "usual": len(usual),
        "usual_why": sorted(set(usual))[:10],
        "ended": len(ended),
        "ended_how": sorted(set(ended))[:10],
        "retired": len(re.findall(r"the zygote \(pid \d+\) is retired", log)),
        "zygotes_ready": len(ready),
        "zygote_ready_s_p50": percentile(ready, 50) if ready else None,
        "zygote_ready_s_max": max(ready, default=None),
    }


# --- the class at once ----------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def drive(
    room: Classroom,
    notebooks: dict[str, dict],
    *,
    window_s: float = 10,
    deadline_s: float = 900,
    keep_kernel: bool = True,
    browsers: tuple[str, ...] = (),
    lab_polls_s: float | None = None,
) -> dict:
    """Every student of `notebooks` (name -> the notebook they submit) through every step, starting evenly over
    `window_s`, and each of `browsers` in a real Chromium among them (log in, open the lesson, run its first cell);
    `lab_polls_s`: each student's JupyterLab page polls as JupyterLab does (`LabPage`). The report (per step
    p50/p95/max, failures, memory, CPU)."""
    uids = {pwd.getpwnam(n).pw_uid: n for n in (*notebooks, *browsers)}
    sampler = Sampler(uids)
    sampler.start()
    started = time.monotonic()
    deadline = started + deadline_s
    students = [Student(n, room.passwords[n], nb) for n, nb in notebooks.items()]
    watchers = [Student(n, room.passwords[n], {}) for n in browsers]
    threads = []
    for i, s in enumerate(students + watchers):
        delay = window_s * i / max(1, len(students) + len(watchers) - 1) if len(students) + len(watchers) > 1 else 0

        def one(s=s, d=delay):
            time.sleep(d)
            if s in watchers:
                _run_browser(s, room.port)
            else:
                run_student(s, room.url, room.port, deadline, keep_kernel, lab_polls_s)

        t = threading.Thread(target=one, daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=max(1, deadline - time.monotonic()))
    for s, t in zip(students + watchers, threads, strict=True):
        if t.is_alive() and not s.failure:
            s.failure = f"not finished within {deadline_s:.0f} s"
    wall = time.monotonic() - started
    return {
        "students": len(students),
        "browsers": len(watchers),
        "window_s": window_s,
        "wall_s": wall,
        "steps": {**_step_table(students), **_step_table(watchers, BROWSER_STEPS)},
        "failures": {s.name: s.failure for s in students + watchers if s.failure},
        "cell_errors": {s.name: s.cell_errors for s in students if s.cell_errors},
        "validate": {s.name: s.validate for s in students},
        **sampler.stop(),
        "per_student": {s.name: s.times for s in students},
        "finished_s": {s.name: s.finished - started for s in students if s.finished},
        "lab_polls": {s.name: s.polls for s in students},
        "started_monotonic": started,
        "tokens": {s.name: s.token for s in students},
        "hub_log": {s.name: room.lines_about(s.name) for s in students + watchers if s.failure},
        "warm_kernels": warm_kernel_lines(room.text()),
        "oom_kills": {s.name: _oom_kills(s.name) for s in students + watchers if s.failure},
    }


def _oom_kills(name: str) -> int | None:
    """Processes of the student's control group the kernel killed for memory (their memory limit), or None where
    there is no group to read: in a failure's report, as the hub's own line about it waits for its next poll."""
    from twoprim.classroom.limits import find_hierarchy, oom_kills

    hierarchy = find_hierarchy()
    try:
        if hierarchy is None or not (hierarchy.memory / name).is_dir():  # no group (any more): nothing to say
            return None
        return oom_kills(hierarchy, name)
    except (OSError, ValueError):
        return None


def _step_table(students: list[Student], steps: tuple[str, ...] = STEPS) -> dict:
    table = {}
    for step in steps:
        values = [s.times[step] for s in students if step in s.times]
        if values:
            table[step] = {
                "n": len(values),
                "p50": percentile(values, 50),
                "p95": percentile(values, 95),
                "max": max(values),
            }
    first = [
        s.times["login"] + s.times["spawn"] + s.times["fetch"] + s.times["open"] + s.times["kernel"]
        for s in students
        if "kernel" in s.times and steps == STEPS
    ]
    if first:
        table["login_to_first_cell"] = {
            "n": len(first),
            "p50": percentile(first, 50),
            "p95": percentile(first, 95),
            "max": max(first),
        }
    return table


def format_report(report: dict) -> str:
    """The report as a text table."""
    lines = [
        f"{report['students']} students (and {report.get('browsers', 0)} in Chromium), logins spread over "
        f"{report['window_s']:g} s, {report['wall_s']:.0f} s "
        f"in all",
        "",
        f"  {'step':22} {'n':>3} {'p50 s':>8} {'p95 s':>8} {'max s':>8}",
    ]
    for step, row in report["steps"].items():
        lines.append(f"  {step:22} {row['n']:3d} {row['p50']:8.1f} {row['p95']:8.1f} {row['max']:8.1f}")
    lines += [
        "",
        f"  memory in use: {report['machine_before_mb']:.0f} MB before, {report['machine_peak_mb']:.0f} MB "
        f"at the peak; per student (server + kernels, RSS): median {report['student_peak_mb_median']:.0f} MB, "
        f"max {report['student_peak_mb_max']:.0f} MB; PSS (shared pages counted once): median "
        f"{report.get('student_pss_peak_mb_median', 0):.0f} MB, max {report.get('student_pss_peak_mb_max', 0):.0f} "
        f"MB; their control group (what the limit counts): median "
        f"{report.get('student_group_peak_mb_median', 0):.0f} MB, max "
        f"{report.get('student_group_peak_mb_max', 0):.0f} MB",
        f"  CPU ({report['cpus']} cores): {100 * report['cpu_mean']:.0f}% busy on average, "
        f"{100 * report['cpu_max']:.0f}% at the peak; per student (their processes): median "
        f"{report['student_cpu_s_median']:.0f} CPU s",
        f"  kernels: {report.get('warm_kernels', {}).get('forked', 0)} forked from a zygote, "
        f"{report.get('warm_kernels', {}).get('usual', 0)} started the usual way "
        f"{report.get('warm_kernels', {}).get('usual_why', [])}; zygote ready p50 "
        f"{report.get('warm_kernels', {}).get('zygote_ready_s_p50')} s; "
        f"{report.get('warm_kernels', {}).get('ended', 0)} forked ended unasked "
        f"{report.get('warm_kernels', {}).get('ended_how', [])}, "
        f"{report.get('warm_kernels', {}).get('retired', 0)} zygotes retired",
        f"  failures: {len(report['failures'])}",
    ]
    for name, why in report["failures"].items():
        lines.append(f"    {name}: {why}")
        if report.get("oom_kills", {}).get(name) is not None:
            lines.append(f"      processes killed at their memory limit: {report['oom_kills'][name]}")
        lines += [f"      hub log: {line}" for line in report.get("hub_log", {}).get(name, [])]
    return "\n".join(lines)


def class_notebooks(names: list[str], wrong_every: int = 0) -> dict[str, dict]:
    """name -> the notebook they hand in: ex01_dot answered; every `wrong_every`-th with a wrong `dot`."""
    import nbformat

    from tests.classroom import answered, solution_code

    right = json.loads(nbformat.writes(answered(AID)))
    sol = f"{AID}-dot-solution"
    wrong = json.loads(
        nbformat.writes(
            answered(AID, {sol: solution_code(AID)[sol].replace("return (x * w).sum()", "return x.sum() * w.sum()")})
        )
    )
    assert wrong != right, "the wrong answer must differ from the solution"
    return {n: (wrong if wrong_every and i % wrong_every == wrong_every - 1 else right) for i, n in enumerate(names)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--students", type=int, default=5, help="simulated students (1-60)")
    p.add_argument("--window", type=float, default=60, help="their logins spread evenly over this many seconds")
    p.add_argument("--deadline", type=float, default=1200, help="the whole run at most, seconds")
    p.add_argument("--memory-mb", type=int, default=2048, help="./course hub --memory-mb")
    p.add_argument(
        "--browsers",
        type=int,
        default=0,
        help="students more, each in a real Chromium: log in, open lesson 01, run its first cell",
    )
    p.add_argument(
        "--lab-polls",
        type=float,
        default=0,
        metavar="S",
        help=f"each student's JupyterLab page polls their server every S s, as JupyterLab does ({LAB_POLL_S:g}); "
        "0 (the default, as the recorded runs): only the steps' own requests",
    )
    p.add_argument(
        "--close-kernel",
        action="store_true",
        help="each student shuts their notebook's kernel down after its cells (before Validate): what "
        "fits when every kernel kept would not",
    )
    p.add_argument("--out", type=Path, help="write the report as JSON here")
    args = p.parse_args(argv)
    if not 0 <= args.browsers <= 5:
        p.error(f"--browsers {args.browsers}: give 0 to 5 (each is a Chromium of ~300 MB beside the class)")
    if not 1 <= args.students <= 60:
        p.error(f"--students {args.students}: give 1 to 60 (each is a Unix account and a JupyterLab server)")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()  # what else the machine was doing (it is shared)
    with Classroom(
        args.students + args.browsers, hub_args=("--memory-mb", str(args.memory_mb), "--cull-idle", "0")
    ) as room:
        names = room.students[: args.students]
        report = drive(
            room,
            class_notebooks(names),
            window_s=args.window,
            deadline_s=args.deadline,
            keep_kernel=not args.close_kernel,
            browsers=tuple(room.students[args.students :]),
            lab_polls_s=args.lab_polls or None,
        )
    report.pop("tokens", None)
    report.pop("started_monotonic", None)  # time.monotonic() of this process: no meaning in a file
    report.update(
        command=" ".join(["scripts/bench_hub.py", *(argv if argv is not None else sys.argv[1:])]),
        started=started,
        memory_mb_limit=args.memory_mb,
        kernels_kept=not args.close_kernel,
        lab_polls_s=args.lab_polls or None,
        loadavg_before=load_before,
        loadavg_after=os.getloadavg(),
    )
    print(format_report(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
