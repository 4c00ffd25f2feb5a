"""`./course hub --lti CONFIG`: students and instructors arrive from the LMS (LTI 1.3), logged in, at their assignment.

jupyterhub-ltiauthenticator's LTI 1.3 authenticator does the protocol: the LMS starts an OIDC login at
/hub/lti13/oauth_login, the hub sends the browser to the platform's authorization URL with a state and a nonce (in
cookies), and the platform posts back a signed id_token to /hub/lti13/oauth_callback, whose signature is checked
against the platform's JWKS, and whose issuer, audience (our client_id), expiry, age and nonce are checked too. This
module adds what a course needs on top (`CourseLTIAuthenticator.authenticate`):

- the deployment must be one of CONFIG's deployment_ids, the LMS course (the context) one CONFIG maps to a course
  of this hub, and the role Learner or Instructor/TA (`lti_config.course_role`); anything else is refused with a page
  that says why and what to do;
- an Instructor or TA logs in as the course's instructor account (which runs its exchange and owns its formgrader
  and gradebook); a Learner as their own account, made at their first launch (a name from the LMS, checked, never
  someone else's; no password: they log in only from the LMS), recorded for --remove-class and, with their LMS
  identity, in the course's grader/lti-users.json (grades go back to that identity, `lti_grades.py`);
- the hub groups nbgrader-COURSE (everyone of the course: its exchange service) and formgrade-COURSE (its
  instructor), from every course the account has launched into (JupyterHub's `manage_groups`);
- the assignment the link names (custom parameter `assignment`, or CONFIG's [links]) is fetched into the student's
  ~/exercises/ (written as the student, never over their own copy) and opened: /user/NAME/lab/tree/exercises/AID/...

A launch refused by the library (bad signature, expired token, wrong audience, a replayed or forged state) gets the
same kind of page: what was wrong, in words, and what to do next.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any, cast

from jupyterhub.handlers import BaseHandler
from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.error import InvalidAudienceError, LoginError, ValidationError
from ltiauthenticator.lti13.handlers import LTI13CallbackHandler, LTI13ConfigHandler, LTI13LoginInitHandler
from tornado import web
from traitlets import Dict, Unicode

from twoprim.classroom import lti_config as lc
from twoprim.classroom.class_accounts import record_created
from twoprim.classroom.hub_checks import MARKER, SYSTEM_PATH, _account, _tool, as_user, course_made

TIMEOUT_S = 60  # each account command and each copy made at a launch
log = logging.getLogger("JupyterHub")


class _Refused(web.HTTPError):
    """An HTTPError with the two messages JupyterHub's error page shows when an exception carries them."""

    jupyterhub_message: str
    jupyterhub_html_message: str


def refused(status: int, message: str) -> web.HTTPError:
    """An HTTPError whose page (JupyterHub's error page) says `message`, marked for tests and styles."""
    import html

    err = _Refused(status, "LTI launch refused: %s", message)
    err.jupyterhub_message = f"LTI launch refused: {message}"
    err.jupyterhub_html_message = f'<p id="twoprim-lti-refused">LTI launch refused: {html.escape(message)}</p>'
    return err


def explain(err: Exception, auth: CourseLTIAuthenticator) -> tuple[int, str]:
    """What a launch the library refused was, in words, and what to do."""
    text = str(err)
    again = "Open the assignment again from the LMS; if this page comes back, tell your instructor."
    if isinstance(err, InvalidAudienceError):
        return 401, (
            f"this launch was meant for another tool: its audience is not this hub's client id "
            f"({', '.join(sorted(auth.client_id))}). The instructor checks client_id in the hub's LTI "
            f"configuration against the LMS's registration of the tool. ({text})"
        )
    if "expired" in text.lower() or "too long ago" in text.lower():
        return 401, (f"the launch has expired (its signed token is valid for minutes only). {again} ({text})")
    if "signature" in text.lower() or "signing key" in text.lower():
        return 401, (
            f"the launch's signature does not verify with the LMS's published keys ({auth.jwks_endpoint}): "
            f"it was not signed by the LMS this hub is registered with. {again} ({text})"
        )
    return 400, f"{text}. {again}"


