"""Classroom grading: parallel, isolated autograde on top of nbgrader, with reports an instructor can act on.

`autograde(aid)` grades every submission under grader/submitted/<student>/<aid>/:

- each submission in its own throw-away course folder (a copy of the source, a snapshot of the gradebook, and only
  the assignment's notebooks from the submission: a stray `numpy.py` is never importable), by its own
  `nbgrader autograde` process, `workers` at a time;
- under resource limits (address space, CPU time, file size) and a wall-clock limit, so an infinite loop, a memory
  bomb or a crashed kernel ends that submission only;
- with per-cell time limits keyed on the test's grade_id (see `CELL_TIMEOUTS`), never on tags a student can edit;
- then, one at a time, its grades are merged into the course gradebook and its autograded notebook copied to
  grader/autograded/, so running it again gives the same grades and never touches grader/submitted/.

Every submission ends `graded` (with the points it earned) or `failed` (with a reason in words); the batch always
finishes. Reports: grader/reports/<aid>.csv, <aid>_tests.png, and a one-screen summary.
"""
from __future__ import annotations

import csv
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from . import sandbox, verdicts
from .notebooks import ROOT

COURSE_ID = "two-primitives"
# Per-cell time limits (seconds) by grade_id; any other cell gets DEFAULT_CELL_TIMEOUT. Cold imports of torch and a
# first Dynamo trace are the slowest legitimate cells (a few seconds on 2 cores); the default leaves ample room.
DEFAULT_CELL_TIMEOUT = int(os.environ.get("TWOPRIM_CELL_TIMEOUT", "60"))
CELL_TIMEOUTS: dict[str, int] = {}
# Limits on each submission's processes (the kernel inherits them): the sandbox's, also when run unisolated.
MEMORY_LIMIT_BYTES = sandbox.MEMORY_LIMIT_BYTES
CPU_LIMIT_SECONDS = sandbox.CPU_LIMIT_SECONDS
FILE_SIZE_LIMIT_BYTES = sandbox.FILE_SIZE_LIMIT_BYTES
SUBMISSION_WALL_SECONDS = int(os.environ.get("TWOPRIM_SUBMISSION_TIMEOUT", "900"))
MAX_OUTPUT_CHARS = 20_000           # per output in the autograded notebook and the feedback


def cell_timeout(cell) -> int:
    """nbclient's timeout_func: the time limit of a cell, from its nbgrader grade_id."""
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return CELL_TIMEOUTS.get(grade_id, DEFAULT_CELL_TIMEOUT)


def record_cell_start(cell, cell_index, **_):
    """nbclient's on_cell_start hook: note which cell is about to run (read back when a kernel dies or hangs)."""
    path = os.environ.get("TWOPRIM_CELL_LOG")
    if path:
        label = _gid(cell) or "a cell of the student's own"
        with open(path, "w") as f:
            f.write(f"{label} (cell {cell_index + 1})")


class StderrIsNotFailure(Preprocessor):
    """nbgrader scores a test cell 0 when anything reaches stderr, so a warning printed while a correct answer is
    checked costs its points. Only an error output means failure here: stderr streams become stdout."""

    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
        return cell, resources


class HideHiddenTestSource(Preprocessor):
    """Feedback: a failing hidden check's traceback quotes the hidden test's source lines; keep only the error
    itself (the check's message says what was tried, expected and got). Runs before ClearHiddenTests."""

    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and "BEGIN HIDDEN TESTS" in cell.source:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources


class TruncateOutputs(Preprocessor):
    """Cut any single output to MAX_OUTPUT_CHARS (nbgrader's LimitOutput counts lines, so one 20 MB line stays)."""

    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "stream":
                output["text"] = _cut(output.get("text", ""))
            for key, value in list(output.get("data", {}).items()):
                if isinstance(value, str) and key.startswith("text/"):
                    output["data"][key] = _cut(value)
        return cell, resources


