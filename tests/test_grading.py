"""Classroom autograde: a synthetic class of correct, blank, wrong and every kind of bad submission is graded in
parallel; every submission ends graded or failed with a reason; reports are exact; grading is idempotent and never
touches the submitted files. Also the self-grading command a learner runs on their own notebook."""

from __future__ import annotations

import contextlib
import csv
import datetime
import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from twoprim import course as course_cli
from twoprim import grading
from twoprim.grading.gradebook import committed, database_url
from twoprim.grading.nbgrader_cli import nbgrader
from twoprim.learner import deadlines

from . import scripts
from .classroom import answered, bad_ex01_class, cell_index, course_copy, prepend, student_version, write

# bad_class grades a whole class (a kernel per submission, some dying or running out of time) before its first test:
# 80 s on 2 cores on a usual day, 156 s in CI's slow run of 12-06 and past pytest-timeout's 240 s on this VM's slow
# spell; its kernels have their own limits, so this bound ends a hang, not a slow class
pytestmark = pytest.mark.timeout(480)

AID = "ex01_dot"
# The bad class's cell time limit: its endless cells (three students, five cells with the grace after an interrupt)
# are waited out at it, and an honest ex01 cell takes well under a second on a loaded machine (as in
# test_a_correct_notebook_with_large_output_scores_the_same_on_a_loaded_machine, graded at the same limit)
LIMIT = 6
FAILING_ALL = ", ".join(
    f"{AID}-{fn}{h}" for fn in ("dot_loop", "dot", "neuron", "cosine_similarity", "top_k") for h in ("", "-hidden")
)
REWRITTEN_ANSWER = "grade false → true, locked false → true, points absent → 5, solution true → false"

# The outcome of every submission of bad_ex01_class, as an instructor reads it in grader/reports/ex01_dot.csv.
EXPECTED = {
    "bad_timestamp": (
        15,
        "graded",
        "timestamp.txt is unreadable ('the day before the deadline, honest'); graded without a submission time",
    ),
    "blank": (0, "graded", f"failing checks: {FAILING_ALL}"),
    "deleted_test_cell": (15, "graded", "restored the deleted cell ex01_dot-dot"),
    "duplicated_test_cell": (15, "graded", "removed a duplicated copy of ex01_dot-dot"),
    "edited_test_cell": (
        15,
        "graded",
        "restored the assignment's version of ex01_dot-dot, which the submission had edited",
    ),
    "extra_files": (15, "graded", "ignored extra files: notes.txt, scratch.ipynb"),
    "many_lines": (15, "graded", "all cells ran"),
    "one_huge_line": (15, "graded", "all cells ran"),
    "infinite_loop": (
        13,
        "graded",
        f"ex01_dot-dot_loop-solution (cell 4) ran past its time limit of {LIMIT} s and was "
        "interrupted; failing checks: ex01_dot-dot_loop, ex01_dot-dot_loop-hidden",
    ),
    "limits_probe": (15, "graded", "all cells ran"),
    "markdown_test_cell": (15, "graded", "ex01_dot-top_k-hidden was turned into markdown; restored"),
    "memory_bomb": (
        11,
        "graded",
        "ex01_dot-top_k-solution (cell 24) ran out of memory (MemoryError: a kernel's "
        "address space is limited to 8 GiB); failing checks: ex01_dot-top_k, "
        "ex01_dot-top_k-hidden; trusted by the instructor despite: ex01_dot-top_k-solution "
        "line 1: 64 * 2 ** 30 (a size of a billion or more: a memory or time bomb)",
    ),
    "missing_notebook": (
        0,
        "failed",
        "missing notebook ex01_dot.ipynb in grader/submitted/missing_notebook/ex01_dot/ "
        "(found: submission_secret.txt, timestamp.txt); ask the student to submit "
        "ex01_dot.ipynb",
    ),
    "no_timestamp": (15, "graded", "no timestamp.txt; graded without a submission time"),
    "not_json": (
        0,
        "failed",
        "ex01_dot.ipynb is not valid JSON (line 1, column 1: Expecting value); the file is "
        "truncated or was not saved from Jupyter; ask the student to resubmit",
    ),
    "numpy_py": (15, "graded", "ignored extra files: numpy.py"),
    "os_exit": (
        0,
        "failed",
        "the kernel died while running ex01_dot-top_k-solution (cell 24): the student's code "
        "ended the kernel's process (exit status 3, as os._exit(3) does); the cells after it "
        "could not run",
    ),
    "perfect": (15, "graded", "all cells ran"),
    "renamed_grade_id": (
        15,
        "graded",
        "a cell with the unknown grade id 'my_renamed_cell' was graded as the "
        "student's own code; ex01_dot-top_k had lost its nbgrader metadata; "
        "recognised it",
    ),
    "segfault": (
        0,
        "failed",
        "the kernel died while running ex01_dot-top_k-solution (cell 24): the kernel crashed "
        "in the student's code (SIGSEGV, a segmentation fault: memory read or written where "
        "there is none, e.g. through ctypes or a library called with bad arguments); the cells "
        "after it could not run",
    ),
    "stripped_metadata": (
        15,
        "graded",
        "24 cells had lost their nbgrader metadata; recognised them by their source and the functions they define",
    ),
    "swallows_interrupt": (
        0,
        "failed",
        f"ex01_dot-dot_loop-solution (cell 4) ran past its time limit of {LIMIT} s and was "
        f"interrupted, and its kernel had not stopped {LIMIT} s after the interrupt; the "
        "notebook could not finish",
    ),
    "torch_py": (15, "graded", "ignored extra files: torch.py"),
    "truncated": (0, "failed", None),  # the JSON error's position depends on the notebook's length
    "warning_in_test": (15, "graded", "all cells ran"),
    "wrong_top_k": (11, "graded", "failing checks: ex01_dot-top_k, ex01_dot-top_k-hidden"),
    # files that are not notebooks, or not files
    "empty": (0, "failed", "ex01_dot.ipynb is empty (0 bytes); ask the student to resubmit"),
    "binary": (
        0,
        "failed",
        "ex01_dot.ipynb is a binary file (byte 1: 8b 08 00 00, invalid start byte); a notebook "
        "saved by Jupyter is UTF-8 JSON; ask the student to resubmit",
    ),
    "wrong_nbformat": (
        0,
        "failed",
        "ex01_dot.ipynb says it is a notebook of format version 3, but nbformat cannot "
        "read it as one to upgrade it to version 4 (ValidationError: The notebook is "
        "invalid and is missing an expected key: worksheets); ask the student to "
        "resubmit",
    ),
    "nbformat_v3": (
        15,
        "graded",
        "ex01_dot.ipynb is a notebook of format version 3; upgraded to version 4 to grade it",
    ),
    "renamed_notebook": (
        0,
        "failed",
        "missing notebook ex01_dot.ipynb in grader/submitted/renamed_notebook/ex01_dot/ "
        "(found: ex01_dot (1).ipynb, submission_secret.txt, timestamp.txt); ex01_dot "
        "(1).ipynb looks like it, renamed: ask the student to rename it ex01_dot.ipynb "
        "and resubmit",
    ),
    "folder_in_place": (
        0,
        "failed",
        "ex01_dot.ipynb is a folder in grader/submitted/folder_in_place/ex01_dot/, not a "
        "file: refused, nothing was read through it (grading reads only regular files); "
        "ask the student to submit ex01_dot.ipynb",
    ),
    "link_to_classmate": (
        0,
        "failed",
        "ex01_dot.ipynb is a symbolic link (to ../../perfect/ex01_dot/ex01_dot.ipynb) "
        "in grader/submitted/link_to_classmate/ex01_dot/, not a file: refused, nothing "
        "was read through it (grading reads only regular files); ask the student to "
        "submit ex01_dot.ipynb",
    ),
    "link_to_shadow": (
        0,
        "failed",
        "ex01_dot.ipynb is a symbolic link (to /etc/shadow) in grader/submitted/"
        "link_to_shadow/ex01_dot/, not a file: refused, nothing was read through it "
        "(grading reads only regular files); ask the student to submit ex01_dot.ipynb",
    ),
    "fifo_in_place": (
        0,
        "failed",
        "ex01_dot.ipynb is a named pipe (FIFO) in grader/submitted/fifo_in_place/ex01_dot/, "
        "not a file: refused, nothing was read through it (grading reads only regular "
        "files); ask the student to submit ex01_dot.ipynb",
    ),
    "latin1": (0, "failed", None),  # the byte offset is measured from the file (test below)
    "utf16": (
        0,
        "failed",
        "ex01_dot.ipynb is UTF-16 text (it starts with UTF-16's byte-order mark), not UTF-8: the "
        "file was re-saved in another encoding; a notebook saved by Jupyter is UTF-8 JSON; ask the "
        "student to resubmit",
    ),
    "bom": (15, "graded", "ex01_dot.ipynb starts with a UTF-8 byte-order mark; read without it"),
    "crlf": (15, "graded", "all cells ran"),
    "huge_markdown": (15, "graded", "all cells ran"),
    "thousands_of_cells": (15, "graded", "all cells ran"),
    "endless_sleep": (
        13,
        "graded",
        "ex01_dot-dot_loop (cell 5), ex01_dot-dot_loop-hidden (cell 6) ran past their time "
        f"limit of {LIMIT} s and were interrupted; failing checks: ex01_dot-dot_loop, "
        "ex01_dot-dot_loop-hidden",
    ),
    "process_bomb": (
        11,
        "graded",
        "failing checks: ex01_dot-top_k, ex01_dot-top_k-hidden; trusted by the instructor "
        "despite: ex01_dot-top_k-solution line 1: import subprocess (starts processes)",
    ),
    "no_secret": (15, "graded", "all cells ran"),
    "garbage_secret": (15, "graded", "all cells ran"),
    # what a student changed in the notebook's structure, undone: graded by the assignment's cells, said what
    "answers_marked_graded": (
        15,
        "graded",
        "restored the assignment's nbgrader metadata the submission had changed: "
        + ", ".join(
            f"ex01_dot-{fn}-solution (grade false → true, points absent → 5)"
            for fn in ("dot_loop", "dot", "neuron", "cosine_similarity", "top_k")
        ),
    ),
    "blank_rewrites_grading": (
        0,
        "graded",
        f"failing checks: {FAILING_ALL}; a cell with the unknown grade id 'bonus' "
        f"was graded as the student's own code; restored the assignment's nbgrader "
        f"metadata the submission had changed: "
        f"ex01_dot-dot_loop-solution ({REWRITTEN_ANSWER}), ex01_dot-dot_loop (points "
        f"1 → 100), ex01_dot-dot_loop-hidden (points 1 → 100), ex01_dot-dot-solution "
        f"({REWRITTEN_ANSWER}), ex01_dot-dot (points 1 → 100), ex01_dot-dot-hidden "
        f"(points 2 → 100) and 9 more; restored the assignment's version of 10 cells "
        f"the submission had edited: ex01_dot-dot_loop, ex01_dot-dot_loop-hidden, "
        f"ex01_dot-dot, ex01_dot-dot-hidden, ex01_dot-neuron, ex01_dot-neuron-hidden "
        f"and 4 more",
    ),
    "another_assignment": (
        0,
        "failed",
        "ex01_dot.ipynb cannot be graded as ex01_dot: none of the notebook's 34 cells "
        "is one of the assignment's answer or test cells (by grade id, by the test's "
        "code or by the function an answer defines, e.g. ex01_dot-dot_loop-solution); "
        "its grade ids are ex02_gemm-intro, ex02_gemm-setup, "
        "ex02_gemm-matmul_loops-solution, ex02_gemm-matmul_loops, "
        "ex02_gemm-matmul_loops-hidden, ex02_gemm-matmul_loops-hints and 22 more: "
        "another assignment's notebook?; ask the student to submit their ex01_dot "
        "notebook",
    ),
}


