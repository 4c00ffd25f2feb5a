"""`./course hub` (and `make hub`): the classroom on JupyterHub, one command, in the foreground.

One Unix account per student and one for the instructor (made here as root, marked "Two Primitives ..." in their
GECOS field so a rerun recognises them; an account the course did not make is never changed), each logging in to
JupyterHub with a password made for this run, and served by a JupyterLab of their own (JupyterHub's
LocalProcessSpawner). The exchange is a JupyterHub service (`exchange/service.py`, run by the hub as the
instructor): students fetch and submit over HTTP, the hub tells it who they are, and submissions are kept in
grader/exchange/, which only the instructor can read (`--exchange-kind filesystem`: nbgrader's folder every account
can write to). The instructor owns the course
folder (nbgrader's "one class, one grader"): their server opens in it, with the formgrader; students' servers open
in their home, with `~/lessons/` (copied, never overwriting their files) and `~/exercises/<assignment>/` (fetched
from the Assignments tab). Students cannot read `solutions/`, `grader/` (the gradebook) or `.git` (file
permissions, checked as a student before the hub starts), nor anyone else's home.

Everything is checked before anything is created or changed (`hub_checks.py`): the names, root, the port, the proxy, and
that other accounts can run the course environment. On loopback by default; `--public HOST` serves the class to other
machines over TLS only (`--ssl-cert`/`--ssl-key` for HOST and *.HOST, checked first). Ctrl-C (or SIGTERM) stops the
hub, its proxy and every server it started, and says so. The files of one run live in a temporary folder
(`hub_config.py`), removed at the end.
At the end of a course, `--remove-class` deletes the accounts the hub made, and no other (`class_accounts.py`).

Why this module is long: one command's whole life in the foreground: the accounts and passwords it prints, the
course folder's permissions, the students' homes, starting JupyterHub, following its descendants while it runs, and
a Ctrl-C that stops the services, servers, proxy and hub in order and says what it stopped; the checks, the
configuration and the accounts' removal already live in modules of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from twoprim.classroom.class_accounts import record_created, record_path, remove_class
from twoprim.classroom.hub_checks import MARKER, SYSTEM_PATH, _account, _tool, as_user, course_made, make_plan
from twoprim.classroom.hub_config import Plan, write_run_folder
from twoprim.config import COURSE_ID, ROOT
from twoprim.core.errors import CourseError

DEFAULT_PORT = 8000
DEFAULT_EXCHANGE = "/srv/nbgrader/exchange"  # nbgrader's documented place
PUBLIC = ("lessons", "exercises", "twoprim", "data")  # readable by students; .venv and node_modules are checked
UNTOUCHED = (".venv", "node_modules")  # shared, possibly hard-linked: never chowned or chmodded
CLASSROOM_FILE = "classroom.json"  # grader/: the exchange for the instructor's later commands
READY_S = 90
STOP_S = 60


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="course hub", description=(__doc__ or "").split("\n\n")[0])
    for add in (_class_arguments, _address_arguments, _exchange_arguments, _limit_arguments, _end_arguments):
        add(p)
    return p


def _class_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("the class: its students and instructor, or several courses, or logins from the LMS")
    p.add_argument("--students", default="", help="comma-separated student account names, e.g. alice,bob,carol")
    p.add_argument("--roster", type=Path, help="a CSV roster with an `id` column (nbgrader's `db student import`)")
    p.add_argument("--instructor", default="instructor", help="the instructor's account (default: instructor)")
    p.add_argument(
        "--new-password",
        action="append",
        default=[],
        metavar="NAME",
        help="give this course account a new password (repeatable; `all` for every one): accounts keep "
        "theirs across runs otherwise",
    )
    p.add_argument(
        "--courses",
        type=Path,
        default=None,
        metavar="FILE",
        help="several courses on this hub: a JSON or TOML file listing each course's id, folder (a copy "
        "of the course), instructor and students; each course gets its own exchange, formgrader and "
        "gradebook, and its hub groups nbgrader-ID and formgrade-ID",
    )
    p.add_argument(
        "--lti",
        type=Path,
        default=None,
        metavar="CONFIG",
        help="logins from the LMS over LTI 1.3 (a JSON or TOML file: the platform's issuer, client id, "
        "deployment ids, URLs, the tool's private key, LMS contexts -> courses; docs/guides/lti.md):"
        " students' accounts are made at their first launch",
    )


def _address_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("where students reach it")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port students open ({DEFAULT_PORT})")
    p.add_argument(
        "--public",
        metavar="HOST",
        default=None,
        help="serve the class to other machines at https://HOST:PORT/, each user's server at "
        "https://NAME.HOST:PORT/ (DNS for HOST and *.HOST; needs --ssl-cert and --ssl-key)",
    )
    p.add_argument("--ssl-cert", type=Path, default=None, help="with --public: a PEM certificate for HOST and *.HOST")
    p.add_argument("--ssl-key", type=Path, default=None, help="with --public: its private key")
    p.add_argument(
        "--ip", default=None, help="the address the hub listens on (default: 127.0.0.1; with --public, every interface)"
    )


def _exchange_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("how assignments and submissions are exchanged, and each student's quota")
    p.add_argument(
        "--exchange",
        type=Path,
        default=Path(os.environ.get("TWOPRIM_EXCHANGE") or DEFAULT_EXCHANGE),
        help=f"with --exchange-kind filesystem: nbgrader's shared exchange folder ($TWOPRIM_EXCHANGE, else "
        f"{DEFAULT_EXCHANGE}); the exchange service shares no folder",
    )
    p.add_argument(
        "--exchange-kind",
        choices=("service", "filesystem"),
        default="service",
        help="service (default): the exchange is a JupyterHub service that knows who submits and stamps "
        "the time, keeping submissions where no student can read them; filesystem: nbgrader's "
        "shared folder, every account writing into it",
    )
    p.add_argument(
        "--max-file-mb",
        type=float,
        default=100.0,
        help="with the service: the largest notebook (or other file) a student may submit, in MB (default 100)",
    )
    p.add_argument(
        "--max-submissions",
        type=int,
        default=50,
        help="with the service: how many times each student may submit an assignment (default 50)",
    )
    p.add_argument(
        "--max-stored-mb",
        type=float,
        default=500.0,
        help="with the service: MB each student's submissions of an assignment may hold (default 500)",
    )


def _limit_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("what each user's server and kernels may use, and the idle cull")
    p.add_argument(
        "--memory-mb",
        type=int,
        default=2048,
        help="memory of each user's server and kernels together, in MB (default 2048; a control group: "
        "over it the largest process, their kernel, is stopped; 0: none)",
    )
    p.add_argument(
        "--cpus",
        type=float,
        default=1.0,
        help="CPU time of each user's server and kernels together, in cores (default 1)",
    )
    p.add_argument(
        "--cull-idle",
        type=int,
        default=3600,
        metavar="SECONDS",
        help="stop a server idle this long (jupyterhub-idle-culler; the student's files stay; default 3600, 0: never)",
    )
    p.add_argument(
        "--max-servers",
        type=int,
        default=0,
        help="the most servers running at once; a login past it gets a page saying the classroom is full "
        "(default 0: no limit; the capacity runs on the docs' Benchmarks page say what a machine serves)",
    )


def _end_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("the end of a course")
    p.add_argument(
        "--remove-class",
        action="store_true",
        help="at the end of a course: delete the accounts ./course hub created (recorded in "
        "grader/hub-accounts.json) and their homes, and no other; says what it will delete and asks",
    )
    p.add_argument("--yes", action="store_true", help="with --remove-class: delete without asking")


# --- preparing: accounts, the course's permissions, the exchange ----------------------------------------------


def _password() -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(16))


KEPT = "(kept from an earlier run)"
OWN = "(their own Unix password)"


def _needed_tool(name: str) -> str:
    """An account tool's full path; checked before anything was created (hub_checks), so missing only if removed
    since."""
    tool = _tool(name)
    if tool is None:
        raise CourseError(f"{name} was not found (it makes the class's accounts): install it (Debian: passwd)")
    return tool


def ensure_account(
    name: str, role: str, new_password: bool = False, course: Path | None = None
) -> tuple[pwd.struct_passwd, str]:
    """The account, made when missing (and then recorded in `course`'s grader/hub-accounts.json, for
    --remove-class), and what the table says of its password: a new one when the account is made here or
    `new_password`; else it keeps the one it has (an earlier run's, or one its owner set with `passwd`), and a
    person's own account is never changed."""
    account = _account(name)
    if account is None:
        subprocess.run(
            [
                _needed_tool("useradd"),
                "--create-home",
                "--user-group",
                "--shell",
                "/bin/bash",
                "--comment",
                MARKER[role],
                name,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        account = pwd.getpwnam(name)
        if course is not None:
            record_created(course, account, role)
        new_password = True
    elif not course_made(account):
        return account, OWN  # the instructor's own account: their own password, never changed
    elif account.pw_gecos.split(",")[0] != MARKER[role]:
        subprocess.run(
            [_needed_tool("usermod"), "--comment", MARKER[role], name], check=True, capture_output=True, timeout=60
        )
    os.chmod(account.pw_dir, 0o700)
    if not new_password:
        return account, KEPT
    password = _password()
    subprocess.run(
        [_needed_tool("chpasswd")], input=f"{name}:{password}\n", text=True, check=True, capture_output=True, timeout=60
    )
    return account, password


COPY_AS_STUDENT = r"""
import os, shutil, sys
src, home = sys.argv[1:3]
os.makedirs(os.path.join(home, "exercises"), exist_ok=True)
for dirpath, dirnames, filenames in os.walk(src):
    dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    target = os.path.join(home, "lessons", os.path.relpath(dirpath, src))
    os.makedirs(target, exist_ok=True)
    for name in filenames:
        if not os.path.lexists(os.path.join(target, name)):
            shutil.copyfile(os.path.join(dirpath, name), os.path.join(target, name))
"""


def furnish_home(plan: Plan, account: pwd.struct_passwd) -> None:
    """~/exercises and the lessons missing from ~/lessons (a student's own files are never replaced), written as
    the student: root never writes into a home its owner controls (a symlink there could point anywhere)."""
    try:
        probe = as_user(
            account.pw_uid,
            account.pw_gid,
            [
                str(plan.venv / "bin" / "python"),
                "-I",
                "-S",
                "-c",
                COPY_AS_STUDENT,
                str(plan.course / "lessons"),
                account.pw_dir,
            ],
            timeout=120,
        )
        problem = probe.stderr.strip().splitlines()[-1] if probe.returncode else ""
    except OSError as e:
        problem = str(e)
    if problem:
        print(
            f"note: could not copy the lessons into {account.pw_dir}/lessons ({problem}); {account.pw_name} can "
            f"open them in {plan.course / 'lessons'}",
            flush=True,
        )


def give_course(course: Path, owner: pwd.struct_passwd) -> None:
    """The instructor owns the course; students may read lessons/, exercises/, twoprim/, data/ and the files at the
    top, and nothing else (solutions/, grader/, .git, tests/ ... become 0700). .venv and node_modules are left
    as they are (shared, perhaps hard-linked: changing them would change every link), and so is root's record of
    the accounts the classroom made (grader/hub-accounts.json)."""
    record = str(record_path(course))
    for dirpath, dirnames, filenames in os.walk(course):
        if Path(dirpath) == course:
            dirnames[:] = [d for d in dirnames if d not in UNTOUCHED]
        for name in [*dirnames, *filenames, None]:
            path = os.path.join(dirpath, name) if name else dirpath
            if path != record and os.lstat(path).st_uid != owner.pw_uid:
                os.lchown(path, owner.pw_uid, owner.pw_gid)
    course.chmod(0o755)
    for entry in course.iterdir():
        if entry.name in UNTOUCHED or entry.is_symlink():
            continue
        public = (
            entry.name in PUBLIC
            or entry.name.endswith(".egg-info")
            or (entry.is_file() and not entry.name.startswith("."))
        )
        if not public:
            entry.chmod(entry.stat().st_mode & 0o700)
            continue
        for dirpath, dirnames, filenames in os.walk(entry) if entry.is_dir() else [(str(course), [], [entry.name])]:
            for name in [*dirnames, *filenames, None]:
                path = Path(dirpath, name) if name else Path(dirpath)
                if path.is_symlink():
                    continue
                mode = path.stat().st_mode & 0o7777
                path.chmod((mode | (0o055 if path.is_dir() else 0o044)) & ~0o022)


CHECK_AS_STUDENT = r"""
import json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").close()
        out[path] = "readable"
    except PermissionError:
        out[path] = "denied"
    except OSError as e:
        out[path] = type(e).__name__
print(json.dumps(out))
"""


def verify_as_student(plan: Plan, student: pwd.struct_passwd, others: list[pwd.struct_passwd]) -> None:
    """Read, as a student, what they must and must not reach; refuse to start when a permission is wrong."""
    private = [plan.course / p for p in ("solutions", "grader", ".git") if (plan.course / p).exists()]
    private += [Path(o.pw_dir) for o in others]
    public = [plan.course / p for p in PUBLIC if (plan.course / p).exists()] + ([] if plan.service else [plan.exchange])
    try:
        probe = as_user(
            student.pw_uid,
            student.pw_gid,
            [str(plan.venv / "bin" / "python"), "-I", "-S", "-c", CHECK_AS_STUDENT, *map(str, private + public)],
            timeout=60,
        )
        seen, why = (json.loads(probe.stdout), "") if probe.returncode == 0 else ({}, probe.stderr.strip()[-300:])
    except (OSError, ValueError) as e:
        seen, why = {}, str(e)
    for path in private:
        if seen.get(str(path)) != "denied":
            raise CourseError(
                f"student {student.pw_name} could read {path} ({seen.get(str(path), why)}): "
                f"the classroom does not start until it is private (chmod go-rwx {path})"
            )
    for path in public:
        if seen.get(str(path)) != "readable":
            raise CourseError(
                f"student {student.pw_name} cannot read {path} ({seen.get(str(path), why)}): chmod -R go+rX {path}"
            )


def prepare_exchange(exchange: Path, instructor: pwd.struct_passwd) -> None:
    """nbgrader's exchange (--exchange-kind filesystem): a folder every account can write to (its docs: `chmod
    ugo+rw`, 0777); the course's folder in it, from an earlier class, is handed to this instructor. The exchange
    service needs no folder at all: students reach it, and the due dates, over HTTP."""
    missing = [p for p in [*reversed(exchange.parents), exchange] if not p.exists()]
    for folder in missing:
        folder.mkdir()
        folder.chmod(0o755)
    exchange.chmod(0o777)
    course_dir = exchange / COURSE_ID
    if course_dir.is_dir() and course_dir.stat().st_uid != instructor.pw_uid:
        for path in [course_dir, course_dir / "inbound"]:
            if path.exists():
                os.chown(path, instructor.pw_uid, instructor.pw_gid)
        for sub in ("outbound", "feedback"):
            for dirpath, dirnames, filenames in os.walk(course_dir / sub):
                for name in [*dirnames, *filenames, None]:
                    os.lchown(os.path.join(dirpath, name) if name else dirpath, instructor.pw_uid, instructor.pw_gid)


def prepare_store(store: Path, instructor: pwd.struct_passwd) -> None:
    """The exchange service's store (grader/exchange/): the instructor's, 0700, like grader/ around it. What is in
    it from an earlier run is kept (every submission of the class)."""
    store.mkdir(mode=0o700, exist_ok=True)
    for dirpath, dirnames, filenames in os.walk(store):
        for name in [*dirnames, *filenames, None]:
            path = os.path.join(dirpath, name) if name else dirpath
            os.lchown(path, instructor.pw_uid, instructor.pw_gid)
    store.chmod(0o700)


def _record_classroom(plan: Plan, folder: Path, owner: pwd.struct_passwd, settings: dict) -> None:
    """grader/classroom.json: the exchange for the instructor's later commands (and the course id of the folder)."""
    record = folder / "grader" / CLASSROOM_FILE
    record.write_text(json.dumps({"url": plan.url, **settings}, indent=1) + "\n")
    os.chown(record, owner.pw_uid, owner.pw_gid)


def _nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def prepare_several(plan: Plan) -> dict[str, str]:
    """--courses: each course's instructor and students (a student of two courses has one account), its folder
    given to its instructor, its store; each checked as one of its students (or nobody): no other course's
    solutions, gradebook or submissions, no one else's home."""
    import dataclasses

    passwords: dict[str, str] = {}
    everyone = {c.instructor for c in plan.courses} | set(plan.students)
    renew = everyone if "all" in plan.new_passwords else set(plan.new_passwords)
    accounts: dict[str, pwd.struct_passwd] = {}
    for course in plan.courses:
        teacher, passwords[course.instructor] = ensure_account(
            course.instructor, "instructor", course.instructor in renew, course.folder
        )
        accounts[course.instructor] = teacher
        for name in course.students:
            if name not in accounts:
                accounts[name], passwords[name] = ensure_account(name, "student", name in renew, course.folder)
        give_course(course.folder, teacher)
        prepare_store(course.store, teacher)
        _record_classroom(
            plan,
            course.folder,
            teacher,
            {
                "course_id": course.id,
                "instructor": course.instructor,
                "students": list(course.students),
                "exchange_kind": "service",
                "exchange": str(plan.exchange),
                "exchange_url": course.service_url,
                "exchange_store": str(course.store),
            },
        )
    for name in plan.students:
        first = next(c for c in plan.courses if name in c.students)
        furnish_home(dataclasses.replace(plan, course=first.folder), accounts[name])
    for course in plan.courses:
        probe = accounts[course.students[0]] if course.students else _nobody()
        others = [a for n, a in accounts.items() if n != probe.pw_name]
        verify_as_student(dataclasses.replace(plan, course=course.folder), probe, others)
        for other in plan.courses:
            if other is not course:  # another course's private folders too
                verify_as_student(dataclasses.replace(plan, course=other.folder), probe, [])
    return passwords


def prepare(plan: Plan) -> dict[str, str]:
    """Accounts, homes, the course's permissions, the exchange; returns account -> its password for the table (new,
    KEPT or OWN)."""
    if plan.several:
        return prepare_several(plan)
    passwords = {}
    renew = set(plan.students) | {plan.instructor} if "all" in plan.new_passwords else set(plan.new_passwords)
    instructor, passwords[plan.instructor] = ensure_account(
        plan.instructor, "instructor", plan.instructor in renew, plan.course
    )
    accounts = []
    for name in plan.students:
        account, passwords[name] = ensure_account(name, "student", name in renew, plan.course)
        accounts.append(account)
    give_course(plan.course, instructor)
    if plan.service:  # nothing is shared with students: the service holds the class's work, its URL is all they get
        prepare_store(plan.store, instructor)
    else:
        prepare_exchange(plan.exchange, instructor)
    for account in accounts:
        furnish_home(plan, account)
    record = plan.course / "grader" / CLASSROOM_FILE
    record.write_text(
        json.dumps(
            {
                "exchange": str(plan.exchange),
                "instructor": plan.instructor,
                "students": list(plan.students),
                "url": plan.url,
                "exchange_kind": plan.exchange_kind,
                **({"exchange_url": plan.service_url, "exchange_store": str(plan.store)} if plan.service else {}),
            },
            indent=1,
        )
        + "\n"
    )
    os.chown(record, instructor.pw_uid, instructor.pw_gid)
    verify_as_student(plan, accounts[0] if accounts else _nobody(), [instructor, *accounts[1:]])
    return passwords


# --- running ----------------------------------------------------------------------------------------------------


def table(plan: Plan, passwords: dict[str, str], pid: int) -> str:
    """The table printed when the hub starts: each account, its role, its password and where its server opens."""
    rows = [("account", "role", "password", "their server opens in")]
    for course in plan.courses or [None]:
        instructor = course.instructor if course else plan.instructor
        where = f"{course.folder} (course {course.id}" if course else f"{plan.course} (the course"
        rows.append((instructor, "instructor", passwords[instructor], f"{where}; Nbgrader > Formgrader)"))
    for name in plan.students:
        mine = [c.id for c in plan.courses if name in c.students]
        rows.append(
            (
                name,
                "student",
                passwords[name],
                f"~{name} (lessons/, exercises/{'<course>/' if mine else ''})"
                + (f" in {', '.join(mine)}" if mine else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    where = f"on {plan.ip or 'every interface'}, TLS" if plan.public else "loopback only"
    lines = ["", f"The Two Primitives classroom is running (JupyterHub, {where}): {plan.url}", ""]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=False)) + "  " + r[3] for r in rows]
    lines += [
        "",
        (
            f"Logins come from the LMS (LTI 1.3, {plan.lti}): register the tool there with the OIDC login URL "
            f"{plan.url}hub/lti13/oauth_login, the redirect URI {plan.url}hub/lti13/oauth_callback and the "
            f"public JWK URL {plan.url}hub/lti13/jwks ({plan.url}hub/lti13/config is Canvas's JSON); students' "
            f"accounts are made at their first launch."
            if plan.lti
            else f"Log in at {plan.url}hub/login with an account and its password (a new one is shown only here, once; "
            f"accounts keep theirs across runs, `passwd` in a JupyterLab terminal changes it, and "
            f"--new-password NAME gives one a new one)."
        ),
        *(
            [
                f"Each user's server is at https://<name>.{plan.host}{plan.url.rsplit(plan.host, 1)[1]}: DNS must "
                f"send {plan.host} and *.{plan.host} to this machine."
            ]
            if plan.public
            else []
        ),
        (
            f"Exchange: the service {plan.service_url} (JupyterHub says who submits; submissions are kept in "
            f"{plan.store}, which only {plan.instructor} can read; no folder is shared with students)."
            if plan.service
            else f"Exchange: {plan.exchange} (recorded in grader/{CLASSROOM_FILE} for the instructor's ./course "
            f"collect, autograde, feedback)."
        ),
        f"Class commands run as the instructor: their JupyterLab terminal, or runuser -u {plan.instructor} -- "
        f"{plan.course / 'course'} collect ex01_dot",
        f"Stop: Ctrl-C here (or kill -INT {pid}): stops the hub, the proxy and every server it started.",
        "",
    ]
    return "\n".join(lines)


def _answers(port: int, host: str, *, ip: str = "127.0.0.1", tls: bool = False) -> bool:
    """True when JupyterHub's API answers on `ip`:`port` for `host` (over TLS: through the proxy with --public)."""
    import http.client
    import ssl

    if tls:  # only whether it answers: the certificate was checked before the start (hub_checks.check_public)
        conn = http.client.HTTPSConnection(ip, port, timeout=2, context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection(ip, port, timeout=2)
    try:
        conn.request("GET", "/hub/api/", headers={"Host": host})
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _ready(plan: Plan) -> bool:
    """The hub itself first (asking the proxy earlier only fills the log with its 404s), then through the proxy."""
    ip = plan.ip if plan.ip not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return _answers(plan.hub_port, "127.0.0.1") and _answers(
        plan.port, f"{plan.host}:{plan.port}", ip=ip, tls=plan.public
    )


SERVICE_COMMANDS = ("twoprim.exchange.service", "jupyterhub_idle_culler")  # the hub's services, as started
TRACK_EVERY_S = 2.0  # how often the hub's descendants are listed while it runs (servers live minutes, not seconds)


class _Tracker:
    """The hub's descendants (proxy, servers, kernels) as seen while it runs, to check that none outlives it."""

    def __init__(self, pid: int, student_uids: set[int]):
        import psutil

        self.psutil, self.root, self.uids = psutil, psutil.Process(pid), student_uids
        self.seen: dict[tuple[int, float], tuple] = {}  # (pid, start) -> (process, account, is a user's server)

    def poll(self) -> None:
        try:
            children = self.root.children(recursive=True)
        except self.psutil.Error:
            return
        for child in children:
            try:
                key = (child.pid, child.create_time())
                if key not in self.seen or not self.seen[key][2]:  # seen before its exec and setuid: look again
                    server = any("jupyterhub-singleuser" in a for a in child.cmdline()[:3])
                    self.seen[key] = (child, child.username(), server)
            except self.psutil.Error:
                pass

    def end_services(self) -> None:
        """SIGTERM the hub's services (the exchange, whose store is SQLite and so safe to stop mid-request, and the
        idle culler): JupyterHub stops them one after another with up to 20 s of signals each (SIGINT, SIGTERM,
        SIGKILL), a minute on a loaded machine; stopped first, they are already gone when it looks."""
        try:
            children = self.root.children()
        except self.psutil.Error:
            return
        for child in children:
            with contextlib.suppress(self.psutil.Error):
                if any(name in " ".join(child.cmdline()) for name in SERVICE_COMMANDS):
                    child.terminate()

    def leftovers(self) -> list:
        alive = [p for p, _, _ in self.seen.values() if p.is_running()]
        for proc in self.psutil.process_iter(["uids"]):  # students' accounts live only in the classroom
            if proc.info["uids"] and proc.info["uids"].real in self.uids and proc not in alive:
                alive.append(proc)
        return alive

    def servers(self) -> list[str]:
        return sorted({name for _, name, server in self.seen.values() if server})


def run(argv: list[str]) -> int:
    """`./course hub ARGS`: the classroom in the foreground until Ctrl-C (or, with --remove-class, its accounts
    removed)."""
    args = _parser().parse_args(argv)
    if args.remove_class:
        return remove_class(ROOT, yes=args.yes)
    from twoprim.classroom.limits import protected, remove_groups  # imports JupyterHub: only for a hub that runs

    plan = protected(make_plan(args), args)
    passwords = prepare(plan)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env["PATH"] = f"{plan.venv / 'bin'}:{env.get('PATH', SYSTEM_PATH)}"
    run_dir = Path(tempfile.mkdtemp(prefix="twoprim-hub-"))
    try:
        config = write_run_folder(plan, run_dir)
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=config.parent, env=env, start_new_session=True
        )  # Ctrl-C reaches us only; we stop it once, in order
        return _serve(plan, passwords, proc)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        remove_groups()  # the users' control groups (limits.py), once their processes are gone


def _serve(plan: Plan, passwords: dict, proc: subprocess.Popen) -> int:
    stopping: list[str] = []
    tracker = _Tracker(proc.pid, {pwd.getpwnam(n).pw_uid for n in plan.students})

    def stop(signum, frame):
        if not stopping:
            print(
                f"\nstopping the classroom ({signal.Signals(signum).name}): the servers, the proxy, the hub; "
                f"a second Ctrl-C kills them at once",
                flush=True,
            )
            tracker.end_services()
            proc.send_signal(signal.SIGTERM)
        else:
            proc.kill()
        stopping.append(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    deadline = time.monotonic() + READY_S
    never_ready = False
    while proc.poll() is None and not stopping and not _ready(plan):
        tracker.poll()
        if time.monotonic() > deadline:
            print(
                f"error: JupyterHub did not answer on {plan.url} within {READY_S} s; stopping it (its messages "
                f"above say why)",
                file=sys.stderr,
                flush=True,
            )
            never_ready = True
            stop(signal.SIGTERM, None)
            break
        time.sleep(0.3)
    if proc.poll() is None and not stopping:
        print(table(plan, passwords, os.getpid()), flush=True)
    stop_by, polled = None, 0.0
    while proc.poll() is None:
        if time.monotonic() - polled > TRACK_EVERY_S:  # a scan of every process: not at each half second
            tracker.poll()
            polled = time.monotonic()
        if stopping and stop_by is None:
            stop_by = time.monotonic() + STOP_S  # JupyterHub gives each server 10 s, then kills it
        if stop_by is not None and time.monotonic() > stop_by:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
    code = proc.wait()  # it has exited (the loop above ends then): this reaps it
    left = tracker.leftovers()
    for p in left:
        with contextlib.suppress(tracker.psutil.Error):
            p.terminate()
    gone, alive = tracker.psutil.wait_procs(left, timeout=5)
    for p in alive:
        p.kill()
    servers = tracker.servers()
    if not stopping:
        print(
            f"error: JupyterHub exited with code {code} before it was asked to stop; its messages above say why",
            file=sys.stderr,
            flush=True,
        )
        return code or 1
    extra = f"; {len(left)} process(es) that outlived it were ended" if left else ""
    print(
        f"stopped: the hub, the proxy and the {len(servers)} server(s) it started"
        f"{' (' + ', '.join(servers) + ')' if servers else ''}{extra}. Nothing of the classroom is running.",
        flush=True,
    )
    if never_ready:
        return 1
    return 0 if code in (0, -signal.SIGTERM, 128 + signal.SIGTERM) else code


# --- class commands as root ------------------------------------------------------------------------------------


def refuse_root_in_classroom(command: list[str], course: Path = ROOT) -> None:
    """As root in a course the classroom gave to its instructor, a class command would leave root's files in
    grader/ that the instructor's formgrader cannot write: say how to run it as the instructor instead."""
    if os.geteuid() != 0:
        return
    grader = course / "grader"
    try:
        owner = grader.stat().st_uid
    except OSError:
        return
    if owner == 0 or not (grader / CLASSROOM_FILE).exists():
        return
    try:
        name = pwd.getpwuid(owner).pw_name
    except KeyError:
        name = str(owner)
    raise CourseError(
        f"this course belongs to {name}, the instructor of its classroom (./course hub): run class "
        f"commands as them, so the formgrader and the commands share one gradebook: "
        f"runuser -u {name} -- {course / 'course'} {' '.join(command)}"
    )
