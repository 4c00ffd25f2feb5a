"""The classroom on JupyterHub (`./course hub`), end to end in a real browser, as the README's instructors run it.

In a copy of the course (tests/accounts.py: its .venv hard-linked and pointed at a Python every account can run),
one hub for the whole cycle, with throwaway accounts: the instructor releases ex01_dot from the formgrader, which
renders inside their JupyterLab (the fix for nbgrader #1870: subdomains and frame-ancestors 'self' on their server
only), then sets its due date there, which a student sees at the next request; two students log in, fetch it in the
Assignments tab, write `dot` (one right, one wrong; the wrong one's cosine_similarity forgets the norms), press
Validate (the wrong cosine_similarity's block reads as the check: verdict and next step first, no course code) and
Submit; in a student's JupyterLab terminal `course` is on PATH and `course progress` shows the formgrader's due
date; the instructor runs ./course collect, autograde and feedback; each student fetches feedback and reads their
own score, the two apart by exactly dot's points. Neither student can open the other's server or files, solutions/
or the gradebook; the assignment's self-grade cell, where there is one, says to submit instead (the hidden checks
are the instructor's). The hub is then started again over the same course, this time with --public over TLS (a
certificate the test makes for hub.localhost and *.hub.localhost): every submission is still there, the accounts
keep their passwords (one a student changed), and a student works at https://<name>.hub.localhost. At the end
`./course hub --remove-class --yes` deletes the three accounts the hub made. Bad input fails before anything is
created, in one line that says what to do. Screenshots of each step go to
$TWOPRIM_ARTIFACTS/hub (default .artifacts/hub/).

Creating accounts needs root (CI runs as root). As another user the test checks the not-root error and says that
the rest needs root.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import errno
import hashlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest

from twoprim.classroom.hub_checks import free_port
from twoprim.config import ROOT

from .accounts import SYSTEM_PATH, clone_for, delete_account, point_venv_at, shared_python, shared_tmp
from .chromium import launch
from .classroom import solution_code

# left out of `make test-fast`; a limit of its own: the classroom's browser test alone takes ~110 s on 2 busy cores,
# its hub start up to START_S
pytestmark = [pytest.mark.servers, pytest.mark.timeout(600)]

AID = "ex01_dot"
ARTIFACTS = Path(os.environ.get("TWOPRIM_ARTIFACTS") or ROOT / ".artifacts") / "hub"
START_S = 150  # accounts, the environment probe, JupyterHub and its proxy, on 2 busy cores
STOP_S = 60
RIGHT_DOT = (
    'def dot(x, w):\n    """x·w = Σᵢ xᵢ wᵢ as one element-wise product and one sum."""\n'
    '    guards.same_length("dot", x=x, w=w)  # x: (n,), w: (n,)\n'
    "    return (x * w).sum()  # (n,) * (n,) -> (n,) -> ()\n"
)
WRONG_DOT = (
    'def dot(x, w):\n    """x·w, summing each vector first (a slip: Σx·Σw is not Σ xᵢwᵢ)."""\n'
    '    guards.same_length("dot", x=x, w=w)  # x: (n,), w: (n,)\n'
    "    return x.sum() * w.sum()  # () * () -> ()\n"
)
# the wrong student's cosine_similarity forgets the norms: Validate must show the check's verdict, not a stack
WRONG_COSINE = solution_code(AID)[f"{AID}-cosine_similarity-solution"].replace(
    "return dots / norms.clamp_min(1e-8)", "return dots  # forgot to divide by the norms"
)
assert "forgot to divide" in WRONG_COSINE, "the solution's cosine_similarity changed: update WRONG_COSINE"
ISOLATION_CELL = """import json, os, shutil
from twoprim import hints, progress, state
hints.hint("dot")  # recorded in the student's own workspace
notes = []
room = progress._classroom(notes)  # what the exchange service tells this student's progress, with their server's token
def _open(path):
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").close()
        return "read"
    except Exception as err:
        return type(err).__name__
print("ISOLATION " + json.dumps({**{p: _open(p) for p in %r}, "workspace": str(state.workspace()),
                                 "released": sorted(room.released) if room else notes,
                                 "submitted": sorted(room.submitted) if room else notes,
                                 "due": {a: f"{d:%%Y-%%m-%%d %%H:%%M}" for a, d in room.due.items()} if room else notes,
                                 "course": shutil.which("course"), "threads": __import__("torch").get_num_threads()}))
"""


def _points(aid: str, function: str) -> float:
    """The visible and hidden points of `function`, from the solution notebook's metadata."""
    nb = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)
    ids = {f"{aid}-{function}", f"{aid}-{function}-hidden"}
    return sum(
        c.metadata["nbgrader"].get("points", 0)
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") in ids
    )


