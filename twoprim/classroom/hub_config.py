"""The files `./course hub` writes for one run of the classroom, in a run folder that is removed when it stops.

    <run>/            0711 root: every account may pass, none may list
      hub/            0700 root: jupyterhub_config.py, its database and cookie secret
      student/        0755: the students' Jupyter config (on their servers' JUPYTER_CONFIG_PATH)
      instructor/     0755: the instructor's Jupyter config

Students get nbgrader's course id, the exchange, `~/exercises` as the folder fetched assignments land in, and
neither the formgrader nor the create-assignment and course-list tools (the server extensions and the lab plugins
off, as nbgrader's JupyterHub guide tabulates). The instructor's server opens in the course folder, where
`nbgrader_config.py` loads the course configuration (`grader/nbgrader_config.py`), and sends
`Content-Security-Policy: frame-ancestors 'self'`: since JupyterHub 4.1 every single-user server sends
`frame-ancestors 'none'` (jupyterhub/singleuser/extension.py, a `setdefault`, so a configured header wins), which
stops the browser from showing nbgrader's formgrader, a page JupyterLab embeds in an iframe (nbgrader issue #1870).
'self' is safe only because each user's server has a host of its own (`JupyterHub.subdomain_host`: users at
http://<name>.localhost:PORT, or https://<name>.HOST:PORT with --public): no other user's page is 'self' to it.
Students keep 'none'.

The exchange service (`exchange/service.py`, the default) is one of `JupyterHub.services`: started by the hub as the
instructor, on a loopback port; the 'user' role and every server's token (`Spawner.server_token_scopes`) get
`access:services!service=twoprim-exchange`, and the students' nbgrader configuration selects the course's exchange
classes (`exchange/client.py`) with the service's URL.

Why this module is long: it writes every file of one run (JupyterHub's configuration, its services, the students' and
instructors' nbgrader configurations, each folder's protection), and each setting says why it is there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from twoprim.config import COURSE_ID

INSTRUCTOR_CSP = "frame-ancestors 'self'"
STUDENT_OFF_EXTENSIONS = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")
STUDENT_OFF_PLUGINS = (
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
)
START_TIMEOUT_S = 180  # a server's JupyterLab and nbgrader import slowly when 2 cores start three at once
STOP_TIMEOUT_S = 20  # from SIGTERM to SIGKILL of a server: its kernels shut down in a few seconds even under load


@dataclass(frozen=True)
class CourseSpec:
    """One course of a hub serving several (`--courses FILE`): its folder (a copy of the course, with its own
    grader/: gradebook, submissions, exchange store), its instructor (who owns the folder and runs its exchange
    service and formgrader) and its students."""

    id: str  # nbgrader's course id, the hub groups nbgrader-ID and formgrade-ID
    folder: Path
    instructor: str
    students: tuple[str, ...]
    service_port: int = 0

    @property
    def service_name(self) -> str:
        from twoprim.exchange.service import NAME

        return f"{NAME}-{self.id}"

    @property
    def scope(self) -> str:
        return f"access:services!service={self.service_name}"

    @property
    def store(self) -> Path:
        return self.folder / "grader" / "exchange"

    @property
    def service_url(self) -> str:
        return f"http://127.0.0.1:{self.service_port}/services/{self.service_name}/"


@dataclass(frozen=True)
class Plan:
    """What one run serves."""

    course: Path  # the course folder (repository root)
    venv: Path  # its environment
    proxy: Path  # configurable-http-proxy
    exchange: Path
    instructor: str
    students: tuple[str, ...]
    port: int  # the port students open (the proxy's)
    hub_port: int  # JupyterHub's own API, loopback
    proxy_api_port: int  # the proxy's REST API, loopback
    host: str = "localhost"  # the name students open: localhost, or with --public the machine's DNS name
    ip: str = "127.0.0.1"  # where the proxy listens ("" is every interface, only with TLS)
    ssl_cert: Path | None = None  # with --public: a certificate for host and *.host, and its key
    ssl_key: Path | None = None
    new_passwords: tuple[str, ...] = ()  # accounts given a new password (`all`: every one); others keep theirs
    exchange_kind: str = "service"  # the exchange service (twoprim/exchange/service.py), or nbgrader's "filesystem"
    service_port: int = 0  # the exchange service's port, loopback
    max_file_mb: float = 100.0  # the service refuses a submitted file larger than this
    max_submissions: int = 50  # ... and a student's submission of an assignment past this many
    max_stored_mb: float = 500.0  # ... or past this many MB of that student's submissions of it together
    service_memory_mb: int = 512  # the service's address space (RLIMIT_AS), MiB: it streams every upload
    memory_mb: int = 2048  # each user's server and kernels together (limits.py); 0: no control group
    cpus: float = 1.0  # ... and their CPU time, in cores
    cull_idle_s: int = 3600  # a server idle this long is stopped (jupyterhub-idle-culler); 0: never
    max_servers: int = 0  # running servers at most; a login past it gets a page saying so; 0: no limit
    courses: tuple[CourseSpec, ...] = ()  # --courses: several courses on one hub (else the one course, `course`)
    lti: Path | None = None  # --lti CONFIG: logins from the LMS (lti.py)

    @property
    def several(self) -> bool:
        return bool(self.courses)

    def lti_courses(self) -> dict[str, dict]:
        """course id -> what the LTI authenticator needs of it."""
        python = str(self.venv / "bin" / "python")
        if self.several:
            return {
                c.id: {"folder": str(c.folder), "instructor": c.instructor, "nested": True, "python": python}
                for c in self.courses
            }
        return {
            COURSE_ID: {"folder": str(self.course), "instructor": self.instructor, "nested": False, "python": python}
        }

    @property
    def service(self) -> bool:
        return self.exchange_kind == "service"

    @property
    def store(self) -> Path:
        """The service's store: in grader/ (the instructor's, 0700), a folder of its own (0700)."""
        return self.course / "grader" / "exchange"

    @property
    def service_url(self) -> str:
        from twoprim.exchange.service import NAME

        return f"http://127.0.0.1:{self.service_port}/services/{NAME}/"

    @property
    def public(self) -> bool:
        return self.ssl_cert is not None

    @property
    def url(self) -> str:
        if self.public:
            return f"https://{self.host}{'' if self.port == 443 else f':{self.port}'}/"
        return f"http://{self.host}:{self.port}/"


def write_run_folder(plan: Plan, run: Path) -> Path:
    """Write the run folder's files; returns the JupyterHub configuration file."""
    # the students' kernels are forked by warm_kernels (jupyter_client's provisioning API): imported here, when a
    # hub's files are written, never by the modules a student's `course` command imports
    from twoprim.classroom import warm_kernels

    run.chmod(0o711)
    hub = run / "hub"
    hub.mkdir(mode=0o700)
    for role, text in (("student", _student_nbgrader_config(plan)), ("instructor", None)):
        folder = run / role
        folder.mkdir()
        folder.chmod(0o755)
        if text:
            (folder / "nbgrader_config.py").write_text(text)
    terminal = {"shell_command": terminal_command(plan)}
    (run / "student" / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "ServerApp": {
                    "jpserver_extensions": {
                        **{name: False for name in STUDENT_OFF_EXTENSIONS},
                        warm_kernels.__name__: True,
                    },  # a zygote starts with the server
                    "terminado_settings": terminal,
                }
            },
            indent=1,
        )
    )
    (run / "student" / "labconfig").mkdir()
    (run / "student" / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {name: True for name in STUDENT_OFF_PLUGINS}}, indent=1)
    )
    (run / "instructor" / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "ServerApp": {
                    "tornado_settings": {"headers": {"Content-Security-Policy": INSTRUCTOR_CSP}},
                    "terminado_settings": terminal,
                }
            },
            indent=1,
        )
    )
    # every user's kernels: ipykernel with the memory-limit notice (notices.py), forked from their server's zygote
    # (warm_kernels.py), found first on JUPYTER_PATH
    spec = run / "share" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(warm_kernels.kernel_spec(str(plan.venv / "bin" / "python")), indent=1))
    for path in [*(run / "student").rglob("*"), *(run / "share").rglob("*"), run / "share"]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    for course in plan.courses:  # several courses: each instructor's nbgrader reads their own course's configuration
        folder = run / f"instructor-{course.id}"
        folder.mkdir()
        folder.chmod(0o755)
        (folder / "jupyter_server_config.json").write_text(
            (run / "instructor" / "jupyter_server_config.json").read_text()
        )
        (folder / "nbgrader_config.py").write_text(
            f"# Written by ./course hub: the formgrader and nbgrader of course {course.id} use its folder's "
            "configuration\n"
            f"load_subconfig({str(course.folder / 'grader' / 'nbgrader_config.py')!r})  # noqa: F821\n"
        )
    for path in [
        *(run / "instructor").rglob("*"),
        *(p for c in plan.courses for p in (run / f"instructor-{c.id}").rglob("*")),
    ]:
        path.chmod(0o644)
    (hub / "templates").mkdir()
    (hub / "templates" / "error.html").write_text(FULL_PAGE)
    config = hub / "jupyterhub_config.py"
    config.write_text(_hub_config(plan, run))
    config.chmod(0o600)
    return config


