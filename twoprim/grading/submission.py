"""Grading one submission: check its files, realign its notebook, audit the code the student wrote, run nbgrader's
autograde on it in its own throw-away course folder with a sandboxed kernel, then score every test cell in the
grader from what the kernel recorded (`twoprim.verdicts`). Returns an `Outcome`; never raises for a bad submission.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .. import sandbox, verdicts
from ..audit import audit
from ..nbgrader_cli import COURSE_ID
from .preprocessors import CELL_LOG_ENV, DEFAULT_CELL_TIMEOUT
from .realign import realign

__all__ = ["Outcome", "grade_submission", "MEMORY_LIMIT_BYTES", "CPU_LIMIT_SECONDS", "FILE_SIZE_LIMIT_BYTES"]

# Limits on each submission's processes (the kernel inherits them): the sandbox's, also when run unisolated.
MEMORY_LIMIT_BYTES = sandbox.MEMORY_LIMIT_BYTES
CPU_LIMIT_SECONDS = sandbox.CPU_LIMIT_SECONDS
FILE_SIZE_LIMIT_BYTES = sandbox.FILE_SIZE_LIMIT_BYTES


@dataclass
class Outcome:
    student: str
    status: str = "failed"                  # "graded" or "failed"
    reason: str = ""
    score: float = 0.0
    max_score: float = 0.0
    grades: dict = field(default_factory=dict)     # (notebook, grade_id) -> auto_score
    comments: dict = field(default_factory=dict)   # (notebook, grade_id) -> auto_comment
    timestamp: str | None = None
    autograded_dir: Path | None = None
    seconds: float = 0.0


def _parse_timestamp(text: str):
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(text.strip())
    except Exception:  # noqa: BLE001 - any unparsable timestamp is reported, never fatal
        return None


def _notebook_problem(path: Path) -> str | None:
    """Why a submitted file is not a gradable notebook, or None."""
    try:
        raw = path.read_text()
    except UnicodeDecodeError:
        return f"{path.name} is not a text file (it is not a notebook saved by Jupyter)"
    if not raw.strip():
        return f"{path.name} is empty"
    try:
        json.loads(raw)
    except json.JSONDecodeError as err:
        return (f"{path.name} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); the file is "
                f"truncated or was not saved from Jupyter")
    try:
        nbformat.read(str(path), as_version=4)
    except Exception as err:  # noqa: BLE001
        return f"{path.name} is JSON but not a notebook ({type(err).__name__}: {str(err)[:200]})"
    return None


def _course_config(root: Path) -> str:
    return (root / "grader" / "nbgrader_config.py").read_text()


def grade_submission(aid: str, student: str, *, root: Path, gradebook: Path,
                     released: dict[str, nbformat.NotebookNode], scratch: Path,
                     cell_timeout: int = DEFAULT_CELL_TIMEOUT) -> Outcome:
    """Grade one student's submission of `aid` in its own course folder under `scratch`; each cell may run for
    `cell_timeout` seconds."""
    start = time.monotonic()
    notebooks = list(released)
    out = Outcome(student)
    notes: list[str] = []
    sub_dir = root / "grader" / "submitted" / student / aid

    present = sorted(p.name for p in sub_dir.iterdir()) if sub_dir.is_dir() else []
    missing = [f"{nb}.ipynb" for nb in notebooks if f"{nb}.ipynb" not in present]
    if missing:
        found = ", ".join(present) or "nothing"
        out.reason = (f"missing notebook {', '.join(missing)} in grader/submitted/{student}/{aid}/ (found: {found}); "
                      f"ask the student to submit {', '.join(missing)}")
        return out
    for nb in notebooks:
        problem = _notebook_problem(sub_dir / f"{nb}.ipynb")
        if problem:
            out.reason = f"{problem}; ask the student to resubmit"
            return out
    exchange_files = {"timestamp.txt", "submission_secret.txt"}  # written by nbgrader submit; feedback needs both
    extra = [p for p in present if p not in {f"{nb}.ipynb" for nb in notebooks} | exchange_files]
    if extra:
        notes.append(f"ignored extra files: {', '.join(extra)}")

    course = scratch / student
    grader = course / "grader"
    target = grader / "submitted" / student / aid
    target.mkdir(parents=True)
    (grader / "nbgrader_config.py").write_text(_course_config(root))
    shutil.copytree(root / "solutions" / aid, course / "solutions" / aid)
    shutil.copy(gradebook, grader / "gradebook.db")
    for nb in notebooks:
        submitted = nbformat.read(str(sub_dir / f"{nb}.ipynb"), as_version=4)
        repaired, repairs = realign(submitted, released[nb])
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

    findings = _audit(target, notebooks, released)
    if findings and student not in _trusted():
        out.status = "flagged"
        out.reason = (f"held for review, not run: {'; '.join(findings[:8])}{' …' if len(findings) > 8 else ''}. "
                      f"Read the code; if it is honest, grade it with --trust {student}")
        out.seconds = time.monotonic() - start
        return out
    if findings:
        notes.append(f"trusted by the instructor despite: {'; '.join(findings[:4])}")

    box = scratch / "boxes" / student
    paths = sandbox.prepare_box(box, int(os.environ.get(sandbox.ENV_UID, sandbox.BASE_UID)))
    cell_log = scratch / f"{student}.cell"
    box_env = {sandbox.ENV_BOX: str(box), verdicts.CAPTURE_ENV: str(paths["capture"])}
    os.environ.update(box_env)
    try:
        status, log_text = _run_nbgrader(grader, aid, student, cell_log, cell_timeout)
    finally:
        for name in box_env:
            os.environ.pop(name, None)
    returncode = 0 if status == "ok" else 1

    autograded = grader / "autograded" / student / aid
    db = grader / "gradebook.db"
    last_cell = cell_log.read_text() if cell_log.exists() else None
    if returncode != 0 or not autograded.is_dir():
        out.reason = _nbgrader_failure(log_text, returncode, last_cell)
        out.seconds = time.monotonic() - start
        return out

    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{db}", COURSE_ID) as gb:
        try:
            sub = gb.find_submission(aid, student)
        except MissingEntry:
            out.reason = _nbgrader_failure(log_text, returncode, last_cell)
            return out
        max_points = {}
        for nb in sub.notebooks:
            for grade in nb.grades:
                out.grades[(nb.name, grade.name)] = grade.auto_score
                max_points[(nb.name, grade.name)] = float(grade.max_score)
            for comment in nb.comments:
                out.comments[(nb.name, comment.name)] = comment.auto_comment
        out.max_score = float(sub.max_score)
    notes[:0] = _judge_in_grader(aid, root, autograded, notebooks, paths["capture"], out, max_points)
    out.score = float(sum(v for v in out.grades.values() if v is not None))
    notes[:0] = _execution_notes(autograded, notebooks)
    out.status = "graded"
    out.reason = "; ".join(notes) or "all cells ran"
    out.autograded_dir = autograded
    out.seconds = time.monotonic() - start
    return out


def _audit(target: Path, notebooks: list[str], released: dict[str, nbformat.NotebookNode]) -> list[str]:
    """`audit` of every cell the student wrote: answer cells and cells they added."""
    findings = []
    for name in notebooks:
        given = {c.metadata.get("nbgrader", {}).get("grade_id") for c in released[name].cells
                 if not c.metadata.get("nbgrader", {}).get("solution")} - {None}
        nb = nbformat.read(str(target / f"{name}.ipynb"), as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade_id") in given:
                continue
            where = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {i + 1}"
            findings += [f"{where} {line}" for line in audit(cell.source)]
    return findings


def _trusted() -> set[str]:
    return set(filter(None, os.environ.get("TWOPRIM_TRUSTED", "").split(",")))


def _judge_in_grader(aid: str, root: Path, autograded: Path, notebooks: list[str], capture: Path, out: Outcome,
                     max_points: dict) -> list[str]:
    """Score every graded test cell by running its trusted source here, in the grader, on what the kernel
    recorded (`verdicts`); the autograded notebook shows these verdicts in place of the kernel's outputs."""
    replay = verdicts.Replay(capture)
    for name in notebooks:
        source = nbformat.read(str(root / "solutions" / aid / f"{name}.ipynb"), as_version=4)
        learner: set[str] = set()
        for cell in source.cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                learner |= verdicts.defined_names(cell.source)
        path = autograded / f"{name}.ipynb"
        nb = nbformat.read(str(path), as_version=4)
        shown = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells if c.cell_type == "code"}
        for cell in source.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            gid = meta["grade_id"]
            verdict = verdicts.judge_cell(gid, cell.source, replay, learner)
            out.grades[(name, gid)] = max_points.get((name, gid), float(meta.get("points", 0))) if verdict.passed \
                else 0.0
            if gid in shown:
                shown[gid].outputs = [nbformat.v4.new_output("stream", name="stdout", text=verdict.text)
                                      if verdict.passed else
                                      nbformat.v4.new_output("error", ename="CheckFailure", evalue=verdict.text,
                                                             traceback=verdict.text.splitlines())]
        nbformat.write(nb, str(path))
    return replay.problems[:3]


