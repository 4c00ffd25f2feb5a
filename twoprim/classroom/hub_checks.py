"""`./course hub`'s checks: everything is checked before anything is created or changed, and each problem is one
line (a CourseError) that says what to do. The names (valid, not someone else's account), root, the port (and with
--public the host name, its certificate and key), the proxy, the exchange, and that other accounts can reach the
course and run its environment (as `nobody`, the way a student's server will).

Why this module is long: every check runs before anything is created or changed, and each problem has its own one-line
error that says what to do: the names and the roster, root, the port, the proxy, the exchange, several courses'
configuration, the public host's certificate and key, and the environment other accounts must run.
"""

from __future__ import annotations

import csv
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from twoprim.classroom.hub_config import CourseSpec, Plan
from twoprim.config import COURSE_ID, ROOT
from twoprim.core.errors import CourseError

MARKER = {"student": "Two Primitives student", "instructor": "Two Primitives instructor"}  # their GECOS field
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")  # Debian's NAME_REGEX, without the trailing '$' of machine accounts
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def roster_ids(path: Path) -> list[str]:
    """Student ids from a roster CSV's `id` column (the format of `nbgrader db student import`)."""
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            fields = [(name or "").strip().lower() for name in reader.fieldnames or []]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CourseError(
            f"cannot read the roster {path} ({getattr(e, 'strerror', None) or e}): pass an existing "
            f"CSV file with an `id` column, e.g. --roster students.csv"
        ) from None
    if "id" not in fields:
        raise CourseError(
            f"the roster {path} has no `id` column (its columns: {', '.join(fields) or 'none'}): "
            f"its first line must name the columns, e.g. id,first_name,last_name,email"
        )
    key = next(name for name in rows[0] if (name or "").strip().lower() == "id") if rows else "id"
    return [row[key].strip() for row in rows if (row.get(key) or "").strip()]


def student_names(args) -> list[str]:
    """The students named by --students and --roster, each checked to be a valid account name."""
    names = [n.strip() for n in args.students.split(",") if n.strip()]
    if args.roster is not None:
        names += roster_ids(args.roster)
    if not names and getattr(args, "lti", None) is not None:
        return []  # students arrive from the LMS: each account is made at its first launch
    if not names:
        raise CourseError(
            "no students: name them with --students alice,bob,carol or --roster students.csv "
            '(make hub HUB_ARGS="--students alice,bob")'
        )
    for name in [*names, args.instructor]:
        if not NAME.match(name):
            raise CourseError(
                f"{name!r} is not a valid Unix user name (lower-case letters, digits, '-' and '_', "
                f"starting with a letter, at most 32 characters): correct it in --students, "
                f"--instructor or the roster"
            )
    seen = set()
    for name in names:
        if name == args.instructor:
            raise CourseError(
                f"{name!r} is both a student and the instructor: give the instructor another "
                f"account with --instructor NAME"
            )
        if name in seen:
            raise CourseError(f"{name!r} is listed twice: each student needs one account; remove the duplicate")
        seen.add(name)
    return names


def _tool(name: str) -> str | None:
    """An account-management tool, by its full path (they live in sbin, often not on a user's PATH)."""
    return shutil.which(name, path=f"/usr/sbin:/sbin:{SYSTEM_PATH}")


def _account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def course_made(account: pwd.struct_passwd) -> bool:
    """True when the account carries the course's marker in its GECOS field (the hub made it)."""
    return account.pw_gecos.split(",")[0] in MARKER.values()


def _uid_range() -> tuple[int, int]:
    """UID_MIN and UID_MAX from /etc/login.defs: the range of people's accounts (not daemons, not nobody)."""
    found = {"UID_MIN": 1000, "UID_MAX": 60000}
    try:
        for line in Path("/etc/login.defs").read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in found and parts[1].isdigit():
                found[parts[0]] = int(parts[1])
    except OSError:
        pass
    return found["UID_MIN"], found["UID_MAX"]


def check_accounts(students: list[str], instructor: str) -> None:
    """Refuse an existing account the course did not make, except a person's own account as instructor."""
    low, high = _uid_range()
    for name in students:
        account = _account(name)
        if account and not course_made(account):
            raise CourseError(
                f"student {name!r} is an existing account that the course did not create (uid {account.pw_uid}, "
                f"{account.pw_gecos or 'no description'}): the course never changes such an account; name the "
                f"student differently (e.g. {name}-student) in --students or the roster"
            )
    account = _account(instructor)
    if account and not course_made(account) and not low <= account.pw_uid <= high:
        raise CourseError(
            f"instructor {instructor!r} is a system account (uid {account.pw_uid}): choose a person's account or a "
            f"new name, e.g. --instructor teacher"
        )