def terminal_command(plan: Plan) -> list[str]:
    """A JupyterLab terminal's shell: a login shell (/etc/profile, which resets PATH on Debian) that then puts the
    course environment's bin/ first again, so `course progress` and `nbgrader` work in every user's terminal."""
    import shlex

    return ["/bin/bash", "-l", "-c", f'export PATH={shlex.quote(str(plan.venv / "bin"))}:"$PATH"; exec /bin/bash -i']


def _student_nbgrader_config(plan: Plan) -> str:
    from twoprim.grading.preprocessors import DEFAULT_CELL_TIMEOUT

    text = (
        "# Written by ./course hub for this run: a student's nbgrader (the Assignments tab, nbgrader in a terminal).\n"
        "import os\n\n"
        "c = get_config()  # noqa: F821\n"
        + (
            "# Several courses on this hub: the Assignments tab lists each of the student's (their nbgrader-COURSE\n"
            "# groups, $TWOPRIM_EXCHANGE_URLS), each course's assignments in ~/exercises/<course>/<assignment>/\n"
            "c.CourseDirectory.course_id = ''\nc.ServiceExchange.path_includes_course = True\n"
            if plan.several
            else f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        )
        + f"c.Exchange.root = {str(plan.exchange)!r}\n"
        "# fetched assignments land in ~/exercises/<assignment>/, beside ~/lessons/\n"
        "c.Exchange.assignment_dir = os.path.join(os.path.expanduser('~'), 'exercises')\n"
        "# Validate (run in the student's server) with the grader's per-cell limit, and the same limit, not "
        "nbclient's\n"
        "# 4 s, for a cell's output to arrive after its reply: on a loaded machine a kernel importing torch answers\n"
        "# late, and 'Validate did not run: Timeout waiting for IOPub output' would be the grader's fault\n"
        f"c.Execute.timeout = {DEFAULT_CELL_TIMEOUT}\n"
        f"c.Execute.iopub_timeout = {DEFAULT_CELL_TIMEOUT}\n"
    )
    if plan.service:
        from twoprim.exchange.client import config_text

        text += (
            "# The exchange is the classroom's service: fetch, submit, list and feedback go over HTTP with this\n"
            "# server's JUPYTERHUB_API_TOKEN, and the hub tells the service who is asking.\n"
            + config_text("" if plan.several else plan.service_url)
        )
    else:
        from twoprim.exchange.filesystem import config_text as sealed

        text += (
            "# nbgrader's shared folder: submit leaves each submission's folder changeable by its owner only\n"
            + sealed()
        )
    return text


