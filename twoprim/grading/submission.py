"""Grading one submission, as a task a worker runs: check its files, realign its notebook, audit the code the
student wrote, run nbgrader's autograde on it in a throw-away course folder with a sandboxed kernel, then score
every test cell here, in the grader, from what the kernel recorded (`twoprim.core.verdicts`).

A task (`make_task`) carries everything it needs as data: the submission's files, the released and source
notebooks, the course's nbgrader configuration and an assignment-only SQLite gradebook to run nbgrader in. So a
worker on another machine needs the course's environment and the sandbox's tools, and nothing of the course
folder: not the gradebook, not the other students' work. `grade_task` returns an `Outcome` (with the autograded
notebooks as bytes) and never raises for a bad submission; only the instructor's process writes the results.

What is the student's and what is the grader's: nbgrader failing because of the notebook (a cell past its limit
whose kernel would not stop, a kernel that died of the student's doing, which `forkserver.kernel_death` decides from
what the forkserver reported) fails the submission with that reason; anything else (a grader process that died
under the kernel, a kernel that never answered, an error of the grader's own) is `NOT_GRADED`, with nbgrader's log
kept in `Outcome.log` for the instructor, and graded again by the next run.

Why this module is long: one submission's whole grading, step by step (its files, realign, the audit, nbgrader with a
sandboxed kernel, judging in the grader), and for each step the ways it can fail and whose fault each is.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from twoprim.core import verdicts
from twoprim.core.catalog import checks_module_name
from twoprim.grading import forkserver, kernels, nbgrader_cli, sandbox
from twoprim.grading.audit import audit
from twoprim.grading.gradebook import scratch_gradebooks
from twoprim.grading.preprocessors import (
    CELL_LOG_ENV,
    CPU_LIMIT_LOG_ENV,
    DEFAULT_CELL_TIMEOUT,
    KERNEL_UID_ENV,
    TIMING_ENV,
)
from twoprim.grading.realign import NotTheAssignment, realign
from twoprim.grading.submitted import (
    BOM,
    upgraded_from,
)
from twoprim.grading.submitted import (
    missing_reason as _missing_reason,
)
from twoprim.grading.submitted import (
    notebook_text as _notebook_text,
)

__all__ = [
    "Outcome",
    "NOT_GRADED",
    "make_task",
    "grade_task",
    "execution_notes",
    "MEMORY_LIMIT_BYTES",
    "CPU_LIMIT_SECONDS",
    "FILE_SIZE_LIMIT_BYTES",
    "SUBMISSION_WALL_SECONDS",
]

# Limits on each submission's processes (the kernel inherits them): the sandbox's, also when run unisolated.
MEMORY_LIMIT_BYTES = sandbox.MEMORY_LIMIT_BYTES
CPU_LIMIT_SECONDS = sandbox.CPU_LIMIT_SECONDS
FILE_SIZE_LIMIT_BYTES = sandbox.FILE_SIZE_LIMIT_BYTES
SUBMISSION_WALL_SECONDS = 900  # one submission, all its cells; past that its kernel is killed
# A fault of the grader (a worker or the scheduler lost, the grader's own error): no grade is written for it, an
# earlier one stays, and the next run grades it again. Never a student's 0.
NOT_GRADED = "not graded"


@dataclass
class Outcome:
    """One submission's grading: its status and reason, score, each test's grade and comment."""

    student: str
    status: str = "failed"  # "graded", "failed", "flagged" (held by the audit) or NOT_GRADED
    reason: str = ""
    score: float = 0.0
    max_score: float = 0.0
    grades: dict = field(default_factory=dict)  # (notebook, grade_id) -> auto_score
    comments: dict = field(default_factory=dict)  # (notebook, grade_id) -> auto_comment
    timestamp: str | None = None
    autograded: dict = field(default_factory=dict)  # file name -> bytes of grader/autograded/<student>/<aid>/
    seconds: float = 0.0
    worker: str = ""  # which worker graded it (host and process)
    phases: dict = field(default_factory=dict)  # seconds per phase of grading (`scripts/profile_grading.py`)
    time_limit: str = ""  # a time limit this submission ran into (cell or whole), in words
    limit_by_cpu: bool = False  # every cell limit it ran into was judged on its kernel's CPU time
    expected_given: int = 0  # expected values the run computed once and handed it (`oracle`)
    log: str = ""  # the grader's own failure (NOT_GRADED): its log and traceback, kept for
    # the instructor in grader/reports/<aid>-not-graded/<student>.log


def make_task(
    aid: str,
    student: str,
    files: dict[str, bytes],
    *,
    root: Path,
    released: dict,
    cell_timeout: int = DEFAULT_CELL_TIMEOUT,
    wall_seconds: float = SUBMISSION_WALL_SECONDS,
    trusted: bool = False,
    unisolated: bool = False,
    kernel_threads: int | None = None,
    refused: dict[str, str] | None = None,
) -> dict:
    """One submission as a task for `grade_task` (plain data, sent to any worker). The snapshot gradebook is
    added by the batch, once for every task (`snapshot`). `refused`: what sat in the submission folder that is not
    a regular file (name -> what it is; `gradebook.read_submission`), never read."""
    source = root / "solutions" / aid
    return {
        "aid": aid,
        "student": student,
        "files": files,
        "refused": dict(refused or {}),
        "released": {n: nbformat.writes(nb) for n, nb in released.items()},
        "source": {
            str(p.relative_to(source)): p.read_bytes()
            for p in sorted(source.rglob("*"))
            if p.is_file() and ".ipynb_checkpoints" not in p.parts
        },
        "config": (root / "grader" / "nbgrader_config.py").read_text(),
        "cell_timeout": cell_timeout,
        "wall_seconds": wall_seconds,
        "trusted": trusted,
        "unisolated": unisolated,
        "kernel_threads": kernel_threads,
    }


def _parse_timestamp(text: str):
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(text.strip())
    except Exception:  # noqa: BLE001 - any unparsable timestamp is reported, never fatal
        return None


def grade_task(task: dict, snapshot: bytes | None = None, expect: Callable[[str, str], None] | None = None) -> Outcome:
    """Grade one submission (a task from `make_task`; `snapshot`: the assignment-only SQLite gradebook nbgrader
    runs in, sent once to every worker) in this worker process; never raises for a bad submission. `expect(grade_id,
    code)` is called before each test cell is judged (the run's expected values for that cell, `oracle.Expected`:
    the judge waits for those it needs, and only when it needs them)."""
    if snapshot is not None:
        task = {**task, "snapshot": snapshot}
    start = time.monotonic()
    try:
        # nbgrader's log and SQLAlchemy's notes stay out of the instructor's terminal: what matters is in the outcome
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            out = _grade(task, expect)
    except Exception as err:  # noqa: BLE001 - a fault of the grader, never the student's: not graded, said why
        import traceback

        out = Outcome(
            task["student"],
            status=NOT_GRADED,
            reason=f"the grader itself failed: {type(err).__name__}: {' '.join(str(err).split())[:300]}",
            log=traceback.format_exc(),
        )
    out.worker = kernels.worker_name()
    out.seconds = time.monotonic() - start
    return out


def _grade(task: dict, expect: Callable[[str, str], None] | None = None) -> Outcome:
    aid, student = task["aid"], task["student"]
    released = {n: nbformat.reads(t, as_version=4) for n, t in task["released"].items()}
    notebooks = list(released)
    out = Outcome(student)
    notes: list[str] = []
    name = uuid.uuid4().hex[:8]  # not the student's name: any length, any characters
    work, box = kernels.scratch() / "work" / name, kernels.scratch() / "boxes" / name
    try:
        with scratch_gradebooks(work):  # the snapshot's copy nbgrader grades in, thrown away with `work`
            return _grade_in(work, box, task, aid, student, released, notebooks, out, notes, expect)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(box, ignore_errors=True)


def _grade_in(
    work: Path,
    box: Path,
    task: dict,
    aid: str,
    student: str,
    released: dict,
    notebooks: list[str],
    out: Outcome,
    notes: list[str],
    expect: Callable[[str, str], None] | None = None,
) -> Outcome:
    """Grade one submission in `work`: take its files in, lay out a course around them, audit the student's code,
    run nbgrader in the sandbox, then judge what the kernel recorded; `out` says how far it got and why."""
    phase = time.monotonic()
    sub_dir = _receive(work, task, notebooks, out, notes)
    if sub_dir is None:
        return out
    try:
        grader = _lay_out(work / "course", sub_dir, task, aid, student, released, notebooks, out, notes)
    except NotTheAssignment as err:
        out.reason = f"{err}; ask the student to submit their {aid} notebook"
        return out
    target = grader / "submitted" / student / aid
    findings = _audit(target, notebooks, released)
    out.phases["prepare"] = time.monotonic() - phase
    if findings and not task["trusted"]:
        out.status = "flagged"
        out.reason = (
            f"held for review, not run: {'; '.join(findings[:8])}{' …' if len(findings) > 8 else ''}. "
            f"Read the code; if it is honest, grade it with --trust {student}"
        )
        return out
    if findings:
        notes.append(f"trusted by the instructor despite: {'; '.join(findings[:4])}")
    status, log_text, fired, capture = _run_in_box(work, box, grader, task, aid, student, out)
    autograded = grader / "autograded" / student / aid
    cell_log = work / "cell.log"
    last_cell = cell_log.read_text() if cell_log.exists() else None
    if fired:
        out.time_limit = f"the submission's limit of {task['wall_seconds']:.0f} s"
        out.reason = (
            f"grading took longer than {task['wall_seconds']:.0f} s and was stopped in {last_cell or 'a cell'}; "
            f"look for an infinite loop in the notebook"
        )
        return out
    death = None if task["unisolated"] else kernel_death(work)
    if status != "ok" or not autograded.is_dir():
        return _not_finished(out, log_text, 0 if status == "ok" else 1, last_cell, task["cell_timeout"], death)
    max_points = _read_grades(grader / "gradebook.db", aid, student, out)
    if max_points is None:
        return _not_finished(out, log_text, 1, last_cell, task["cell_timeout"], death)
    phase = time.monotonic()
    notes[:0] = _judge_in_grader(
        aid, work / "course", autograded, notebooks, capture, out, max_points, task["cell_timeout"], expect
    )
    out.phases["verdicts"] = time.monotonic() - phase
    out.score = float(sum(v for v in out.grades.values() if v is not None))
    notes[:0] = execution_notes(autograded, notebooks, task["cell_timeout"])
    if any(" ran past its time limit" in n or " ran past their time limit" in n for n in notes):
        out.time_limit = f"the cell limit of {task['cell_timeout']} s"
    out.status = "graded"
    out.reason = "; ".join(notes) or "all cells ran"
    out.autograded = {p.name: p.read_bytes() for p in sorted(autograded.iterdir()) if p.is_file()}
    return out


def _receive(work: Path, task: dict, notebooks: list[str], out: Outcome, notes: list[str]) -> Path | None:
    """The submission's files written to work/received/, each notebook read as UTF-8 text; None (with
    `out.reason`) when a notebook is missing or unreadable. What was ignored goes to `notes`."""
    sub_dir = work / "received"
    sub_dir.mkdir(parents=True)
    for name, data in task["files"].items():
        (sub_dir / Path(name).name).write_bytes(data)
    present = sorted(task["files"])
    missing = [f"{nb}.ipynb" for nb in notebooks if f"{nb}.ipynb" not in present]
    if missing:
        out.reason = _missing_reason(task, missing, present)
        return None
    for nb in notebooks:
        text, problem = _notebook_text(f"{nb}.ipynb", task["files"][f"{nb}.ipynb"])
        if problem or text is None:
            out.reason = f"{problem or f'{nb}.ipynb could not be read'}; ask the student to resubmit"
            return None
        if task["files"][f"{nb}.ipynb"].startswith(BOM):
            notes.append(f"{nb}.ipynb starts with a UTF-8 byte-order mark; read without it")
        if (version := upgraded_from(task["files"][f"{nb}.ipynb"])) is not None:
            notes.append(f"{nb}.ipynb is a notebook of format version {version}; upgraded to version 4 to grade it")
        (sub_dir / f"{nb}.ipynb").write_text(text)
    exchange_files = {"timestamp.txt", "submission_secret.txt"}  # written by nbgrader submit; feedback needs both
    extra = [p for p in present if p not in {f"{nb}.ipynb" for nb in notebooks} | exchange_files]
    if extra:
        notes.append(f"ignored extra files: {', '.join(extra)}")
    if task.get("refused"):
        notes.append(
            "ignored, never read (not regular files): "
            + ", ".join(f"{n} ({what})" for n, what in sorted(task["refused"].items()))
        )
    return sub_dir


def _lay_out(
    course: Path,
    sub_dir: Path,
    task: dict,
    aid: str,
    student: str,
    released: dict,
    notebooks: list[str],
    out: Outcome,
    notes: list[str],
) -> Path:
    """A course of its own for this one submission: configuration, the assignment's source, a copy of the
    gradebook, and the submission realigned to the released cells, with its secret and timestamp; its grader/."""
    grader = course / "grader"
    target = grader / "submitted" / student / aid
    target.mkdir(parents=True)
    (grader / "nbgrader_config.py").write_text(task["config"])
    for rel, data in task["source"].items():
        path = course / "solutions" / aid / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (grader / "gradebook.db").write_bytes(task["snapshot"])
    for nb in notebooks:
        submitted = nbformat.read(str(sub_dir / f"{nb}.ipynb"), as_version=4)
        try:
            repaired, repairs = realign(submitted, released[nb])
        except NotTheAssignment as err:
            raise NotTheAssignment(f"{nb}.ipynb cannot be graded as {aid}: {err}") from None
        nbformat.write(repaired, str(target / f"{nb}.ipynb"))
        notes.extend(repairs)
    if (sub_dir / "submission_secret.txt").is_file():
        shutil.copy(sub_dir / "submission_secret.txt", target / "submission_secret.txt")
    stamp_file = sub_dir / "timestamp.txt"
    if stamp_file.is_file():
        stamp = stamp_file.read_text(errors="replace")
        if _parse_timestamp(stamp) is None:
            notes.append(f"timestamp.txt is unreadable ({stamp.strip()[:40]!r}); graded without a submission time")
        else:
            shutil.copy(stamp_file, target / "timestamp.txt")
            out.timestamp = stamp.strip()
    else:
        notes.append("no timestamp.txt; graded without a submission time")
    return grader


def _run_in_box(work: Path, box: Path, grader: Path, task: dict, aid: str, student: str, out: Outcome):
    """nbgrader autograde of the laid-out submission, its kernel in the sandbox (forked from a warm forkserver
    unless unisolated), under the submission's wall-clock watchdog: (status, log, whether the watchdog fired, the
    folder the kernel's checks recorded into). The phases' times go to `out.phases`."""
    phase = time.monotonic()
    kernel = kernels.kernelspec_name(task["unisolated"])
    warm = None if task["unisolated"] else kernels.warm_forkserver(task.get("kernel_threads"))
    out.phases["forkserver"] = time.monotonic() - phase
    phase = time.monotonic()
    with sandbox.claimed_uid() as uid:
        paths = sandbox.prepare_box(box, uid)
        box_env = {verdicts.CAPTURE_ENV: str(paths["capture"]), CPU_LIMIT_LOG_ENV: str(work / "cpu-limit.log")}
        if uid is not None and warm is not None:  # the kernel's own uid: its CPU time is what its cells are timed on
            box_env[KERNEL_UID_ENV] = str(uid)
        if warm is not None:
            box_env.update(
                {
                    sandbox.ENV_BOX: str(box),
                    sandbox.ENV_UID: str(uid or ""),
                    forkserver.ENV_SOCKET: str(warm.socket),
                    forkserver.ENV_END: str(work / KERNEL_END),
                    forkserver.ENV_MODULE: f"twoprim.{checks_module_name(aid)}",
                }
            )
        if task.get("kernel_threads"):
            box_env.update({v: str(task["kernel_threads"]) for v in sandbox.THREAD_VARIABLES})
        saved = {k: os.environ.get(k) for k in box_env}
        os.environ.update(box_env)
        watchdog = kernels.Watchdog(task["wall_seconds"], spare=warm.pids() if warm else set())
        try:
            status, log_text = _run_nbgrader(
                grader, aid, student, work / "cell.log", task["cell_timeout"], kernel, box if warm is not None else None
            )
        finally:
            watchdog.cancel()
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    out.phases.update(kernels.timings(work / "timing.log", phase, time.monotonic()))
    judged = (work / "cpu-limit.log").read_text().split() if (work / "cpu-limit.log").is_file() else []
    out.limit_by_cpu = bool(judged) and set(judged) == {"cpu"}
    return status, log_text, watchdog.fired, paths["capture"]


def _read_grades(db: Path, aid: str, student: str, out: Outcome) -> dict | None:
    """nbgrader's automatic grades and comments of the submission into `out`; each graded cell's maximum points,
    or None when the gradebook has no such submission (nbgrader failed before recording it)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{db}", "two-primitives") as gb:
        try:
            sub = gb.find_submission(aid, student)
        except MissingEntry:
            return None
        max_points = {}
        for nb in sub.notebooks:
            for grade in nb.grades:
                out.grades[(nb.name, grade.name)] = grade.auto_score
                max_points[(nb.name, grade.name)] = float(grade.max_score)
            for comment in nb.comments:
                out.comments[(nb.name, comment.name)] = comment.auto_comment
        out.max_score = float(sub.max_score or 0.0)
    return max_points