def _authenticator(handler: BaseHandler) -> CourseLTIAuthenticator:
    """The hub's authenticator, as the handlers it registers see it: it registers them only when it is this one."""
    return cast(CourseLTIAuthenticator, handler.authenticator)


class CallbackHandler(LTI13CallbackHandler):
    """The library's callback with pages that say why a launch was refused, and the assignment as the next URL."""

    twoprim_next: str | None = None

    async def post(self):
        try:
            id_token = self.decode_and_validate_launch_request()
        except ValidationError as err:
            raise refused(*explain(err, _authenticator(self))) from err
        except web.HTTPError as err:  # the state or nonce: a launch not started here, or replayed
            if err.status_code == 400 and "LTI launch refused" not in (err.log_message or ""):
                raise refused(
                    400,
                    f"{err.log_message or err.reason}: this launch did not start from this browser's "
                    f"login (or was sent twice). Open the assignment again from the LMS.",
                ) from err
            raise
        try:
            user = await self.login_user(id_token)
        except LoginError as err:
            raise refused(400, str(err)) from err
        if user is None:
            raise refused(403, "the hub did not log this account in")
        self.redirect(self.twoprim_next or cast(str, self.get_next_url(user)))  # (a URL, untyped in JupyterHub)


class LoginInitHandler(LTI13LoginInitHandler):
    """The library's OIDC login initiation; a request without the LMS's parameters (someone who opened the hub's
    address directly) is told where logins start."""

    def post(self):
        try:
            return super().post()
        except web.HTTPError as err:
            if err.status_code != 400:
                raise
            raise refused(
                400,
                f"this hub's logins start from the LMS ({err.log_message}): open the course in the "
                f"LMS and follow the link to the assignment there",
            ) from err

    get = post


class JWKSHandler(BaseHandler):
    """GET /hub/lti13/jwks: the tool's public key, for the LMS (AGS client-credentials assertions are signed with
    its private half)."""

    def get(self):
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"keys": [_authenticator(self).lti.public_jwk()]}))


class ConfigHandler(LTI13ConfigHandler):
    """GET /hub/lti13/config: the library's tool configuration (Canvas's developer key JSON), with our JWKS URL and
    the assignment as a custom parameter."""

    def write(self, chunk):
        if isinstance(chunk, str) and chunk.startswith("{"):
            data = json.loads(chunk)
            data["public_jwk_url"] = data["oidc_initiation_url"].replace("oauth_login", "jwks")
            data.setdefault("custom_fields", {})["assignment"] = "$Canvas.assignment.title"
            chunk = json.dumps(data)
        return super().write(chunk)


