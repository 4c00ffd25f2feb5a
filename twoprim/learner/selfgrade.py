"""Self-grading from the notebook: the last cell of every assignment, `selfgrade("ex01_dot")`, grades the *saved*
notebook file exactly as `./course autograde` would (hidden checks included, the same score) and shows a progress
bar per test cell, then the score and a table of the test cells.

This module grades nothing itself (a learner's module never imports the grader's code): it asks the learner's warm
grader (`twoprim.grading.warm`), a process of the learner's own that keeps the grading machinery and a forkserver
of warm kernels between self-grades, over a Unix socket in a folder only its user can open. The first self-grade
starts it (the cost of a cold run, once), unless `./course lab` already did as JupyterLab started (it then lives
as long as JupyterLab does); otherwise it goes away after `IDLE_ENV` seconds unused (default 15 minutes) or when
the course's code changes. Where it cannot start, or with $TWOPRIM_WARM_GRADER=off, each self-grade is a
cold run of its own in a subprocess, speaking the same events. `./course selfgrade` uses the same two paths.

Events, one JSON object a line: `start` (the test cells' grade_ids and points), `cell` (a test cell has run:
`done` of `total`), `result` (status, score, max_score, tests, the text `./course selfgrade` prints), `feedback`
(the feedback HTML's path, written after the result), `error` (a message for the learner, e.g. on the classroom
hub, where the hidden checks are the instructor's: submit instead), `restart` (a warm grader of older code).

Why this module is long: the self-grade cell and `./course selfgrade` share one stream of events, from the learner's
warm grader or from a cold run of their own, and both paths bound every wait and say why a grade did not come.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from twoprim.config import PACKAGE, ROOT
from twoprim.core.notebooks import assignments

__all__ = [
    "selfgrade",
    "command",
    "render_table",
    "events",
    "hidden_checks_problem",
    "grader_socket",
    "code_version",
    "start_warm_grader",
    "stop_warm_grader",
    "worked_on",
    "GraderUnavailable",
    "ENV_DIR",
    "ENV_WARM",
    "IDLE_ENV",
    "WHILE_ENV",
    "ROOT_ENV",
]

ENV_DIR = "TWOPRIM_GRADER_DIR"  # the folder of the warm grader's socket (default: the user's runtime folder)
ENV_WARM = "TWOPRIM_WARM_GRADER"  # "off": no warm grader; every self-grade is a cold run of its own
IDLE_ENV = "TWOPRIM_GRADER_IDLE_S"  # seconds a warm grader waits unused before it exits (default 900)
WHILE_ENV = "TWOPRIM_GRADER_WHILE_PID"  # a warm grader started with ./course lab lives while this process does
ROOT_ENV = "TWOPRIM_GRADER_ROOT"  # the course whose assignments it prepares ahead (`worked_on`), as ./course lab says
START_TIMEOUT_S = 120  # a warm grader's start (imports torch, nbgrader) on a busy 2-core machine
GRADE_TIMEOUT_S = 1200  # one self-grade: the submission's own wall-clock limit (900 s) and more
# what a learner's kernel has set that the grader must not inherit (it grades in kernels of its own)
_NOT_INHERITED = (
    "JPY_",
    "MPLBACKEND",
    "TWOPRIM_CAPTURE_DIR",
    "TWOPRIM_SANDBOX",
    "TWOPRIM_FORKSERVER",
    "TWOPRIM_CHECKS_MODULE",
    "TWOPRIM_CELL_LOG",
    "TWOPRIM_TIMING_LOG",
    "PYDEVD_",
)


class GraderUnavailable(RuntimeError):
    """The warm grader could not be reached or started (the caller runs the self-grade cold instead)."""


def hidden_checks_problem(aid: str, root: Path = ROOT) -> str | None:
    """Why this account cannot self-grade `aid`, its hidden checks (solutions/<aid>/) being unreadable (a student on
    the classroom hub) or absent (a class's copy): what to do instead, submit. None when it can, or when `aid` is
    no assignment at all (a typo: the caller names the ones there are)."""
    hidden = root / "solutions" / aid / f"{aid}.ipynb"
    try:
        hidden.open("rb").close()
        return None
    except OSError as err:
        if not isinstance(err, PermissionError) and assignments(root):
            return None
        why = (
            "this account cannot read it (on the classroom hub only the instructor can)"
            if isinstance(err, PermissionError)
            else "this copy of the course has none (a class's copy, given to students without the hidden checks)"
        )
        return (
            f"self-grading runs the hidden checks in {hidden}, and {why}. Submit {aid} instead (the Assignments "
            f"tab on the classroom hub): the instructor's grading runs them, and its feedback comes back to "
            f"you. The visible checks in your notebook need nothing more."
        )


# ----------------------------------------------------------------------------------------------------------------
# Where the warm grader listens, and which code it runs
# ----------------------------------------------------------------------------------------------------------------


def _grader_dir() -> Path:
    base = os.environ.get(ENV_DIR) or os.path.join(
        os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir(), f"twoprim-grader-{os.getuid()}"
    )
    path = Path(base)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    st = path.lstat()
    if not path.is_dir() or path.is_symlink() or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise GraderUnavailable(
            f"{path} is not a folder of this user's alone (mode 0700): the warm grader "
            f"listens nowhere else; remove it, or set ${ENV_DIR} to another folder"
        )
    return path


def grader_socket() -> Path:
    """The warm grader's socket for this copy of the course (one grader per copy of the package and user)."""
    key = hashlib.sha256(f"{PACKAGE}\0{sys.executable}".encode()).hexdigest()[:16]
    return _grader_dir() / f"{key}.sock"


def code_version() -> str:
    """The course code a grader runs, as one hash of its files' contents (a changed file: a new grader)."""
    h = hashlib.sha256(sys.executable.encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        with contextlib.suppress(OSError):
            h.update(f"{path.relative_to(PACKAGE)}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:20]


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE.parent), env.get("PYTHONPATH", "")]))
    return env