def _cut(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    return text[:MAX_OUTPUT_CHARS] + f"\n[... {len(text) - MAX_OUTPUT_CHARS:,} more characters cut by the grader]\n"


# ----------------------------------------------------------------------------------------------------------------
# Putting a damaged submission back in shape before nbgrader sees it
# ----------------------------------------------------------------------------------------------------------------

def _gid(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _signature(source: str) -> str | None:
    found = re.search(r"^def (\w+)\(", source, flags=re.M)
    return found.group(1) if found else None


def realign(student: nbformat.NotebookNode, release: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, list[str]]:
    """Match a submission's cells to the released assignment's nbgrader cells and repair what students break.

    Tests and read-only cells belong to the instructor: a deleted one is put back where it was, a duplicated copy
    is dropped, one turned into markdown is a code cell again, and one whose metadata was stripped is recognised
    by its source. A duplicated answer cell stays as plain code; an answer cell that lost its metadata is
    recognised by the function it defines. A cell with an unknown grade id (renamed) becomes plain code and the
    real one comes back. Returns the repaired notebook (a copy) and what was repaired, in words.
    """
    import copy
    import uuid

    nb = copy.deepcopy(student)
    ref = [c for c in release.cells if _gid(c)]
    by_id = {_gid(c): c for c in ref}
    order = {gid: i for i, gid in enumerate(by_id)}
    is_answer = {gid: bool(c.metadata["nbgrader"].get("solution")) for gid, c in by_id.items()}
    notes: list[str] = []
    seen: set[str] = set()
    cells = []
    for cell in nb.cells:
        gid = _gid(cell)
        if gid is None:
            cells.append(cell)
            continue
        if gid not in by_id:
            cell.metadata.pop("nbgrader")
            notes.append(f"a cell with the unknown grade id {gid!r} was graded as the student's own code")
            cells.append(cell)
            continue
        if gid in seen:
            if is_answer[gid]:
                cell.metadata.pop("nbgrader")
                cells.append(cell)
                notes.append(f"a second copy of answer cell {gid} ran as plain code")
            else:
                notes.append(f"removed a duplicated copy of {gid}")
            continue
        seen.add(gid)
        if cell.cell_type != by_id[gid].cell_type:
            fixed = copy.deepcopy(by_id[gid])
            fixed.source = cell.source if is_answer[gid] else by_id[gid].source
            cell = fixed
            notes.append(f"{gid} was turned into {'markdown' if by_id[gid].cell_type == 'code' else 'code'}; "
                         f"restored")
        cells.append(cell)

    recognised: list[str] = []

    def restore(cell, gid, how):
        cell.metadata["nbgrader"] = copy.deepcopy(by_id[gid].metadata["nbgrader"])
        seen.add(gid)
        recognised.append(gid)

    for gid in [g for g in by_id if g not in seen and not is_answer[g]]:      # by identical source
        for cell in cells:
            if _gid(cell) is None and cell.cell_type == by_id[gid].cell_type and \
                    cell.source.strip() == by_id[gid].source.strip():
                restore(cell, gid, "source")
                break
    for gid in [g for g in by_id if g not in seen and is_answer[g]]:          # by the function it defines
        name = _signature(by_id[gid].source)
        for cell in cells:
            if name and _gid(cell) is None and cell.cell_type == "code" and _signature(cell.source) == name:
                restore(cell, gid, f"definition of {name}()")
                break
    if len(recognised) == 1:
        notes.append(f"{recognised[0]} had lost its nbgrader metadata; recognised it")
    elif recognised:
        notes.append(f"{len(recognised)} cells had lost their nbgrader metadata; recognised them by their source "
                     f"and the functions they define")
    missing = [g for g in by_id if g not in seen]
    for gid in missing:                                                       # put the rest back where they were
        before = [i for i, c in enumerate(cells) if _gid(c) in order and order[_gid(c)] < order[gid]]
        cells.insert(before[-1] + 1 if before else 0, copy.deepcopy(by_id[gid]))
        if is_answer[gid]:
            notes.append(f"answer cell {gid} was missing; graded as unanswered")
        elif by_id[gid].metadata.get("nbgrader", {}).get("grade"):  # given text, setup and hint cells: silently
            notes.append(f"restored the deleted cell {gid}")
    ids = set()
    for cell in cells:
        if "id" in cell and cell["id"] in ids:
            cell["id"] = uuid.uuid4().hex[:8]
        ids.add(cell.get("id"))
    nb.cells = cells
    return nb, notes


# ----------------------------------------------------------------------------------------------------------------
# One submission
# ----------------------------------------------------------------------------------------------------------------

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
                     released: dict[str, nbformat.NotebookNode], scratch: Path) -> Outcome:
    """Grade one student's submission of `aid` in its own course folder under `scratch`."""
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
        status, log_text = _run_nbgrader(grader, aid, student, cell_log)
    finally:
        for name in box_env:
            os.environ.pop(name, None)
    if status == "timeout":
        out.reason = (f"grading took longer than {SUBMISSION_WALL_SECONDS} s and was stopped; look for an "
                      f"infinite loop in the notebook")
        out.seconds = time.monotonic() - start
        return out
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
    """`verdicts.audit` of every cell the student wrote: answer cells and cells they added."""
    findings = []
    for name in notebooks:
        given = {c.metadata.get("nbgrader", {}).get("grade_id") for c in released[name].cells
                 if not c.metadata.get("nbgrader", {}).get("solution")} - {None}
        nb = nbformat.read(str(target / f"{name}.ipynb"), as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade_id") in given:
                continue
            where = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {i + 1}"
            findings += [f"{where} {line}" for line in verdicts.audit(cell.source)]
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


def _grading_kernel(scratch: Path) -> str | None:
    """For `--unisolated` grading: a kernelspec that starts the kernel under the sandbox's `prlimit` limits only.
    None where util-linux's prlimit is missing (e.g. macOS)."""
    if shutil.which("prlimit") is None:
        return None
    spec = scratch / "kernels" / "twoprim-grading"
    spec.mkdir(parents=True, exist_ok=True)
    argv = sandbox.limits() + [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3 (grading, limited)",
                                                  "language": "python"}))
    return "twoprim-grading"


