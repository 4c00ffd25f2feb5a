"""Classroom grading: parallel, isolated autograde on top of nbgrader, with reports an instructor can act on.

`autograde(aid)` grades every submission under grader/submitted/<student>/<aid>/ as tasks on a Dask cluster
(this machine's cores by default, `--scheduler` for many machines; `cluster`):

- each submission is one task carrying its files, graded in a throw-away course folder on a worker (a copy of the
  source and an assignment-only gradebook; only the assignment's notebooks from the submission: a stray `numpy.py`
  is never importable) (`submission`);
- its notebook graded by the assignment's own cells, whatever its nbgrader metadata says (`realign`), its code
  audited before anything runs (`twoprim.grading.audit`), its kernel sandboxed (`twoprim.grading.sandbox`) under
  resource limits, every cell under the same time limit and the whole submission under a wall-clock limit, so an
  infinite loop, a memory bomb or a crashed kernel ends that submission only;
- every test cell scored in the grader from what the kernel recorded (`twoprim.core.verdicts`), never by the kernel,
  against expected values the run computes once for all its workers (`oracle`);
- then, as results arrive, merged by the instructor's process alone into the gradebook (SQLite or PostgreSQL) and
  its autograded notebook written to grader/autograded/ (`gradebook`), one submission per transaction, so running it
  again gives the same grades, finishes a run that stopped, and never touches grader/submitted/.

Every submission ends `graded` (with the points it earned), `flagged` (held for the instructor), `failed` (with a
reason in words) or, when the grader itself failed it (a worker or the scheduler lost, a grader process such as the
forkserver dying under its kernel, the grader's own error, after retries), `not graded`: no grade is written or
changed for it, the grader's log is kept in grader/reports/<aid>-not-graded/, and the next run grades it. The batch
always finishes. Reports: grader/reports/<aid>.csv, <aid>_tests.png and a one-screen summary (`reports`). A learner
grades their own notebook the same way with `selfgrade`, through a warm grader of their own (`warm`) that keeps all
this loaded between self-grades.

| module | what it holds |
| --- | --- |
| `preprocessors` | the nbgrader preprocessors and hooks named in grader/nbgrader_config.py |
| `realign` | a submission's nbgrader cells put back as the released notebook has them, what was changed in words |
| `submitted` | reading grader/submitted/ (regular files only, never through a link) and why a file is no notebook |
| `submission` | grading one submission, the task a worker runs: `Outcome`, `make_task`, `grade_task` |
| `execute` | the cell time limit, judged on the graded kernel's CPU time (`CpuTimedExecute`) |
| `kernels` | a worker's kernels: scratch, kernelspec, warm forkserver, watchdog, the grading profile |
| `cluster` | the batch on a Dask cluster: `autograde`, its cluster started and its workers warmed beside the rest |
| `keeper` | in a cluster's worker, the thread that starts its forkserver and warms an assignment in it |
| `oracle` | the expected values of a run, computed once on the cluster (one task per test cell), taken by each judge |
| `tls` | Dask's TLS for a cluster of many machines: `cluster_certs`, the client's `Security` |
| `gradebook` | the gradebook on SQLite or PostgreSQL: URLs, schema, snapshots, `merge`, statuses |
| `reports` | CSV, chart and the summary, and the terminal's line per failed, held or not graded student |
| `feedback` | `./course feedback`: each student's feedback generated and released on its own |
| `learner` | `selfgrade`: a learner's own notebook, graded as an instructor would |
| `warm` | a learner's warm grader: self-grades from the notebook's cell and `./course selfgrade` in seconds |
"""

from __future__ import annotations

import importlib

# Names resolve on first use (PEP 562): nbgrader's configuration imports `grading.preprocessors` in every nbgrader
# and JupyterLab process, and must not pay for torch, which `submission` imports through the checks.
_WHERE = {
    "COURSE_ID": "..nbgrader_cli",
    "autograde": ".cluster",
    "connect": ".cluster",
    "DB_ENV": ".gradebook",
    "GradebookUnavailable": ".gradebook",
    "database_url": ".gradebook",
    "display_url": ".gradebook",
    "gradebook_path": ".gradebook",
    "init_db": ".gradebook",
    "merge": ".gradebook",
    "released_notebooks": ".gradebook",
    "statuses": ".gradebook",
    "submitted_students": ".gradebook",
    "DEFAULT_CELL_TIMEOUT": ".preprocessors",
    "MAX_OUTPUT_CHARS": ".preprocessors",
    "realign": ".realign",
    "format_summary": ".reports",
    "format_problems": ".reports",
    "summary": ".reports",
    "write_reports": ".reports",
    "NOT_GRADED": ".reports",
    "not_graded": ".gradebook",
    "release_feedback": ".feedback",
    "create_db": ".gradebook",
    "SelfGrade": ".learner",
    "selfgrade": ".learner",
    "require_hidden_checks": ".learner",
    "CPU_LIMIT_SECONDS": ".submission",
    "FILE_SIZE_LIMIT_BYTES": ".submission",
    "MEMORY_LIMIT_BYTES": ".submission",
    "SUBMISSION_WALL_SECONDS": ".submission",
    "Outcome": ".submission",
    "grade_task": ".submission",
    "make_task": ".submission",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