def _digest(folder: Path) -> str:
    """Every path under `folder` with its mode and content: what 'nothing in grader/ touched' compares."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        h.update(f"{path.relative_to(folder)} {st.st_mode:o} {st.st_uid}\n".encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _course(clone: Path, *args: str, user: pwd.struct_passwd | None = None, timeout: float = 120):
    """`./course ARGS` in the clone (as `user` when given), its output."""
    env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HOME": user.pw_dir if user else os.environ.get("HOME", "/root")}
    if user:
        env.update(USER=user.pw_name, LOGNAME=user.pw_name)
    ids: dict[str, Any] = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[]) if user else {}
    return subprocess.run(
        [str(clone / "course"), *args], cwd=clone, env=env, capture_output=True, text=True, timeout=timeout, **ids
    )


@pytest.fixture(scope="module")
def clone():
    """The course, copied to a folder every account may pass through (removed afterwards)."""
    if os.geteuid() != 0:
        yield None
        return
    base = shared_tmp("twoprim-hub-test-")
    try:
        python = shared_python(base / "python")
        course = base / "course"
        course.mkdir()
        venv = clone_for(course, node_modules=True)
        point_venv_at(venv, python)
        yield {"course": course, "venv": venv, "python": python, "base": base}
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- bad input: one line that says what to do, before anything is created ---------------------------------------


def _refused(clone, args: list[str], expected: str, *, user=None, names: tuple[str, ...] = ()) -> str:
    course = clone["course"]
    before = _digest(course / "grader")
    started = time.monotonic()
    proc = _course(course, "hub", *args, user=user, timeout=120)
    output = (proc.stdout + proc.stderr).strip()
    assert proc.returncode != 0, f"./course hub {' '.join(args)} started:\n{output}"
    assert len(output.splitlines()) == 1 and output.startswith("error: "), (
        f"not one line starting with 'error:':\n{output}"
    )
    assert expected in output, output
    assert "Traceback" not in output
    assert _digest(course / "grader") == before, f"grader/ changed although ./course hub refused: {output}"
    for name in names:
        with pytest.raises(KeyError):
            pwd.getpwnam(name)  # no account made
    assert time.monotonic() - started < 60, "a refusal should come before anything slow"
    return output


def _names(n: int) -> list[str]:
    tag = secrets.token_hex(3)
    return [f"tp{tag}{chr(ord('a') + i)}" for i in range(n)]


def test_not_root_is_refused(clone):
    """Accounts need root: as anyone else, one line saying to use sudo."""
    if os.geteuid() != 0:
        proc = subprocess.run(
            [str(ROOT / "course"), "hub", "--students", "alice,bob"], capture_output=True, text=True, timeout=120
        )
        out = (proc.stdout + proc.stderr).strip()
        assert proc.returncode != 0 and out.startswith("error: ") and "needs root: sudo" in out, out
        pytest.skip(
            "checked the not-root error; the rest of the classroom test creates Unix accounts, which "
            "needs root (CI runs as root)"
        )
    names = _names(2)
    _refused(
        clone,
        ["--students", ",".join(names), "--port", str(free_port())],
        "needs root: sudo",
        user=pwd.getpwnam("nobody"),
        names=tuple(names),
    )


@pytest.mark.parametrize(
    "students, expected, advice",
    [
        ("root", "'root' is an existing account that the course did not create", "name the student differently"),
        (
            "www-data",
            "'www-data' is an existing account that the course did not create",
            "name the student differently",
        ),
        ("Alice Smith", "'Alice Smith' is not a valid Unix user name", "correct it in --students"),
    ],
)
def test_unknown_or_invalid_student_is_refused(clone, students, expected, advice):
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    names = _names(1)
    output = _refused(
        clone, ["--students", f"{names[0]},{students}", "--port", str(free_port())], expected, names=tuple(names)
    )
    assert advice in output, output


def test_roster_missing_or_without_id_column_is_refused(clone):
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    names = _names(2)
    roster = clone["base"] / "roster.csv"
    _refused(clone, ["--roster", str(roster)], "cannot read the roster")
    roster.write_text("first_name,last_name\n" + "".join(f"{n},Student\n" for n in names))
    _refused(clone, ["--roster", str(roster)], "has no `id` column", names=tuple(names))


def test_port_in_use_is_refused(clone):
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    names = _names(2)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        out = _refused(
            clone,
            ["--students", ",".join(names), "--port", str(port)],
            f"port {port} on 127.0.0.1 is already in use",
            names=tuple(names),
        )
    assert f"--port {port + 1}" in out


def _drawn_ports(n: int) -> set[int]:
    """The ports the operating system picks for `n` sockets bound to port 0 with SO_REUSEADDR (as tornado binds),
    each closed."""
    drawn = set()
    for _ in range(n):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            drawn.add(s.getsockname()[1])
    return drawn


def test_a_picked_port_is_handed_to_no_other_socket_and_its_server_binds_it():
    """The hub's own ports and the tests' servers' come from hub_checks.free_port: until its server binds it, the
    operating system hands a picked port to no socket bound to port 0 (jupyter_client's kernel ports are picked that
    way), while a server that sets SO_REUSEADDR binds it at once. Beside it, ports merely seen free (bound to 0 and
    closed, the way they were picked before) are drawn again by the same sockets: that race once cost a CI run."""
    held = {free_port() for _ in range(20)}
    seen_free = set()  # 40: 10,000 draws cover ~38% of the odd ports bind(0) takes; all 40 missed: ~5e-9
    for _ in range(40):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            seen_free.add(s.getsockname()[1])
    drawn = _drawn_ports(10_000)
    assert seen_free & drawn, f"10,000 draws of {len(drawn)} distinct ports missed all 40 ports seen free"
    assert not held & drawn, f"held ports handed out again: {sorted(held & drawn)}"
    port = min(held)
    with socket.socket() as plain:
        with pytest.raises(OSError) as taken:
            plain.bind(("127.0.0.1", port))  # held: a socket without SO_REUSEADDR is refused it
        assert taken.value.errno == errno.EADDRINUSE
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        assert _listening(port)


def test_missing_proxy_is_refused(clone):
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    names = _names(2)
    modules = clone["course"] / "node_modules"
    modules.rename(modules.with_name("node_modules.off"))
    try:
        _refused(
            clone,
            ["--students", ",".join(names), "--port", str(free_port())],
            "configurable-http-proxy, is not installed",
            names=tuple(names),
        )
    finally:
        modules.with_name("node_modules.off").rename(modules)


def test_environment_other_accounts_cannot_run_is_refused(clone):
    """Built by root from a Python in a private folder (pyenv under /root): students' servers could not start."""
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    names = _names(2)
    private = clone["base"] / "private"
    private.mkdir(mode=0o700, exist_ok=True)
    if not (private / "python3.11").exists():
        (private / "python3.11").symlink_to(clone["python"])
    point_venv_at(clone["venv"], str(private / "python3.11"))
    try:
        out = _refused(
            clone,
            ["--students", ",".join(names), "--port", str(free_port())],
            "other accounts cannot run the course environment's Python",
            names=tuple(names),
        )
        assert f"rm -rf {clone['venv']} && make -C {clone['course']} hub PYTHON=" in out, out
    finally:
        point_venv_at(clone["venv"], clone["python"])


# --- on the network: TLS only, a certificate for HOST and *.HOST ----------------------------------------------------

PUBLIC_HOST = "hub.localhost"  # browsers resolve it and every <name>.hub.localhost to loopback, as DNS would a host


def _certificate(folder: Path, names: list[str], *, days: int = 30) -> dict:
    """A certificate for `names` from a CA of the test's own (`grading.tls.issue`), valid for `days` (< 0: it
    expired that long ago): {"ca", "cert", "key"} paths and the SPKI hash Chromium is told to accept
    (`--ignore-certificate-errors-spki-list`: that one key, nothing else)."""
    import base64
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from twoprim.grading.tls import issue

    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=max(0, -2 * days), hours=1)
    issued = issue(names[0], dns_names=tuple(names), days=abs(days), start=start)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {role: folder / f"{role}.pem" for role in issued}
    for role, data in issued.items():
        paths[role].write_bytes(data)
    paths["key"].chmod(0o600)
    spki = (
        x509.load_pem_x509_certificate(issued["cert"])
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return {**paths, "spki": base64.b64encode(hashlib.sha256(spki).digest()).decode()}


def test_a_public_hub_without_tls_or_with_the_wrong_certificate_is_refused(clone):
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    names = _names(2)
    base = ["--students", ",".join(names), "--port", str(free_port())]
    right = _certificate(clone["base"] / "tls-right", [PUBLIC_HOST, f"*.{PUBLIC_HOST}"])
    only_host = _certificate(clone["base"] / "tls-no-wildcard", [PUBLIC_HOST])
    expired = _certificate(clone["base"] / "tls-expired", [PUBLIC_HOST, f"*.{PUBLIC_HOST}"], days=-1)
    tls = ["--ssl-cert", str(right["cert"]), "--ssl-key", str(right["key"])]
    out = _refused(
        clone,
        [*base, "--ip", "0.0.0.0"],
        "--ip 0.0.0.0 would serve passwords and students' work to the network in clear",
        names=tuple(names),
    )
    assert "add --public HOST with --ssl-cert and --ssl-key" in out
    _refused(
        clone,
        [*base, *tls],
        "--ssl-cert and --ssl-key serve the class on the network: add --public HOST",
        names=tuple(names),
    )
    out = _refused(
        clone,
        [*base, "--public", PUBLIC_HOST],
        f"--public {PUBLIC_HOST} serves passwords and students' work over the network, so only over TLS",
        names=tuple(names),
    )
    assert f"a certificate for {PUBLIC_HOST} and *.{PUBLIC_HOST}" in out
    _refused(clone, [*base, "--public", "10.0.0.5", *tls], "--public '10.0.0.5' is not a host name", names=tuple(names))
    out = _refused(
        clone,
        [*base, "--public", PUBLIC_HOST, "--ssl-cert", str(only_host["cert"]), "--ssl-key", str(only_host["key"])],
        f"is for {PUBLIC_HOST}, not for alice.{PUBLIC_HOST}",
        names=tuple(names),
    )
    assert f"the certificate must name {PUBLIC_HOST} and *.{PUBLIC_HOST}" in out
    _refused(
        clone,
        [*base, "--public", PUBLIC_HOST, "--ssl-cert", str(right["cert"]), "--ssl-key", str(only_host["key"])],
        f"--ssl-key {only_host['key']} is not the private key of --ssl-cert",
        names=tuple(names),
    )
    _refused(
        clone,
        [*base, "--public", PUBLIC_HOST, "--ssl-cert", str(expired["cert"]), "--ssl-key", str(expired["key"])],
        "not now: renew it",
        names=tuple(names),
    )
    _refused(
        clone,
        [*base, "--public", PUBLIC_HOST, "--ssl-cert", str(clone["base"] / "none.pem"), "--ssl-key", str(right["key"])],
        f"--ssl-cert {clone['base'] / 'none.pem'} is not a file",
        names=tuple(names),
    )


def test_a_new_password_for_someone_outside_the_class_or_not_the_courses_is_refused(clone):
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    names = _names(2)
    base = ["--students", ",".join(names), "--port", str(free_port())]
    _refused(
        clone,
        [*base, "--new-password", "mallory"],
        "--new-password mallory: 'mallory' is not in this class",
        names=tuple(names),
    )
    person = _names(1)[0] + "p"  # an instructor's own account, made outside the course
    subprocess.run(["useradd", "--create-home", person], check=True, capture_output=True, timeout=60)
    try:
        out = _refused(
            clone,
            [*base, "--instructor", person, "--new-password", person],
            f"--new-password {person}: {person!r} is an account the course did not create",
            names=tuple(names),
        )
        assert "its owner changes it with `passwd`" in out
    finally:
        delete_account(person)


def _tls_names(port: int, ca: Path, name: str) -> str:
    """The name the proxy's certificate was verified for, connecting as a browser would to `name`."""
    import ssl

    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,  # verifies the chain and the name
    ):
        cert: Any = tls.getpeercert()  # (verified: the peer's certificate, as a dict)
        return dict(x[0] for x in cert["subject"])["commonName"]