def _audit(target: Path, notebooks: list[str], released: dict[str, nbformat.NotebookNode]) -> list[str]:
    """`audit` of every cell the student wrote: answer cells and cells they added."""
    findings = []
    for name in notebooks:
        given = {
            c.metadata.get("nbgrader", {}).get("grade_id")
            for c in released[name].cells
            if not c.metadata.get("nbgrader", {}).get("solution")
        } - {None}
        nb = nbformat.read(str(target / f"{name}.ipynb"), as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade_id") in given:
                continue
            where = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {i + 1}"
            findings += [f"{where} {line}" for line in audit(cell.source)]
    return findings


TIMED_OUT = "CellTimeoutError"
KERNEL_END = "kernel-end.jsonl"  # in a submission's work folder: what its kernels' launchers saw (`forkserver._note`)


def kernel_death(work: Path) -> tuple[str, str]:
    """("student" | "grader", why) for a sandboxed kernel that died in a cell (`forkserver.kernel_death`)."""
    import json

    path = work / KERNEL_END
    records = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return forkserver.kernel_death(
        records,
        cpu_limit=sandbox.CPU_LIMIT_SECONDS,
        memory_limit=sandbox.MEMORY_LIMIT_BYTES,
        file_limit=sandbox.FILE_SIZE_LIMIT_BYTES,
    )


def timeout_words(index: int, limit: int | None) -> str:
    """What a student reads where a cell ran out of time (`index`: the cell's position, from 0)."""
    limit_text = f" of {limit} s" if limit else ""
    return (
        f"cell {index + 1} ran past its time limit{limit_text} and was interrupted: an endless loop, or "
        f"work far slower than the exercise needs; the cells after it ran on"
    )


def _explain_timeouts(nb: nbformat.NotebookNode, limit: int | None) -> set[int]:
    """Every cell that ran out of time says so in words, with its number and the limit (nbclient's own output says
    only 'No reply from kernel before timeout'); returns their positions."""
    found = set()
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if o.get("output_type") == "error" and o.get("ename") == TIMED_OUT:
                o["evalue"] = timeout_words(i, limit)
                o["traceback"] = [f"{TIMED_OUT}: {o['evalue']}"]
                found.add(i)
        if i in found:  # the KeyboardInterrupt the limit's interrupt raised is the same event: said once, as the limit
            cell.outputs = [
                o
                for o in cell.outputs
                if not (o.get("output_type") == "error" and o.get("ename") == "KeyboardInterrupt")
            ]
    return found


def _judge_in_grader(
    aid: str,
    course: Path,
    autograded: Path,
    notebooks: list[str],
    capture: Path,
    out: Outcome,
    max_points: dict,
    cell_timeout: int | None = None,
    expect: Callable[[str, str], None] | None = None,
) -> list[str]:
    """Score every graded test cell by running its trusted source here, in the grader, on what the kernel
    recorded (`verdicts`); the autograded notebook shows these verdicts in place of the kernel's outputs (and, for
    a check that ran out of time, that first, with the cell's number and its limit)."""
    replay = verdicts.Replay(capture)
    for name in notebooks:
        source = nbformat.read(str(course / "solutions" / aid / f"{name}.ipynb"), as_version=4)
        path = autograded / f"{name}.ipynb"
        nb = nbformat.read(str(path), as_version=4)
        timed_out = _explain_timeouts(nb, cell_timeout)
        position = {id(c): i for i, c in enumerate(nb.cells)}
        shown = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells if c.cell_type == "code"}
        for gid, code, points, learner in verdicts.graded_cells(source):
            if expect is not None:  # the run's expected values of this cell, if it has them (`oracle.Expected`)
                expect(gid, code)
            verdict = verdicts.judge_cell(gid, code, replay, set(learner))
            out.grades[(name, gid)] = max_points.get((name, gid), points) if verdict.passed else 0.0
            if gid in shown:
                i = position[id(shown[gid])]
                if i in timed_out and not verdict.passed:  # the time limit first: it is why no result came back
                    text = f"✘ {gid}: {timeout_words(i, cell_timeout)}.\n{verdict.text}"
                    shown[gid].outputs = [
                        nbformat.v4.new_output("error", ename=TIMED_OUT, evalue=text, traceback=text.splitlines())
                    ]
                    continue
                shown[gid].outputs = [
                    nbformat.v4.new_output("stream", name="stdout", text=verdict.text)
                    if verdict.passed
                    else nbformat.v4.new_output(
                        "error", ename="CheckFailure", evalue=verdict.text, traceback=verdict.text.splitlines()
                    )
                ]
        fresh = path.with_name(f".{path.name}.verdicts")  # nbgrader leaves the autograded file read-only
        nbformat.write(nb, str(fresh))
        os.replace(fresh, path)
    return replay.problems[:3]


