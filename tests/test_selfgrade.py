"""Self-grading from the notebook (`twoprim.learner.selfgrade`, the last cell of every assignment) through the
learner's warm grader (`twoprim.grading.warm`): the cell's score is the score `autograde` gives the same wrong
notebook, its output shows `Self-grade: S of T points` and a row per test cell, `./course selfgrade` reports each
test cell as it runs, a self-grade counts in progress only for the notebook it graded, and an account without the
hidden checks is told to submit. One warm grader, in a folder of this module's own, serves every test here and is
stopped at the end."""

from __future__ import annotations

import json
import os
import time

import nbformat
import pytest
from nbclient import NotebookClient

from tests.classroom import answered, course_copy, write
from twoprim.learner import progress
from twoprim.learner import selfgrade as sg

AID = "ex01_dot"
WRONG = {"ex01_dot-cosine_similarity-solution": "def cosine_similarity(x, w):\n    return 0.5\n"}


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A course copy with a wrong ex01_dot as its exercise notebook, and a warm grader of this module's own."""
    base = tmp_path_factory.mktemp("selfgrade")
    course = course_copy(base / "course", AID)
    notebook = course / "exercises" / AID / f"{AID}.ipynb"
    nbformat.write(answered(AID, WRONG), str(notebook))
    saved = {k: os.environ.get(k) for k in (sg.ENV_DIR, sg.ENV_WARM)}
    folder = base / "grader-dir"
    folder.mkdir(mode=0o700)
    os.environ.update({sg.ENV_DIR: str(folder), sg.ENV_WARM: "on"})
    try:
        sg._start(sg.grader_socket()).close()
        yield course, notebook
    finally:
        assert sg.stop_warm_grader(), "the warm grader was still there to stop"
        assert not sg.grader_socket().exists()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _table(text: str) -> dict[str, str]:
    """grade_id -> ✔/✘ from the rows of the cell's table."""
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(f"{AID}-"):
            rows[parts[0]] = parts[1]
    return rows


def test_the_cell_gives_autogrades_score_on_a_wrong_notebook(warm):
    course, notebook = warm
    nb = nbformat.read(str(notebook), as_version=4)
    assert nb.cells[-1].metadata["nbgrader"]["grade_id"] == f"{AID}-selfgrade"
    os.environ["JPY_SESSION_NAME"] = str(notebook)  # what JupyterLab tells the kernel of the notebook it runs
    try:
        start = time.monotonic()
        NotebookClient(
            nb,
            timeout=300,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(notebook.parent)}},
        ).execute()
        seconds = time.monotonic() - start
    finally:
        os.environ.pop("JPY_SESSION_NAME")
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    shown = [line for line in out.splitlines() if line.startswith("Self-grade: ")]
    assert shown and " of 15 points" in shown[0], out

    write(course / "grader" / "submitted", "wrong", AID, notebook.read_bytes())
    from twoprim import grading

    [outcome] = grading.autograde(AID, root=course, progress=False)
    assert shown[0].startswith(f"Self-grade: {outcome.score:g} of {outcome.max_score:g} points"), (out, outcome)
    assert 0 < outcome.score < outcome.max_score
    rows = _table(out)
    tests = {gid for (_, gid), _ in outcome.grades.items() if not gid.endswith("-solution")}
    assert set(rows) == tests, out
    assert {gid for gid, mark in rows.items() if mark == "✘"} == {
        gid for (_, gid), s in outcome.grades.items() if gid in tests and not s
    }
    assert rows[f"{AID}-cosine_similarity"] == "✘" and rows[f"{AID}-dot"] == "✔"
    saved = json.loads((course / "grader" / "selfgrade" / f"{AID}.json").read_text())
    assert (saved["notebook"], saved["score"]) == (str(notebook), outcome.score)
    print(f"notebook run with its self-grade cell: {seconds:.1f} s")


def test_test_cells_come_as_they_run_and_count_only_for_the_notebook_graded(warm, tmp_path):
    """The events `./course selfgrade` prints, from the warm grader, of a scratch copy of the notebook: a line per
    test cell as it runs, then the result; the copy's grade is not the assignment notebook's in progress."""
    course, notebook = warm
    scratch = tmp_path / "scratch.ipynb"
    scratch.write_bytes(notebook.read_bytes())
    start = time.monotonic()
    lines = [(time.monotonic() - start, event) for event in sg.events(AID, scratch, course)]
    kinds = [e["event"] for _, e in lines]
    assert kinds[0] == "start" and kinds.count("cell") == len(lines[0][1]["tests"]) == 10, kinds
    assert kinds.index("result") > max(i for i, k in enumerate(kinds) if k == "cell") and kinds[-1] == "feedback"
    cells = [t for t, e in lines if e["event"] == "cell"]
    result = next(e for _, e in lines if e["event"] == "result")
    assert cells[0] < cells[-1] < next(t for t, e in lines if e["event"] == "result"), "cells come as they run"
    assert result["status"] == "graded" and 0 < result["score"] < result["max_score"]
    assert progress._read_selfgrade(course, AID, notebook) is None, "a scratch copy's grade is not the notebook's"
    saved = progress._read_selfgrade(course, AID, scratch)
    assert saved is not None and saved["score"] == result["score"]