def _plain_http(port: int) -> str:
    """What a plain-HTTP request for the login page gets on `port`: "HTTP <status>", or the error that ended it."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/hub/login", headers={"Host": f"{PUBLIC_HOST}:{port}"})
        return f"HTTP {conn.getresponse().status}"
    except (OSError, http.client.HTTPException) as err:
        return type(err).__name__
    finally:
        conn.close()


def _logs_in(name: str, password: str) -> bool:
    """Whether PAM, as JupyterHub asks it, accepts `password` for `name`."""
    import pamela

    try:
        pamela.authenticate(name, password, service="login")
        return True
    except pamela.PAMError:
        return False


# --- the whole cycle ----------------------------------------------------------------------------------------------


def _ctrl_c_when_orphaned() -> None:
    """In the hub's process, before it runs: if the test process dies (killed by a timeout, say), the hub gets the
    Ctrl-C that stops it and everything it started, instead of serving on with nobody to stop it."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


class Hub:
    """`./course hub` in a process group of its own, its output in a log file."""

    def __init__(self, course: Path, args: list[str], log: Path):
        self.log_path = log
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [str(course / "course"), "hub", *args],
            cwd=course,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_ctrl_c_when_orphaned,
            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HOME": "/root"},
        )

    def text(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def tail(self, n: int = 40) -> str:
        """The end of the log without the servers' successful requests, which bury what went wrong."""
        ok = re.compile(r"\] (1\d\d|2\d\d|3\d\d) (GET|PUT|POST|PATCH|DELETE|HEAD) |info.*: (1|2|3)\d\d ")
        return "\n".join([line for line in self.text().splitlines() if not ok.search(line)][-n:])

    def table(self, accounts: list[str]) -> tuple[str, dict[str, str]]:
        """The URL and each account's password, from the table it prints once the hub answers."""
        deadline = time.monotonic() + START_S
        while True:
            text = self.text()
            url = re.search(r"classroom is running \(JupyterHub, [^)]+\): (https?://[\w.-]+(?::\d+)?/)", text)
            rows = {
                m.group(1): m.group(2) for m in re.finditer(r"^  (\S+)\s+(?:instructor|student)\s+(\S+)\s", text, re.M)
            }
            if url and all(a in rows for a in accounts):
                return url.group(1), rows
            assert self.proc.poll() is None, f"./course hub exited ({self.proc.returncode}):\n{self.tail()}"
            assert time.monotonic() < deadline, f"no table from ./course hub within {START_S} s:\n{self.tail()}"
            time.sleep(0.5)

    def interrupt(self) -> int:
        """Ctrl-C, as a terminal sends it to the foreground process group; its exit code (bounded wait)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
                raise AssertionError(f"./course hub did not stop within {STOP_S} s of Ctrl-C:\n{self.tail()}") from None
        self.log.close()
        return self.proc.returncode


@contextlib.contextmanager
def _step(name: str, page, hub: Hub):
    """A step of the cycle: on failure a screenshot and the end of the hub's log in the message."""
    try:
        yield
    except Exception as err:
        shot = ARTIFACTS / f"{name}-failure.png"
        with contextlib.suppress(Exception):
            page.screenshot(path=str(shot))
        raise AssertionError(f"{name}: {err}\nscreenshot: {shot}\nend of the hub's log:\n{hub.tail()}") from err


def _shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def _login(browser, base: str, name: str, password: str):
    """A browser context of its own for `name`; logs in at the hub and waits for their JupyterLab."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{base}hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.click("#login_submit", no_wait_after=True)  # the three servers start at once
    return page


def _lab_ready(page, name: str, port: int, scheme_host: str = "http://localhost") -> None:
    """Their JupyterLab has loaded, on their own host: <scheme>://<name>.<host>:<port>/user/<name>/lab."""
    scheme, host = scheme_host.split("://")
    page.wait_for_url(re.compile(rf"^{scheme}://{name}\.{re.escape(host)}:{port}/user/{name}/lab"), timeout=180_000)
    page.locator("#jp-main-dock-panel").wait_for()


def _menu(page, item: str) -> None:
    page.get_by_role("menuitem", name="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()


def _tab(page, label: str) -> None:
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=label).click()


def _fetch_and_answer(page, who: str, answers: list[str]) -> None:
    """Fetch in the Assignments tab, open the notebook from there, write each answer in the cell of its function
    (found by the answer's first line, `def name(...):`), save."""
    _menu(page, "Assignment List")
    page.locator("#released_assignments_list .list_item", has_text=AID).get_by_role("button", name="Fetch").click()
    fetched = page.locator("#fetched_assignments_list > .list_item", has_text=AID)
    fetched.wait_for()
    _shot(page, f"03-{who}-fetched")
    fetched.locator("a.assignment-notebooks-link").click()
    fetched.locator(".nested_list_item a", has_text=AID).click()
    notebook = page.locator(".jp-NotebookPanel:visible")
    page.get_by_text(re.compile(r"^[^|]+ \| Idle$")).wait_for()  # its kernel started
    for answer in answers:
        cell = notebook.locator(".jp-CodeCell", has=page.locator(".jp-InputArea", has_text=answer.splitlines()[0]))
        cell.wait_for()
        cell.locator(".cm-content").click()
        page.keyboard.press("Control+A")
        page.keyboard.insert_text(answer)  # as typed, without the editor's auto-indent
    page.keyboard.press("Control+S")
    page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").wait_for(state="detached")
    _shot(page, f"04-{who}-answered")


def _validate(page) -> None:
    page.locator(".jp-NotebookPanel:visible").get_by_role("button", name="Validate").click()


def _verdict(page, who: str) -> str:
    """The Validate dialog's text, once it shows; the dialog closed."""
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=150_000)
    _shot(page, f"05-{who}-validated")
    verdict = dialog.locator(".jp-Dialog-body").inner_text()
    (ARTIFACTS / f"05-{who}-validated.txt").write_text(verdict)
    assert dialog.locator(".jp-Dialog-header").inner_text().strip() == "Validation Results", verdict
    dialog.get_by_role("button", name=re.compile("^ok$", re.I)).click()
    return verdict


def _submit(page, who: str) -> None:
    _tab(page, "Assignments")
    page.locator("#fetched_assignments_list > .list_item", has_text=AID).get_by_role("button", name="Submit").click()
    page.locator("#submitted_assignments_list .list_item", has_text=AID).wait_for()
    _shot(page, f"06-{who}-submitted")