def _run_nbgrader(grader: Path, aid: str, student: str, cell_log: Path, cell_timeout: int) -> tuple[str, str]:
    """Autograde one student in the course folder above `grader`, in this process (a grading worker: nbgrader is
    imported once per worker, not once per student). Returns ("ok" | "error", the log)."""
    from nbgrader.apps.api import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(grader)).load_config()
    config.Execute.timeout = cell_timeout
    kernel = os.environ.get("TWOPRIM_GRADING_KERNEL")
    if kernel:
        config.Execute.kernel_name = kernel
    box = os.environ.get(sandbox.ENV_BOX)
    if box:  # Unix sockets in the box: they reach into the sandbox, and no TCP ports are raced for between workers
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(Path(box) / "run" / "kernel")
    os.environ[CELL_LOG_ENV] = str(cell_log)
    cwd = os.getcwd()
    os.chdir(grader)
    try:
        result = NbGraderAPI(config=config).autograde(aid, student, force=True, create=True)
    finally:
        os.chdir(cwd)
        os.environ.pop(CELL_LOG_ENV, None)
    log = result.get("log", "") + "\n" + result.get("error", "")
    return ("ok" if result.get("success") else "error"), log


def _execution_notes(autograded: Path, notebooks: list[str]) -> list[str]:
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
        failed, timed_out, died, errors = [], [], [], []
        for i, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            for o in cell.get("outputs", []):
                if o.get("output_type") != "error":
                    continue
                ename = o.get("ename", "")
                if ename == "CellTimeoutError":
                    timed_out.append(meta.get("grade_id") or f"cell {i}")
                elif ename == "DeadKernelError" or "DeadKernel" in " ".join(o.get("traceback", [])):
                    died.append(meta.get("grade_id") or f"cell {i}")
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
                note += (" (the kernel cannot import the course package: a .venv built in another folder, from a "
                         "course that was copied or moved, does this, and running ./course once repairs it)")
            elif gid and gid.endswith("-setup"):
                note += " (the setup cell: every check after it fails because of this, not because of the answers)"
            notes.append(note)
        if len(errors) > 3:
            notes.append(f"{len(errors) - 3} more cells stopped with an error")
        if died:
            notes.append(f"the kernel died in {died[0]} (a crash, os._exit or running out of memory); later cells "
                         f"did not run")
        if timed_out:
            notes.append(f"{', '.join(timed_out)} ran past the time limit and was interrupted")
        if failed:
            notes.append(f"failing checks: {', '.join(failed)}")
    return notes