def _run_nbgrader(grader: Path, aid: str, student: str, cell_log: Path) -> tuple[str, str]:
    """Autograde one student in the course folder above `grader`, in this process (a grading worker: nbgrader is
    imported once per worker, not once per student). Returns ("ok" | "error", the log)."""
    from nbgrader.apps.api import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(grader)).load_config()
    kernel = os.environ.get("TWOPRIM_GRADING_KERNEL")
    if kernel:
        config.Execute.kernel_name = kernel
    box = os.environ.get(sandbox.ENV_BOX)
    if box:  # Unix sockets in the box: they reach into the sandbox, and no TCP ports are raced for between workers
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(Path(box) / "run" / "kernel")
    os.environ["TWOPRIM_CELL_LOG"] = str(cell_log)
    cwd = os.getcwd()
    os.chdir(grader)
    try:
        result = NbGraderAPI(config=config).autograde(aid, student, force=True, create=True)
    finally:
        os.chdir(cwd)
        os.environ.pop("TWOPRIM_CELL_LOG", None)
    log = result.get("log", "") + "\n" + result.get("error", "")
    return ("ok" if result.get("success") else "error"), log


def _worker_main() -> None:
    """`python -m twoprim.grading --worker`: grade the tasks read from stdin, one JSON line each, and answer each
    with one JSON line on stdout. Started by `autograde`, one per worker."""
    import io

    # nothing but answers may reach the parent: they go out on a private copy of stdout, and fd 1 itself becomes
    # stderr (a log file), so kernels and other children that inherit it cannot write into the answers
    real_stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = io.StringIO()
    for line in sys.stdin:
        task = json.loads(line)
        try:
            released = {n: nbformat.reads(t, as_version=4) for n, t in task["released"].items()}
            out = grade_submission(task["aid"], task["student"], root=Path(task["root"]),
                                   gradebook=Path(task["gradebook"]), released=released,
                                   scratch=Path(task["scratch"]))
        except Exception as err:  # noqa: BLE001 - reported for this student; the worker carries on
            out = Outcome(task["student"], reason=f"the grader itself failed: {type(err).__name__}: {err}")
        sys.stdout = io.StringIO()
        real_stdout.write(json.dumps(_encode(out)) + "\n")
        real_stdout.flush()