def check_new_passwords(names: list[str], students: list[str], instructor: str) -> None:
    """--new-password names a course account of this class (or `all`); never a person's own account."""
    for name in names:
        if name == "all":
            continue
        if name not in (*students, instructor):
            raise CourseError(
                f"--new-password {name}: {name!r} is not in this class ({', '.join(students)}; "
                f"instructor {instructor}): name one of them, or `all`"
            )
        account = _account(name)
        if account is not None and not course_made(account):
            raise CourseError(
                f"--new-password {name}: {name!r} is an account the course did not create, whose "
                f"password it never changes; its owner changes it with `passwd`"
            )


def port_in_use(port: int, ip: str = "127.0.0.1") -> bool:
    """True when nothing can bind `port` on `ip` now."""
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError:
            return True
    return False


def check_ip(ip: str | None, public: bool) -> str:
    """The address the proxy listens on: loopback unless --public (then every interface by default)."""
    import ipaddress

    if ip is None:
        return "" if public else "127.0.0.1"
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        raise CourseError(
            f"--ip {ip!r} is not an IP address: give one of this machine's, e.g. --ip 10.0.0.5, or leave it out"
        ) from None
    if not address.is_loopback and not public:
        raise CourseError(
            f"--ip {ip} would serve passwords and students' work to the network in clear: add --public "
            f"HOST with --ssl-cert and --ssl-key (TLS), or leave out --ip to stay on loopback"
        )
    return ip


HOST_RE = re.compile(  # a DNS name with at least two labels: each user's server is on a subdomain of it
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
)


def _covers(pattern: str, name: str) -> bool:
    """Whether a certificate's DNS name `pattern` (a wildcard only as the whole leftmost label) matches `name`."""
    pattern, name = pattern.lower().rstrip("."), name.lower()
    if pattern.startswith("*."):
        head, _, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == name


def check_public(host: str, cert: Path | None, key: Path | None, port: int) -> None:
    """--public HOST: a DNS name, with a certificate (and its key) for HOST and *.HOST, valid now."""
    import datetime
    import ssl

    if not HOST_RE.match(host or "") or host.rsplit(".", 1)[-1].isdigit():  # a name, never an address
        raise CourseError(
            f"--public {host!r} is not a host name: give the DNS name students will open, e.g. "
            f"--public hub.example.edu (each user's server is at <name>.hub.example.edu: its DNS "
            f"needs a wildcard record, *.hub.example.edu, pointing at this machine too)"
        )
    if cert is None or key is None:
        raise CourseError(
            f"--public {host} serves passwords and students' work over the network, so only over "
            f"TLS: pass --ssl-cert and --ssl-key, a certificate for {host} and *.{host} and its key"
        )
    for what, path in (("--ssl-cert", cert), ("--ssl-key", key)):
        if not path.is_file():
            raise CourseError(f"{what} {path} is not a file")
    from cryptography import x509

    try:
        certificate = x509.load_pem_x509_certificate(cert.read_bytes())
    except ValueError as err:
        raise CourseError(f"--ssl-cert {cert} is not a PEM certificate ({err})") from err
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as err:
        raise CourseError(
            f"--ssl-key {key} is not the private key of --ssl-cert {cert} ({err.__class__.__name__}: "
            f"{err}): pass the key the certificate was issued for"
        ) from err
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName
        )
    except x509.ExtensionNotFound:
        names = []
    example = f"alice.{host}"
    missing = [n for n in (host, example) if not any(_covers(p, n) for p in names)]
    if missing:
        raise CourseError(
            f"--ssl-cert {cert} is for {', '.join(names) or 'no DNS name'}, not for "
            f"{' nor '.join(missing)}: the hub is at https://{host}:{port}/ and each user's server at "
            f"https://<name>.{host}:{port}/, so the certificate must name {host} and *.{host}"
        )
    now = datetime.datetime.now(datetime.UTC)
    if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
        raise CourseError(
            f"--ssl-cert {cert} is valid from {certificate.not_valid_before_utc:%Y-%m-%d} to "
            f"{certificate.not_valid_after_utc:%Y-%m-%d}, not now: renew it"
        )


