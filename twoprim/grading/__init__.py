"""Classroom grading: parallel, isolated autograde on top of nbgrader, with reports an instructor can act on.

`autograde(aid)` grades every submission under grader/submitted/<student>/<aid>/:

- each submission in its own throw-away course folder (a copy of the source, a snapshot of the gradebook, and only
  the assignment's notebooks from the submission: a stray `numpy.py` is never importable), by a grading worker
  process, `workers` at a time (`workers`);
- its notebook repaired first where students break nbgrader's cells (`realign`), its code audited before anything
  runs (`twoprim.audit`), its kernel sandboxed (`twoprim.sandbox`) under resource limits, every cell under the same
  time limit and the whole submission under a wall-clock limit, so an infinite loop, a memory bomb or a crashed
  kernel ends that submission only (`submission`);
- every test cell scored in the grader from what the kernel recorded (`twoprim.verdicts`), never by the kernel;
- then, one at a time, merged into the course gradebook and its autograded notebook copied to grader/autograded/
  (`gradebook`), so running it again gives the same grades and never touches grader/submitted/.

Every submission ends `graded` (with the points it earned), `flagged` (held for the instructor) or `failed` (with a
reason in words); the batch always finishes. Reports: grader/reports/<aid>.csv, <aid>_tests.png and a one-screen
summary (`reports`). A learner grades their own notebook the same way with `selfgrade`.

| module | what it holds |
| --- | --- |
| `preprocessors` | the nbgrader preprocessors and hooks named in grader/nbgrader_config.py |
| `realign` | repairing a submission's nbgrader cells against the released notebook |
| `submission` | grading one submission: `Outcome`, `grade_submission` |
| `workers` | the worker processes and the batch: `autograde` |
| `gradebook` | the gradebook: released notebooks, submissions, `merge` |
| `reports` | CSV, chart, statuses and the summary |
| `selfgrade` | a learner's own notebook, graded as an instructor would |
"""
from ..nbgrader_cli import COURSE_ID
from .gradebook import gradebook_path, merge, released_notebooks, submitted_students
from .preprocessors import DEFAULT_CELL_TIMEOUT, MAX_OUTPUT_CHARS
from .realign import realign
from .reports import format_summary, record_status, summary, write_reports
from .selfgrade import SelfGrade, selfgrade
from .submission import CPU_LIMIT_SECONDS, FILE_SIZE_LIMIT_BYTES, MEMORY_LIMIT_BYTES, Outcome, grade_submission
from .workers import SUBMISSION_WALL_SECONDS, autograde

__all__ = [
    "COURSE_ID", "DEFAULT_CELL_TIMEOUT", "MAX_OUTPUT_CHARS", "SUBMISSION_WALL_SECONDS", "MEMORY_LIMIT_BYTES",
    "CPU_LIMIT_SECONDS", "FILE_SIZE_LIMIT_BYTES", "Outcome", "SelfGrade", "autograde", "format_summary",
    "grade_submission", "gradebook_path", "merge", "realign", "record_status", "released_notebooks", "selfgrade",
    "submitted_students", "summary", "write_reports",
]