class CourseLTIAuthenticator(LTI13Authenticator):
    """LTI 1.3 logins for the classroom's courses (see the module's docstring)."""

    login_handler = LoginInitHandler
    callback_handler = CallbackHandler
    config_handler = ConfigHandler
    lti_config = Unicode(help="the LTI configuration file (`lti_config.load`)").tag(config=True)
    courses = Dict(help="course id -> {folder, instructor, nested, python}: the courses this hub serves").tag(
        config=True
    )
    _lti = None

    @property
    def lti(self) -> lc.LTIConfig:
        if self._lti is None:
            self._lti = lc.load(Path(self.lti_config), set(self.courses))
        return self._lti

    def get_handlers(self, app):
        return [*super().get_handlers(app), (self.login_url("").replace("oauth_login", "jwks"), JWKSHandler)]

    async def authenticate(self, handler, data=None):
        claims: dict[str, Any] = data or {}  # the launch's JWT claims
        config = self.lti
        deployment = claims.get(lc.CLAIM + "deployment_id")
        if deployment not in config.deployment_ids:
            raise refused(
                403,
                f"the LMS deployment {deployment!r} is not one this hub knows (its LTI configuration "
                f"lists {', '.join(config.deployment_ids)}): the instructor adds it to deployment_ids",
            )
        context = claims.get(lc.CLAIM + "context") or {}
        course = config.course_of(context.get("id"))
        if course is None or course not in self.courses:
            raise refused(
                403,
                f"the LMS course {context.get('title') or context.get('label') or ''} (context id "
                f"{context.get('id')!r}) is not linked to a course on this hub: the instructor maps it "
                f"in [contexts] of the hub's LTI configuration",
            )
        role = lc.course_role(claims.get(lc.CLAIM + "roles") or [])
        if role is None:
            raise refused(
                403,
                "your role in this LMS course is neither a learner's nor an instructor's or TA's, so "
                "the course has no place for it: ask your instructor",
            )
        spec = self.courses[course]
        name = spec["instructor"] if role == "instructor" else await asyncio.to_thread(self._student, claims, course)
        owner = pwd.getpwnam(spec["instructor"])
        await asyncio.to_thread(
            lc.record_launch, Path(spec["folder"]), claims, name, role, (owner.pw_uid, owner.pw_gid)
        )
        aid = lc.assignment_of(claims, config)
        if isinstance(handler, CallbackHandler):
            handler.twoprim_next = await asyncio.to_thread(self._open, name, role, course, aid, handler.base_url)
        self.log.info(
            "LTI launch: %s (%s) in %s as %s, %s",
            lc.identity(claims),
            role,
            course,
            name,
            f"opening {aid}" if aid else "no assignment named",
        )
        return {"name": name, "groups": self._groups(name, course, role), "auth_state": None}

    def _groups(self, name: str, course: str, role: str) -> list[str]:
        """nbgrader-C for every course the account launched into, formgrade-C where it is the instructor."""
        groups = {f"nbgrader-{course}"} | ({f"formgrade-{course}"} if role == "instructor" else set())
        for cid, spec in self.courses.items():
            if spec["instructor"] == name:
                groups |= {f"nbgrader-{cid}", f"formgrade-{cid}"}
            elif name in lc.accounts(Path(spec["folder"])):
                groups.add(f"nbgrader-{cid}")
        return sorted(groups)

    def _student(self, claims: dict, course: str) -> str:
        """The student's account: the one their LMS identity already has (in any course's record), else a new one."""
        who = lc.identity(claims)
        known: dict[str, str] = {}
        for spec in self.courses.values():
            for account, entry in lc.accounts(Path(spec["folder"])).items():
                known[entry["identity"]] = account
        if who in known and _account(known[who]) is not None:
            return known[who]
        owners = set(known.values()) | {spec["instructor"] for spec in self.courses.values()}
        name = lc.account_name(claims, lambda n: n in owners or _account(n) is not None, self.lti.username_claim)
        create_student(name, Path(self.courses[course]["folder"]), self.courses[course]["python"])
        return name

    def _open(self, name: str, role: str, course: str, aid: str | None, base: str) -> str:
        """Fetch `aid` for a student (when released and not there yet) and the URL that opens it."""
        spec = self.courses[course]
        if not aid:
            return f"{base}user/{name}/lab"
        if role == "instructor":
            folder = Path("exercises") / aid
            return f"{base}user/{name}/lab/tree/{folder}"
        rel = Path("exercises", *([course] if spec.get("nested") else []), aid)
        notebook = fetch_for(name, course, aid, Path(spec["folder"]), spec["instructor"], spec["python"], rel)
        return f"{base}user/{name}/lab/tree/{rel / notebook if notebook else rel}"


def create_student(name: str, course: Path, python: str) -> pwd.struct_passwd:
    """A student's account made at their first launch: the course's marker, a private home, no password (the LMS
    is how they log in), recorded for --remove-class, and the lessons copied into ~/lessons."""
    from twoprim.classroom.hub import COPY_AS_STUDENT

    if not lc.NAME.match(name):
        raise refused(400, f"{name!r} is not a valid account name")
    existing = _account(name)
    if existing is not None and not course_made(existing):
        raise refused(409, f"the account {name} exists and is not the course's: the instructor renames one of them")
    if existing is None:
        useradd = _tool("useradd")
        if useradd is None:
            raise refused(500, "`useradd` was not found on the hub's machine: the administrator installs passwd")
        subprocess.run(
            [
                useradd,
                "--create-home",
                "--user-group",
                "--shell",
                "/bin/bash",
                "--comment",
                MARKER["student"],
                name,
            ],
            check=True,
            capture_output=True,
            timeout=TIMEOUT_S,
        )
        record_created(course, pwd.getpwnam(name), "student")
    account = pwd.getpwnam(name)
    os.chmod(account.pw_dir, 0o700)
    copied = as_user(
        account.pw_uid,
        account.pw_gid,
        [python, "-I", "-S", "-c", COPY_AS_STUDENT, str(course / "lessons"), account.pw_dir],
        timeout=TIMEOUT_S,
    )
    if copied.returncode:  # their JupyterLab opens all the same; the lessons are in the course folder
        log.warning("could not copy the lessons into %s's home: %s", name, copied.stderr.strip()[-300:])
    return account