def _run_nbgrader(
    grader: Path, aid: str, student: str, cell_log: Path, cell_timeout: int, kernel: str | None, box: Path | None
) -> tuple[str, str]:
    """Autograde one student in the course folder above `grader`, in this process (a grading worker imports nbgrader
    once, not once per student), on the snapshot gradebook there. Returns ("ok" | "error", the log)."""
    from nbgrader.apps.api import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    nbgrader_cli.checked_schema_once()  # each graded cell's metadata schema checked once per worker, not per cell
    config = PyFileConfigLoader("nbgrader_config.py", path=str(grader)).load_config()
    config.CourseDirectory.db_url = f"sqlite:///{grader / 'gradebook.db'}"
    config.Execute.timeout = cell_timeout
    # after a cell's reply, its output may take a while to arrive on a loaded machine (a notebook that prints
    # hundreds of megabytes): the same limit as the cell's, not nbclient's 4 s, before the kernel is judged stuck
    config.Execute.iopub_timeout = max(4, cell_timeout)
    # the cell limit judged on the kernel's CPU time where the grader sees it (`execute.CpuTimedExecute`)
    config.Autograde.autograde_preprocessors = [
        "twoprim.grading.execute.CpuTimedExecute" if p == "nbgrader.preprocessors.Execute" else p
        for p in config.Autograde.autograde_preprocessors
    ]
    if kernel:
        config.Execute.kernel_name = kernel
    if box:  # Unix sockets in the box: they reach into the sandbox, and no TCP ports are raced for between workers
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(box / "run" / "kernel")
    os.environ[CELL_LOG_ENV] = str(cell_log)
    os.environ[TIMING_ENV] = str(cell_log.with_name("timing.log"))
    cwd = os.getcwd()
    os.chdir(grader)
    try:
        result = NbGraderAPI(config=config).autograde(aid, student, force=True, create=True)
    finally:
        os.chdir(cwd)
        os.environ.pop(CELL_LOG_ENV, None)
        os.environ.pop(TIMING_ENV, None)
    log = f"{result.get('log') or ''}\n{result.get('error') or ''}"
    return ("ok" if result.get("success") else "error"), log


