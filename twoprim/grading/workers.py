"""Autograde a class: every submission of an assignment graded by `grade_submission` in a pool of worker processes
(nbgrader imported once per worker, each kernel sandboxed with a uid of its own), and each outcome merged into the
gradebook by this process alone, one at a time, as it arrives.

`python -m twoprim.grading.workers --worker` is one worker: it reads tasks as JSON lines on stdin and answers each
with one JSON line on stdout.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from .. import sandbox
from ..notebooks import ROOT
from .gradebook import gradebook_path, merge, released_notebooks, submitted_students
from .preprocessors import DEFAULT_CELL_TIMEOUT
from .reports import record_status, write_reports
from .submission import FILE_SIZE_LIMIT_BYTES, Outcome, grade_submission

__all__ = ["autograde", "SUBMISSION_WALL_SECONDS"]

SUBMISSION_WALL_SECONDS = 900       # one submission, all its cells; past that its worker is killed and replaced


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
                                   scratch=Path(task["scratch"]), cell_timeout=task["cell_timeout"])
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
            self.proc = subprocess.Popen([sys.executable, "-m", "twoprim.grading.workers", "--worker"], stdin=subprocess.PIPE,
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


def autograde(aid: str, *, root: Path = ROOT, workers: int | None = None, students: list[str] | None = None,
              progress: bool = True, unisolated: bool = False, trust: list[str] | None = None,
              cell_timeout: int = DEFAULT_CELL_TIMEOUT, wall_seconds: float = SUBMISSION_WALL_SECONDS) -> list[Outcome]:
    """Grade every submission of `aid` (or `students`), `workers` at a time; write the reports; return outcomes.

    Each kernel runs in the `sandbox`; where isolation is impossible this refuses, unless `unisolated` (the
    instructor accepts running students' code as themselves). `trust` lists students whose code the audit held
    and the instructor has read. Each cell may run `cell_timeout` seconds, each submission `wall_seconds`."""
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
        shutil.copy(gradebook_path(root), snapshot)
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
                  "scratch": str(scratch), "cell_timeout": cell_timeout} for s in todo]
        pending = list(reversed(tasks))
        lock = threading.Lock()
        failed = 0

        def run_worker(n: int):
            worker = _Worker({**env, sandbox.ENV_UID: str(sandbox.BASE_UID + n)}, scratch / f"worker-{n}.log")
            try:
                while True:
                    with lock:
                        if not pending:
                            return
                        task = pending.pop()
                    record(worker.grade(task, wall_seconds))
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


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    _worker_main()
