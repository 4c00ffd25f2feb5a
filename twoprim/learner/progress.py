"""Where a learner stands: lessons run to the end, visible checks passing, self-graded scores, hints, what next.

`./course progress` in a terminal, `progress.show()` in a notebook, over the learner's workspace (`state.workspace`:
the course folder, or on the classroom hub the student's home). Lessons are judged from their saved outputs (never
executed here). Each assignment's notebook in exercises/ is executed as a copy, in a fresh kernel, in a temporary
folder, two at a time (when two or more run, their kernels are forked from one zygote that imported torch and the
course once: `twoprim.learner.warm_kernels`); the learner's files are only read. Results are cached in one untracked
file at the top of the workspace, `.twoprim-progress.json` (`STATE_FILE`), keyed by a hash of the notebook's code and
of the course's checks, so an unchanged notebook is not run again. That file also counts the hints revealed; deleting
it loses only history.

On the classroom hub (`state.in_classroom`) the assignments are the ones released there and fetched from the
Assignments tab, and the hidden checks run when the instructor grades a submission: the report shows when each was
last submitted (nbgrader's own record of it), and the next step is to fetch or submit instead of to self-grade.

Why this module is long: one report built from four sources (saved lessons, executed copies of the assignments,
self-grades, hints) and shown two ways (a table and a chart); each part is one section.
"""

from __future__ import annotations

import asyncio
import base64
import calendar
import datetime
import hashlib
import html
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from twoprim.config import COURSE_ID, PACKAGE, ROOT
from twoprim.core.failures import ANSWERED as ANSWERED_TEXT
from twoprim.core.notebooks import assignments, lessons, outline
from twoprim.learner import deadlines
from twoprim.learner.hints import HINTS
from twoprim.learner.state import STATE_FILE, in_classroom, load_state, update_state, workspace

__all__ = ["STATE_FILE", "Report", "report", "show", "load_state", "update_state", "main"]

CELL_TIMEOUT = 60  # seconds per cell of a learner's notebook; an infinite loop ends there
WORKERS = 2  # notebooks executed at once (each kernel then runs one thread)

PASS, FAIL, TODO, NOT_RUN = "pass", "fail", "todo", "not run"
# A check that read only the form of an answer (it printed ANSWERED_TEXT): answered, not passing; its value is
# graded by the hidden check, so only a self-grade can say it is right.
ANSWERED = "answered"
DONE = (PASS, ANSWERED)  # nothing left to do in the notebook for this check
ANALYSIS_VERSION = 2  # part of every cache key: results cached by an older analyse() are judged again


# ----------------------------------------------------------------------------------------------------------------
# Lessons: judged from the saved notebook
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class LessonStatus:
    """One lesson's state in the learner's progress: run to the end or not, and why."""

    name: str  # "01_dot_product"
    path: Path
    done: bool
    detail: str  # "run to the end", "not run yet", ...


def _first_line(source: str) -> str:
    line = next((line.strip() for line in source.splitlines() if line.strip()), "")
    return line if len(line) <= 60 else line[:57] + "..."


def _cell_label(cell, index: int) -> str:
    """'cell 5 (ex01_dot-dot-solution)' or 'cell 5 (`x = 1`)': 1-based, with its grade id or first line."""
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return f"cell {index + 1} ({gid or '`' + _first_line(cell.source) + '`'})"


def _errors(cell) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def lesson_status(path: Path) -> LessonStatus:
    """Whether the saved lesson was run to the end: every code cell executed, none with an error output."""
    name = path.stem
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as err:  # noqa: BLE001 - any unreadable file is reported, the report goes on
        return LessonStatus(name, path, False, f"unreadable ({type(err).__name__}); restore it from the course")
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    for i, cell in code:
        if _errors(cell):
            err = _errors(cell)[0]
            return LessonStatus(
                name, path, False, f"stopped with {err.get('ename', 'an error')} in {_cell_label(cell, i)}"
            )
    not_run = [(i, c) for i, c in code if c.execution_count is None]
    if not not_run:
        return LessonStatus(name, path, True, "run to the end")
    if len(not_run) == len(code):
        return LessonStatus(name, path, False, "not run yet")
    i, cell = not_run[0]
    return LessonStatus(
        name, path, False, f"{len(code) - len(not_run)} of {len(code)} code cells run; {_cell_label(cell, i)} has not"
    )