# ----------------------------------------------------------------------------------------------------------------
# Talking to it
# ----------------------------------------------------------------------------------------------------------------


def _connect(path: Path, timeout: float = 2.0) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        raise
    return conn


def _start(path: Path, while_pid: int | None = None, root: Path | None = None) -> socket.socket:
    """Start a warm grader listening on `path` (detached: it outlives this process, or lives while `while_pid`
    does), preparing ahead what the learner works on in `root` (`worked_on`), and connect to it."""
    log = open(path.with_suffix(".log"), "ab")  # noqa: SIM115 - the child keeps it
    env = _child_env()
    if while_pid:
        env[WHILE_ENV] = str(while_pid)
    if root is not None:
        env[ROOT_ENV] = str(Path(root).resolve())
    try:
        subprocess.Popen(
            [sys.executable, "-m", "twoprim.grading.warm", "serve", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=str(PACKAGE.parent),
            start_new_session=True,
        )
    finally:
        log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            return _connect(path)
        time.sleep(0.1)
    raise GraderUnavailable(
        f"the warm grader did not start within {START_TIMEOUT_S} s (its log: {path.with_suffix('.log')})"
    )


def _lines(conn: socket.socket, deadline: float | None = None) -> Iterator[dict]:
    """The JSON lines `conn` sends until it closes; each read waits at most until `deadline` (time.monotonic()),
    then socket.timeout (TimeoutError) is raised."""
    buffer = b""
    while True:
        if deadline is not None:
            conn.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = conn.recv(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def pipe_lines(stream, deadline: float) -> Iterator[bytes]:
    """The lines a child process writes to the pipe `stream` until it closes; TimeoutError once `deadline`
    (time.monotonic()) passes. Not `for line in stream`, which waits for every process holding the pipe (a kernel
    the child started) to close it."""
    fd, buffer = stream.fileno(), b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(timeout=left):
                raise TimeoutError
            chunk = os.read(fd, 65536)
            if not chunk:
                if buffer:
                    yield buffer
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            yield from lines


def _warm_events(request: dict, start: bool) -> Iterator[dict]:
    path = grader_socket()
    for attempt in range(2):
        try:
            conn = _connect(path)
        except OSError:
            if not start:
                raise GraderUnavailable("no warm grader is running") from None
            conn = _start(path)
        with conn:
            conn.settimeout(GRADE_TIMEOUT_S)
            conn.sendall((json.dumps(request) + "\n").encode())
            first, last, asked = True, None, time.strftime("%H:%M:%S")
            try:
                for event in _lines(conn, time.monotonic() + GRADE_TIMEOUT_S):  # the whole self-grade, bounded
                    if event.get("event") == "restart" and attempt == 0:  # a grader of older code: start anew
                        _wait_gone(path)
                        break
                    first, last = False, event
                    yield event
                else:
                    if first:
                        raise GraderUnavailable("the warm grader closed the connection without an answer")
                    return
            except TimeoutError:
                seen = (
                    "nothing"
                    if last is None
                    else str(last.get("event"))
                    + (f" {last.get('done')}/{last.get('total')}" if last.get("event") == "cell" else "")
                )
                yield {
                    "event": "error",
                    "message": f"the warm grader gave no result within {GRADE_TIMEOUT_S} s "
                    f"(asked at {asked}; last event: {seen}); its log: "
                    f"{path.with_suffix('.log')}",
                }
                return
    raise GraderUnavailable("the warm grader runs other code than this and did not make way")


def _wait_gone(path: Path, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and path.exists():
        time.sleep(0.05)


def _cold_events(request: dict) -> Iterator[dict]:
    """The same events from a self-grade of its own, in a subprocess (no warm grader)."""
    argv = [
        sys.executable,
        "-m",
        "twoprim.grading.warm",
        "once",
        request["assignment"],
        request["notebook"],
        request["root"],
    ]
    # not a pipe: a child that writes much there never blocks on it
    errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the `with` just below, with the child
    with (
        errors,
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, env=_child_env(), cwd=str(PACKAGE.parent)
        ) as proc,
    ):
        finished, timed_out, last, started = False, False, None, time.strftime("%H:%M:%S")
        try:
            for line in pipe_lines(proc.stdout, time.monotonic() + GRADE_TIMEOUT_S):  # the whole self-grade
                if line.strip():
                    event = json.loads(line)
                    finished |= event.get("event") in ("result", "error")
                    last = event.get("event")
                    yield event
            proc.wait(timeout=30)
        except TimeoutError:
            timed_out = True
        finally:
            if proc.poll() is None:  # past its time, abandoned (the learner interrupted the cell), or stuck
                proc.kill()
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    if timed_out and not finished:
        yield {
            "event": "error",
            "message": f"the self-grade gave no result within {GRADE_TIMEOUT_S} s (started "
            f"{started}; last event: {last or 'none'}); it was stopped",
        }
    elif not finished:
        yield {
            "event": "error",
            "message": f"the self-grade stopped without a result (exit status {proc.returncode}): {err.strip()[-800:]}",
        }


def events(aid: str, notebook: Path, root: Path = ROOT, *, warm: bool | None = None) -> Iterator[dict]:
    """The events of one self-grade of `notebook` (`aid`): from the warm grader (started if need be) unless `warm`
    is False or $TWOPRIM_WARM_GRADER is "off", else (or where it cannot start) from a cold run of its own."""
    request = {
        "assignment": aid,
        "notebook": str(Path(notebook).resolve()),
        "root": str(Path(root).resolve()),
        "version": code_version(),
    }
    if warm is None:
        warm = os.environ.get(ENV_WARM, "").lower() not in ("off", "0", "no", "false")
    if warm:
        try:
            yield from _warm_events(request, start=True)
            return
        except GraderUnavailable as err:
            yield {"event": "note", "message": f"{err}; grading without it (slower)"}
    yield from _cold_events(request)


def command(aid: str, notebook: Path | None = None, root: Path | None = None) -> int:
    """`./course selfgrade`: the self-grade's events as text, a line per test cell as it runs, then what
    `SelfGrade.describe` says and the feedback's path; the exit status (0: graded). A `notebook` is graded in the
    course it belongs to (`root`, else the copy of the course it sits in, else this one)."""
    root = Path(root) if root else _course_of(Path(notebook)) if notebook else ROOT
    problem = hidden_checks_problem(aid, root)
    if problem:
        raise SystemExit(f"error: {problem}")
    notebook = Path(notebook) if notebook else root / "exercises" / aid / f"{aid}.ipynb"
    if not notebook.is_file():
        raise SystemExit(f"error: {notebook} does not exist; pass the notebook you worked in with --notebook PATH")
    status = 1
    for event in events(aid, notebook, root):
        kind = event.get("event")
        if kind == "start":
            print(f"self-grading {event['notebook']}: {len(event['tests'])} test cells", flush=True)
        elif kind == "cell":
            print(f"  [{event['done']:>2}/{event['total']}] {event['grade_id']} ran", flush=True)
        elif kind == "result":
            print(event["text"], flush=True)
            status = 0 if event["status"] == "graded" else 1
        elif kind == "feedback" and event.get("path"):
            print(f"feedback: {event['path']}", flush=True)
        elif kind == "note":
            print(f"note: {event['message']}", file=sys.stderr, flush=True)
        elif kind == "error":
            raise SystemExit(f"error: {event['message']}")
    return status


def start_warm_grader(while_pid: int, root: Path = ROOT) -> str | None:
    """`./course lab`: start this course's warm grader now, living while `while_pid` does, so the learner's first
    self-grade finds it warm. None when started (or one already runs); else why not (warm grading off, no hidden
    checks to read, a folder it cannot listen in)."""
    if os.environ.get(ENV_WARM, "").lower() in ("off", "0", "no", "false"):
        return f"${ENV_WARM} is off"
    names = assignments(root)
    problem = hidden_checks_problem(names[0], root) if names else "the course has no assignments"
    if problem:
        return problem
    try:
        path = grader_socket()
        try:
            _connect(path).close()
            return None  # one is running already (a terminal's ./course selfgrade started it)
        except OSError:
            _start(path, while_pid, root).close()
    except (GraderUnavailable, OSError) as err:
        return str(err)
    return None


def worked_on(root: Path = ROOT, limit: int = 3) -> list[str]:
    """The assignments of `root` a learner is most likely to self-grade next, at most `limit`, most likely first:
    those whose notebook is open in JupyterLab (its saved workspaces), then those worked on most recently (the
    notebook saved, `./course progress` run on it, a self-grade), never one whose answers are all as released."""
    import nbformat

    from twoprim.learner.progress import untouched
    from twoprim.learner.state import STATE_FILE

    root = Path(root)
    runs: dict = {}
    with contextlib.suppress(Exception):  # read only: a file `./course progress` would set aside stays where it is
        runs = json.loads((root / STATE_FILE).read_text())["runs"]
    touched: dict[str, float] = {}
    for aid in assignments(root):
        path = root / "exercises" / aid / f"{aid}.ipynb"
        try:
            if untouched(nbformat.read(str(path), as_version=4)):
                continue
            when = [path.stat().st_mtime]
        except Exception:  # noqa: BLE001 - missing or unreadable: nothing to prepare
            continue
        with contextlib.suppress(Exception):  # local time, as ./course progress writes it
            when.append(time.mktime(time.strptime(runs[aid]["checked_at"], "%Y-%m-%dT%H:%M:%S")))
        with contextlib.suppress(Exception):  # UTC
            graded = json.loads((root / "grader" / "selfgrade" / f"{aid}.json").read_text())["graded_at"]
            when.append(calendar.timegm(time.strptime(graded, "%Y-%m-%dT%H:%M:%SZ")))
        touched[aid] = max(when)
    opened = _open_in_lab(root)
    return sorted(touched, key=lambda aid: (aid not in opened, -touched[aid]))[:limit]


def _open_in_lab(root: Path) -> set[str]:
    """Assignments whose notebook JupyterLab's saved workspaces hold open (`notebook:exercises/<aid>/...`)."""
    try:
        from jupyter_core.paths import jupyter_config_dir
    except ImportError:
        return set()
    folder = Path(os.environ.get("JUPYTERLAB_WORKSPACES_DIR") or Path(jupyter_config_dir()) / "lab" / "workspaces")
    found: set[str] = set()
    for path in folder.glob("*.jupyterlab-workspace") if folder.is_dir() else []:
        with contextlib.suppress(Exception):
            for key in json.loads(path.read_text()).get("data", {}):
                parts = key.removeprefix("notebook:").split("/")
                if (
                    key.startswith("notebook:")
                    and len(parts) == 3
                    and parts[0] == "exercises"
                    and (root / key.removeprefix("notebook:")).is_file()
                ):
                    found.add(parts[1])
    return found


def stop_warm_grader(seconds: float = 10.0) -> bool:
    """Ask this course's warm grader to exit (tests, `./course lab`'s end); True if one was running."""
    path = grader_socket()
    try:
        conn = _connect(path)
    except OSError:
        return False
    with conn:
        conn.sendall(b'{"stop": true}\n')
        with contextlib.suppress(OSError):
            conn.recv(100)
    _wait_gone(path, seconds)
    return True


# ----------------------------------------------------------------------------------------------------------------
# The cell
# ----------------------------------------------------------------------------------------------------------------


def _notebook_path(aid: str) -> Path | None:
    """The notebook this kernel runs (Jupyter's session tells the kernel its path), if it is known."""
    session = os.environ.get("JPY_SESSION_NAME", "")
    with contextlib.suppress(Exception):
        session = get_ipython().user_ns.get("__session__") or session  # noqa: F821  # pyright: ignore[reportUndefinedVariable] (IPython's global)
    if session.endswith(".ipynb") and Path(session).is_file():
        return Path(session)
    return None


def _unsaved(notebook: Path) -> int:
    """How many cells this kernel ran whose code the saved file does not hold (run, then not saved)."""
    import nbformat

    try:
        inputs = list(get_ipython().user_ns.get("In", []))[1:-1]  # noqa: F821  # pyright: ignore[reportUndefinedVariable] (IPython's global; the last one is this cell)
        saved = {c.source.strip() for c in nbformat.read(str(notebook), as_version=4).cells if c.cell_type == "code"}
    except Exception:  # noqa: BLE001 - outside IPython, or an unreadable file (the grader says so)
        return 0
    ran = {i.strip() for i in inputs if i.strip() and "selfgrade(" not in i}
    return len(ran - saved)


def render_table(result: dict) -> str:
    """The result as text: `Self-grade: S of T points`, then one row per test cell (grade_id, ✔/✘, points)."""

    def number(x: float) -> str:
        return f"{x:g}"

    if result.get("status") != "graded":
        return f"Self-grade: could not be graded: {result.get('reason')}"
    lines = [
        f"Self-grade: {number(result['score'])} of {number(result['max_score'])} points"
        f" (hidden checks included: the score `./course autograde` gives this notebook)"
    ]
    width = max((len(gid) for gid, *_ in result["tests"]), default=9)
    lines.append(f"  {'test cell':<{width}}  ok  points")
    for gid, score, points in result["tests"]:
        lines.append(
            f"  {gid:<{width}}  {'✔' if score and score >= points else '✘'}   {number(score or 0)} / {number(points)}"
        )
    errors = [n for n in (result.get("reason") or "").split("; ") if n.startswith("error in ")]
    for note in errors:
        lines.append(f"✘ {note}: fix this first (the checks that need what that cell defines fail because of it)")
    return "\n".join(lines)


class _Bar:
    """A progress bar per test cell: ipywidgets in a notebook, nothing elsewhere."""

    def __init__(self):
        self.widget = None
        try:
            import ipywidgets
            from IPython import get_ipython as ip
            from IPython.display import display

            if ip() is not None and getattr(ip(), "kernel", None) is not None:
                self.widget = ipywidgets.IntProgress(value=0, min=0, max=1, description="self-grade", bar_style="info")
                self.label = ipywidgets.Label("starting the grader…")
                display(ipywidgets.HBox([self.widget, self.label]))
        except Exception:  # noqa: BLE001 - no widgets: the text result is the same
            self.widget = None

    def update(self, done: int, total: int, text: str, style: str = "info") -> None:
        if self.widget is not None:
            self.widget.max, self.widget.value, self.widget.bar_style = max(total, 1), done, style
            self.label.value = text


def _course_of(notebook: Path) -> Path:
    """The course a notebook belongs to: the copy it sits in (<course>/exercises/<aid>/), else this package's."""
    folder = notebook.resolve().parent
    course = folder.parent.parent
    in_exercises = folder.parent.name == "exercises" and (course / "grader" / "nbgrader_config.py").is_file()
    return course if in_exercises else ROOT


def selfgrade(
    aid: str, notebook: str | Path | None = None, root: Path | None = None, out: Callable[[str], None] = print
) -> dict | None:
    """The self-grade cell: grade the *saved* notebook of `aid` (this kernel's notebook, or `notebook`) as
    autograde would, in the course it belongs to (or `root`), showing progress per test cell, then the score and
    the table; returns the result's data (None when nothing was graded, and the reason was printed)."""
    if os.environ.get("TWOPRIM_CAPTURE_DIR"):  # this notebook is itself being graded: nothing to do here
        out("Self-grade: skipped while this notebook is being graded.")
        return None
    path = Path(notebook) if notebook else _notebook_path(aid)
    root = Path(root) if root else _course_of(path) if path else ROOT
    problem = hidden_checks_problem(aid, root)
    if problem:
        out(f"Self-grade: {problem}")
        return None
    if path is None:
        out(
            f"Self-grade: run this cell in JupyterLab, in the notebook itself (it grades that notebook's saved "
            f"file), or in a terminal: ./course selfgrade {aid} --notebook PATH"
        )
        return None
    age = time.time() - path.stat().st_mtime
    out(f"Grading the saved file {path.name} (saved {_ago(age)}): save first (Ctrl+S) if you changed anything.")
    unsaved = _unsaved(path)
    if unsaved:
        out(
            f"⚠ {unsaved} cell(s) you ran are not in the saved file: this grades the saved file, not what you ran. "
            f"Save (Ctrl+S), then run this cell again."
        )
    return _show(events(aid, path, root), out)


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def _show(stream: Iterator[dict], out: Callable[[str], None]) -> dict | None:
    bar, result, total = _Bar(), None, 0
    for event in stream:
        kind = event.get("event")
        if kind == "start":
            total = len(event["tests"])
            bar.update(0, total, f"0 of {total} test cells")
        elif kind == "cell":
            bar.update(event["done"], event["total"], f"{event['done']} of {event['total']}: {event['grade_id']}")
        elif kind == "result":
            result = event
            bar.update(total, total, "judged", "success" if event.get("score") == event.get("max_score") else "warning")
            out(render_table(event))
        elif kind == "feedback" and event.get("path"):
            out(f"feedback: {event['path']}")
        elif kind in ("error", "note"):
            if kind == "error":
                bar.update(0, total, "not graded", "danger")
            out(f"Self-grade: {event['message']}")
    return result