def _services(plan: Plan) -> str:
    """Several courses: one exchange service per course, run as its instructor on its own store; the groups
    nbgrader-COURSE (its students and instructor) may reach it, formgrade-COURSE (its instructor) marks its staff."""
    from twoprim.grading.gradebook import database_url

    services, roles, groups = [], [{"name": "user", "scopes": ["self"]}], {}
    for course in plan.courses:
        command = [
            str(plan.venv / "bin" / "python"),
            "-m",
            "twoprim.exchange.service",
            "--store",
            str(course.store),
            "--course",
            course.id,
            "--instructor",
            course.instructor,
            "--max-file-mb",
            f"{plan.max_file_mb:g}",
            "--max-submissions",
            str(plan.max_submissions),
            "--max-stored-mb",
            f"{plan.max_stored_mb:g}",
            "--memory-mb",
            str(plan.service_memory_mb),
            "--gradebook",
            database_url(course.folder),
        ]
        services.append(
            {
                "name": course.service_name,
                "url": f"http://127.0.0.1:{course.service_port}",
                "command": command,
                "user": course.instructor,
                "cwd": str(course.folder),
                "environment": {"PATH": "PATH"},
                "display": False,
            }
        )
        for group in (f"nbgrader-{course.id}", f"formgrade-{course.id}"):
            roles.append({"name": group, "groups": [group], "scopes": [course.scope]})
        groups[f"nbgrader-{course.id}"] = {"users": sorted({course.instructor, *course.students})}
        groups[f"formgrade-{course.id}"] = {"users": [course.instructor]}
    text = (
        f"# Several courses on one hub: an exchange service per course, run as its instructor on its own store\n"
        f"# (grader/exchange/ of its folder); only the course's group reaches it (its role's scope), and each\n"
        f"# server's token carries the scopes its user holds.\n"
        f"c.JupyterHub.services = {services!r}\n"
        f"for service in c.JupyterHub.services:\n"
        f"    service['environment'] = {{'PATH': PATH}}\n"
        f"c.JupyterHub.load_roles = {roles!r}\n"
        f"c.Spawner.server_token_scopes = "
        f"{['users:activity!user', 'access:servers!server', *(c.scope for c in plan.courses)]!r}\n"
    )
    if plan.lti is None:  # with LTI the groups come from the launches (manage_groups)
        text += f"c.JupyterHub.load_groups = {groups!r}\n"
    return text