def free_port() -> int:
    """A free loopback port, held for the server it is picked for: ephemeral-port-reserve leaves it in TIME_WAIT, so
    for the next 60 s the operating system hands it to no other socket (not to a `bind` to port 0, such as
    jupyter_client's kernel ports, nor to an outgoing connection), while a server that sets SO_REUSEADDR (tornado,
    Node, PostgreSQL, Dask all do) binds it. A port merely seen free is often taken by the time its server starts on
    a busy machine. (Imported here: `course` imports this module in a student's classroom copy with only the
    system's Python.)"""
    from ephemeral_port_reserve import reserve

    return reserve("127.0.0.1")


def find_proxy(course: Path) -> Path:
    """JupyterHub's proxy (configurable-http-proxy) installed in the course's node_modules, and Node.js to run it."""
    proxy = course / "node_modules" / ".bin" / "configurable-http-proxy"
    if not os.access(proxy, os.X_OK):
        raise CourseError(
            f"JupyterHub's proxy, configurable-http-proxy, is not installed in {course / 'node_modules'}:"
            f" run `make -C {course} hub` (it installs the version pinned in package-lock.json with "
            f"`npm ci`; Node.js and npm come from `apt-get install nodejs npm`)"
        )
    if shutil.which("node", path=os.environ.get("PATH", SYSTEM_PATH) + ":" + SYSTEM_PATH) is None:
        raise CourseError("configurable-http-proxy needs Node.js, which is not installed: apt-get install nodejs npm")
    return proxy


def _blocked_ancestor(path: Path) -> Path | None:
    """The first folder above `path` (or `path` itself) that other accounts cannot enter, if any."""
    for folder in [*reversed(path.parents), path]:
        if folder.exists() and not folder.stat().st_mode & 0o001:
            return folder
    return None