READ_RELEASE = r"""
import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True, timeout=30)
row = db.execute("SELECT files FROM released WHERE course=? AND assignment=? ORDER BY version DESC LIMIT 1",
                 sys.argv[2:4]).fetchone()
sys.stdout.buffer.write(row[0] if row else b"")
"""
WRITE_RELEASE = r"""
import os, sys, tarfile, io
dest = os.path.join(os.path.expanduser("~"), sys.argv[1])
data = sys.stdin.buffer.read()
if os.path.lexists(dest) or not data:
    sys.exit(0)
with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
    members = [m for m in tar if m.isfile() and not m.name.startswith("/") and ".." not in m.name.split("/")]
    for m in members:
        path = os.path.join(dest, m.name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "xb") as f:
            f.write(tar.extractfile(m).read())
"""


def fetch_for(name: str, course: str, aid: str, folder: Path, instructor: str, python: str, rel: Path) -> str | None:
    """The newest release of `aid` copied into the student's ~/`rel` unless it is there already (their own work is
    never replaced): read as the instructor (the store is theirs), written as the student. The notebook to open."""
    store = folder / "grader" / "exchange" / "exchange.sqlite"
    teacher, student = pwd.getpwnam(instructor), pwd.getpwnam(name)
    env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}
    read = subprocess.run(
        [python, "-I", "-S", "-c", READ_RELEASE, str(store), course, aid],
        user=teacher.pw_uid,
        group=teacher.pw_gid,
        extra_groups=[],
        cwd="/",
        env={**env, "HOME": teacher.pw_dir},
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    if read.returncode != 0 or not read.stdout:
        return None  # not released (yet): their JupyterLab opens on the folder, the Assignments tab says the rest
    subprocess.run(
        [python, "-I", "-S", "-c", WRITE_RELEASE, str(rel)],
        input=read.stdout,
        user=student.pw_uid,
        group=student.pw_gid,
        extra_groups=[],
        cwd="/",
        env={**env, "HOME": student.pw_dir},
        capture_output=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    return f"{aid}.ipynb" if (Path(student.pw_dir) / rel / f"{aid}.ipynb").is_file() else None


def hub_config(config_path: Path, courses: dict[str, dict]) -> str:
    """The lines of jupyterhub_config.py that make the hub's logins LTI 1.3 ones (`./course hub --lti CONFIG`)."""
    config = lc.load(config_path, set(courses))
    return f"""# Logins come from the LMS over LTI 1.3 (twoprim/classroom/lti.py; {config_path}): the platform {config.issuer}
c.JupyterHub.authenticator_class = "twoprim.classroom.lti.CourseLTIAuthenticator"
c.CourseLTIAuthenticator.lti_config = {str(config_path)!r}
c.CourseLTIAuthenticator.courses = {courses!r}
c.CourseLTIAuthenticator.issuer = {config.issuer!r}
c.CourseLTIAuthenticator.client_id = {set([config.client_id])!r}
c.CourseLTIAuthenticator.authorize_url = {config.auth_login_url!r}
c.CourseLTIAuthenticator.jwks_endpoint = {config.jwks_url!r}
c.CourseLTIAuthenticator.username_key = "sub"
c.CourseLTIAuthenticator.manage_groups = True  # nbgrader-COURSE, formgrade-COURSE: from the launches
c.Authenticator.allow_all = True  # whom the LMS sends, for a context CONFIG maps; everyone else is refused
c.Authenticator.auto_login = True  # /hub/login says to start from the LMS (no password form)
"""  # noqa: E501 - the generated file's first line names the configuration file and the platform