def _feedback_score(page, name: str, who: str, port: int) -> tuple[float, str]:
    """Fetch Feedback in the Assignments tab, follow "(view feedback)", open the page; (score, its text)."""
    _tab(page, "Assignments")
    page.locator("#refresh_assignments_list").click()
    item = page.locator("#submitted_assignments_list .list_item", has_text=AID)
    item.get_by_role("button", name="Fetch Feedback").click()
    item.get_by_text("(view feedback)").click()  # the file browser opens the feedback's folder
    page.locator(".jp-DirListing-item", has_text=f"{AID}.html").wait_for()
    crumbs = page.locator(".jp-FileBrowser-crumbs").inner_text()
    stamp = next(part.strip() for part in crumbs.split("/") if "UTC" in part)
    path = f"exercises/{AID}/feedback/{stamp}/{AID}.html"
    feedback = page.context.new_page()
    feedback.goto(f"http://{name}.localhost:{port}/user/{name}/files/{urllib.parse.quote(path)}")
    text = feedback.locator("body").inner_text()
    feedback.screenshot(path=str(ARTIFACTS / f"08-{who}-feedback.png"))
    feedback.close()
    m = re.search(rf"{AID} \(Score: ([\d.]+) / ([\d.]+)\)", text)
    assert m, f"no score on {name}'s feedback page:\n{text[:2000]}"
    return float(m.group(1)), text


DUE_OFFSET = "-0500"  # the instructor's time zone, as typed in the formgrader's edit dialog


def _set_due_in_formgrader(frame, row, offset: str) -> datetime.datetime:
    """The instructor edits the released assignment in the formgrader: a due date a week from now (their local
    time, `offset` from UTC), saved; returns the local time typed."""
    from playwright.sync_api import expect

    when = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=7)).replace(
        tzinfo=None, second=0, microsecond=0
    )
    released = frame.locator("#success-modal")  # "Successfully released 'ex01_dot'", in the way until dismissed
    released.get_by_role("button", name="OK").click()
    expect(released).to_be_hidden()
    row.locator("td.edit a").click()
    modal = frame.locator("#edit-assignment-modal")
    modal.locator("input.modal-duedate").fill(f"{when:%Y-%m-%dT%H:%M}")
    modal.locator("input.modal-timezone").fill(offset)
    modal.locator("button.save").click()
    expect(modal).to_be_hidden(timeout=60_000)  # closed once the formgrader has saved it
    # the formgrader shows it in UTC: after 19:00 UTC a date typed at -0500 is the next day there
    expect(row.locator("td.duedate")).to_contain_text(f"{_in_utc(when, offset):%Y-%m-%d %H:%M:%S} UTC", timeout=60_000)
    return when


def _in_utc(local: datetime.datetime, offset: str) -> datetime.datetime:
    """A naive local time typed with a "+HHMM"/"-HHMM" offset, as a naive UTC time."""
    delta = datetime.timedelta(hours=int(offset[1:3]), minutes=int(offset[3:5]))
    return local - delta if offset.startswith("+") else local + delta


def _due_as_seen_by(service, name: str) -> dict[str, str]:
    """The due dates the exchange service gives `name` (with their server's token): assignment -> 'Y-m-d H:M'."""
    deadline = time.monotonic() + 60
    while True:  # their server was started at login; its token is in its environment once the process exists
        try:
            listing = service.as_user(name, "GET", "assignments/two-primitives")
            break
        except (AssertionError, psutil.Error):
            assert time.monotonic() < deadline, f"no server of {name} within 60 s of their login"
            time.sleep(1)
    assert listing.status_code == 200, listing.text
    return {e["assignment_id"]: e["due"][:16].replace("T", " ") for e in listing.json() if e.get("due")}


def _failed_block(verdict: str, source: str) -> list[str]:
    """The lines of Validate's block for the failed cell whose source starts with `source` (the source first)."""
    for block in verdict.split("The following cell failed:"):
        lines = [line for line in block.splitlines() if line.strip()]
        if lines and lines[0].startswith(source):
            return lines
    raise AssertionError(f"no failed cell {source}... in Validate's dialog:\n{verdict}")


def _in_a_terminal(service, name: str, command: str, timeout: float = 120) -> dict:
    """`command` typed in a new JupyterLab terminal of `name`'s server (its REST API and websocket, with the
    server's token), as the student's terminal runs it: {"exit": its status, "output": the text, escapes removed}."""
    import requests
    import websocket

    env = service.environment(name)
    base, token = env["JUPYTERHUB_SERVICE_URL"], env["JUPYTERHUB_API_TOKEN"]
    auth = {"Authorization": f"token {token}"}
    made = requests.post(base + "api/terminals", headers=auth, timeout=60)
    assert made.status_code == 200, made.text
    term = made.json()["name"]
    ws = websocket.create_connection(
        f"ws{base[4:]}terminals/websocket/{term}", header=[f"Authorization: token {token}"], timeout=timeout
    )
    text, deadline, since, last = "", time.monotonic() + timeout, time.strftime("%H:%M:%S"), "nothing"
    try:
        ws.send(json.dumps(["stdin", f"{command}; echo TERMINAL-EXIT-$?\r"]))
        while not (done := re.search(r"TERMINAL-EXIT-(\d+)", text)):
            left = deadline - time.monotonic()
            assert left > 0, (
                f"no end of `{command}` (its TERMINAL-EXIT line) within {timeout} s, since {since}; "
                f"last seen: {last}; its output:\n{text}"
            )
            ws.settimeout(left)  # each read waits at most the time left: the server's pings end a read, not the wait
            try:
                opcode, frame = ws.recv_data_frame(control_frame=True)
            except websocket.WebSocketTimeoutException:
                continue
            assert opcode != websocket.ABNF.OPCODE_CLOSE, f"the terminal's websocket closed:\n{text}"
            if opcode == websocket.ABNF.OPCODE_TEXT:
                message = json.loads(frame.data)
                last = f"{message[0]} at {time.strftime('%H:%M:%S')}"
                if message[0] == "stdout":
                    text += message[1]
    finally:
        ws.close()
        requests.delete(base + f"api/terminals/{term}", headers=auth, timeout=60)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r", "", text)
    return {"exit": int(done.group(1)), "output": text}


SCORE_LINE = r"Self-grade: [\d.]+ of [\d.]+ points"  # what the self-grade cell prints where it can grade