def _encode(out: Outcome) -> dict:
    d = {k: getattr(out, k) for k in ("student", "status", "reason", "score", "max_score", "timestamp", "seconds")}
    d["grades"] = [[nb, gid, v] for (nb, gid), v in out.grades.items()]
    d["comments"] = [[nb, gid, v] for (nb, gid), v in out.comments.items()]
    d["autograded_dir"] = str(out.autograded_dir) if out.autograded_dir else None
    return d


def _decode(d: dict) -> Outcome:
    out = Outcome(d["student"], d["status"], d["reason"], d["score"], d["max_score"], timestamp=d["timestamp"],
                  seconds=d["seconds"])
    out.grades = {(nb, gid): v for nb, gid, v in d["grades"]}
    out.comments = {(nb, gid): v for nb, gid, v in d["comments"]}
    out.autograded_dir = Path(d["autograded_dir"]) if d["autograded_dir"] else None
    return out


class _Worker:
    """One grading worker process; `grade(task)` sends a task and waits for its answer, at most `timeout` s
    (past that the worker is killed and replaced, and that student fails)."""

    def __init__(self, env: dict, log: Path):
        self.env = env
        self.log = log
        self.proc = None

    def _start(self):
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "twoprim.grading", "--worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, env=self.env, text=True,
                                         start_new_session=True, preexec_fn=_worker_limits)

    def grade(self, task: dict, timeout: float) -> Outcome:
        import selectors

        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps(task) + "\n")
        self.proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close(kill=True)
            reason = (f"grading took longer than {timeout:.0f} s and was stopped; look for an infinite loop in the "
                      f"notebook") if not ready else "the grading worker crashed while grading it"
            return Outcome(task["student"], reason=reason, seconds=timeout if not ready else 0.0)
        return _decode(json.loads(line))

    def close(self, kill: bool = False):
        if self.proc is None:
            return
        if kill:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            self.proc.stdin.close()
        self.proc.wait()
        self.proc = None


def _worker_limits():
    """A worker only moves files and talks to kernels; cap what it may write (its kernels get their own limits)."""
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES))
    except (ValueError, OSError):
        pass


def _execution_notes(autograded: Path, notebooks: list[str]) -> list[str]:
    """What went wrong while the notebook ran, in an instructor's words (from the autograded notebook)."""
    notes = []
    for name in notebooks:
        path = autograded / f"{name}.ipynb"
        if not path.is_file():
            continue
        nb = nbformat.read(str(path), as_version=4)
        failed, timed_out, died = [], [], []
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


# ----------------------------------------------------------------------------------------------------------------
# The batch
# ----------------------------------------------------------------------------------------------------------------