def _service(plan: Plan) -> str:
    """The exchange service in jupyterhub_config.py: started (and restarted) by the hub as the instructor, on
    loopback; every user may reach it, and each server's token carries that scope."""
    if plan.several:
        return _services(plan)
    if not plan.service:
        return "# The exchange: nbgrader's shared folder (--exchange-kind filesystem); no exchange service.\n"
    from twoprim.exchange.service import NAME, SCOPE
    from twoprim.grading.gradebook import database_url

    command = [
        str(plan.venv / "bin" / "python"),
        "-m",
        "twoprim.exchange.service",
        "--store",
        str(plan.store),
        "--course",
        COURSE_ID,
        "--instructor",
        plan.instructor,
        "--max-file-mb",
        f"{plan.max_file_mb:g}",
        "--max-submissions",
        str(plan.max_submissions),
        "--max-stored-mb",
        f"{plan.max_stored_mb:g}",
        "--memory-mb",
        str(plan.service_memory_mb),
        "--gradebook",
        database_url(plan.course),
    ]  # due dates students see, read at each request
    return f"""# The exchange as a service (twoprim/exchange/service.py): run as the instructor (least privilege: the
# account that already holds the class's work, and the only one that can open its store, grader/exchange/), on
# loopback. Each student may keep {plan.max_submissions} submissions and {plan.max_stored_mb:g} MB of an assignment;
# the service streams uploads to disk and lowers its own address space to {plan.service_memory_mb} MiB (RLIMIT_AS) as
# it starts: it peaks near 290 MiB (110 resident), and a fault that held an upload in memory would fail that request,
# not the machine.
c.JupyterHub.services = [{{
    "name": {NAME!r},
    "url": "http://127.0.0.1:{plan.service_port}",
    "command": {command!r},
    "user": INSTRUCTOR,
    "cwd": COURSE,
    "environment": {{"PATH": PATH}},
    "display": False,
}}]
# Every user may reach it (the 'user' role plus this service), and each server's token carries that scope.
c.JupyterHub.load_roles = [{{"name": "user", "scopes": ["self", {SCOPE!r}]}}]
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", {SCOPE!r}]
"""


FULL_PAGE = """{% extends "templates/error.html" %}
{% block error_detail %}
  {% if status_code == 429 %}<p id="twoprim-full">{{ full_message }}</p>{% else %}{{ super() }}{% endif %}
{% endblock error_detail %}
"""


def full_message(max_servers: int) -> str:
    """What a student reads when the classroom already runs its most servers."""
    return (
        f"The classroom is full: {max_servers} servers are running, as many as this machine is set to serve. "
        f"Your work is safe. Try again in a few minutes, when a classmate's idle server has been stopped, "
        f"or tell your instructor."
    )


