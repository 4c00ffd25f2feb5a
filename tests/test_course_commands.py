"""Course commands work without activating anything, from any folder, and explain what to run when they cannot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from twoprim import course
from twoprim.config import ROOT
from twoprim.grading import nbgrader_cli

BIN = Path(sys.executable).parent


def _clean_env(**extra) -> dict[str, str]:
    """The environment of a user who never activated .venv."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != BIN)
    return {**os.environ, "PATH": path, **extra}


def test_course_command_runs_from_another_folder_without_activation(tmp_path):
    proc = subprocess.run(
        [str(ROOT / "course"), "--help"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "generate" in proc.stdout and "bench-lessons" in proc.stdout


def test_course_command_without_environment_says_to_run_make_setup(tmp_path):
    shutil.copy(ROOT / "course", tmp_path / "course")  # a checkout whose .venv was never built
    proc = subprocess.run(
        [str(tmp_path / "course"), "generate"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert f"the course environment {tmp_path}/.venv does not exist yet. Run `make setup`" in proc.stderr


def test_missing_alembic_is_named_with_the_fix(tmp_path):
    fake = tmp_path / "nbgrader"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    with pytest.raises(SystemExit) as info:
        nbgrader_cli.preflight({"PATH": str(tmp_path)})
    message = str(info.value.code)
    assert "`alembic` is not installed" in message and "Run `make setup`" in message


def test_unknown_assignment_lists_the_known_ones(tmp_path):
    with pytest.raises(SystemExit) as info:
        course.generate(["ex99_nope"], into=tmp_path)
    assert "no assignment ex99_nope" in str(info.value.code) and "known: ex01_dot" in str(info.value.code)


@pytest.mark.parametrize("where", ["outside the repository", "repository root"])
def test_plain_nbgrader_from_any_folder_uses_the_course_config(tmp_path, where):
    """nbgrader run by hand finds solutions/ and never creates a stray gradebook in the folder it was run from."""
    cwd = tmp_path / "somewhere" if where == "outside the repository" else ROOT
    cwd.mkdir(exist_ok=True)
    before = set(cwd.iterdir())
    release = tmp_path / "release"
    proc = subprocess.run(
        [
            str(BIN / "nbgrader"),
            "generate_assignment",
            "ex01_dot",
            "--force",
            f"--CourseDirectory.release_directory={release}",
            f"--CourseDirectory.db_url=sqlite:///{tmp_path / 'scratch.db'}",
        ],
        cwd=cwd,
        env=_clean_env(PATH=f"{BIN}{os.pathsep}{_clean_env()['PATH']}"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (release / "ex01_dot" / "ex01_dot.ipynb").is_file(), proc.stderr
    assert set(cwd.iterdir()) == before, f"nbgrader left files in {cwd}: {set(cwd.iterdir()) - before}"


def test_clean_strips_outputs_in_place(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    nb = new_notebook(
        cells=[
            new_code_cell(
                "1 + 1",
                execution_count=3,
                outputs=[new_output("execute_result", {"text/plain": "2"}, execution_count=3)],
            )
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "widgets": {"state": {}},
            "toc": {},
        },
    )
    nb.cells[0].metadata["collapsed"] = True
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, str(path))
    assert course.clean_files([path]) == [path]
    cleaned = nbformat.read(str(path), as_version=4)
    assert cleaned.cells[0].outputs == [] and cleaned.cells[0].execution_count is None
    assert set(cleaned.metadata) == {"kernelspec"} and dict(cleaned.cells[0].metadata) == {}
    assert course.clean_files([path]) == []


@pytest.mark.parametrize("command", ["release", "collect", "autograde", "feedback", "report", "selfgrade"])
def test_class_commands_name_the_known_assignments(command):
    proc = subprocess.run([str(ROOT / "course"), command, "ex99_nope"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "no assignment 'ex99_nope'; known: ex01_dot" in proc.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/usr/bin/python3.11", os.X_OK),
    reason="runs the command as another account (root only), with Debian's python3.11",
)
@pytest.mark.parametrize(
    "command",
    ["collect ex01_dot", "autograde ex01_dot", "feedback ex01_dot", "similarity ex01_dot", "release ex01_dot"],
)
def test_a_student_running_an_instructors_command_is_told_whose_it_is(command, tmp_path_factory):
    """As a classroom student: grader/ and solutions/ are the instructor's (0700), so the command says it is the
    instructor's and what a student does instead, not "no assignment 'ex01_dot'; known: ."."""
    import pwd
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="twoprim-student-", dir="/tmp"))
    try:
        base.chmod(0o755)
        shutil.copytree(ROOT / "twoprim", base / "twoprim", ignore=shutil.ignore_patterns("__pycache__"))
        for private in ("grader", "solutions"):
            (base / private).mkdir(mode=0o700)
        nobody = pwd.getpwnam("nobody")
        proc = subprocess.run(
            ["/usr/bin/python3.11", "-m", "twoprim.course", *command.split()],
            cwd=base,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(base), "HOME": "/"},
            user=nobody.pw_uid,
            group=nobody.pw_gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(base)
    verb = command.split()[0]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
        f"error: `./course {verb}` is the instructor's command: it works in {base / 'grader'}, which only the "
        f"instructor can open. As a student, hand in with Submit in JupyterLab's Assignments tab (or `nbgrader "
        f"submit ASSIGNMENT`), fetch your feedback there too, and run `course progress` to see where you stand."
    )


def test_the_help_lists_every_command_of_the_table_under_who_runs_it():
    """The module docstring (`./course --help`) and the command table agree: each command listed once, under the
    heading of who runs it; and the refusal of a classroom's students follows `who`."""
    import re

    headings = {
        "Authors": {course.AUTHOR, course.ANYONE},
        "A class": {course.INSTRUCTOR, course.SUPERUSER},
        "Learners": {course.LEARNER},
    }
    listed, allowed = {}, None
    for line in (course.__doc__ or "").splitlines():
        if line and not line.startswith(" "):
            allowed = next((who for head, who in headings.items() if line.startswith(head)), None)
        found = re.match(r"\s+\./course ([a-z-]+)", line)
        if found:
            assert found.group(1) not in listed, f"{found.group(1)} listed twice"
            listed[found.group(1)] = allowed
    assert set(listed) == set(course.COMMANDS)
    for name, allowed in listed.items():
        assert course.COMMANDS[name].who in allowed, f"{name} ({course.COMMANDS[name].who}) is listed under {allowed}"
    refused = {name for name, c in course.COMMANDS.items() if c.refused_to_students}
    assert {"generate", "release", "autograde", "export"} <= refused
    assert not refused & {"clean", "progress", "selfgrade", "lab", "install-config"}


def test_an_instructors_command_is_refused_to_a_student_before_it_runs(tmp_path, monkeypatch):
    """`who` decides: where grader/ is not the caller's, a class command stops at the refusal, a learner's runs."""
    import functools

    ran = []
    monkeypatch.setattr(
        course,
        "COMMANDS",
        {
            **course.COMMANDS,
            "collect": course.Command("", lambda args: ran.append("collect"), course.INSTRUCTOR, (course.ASSIGNMENT,)),
            "progress": course.Command("", lambda args: ran.append("progress"), course.LEARNER),
        },
    )
    (tmp_path / "grader").mkdir()
    monkeypatch.setattr(course, "refuse_students", functools.partial(course.refuse_students, root=tmp_path))
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path / "grader")  # root reads anything
    with pytest.raises(SystemExit, match="`./course collect` is the instructor's command"):
        course.main(["collect", "ex01_dot"])
    assert course.main(["progress"]) == 0 and ran == ["progress"]


def test_nbgrader_gets_its_own_options_untouched(monkeypatch):
    """`./course nbgrader --version` (an option first) reaches nbgrader as given: argparse would have refused it."""
    import types

    given = []
    monkeypatch.setattr(
        course, "nbgrader", lambda args, check: given.append(args) or types.SimpleNamespace(returncode=3)
    )
    assert course.main(["nbgrader", "--version"]) == 3 and course.main(["nbgrader", "list", "--inbound"]) == 3
    assert given == [["--version"], ["list", "--inbound"]]