def _gradebook(root: Path) -> Path:
    """The course gradebook; nbgrader's Gradebook shells out to `alembic`, so this environment's bin/ goes on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return root / "grader" / "gradebook.db"


def released_notebooks(aid: str, root: Path) -> dict[str, nbformat.NotebookNode]:
    """The student version of each notebook of `aid`, as the gradebook knows it.

    The assignment is registered in the gradebook first if needed (generated into a scratch folder, leaving
    exercises/ alone); the released notebooks come from exercises/ when it has them, else from that generation.
    """
    from nbgrader.api import Gradebook, MissingEntry

    from .course import nbgrader

    def known() -> list[str]:
        try:
            with Gradebook(f"sqlite:///{_gradebook(root)}", COURSE_ID) as gb:
                return [nb.name for nb in gb.find_assignment(aid).notebooks]
        except MissingEntry:
            return []

    names = known()
    released = root / "exercises" / aid
    with tempfile.TemporaryDirectory() as scratch:
        if not names or not all((released / f"{n}.ipynb").is_file() for n in names):
            nbgrader(["generate_assignment", aid, "--force", f"--CourseDirectory.release_directory={scratch}"],
                     root=root, capture=True)
            names, released = known(), Path(scratch) / aid
        return {n: nbformat.read(str(released / f"{n}.ipynb"), as_version=4) for n in names}


def submitted_students(aid: str, root: Path) -> list[str]:
    base = root / "grader" / "submitted"
    return sorted(p.name for p in base.iterdir() if (p / aid).is_dir()) if base.is_dir() else []


def merge(aid: str, outcome: Outcome, root: Path) -> None:
    """Write one outcome into the course gradebook and grader/autograded (idempotent)."""
    from nbgrader.api import Gradebook, MissingEntry

    dest = root / "grader" / "autograded" / outcome.student / aid
    if dest.exists():
        shutil.rmtree(dest)
    if outcome.autograded_dir is not None:
        shutil.copytree(outcome.autograded_dir, dest)
    with Gradebook(f"sqlite:///{_gradebook(root)}", COURSE_ID) as gb, warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy's autoflush notes inside nbgrader's API
        warnings.filterwarnings("ignore", message=".*not in session.*")
        gb.update_or_create_student(outcome.student)
        try:
            sub = gb.find_submission(aid, outcome.student)
        except MissingEntry:
            sub = gb.add_submission(aid, outcome.student)
        if outcome.timestamp:
            from nbgrader.utils import parse_utc

            sub.timestamp = parse_utc(outcome.timestamp)
        for nb in sub.notebooks:
            for grade in nb.grades:
                score = outcome.grades.get((nb.name, grade.name))
                grade.auto_score = score if outcome.status == "graded" else 0.0
                grade.needs_manual_grade = outcome.status == "graded" and score is None
            for comment in nb.comments:
                comment.auto_comment = outcome.comments.get((nb.name, comment.name))
        gb.db.commit()


def autograde(aid: str, *, root: Path = ROOT, workers: int | None = None, students: list[str] | None = None,
              progress: bool = True, unisolated: bool = False, trust: list[str] | None = None) -> list[Outcome]:
    """Grade every submission of `aid` (or `students`), `workers` at a time; write the reports; return outcomes.

    Each kernel runs in the `sandbox`; where isolation is impossible this refuses, unless `unisolated` (the
    instructor accepts running students' code as themselves). `trust` lists students whose code the audit held
    and the instructor has read."""
    from tqdm import tqdm

    if not unisolated:
        why = sandbox.missing()
        if why:
            raise SystemExit(f"error: cannot isolate students' code: {why}")

    released = released_notebooks(aid, root)
    everyone = submitted_students(aid, root)
    todo = students or everyone
    unknown = sorted(set(todo) - set(everyone))
    if unknown:
        raise SystemExit(f"error: no submission of {aid} for {', '.join(unknown)} under grader/submitted/")
    workers = max(1, workers or os.cpu_count() or 1)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix=f"autograde-{aid}-") as tmp:
        scratch = Path(tmp)
        snapshot = scratch / "gradebook.db"
        shutil.copy(_gradebook(root), snapshot)
        bar = tqdm(total=len(todo), unit="student", disable=not progress, dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}")
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env.pop("JPY_PARENT_PID", None)
        if workers > 1:  # the parallelism is across submissions: one thread per kernel, no spinning thread pools
            env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        kernel = _grading_kernel(scratch) if unisolated else sandbox.kernelspec(scratch)
        env["TWOPRIM_TRUSTED"] = ",".join(trust or [])
        if kernel:
            env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(scratch), env.get("JUPYTER_PATH")]))
            env["TWOPRIM_GRADING_KERNEL"] = kernel
        texts = {n: nbformat.writes(nb) for n, nb in released.items()}
        tasks = [{"aid": aid, "student": s, "root": str(root), "gradebook": str(snapshot), "released": texts,
                  "scratch": str(scratch)} for s in todo]
        pending = list(reversed(tasks))
        lock = __import__("threading").Lock()
        failed = 0

        def run_worker(n: int):
            worker = _Worker({**env, sandbox.ENV_UID: str(sandbox.BASE_UID + n)}, scratch / f"worker-{n}.log")
            try:
                while True:
                    with lock:
                        if not pending:
                            return
                        task = pending.pop()
                    record(worker.grade(task, SUBMISSION_WALL_SECONDS))
            finally:
                worker.close()

        def record(outcome: Outcome):
            nonlocal failed
            with lock:
                merge(aid, outcome, root)
                record_status(aid, outcome, root)
                outcomes.append(outcome)
                failed += outcome.status == "failed"
                bar.set_postfix_str(f"graded {len(outcomes) - failed}, failed {failed}")
                bar.update(1)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(run_worker, n) for n in range(min(workers, len(tasks)))]:
                future.result()
        bar.close()
    outcomes.sort(key=lambda o: o.student)
    write_reports(aid, root=root)
    return outcomes


# ----------------------------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------------------------

REPORT_FIELDS = ["student", "score", "max_score", "status", "reason"]


def _status_file(aid: str, root: Path) -> Path:
    return root / "grader" / "reports" / f"{aid}.status.json"


def write_reports(aid: str, *, root: Path = ROOT, outcomes: list[Outcome] | None = None) -> dict:
    """grader/reports/<aid>.csv, <aid>_tests.png and the summary, from the gradebook and the last statuses."""
    from nbgrader.api import Gradebook

    reports = root / "grader" / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    status_path = _status_file(aid, root)
    statuses = json.loads(status_path.read_text()) if status_path.exists() else {}
    rows, per_test = [], {}
    with Gradebook(f"sqlite:///{_gradebook(root)}", COURSE_ID) as gb:
        for sub in sorted(gb.assignment_submissions(aid), key=lambda s: s.student.id):
            st = statuses.get(sub.student.id, {"status": "graded", "reason": ""})
            rows.append({"student": sub.student.id, "score": _num(sub.score), "max_score": _num(sub.max_score),
                         "status": st["status"], "reason": st["reason"]})
            for nb in sub.notebooks:
                for grade in nb.grades:
                    per_test.setdefault(grade.name, []).append((grade.score, grade.max_score))
    with open(reports / f"{aid}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=REPORT_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    _histogram(aid, per_test, reports / f"{aid}_tests.png")
    return summary(aid, rows)


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(float(x), 3)


def record_status(aid: str, outcome: Outcome, root: Path) -> None:
    path = _status_file(aid, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[outcome.student] = {"status": outcome.status, "reason": outcome.reason}
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def _histogram(aid: str, per_test: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(per_test)
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(names) + 2), 4))
    means = [statistics.mean(s / m if m else 0 for s, m in per_test[n]) for n in names] if names else []
    ax.bar(range(len(names)), means, color="#4c72b0")
    ax.set_xticks(range(len(names)), [n.removeprefix(f"{aid}-") for n in names], rotation=60, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean fraction of points")
    ax.set_title(f"{aid}: score per test ({len(next(iter(per_test.values()), []))} submissions)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary(aid: str, rows: list[dict]) -> dict:
    graded = [r for r in rows if r["status"] == "graded"]
    scores = [float(r["score"]) for r in graded]
    return {"assignment": aid, "submissions": len(rows), "graded": len(graded), "failed": len(rows) - len(graded),
            "mean": statistics.mean(scores) if scores else None, "median": statistics.median(scores) if scores else None,
            "max_score": rows[0]["max_score"] if rows else None}


def format_summary(s: dict, root: Path = ROOT) -> str:
    mean = "-" if s["mean"] is None else f"{s['mean']:.2f}"
    median = "-" if s["median"] is None else f"{s['median']:.2f}"
    reports = (root / "grader" / "reports").relative_to(root)
    return (f"{s['assignment']}: {s['submissions']} submissions, {s['graded']} graded, {s['failed']} failed; "
            f"mean {mean}, median {median} of {s['max_score']}\n"
            f"reports: {reports}/{s['assignment']}.csv, {reports}/{s['assignment']}_tests.png")


# ----------------------------------------------------------------------------------------------------------------
# A learner grading their own notebook
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class SelfGrade:
    assignment: str
    outcome: Outcome
    feedback: Path | None

    def describe(self) -> str:
        o = self.outcome
        if o.status != "graded":
            return f"{self.assignment}: could not be graded: {o.reason}"
        lines = [f"{self.assignment}: {_num(o.score)} / {_num(o.max_score)} points, hidden checks included "
                 f"(the score an instructor's autograde gives this notebook)"]
        for (_, gid), score in sorted(o.grades.items()):
            if not gid.endswith("-solution"):
                lines.append(f"  {'✔' if score else '✘'} {gid}: {_num(score or 0)}")
        if o.reason and o.reason != "all cells ran":
            lines.append(f"notes: {o.reason}")
        if self.feedback:
            lines.append(f"feedback: {self.feedback}")
        return "\n".join(lines)

    def save(self, path: Path, notebook: Path) -> None:
        """grader/selfgrade/<aid>.json: the last self-grade of `notebook` (read by `./course progress`)."""
        o = self.outcome
        record = {"assignment": self.assignment, "notebook": str(notebook), "status": o.status, "reason": o.reason,
                  "score": o.score, "max_score": o.max_score,
                  "graded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "tests": {gid: score for (_, gid), score in sorted(o.grades.items())
                            if not gid.endswith("-solution")}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n")


def selfgrade(aid: str, *, notebook: Path | None = None, root: Path = ROOT) -> SelfGrade:
    """Grade a learner's own notebook of `aid` exactly as autograde grades a submission, hidden checks included,
    in a throw-away course; write the feedback HTML to grader/selfgrade/<aid>.html."""
    from .course import nbgrader

    notebook = Path(notebook) if notebook else root / "exercises" / aid / f"{aid}.ipynb"
    if not notebook.is_file():
        raise SystemExit(f"error: {notebook} does not exist; pass the notebook you worked in with --notebook PATH")
    with tempfile.TemporaryDirectory(prefix=f"selfgrade-{aid}-") as tmp:
        course = Path(tmp)
        (course / "grader").mkdir()
        shutil.copy(root / "grader" / "nbgrader_config.py", course / "grader")
        shutil.copytree(root / "solutions" / aid, course / "solutions" / aid)
        if (root / "exercises" / aid).is_dir():
            shutil.copytree(root / "exercises" / aid, course / "exercises" / aid)
        target = course / "grader" / "submitted" / "learner" / aid
        target.mkdir(parents=True)
        shutil.copy(notebook, target / f"{aid}.ipynb")

        (target / "timestamp.txt").write_text(time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime()))
        # the learner's own code: isolated where possible, never held by the audit
        [outcome] = autograde(aid, root=course, workers=1, progress=False, unisolated=sandbox.missing() is not None,
                              trust=["learner"])
        feedback = None
        if outcome.status == "graded":
            nbgrader(["generate_feedback", aid, "--student", "learner", "--force"], root=course, capture=True)
            html = course / "grader" / "feedback" / "learner" / aid / f"{aid}.html"
            if html.is_file():
                feedback = root / "grader" / "selfgrade" / f"{aid}.html"
                feedback.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(html, feedback)
        outcome.autograded_dir = None
        result = SelfGrade(aid, outcome, feedback)
        result.save(root / "grader" / "selfgrade" / f"{aid}.json", notebook)
        return result


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    _worker_main()