def _protection(plan: Plan, run: Path) -> str:
    """Each user's limits (limits.py), the idle culler (a hub service) and the most servers at once."""
    text = f"""# Limits that protect the class (twoprim/classroom/limits.py): each user's server and kernels share
# {plan.memory_mb} MB and {plan.cpus:g} core(s) (a control group), and no process may map more than the grading
# sandbox's address space (a far too large allocation is a MemoryError in the student's notebook).
c.ClassroomSpawner.memory_mb = {plan.memory_mb}
c.ClassroomSpawner.cpus = {plan.cpus!r}
c.Spawner.poll_interval = 10  # how soon the hub's log names a student whose kernel went over their memory
c.JupyterHub.template_paths = [{str(run / "hub" / "templates")!r}]
"""
    if plan.max_servers:
        text += (
            f"# At most {plan.max_servers} servers at once: a login past it gets JupyterHub's 429 page with this "
            f"message, not a spinner.\n"
            f"c.JupyterHub.active_server_limit = {plan.max_servers}\n"
            f"c.JupyterHub.template_vars = {{'full_message': {full_message(plan.max_servers)!r}}}\n"
        )
    if plan.cull_idle_s:
        # the culler's period and the activity reports: a tenth of the timeout, 5-60 s, so that a cull lands at most
        # about that long after the timeout and a report is never that stale (a report per server a minute at most
        # costs the hub little; a third of the timeout made a 2-minute cull land up to 80 s late)
        every = max(5, min(60, plan.cull_idle_s // 10))
        command = [
            str(plan.venv / "bin" / "python"),
            "-m",
            "jupyterhub_idle_culler",
            f"--timeout={plan.cull_idle_s}",
            f"--cull-every={every}",
        ]
        text += f'''# Idle servers are stopped after {plan.cull_idle_s} s (jupyterhub-idle-culler, a hub service run as
# the instructor); the student's files stay and their next login starts a new server. Activity is reported every
# {every} s so the culler sees it in time.
c.JupyterHub.services.append({{"name": "idle-culler", "command": {command!r}, "user": INSTRUCTOR, "cwd": COURSE,
                               "environment": {{"PATH": PATH}}, "display": False}})
c.JupyterHub.load_roles.append({{"name": "idle-culler", "services": ["idle-culler"],
                                "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}})
c.JupyterHub.last_activity_interval = {every}
c.Spawner.environment = {{"JUPYTERHUB_ACTIVITY_INTERVAL": "{every}"}}
'''
    return text


def _where(plan: Plan) -> str:
    if not plan.public:
        return (
            f"# Loopback only. Each user's server has a host of its own, http://<name>.localhost:{plan.port} "
            f"(browsers\n# resolve *.localhost to loopback): what makes the instructor's frame-ancestors 'self' "
            f"safe."
        )
    return (
        f"# On the network, over TLS only: the proxy serves {plan.url} and each user's server at a host of its\n"
        f"# own, https://<name>.{plan.host} (what makes the instructor's frame-ancestors 'self' safe), with a\n"
        f"# certificate for {plan.host} and *.{plan.host}. The hub's API, the proxy's and users' servers stay on "
        f"loopback.\n"
        f"c.JupyterHub.ssl_cert = {str(plan.ssl_cert)!r}\n"
        f"c.JupyterHub.ssl_key = {str(plan.ssl_key)!r}"
    )


def _hub_config(plan: Plan, run: Path) -> str:
    """jupyterhub_config.py: PAM logins for the course's accounts, one local process per user, on loopback (or
    with --public on the network, over TLS)."""
    path = f"{plan.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    values = {
        "COURSE": str(plan.course),
        "INSTRUCTOR": plan.instructor,
        "STUDENTS": list(plan.students),
        "EXCHANGE": str(plan.exchange),
        "PATH": path,
        "EXCHANGE_URL": plan.service_url if plan.service else "",
        "INSTRUCTOR_CONFIG": str(run / "instructor"),
        "STUDENT_CONFIG": str(run / "student"),
        "KERNELS": str(run / "share"),
    }
    head = "".join(f"{name} = {value!r}\n" for name, value in values.items())
    return f'''# Written by ./course hub for one run (twoprim/classroom/hub_config.py); removed when the hub stops.
{head}
c = get_config()  # noqa: F821

{_where(plan)}
c.JupyterHub.ip = {plan.ip!r}
c.JupyterHub.port = {plan.port}
c.JupyterHub.subdomain_host = {plan.url.rstrip("/")!r}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {plan.hub_port}
c.ConfigurableHTTPProxy.command = [{str(plan.proxy)!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{plan.proxy_api_port}"
c.JupyterHub.db_url = "sqlite:///{run / "hub" / "jupyterhub.sqlite"}"
c.JupyterHub.cookie_secret_file = "{run / "hub" / "jupyterhub_cookie_secret"}"
c.JupyterHub.pid_file = "{run / "hub" / "jupyterhub.pid"}"
# Ctrl-C (SIGINT) or SIGTERM stops every server the hub started and the proxy (JupyterHub's defaults, kept).
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

{_logins(plan)}

# LocalProcessSpawner with each user's limits (twoprim/classroom/limits.py; the values below)
c.JupyterHub.spawner_class = "twoprim.classroom.limits.ClassroomSpawner"
c.Spawner.cmd = [{str(plan.venv / "bin" / "jupyterhub-singleuser")!r}]
c.Spawner.default_url = "/lab"
c.Spawner.args = ["--LanguageServerManager.autodetect=False"]
c.Spawner.http_timeout = {START_TIMEOUT_S}
c.Spawner.start_timeout = {START_TIMEOUT_S}
# A server is stopped with SIGTERM, its clean shutdown (ClassroomSpawner.stop); one still up {STOP_TIMEOUT_S} s later
# is killed (JupyterHub's default waits 30 s)
c.Spawner.term_timeout = {STOP_TIMEOUT_S}

{_service(plan)}
{_protection(plan, run)}

def pre_spawn_hook(spawner):
    """The instructor's server opens in the course (the formgrader's course root); a student's in their home."""
    env = spawner.environment = dict(spawner.environment)
    env["PATH"] = PATH
    env["JUPYTER_PATH"] = KERNELS  # the classroom's python3 kernel, which tells a student their memory limit stopped it
    if EXCHANGE_URL:  # the exchange service (nbgrader's config names it too): due dates and submissions too
        env["TWOPRIM_EXCHANGE_URL"] = EXCHANGE_URL
    else:  # nbgrader's shared folder
        env["TWOPRIM_EXCHANGE"] = EXCHANGE
    if spawner.user.name == INSTRUCTOR:
        spawner.notebook_dir = COURSE
        env["JUPYTER_CONFIG_PATH"] = INSTRUCTOR_CONFIG
    else:
        spawner.notebook_dir = "~"
        env["JUPYTER_CONFIG_PATH"] = STUDENT_CONFIG
        env["TWOPRIM_WORKSPACE"] = "~"  # their lessons/, exercises/ and progress file (twoprim.learner.state.workspace)


{_several_hook(plan)}
c.Spawner.pre_spawn_hook = pre_spawn_hook
'''


def _logins(plan: Plan) -> str:
    """PAM logins for the course's accounts, or (--lti) LTI 1.3 launches from the LMS."""
    if plan.lti is not None:
        from twoprim.classroom import lti

        return lti.hub_config(plan.lti, plan.lti_courses())
    return (
        "# The course's Unix accounts, with the passwords ./course hub set for this run.\n"
        'c.JupyterHub.authenticator_class = "pam"\n'
        "c.Authenticator.allowed_users = set([INSTRUCTOR, *STUDENTS])\n"
    )


def _several_hook(plan: Plan) -> str:
    """Several courses: each instructor's server opens in their course's folder, with its exchange; every user's
    server gets the exchange of each course they are in (their nbgrader-COURSE groups)."""
    if not plan.several:
        return ""
    courses = {c.id: {"folder": str(c.folder), "instructor": c.instructor, "url": c.service_url} for c in plan.courses}
    return f'''COURSES = {courses!r}
one_course_hook = pre_spawn_hook


def pre_spawn_hook(spawner):
    """The courses of the user (their groups): the exchange of each; an instructor's server opens in their course."""
    import json

    one_course_hook(spawner)
    env = spawner.environment
    groups = {{group.name for group in spawner.user.groups}}
    env["TWOPRIM_EXCHANGE_URLS"] = json.dumps({{cid: c["url"] for cid, c in COURSES.items()
                                               if f"nbgrader-{{cid}}" in groups}})
    env.pop("TWOPRIM_EXCHANGE_URL", None)
    for cid, course in COURSES.items():
        if course["instructor"] == spawner.user.name:
            spawner.notebook_dir = course["folder"]
            env["JUPYTER_CONFIG_PATH"] = f"{{INSTRUCTOR_CONFIG}}-{{cid}}"
            env["TWOPRIM_EXCHANGE_URL"] = course["url"]
            env.pop("TWOPRIM_WORKSPACE", None)
'''