def as_user(uid: int, gid: int, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run `argv` as uid:gid without supplementary groups, from /. (A plain setuid, as JupyterHub's spawner does:
    `setpriv --reuid` alone would keep root's capabilities, which read through any permission.)"""
    return subprocess.run(
        argv,
        user=uid,
        group=gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": SYSTEM_PATH, "HOME": "/", "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        **kwargs,
    )


PROBE = """
import sys
import twoprim, nbgrader, jupyterhub, soupsieve
try:  # what nbconvert's HTML export (nbgrader's feedback) runs first
    soupsieve.compile("img:not([alt])")
except Exception:
    sys.exit("Python %s mis-handles regular expressions with possessive quantifiers (CPython gh-106052, fixed in "
             "3.11.5) and this soupsieve uses them, so nbconvert's HTML export, and with it nbgrader's feedback, "
             "fails: keep the soupsieve pyproject.toml pins, or use Python 3.11.5 or later" % sys.version.split()[0])
"""


def _rebuild_hint(venv: Path, course: Path, args_hint: str) -> str:
    """How to rebuild .venv from a Python every account can run: the system's when there is one."""
    python = shutil.which("python3.11", path=SYSTEM_PATH)
    if python:
        return (
            f"Rebuild .venv from a Python every account can run: rm -rf {venv} && make -C {course} hub "
            f"PYTHON={python}{args_hint}"
        )
    return (
        f"Rebuild .venv from a Python 3.11 that every account can run, installed outside any private home (e.g. "
        f"under /opt): rm -rf {venv} && make -C {course} hub PYTHON=/opt/python3.11/bin/python3.11{args_hint}"
    )


def check_environment(course: Path, venv: Path, args_hint: str) -> None:
    """Every account must reach the course and run its environment, or no student's server could start."""
    blocked = _blocked_ancestor(course)
    if blocked is not None:
        raise CourseError(
            f"other accounts cannot enter {blocked} (mode {blocked.stat().st_mode & 0o777:o}), which "
            f"holds the course: move the course to a folder every account can reach, e.g. "
            f"/srv/two-primitives, or allow passing through: chmod o+x {blocked}"
        )
    python = venv / "bin" / "python"
    nobody = _account("nobody")
    uid, gid = (nobody.pw_uid, nobody.pw_gid) if nobody else (65534, 65534)
    try:
        probe = as_user(uid, gid, [str(python), "-c", PROBE], timeout=120)
        why = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1] if probe.returncode else ""
    except OSError as e:
        why = f"{type(e).__name__}: {e.strerror}"
    if why:
        target = os.path.realpath(python)
        raise CourseError(
            f"other accounts cannot run the course environment's Python ({python} -> {target}: {why}),"
            f" so students' servers could not start. {_rebuild_hint(venv, course, args_hint)}"
        )
    if not (venv / "bin" / "jupyterhub-singleuser").is_file():
        raise CourseError(f"{venv}/bin/jupyterhub-singleuser is missing: run `make -C {course} setup`")


def check_exchange(exchange: Path) -> None:
    """The shared-folder exchange is an absolute folder path that every account can reach."""
    if not exchange.is_absolute():
        raise CourseError(f"the exchange {exchange} must be an absolute path, e.g. --exchange /srv/nbgrader/exchange")
    if exchange.exists() and not exchange.is_dir():
        raise CourseError(f"the exchange {exchange} exists and is not a folder: choose another with --exchange")
    blocked = _blocked_ancestor(exchange.parent)
    if blocked is not None:
        raise CourseError(
            f"other accounts cannot enter {blocked}, which holds the exchange {exchange}: choose an "
            f"exchange every account can reach, e.g. --exchange /srv/nbgrader/exchange"
        )


COURSE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")


def load_courses(path: Path) -> list[CourseSpec]:
    """--courses FILE (JSON, or TOML when it ends in .toml): `courses`, a list of {id, folder, instructor,
    students}, each folder a copy of the course; checked: ids, folders, names, one instructor per course and no one
    both a course's instructor and a student."""
    import json
    import tomllib

    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        entries = data["courses"]
        assert isinstance(entries, list) and entries
    except OSError as err:
        raise CourseError(f"cannot read --courses {path} ({err.strerror})") from None
    except (ValueError, KeyError, TypeError, AssertionError, tomllib.TOMLDecodeError) as err:
        raise CourseError(
            f"--courses {path} must hold a list `courses` of {{id, folder, instructor, students}} "
            f"(docs/guides/lti.md has an example): {type(err).__name__} {err}"
        ) from None
    specs, seen = [], set()
    for entry in entries:
        cid, folder = str(entry.get("id", "")), Path(str(entry.get("folder", "")))
        students = entry.get("students") or []
        students = [n.strip() for n in (students.split(",") if isinstance(students, str) else students) if n.strip()]
        if not COURSE_ID_RE.match(cid) or cid in seen:
            raise CourseError(
                f"course id {cid!r} in {path} is {'listed twice' if cid in seen else 'not valid'}: "
                f"lower-case letters, digits and '-', at most 31, each course its own"
            )
        if not folder.is_absolute() or not (folder / "grader" / "nbgrader_config.py").is_file():
            raise CourseError(
                f"the folder of course {cid} in {path}, {folder}, is not a copy of the course (an "
                f"absolute path with grader/nbgrader_config.py): git clone the course there"
            )
        for name in [*students, str(entry.get("instructor", ""))]:
            if not NAME.match(name):
                raise CourseError(f"{name!r} (course {cid} in {path}) is not a valid Unix user name")
        seen.add(cid)
        specs.append(CourseSpec(cid, folder.resolve(), str(entry["instructor"]), tuple(students)))
    instructors = [c.instructor for c in specs]
    for c in specs:
        if instructors.count(c.instructor) > 1:
            raise CourseError(
                f"{c.instructor} is the instructor of several courses in {path}: each course needs "
                f"an instructor account of its own (it owns the course's folder and gradebook)"
            )
        both = set(instructors) & set(c.students)
        if both:
            raise CourseError(
                f"{', '.join(sorted(both))} is a student of {c.id} and an instructor in {path}: give "
                f"them a student account of another name"
            )
    return specs


def _several(args, plan_students: list[str]) -> tuple[list[CourseSpec], list[str], str]:
    """--courses: the courses (with free service ports), every student, the first instructor."""
    import dataclasses

    if getattr(args, "exchange_kind", "service") != "service":
        raise CourseError("--courses needs the exchange service (each course's own): leave out --exchange-kind")
    specs = load_courses(args.courses)
    students = sorted({*plan_students, *(n for c in specs for n in c.students)})
    for c in specs:
        check_accounts(list(c.students), c.instructor)
        check_environment_reach(c.folder)
    ports: set[int] = set()
    out = []
    for c in specs:
        port = free_port()
        while port in ports or port == args.port:
            port = free_port()
        ports.add(port)
        out.append(dataclasses.replace(c, service_port=port))
    return out, students, specs[0].instructor


def check_environment_reach(folder: Path) -> None:
    """Every account must pass through the folders above a course (its students' servers read its lessons)."""
    blocked = _blocked_ancestor(folder)
    if blocked is not None:
        raise CourseError(
            f"other accounts cannot enter {blocked}, which holds the course {folder}: chmod o+x "
            f"{blocked}, or move the course"
        )


def _internal_ports(port: int) -> tuple[int, int, int]:
    """Three free loopback ports, none of them `port` nor each other: the hub's, the proxy's API's, the service's."""
    hub_port = free_port()
    proxy_api_port = free_port()
    while proxy_api_port in (hub_port, port):
        proxy_api_port = free_port()
    service_port = free_port()
    while service_port in (hub_port, proxy_api_port, port):
        service_port = free_port()
    return hub_port, proxy_api_port, service_port


def make_plan(args, *, course: Path = ROOT) -> Plan:
    """Every check, in the order a user fixes them; raises CourseError with what to do."""
    several = getattr(args, "courses", None) is not None
    students = [] if several and not args.students and args.roster is None else student_names(args)
    if os.geteuid() != 0:
        raise CourseError(
            f"./course hub creates a Unix account per student and starts each one's server as them, "
            f"which needs root: sudo {course / 'course'} hub "
            f"{' '.join(sys.argv[2:]) or '--students alice,bob'}"
        )
    for tool in ("useradd", "usermod", "chpasswd"):
        if _tool(tool) is None:
            raise CourseError(f"`{tool}` was not found: apt-get install passwd")
    courses, instructor = [], args.instructor
    if several:
        courses, students, instructor = _several(args, students)
    lti = getattr(args, "lti", None)
    if lti is not None:
        from twoprim.classroom import lti_config

        lti_config.load(lti, {c.id for c in courses} if courses else {COURSE_ID})
    check_accounts(students, instructor)
    check_new_passwords(args.new_password, students, instructor)
    if not 0 < args.port < 65536:
        raise CourseError(f"--port {args.port} is not a port number: choose one in 1-65535, e.g. --port 8000")
    public = args.public is not None
    if public:
        args.public = args.public.strip().lower().rstrip(".")  # DNS names are case-insensitive
    if not public and (args.ssl_cert or args.ssl_key):
        raise CourseError(
            "--ssl-cert and --ssl-key serve the class on the network: add --public HOST, the name "
            "students open (e.g. --public hub.example.edu)"
        )
    ip = check_ip(args.ip, public)
    if public:
        check_public(args.public, args.ssl_cert, args.ssl_key, args.port)
    if port_in_use(args.port, ip or "0.0.0.0"):
        raise CourseError(
            f"port {args.port} on {ip or 'every interface'} is already in use (a hub already running? "
            f"`ss -ltnp 'sport = :{args.port}'` shows what listens there): stop it, or start on another "
            f"port with --port {args.port + 1}"
        )
    proxy = find_proxy(course)
    if getattr(args, "exchange_kind", "service") == "filesystem":  # the service needs no shared folder
        check_exchange(args.exchange)
    hint = f' HUB_ARGS="{" ".join(sys.argv[2:])}"' if len(sys.argv) > 2 and sys.argv[1] == "hub" else ""
    check_environment(course, course / ".venv", hint)
    hub_port, proxy_api_port, service_port = _internal_ports(args.port)
    max_file_mb = getattr(args, "max_file_mb", 100.0)
    if not max_file_mb > 0:
        raise CourseError(
            f"--max-file-mb {max_file_mb:g} is not a size: give the largest file a student may submit "
            f"in MB, e.g. --max-file-mb 100"
        )
    return Plan(
        course=course,
        venv=course / ".venv",
        proxy=proxy,
        exchange=args.exchange.resolve(),
        instructor=instructor,
        students=tuple(students),
        courses=tuple(courses),
        lti=lti.resolve() if lti is not None else None,
        port=args.port,
        hub_port=hub_port,
        proxy_api_port=proxy_api_port,
        host=args.public or "localhost",
        ip=ip,
        ssl_cert=args.ssl_cert.resolve() if public else None,
        ssl_key=args.ssl_key.resolve() if public else None,
        new_passwords=tuple(args.new_password),
        exchange_kind=getattr(args, "exchange_kind", "service"),
        service_port=service_port,
        max_file_mb=max_file_mb,
    )