def _course(tmp: Path) -> Path:
    return course_copy(tmp, AID)


def _digest(folder: Path) -> dict[str, str]:
    """Every file's content; a link by where it points, never read through (the battery's links to /etc/shadow
    would change with every account another test makes)."""
    return {
        str(p.relative_to(folder)): f"link to {os.readlink(p)}"
        if p.is_symlink()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def _rows(course: Path) -> dict[str, dict]:
    with open(course / "grader" / "reports" / f"{AID}.csv") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def bad_class(tmp_path_factory):
    course = _course(tmp_path_factory.mktemp("class"))
    bad_ex01_class(course / "grader" / "submitted")
    before = _digest(course / "grader" / "submitted")
    # os_exit, segfault and memory_bomb reach for os._exit, ctypes and 64 GiB, which the audit holds for review
    # (tests/test_sandbox.py); trusted here, they show how a kernel that dies is reported
    arrived = []  # (student, committed when on_outcome saw it)

    def on_outcome(outcome):
        arrived.append((outcome.student, outcome.student in committed(AID, database_url(course))))

    outcomes = grading.autograde(
        AID,
        root=course,
        workers=2,
        progress=False,
        trust=["os_exit", "segfault", "memory_bomb", "process_bomb"],
        cell_timeout=LIMIT,
        wall_seconds=60,
        on_outcome=on_outcome,
    )
    exchange = course / "exchange"
    exchange.mkdir()
    saved = os.environ.get("TWOPRIM_EXCHANGE")
    os.environ["TWOPRIM_EXCHANGE"] = str(exchange)
    try:
        released = course_cli.feedback(AID, root=course)
    finally:
        os.environ.pop("TWOPRIM_EXCHANGE") if saved is None else os.environ.__setitem__("TWOPRIM_EXCHANGE", saved)
    yield course, outcomes, before, arrived, released


def test_every_submission_ends_graded_or_failed_with_its_reason(bad_class):
    course, outcomes, _, _, _ = bad_class
    rows = _rows(course)
    assert list(rows) == sorted(EXPECTED), "one CSV row per student, sorted"
    for student, (score, status, reason) in EXPECTED.items():
        row = rows[student]
        assert (float(row["score"]), float(row["max_score"]), row["status"]) == (score, 15.0, status), student
        if student == "latin1":
            continue  # its byte offset is measured from the file below
        if reason is None:
            assert row["reason"].startswith("ex01_dot.ipynb is not valid JSON (line "), row["reason"]
            assert row["reason"].endswith(
                "the file is truncated or was not saved from Jupyter; ask the student to resubmit"
            )
        else:
            assert row["reason"] == reason, student
    assert len(outcomes) == len(EXPECTED)


def test_invalid_utf8_is_reported_with_its_byte_offset(bad_class):
    course, _, _, _, _ = bad_class
    data = (course / "grader" / "submitted" / "latin1" / AID / f"{AID}.ipynb").read_bytes()
    with pytest.raises(UnicodeDecodeError) as info:
        data.decode("utf-8")
    offset = info.value.start
    assert _rows(course)["latin1"]["reason"].startswith(
        f"ex01_dot.ipynb is not UTF-8 text (byte {offset}: {data[offset : offset + 4].hex(' ')}, invalid "
    ), offset


def test_nothing_is_read_through_a_link_and_every_refusal_names_what_it_found(bad_class):
    """A symbolic link, a FIFO or a folder where the notebook should be is refused by what it is; a link to a
    classmate's notebook never earns that notebook's grade, and grading never blocks on a pipe."""
    course, outcomes, _, _, _ = bad_class
    by = {o.student: o for o in outcomes}
    for student in ("link_to_classmate", "link_to_shadow", "fifo_in_place", "folder_in_place"):
        assert (by[student].status, by[student].score, by[student].autograded) == ("failed", 0.0, {}), student
        assert not (course / "grader" / "autograded" / student).exists()
    assert by["perfect"].score == 15


def test_a_cell_that_runs_out_of_time_says_so_in_the_feedback_with_its_number_and_limit(bad_class):
    course, _, _, _, released = bad_class
    nb = nbformat.read(str(course / "grader" / "autograded" / "endless_sleep" / AID / f"{AID}.ipynb"), as_version=4)
    [(i, cell)] = [
        (i, c) for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == f"{AID}-dot_loop"
    ]
    [error] = cell.outputs
    assert error.ename == "CellTimeoutError"
    assert error.evalue.startswith(
        f"✘ {AID}-dot_loop: cell {i + 1} ran past its time limit of {LIMIT} s and was interrupted: an endless loop"
    ), error.evalue
    html = (course / "grader" / "feedback" / "endless_sleep" / AID / f"{AID}.html").read_text()
    assert f"cell {i + 1} ran past its time limit of {LIMIT} s and was interrupted" in html
    assert "endless_sleep" in released.released


def test_feedback_is_given_for_every_graded_submission_and_the_others_are_named_with_why(bad_class):
    """Every graded submission gets its feedback: one without a readable timestamp.txt is released under the time its
    notebook reached grader/submitted/; one whose submission_secret.txt is missing or not text (the exchange's key
    to the student's submission) has it generated in grader/feedback/ and is named for the instructor to hand over.
    Only submissions with no grade have none, each named with why."""
    import datetime

    course, _, _, _, released = bad_class
    rows = _rows(course)
    unmatchable = {
        "no_secret": "no submission_secret.txt in grader/submitted/no_secret/ex01_dot/",
        "garbage_secret": "submission_secret.txt in grader/submitted/garbage_secret/ex01_dot/ is not text",
    }
    graded = {s for s, r in rows.items() if r["status"] == "graded"}
    assert sorted(released.released) == sorted(graded - set(unmatchable))
    assert set(released.generated) == set(unmatchable)
    for student, why in unmatchable.items():
        assert released.generated[student].startswith(why), released.generated[student]
        assert released.generated[student].endswith(f"the feedback is in grader/feedback/{student}/{AID}/")
    for student in ("no_timestamp", "bad_timestamp"):
        folder = course / "grader" / "submitted" / student / AID
        arrived = datetime.datetime.fromtimestamp(os.lstat(folder / f"{AID}.ipynb").st_ctime, datetime.UTC)
        stamp = arrived.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
        assert released.notes[student] == (
            f"its timestamp.txt in grader/submitted/{student}/{AID}/ is missing or "
            f"unreadable: released under the time its notebook reached "
            f"grader/submitted/, {stamp}"
        )
    assert set(released.notes) == {"no_timestamp", "bad_timestamp"}
    for student in set(rows) - graded:
        assert (
            released.held[student] == f"{rows[student]['status']} in grading, so there is no feedback to give "
            f"(the report says why)"
        )
    assert set(released.held) == set(rows) - graded
    for student in graded:
        assert (course / "grader" / "feedback" / student / AID / f"{AID}.html").is_file(), student
    assert len(list((course / "exchange" / grading.COURSE_ID / "feedback").glob("*.html"))) == len(released.released)
    text = released.describe()
    assert f"released to {len(released.released)} student(s)" in text and "  no_secret: no submission_secret" in text
    assert "generated but not released through the exchange for 2 (hand it to them yourself):" in text


def test_a_cell_stopped_at_its_limit_says_so_once_not_as_a_keyboard_interrupt_too(bad_class):
    """The limit's interrupt raises KeyboardInterrupt in the kernel: the same event as the limit, which the cell
    states with its number; the feedback shows it once."""
    course, _, _, _, _ = bad_class
    nb = nbformat.read(str(course / "grader" / "autograded" / "infinite_loop" / AID / f"{AID}.ipynb"), as_version=4)
    i = cell_index(nb, f"{AID}-dot_loop-solution")
    assert [(o.output_type, o.get("ename")) for o in nb.cells[i].outputs] == [("error", "CellTimeoutError")]
    assert nb.cells[i].outputs[0].evalue.startswith(f"cell {i + 1} ran past its time limit of {LIMIT} s")
    html = (course / "grader" / "feedback" / "infinite_loop" / AID / f"{AID}.html").read_text()
    assert "KeyboardInterrupt" not in html and html.count(f"cell {i + 1} ran past its time limit of {LIMIT} s") == 1


def test_each_outcome_is_handed_on_once_after_it_is_committed(bad_class):
    _, outcomes, _, arrived, _ = bad_class
    assert sorted(student for student, _ in arrived) == sorted(o.student for o in outcomes)
    assert all(was_committed for _, was_committed in arrived)


def test_every_task_is_handed_the_expected_values_the_run_computed_once(bad_class):
    """On a cluster of two workers, each test cell's expected values are computed by one task of the run, on one
    worker, and handed to every grading task whose judge reaches that cell (`twoprim.grading.oracle.Expected`): each
    graded submission's judge is handed as many as this process computes for the same cells; one never judged (its
    kernel died, it ran out of time) waits for none and is handed none."""
    from twoprim.grading import oracle

    course, outcomes, _, _, _ = bad_class
    source = {p.name: p.read_bytes() for p in (course / "solutions" / AID).glob("*.ipynb")}
    cells = oracle.graded_cells(source)
    assert len(cells) == 10
    here = sum(len(pickle.loads(oracle.cell_values(*cell))["values"]) for cell in cells)  # noqa: S301 - its own
    judged = [o for o in outcomes if o.status == "graded"]
    assert here > 0 and judged and {o.expected_given for o in judged} == {here}
    assert {o.expected_given for o in outcomes if o.status != "graded"} <= {0}
    assert len({o.worker for o in outcomes}) == 2


@pytest.mark.parametrize(
    "student, kept, cut",
    [
        ("many_lines", "\n100\n", "\n99999\n"),  # nbgrader's LimitOutput keeps the beginning
        ("one_huge_line", "more characters cut by the grader", "x" * 30_000),  # ours cuts one long line
    ],
)
def test_huge_output_is_cut_in_the_autograded_notebook(bad_class, student, kept, cut):
    course, _, _, _, _ = bad_class
    path = course / "grader" / "autograded" / student / AID / f"{AID}.ipynb"
    assert path.stat().st_size < 200_000
    nb = nbformat.read(str(path), as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert kept in printed and cut not in printed


def test_each_kernel_runs_under_the_memory_limit(bad_class):
    course, _, _, _, _ = bad_class
    nb = nbformat.read(str(course / "grader" / "autograded" / "limits_probe" / AID / f"{AID}.ipynb"), as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert f"address space limit {grading.MEMORY_LIMIT_BYTES}" in printed


def test_reports_histogram_and_summary(bad_class):
    course, _, _, _, _ = bad_class
    png = course / "grader" / "reports" / f"{AID}_tests.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = grading.write_reports(AID, root=course)
    graded = [s for s, (_, status, _) in EXPECTED.items() if status == "graded"]
    assert summary["graded"] == len(graded) and summary["failed"] == len(EXPECTED) - len(graded)
    assert summary["median"] == 15.0
    text = grading.format_summary(summary, root=course)
    assert f"{len(EXPECTED)} submissions, {len(graded)} graded" in text
    _, outcomes, _, _, _ = bad_class
    counts = {status: sum(o.status == status for o in outcomes) for status in ("graded", "failed", "flagged")}
    assert {k: summary[k] for k in counts} == counts, "the run's counts and the report's agree"
    assert "workers" not in text, "the summary of a report alone names no workers: they were another run's"
    lines = grading.format_problems(summary).splitlines()
    failed = sorted(s for s, (_, status, _) in EXPECTED.items() if status == "failed")
    assert [line.split(":")[0].split()[-1] for line in lines] == failed  # one line each, with the reason
    assert all(line.startswith("  failed ") and len(line) <= 160 for line in lines)


def test_grading_again_gives_the_same_reports_and_never_touches_submissions(bad_class):
    course, _, before, _, _ = bad_class
    first = (course / "grader" / "reports" / f"{AID}.csv").read_text()
    again = ["perfect", "wrong_top_k", "stripped_metadata", "not_json"]
    grading.autograde(AID, root=course, workers=2, students=again, progress=False)
    assert (course / "grader" / "reports" / f"{AID}.csv").read_text() == first
    assert _digest(course / "grader" / "submitted") == before


def test_a_correct_notebook_with_large_output_scores_the_same_on_a_loaded_machine(tmp_path):
    """50 MB printed by a correct answer, graded with two busy processes beside the grader, whose load stretches
    the cell past its wall-clock limit (6 s here). The limit counts the kernel's CPU time
    (`execute.CpuTimedExecute`) and the output may drain for as long (not nbclient's 4 s): the score of a correct
    notebook on an idle machine, all cells run."""
    import subprocess
    import sys

    from twoprim.grading import kernels

    course = _course(tmp_path / "course")
    write(
        course / "grader" / "submitted",
        "loud",
        AID,
        prepend(AID, f"{AID}-neuron-solution", "for i in range(500_000):\n    print('x' * 99)"),
    )
    kernels.warm_forkserver(None)  # the grader's forkserver (a one-off start, no cell timed) before the load: the
    # busy processes burn CPU only while the submission is graded
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        [loaded] = grading.autograde(AID, root=course, progress=False, cell_timeout=6)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait(timeout=10)
    assert (loaded.status, loaded.score, loaded.reason) == ("graded", 15.0, "all cells ran"), loaded.reason


LATE_POLICY = '\nc.LateSubmissionPlugin.penalty_method = "zero"  # the instructor\'s policy: late scores nothing\n'


def _late_class(course: Path, *, release: bool = True) -> Path:
    """Two right answers: one before the deadline below, one half an hour after it. Without `release`, only the
    due date in the gradebook, which is all plain nbgrader's autograde reads of a release (`nbgrader
    release_assignment` is a process of ~5 s of CPU)."""
    with open(course / "grader" / "nbgrader_config.py", "a") as f:
        f.write(LATE_POLICY)
    write(course / "grader" / "submitted", "on_time", AID, answered(AID))  # classroom.TIMESTAMP: 2026-11-30 09:00
    write(course / "grader" / "submitted", "late", AID, answered(AID), timestamp="2026-12-01 10:30:00.000000 UTC")
    if release:
        course_cli.release(AID, root=course, due="2026-12-01 10:00 Europe/London")  # 10:00 UTC in December
    else:
        grading.init_db(database_url(course))
        grading.released_notebooks(AID, course, database_url(course))
        with Gradebook(database_url(course), grading.COURSE_ID) as gb:
            _with_due(gb, datetime.datetime(2026, 12, 1, 10))
    return course


def test_a_late_submission_gets_nbgraders_penalty_and_the_report_says_how_late(tmp_path, monkeypatch):
    monkeypatch.setenv("TWOPRIM_EXCHANGE", str(tmp_path / "exchange"))
    ours, plain = _late_class(_course(tmp_path / "ours")), _late_class(_course(tmp_path / "plain"), release=False)
    assert (tmp_path / "exchange" / grading.COURSE_ID / "outbound" / AID / f"{AID}.ipynb").is_file()  # released
    assert deadlines.read(tmp_path / "exchange") == {AID: datetime.datetime(2026, 12, 1, 10)}  # students see it
    grading.autograde(AID, root=ours, workers=2, progress=False)
    rows = _rows(ours)
    assert {s: (r["score"], r["seconds_late"], r["late_penalty"]) for s, r in rows.items()} == {
        "on_time": ("15", "0", "0"),
        "late": ("0", "1800", "15"),
    }, rows
    summary = grading.write_reports(AID, root=ours)
    assert "2 graded, 0 failed; 1 late (scores after the late penalty); mean 7.50" in grading.format_summary(summary)
    assert course_cli.collected(AID, root=ours) == (
        "2 submission(s) of ex01_dot in grader/submitted/; due 2026-12-01 10:00 UTC: 1 late (late 30 min)"
    )

    assert course_cli.release(AID, root=ours) == datetime.datetime(2026, 12, 1, 10)  # released again: kept
    course_cli.release(AID, root=ours, due="2026-12-01 11:00 UTC")  # the deadline moved after grading
    assert deadlines.read(tmp_path / "exchange") == {AID: datetime.datetime(2026, 12, 1, 11)}
    assert grading.autograde(AID, root=ours, workers=2, progress=False) == []  # nothing is graded again, but
    assert (_rows(ours)["late"]["score"], _rows(ours)["late"]["late_penalty"]) == ("15", "0")  # on time now
    with Gradebook(database_url(ours), grading.COURSE_ID) as gb:  # moved back, in the formgrader this time
        _with_due(gb, datetime.datetime(2026, 12, 1, 10))
    grading.autograde(AID, root=ours, workers=2, progress=False)
    assert _rows(ours)["late"]["late_penalty"] == "15"

    # one student's extension (nbgrader keeps it on a submission row; the course grants it before one exists too)
    assert course_cli.extend(AID, "late", "2026-12-01 12:00 Europe/London", root=ours) == (
        "late may submit ex01_dot until 2026-12-01 12:00 UTC (2 h after its due date, 2026-12-01 10:00 UTC); their "
        "late penalty follows it from now on"
    )
    assert _late_and_penalty(ours, "late") == (0, 0)  # at once
    assert course_cli.collected(AID, root=ours).endswith(
        "due 2026-12-01 10:00 UTC: 0 late; late's extension runs to 2026-12-01 12:00 UTC"
    )
    grading.autograde(AID, root=ours, students=["late"], progress=False)  # graded again: merged with it
    assert _late_and_penalty(ours, "late") == (0, 0) and _rows(ours)["late"]["score"] == "15"
    with pytest.raises(SystemExit, match=r"2026-12-01 09:00 UTC is not after ex01_dot's due date, 2026-12-01 10:00"):
        course_cli.extend(AID, "late", "2026-12-01 09:00 UTC", root=ours)
    with pytest.raises(SystemExit, match=r"no student 'lte' in the gradebook.*known: late, on_time"):
        course_cli.extend(AID, "lte", "2026-12-02 09:00 UTC", root=ours)
    assert "taken back" in course_cli.extend(AID, "late", None, root=ours)
    assert _late_and_penalty(ours, "late") == (1800, 15)

    nbgrader(["autograde", AID, "--student", "late"], root=plain, capture=True)  # plain nbgrader, the same policy
    for course in (ours, plain):
        with Gradebook(database_url(course), grading.COURSE_ID) as gb:
            late = gb.find_submission(AID, "late")
            assert (late.score, late.late_submission_penalty, late.total_seconds_late) == (15, 15, 1800), course

    with Gradebook(database_url(ours), grading.COURSE_ID) as gb:  # the due date edited in the formgrader
        _with_due(gb, datetime.datetime(2026, 12, 1, 9))
    assert course_cli.collect(AID, root=ours).splitlines()[-1] == (
        "2 submission(s) of ex01_dot in grader/submitted/; due 2026-12-01 09:00 UTC: 1 late (late 1 h 30 min)"
    )
    assert deadlines.read(tmp_path / "exchange") == {AID: datetime.datetime(2026, 12, 1, 9)}  # students see it too


def _with_due(gb: Gradebook, due: datetime.datetime) -> None:
    """The assignment in the gradebook with this due date (nbgrader annotates its **kwargs as dicts)."""
    gb.update_or_create_assignment(AID, duedate=due)  # pyright: ignore[reportArgumentType]


def _late_and_penalty(course: Path, student: str) -> tuple[float, float | None]:
    with Gradebook(database_url(course), grading.COURSE_ID) as gb:
        sub = gb.find_submission(AID, student)
        return sub.total_seconds_late, sub.late_submission_penalty


def test_a_due_date_without_a_time_zone_is_refused(tmp_path):
    course = _course(tmp_path / "course")
    write(course / "grader" / "submitted", "alice", AID, answered(AID))
    with pytest.raises(SystemExit, match=r"ex01_dot has no due date, so there is nothing to extend: give it one"):
        course_cli.extend(AID, "alice", "2026-12-09 23:59 UTC", root=course)
    with pytest.raises(SystemExit, match=r"--until '2026-12-09' has no time zone"):
        course_cli.extend(AID, "alice", "2026-12-09", root=course)
    (course / "grader" / "gradebook.db").unlink()
    with pytest.raises(SystemExit, match=r"--due '2026-12-09 23:59' has no time zone.*Europe/Berlin"):
        course_cli.release(AID, root=course, due="2026-12-09 23:59")
    with pytest.raises(SystemExit, match=r"'Mars/Base' is not a time zone"):
        course_cli.release(AID, root=course, due="2026-12-09 23:59 Mars/Base")
    assert not (course / "grader" / "gradebook.db").exists()  # refused before anything was written


def test_unknown_student_is_refused(bad_class):
    course, _, _, _, _ = bad_class
    with pytest.raises(SystemExit, match="no submission of ex01_dot for nobody"):
        grading.autograde(AID, root=course, students=["nobody"], progress=False)


@pytest.mark.parametrize("which, score", [("solutions", 15.0), ("blank", 0.0)])
def test_selfgrade_gives_the_instructors_score_and_feedback_without_hidden_source(tmp_path, which, score):
    course = _course(tmp_path / "course")
    notebook = tmp_path / "mine.ipynb"
    nbformat.write(answered(AID) if which == "solutions" else student_version(AID), str(notebook))
    result = grading.selfgrade(AID, notebook=notebook, root=course)
    assert (result.outcome.status, result.outcome.score, result.outcome.max_score) == ("graded", score, 15.0)
    html = result.feedback.read_text()
    assert result.feedback == course / "grader" / "selfgrade" / f"{AID}.html"
    assert f"Score: {score} / 15.0" in html
    assert "BEGIN HIDDEN TESTS" not in html and "seed=201" not in html
    assert f"{AID}: {int(score)} / 15 points, hidden checks included" in result.describe()
    saved = json.loads((course / "grader" / "selfgrade" / f"{AID}.json").read_text())
    assert (saved["status"], saved["score"], saved["max_score"], saved["notebook"]) == (
        "graded",
        score,
        15.0,
        str(notebook),
    )
    assert sum(saved["tests"].values()) == score and len(saved["tests"]) == 10


def test_selfgrade_without_the_hidden_checks_says_to_submit_instead(tmp_path):
    """A class's copy without solutions/ (or a hub student, who cannot read it): a clear refusal, nothing written."""
    course = _course(tmp_path / "course")
    assert grading.require_hidden_checks("ex99_typo", root=course) is None  # a typo: the command names the known ones
    shutil.rmtree(course / "solutions")
    with pytest.raises(
        SystemExit,
        match=rf"self-grading runs the hidden checks in .*{AID}.ipynb, and this copy of "
        rf"the course has none .* Submit {AID} instead",
    ):
        grading.selfgrade(AID, root=course)
    assert not (course / "grader" / "selfgrade").exists()


def test_only_throw_away_gradebooks_are_written_without_syncing_to_disk(tmp_path):
    """Inside `scratch_gradebooks(folder)`, an SQLite gradebook under that folder skips fsync (a snapshot or a
    worker's copy: nothing in it outlives the run); the course gradebook beside it keeps SQLite's defaults."""
    from sqlalchemy import create_engine, text

    from twoprim.grading.gradebook import scratch_gradebooks

    def pragmas(db: Path) -> tuple:
        engine = create_engine(f"sqlite:///{db}")
        try:
            with engine.connect() as conn:
                return (
                    conn.execute(text("PRAGMA synchronous")).scalar(),
                    conn.execute(text("PRAGMA journal_mode")).scalar(),
                )
        finally:
            engine.dispose()

    (tmp_path / "scratch").mkdir()
    (tmp_path / "course").mkdir()
    defaults = pragmas(tmp_path / "course" / "before.db")
    with scratch_gradebooks(tmp_path / "scratch"):
        assert pragmas(tmp_path / "scratch" / "snapshot.db") == (0, "memory")
        assert pragmas(tmp_path / "course" / "gradebook.db") == defaults
    assert pragmas(tmp_path / "scratch" / "after.db") == defaults, "only while inside"
    assert defaults[0] != 0 and defaults[1] != "memory"


def test_the_benchmark_splits_a_run_into_fixed_seconds_and_a_marginal_rate():
    bench = scripts.load("scripts/bench_autograde.py")
    # 12 s before the first grade, then one every 0.5 s (two workers: in pairs), arriving out of order
    arrivals = [12 + 0.5 * (i + i % 2) for i in range(20)][::-1]
    fixed, marginal = bench.fit(arrivals)
    assert marginal == pytest.approx(0.5) and fixed == pytest.approx(12 + 0.5 * 20 - 20 * 0.5)
    assert bench.fit([3.0]) == (0.0, 3.0)


def test_the_benchmark_names_every_student_whose_score_moved_between_runs():
    bench = scripts.load("scripts/bench_autograde.py")
    same = {"s000": 15.0, "s001": 0.0}
    assert bench.differences([same, dict(same), dict(same)], dict(same)) == {}
    assert bench.differences([same, {"s000": 15.0, "s001": 1.0}, same]) == {"s001": [0.0, 1.0, 0.0]}
    assert bench.differences([same, same], {"s000": 19.0, "s001": 0.0}) == {"s000": [15.0, 15.0, 19.0]}
    assert bench.differences([same, {"s000": 15.0}]) == {"s001": [0.0, None]}, "a student missing from a run"


def test_a_fault_of_the_grader_is_retried_then_recorded_not_graded_never_a_zero(tmp_path, monkeypatch, capsys):
    """The grader's own failure (here: a worker process out of memory) is tried again; what still fails is "not
    graded": no grade written, an earlier grade and autograded notebook kept, the command exits 1 naming it, and the
    same command run again (no --force) grades it. A stand-in for the task keeps this to the bookkeeping."""
    from twoprim.grading import cluster
    from twoprim.grading.gradebook import not_graded

    course = _course(tmp_path / "course")
    for student in ("flaky", "broken"):
        write(course / "grader" / "submitted", student, AID, answered(AID))
    url = database_url(course)
    calls: dict[str, int] = {}
    still_broken = {"broken"}

    def task(task, snapshot=None):
        student = task["student"]
        calls[student] = calls.get(student, 0) + 1
        if student in still_broken or (student == "flaky" and calls[student] == 1):
            return grading.Outcome(student, status=grading.NOT_GRADED, reason="the grader itself failed: MemoryError: ")
        return grading.Outcome(
            student,
            status="graded",
            reason="all cells ran",
            score=15.0,
            max_score=15.0,
            autograded={f"{AID}.ipynb": f"graded {student}".encode()},
        )

    monkeypatch.setattr(cluster, "grade_task", task)
    earlier = grading.Outcome(
        "broken",
        status="graded",
        reason="all cells ran",
        score=15.0,
        max_score=15.0,
        autograded={f"{AID}.ipynb": b"the earlier autograded notebook"},
    )
    grading.init_db(url)
    grading.released_notebooks(AID, course, url)  # the assignment in the gradebook, as a first autograde leaves it
    grading.merge(AID, earlier, course, url, digest_of="an earlier submission")
    rc = course_cli.run_autograde(AID, root=course, progress=False, in_process=True)
    printed = capsys.readouterr().out
    assert rc == 1 and calls == {"flaky": 2, "broken": cluster.MAX_ATTEMPTS}, (rc, calls)
    assert "1 graded, 0 failed, 1 not graded (a fault of the grader, not the students')" in printed, printed
    assert "  NOT GRADED broken: the grader itself failed: MemoryError" in printed, printed
    assert "run the same command again, without --force, to grade them" in printed
    assert set(not_graded(AID, url)) == {"broken"}
    assert committed(AID, url)["broken"] == "an earlier submission", "the earlier grade's row is kept"
    assert (
        course / "grader" / "autograded" / "broken" / AID / f"{AID}.ipynb"
    ).read_bytes() == b"the earlier autograded notebook"
    row = _rows(course)["broken"]
    assert row["status"] == "not graded" and row["reason"].startswith("the grader itself failed: MemoryError")
    assert "the score is the earlier grade's, kept" in row["reason"]

    still_broken.clear()  # the machine has its memory back: the same command, no --force
    assert course_cli.run_autograde(AID, root=course, progress=False, in_process=True) == 0
    assert calls["broken"] == cluster.MAX_ATTEMPTS + 1 and calls["flaky"] == 2, "only the one not graded"
    assert not not_graded(AID, url) and _rows(course)["broken"]["status"] == "graded"
    assert (course / "grader" / "autograded" / "broken" / AID / f"{AID}.ipynb").read_bytes() == b"graded broken"


def test_an_error_of_the_graders_own_while_nbgrader_runs_is_never_the_students_zero(tmp_path, monkeypatch):
    """nbgrader fails with no sign of the notebook's doing (here: the grader's own execute preprocessor raises, as
    grader code half-updated under a running worker did): not graded, tried again, never a grade; the same command
    grades it once the grader is sound."""
    from twoprim.grading import cluster, execute
    from twoprim.grading.gradebook import not_graded

    course = _course(tmp_path / "course")
    write(course / "grader" / "submitted", "ann", AID, answered(AID))
    url, calls = database_url(course), []

    def broken(nb):
        calls.append(nb)
        raise AttributeError("module 'twoprim.core.verdicts' has no attribute 'graded_cells'")

    monkeypatch.setattr(execute, "share_test_cells", broken)
    outcomes = grading.autograde(AID, root=course, in_process=True, unisolated=True, progress=False)
    assert [(o.student, o.status) for o in outcomes] == [("ann", grading.NOT_GRADED)], outcomes
    assert outcomes[0].reason.startswith("the grader itself failed while nbgrader ran the notebook: "), outcomes
    assert "graded_cells" in outcomes[0].reason, outcomes[0].reason
    assert len(calls) == cluster.MAX_ATTEMPTS
    assert set(not_graded(AID, url)) == {"ann"} and "ann" not in committed(AID, url)
    # nbgrader's log with the traceback, where the instructor reads it, named in the reason
    log = course / "grader" / "reports" / f"{AID}-not-graded" / "ann.log"
    assert outcomes[0].reason.endswith(f"the grader's log and traceback: grader/reports/{AID}-not-graded/ann.log")
    text = log.read_text()
    assert text.startswith(f"ann's submission of {AID} was not graded: the grader itself failed")
    assert "Traceback (most recent call last)" in text and "in broken" in text and "graded_cells" in text
    monkeypatch.undo()
    outcomes = grading.autograde(AID, root=course, in_process=True, unisolated=True, progress=False)
    assert [(o.student, o.status, o.score) for o in outcomes] == [("ann", "graded", 15.0)], outcomes
    assert not not_graded(AID, url) and not log.exists(), "graded: the log of its failure is gone"


GRADER_PROCESSES = {  # what the test kills, found among this process's descendants by its command line
    "forkserver": lambda argv: "twoprim.grading.forkserver" in argv and "serve" in argv and "bwrap" not in argv[0],
    "sandbox": lambda argv: bool(argv) and argv[0].endswith("bwrap"),  # the forkserver's bubblewrap (either process)
    "launcher": lambda argv: "twoprim.grading.forkserver" in argv and "launch" in argv,
}


def _serving_her(process: str):
    """The grader's `process` that serves the kernel running now, among this test process's descendants (another
    forkserver may be left idle by an earlier test): the forkserver that forked it (a kernel is a fork of its
    forkserver, with the same command line: a forkserver with such a child), that forkserver's nearest bubblewrap,
    or the newest launcher. None when none runs yet."""
    import psutil

    def is_(kind, proc):
        with contextlib.suppress(psutil.Error):
            return GRADER_PROCESSES[kind](proc.cmdline())
        return False

    tree = psutil.Process().children(recursive=True)
    if process == "launcher":
        return max((p for p in tree if is_("launcher", p)), key=lambda p: p.create_time(), default=None)
    serving = [p for p in tree if is_("forkserver", p) and any(is_("forkserver", c) for c in p.children())]
    if not serving:
        return None
    if process == "forkserver":
        return serving[0]
    return next((p for p in serving[0].parents() if is_("sandbox", p)), None)


@pytest.mark.parametrize("process", sorted(GRADER_PROCESSES))
def test_a_grading_process_killed_while_a_student_runs_leaves_them_not_graded_and_a_rerun_grades_them(
    tmp_path, monkeypatch, capsys, process
):
    """A process of the grader's between `./course autograde` and the student's kernel (the forkserver, its sandbox,
    the kernel's launcher) killed with SIGKILL while an honest student's answer cell runs: not graded, named, the
    command exits 1, no grade written; the same command run again grades it 15/15. The kill comes on every try
    (`MAX_ATTEMPTS` 1 here: a fault retried within the run is tests above)."""
    import threading
    import time

    import psutil

    from twoprim.grading import cluster, kernels
    from twoprim.grading.gradebook import not_graded

    course = _course(tmp_path / "course")
    write(
        course / "grader" / "submitted", "ann", AID, prepend(AID, f"{AID}-dot-solution", "import time\ntime.sleep(4)")
    )
    monkeypatch.setattr(cluster, "MAX_ATTEMPTS", 1)
    killed, stop = [], threading.Event()

    def kill_while_her_answer_runs():  # the cell log names the cell about to run (preprocessors.record_cell_start)
        deadline = time.monotonic() + 240
        while not stop.is_set() and time.monotonic() < deadline:
            logs = list((kernels.scratch() / "work").glob("*/cell.log"))
            if any(f"{AID}-dot-solution" in log.read_text(errors="replace") for log in logs if log.is_file()):
                time.sleep(0.3)  # inside its time.sleep(4)
                target = _serving_her(process)
                if target is not None:
                    with contextlib.suppress(psutil.Error):
                        target.kill()
                        killed.append(target.pid)
                        return
            time.sleep(0.05)

    hook = threading.Thread(target=kill_while_her_answer_runs, daemon=True)
    hook.start()
    try:
        rc = course_cli.run_autograde(AID, root=course, progress=False, in_process=True)
    finally:
        stop.set()
        hook.join(timeout=10)
    printed = capsys.readouterr().out
    assert killed, f"the {process} was never found running while ann's answer ran"
    assert rc == 1, printed
    assert "0 graded, 0 failed, 1 not graded (a fault of the grader, not the students')" in printed, printed
    assert "  NOT GRADED ann: " in printed, printed
    url = database_url(course)
    reason = not_graded(AID, url)["ann"]["reason"]
    why = (
        "the kernel's launcher (a grader process) was killed, taking the kernel with it"
        if process == "launcher"
        else "the grading forkserver died under the kernel ("
    )  # (its connection closed, or how the read failed)
    assert reason.startswith(why) and reason.endswith(
        f", while the kernel ran {AID}-dot-solution (cell 9); not counted against the student; the grader's log and "
        f"traceback: grader/reports/{AID}-not-graded/ann.log"
    ), reason
    assert "ann" not in committed(AID, url) and _rows(course)["ann"]["status"] == "not graded"
    assert (course / "grader" / "reports" / f"{AID}-not-graded" / "ann.log").is_file()

    monkeypatch.undo()
    assert course_cli.run_autograde(AID, root=course, progress=False, in_process=True) == 0
    assert (_rows(course)["ann"]["status"], float(_rows(course)["ann"]["score"])) == ("graded", 15.0)
    assert not not_graded(AID, url)


def _exit(code: int, **usage) -> list[dict]:
    return [{"launcher": 10}, {"kernel": 11}, {"exit": code, "cpu_s": 1.0, "maxrss": 2**29, "oom_kills": 0, **usage}]


@pytest.mark.parametrize(
    "records, whose, words",
    [
        (_exit(3), "student", "the student's code ended the kernel's process (exit status 3, as os._exit(3) does)"),
        (_exit(-11), "student", "the kernel crashed in the student's code (SIGSEGV, a segmentation fault"),
        (
            _exit(-6),
            "student",
            "the kernel crashed in the student's code (SIGABRT, aborted by its code or a library it "
            "called, e.g. on an allocation that failed under the address-space limit of 8 GiB)",
        ),
        (
            _exit(-9, oom_kills=1, maxrss=6 * 2**30),
            "grader",
            "the machine ran out of memory and its out-of-memory killer "
            "stopped the kernel (it held 6.0 GiB at its peak, within its "
            "own limit of 8 GiB)",
        ),
        (_exit(-9, cpu_s=600.2), "student", "the kernel used up its CPU limit of 600 s (SIGKILL)"),
        (_exit(-24), "student", "the kernel used up its CPU limit of 600 s (SIGXCPU)"),
        (_exit(-25), "student", "the student's code wrote a file past the limit of 256 MiB (SIGXFSZ)"),
        (
            _exit(-9),
            "grader",
            "the kernel was killed by SIGKILL from outside, not by one of its limits or the "
            "out-of-memory killer (the grader cannot tell who sent it)",
        ),
        (_exit(-15), "grader", "the kernel was killed by SIGTERM from outside"),
        (
            [
                {"launcher": 10},
                {"kernel": 11},
                {"lost": "the grading forkserver died under the kernel (its connection closed)"},
            ],
            "grader",
            "the grading forkserver died under the kernel",
        ),
        (
            [{"launcher": 10}, {"kernel": 11}],
            "grader",
            "the kernel's launcher (a grader process) was killed, taking the kernel with it",
        ),
        ([{"launcher": 10}], "grader", "the kernel's launcher (a grader process) died before the kernel started"),
        ([], "grader", "the kernel's launcher (a grader process) died before it could start the kernel"),
        (
            _exit(0) + [{"launcher": 12}, {"kernel": 13}],
            "grader",
            "the kernel's launcher",
        ),  # the second notebook's kernel
    ],
)
def test_whose_a_dead_kernel_is_follows_what_the_forkserver_reported(records, whose, words):
    """A kernel that died in a cell is the student's only when the forkserver, alive, reported its end and that end
    is the student's code's doing; nothing reported, or a signal with nothing of the student's behind it, is the
    grader's (`forkserver.kernel_death`, from what the launcher noted)."""
    from twoprim.grading import forkserver, sandbox

    got = forkserver.kernel_death(
        records,
        cpu_limit=sandbox.CPU_LIMIT_SECONDS,
        memory_limit=sandbox.MEMORY_LIMIT_BYTES,
        file_limit=sandbox.FILE_SIZE_LIMIT_BYTES,
    )
    assert got[0] == whose and got[1].startswith(words), got


def test_a_kernel_that_never_answered_is_never_the_students():
    """A kernel that died before replying to kernel_info ran none of the student's code: not graded, with why."""
    from twoprim.grading.submission import _not_finished

    log = "[ERROR] Kernel died before replying to kernel_info\nRuntimeError: Kernel died before replying to kernel_info"
    out = _not_finished(grading.Outcome("ann"), log, 1, None, 60, ("grader", "the grading forkserver went away"))
    assert out.status == grading.NOT_GRADED and out.log == log
    assert out.reason == (
        "the kernel did not start: it died or stayed silent before any cell ran, so none of the "
        "student's code had run (the grading forkserver went away)"
    )


def _nbgrader_cells(nb) -> dict[str, tuple]:
    return {
        c.metadata["nbgrader"]["grade_id"]: (c.cell_type, c.metadata["nbgrader"], c.source)
        for c in nb.cells
        if "nbgrader" in c.metadata
    }


def test_every_cell_of_the_assignment_gets_the_releases_metadata_and_its_tests_their_code_back():
    """Whatever a submission's nbgrader metadata says (answers marked graded or locked, points changed, a test's code
    edited, metadata without a grade id), the realigned notebook's nbgrader cells are the release's, answers kept;
    the notes say what was changed and restored."""
    from twoprim.grading.realign import realign

    release = student_version(AID)
    nb = answered(AID)
    answers = {
        c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")
    }
    nb.cells[cell_index(nb, f"{AID}-dot-solution")].metadata["nbgrader"].update(grade=True, points=5, locked=True)
    test = nb.cells[cell_index(nb, f"{AID}-dot")]
    test.metadata["nbgrader"]["points"] = 100
    test.source = "print('passed')"
    nb.cells[cell_index(nb, f"{AID}-top_k-hidden")].metadata["nbgrader"].update(checksum="forged", solution=True)
    nb.cells.append(nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade": True, "points": 50}}))
    repaired, notes = realign(nb, release)
    cells, ours = _nbgrader_cells(repaired), _nbgrader_cells(release)
    assert {g: c[:2] for g, c in cells.items()} == {g: c[:2] for g, c in ours.items()}, "every cell's type and metadata"
    assert {g: c[2] for g, c in cells.items() if g in answers} == answers, "the student's answers kept"
    assert {g: c[2] for g, c in cells.items() if g not in answers} == {
        g: c[2] for g, c in ours.items() if g not in answers
    }
    assert "nbgrader" not in repaired.cells[-1].metadata and repaired.cells[-1].source == "x = 1"
    assert notes == [
        "1 cell(s) had nbgrader metadata without a grade id (not the assignment's); they ran as the student's own code",
        "restored the assignment's nbgrader metadata the submission had changed: ex01_dot-dot-solution (grade false "
        "→ true, locked false → true, points absent → 5), ex01_dot-dot (points 1 → 100), ex01_dot-top_k-hidden "
        "(checksum, solution false → true)",
        "restored the assignment's version of ex01_dot-dot, which the submission had edited",
    ]
    assert realign(answered(AID), release) == (answered(AID), []), "an honest submission is left as it is"


def test_only_a_notebook_with_nothing_of_the_assignment_is_refused():
    from twoprim.grading.realign import NotTheAssignment, realign

    release = student_version(AID)
    with pytest.raises(
        NotTheAssignment,
        match=r"none of the notebook's 34 cells is one of the assignment's answer or "
        r"test cells .* its grade ids are ex02_gemm-intro, .*another "
        r"assignment's notebook\?",
    ):
        realign(student_version("ex02_gemm"), release)
    with pytest.raises(NotTheAssignment, match="the notebook has no cells"):
        realign(nbformat.v4.new_notebook(), release)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(solution_code_of("top_k"))])
    repaired, notes = realign(nb, release)  # one answer, everything else gone: graded, with the rest restored
    assert "ex01_dot-top_k-solution had lost its nbgrader metadata; recognised it" in notes
    assert len(_nbgrader_cells(repaired)) == len(_nbgrader_cells(release))


def solution_code_of(fn: str) -> str:
    from .classroom import solution_code

    return solution_code(AID)[f"{AID}-{fn}-solution"]
