"""The whole classroom cycle through nbgrader's exchange: two students with their own home folders fetch, work and
submit; the instructor collects, autogrades and releases feedback; each student fetches feedback that holds their
score and none of the hidden tests' source."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from twoprim import course, grading
from twoprim.notebooks import ROOT

from .classroom import answered

AID = "ex01_dot"
BIN = Path(sys.executable).parent


def _student(home: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "USER": name, "LOGNAME": name,
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(BIN / "nbgrader"), *args, "--course", grading.COURSE_ID], cwd=home, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{name}: nbgrader {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_release_fetch_submit_collect_autograde_feedback(tmp_path, monkeypatch):
    root = tmp_path / "course"
    (root / "grader").mkdir(parents=True)
    shutil.copy(ROOT / "grader" / "nbgrader_config.py", root / "grader")
    shutil.copytree(ROOT / "solutions" / AID, root / "solutions" / AID)
    shutil.copytree(ROOT / "exercises" / AID, root / "exercises" / AID)
    exchange = tmp_path / "exchange"
    exchange.mkdir(mode=0o777)
    monkeypatch.setenv("TWOPRIM_EXCHANGE", str(exchange))

    course.release(AID, root=root)
    homes = {name: tmp_path / "home" / name for name in ("alice", "bob")}
    for name, home in homes.items():
        home.mkdir(parents=True)
        _student(home, name, "fetch_assignment", AID)
        fetched = home / AID / f"{AID}.ipynb"
        assert fetched.is_file(), f"{name} did not receive {AID}"
        if name == "alice":  # alice answers everything; bob submits the untouched notebook
            nbformat.write(answered(AID), str(fetched))
        _student(home, name, "submit", AID, f"--student={name}")  # one OS account here: name them explicitly

    course.collect(AID, root=root)
    for name in homes:
        assert (root / "grader" / "submitted" / name / AID / f"{AID}.ipynb").is_file()
    outcomes = {o.student: o for o in grading.autograde(AID, root=root, workers=2, progress=False)}
    assert {n: (o.status, o.score) for n, o in outcomes.items()} == {"alice": ("graded", 15.0), "bob": ("graded", 0.0)}

    course.feedback(AID, root=root)
    for name, score in (("alice", "15.0"), ("bob", "0.0")):
        _student(homes[name], name, "fetch_feedback", AID, f"--student={name}")
        [html] = list((homes[name] / AID / "feedback").glob(f"*/{AID}.html"))
        text = html.read_text()
        assert f"Score: {score} / 15.0" in text
        assert "BEGIN HIDDEN TESTS" not in text and "seed=201" not in text