# ----------------------------------------------------------------------------------------------------------------
# Assignments: a copy of the learner's notebook, executed
# ----------------------------------------------------------------------------------------------------------------


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def visible_checks(nb: nbformat.NotebookNode, aid: str) -> dict[str, int]:
    """function name -> index of its visible check cell (grade id `<aid>-<fn>`, graded, not hidden)."""
    out = {}
    for i, cell in enumerate(nb.cells):
        m, gid = _meta(cell), _meta(cell).get("grade_id", "")
        if m.get("grade") and not m.get("solution") and gid.startswith(f"{aid}-") and not gid.endswith("-hidden"):
            out[gid.removeprefix(f"{aid}-")] = i
    return out


def cache_key(nb: nbformat.NotebookNode, aid: str) -> str:
    """sha256 of the notebook's code cells, of the course's check modules for `aid` (twoprim/exNN.py and the
    shared checks.py, failures.py) and of how results are analysed (ANALYSIS_VERSION)."""
    h = hashlib.sha256(f"analysis {ANALYSIS_VERSION}".encode())
    for cell in nb.cells:
        if cell.cell_type == "code":
            h.update(json.dumps([_meta(cell).get("grade_id"), cell.source]).encode())
    for path in (
        *(PACKAGE / "assignments").glob(f"{aid}.py"),
        PACKAGE / "core" / "checks.py",
        PACKAGE / "core" / "failures.py",
    ):
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _answered_only(cell) -> bool:
    """The check cell ran without error and printed that it read only the form of the answer."""
    text = "".join(
        o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream"
    )
    return ANSWERED_TEXT in text


def untouched(nb: nbformat.NotebookNode) -> bool:
    """True when every answer cell is exactly as released (nbgrader's checksum matches): nothing to run yet."""
    from nbgrader.utils import compute_checksum

    answers = [c for c in nb.cells if _meta(c).get("solution")]
    return bool(answers) and all(_meta(c).get("checksum") == compute_checksum(c) for c in answers)


def analyse(
    nb: nbformat.NotebookNode, aid: str, stopped: tuple[str, int] | None = None, timeout: int = CELL_TIMEOUT
) -> dict:
    """The result of an executed notebook: each visible check passed, failed, still a stub or did not run, and
    what stopped the notebook (`stopped` = (kind, cell index) for a kernel that died or a cell that timed out)."""
    checks, where = {}, visible_checks(nb, aid)
    for fn, i in where.items():
        cell = nb.cells[i]
        errors = _errors(cell)
        if stopped and i >= stopped[1] or cell.get("execution_count") is None:
            checks[fn] = NOT_RUN
        elif not errors:
            checks[fn] = ANSWERED if _answered_only(cell) else PASS
        else:
            checks[fn] = TODO if errors[0].get("ename") == "NotImplementedError" else FAIL
    status, problem = "ran", None
    if not where:
        status, problem = (
            "error",
            (
                "it has no check cells with nbgrader metadata (were they stripped?); paste your "
                "answers into a fresh copy of the assignment"
            ),
        )
    elif stopped:
        kind, index = stopped
        label = _cell_label(nb.cells[index], index)
        if kind == "crashed":
            status, problem = (
                kind,
                (
                    f"the kernel died in {label} (a crash, os._exit() or running out of memory); "
                    f"the cells after it did not run"
                ),
            )
        else:
            status, problem = (
                kind,
                (
                    f"{label} ran past the {timeout} s limit (an infinite loop?) and was stopped; "
                    f"the cells after it did not run"
                ),
            )
    else:
        for i, cell in enumerate(nb.cells):
            if i in where.values() or cell.cell_type != "code":
                continue
            errors = _errors(cell)
            if errors and not (_meta(cell).get("solution") and errors[0].get("ename") == "NotImplementedError"):
                err = errors[0]
                where = re.sub(r"\(\d+\.py, line (\d+)\)", r"(line \1 of the cell)", err.get("evalue", ""))
                status = "error"
                problem = f"{err.get('ename', 'an error')} in {_cell_label(cell, i)}: {where}"[:300]
                break
    return {"status": status, "checks": checks, "problem": problem}


def _warm_kernel_manager():
    """A kernel manager whose kernels are forked from this process's zygote (`twoprim.learner.warm_kernels`): the
    same `python -m ipykernel_launcher` as the learner's python3 kernel, started the usual way where the zygote cannot
    serve."""
    import sys

    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    from twoprim.learner import warm_kernels

    class Specs(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            return KernelSpec(
                argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                display_name="Python 3 (ipykernel, forked warm)",
                language="python",
                metadata={"kernel_provisioner": {"provisioner_name": warm_kernels.NAME}},
            )

    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=Specs())


