"""LTI 1.3 against an LMS that is not ours: lti1p3platform (tests/lti_platform.py) as the platform, on loopback, and
a light JupyterHub (no servers are started: a launch is checked up to the page it opens) with the course's
authenticator (twoprim/classroom/lti.py, configured by the same `lti.hub_config` ./course hub --lti writes).

A student and an instructor launch from the platform: the roles map right, the student's account is made at their
first launch (and only then), the assignment the link names is fetched into their home and opened; a launch with a
bad signature, an expired token or the wrong audience gets a page that says so. Then two launched students' real
submissions are autograded (one late, under a zero-points late policy) and `lti_grades.send` posts the scores over
AGS with pylti1p3: the platform holds each LMS user's score after the penalty and the maximum; a rerun sends nothing;
a platform failing one student names them, exits 1, and the next run sends only theirs.

Accounts need root (CI runs as root); the unit tests at the top run anywhere.
"""

from __future__ import annotations

import html
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from lti1p3platform.ltiplatform import JWKS

from twoprim.classroom import lti_config as lc
from twoprim.classroom.hub_checks import free_port
from twoprim.config import ROOT

from .accounts import SYSTEM_PATH, delete_account, python_for, shared_tmp
from .classroom import answered, course_copy, write
from .lti_platform import INSTRUCTOR, LEARNER, TA, Platform, private_pem, wait_until

pytestmark = [pytest.mark.servers, pytest.mark.timeout(300)]

AID = "ex01_dot"
COURSE = "two-primitives"  # the course copy's nbgrader course id
CONTEXT = "lms-course-17"
HUB_START_S = 90
LATE_POLICY = '\nc.LateSubmissionPlugin.penalty_method = "zero"  # the instructor\'s policy: late scores nothing\n'


# --- the configuration, roles and names (no hub) -----------------------------------------------------------------


def _config(tmp: Path, **data) -> Path:
    key = tmp / "tool.pem"
    if not key.exists():
        key.write_text(private_pem())
    base = {
        "issuer": "https://canvas.instructure.com",
        "client_id": "10000000000123",
        "deployment_ids": ["1:ab"],
        "auth_login_url": "https://sso.canvaslms.com/api/lti/authorize_redirect",
        "auth_token_url": "https://sso.canvaslms.com/login/oauth2/token",
        "jwks_url": "https://sso.canvaslms.com/api/lti/security/jwks",
        "private_key": "tool.pem",
        "contexts": {"4dde05e8": COURSE},
    }
    path = tmp / "lti.json"
    path.write_text(json.dumps({k: v for k, v in {**base, **data}.items() if v is not None}))
    return path


def test_a_canvas_configuration_loads_and_bad_ones_say_what_to_fix(tmp_path):
    config = lc.load(_config(tmp_path), {COURSE})
    assert config.issuer == lc.CANVAS_ISSUER and config.private_key == tmp_path / "tool.pem"
    assert config.public_jwk()["kty"] == "RSA" and config.public_jwk()["kid"]
    toml = tmp_path / "lti.toml"
    toml.write_text(
        'issuer = "https://canvas.instructure.com"\nclient_id = "1"\ndeployment_ids = ["1:ab"]\n'
        'auth_login_url = "https://x.example/auth"\nauth_token_url = "https://x.example/token"\n'
        'jwks_url = "https://x.example/jwks"\nprivate_key = "tool.pem"\n[contexts]\n"c1" = "two-primitives"\n'
    )
    assert lc.load(toml, {COURSE}).contexts == {"c1": COURSE}
    for change, expected in (
        ({"jwks_url": None}, "lacks jwks_url"),
        ({"jwks_url": "jwks"}, "not a URL"),
        ({"contexts": {"c": "other"}}, "name other, which this hub does not serve"),
        ({"deployment_ids": []}, "must list the deployment ids"),
        ({"private_key": "missing.pem"}, "cannot read the tool's private key"),
    ):
        with pytest.raises(lc.LTIConfigError, match=re.escape(expected)):
            lc.load(_config(tmp_path, **change), {COURSE})
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(lc.LTIConfigError, match="is not valid JSON"):
        lc.load(tmp_path / "broken.json")