def execution_notes(autograded: Path, notebooks: list[str], cell_timeout: int | None = None) -> list[str]:
    """What went wrong while the notebook ran, in an instructor's words (from the autograded notebook). First an
    error in a cell that is neither a check nor an answer (the setup cell, another given cell, a cell the student
    added), with its cell and message: every check that needs what that cell defines fails because of it, so it is
    what to fix first. Then a kernel that died, cells that ran past the time limit, and the failing checks."""
    notes = []
    for name in notebooks:
        path = autograded / f"{name}.ipynb"
        if not path.is_file():
            continue
        nb = nbformat.read(str(path), as_version=4)
        failed, timed_out, died, errors, memory = [], [], [], [], []
        for i, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            for o in cell.get("outputs", []):
                if o.get("output_type") != "error":
                    continue
                ename = o.get("ename", "")
                where = f"{meta['grade_id']} (cell {i + 1})" if meta.get("grade_id") else f"cell {i + 1}"
                if ename == TIMED_OUT:
                    timed_out.append(where)
                    if meta.get("grade") and not meta.get("solution"):
                        failed.append(meta.get("grade_id"))
                elif ename == "DeadKernelError" or "DeadKernel" in " ".join(o.get("traceback", [])):
                    died.append(where)
                elif ename == "MemoryError":  # the student's allocation refused under the limit, wherever it was
                    memory.append(where)
                    if meta.get("grade") and not meta.get("solution"):
                        failed.append(meta.get("grade_id"))
                elif meta.get("grade") and not meta.get("solution"):
                    failed.append(meta.get("grade_id"))
                elif not meta.get("solution") and not str(meta.get("grade_id", "")).endswith("-hints"):
                    # the setup cell, another given cell or one the student added: what the checks after it need.
                    # (An answer cell's error shows in its own checks; a hint cell defines nothing a check needs.)
                    errors.append((i, meta.get("grade_id"), ename, str(o.get("evalue", ""))))
        for i, gid, ename, evalue in errors[:3]:
            first = next((line.strip() for line in evalue.splitlines() if line.strip()), "")
            where = f"{gid} (cell {i + 1})" if gid else f"cell {i + 1}"
            note = f"error in {where}: {ename}: {first}"[:400].replace("; ", ", ")
            if ename in ("ModuleNotFoundError", "ImportError") and re.search(r"'twoprim(\.\w+)*'", first):
                note += (
                    " (the kernel cannot import the course package: a .venv built in another folder, from a "
                    "course that was copied or moved, does this, and running ./course once repairs it)"
                )
            elif gid and gid.endswith("-setup"):
                note += " (the setup cell: every check after it fails because of this, not because of the answers)"
            notes.append(note)
        if len(errors) > 3:
            notes.append(f"{len(errors) - 3} more cells stopped with an error")
        if died:
            notes.append(
                f"the kernel died in {died[0]} (a crash, os._exit or running out of memory); later cells did not run"
            )
        if memory:
            notes.append(
                f"{', '.join(memory)} ran out of memory (MemoryError: a kernel's address space is limited "
                f"to {MEMORY_LIMIT_BYTES / 2**30:.0f} GiB)"
            )
        if timed_out:
            limit = f" of {cell_timeout} s" if cell_timeout else ""
            notes.append(
                f"{', '.join(timed_out)} ran past {'its' if len(timed_out) == 1 else 'their'} time "
                f"limit{limit} and {'was' if len(timed_out) == 1 else 'were'} interrupted"
            )
        if failed:
            notes.append(f"failing checks: {', '.join(failed)}")
    return notes