def execute_copy(
    path: Path, aid: str, *, timeout: int = CELL_TIMEOUT, one_thread: bool = False, warm: bool = False
) -> dict:
    """Run a copy of `path` top to bottom in a fresh kernel inside a temporary folder; analyse() its outputs.

    Errors do not stop the run (every check gets its chance, as in grading); a kernel that dies or a cell that runs
    past `timeout` seconds ends it, and the result names that cell. `warm`: the kernel is forked from this process's
    zygote (`_run_copies` starts it), a fresh interpreter state that has not imported torch again; the result's
    "kernel" says how it started.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"twoprim-progress-{aid}-") as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        nb = nbformat.read(str(copy), as_version=4)
        current = {"index": 0}

        def on_cell_start(cell, cell_index, **_):
            current["index"] = cell_index

        env = dict(os.environ)
        if one_thread:  # two kernels on two cores: one thread each, no spinning thread pools
            env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        started = {"kernel": "started"}

        def on_notebook_start(**_):  # the kernel is up: forked, or started the usual way
            if getattr(getattr(client.km, "provisioner", None), "forked", None) is not None:
                started["kernel"] = "forked"

        client = NotebookClient(
            nb,
            km=_warm_kernel_manager() if warm else None,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=True,
            interrupt_on_timeout=False,
            on_cell_start=on_cell_start,
            on_notebook_start=on_notebook_start,
            resources={"metadata": {"path": tmp}},
        )
        stopped = None
        try:
            # asyncio.run, not client.execute(): it cancels the output pollers a timeout leaves pending
            asyncio.run(client.async_execute(env=env, stderr=subprocess.DEVNULL))  # the kernel's log is noise here
        except CellTimeoutError:
            stopped = ("timed out", current["index"])
        except DeadKernelError:
            stopped = ("crashed", current["index"])
        result = analyse(nb, aid, stopped, timeout)
    result["seconds"] = round(time.monotonic() - start, 1)
    result["kernel"] = started["kernel"]
    return result


# ----------------------------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class AssignmentStatus:
    """One assignment's state: its visible checks, self-grade, submission and any problem."""

    aid: str
    path: Path
    status: str  # not started | ran | error | crashed | timed out | missing | unreadable
    checks: dict = field(default_factory=dict)  # function -> pass | fail | todo | not run
    problem: str | None = None
    selfgrade: dict | None = None  # {"score", "max_score", "stale": why it is out of date or "", "failing"}
    submitted: dict | None = None  # on the classroom hub: {"at": nbgrader's timestamp, "stale": "" or why}
    due: datetime.datetime | None = None  # on the classroom hub: its due date, naive UTC (`twoprim.learner.deadlines`)
    hints_used: int = 0
    hints_total: int = 0
    cached: bool = False
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return sum(v == PASS for v in self.checks.values())

    @property
    def answered(self) -> int:
        """Checks that read only the form of an answer: answered, to be graded by a self-grade."""
        return sum(v == ANSWERED for v in self.checks.values())

    @property
    def runs(self) -> bool:
        return self.status in ("not started", "ran")