def test_lms_roles_map_to_the_courses():
    assert lc.course_role([LEARNER]) == "student"
    assert lc.course_role([INSTRUCTOR]) == "instructor"
    assert lc.course_role([TA]) == "instructor"
    assert lc.course_role([LEARNER, TA]) == "instructor"
    assert lc.course_role(["Learner"]) == "student"
    # an institution role is no role in the course
    assert lc.course_role(["http://purl.imsglobal.org/vocab/lis/v2/institution/person#Instructor"]) is None
    assert lc.course_role([]) is None


def test_account_names_are_valid_and_never_someone_elses():
    claims = {"iss": "https://lms", "sub": "u-1", "email": "Zoë.O'Brien+x@uni.example"}
    assert lc.account_name(claims, lambda n: False) == "zo-o-brien-x"
    taken = lc.account_name(claims, lambda n: n == "zo-o-brien-x")
    assert taken.startswith("zo-o-brien-x-") and lc.NAME.match(taken)
    assert taken == lc.account_name(claims, lambda n: n == "zo-o-brien-x")  # the same identity, the same name
    other = lc.account_name({**claims, "sub": "u-2"}, lambda n: n == "zo-o-brien-x")
    assert other != taken
    assert lc.account_name({"iss": "i", "sub": "9", "email": "12345@x"}, lambda n: False) == "lti"
    assert lc.account_name({"iss": "i", "sub": "9", "preferred_username": "root"}, lambda n: n == "root").startswith(
        "root-"
    )


# --- a light hub and the platform --------------------------------------------------------------------------------


def _ctrl_c_when_orphaned() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: no hub outlives the test