_FAILURES = [
    (
        r"Timeout waiting for execute reply",
        "{cell} ran past its time limit{limit} and was interrupted, and its kernel "
        "had not stopped {grace} s after the interrupt; the notebook could not "
        "finish",
    ),
    (
        r"CellTimeoutError",
        "{cell} sent more output than the grader could take in before its time limit{limit}; "
        "the notebook could not finish",
    ),
    (
        r"Kernel died|DeadKernelError",
        "the kernel died while running {cell} (a crash, os._exit() or running out of "
        "memory); the cells after it could not run",
    ),
    (
        r"Duplicate grade id|duplicate grade id",
        "two cells share a grade id; the student should delete the copy and resubmit",
    ),
    (
        r"does not have a grade_id|grade_id is empty|Notebook failed to validate|nbgrader metadata may be corrupted",
        "the notebook's nbgrader metadata is corrupted beyond repair; the student should start from a fresh copy of "
        "the assignment and paste their answers in",
    ),
]
_BEFORE_ANY_CELL = r"Kernel died before replying to kernel_info|Kernel didn't respond in"  # no student code ran yet


def _not_finished(
    out: Outcome,
    log_text: str,
    returncode: int,
    last_cell: str | None,
    cell_timeout: int,
    death: tuple[str, str] | None = None,
) -> Outcome:
    """nbgrader did not finish grading: a failure the notebook causes is the student's (failed, said why); any other
    is the grader's own (`NOT_GRADED`: tried again, never a grade), e.g. an error in the grader's preprocessors, a
    kernel that died before any of the notebook's code ran, or a grader process (forkserver, launcher) that died
    under a running kernel (`death`, from `kernel_death`). The grader's own failures keep nbgrader's log, traceback
    included, in `out.log` for the instructor."""
    cell = last_cell or "a cell"
    if re.search(_BEFORE_ANY_CELL, log_text):
        reason = None
        why = (
            "the kernel did not start: it died or stayed silent before any cell ran, so none of the student's "
            "code had run"
        )
        if death is not None and death[0] == "grader":
            why += f" ({death[1]})"
    elif (
        death is not None
        and re.search(r"Kernel died|DeadKernelError", log_text)
        and not re.search(r"Timeout waiting for execute reply", log_text)
    ):
        whose, words = death
        reason = (
            f"the kernel died while running {cell}: {words}; the cells after it could not run"
            if whose == "student"
            else None
        )
        why = f"{words}, while the kernel ran {cell}; not counted against the student"
    else:
        reason = _nbgrader_failure(log_text, returncode, last_cell, cell_timeout)
        why = None
    if reason is None:
        out.status = NOT_GRADED
        if why is None:
            lines = [line.strip() for line in log_text.splitlines() if line.strip()]
            raised = [  # a traceback's last line
                line
                for line in lines
                if re.match(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?::\s\S|$)", line)
                and not line.startswith("Traceback")
                and "NbGrader" not in line
            ]
            errors = raised or [line.split("]", 1)[-1].strip() for line in lines if "ERROR" in line]
            last = (errors or [f"exit code {returncode}"])[-1][:300]
            why = f"the grader itself failed while nbgrader ran the notebook: {last}"
        reason = why
        out.log = log_text
    if "CellTimeoutError" in log_text:
        out.time_limit = f"the cell limit of {cell_timeout} s"
    out.reason = reason
    return out


def _nbgrader_failure(
    log_text: str, returncode: int, last_cell: str | None = None, cell_timeout: int | None = None
) -> str | None:
    """Why a notebook made nbgrader fail, in an instructor's words; None when nothing says the notebook did."""
    cell = last_cell or "a cell"
    for pattern, reason in _FAILURES:
        if re.search(pattern, log_text):
            return reason.format(
                cell=cell, limit=f" of {cell_timeout} s" if cell_timeout else "", grace=max(4, cell_timeout or 0)
            )
    if returncode < 0:
        return f"the grading process was killed by signal {-returncode} (CPU or memory limit) while running {cell}"
    return None