@dataclass
class Report:
    """Everything `course progress` shows: lessons, assignments, notes and the next step."""

    root: Path
    lessons: list[LessonStatus]
    assignments: list[AssignmentStatus]
    next_step: str
    notes: list[str] = field(default_factory=list)
    classroom: bool = False  # a student on the classroom hub: submitted, never self-graded

    @property
    def graded_column(self) -> str:
        return "submitted" if self.classroom else "self-graded"

    def text(self) -> str:
        """The report as plain text for a terminal, each table's columns as wide as their widest cell."""
        out = [f"Progress in {self.root}"] + [f"note: {n}" for n in self.notes] + [""]
        out += _columns(
            [["", "lesson", "status"]]
            + [["✔" if lesson.done else "·", lesson.name, lesson.detail] for lesson in self.lessons]
        )
        out += [""] + _columns(
            [["", "assignment", "visible checks", self.graded_column, "hints", "notebook"]]
            + [
                [
                    "✔" if _complete(a) else "·",
                    a.aid,
                    _checks_cell(a),
                    _selfgrade_cell(a),
                    f"{a.hints_used} of {a.hints_total}",
                    _notebook_cell(a),
                ]
                for a in self.assignments
            ]
        )
        out += ["", f"next: {self.next_step}"]
        return "\n".join(out)

    def _repr_html_(self) -> str:
        """The report as HTML tables and the chart, for a notebook (no pandas needed)."""
        e = html.escape
        style = "text-align:left;padding:2px 10px;vertical-align:top"
        nowrap = style + ";white-space:nowrap"
        rows = "".join(
            f"<tr><td style='{style}'>{'✔' if lesson.done else '·'}</td><td style='{style}'><code>{e(lesson.name)}"
            f"</code></td><td style='{style}'>{e(lesson.detail)}</td></tr>"
            for lesson in self.lessons
        )
        lessons_html = (
            f"<table><tr><th></th><th style='{style}'>lesson</th><th style='{style}'>status</th></tr>{rows}</table>"
        )
        rows = "".join(
            f"<tr><td style='{style}'>{'✔' if _complete(a) else '·'}</td><td style='{style}'><code>{e(a.aid)}</code>"
            f"</td><td style='{nowrap}'>{e(_checks_cell(a))}</td><td style='{nowrap}'>{e(_selfgrade_cell(a))}</td>"
            f"<td style='{nowrap}'>{a.hints_used} of {a.hints_total}</td><td style='{style}'>{e(_notebook_cell(a))}"
            f"</td></tr>"
            for a in self.assignments
        )
        heads = "".join(
            f"<th style='{style}'>{h}</th>"
            for h in ("", "assignment", "visible checks", self.graded_column, "hints", "notebook")
        )
        assignments_html = f"<table><tr>{heads}</tr>{rows}</table>"
        notes = "".join(f"<p><b>note:</b> {e(n)}</p>" for n in self.notes)
        png = base64.b64encode(chart_png(self)).decode()
        return (
            f"{notes}{lessons_html}{assignments_html}<p><b>Next:</b> {e(self.next_step)}</p>"
            f"<img alt='progress chart' src='data:image/png;base64,{png}'/>"
        )


def _columns(rows: list[list[str]]) -> list[str]:
    """Rows of cells as lines, each column padded to its widest cell (the last one left as it is)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip() for row in rows
    ]


def _complete(a: AssignmentStatus) -> bool:
    """Every visible check done, and then submitted since the last save (on the hub) or self-graded in full."""
    if not (a.runs and bool(a.checks) and a.passed + a.answered == len(a.checks)):
        return False
    if a.submitted is not None:
        return bool(a.submitted["at"]) and not a.submitted["stale"]
    sg = a.selfgrade
    return sg is not None and not sg["stale"] and sg["score"] == sg["max_score"]


def _checks_cell(a: AssignmentStatus) -> str:
    """'3 of 8 pass, 5 answered': a form-only check that ran is answered, never counted as passing."""
    if not a.checks:
        return "-"
    return f"{a.passed} of {len(a.checks)} pass" + (f", {a.answered} answered" if a.answered else "")


def _selfgrade_cell(a: AssignmentStatus) -> str:
    if a.submitted is not None:
        if not a.submitted["at"]:
            return "-"
        return a.submitted["at"][:16] + (" (old)" if a.submitted["stale"] else "") + (" (late)" if _late(a) else "")
    sg = a.selfgrade
    if sg is None:
        return "-"
    if "unreadable" in sg:
        return "unreadable"
    score = f"{_num(sg['score'])} of {_num(sg['max_score'])}"
    return score + (" (old)" if sg["stale"] else "")


def _notebook_cell(a: AssignmentStatus) -> str:
    text = _notebook_state(a)
    return f"{text}; {deadlines.describe(a.due)}" if a.due is not None and not _complete(a) else text


def _notebook_state(a: AssignmentStatus) -> str:
    if a.problem:
        return f"{a.status}: {a.problem}"
    todo = [fn for fn, v in a.checks.items() if v not in DONE]
    if a.status == "ran" and todo:
        return f"ran; to do: {', '.join(todo)}"
    if a.status == "ran" and a.answered:
        answered = ", ".join(fn for fn, v in a.checks.items() if v == ANSWERED)
        when = "graded from your submission" if a.submitted is not None else "graded when you self-grade"
        return f"ran; answered ({when}): {answered}"
    return a.status


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def _read_selfgrade(root: Path, aid: str, notebook: Path) -> dict | None:
    """The last `./course selfgrade` of `aid` (grader/selfgrade/<aid>.json), marked stale when the notebook it graded
    was saved again afterwards."""
    path = root / "grader" / "selfgrade" / f"{aid}.json"
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
        graded = calendar.timegm(time.strptime(rec["graded_at"], "%Y-%m-%dT%H:%M:%SZ"))
        score, max_score = float(rec["score"]), float(rec["max_score"])
        tests = dict(rec.get("tests", {}))
    except (OSError, ValueError, KeyError, TypeError) as err:
        return {
            "unreadable": f"{path.name}: {type(err).__name__}",
            "stale": f"{path.name} is unreadable",
            "score": 0,
            "max_score": 0,
            "failing": [],
        }
    if Path(rec.get("notebook") or "?").resolve() != notebook.resolve():
        return None  # a self-grade of another notebook (--notebook, a scratch copy) says nothing about this one
    # graded_at is rounded down to the second
    stale = "you saved the notebook after the last one" if notebook.stat().st_mtime > graded + 1 else ""
    failing = sorted(gid.removeprefix(f"{aid}-") for gid, s in tests.items() if not s)
    return {"score": score, "max_score": max_score, "stale": stale, "failing": failing}


def _assignment_ids(root: Path, released: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Assignments from solutions/ (twoprim.core.notebooks.assignments) and, for a learner's copy without solutions/,
    from exercises/; on the classroom hub also every one `released`, fetched or not."""
    found = {p.parent.name for p in (root / "exercises").glob("*/*.ipynb") if p.stem == p.parent.name}
    return sorted(set(assignments(root)) | found | set(released))