def _selfgrade_cell(page, home: str, who: str) -> str | None:
    """Run the assignment's self-grade cell (its last, `<aid>-selfgrade`) in the student's notebook, in the browser;
    its output's text, or None when the released notebook has no such cell."""
    from playwright.sync_api import expect

    fetched = nbformat.read(f"{home}/exercises/{AID}/{AID}.ipynb", as_version=4)
    mine = [c for c in fetched.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{AID}-selfgrade"]
    if not mine:
        return None
    _tab(page, f"{AID}.ipynb")
    notebook = page.locator(".jp-NotebookPanel:visible")
    cell = notebook.locator(
        ".jp-CodeCell", has=page.locator(".jp-InputArea", has_text=mine[0].source.strip().splitlines()[-1])
    )
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    output = cell.locator(".jp-OutputArea")
    expect(output).to_contain_text(re.compile(rf"Submit {AID} instead|{SCORE_LINE}"), timeout=180_000)
    cell.scroll_into_view_if_needed()
    _shot(page, f"10-{who}-selfgrade-cell")
    return output.inner_text()


def _isolation(page, who: str, paths: list[str]) -> dict[str, str]:
    """Run code in the student's own kernel (their open notebook): what opening each path gives."""
    _tab(page, f"{AID}.ipynb")
    notebook = page.locator(".jp-NotebookPanel:visible")
    notebook.locator(".jp-Cell").last.locator(".jp-InputPrompt").click()
    page.keyboard.press("b")  # a new cell below, in command mode
    new = notebook.locator(".jp-Cell").last
    new.locator(".cm-content").click()
    page.keyboard.insert_text(ISOLATION_CELL % (paths,))
    page.keyboard.press("Control+Enter")
    out = new.locator(".jp-OutputArea-output", has_text="ISOLATION")
    out.wait_for(timeout=60_000)
    new.scroll_into_view_if_needed()
    _shot(page, f"10-{who}-kernel-isolation")
    return json.loads(out.inner_text().split("ISOLATION ", 1)[1])


def _check_lessons_at_home(course: Path, student: pwd.struct_passwd) -> None:
    """The student's ~/lessons holds every lesson, theirs; setting the home up again adds what is missing and
    keeps what the student changed."""
    from twoprim.classroom import hub_config
    from twoprim.classroom.hub import furnish_home

    lessons = Path(student.pw_dir) / "lessons"
    names = sorted(p.name for p in (course / "lessons").glob("*.ipynb"))
    assert names and sorted(p.name for p in lessons.glob("*.ipynb")) == names
    assert all((lessons / n).stat().st_uid == student.pw_uid for n in names)
    mine, gone = lessons / names[0], lessons / names[1]
    mine.write_text("the student's own edit")
    gone.unlink()
    plan = hub_config.Plan(
        course=course,
        venv=course / ".venv",
        proxy=Path("/"),
        exchange=Path("/"),
        instructor="",
        students=(student.pw_name,),
        port=0,
        hub_port=0,
        proxy_api_port=0,
    )
    furnish_home(plan, student)
    assert mine.read_text() == "the student's own edit"
    assert gone.read_bytes() == (course / "lessons" / names[1]).read_bytes()
    assert gone.stat().st_uid == student.pw_uid


def _processes_of(course: Path) -> list[str]:
    """Processes running anything from the course clone (the hub, its proxy, servers, kernels)."""
    found = []
    for proc in psutil.process_iter(["username", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(course) in cmdline and proc.pid != os.getpid():
            found.append(f"{proc.pid} {proc.info['username']} {cmdline[:120]}")
    return found


def _class_processes(names: list[str]) -> list[str]:
    found = []
    for proc in psutil.process_iter(["username", "cmdline"]):
        if proc.info["username"] in names:
            found.append(f"{proc.pid} {proc.info['username']} {' '.join(proc.info['cmdline'] or [])[:120]}")
    return found


class _Service:
    """The classroom's exchange service, as the test reaches it: its store (root reads it), its URL (from the
    classroom's record) and, for a student, the token their server was given (what a terminal there holds)."""

    def __init__(self, course: Path, hub: Hub):
        self.course, self.hub = course, hub
        record = json.loads((course / "grader" / "classroom.json").read_text())
        assert record["exchange_kind"] == "service", record
        self.url, self.port = record["exchange_url"], int(urllib.parse.urlparse(record["exchange_url"]).port)

    def store(self):
        from twoprim.exchange.service import Store

        return Store(self.course / "grader" / "exchange")

    def of(self, student: str) -> list[dict]:
        return self.store().submissions("two-primitives", student=student)

    def health(self) -> bool:
        import requests

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "api/health", timeout=5).ok:
                    return True
            time.sleep(0.5)
        return False

    @staticmethod
    def _server(name: str):
        for proc in psutil.process_iter(["username", "cmdline"]):
            if proc.info["username"] == name and any("jupyterhub-singleuser" in a for a in proc.info["cmdline"] or []):
                return proc
        raise AssertionError(f"no server of {name} is running")

    def environment(self, name: str) -> dict[str, str]:
        """The environment of the user's server: what their JupyterLab terminal (and nbgrader in it) gets."""
        return self._server(name).environ()

    def as_user(self, name: str, method: str, path: str, **kw):
        import requests

        token = self.environment(name)["JUPYTERHUB_API_TOKEN"]
        return requests.request(
            method, self.url + "api/" + path, headers={"Authorization": f"token {token}"}, timeout=120, **kw
        )

    def nbgrader(self, name: str, *args: str):
        """`nbgrader ARGS` as the student, in their home, as a terminal in their JupyterLab runs it."""
        account = pwd.getpwnam(name)
        return subprocess.run(
            [str(self.course / ".venv" / "bin" / "nbgrader"), *args],
            cwd=account.pw_dir,
            env=self.environment(name),
            user=account.pw_uid,
            group=account.pw_gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=120,
        )

    def sizes(self, name: str) -> None:
        """A notebook over 100 MB refused with the limit named (status 413); one of 20 MB accepted and kept."""
        big, fine = _padded_notebook(101_000_000), _padded_notebook(20_000_000)
        from twoprim.exchange.service import pack

        over = self.as_user(name, "POST", f"submissions/two-primitives/{AID}", data=pack({f"{AID}.ipynb": big}))
        assert (
            over.status_code == 413
            and f"{AID}.ipynb is 101.0 MB, over the limit of 100 MB per file" in over.json()["error"]
        ), over.text[:500]
        ok = self.as_user(name, "POST", f"submissions/two-primitives/{AID}", data=pack({f"{AID}.ipynb": fine}))
        assert ok.status_code == 200 and ok.json()["student"] == name, ok.text[:500]
        kept = self.store().submission(ok.json()["id"])
        assert kept["data"][f"{AID}.ipynb"] == fine


def _padded_notebook(size: int) -> bytes:
    """A valid notebook of about `size` bytes (a raw cell of filler)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_raw_cell("")])
    base = len(nbformat.writes(nb).encode())
    nb.cells[0].source = "x" * (size - base)
    return nbformat.writes(nb).encode()


def test_classroom_release_fetch_submit_grade_feedback_in_a_browser(clone):
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    from playwright.sync_api import expect, sync_playwright

    from twoprim.classroom.hub import KEPT, ensure_account

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in [*ARTIFACTS.glob("*.png"), *ARTIFACTS.glob("*.txt")]:
        stale.unlink()
    course = clone["course"]
    instructor, right, wrong = _names(3)
    accounts = [instructor, right, wrong]
    port = free_port()
    exchange = clone["base"] / "exchange-parent" / "exchange"
    exchange.parent.mkdir()
    exchange.parent.chmod(0o755)
    dot_points = _points(AID, "dot")
    assert dot_points > 0
    started = time.monotonic()
    timings = []

    def mark(what: str) -> None:
        timings.append(f"{time.monotonic() - started:6.1f} s  {what}")
        (ARTIFACTS / "timings.txt").write_text("\n".join(timings) + "\n")

    hub = Hub(
        course,
        [
            "--students",
            f"{right},{wrong}",
            "--instructor",
            instructor,
            "--port",
            str(port),
            "--exchange",
            str(exchange),
        ],
        clone["base"] / "hub.log",
    )
    stopped, service, again = None, None, None
    try:
        base, passwords = hub.table(accounts)
        mark("table printed")
        assert base == f"http://localhost:{port}/"
        assert len(set(passwords.values())) == 3 and all(len(p) >= 12 for p in passwords.values()), passwords
        for name in accounts:
            assert pwd.getpwnam(name).pw_gecos.startswith("Two Primitives"), name
        # a hub already running on the port: the second one says so and leaves the first alone
        second = _course(
            course,
            "hub",
            "--students",
            f"{right},{wrong}",
            "--instructor",
            instructor,
            "--port",
            str(port),
            "--exchange",
            str(exchange),
        )
        assert second.returncode != 0 and f"port {port} on 127.0.0.1 is already in use" in second.stderr, second
        assert hub.proc.poll() is None
        # file permissions, as the course set them
        for private in ("solutions", "grader"):
            assert (course / private).stat().st_mode & 0o077 == 0, f"{private}/ is readable by others"
        # the exchange is the service: no folder is shared with students (none is made); its store is the
        # instructor's alone
        assert not exchange.exists() and not exchange.parent.is_symlink()
        store = course / "grader" / "exchange"
        assert store.stat().st_mode & 0o777 == 0o700 and store.stat().st_uid == pwd.getpwnam(instructor).pw_uid
        service = _Service(course, hub)

        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                pages = {name: _login(browser, base, name, passwords[name]) for name in accounts}
                ipage = pages[instructor]
                mark("logins sent")
                with _step("01-instructor-lab", ipage, hub):
                    _lab_ready(ipage, instructor, port)
                    response = ipage.goto(ipage.url)
                    assert response is not None  # (a page load has a response)
                    assert response.headers.get("content-security-policy") == "frame-ancestors 'self'", response.headers
                    ipage.locator(".jp-DirListing-item", has_text="solutions").wait_for()  # the course folder
                    _shot(ipage, "01-instructor-lab")
                with _step("02-formgrader-release", ipage, hub):
                    _menu(ipage, "Formgrader")
                    frame = ipage.frame_locator("#formgrader-iframe iframe")
                    row = frame.locator("tr", has_text=AID).first
                    row.wait_for(timeout=90_000)  # the formgrader renders inside JupyterLab: #1870 fixed
                    _shot(ipage, "02-formgrader")
                    row.locator("td.release a").click()
                    expect(row.locator("td.status")).to_have_text("released", timeout=60_000)
                    _shot(ipage, "02-formgrader-released")
                    assert [a["assignment_id"] for a in service.store().released("two-primitives")] == [AID]
                    assert not (exchange / "two-primitives" / "outbound").exists()
                    mark("released from the formgrader")
                    due_local = _set_due_in_formgrader(frame, row, DUE_OFFSET)  # an edit after the release
                    due_set = time.monotonic()
                    mark("due date set in the formgrader")
                    _shot(ipage, "02-formgrader-due-date")
                # what students see: nbgrader's conversion of the instructor's local time (UTC-5) to UTC
                due_utc = f"{_in_utc(due_local, DUE_OFFSET):%Y-%m-%d %H:%M}"
                # the first time a student asks after the edit (no collect, no release again), they see it
                assert _due_as_seen_by(service, wrong) == {AID: due_utc}
                assert time.monotonic() - due_set < 60
                mark("the due date seen by a student")

                for name, who, answers in (
                    (right, "student-right", [RIGHT_DOT]),
                    (wrong, "student-wrong", [WRONG_DOT, WRONG_COSINE]),
                ):
                    page = pages[name]
                    with _step(f"03-{who}-fetch-answer", page, hub):
                        _lab_ready(page, name, port)
                        response = page.goto(page.url)
                        assert response is not None  # (a page load has a response)
                        assert response.headers.get("content-security-policy", "").startswith(
                            "frame-ancestors 'none'"
                        ), f"a student's server must forbid framing: {response.headers}"
                        page.locator("#jp-main-dock-panel").wait_for()
                        _fetch_and_answer(page, who, answers)
                        saved = nbformat.read(
                            str(Path(pwd.getpwnam(name).pw_dir) / "exercises" / AID / f"{AID}.ipynb"), as_version=4
                        )
                        for answer in answers:
                            assert any(c.source.strip() == answer.strip() for c in saved.cells), (
                                f"{name}'s {answer.splitlines()[0]} did not reach their notebook"
                            )
                        _validate(page)  # both validations run at once, as in a class
                mark("both answered, Validate pressed")
                verdicts = {}
                for name, who in ((right, "student-right"), (wrong, "student-wrong")):
                    with _step(f"05-{who}-validate-submit", pages[name], hub):
                        verdicts[name] = _verdict(pages[name], who)
                        _submit(pages[name], who)
                mark("validated and submitted")
                # Validate ran each notebook: the wrong dot's check failed, the right one's did not
                assert "check_dot(" in verdicts[wrong] and "check_dot(" not in verdicts[right], verdicts
                # the wrong cosine_similarity's block reads as the check: its verdict and next step first, and no
                # line of the course's code (twoprim/...) anywhere in the dialog
                block = _failed_block(verdicts[wrong], "ex01.check_cosine_similarity(")
                assert block[1].startswith(f"✘ {AID}-cosine_similarity: wrong result.") and any(
                    line.lstrip().startswith("next:") for line in block[:5]
                ), block[:8]
                assert not any("twoprim/" in line or "Traceback" in line for line in verdicts[wrong].splitlines()), (
                    verdicts[wrong]
                )
                # the due date set in the formgrader, as the student's own terminal shows it: `course` is on their PATH
                terminal = _in_a_terminal(service, wrong, "command -v course; course progress")
                assert terminal["exit"] == 0 and f"{course / '.venv' / 'bin' / 'course'}\n" in terminal["output"], (
                    terminal
                )
                assert f"due {due_utc} UTC" in terminal["output"], terminal
                mark("Validate's dialog read; `course progress` in a student's terminal")
                # through the service, as the hub knows them: the wrong one cannot hand in as the right one
                theirs = service.of(right)
                assert [r["student"] for r in theirs] == [right]
                forged = service.nbgrader(wrong, "submit", AID, "--student", right)
                assert (
                    forged.returncode != 0
                    and f"you are {wrong} (the hub says so): you cannot submit as {right}"
                    in forged.stdout + forged.stderr
                ), forged
                refused = service.as_user(wrong, "GET", "submissions/two-primitives", params={"all": 1})
                assert (
                    refused.status_code == 403
                    and f"{wrong} may not list the class's submissions" in refused.json()["error"]
                ), refused.text
                refused = service.as_user(wrong, "GET", f"submission/{theirs[0]['id']}")
                assert (
                    refused.status_code == 403
                    and f"{wrong} may not read the submission of submission {theirs[0]['id']}"
                    in refused.json()["error"]
                ), refused.text
                assert service.of(right) == theirs and [r["student"] for r in service.of(wrong)] == [wrong]
                mark("service refusals checked")

                # the instructor's commands (as the instructor: root is told to switch)
                as_root = _course(course, "collect", AID)
                assert as_root.returncode != 0 and f"runuser -u {instructor} --" in as_root.stderr, as_root
                teacher = pwd.getpwnam(instructor)
                said = []
                for command in ("collect", "autograde", "feedback"):
                    proc = _course(course, command, AID, user=teacher, timeout=300)
                    said.append(
                        f"$ ./course {command} {AID}  (as {instructor}, exit code {proc.returncode})\n"
                        f"{proc.stdout}{proc.stderr}"
                    )
                    assert proc.returncode == 0, "\n".join(said)
                    mark(f"./course {command}")
                with (course / "grader" / "reports" / f"{AID}.csv").open() as f:
                    graded = {row["student"]: row for row in csv.DictReader(f)}
                assert {n: graded[n]["status"] for n in (right, wrong)} == {right: "graded", wrong: "graded"}, (
                    graded,
                    "\n".join(said),
                )
                with _step("07-formgrader-graded", ipage, hub):
                    tab = ipage.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="Formgrader")
                    tab.locator(".lm-TabBar-tabCloseIcon").click()
                    _menu(ipage, "Formgrader")  # opened afresh: the table as the gradebook has it now
                    row = ipage.frame_locator("#formgrader-iframe iframe").locator("tr", has_text=AID).first
                    expect(row.locator("td.num-submissions")).to_have_text("2", timeout=60_000)
                    _shot(ipage, "07-formgrader-graded")

                scores = {}
                for name, who in ((right, "student-right"), (wrong, "student-wrong")):
                    with _step(f"08-{who}-feedback", pages[name], hub):
                        scores[name], text = _feedback_score(pages[name], name, who, port)
                        assert scores[name] == float(graded[name]["score"]), (name, scores[name], graded[name])
                        assert "BEGIN HIDDEN TESTS" not in text
                assert scores[right] - scores[wrong] == dot_points, (scores, dot_points)
                mark("feedback read")
                refused = service.as_user(wrong, "GET", f"feedback/{theirs[0]['id']}")
                assert (
                    refused.status_code == 403
                    and f"{wrong} may not read the feedback of submission {theirs[0]['id']}" in refused.json()["error"]
                ), refused.text
                service.sizes(wrong)
                mark("size limits checked")
                # self-grading runs the hidden checks, which a student cannot read: refused, saying what to do
                proc = _course(course, "selfgrade", AID, user=pwd.getpwnam(right))
                assert (
                    proc.returncode != 0
                    and "this account cannot read it" in proc.stderr
                    and f"Submit {AID} instead" in proc.stderr
                    and "Traceback" not in proc.stderr
                ), proc

                # neither can open the other's server or files, solutions/ or the gradebook
                for (name, who), other in (((right, "student-right"), wrong), ((wrong, "student-wrong"), right)):
                    page = pages[name]
                    with _step(f"09-{who}-cannot-open-the-other", page, hub):
                        other_page = page.context.new_page()
                        response = other_page.goto(f"http://{other}.localhost:{port}/user/{other}/lab")
                        assert response is not None  # (a page load has a response)
                        assert response.status == 403 and response.url.startswith(f"{base}hub/"), (
                            response.status,
                            response.url,
                        )  # the hub refuses to log them in to it
                        other_page.screenshot(path=str(ARTIFACTS / f"09-{who}-cannot-open-the-other.png"))
                        response = other_page.goto(f"http://{other}.localhost:{port}/user/{other}/api/contents")
                        assert response is not None  # (a page load has a response)
                        assert response.status == 403, response.status  # and the server refuses its API
                        response = other_page.goto(f"http://{name}.localhost:{port}/user/{name}/formgrader")
                        assert response is not None  # (a page load has a response)
                        assert response.status == 404, response.status  # no formgrader on a student's own server
                        other_page.close()
                    if name == wrong:
                        with _step(f"10-{who}-selfgrade-cell", page, hub):
                            # on the hub the hidden checks are the instructor's: the cell says to submit instead
                            said = _selfgrade_cell(page, pwd.getpwnam(name).pw_dir, who)
                            mark(f"self-grade cell: {'none in the released notebook' if said is None else 'run'}")
                            if said is not None:
                                assert (
                                    f"Submit {AID} instead" in said
                                    and not re.search(SCORE_LINE, said)
                                    and "Traceback" not in said
                                ), said
                    with _step(f"10-{who}-kernel-isolation", page, hub):
                        home = pwd.getpwnam(other).pw_dir
                        denied = [
                            home,
                            f"{home}/exercises/{AID}/{AID}.ipynb",
                            str(course / "solutions"),
                            str(course / "solutions" / AID / f"{AID}.ipynb"),
                            str(course / "grader" / "gradebook.db"),
                        ]
                        seen = _isolation(page, who, denied + [str(course / "lessons")])
                        assert seen[str(course / "lessons")] == "read", seen  # the probe itself works
                        assert all(seen[p] == "PermissionError" for p in denied), seen
                        # the student's progress and hints live in their home (twoprim.learner.state.workspace)
                        mine = pwd.getpwnam(name)
                        assert seen["workspace"] == mine.pw_dir, seen
                        # progress hears from the exchange service (with the server's own token) what is released
                        # and what this student submitted: no folder is shared with them
                        assert seen["released"] == [AID] and seen["submitted"] == [AID], seen
                        # the formgrader's due date reaches their progress, and `course` is on their kernel's PATH
                        assert seen["due"] == {AID: due_utc}, seen
                        assert seen["course"] == str(course / ".venv" / "bin" / "course"), seen
                        # torch computes on the student's one core (--cpus 1), not on a thread per core of the machine
                        assert seen["threads"] == 1, seen
                        state_file = Path(mine.pw_dir) / ".twoprim-progress.json"
                        assert state_file.stat().st_uid == mine.pw_uid
                        assert json.loads(state_file.read_text())["hints"][f"{AID}-dot"] >= 1
                mark("isolation checked")
            finally:
                browser.close()
        stopped = hub.interrupt()
        mark("stopped")
        assert stopped == 0, hub.tail()
        assert re.search(r"^stopped: the hub, the proxy and the 3 server\(s\) it started", hub.text(), re.M), hub.tail()
        _check_lessons_at_home(course, pwd.getpwnam(right))
        # the hub again, over the same course, now public (--public): https only, with the certificate the
        # instructor gave for HOST and *.HOST, each user's JupyterLab on their own host, no plain HTTP on the port.
        # The accounts are the course's from the run before, and `right` changed their password since (`passwd` in
        # their terminal): this run keeps every password. Its service answers, and every submission is still there.
        kept = service.store().submissions("two-primitives")
        theirs = secrets.token_urlsafe(12)
        subprocess.run(
            ["chpasswd"], input=f"{right}:{theirs}\n", text=True, check=True, capture_output=True, timeout=60
        )
        certs = _certificate(clone["base"] / "tls-public", [PUBLIC_HOST, f"*.{PUBLIC_HOST}"])
        mark("a certificate for the public hub")
        hub = Hub(
            course,
            [
                "--students",
                f"{right},{wrong}",
                "--instructor",
                instructor,
                "--port",
                str(port),
                "--exchange",
                str(exchange),
                "--public",
                PUBLIC_HOST,
                "--ssl-cert",
                str(certs["cert"]),
                "--ssl-key",
                str(certs["key"]),
                "--ip",
                "127.0.0.1",
            ],
            clone["base"] / "hub-again.log",
        )
        stopped = None
        public, kept_passwords = hub.table(accounts)
        mark("the hub again: table printed")
        assert set(kept_passwords.values()) == {KEPT.split()[0]} and KEPT in hub.text(), kept_passwords
        assert public == f"https://{PUBLIC_HOST}:{port}/", public
        assert f"classroom is running (JupyterHub, on 127.0.0.1, TLS): {public}" in hub.text()
        assert f"Each user's server is at https://<name>.{PUBLIC_HOST}:{port}/" in hub.text()
        for name in (PUBLIC_HOST, f"{right}.{PUBLIC_HOST}"):
            assert _tls_names(port, certs["ca"], name) == PUBLIC_HOST  # the instructor's certificate, valid for both
        answer = _plain_http(port)
        assert not re.match(r"HTTP [23]", answer), f"the port answered plain HTTP: {answer}"
        again = _Service(course, hub)
        assert again.health()
        # one each from the browser and the 20 MB one (the forged one was never stored)
        assert again.store().submissions("two-primitives") == kept and [r["student"] for r in kept] == [
            right,
            wrong,
            wrong,
        ], kept
        proc = _course(course, "collect", AID, user=pwd.getpwnam(instructor), timeout=300)
        assert proc.returncode == 0 and f"1 new submission(s) of {AID} collected ({wrong} (newer))" in proc.stdout, (
            proc
        )  # the newest, kept through the restart
        mark("the hub again: its service answers, ./course collect")
        with sync_playwright() as playwright:
            browser = launch(playwright, (f"--ignore-certificate-errors-spki-list={certs['spki']}",))
            try:
                page = _login(browser, public, right, theirs)
                with _step("11-public-student-lab", page, hub):
                    _lab_ready(page, right, port, f"https://{PUBLIC_HOST}")
                    _shot(page, "11-public-student-lab")  # their JupyterLab as they left it (its layout restored)
                    response = page.goto(f"https://{right}.{PUBLIC_HOST}:{port}/user/{right}/api/contents")
                    assert response is not None  # (a page load has a response)
                    assert response.status == 200 and "lessons" in {
                        item["name"] for item in response.json()["content"]
                    }, response.status  # their home, over TLS on their own host
                    response = page.goto(f"https://{instructor}.{PUBLIC_HOST}:{port}/user/{instructor}/lab")
                    assert response is not None  # (a page load has a response)
                    # another user's server, on its own host: the hub neither opens it nor says whether it exists
                    assert response.status == 404 and "No access to resources" in hub.text(), response.status
            finally:
                browser.close()
        mark("the hub again: a student's JupyterLab over TLS")
        stopped = hub.interrupt()
        assert stopped == 0, hub.tail()
        assert re.search(r"^stopped: the hub, the proxy and the 1 server\(s\) it started", hub.text(), re.M), hub.tail()
        _, fresh = ensure_account(right, "student", new_password=True)  # what --new-password NAME does
        assert fresh not in (passwords[right], theirs) and _logs_in(right, fresh) and not _logs_in(right, theirs)
        mark("the hub restarted, public over TLS, nothing lost")
        # the end of the course: the three accounts the hub made go, each with its home, and nothing else
        removed = _course(course, "hub", "--remove-class", "--yes")
        assert removed.returncode == 0 and "will delete 3 account(s) that ./course hub created" in removed.stdout, (
            removed
        )
        for name in accounts:
            assert f"deleted {name}\n" in removed.stdout, removed.stdout
            with pytest.raises(KeyError):
                pwd.getpwnam(name)
        mark("./course hub --remove-class")
    finally:
        if stopped is None:
            with contextlib.suppress(Exception):
                hub.interrupt()
        left = _class_processes(accounts) + _processes_of(course)
        ports = [port] + [int(p) for p in re.findall(r"Hub API listening on http://127\.0\.0\.1:(\d+)/", hub.text())]
        service_ports = [s.port for s in (service, again) if s is not None]
        still_open = [p for p in ports if _listening(p)]
        for name in accounts:
            delete_account(name)
    assert not left, "processes of the class outlived the hub:\n" + "\n".join(left)
    assert len(ports) == 2 and not still_open, f"ports {still_open} of {ports} still answer after the hub stopped"
    assert service_ports and not any(map(_listening, service_ports)), f"the exchange service {service_ports} answers"


# --- several courses on one hub ----------------------------------------------------------------------------------

IN_BROWSER = """async ([method, url, body]) => {
    const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || "";
    const r = await fetch(url, {method, body: body || undefined, headers: {"X-XSRFToken": decodeURIComponent(xsrf),
                                "Content-Type": "application/x-www-form-urlencoded"}});
    return [r.status, await r.text()];
}"""


def _ask(page, method: str, url: str, body: str = "") -> tuple[int, Any]:
    """A request from the user's own page, with their cookies (and JupyterLab's xsrf token): (status, JSON or text)."""
    status, text = page.evaluate(IN_BROWSER, [method, url, body])
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def test_several_courses_on_one_hub_are_isolated_in_a_browser(clone):
    """Two courses (the clone and a second copy), a student in each and one in both, an instructor each: every
    student sees and hands in only their own courses' assignments; each instructor's formgrader and gradebook hold
    their own course's submissions only; neither instructor reaches the other's server, exchange or files."""
    if clone is None:
        pytest.skip("as root only: test_not_root_is_refused checked what an ordinary user gets")
    import requests
    from playwright.sync_api import sync_playwright

    from .accounts import python_as

    started = time.monotonic()
    ia, ib, sa, sb, sab = _names(5)
    folders = {"gemm-a": clone["course"], "gemm-b": clone["base"] / "course-b"}
    if not folders["gemm-b"].exists():
        folders["gemm-b"].mkdir()
        point_venv_at(clone_for(folders["gemm-b"]), clone["python"])
    aids = {"gemm-a": AID, "gemm-b": "ex02_gemm"}
    courses = clone["base"] / "courses.json"
    courses.write_text(
        json.dumps(
            {
                "courses": [
                    {"id": "gemm-a", "folder": str(folders["gemm-a"]), "instructor": ia, "students": [sa, sab]},
                    {"id": "gemm-b", "folder": str(folders["gemm-b"]), "instructor": ib, "students": [sb, sab]},
                ]
            }
        )
    )
    port = free_port()
    hub = Hub(clone["course"], ["--courses", str(courses), "--port", str(port)], clone["base"] / "hub-courses.log")
    accounts = [ia, ib, sa, sb, sab]
    stopped = None
    try:
        base, passwords = hub.table(accounts)
        for cid, teacher in (("gemm-a", ia), ("gemm-b", ib)):  # each instructor releases in their own course
            proc = _course(folders[cid], "release", aids[cid], user=pwd.getpwnam(teacher), timeout=300)
            assert proc.returncode == 0, proc
        mine = {sa: ["gemm-a"], sb: ["gemm-b"], sab: ["gemm-a", "gemm-b"]}
        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                pages = {name: _login(browser, base, name, passwords[name]) for name in accounts}
                for name in accounts:
                    with _step(f"20-{name}-lab", pages[name], hub):
                        _lab_ready(pages[name], name, port)
                for student, theirs in mine.items():
                    page, root = pages[student], f"http://{student}.localhost:{port}/user/{student}/"
                    with _step(f"21-{student}-assignments", page, hub):
                        status, listed = _ask(page, "GET", root + "courses")
                        assert status == 200 and listed["value"] == theirs, listed  # only their courses
                        for cid in ("gemm-a", "gemm-b"):
                            status, listed = _ask(page, "GET", root + f"assignments?course_id={cid}")
                            released = (
                                [a["assignment_id"] for a in listed.get("value") or [] if a.get("status") == "released"]
                                if listed.get("success")
                                else None
                            )
                            assert released == ([aids[cid]] if cid in theirs else None), (student, cid, listed)
                            if cid in theirs:  # fetch and hand in, from the student's own page
                                form = f"course_id={cid}&assignment_id={aids[cid]}"
                                for action in ("fetch", "submit"):
                                    status, answer = _ask(page, "POST", root + f"assignments/{action}", form)
                                    assert status == 200 and answer["success"], (student, cid, action, answer)
                        _shot(page, f"21-{student}-assignments")
                for cid, teacher in (("gemm-a", ia), ("gemm-b", ib)):
                    proc = _course(folders[cid], "collect", aids[cid], user=pwd.getpwnam(teacher), timeout=300)
                    assert proc.returncode == 0, proc
                for cid, teacher, other in (("gemm-a", ia, ib), ("gemm-b", ib, ia)):
                    page = pages[teacher]
                    with _step(f"22-{teacher}-formgrader", page, hub):
                        root = f"http://{teacher}.localhost:{port}/user/{teacher}/formgrader/api/"
                        status, subs = _ask(page, "GET", root + f"submissions/{aids[cid]}")
                        assert status == 200 and isinstance(subs, list), (
                            status,
                            re.sub(r"<[^>]+>", " ", str(subs))[-1500:],
                        )
                        # (course A is the clone of the test above: its gradebook keeps that class too)
                        submitted = {s["student"] for s in subs if s.get("submitted")} & set(mine)
                        assert submitted == {s for s, t in mine.items() if cid in t}, (cid, subs)
                        status, students = _ask(page, "GET", root + "students")
                        assert {s["id"] for s in students} & set(mine) == {s for s, t in mine.items() if cid in t}, (
                            students
                        )
                        _shot(page, f"22-{teacher}-formgrader")
                        # the other course's formgrader, server and exchange are not theirs
                        theirs = f"http://{other}.localhost:{port}/user/{other}/formgrader/api/students"
                        response = page.goto(theirs)
                        assert response is not None  # (a page load has a response)
                        assert response.status in (403, 404), (teacher, other, response.status)
                        page.goto(f"http://{teacher}.localhost:{port}/user/{teacher}/lab")
                    other_cid = "gemm-b" if cid == "gemm-a" else "gemm-a"
                    code, out = python_as(
                        teacher,
                        "import os\nfor p in %r:\n"
                        "    try:\n        os.listdir(p); print('READ', p)\n"
                        "    except PermissionError:\n        print('DENIED', p)\n"
                        % [str(folders[other_cid] / "grader"), str(folders[other_cid] / "solutions")],
                    )
                    assert code == 0 and "READ" not in out and out.count("DENIED") == 2, out
                service_a = json.loads((folders["gemm-a"] / "grader" / "classroom.json").read_text())["exchange_url"]
                for outsider in (ib, sb):  # their servers' tokens do not reach course A's exchange
                    token = _Service._server(outsider).environ()["JUPYTERHUB_API_TOKEN"]
                    answer = requests.get(
                        service_a + "api/submissions/gemm-a", timeout=60, headers={"Authorization": f"token {token}"}
                    )
                    assert answer.status_code == 403 and "does not grant" in answer.json()["error"], answer.text
            finally:
                browser.close()
        stopped = hub.interrupt()
        assert stopped == 0, hub.tail()
        print(f"several courses: {time.monotonic() - started:.1f} s")
    finally:
        if stopped is None:
            with contextlib.suppress(Exception):
                hub.interrupt()
        for name in accounts:
            delete_account(name)