def test_without_the_hidden_checks_the_cell_says_to_submit(tmp_path):
    course = course_copy(tmp_path / "course", AID)
    notebook = course / "exercises" / AID / f"{AID}.ipynb"
    (course / "solutions" / AID / f"{AID}.ipynb").unlink()
    said: list[str] = []
    assert sg.selfgrade(AID, notebook, out=said.append) is None
    assert len(said) == 1 and f"Submit {AID} instead" in said[0] and "this copy of the course has none" in said[0]
    assert not (course / "grader" / "selfgrade").exists()


def test_the_cell_does_nothing_inside_a_graded_kernel(monkeypatch):
    monkeypatch.setenv("TWOPRIM_CAPTURE_DIR", "/nonexistent")
    said: list[str] = []
    assert sg.selfgrade(AID, out=said.append) is None
    assert said == ["Self-grade: skipped while this notebook is being graded."]


def test_what_the_learner_works_on_comes_first_open_notebooks_then_the_latest_saved(tmp_path, monkeypatch):
    """`worked_on`: the assignments a warm grader prepares ahead, most likely first: one open in JupyterLab (its
    saved workspace), then the most recently saved; never one whose answers are all as released."""
    course = course_copy(tmp_path / "course", AID, "ex02_gemm", "ex03_layers")
    monkeypatch.setenv("JUPYTERLAB_WORKSPACES_DIR", str(tmp_path / "workspaces"))
    assert sg.worked_on(course) == [], "nothing answered yet: nothing to prepare"
    for aid, age in ((AID, 300), ("ex02_gemm", 60)):
        path = course / "exercises" / aid / f"{aid}.ipynb"
        nbformat.write(answered(aid), str(path))
        os.utime(path, (time.time() - age, time.time() - age))
    assert sg.worked_on(course) == ["ex02_gemm", AID]  # the latest saved first; ex03 untouched, left out
    assert sg.worked_on(course, limit=1) == ["ex02_gemm"]
    (tmp_path / "workspaces").mkdir()
    (tmp_path / "workspaces" / "default-37a8.jupyterlab-workspace").write_text(
        json.dumps(
            {
                "data": {
                    f"notebook:exercises/{AID}/{AID}.ipynb": {"data": {"path": f"exercises/{AID}/{AID}.ipynb"}},
                    "notebook:exercises/ex03_layers/ex03_layers.ipynb": {},
                },
                "metadata": {"id": "default"},
            }
        )
    )
    assert sg.worked_on(course) == [AID, "ex02_gemm"]  # open in JupyterLab: first; ex03 open but untouched


def test_a_grader_started_by_lab_prepares_what_the_learner_works_on_before_any_self_grade(tmp_path, monkeypatch):
    """Started as `./course lab` starts it, the warm grader prepares the assignment the learner saved last, with no
    self-grade asked for: its log says so, with the expected values it computed, and nothing is saved for it."""
    course = course_copy(tmp_path / "course", AID)
    nbformat.write(answered(AID, WRONG), str(course / "exercises" / AID / f"{AID}.ipynb"))
    folder = tmp_path / "grader-dir"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(sg.ENV_DIR, str(folder))  # a grader of this test's own, beside the module's
    monkeypatch.setenv(sg.ENV_WARM, "on")
    log = sg.grader_socket().with_suffix(".log")
    assert sg.start_warm_grader(os.getpid(), course) is None
    try:
        deadline = time.monotonic() + 300
        while f"prepared {AID} of {course.resolve()}" not in (text := log.read_text() if log.is_file() else ""):
            assert "not prepared" not in text and time.monotonic() < deadline, text[-2000:]
            time.sleep(0.2)
        values = int(text.split(f"prepared {AID} of {course.resolve()} in ")[1].split("(")[1].split()[0])
        assert values > 0, text  # the expected values of its test cells, computed ahead
        assert not (course / "grader" / "selfgrade").exists(), "preparing saves no self-grade"
    finally:
        assert sg.stop_warm_grader()