@dataclass
class Classroom:
    """What the classroom's exchange says of this student: released assignments, their deadlines, submissions."""

    released: set[str]
    due: dict[str, datetime.datetime]
    submitted: dict[str, dict] | None = None  # aid -> {"at": its arrival, nbgrader's format; "epoch": seconds};
    # None: not known here (the shared folder): nbgrader's own record of each submission is read instead

    def submission(self, aid: str, notebook: Path) -> dict:
        last = (self.submitted or {}).get(aid)
        if last is None:
            return {"at": "", "stale": ""}
        saved_after = notebook.is_file() and notebook.stat().st_mtime > last["epoch"] + 1
        return {"at": last["at"], "stale": "you saved the notebook after submitting it" if saved_after else ""}


def _classroom(notes: list[str]) -> Classroom | None:
    """On a hub server with the classroom's exchange service ($TWOPRIM_EXCHANGE_URL and the server's
    $JUPYTERHUB_API_TOKEN): what the service says for this student, its deadlines read from the gradebook at each
    request. None elsewhere, or when it does not answer (a note says so; the shared folder is read instead)."""
    import urllib.error
    import urllib.request

    url, token = os.environ.get("TWOPRIM_EXCHANGE_URL", ""), os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if not (url and token):
        return None

    def get(path: str):
        request = urllib.request.Request(f"{url.rstrip('/')}/api/{path}", headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    try:
        listing, mine = get(f"assignments/{COURSE_ID}"), get(f"submissions/{COURSE_ID}")
    except (OSError, ValueError, urllib.error.URLError) as err:
        notes.append(
            f"the classroom's exchange service did not answer ({err}): released assignments, due dates "
            f"and submissions may be missing below"
        )
        return None
    due = {e["assignment_id"]: datetime.datetime.strptime(e["due"], deadlines.FORMAT) for e in listing if e.get("due")}
    submitted: dict[str, dict] = {}
    for record in mine:  # oldest first: the newest of each assignment wins
        at = record["timestamp"]
        epoch = calendar.timegm(time.strptime(at.split(".")[0], "%Y-%m-%d %H:%M:%S"))
        submitted[record["assignment_id"]] = {"at": at, "epoch": epoch}
    return Classroom({e["assignment_id"] for e in listing}, due, submitted)


def _released() -> set[str]:
    """The assignments released to the classroom's exchange ($TWOPRIM_EXCHANGE, set on every hub server)."""
    exchange = os.environ.get("TWOPRIM_EXCHANGE")
    if not exchange:
        return set()
    try:
        return {p.name for p in (Path(exchange) / COURSE_ID / "outbound").iterdir() if p.is_dir()}
    except OSError:
        return set()


def _late(a: AssignmentStatus) -> bool:
    """Whether the last submission came after the due date (nbgrader's timestamp, UTC)."""
    from nbgrader.utils import parse_utc

    try:
        return bool(a.due is not None and a.submitted and a.submitted["at"] and parse_utc(a.submitted["at"]) > a.due)
    except (ValueError, OverflowError):
        return False


def _due(a: AssignmentStatus) -> str:
    """' (due ... (in 2 days))' for a next step, or ''."""
    return f" ({deadlines.describe(a.due)})" if a.due is not None else ""


def _read_submission(aid: str, notebook: Path) -> dict:
    """When this student last submitted `aid` from the classroom hub, from nbgrader's record of it (a copy of each
    submission in $JUPYTER_DATA_DIR/nbgrader_cache/<course>/<student>+<aid>+<time>/, its time in timestamp.txt);
    stale when the notebook was saved after it."""
    from jupyter_core.paths import jupyter_data_dir

    latest = None
    for folder in (Path(jupyter_data_dir()) / "nbgrader_cache" / COURSE_ID).glob(f"*+{aid}+*"):
        stamp = folder / "timestamp.txt"
        try:
            at, mtime = stamp.read_text().strip(), stamp.stat().st_mtime
        except OSError:
            continue
        if folder.name.split("+")[1] == aid and (latest is None or mtime > latest[1]):
            latest = (at, mtime)
    if latest is None:
        return {"at": "", "stale": ""}
    saved_after = notebook.is_file() and notebook.stat().st_mtime > latest[1] + 1
    return {"at": latest[0], "stale": "you saved the notebook after submitting it" if saved_after else ""}


def _in_course_order(
    root: Path, lesson_list: list[LessonStatus], work: list[AssignmentStatus]
) -> list[LessonStatus | AssignmentStatus]:
    """Each lesson, then its assignment as the course outline pairs them (README.md's lesson table: lesson 09 comes
    with ex09_triton), else the assignment with the lesson's number; the assignments no lesson takes last."""
    by_aid = {a.aid: a for a in work}
    paired: dict[str, list[str]] = {}  # a lesson may have more than one assignment (README's continuation rows)
    for row in outline(root) or outline(ROOT):
        if row.assignment:
            paired.setdefault(row.lesson, []).append(row.assignment)
    named = {a for aids in paired.values() for a in aids}
    steps: list[LessonStatus | AssignmentStatus] = []
    for lesson in lesson_list:
        steps.append(lesson)
        aids = paired.get(lesson.name) or [a for a in by_aid if a[2:4] == lesson.name[:2] and a not in named][:1]
        steps += [by_aid.pop(aid) for aid in aids if aid in by_aid]
    steps += list(by_aid.values())
    return steps


def _next_step(
    root: Path, lesson_list: list[LessonStatus], work: list[AssignmentStatus], classroom: bool = False
) -> str:
    """One concrete thing to do, in course order (`_in_course_order`)."""
    for step in _in_course_order(root, lesson_list, work):
        if isinstance(step, LessonStatus):
            if not step.done:
                where = step.path.relative_to(root)
                return (
                    f"run {where} to the end (Kernel → Restart Kernel and Run All Cells) and save it; "
                    f"now: {step.detail}."
                )
            continue
        a, where = step, step.path.relative_to(root)
        if a.status == "missing" and classroom:
            return (
                f"fetch {a.aid} from the Assignments tab (Nbgrader → Assignments){_due(a)}: it lands in "
                f"{where.parent}/."
            )
        if a.status == "missing":
            return f"{where} is missing: restore it from the course (`git restore {where}`)."
        if not a.runs:
            again = "the progress cell" if classroom else "`./course progress`"
            return f"fix {where}: {a.problem}; then run {again} again."
        todo = [fn for fn, v in a.checks.items() if v not in DONE]
        if todo:
            return (
                f"make `{todo[0]}` pass its check in {where} (stuck? the hint cell under it reveals hints "
                f"one at a time)."
            )
        if classroom:
            sub = a.submitted or {"at": "", "stale": ""}
            if sub["at"] and not sub["stale"]:
                continue
            answers = (
                f" and the values of your {a.answered} short answer{'s' if a.answered > 1 else ''}"
                if a.answered
                else ""
            )
            again = f" again ({sub['stale']})" if sub["stale"] else ""
            return (
                f"submit {a.aid} from the Assignments tab{again}{_due(a)}: your instructor's grading adds the "
                f"hidden checks{answers}, and its feedback comes back there."
            )
        sg = a.selfgrade
        if sg is None or sg["stale"]:
            again = "" if sg is None else f" again ({sg['stale']})"
            answers = ""
            if a.answered:
                answers = (
                    f" and checks the values of your {a.answered} short answer{'s' if a.answered > 1 else ''} "
                    f"(the notebook checks only their form)"
                )
            return f"run `./course selfgrade {a.aid}`{again}: it adds the hidden checks grading runs{answers}."
        if sg["score"] < sg["max_score"]:
            names = ", ".join(sg["failing"]) or "some checks"
            return (
                f"hidden checks of {a.aid} fail ({names}): read grader/selfgrade/{a.aid}.html for what they "
                f"tried, fix, then run `./course selfgrade {a.aid}` again."
            )
    if classroom:
        return (
            "done: every lesson is run to the end, and every assignment released so far passes its visible checks "
            "and is submitted; its feedback comes back in the Assignments tab. The further reading at the end "
            "of each lesson goes deeper."
        )
    return (
        "done: every lesson is run to the end and every assignment passes all its checks, hidden ones included. "
        "The further reading at the end of each lesson goes deeper."
    )


def report(
    root: Path | None = None,
    *,
    timeout: int = CELL_TIMEOUT,
    workers: int = WORKERS,
    log: Callable[[str], None] | None = None,
    classroom: bool | None = None,
) -> Report:
    """Build the progress report of the learner's copy of the course at `root` (default: `state.workspace()`;
    executes changed assignment notebooks). `classroom`: a student on the classroom hub (default:
    `state.in_classroom()`)."""

    root = workspace() if root is None else Path(root)
    classroom = in_classroom() if classroom is None else classroom
    log = log or (lambda message: None)
    state, note = load_state(root)
    notes = [note] if note else []
    lesson_list = [lesson_status(p) for p in lessons(root)]
    work: list[AssignmentStatus] = []
    todo: list[tuple[AssignmentStatus, str]] = []
    room = _classroom(notes) if classroom else None
    if room is None and classroom:  # nbgrader's shared folder (./course hub --exchange-kind filesystem)
        room = Classroom(_released(), deadlines.read(os.environ.get("TWOPRIM_EXCHANGE")))
    for aid in _assignment_ids(root, room.released if room else set()):
        path = root / "exercises" / aid / f"{aid}.ipynb"
        a = AssignmentStatus(aid, path, "missing")
        a.hints_total = sum(len(v) for gid, v in HINTS.items() if gid.startswith(f"{aid}-"))
        a.hints_used = sum(n for gid, n in state["hints"].items() if gid.startswith(f"{aid}-"))
        work.append(a)
        if room is not None:
            a.submitted = room.submission(aid, path) if room.submitted is not None else _read_submission(aid, path)
            a.due = room.due.get(aid)
        if not path.is_file():
            a.problem = (
                "not fetched yet: fetch it from the Assignments tab"
                if classroom
                else f"{path.relative_to(root)} does not exist"
            )
            continue
        if not classroom:
            a.selfgrade = _read_selfgrade(root, aid, path)
        try:
            nb = nbformat.read(str(path), as_version=4)
        except Exception as err:  # noqa: BLE001 - a broken file is reported, the report goes on
            a.status, a.problem = (
                "unreadable",
                (f"{type(err).__name__}: {str(err)[:200]}; the file is not a notebook Jupyter saved"),
            )
            continue
        if untouched(nb):
            a.status, a.checks = "not started", {fn: TODO for fn in visible_checks(nb, aid)}
            continue
        key = cache_key(nb, aid)
        cached = state["runs"].get(aid, {})
        looped_longer = cached.get("result", {}).get("status") == "timed out" and cached.get("timeout", 0) < timeout
        if cached.get("key") == key and not looped_longer:
            _fill(a, cached["result"], cached=True)
        else:
            todo.append((a, key))

    results = _run_copies(todo, root, timeout=timeout, workers=workers, log=log)

    def remember(data: dict) -> None:
        for aid, (key, result) in results.items():
            data["runs"][aid] = {
                "key": key,
                "result": result,
                "timeout": timeout,
                "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }

    if results:
        try:
            later = update_state(root, remember)
            notes += [later] if later else []
        except OSError as err:
            notes.append(f"could not save {STATE_FILE} ({err}); results are not cached")
    return Report(root, lesson_list, work, _next_step(root, lesson_list, work, classroom), notes, classroom)


def _run_copies(
    todo: list[tuple[AssignmentStatus, str]], root: Path, *, timeout: int, workers: int, log: Callable[[str], None]
) -> dict[str, tuple[str, dict]]:
    """Run a copy of each assignment notebook of `todo` in a fresh kernel (`workers` at once) and fill in its
    status; returns what to cache: aid -> (its cache key, the result)."""
    results: dict[str, tuple[str, dict]] = {}
    if not todo:
        return results
    # Two notebooks or more: their kernels are forked from one zygote that imported torch, IPython and the course's
    # checks once (started now, while the first copies are made; stopped at the end unless it served already)
    warm = len(todo) > 1
    started_here = warm and _start_zygote()

    def run(item):
        a, key = item
        log(f"running a copy of {a.path.relative_to(root)} in a fresh kernel ...")
        try:
            result = execute_copy(a.path, a.aid, timeout=timeout, one_thread=workers > 1 and len(todo) > 1, warm=warm)
        except Exception as err:  # noqa: BLE001 - e.g. no kernel could start; reported for this one only
            result = {
                "status": "error",
                "checks": {},
                "problem": f"could not run it: {type(err).__name__}: {str(err)[:200]}",
                "seconds": 0.0,
            }
            key = None  # a kernel that would not start says nothing about the notebook: not cached
        log(f"{a.aid}: {result['status']} in {result.get('seconds', 0):.1f} s")
        return a, key, result

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for a, key, result in pool.map(run, todo):
                _fill(a, result, cached=False)
                if key:
                    results[a.aid] = (key, result)
    finally:
        if started_here:  # stopped and forgotten: the next report starts a new one (a stop on purpose is no failure)
            from twoprim.learner import warm_kernels

            warm_kernels.stop_zygotes()
    return results


def _start_zygote() -> bool:
    """Start this process's zygote (`twoprim.learner.warm_kernels`) unless it runs already (in a Jupyter server, the
    server's); whether it was started here. Its kernels' output goes nowhere: a kernel's log is noise here."""
    from twoprim.learner import warm_kernels

    z = warm_kernels.zygote()
    if z.state() in ("ready", "starting"):
        return False
    z.start(stderr=subprocess.DEVNULL)
    return True


def _fill(a: AssignmentStatus, result: dict, *, cached: bool) -> None:
    a.status, a.checks, a.problem = result["status"], dict(result["checks"]), result.get("problem")
    a.seconds, a.cached = result.get("seconds", 0.0), cached


# ----------------------------------------------------------------------------------------------------------------
# Chart and entry points
# ----------------------------------------------------------------------------------------------------------------


def chart(r: Report):
    """Per assignment: the fraction of visible checks that pass (then, lighter, the answered ones) and the
    self-graded fraction; returns the figure."""
    from matplotlib.figure import Figure

    names = [a.aid for a in r.assignments]
    visible = [a.passed / len(a.checks) if a.checks else 0.0 for a in r.assignments]
    answered = [a.answered / len(a.checks) if a.checks else 0.0 for a in r.assignments]
    graded = [
        a.selfgrade["score"] / a.selfgrade["max_score"] if a.selfgrade and a.selfgrade["max_score"] else 0.0
        for a in r.assignments
    ]
    fig = Figure(figsize=(6.0, 0.35 * len(names) + 1.8))
    ax = fig.subplots()
    ys = range(len(names))
    ax.barh([y - 0.2 for y in ys], visible, height=0.4, label="visible checks passing", color="#4c72b0")
    if any(answered):
        ax.barh(
            [y - 0.2 for y in ys],
            answered,
            left=visible,
            height=0.4,
            color="#a6bddb",
            label="answered, graded " + ("from your submission" if r.classroom else "when you self-grade"),
        )
    if not r.classroom:
        ax.barh([y + 0.2 for y in ys], graded, height=0.4, label="self-graded (hidden included)", color="#55a868")
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction")
    done = sum(lesson.done for lesson in r.lessons)
    ax.set_title(f"lessons run to the end: {done} of {len(r.lessons)}", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=2, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def chart_png(r: Report) -> bytes:
    """The progress chart as PNG bytes (`--chart FILE`)."""
    buffer = io.BytesIO()
    chart(r).savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()


def show(root: Path | None = None, **kwargs) -> None:
    """Display the progress report (tables, next step, chart) in a notebook."""
    from IPython.display import HTML, display

    display(HTML(report(root, log=print, **kwargs)._repr_html_()))


def main(root: Path | None = None, *, timeout: int = CELL_TIMEOUT, chart_to: Path | None = None) -> int:
    """`./course progress`: print the report; with `chart_to` (`--chart FILE`) also write the chart there. Nothing
    else is written: the progress file in the workspace is the one file progress keeps."""
    import sys

    r = report(root, timeout=timeout, log=lambda message: print(message, file=sys.stderr, flush=True))
    print(r.text())
    if chart_to is not None:
        try:
            Path(chart_to).write_bytes(chart_png(r))
            print(f"chart: {chart_to}")
        except OSError as err:
            print(f"chart not written to {chart_to}: {err.strerror}")
            return 1
    return 0