_FAILURES = [
    (r"CellTimeoutError", "{cell} kept running past its time limit and ignored the interrupt (a loop that catches "
                          "KeyboardInterrupt?); the notebook could not finish"),
    (r"Kernel died|DeadKernelError", "the kernel died while running {cell} (a crash, os._exit() or running out of "
                                     "memory); the cells after it could not run"),
    (r"Duplicate grade id|duplicate grade id", "two cells share a grade id; the student should delete the copy and "
                                                "resubmit"),
    (r"does not have a grade_id|grade_id is empty|Notebook failed to validate|nbgrader metadata may be corrupted",
     "the notebook's nbgrader metadata is corrupted beyond repair; the student should start from a fresh copy of the "
     "assignment and paste their answers in"),
]


def _nbgrader_failure(log_text: str, returncode: int, last_cell: str | None = None) -> str:
    cell = last_cell or "a cell"
    for pattern, reason in _FAILURES:
        if re.search(pattern, log_text):
            return reason.format(cell=cell)
    if returncode < 0:
        return f"the grading process was killed by signal {-returncode} (CPU or memory limit) while running {cell}"
    errors = [l.split("]", 1)[-1].strip() for l in log_text.splitlines() if "ERROR" in l]
    detail = errors[-1][:300] if errors else f"exit code {returncode}"
    return f"nbgrader could not grade it: {detail}"