@pytest.fixture(scope="module")
def lms():
    """The platform and a light hub for one course copy, with its instructor's account and ex01_dot released."""
    if os.geteuid() != 0:
        pytest.skip("a launch makes a Unix account, which needs root (CI runs as root); the unit tests above ran")
    from twoprim.classroom import lti
    from twoprim.classroom.hub import prepare_store
    from twoprim.classroom.hub_checks import MARKER
    from twoprim.exchange.service import Store

    base = shared_tmp("twoprim-lti-")
    tag = secrets.token_hex(3)
    instructor = f"tp{tag}i"
    hub, platform = None, None
    try:
        course = course_copy(base / "course", AID)
        shutil.copytree(ROOT / "lessons", course / "lessons")
        subprocess.run(
            ["useradd", "--create-home", "--user-group", "--comment", MARKER["instructor"], instructor],
            check=True,
            capture_output=True,
            timeout=60,
        )
        store = course / "grader" / "exchange"
        Store(store).release(
            COURSE,
            AID,
            {f"{AID}.ipynb": (course / "exercises" / AID / f"{AID}.ipynb").read_bytes()},
            by=instructor,
            force=True,
        )
        prepare_store(store, pwd.getpwnam(instructor))
        key = base / "tool-key.pem"
        key.write_text(private_pem())
        key.chmod(0o600)
        port = free_port()
        tool_jwks: JWKS = {
            "keys": [
                lc.LTIConfig(
                    path=key,
                    issuer="",
                    client_id="",
                    deployment_ids=(),
                    auth_login_url="",
                    auth_token_url="",
                    jwks_url="",
                    private_key=key,
                    contexts={},
                ).public_jwk()
            ]
        }
        platform = Platform(
            f"http://127.0.0.1:{port}/hub/lti13/oauth_login", f"http://127.0.0.1:{port}/hub/", tool_jwks
        ).start()
        config = base / "lti.json"
        config.write_text(
            json.dumps(
                platform.tool_settings(private_key=str(key), contexts={CONTEXT: COURSE}, links={"link-ex01": AID})
            )
        )
        python = python_for() or sys.executable
        courses = {COURSE: {"folder": str(course), "instructor": instructor, "nested": False, "python": python}}
        token = secrets.token_hex(16)
        hub_cfg = base / "jupyterhub_config.py"
        hub_cfg.write_text(f'''c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {free_port()}
c.ConfigurableHTTPProxy.command = [{str(ROOT / "node_modules" / ".bin" / "configurable-http-proxy")!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.JupyterHub.db_url = "sqlite:///{base / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = "{base / "cookie_secret"}"
c.JupyterHub.pid_file = "{base / "hub.pid"}"
c.JupyterHub.services = [{{"name": "lti-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "lti-test", "services": ["lti-test"], "scopes": ["read:users", "read:groups"]}}]
{lti.hub_config(config, courses)}''')
        log = (base / "hub.log").open("w")
        hub = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(hub_cfg)],
            cwd=base,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_ctrl_c_when_orphaned,
            env={"PATH": f"{Path(sys.executable).parent}:{SYSTEM_PATH}", "LANG": "C.UTF-8", "HOME": "/root"},
        )
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert hub.poll() is None, f"the hub exited:\n{(base / 'hub.log').read_text()[-3000:]}"
            try:
                return requests.get(f"{url}/hub/api/", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_until(up, HUB_START_S, f"answer from the light hub at {url}")
        yield {
            "platform": platform,
            "url": url,
            "course": course,
            "instructor": instructor,
            "token": token,
            "config": lc.load(config, {COURSE}),
            "base": base,
            "log": base / "hub.log",
        }
    finally:
        if hub is not None:
            hub.send_signal(signal.SIGTERM)
            try:
                hub.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(hub.pid, signal.SIGKILL)
                hub.wait(timeout=10)
        if platform is not None:
            platform.stop()
        made = [name for name in lc.accounts(base / "course") if name != instructor] if base.exists() else []
        for name in [*made, instructor]:
            delete_account(name)
        shutil.rmtree(base, ignore_errors=True)


def _launch(lms, **spec) -> Any:  # requests' Response, with the launch's `session` attached
    """A click on the LMS's link: the platform's login initiation, the hub's redirect to the platform's
    authorization, the platform's auto-submitted form (posted here as a browser would); the hub's answer to it."""
    session = requests.Session()
    page = session.get(lms["platform"].launch_url(**spec), timeout=60)
    assert page.status_code == 200, (page.status_code, page.url, page.text[:500])
    action = re.search(r'action="([^"]+)"', page.text)
    assert action, page.text[:500]
    fields = {k: html.unescape(v) for k, v in re.findall(r'name="(\w+)" value="([^"]*)"', page.text)}
    answer: Any = session.post(html.unescape(action.group(1)), data=fields, allow_redirects=False, timeout=60)
    answer.session = session  # the launch's cookies, for the test to read
    return answer


def _groups(lms, name: str) -> list[str]:
    user = requests.get(
        f"{lms['url']}/hub/api/users/{name}", headers={"Authorization": f"token {lms['token']}"}, timeout=30
    )
    assert user.status_code == 200, user.text
    return sorted(user.json()["groups"])


def test_a_student_launch_makes_their_account_once_and_opens_the_assignment(lms):
    sub = f"student-{secrets.token_hex(4)}"
    email = f"Ann.Lee{secrets.token_hex(2)}@uni.example"
    assert lc.accounts(lms["course"]) == {} or all(e["sub"] != sub for e in lc.accounts(lms["course"]).values())
    started = time.monotonic()
    answer = _launch(lms, user=sub, roles=LEARNER, context=CONTEXT, assignment=AID, email=email, name="Ann Lee")
    assert answer.status_code == 302, (answer.status_code, answer.text[:1000])
    name = next(n for n, e in lc.accounts(lms["course"]).items() if e["sub"] == sub)
    assert name == email.split("@")[0].lower().replace(".", "-")  # from the LMS's email
    assert answer.headers["Location"] == f"/user/{name}/lab/tree/exercises/{AID}/{AID}.ipynb"
    account = pwd.getpwnam(name)
    assert account.pw_gecos.startswith("Two Primitives student")
    notebook = Path(account.pw_dir) / "exercises" / AID / f"{AID}.ipynb"
    assert notebook.stat().st_uid == account.pw_uid  # fetched, written as the student
    assert notebook.read_bytes() == (lms["course"] / "exercises" / AID / f"{AID}.ipynb").read_bytes()
    assert (Path(account.pw_dir) / "lessons").is_dir() and Path(account.pw_dir).stat().st_mode & 0o077 == 0
    assert name in json.loads((lms["course"] / "grader" / "hub-accounts.json").read_text())["accounts"]
    assert _groups(lms, name) == [f"nbgrader-{COURSE}"]
    assert any(
        c.name.startswith("jupyterhub-session-id") or c.name.startswith("jupyterhub-hub-login")
        for c in answer.session.cookies
    ), list(answer.session.cookies)  # logged in
    # their own work is never replaced: a second launch keeps the edited notebook and the same account
    notebook.write_text("the student's own work")
    again = _launch(lms, user=sub, roles=LEARNER, context=CONTEXT, link="link-ex01", email=email)
    assert again.status_code == 302 and again.headers["Location"] == answer.headers["Location"]  # [links] names it
    assert notebook.read_text() == "the student's own work"
    assert [n for n, e in lc.accounts(lms["course"]).items() if e["sub"] == sub] == [name]
    # another LMS user whose email gives the same name gets a name of their own
    twin = _launch(lms, user=f"other-{secrets.token_hex(4)}", roles=LEARNER, context=CONTEXT, email=email)
    assert twin.status_code == 302, twin.text[:500]
    twin_name = twin.headers["Location"].split("/")[2]
    assert twin_name != name and twin_name.startswith(name[:20]) and pwd.getpwnam(twin_name)
    assert twin.headers["Location"] == f"/user/{twin_name}/lab"  # no assignment named: their JupyterLab
    print(f"three launches in {time.monotonic() - started:.1f} s")


def test_an_instructor_or_ta_launch_logs_in_as_the_courses_instructor(lms):
    for roles in (INSTRUCTOR, TA):
        answer = _launch(lms, user=f"teacher-{secrets.token_hex(4)}", roles=roles, context=CONTEXT, assignment=AID)
        assert answer.status_code == 302, answer.text[:1000]
        assert answer.headers["Location"] == f"/user/{lms['instructor']}/lab/tree/exercises/{AID}"
    assert _groups(lms, lms["instructor"]) == [f"formgrade-{COURSE}", f"nbgrader-{COURSE}"]


AGAIN = "Open the assignment again from the LMS"
CHECK_ID = "The instructor checks client_id in the hub's LTI configuration"


@pytest.mark.parametrize(
    "variant, status, said, todo",
    [
        ("bad-signature", 401, "signature does not verify with the LMS's published keys", AGAIN),
        ("expired", 401, "the launch has expired", AGAIN),
        ("wrong-audience", 401, "this launch was meant for another tool", CHECK_ID),
    ],
)
def test_a_forged_expired_or_misdirected_launch_is_refused_with_a_page_that_says_why(lms, variant, status, said, todo):
    sub = f"mallory-{secrets.token_hex(4)}"
    answer = _launch(lms, user=sub, roles=INSTRUCTOR, context=CONTEXT, assignment=AID, variant=variant)
    assert answer.status_code == status, (answer.status_code, answer.text[:2000])
    page = re.search(r'<p id="twoprim-lti-refused">(.*?)</p>', answer.text, re.S)
    assert page and said in html.unescape(page.group(1)), answer.text[:3000]
    assert todo in html.unescape(page.group(1))
    assert all(e["sub"] != sub for e in lc.accounts(lms["course"]).values())  # no one was logged in or recorded


def test_a_launch_from_an_unknown_course_or_without_a_course_role_is_refused(lms):
    answer = _launch(lms, user="u-x", roles=LEARNER, context="some-other-course")
    assert answer.status_code == 403 and "is not linked to a course on this hub" in html.unescape(answer.text)
    answer = _launch(
        lms, user="u-y", roles="http://purl.imsglobal.org/vocab/lis/v2/institution/person#Staff", context=CONTEXT
    )
    assert answer.status_code == 403 and "neither a learner's nor an instructor's" in html.unescape(answer.text)
    direct = requests.get(f"{lms['url']}/hub/login", timeout=30)  # someone who opened the hub's address
    assert direct.status_code == 400 and "this hub's logins start from the LMS" in html.unescape(direct.text)
    jwks = requests.get(f"{lms['url']}/hub/lti13/jwks", timeout=30).json()
    assert jwks == {"keys": [lms["config"].public_jwk()]}  # what the LMS is given for the tool's signatures


def test_autograded_scores_reach_the_lms_over_ags_after_the_late_penalty(lms, capsys):
    import datetime

    from nbgrader.api import Gradebook

    from twoprim import grading
    from twoprim.classroom import lti_grades
    from twoprim.grading.gradebook import database_url

    course, platform = lms["course"], lms["platform"]
    subs = {who: f"{who}-{secrets.token_hex(4)}" for who in ("ontime", "late")}
    names = {}
    for who, sub in subs.items():
        answer = _launch(lms, user=sub, roles=LEARNER, context=CONTEXT, email=f"{who}{sub[-4:]}@uni.example")
        assert answer.status_code == 302, answer.text[:500]
        names[who] = answer.headers["Location"].split("/")[2]
    capsys.readouterr()
    assert lti_grades.send(AID, lms["config"], root=course, course=COURSE) == 0  # nothing graded yet: said
    assert "no graded submission in the gradebook: nothing to send" in capsys.readouterr().out
    with open(course / "grader" / "nbgrader_config.py", "a") as f:
        f.write(LATE_POLICY)
    write(course / "grader" / "submitted", names["ontime"], AID, answered(AID))  # 2026-11-30 09:00 UTC
    write(
        course / "grader" / "submitted", names["late"], AID, answered(AID), timestamp="2026-12-01 10:30:00.000000 UTC"
    )
    grading.init_db(database_url(course))
    grading.released_notebooks(AID, course, database_url(course))
    with Gradebook(database_url(course), COURSE) as gb:
        # nbgrader annotates **kwargs as dicts
        gb.update_or_create_assignment(AID, duedate=datetime.datetime(2026, 12, 1, 10))  # pyright: ignore[reportArgumentType]
    started = time.monotonic()
    grading.autograde(AID, root=course, workers=2, progress=False)
    graded_s = time.monotonic() - started
    with Gradebook(database_url(course), COURSE) as gb:
        rows: list[Any] = gb.assignment_submissions(AID)  # (nbgrader's rows: scores typed None on the class)
        held = {
            s.student.id: (s.score - (s.late_submission_penalty or 0), s.max_score, s.late_submission_penalty)
            for s in rows
        }
    assert held[names["late"]][2] > 0 and held[names["ontime"]][2] in (0, None), held  # the course's penalty
    started = time.monotonic()
    assert lti_grades.send(AID, lms["config"], root=course, course=COURSE) == 0, capsys.readouterr().out
    received = platform.scores(AID)
    assert set(received) == set(subs.values()), received
    for who, sub in subs.items():
        score, maximum, _ = held[names[who]]
        assert (received[sub]["scoreGiven"], received[sub]["scoreMaximum"]) == (score, maximum), (who, received[sub])
        assert received[sub]["gradingProgress"] == "FullyGraded" and received[sub]["activityProgress"] == "Completed"
        assert datetime.datetime.fromisoformat(received[sub]["timestamp"]).tzinfo is not None
    assert received[subs["late"]]["scoreGiven"] == 0 < received[subs["ontime"]]["scoreGiven"]
    item = next(i for i in platform.store["lineitems"].values() if i["tag"] == AID)
    assert item["scoreMaximum"] == held[names["ontime"]][1] and item["label"] == AID  # created, as it was missing
    sent_s = time.monotonic() - started
    # a rerun sends nothing: every score is as the platform accepted it
    capsys.readouterr()
    assert lti_grades.send(AID, lms["config"], root=course, course=COURSE) == 0
    assert "0 score(s) sent, 2 unchanged since the last send, 0 failed" in capsys.readouterr().out
    # a score changed (the late one's extension, say) and the platform failing for that user: named, exit 1, retried
    with Gradebook(database_url(course), COURSE) as gb:
        gb.find_submission(AID, names["late"]).notebooks[0].late_submission_penalty = 0
        gb.db.commit()
    platform.store["fail"][subs["late"]] = 5
    assert lti_grades.send(AID, lms["config"], root=course, course=COURSE, backoff=0.05) == 1
    out = capsys.readouterr().out
    assert f"FAILED: {names['late']}: 503" in out and "after 3 tries" in out, out
    assert platform.scores(AID)[subs["late"]]["scoreGiven"] == 0  # unchanged on the platform
    platform.store["fail"].clear()
    assert lti_grades.send(AID, lms["config"], root=course, course=COURSE) == 0
    assert "1 score(s) sent, 1 unchanged" in capsys.readouterr().out
    assert platform.scores(AID)[subs["late"]]["scoreGiven"] == held[names["late"]][1]
    print(f"autograde {graded_s:.1f} s, AGS send {sent_s:.2f} s")
