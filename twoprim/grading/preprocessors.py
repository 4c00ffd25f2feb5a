"""nbgrader preprocessors and hooks the course's grading adds (named in grader/nbgrader_config.py).

- `StderrIsNotFailure`: a warning printed while a correct answer is checked keeps its points;
- `HideHiddenTestSource`: feedback never quotes a hidden test's source;
- `TruncateOutputs`: no single output beyond `MAX_OUTPUT_CHARS`;
- `record_cell_start`: notes the cell about to run, so a dead or hung kernel is reported with its cell;
- `execute.CpuTimedExecute` (a module of its own: it imports nbgrader's preprocessors): nbgrader's Execute whose
  cell time limit counts the kernel's CPU seconds where the grader can see them, so a loaded machine never fails a
  cell that works.

Every cell has the same time limit, `DEFAULT_CELL_TIMEOUT` unless the grader passes another (`--cell-timeout`).
"""

from __future__ import annotations

import os
import time

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

__all__ = [
    "DEFAULT_CELL_TIMEOUT",
    "MAX_OUTPUT_CHARS",
    "grade_id",
    "record_cell_start",
    "record_kernel_ready",
    "StderrIsNotFailure",
    "KERNEL_UID_ENV",
    "CPU_LIMIT_LOG_ENV",
    "HideHiddenTestSource",
    "TruncateOutputs",
]

# Cold imports of torch and a first Dynamo trace are the slowest legitimate cells (a few seconds on 2 cores).
DEFAULT_CELL_TIMEOUT = 60
MAX_OUTPUT_CHARS = 20_000  # per output in the autograded notebook and the feedback
CELL_LOG_ENV = "TWOPRIM_CELL_LOG"  # where `record_cell_start` writes (set by the grader around each run)
TIMING_ENV = "TWOPRIM_TIMING_LOG"  # where the hooks note when the kernel was ready and each cell started
KERNEL_UID_ENV = "TWOPRIM_KERNEL_UID"  # the uid the graded kernel runs as (set by the grader), for its CPU time
CPU_LIMIT_LOG_ENV = "TWOPRIM_CPU_LIMIT_LOG"  # where CpuTimedExecute notes how it judged each cell that timed out
STRETCH = 4  # a starved cell may run this many times its limit in wall-clock time


def grade_id(cell) -> str | None:
    """The nbgrader grade id of a cell, or None."""
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _timing(event: str, label: str = "") -> None:
    path = os.environ.get(TIMING_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{time.monotonic():.6f}\t{event}\t{label}\n")


def record_cell_start(cell, cell_index, **_):
    """nbclient's on_cell_start hook: note which cell is about to run (read back when a kernel dies or hangs)."""
    path = os.environ.get(CELL_LOG_ENV)
    if path:
        label = grade_id(cell) or "a cell of the student's own"
        with open(path, "w") as f:
            f.write(f"{label} (cell {cell_index + 1})")
    if cell.get("cell_type") == "code" and cell.get("source", "").strip():
        _timing("cell", grade_id(cell) or f"cell {cell_index + 1}")


def record_kernel_ready(**_):
    """nbclient's on_notebook_start hook (the kernel answers): for the grading profile."""
    _timing("ready")


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
    """Cut any single output to MAX_OUTPUT_CHARS (nbgrader's LimitOutput counts lines, so one 20 MB line stays).
    It runs just after the notebook was executed: the grading profile's end of the last cell."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        _timing("end")
        return super().preprocess(nb, resources)

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
