"""A course copied or moved to another folder, its .venv with it: `./course` (and so `make lab`, `make test`, `make
setup`) points the .venv at the new folder before anything runs, so self-grading works there, and never changes the
original's files; where it cannot rewrite the .venv, it prints the command to run instead.

Each copy is this working tree (tracked and new files) with the course's .venv hard-linked in (`cp -al`: seconds,
not a multi-minute build). The repair writes new files, so the original .venv is checked to be byte for byte and inode
for inode what it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest

from twoprim.config import ROOT

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def _files_naming(root: Path) -> list[Path]:
    """The .venv files that name the folder the .venv belongs to."""
    venv = root / ".venv"
    site = next((venv / "lib").glob("python3.*/site-packages"))
    return [
        *site.glob("__editable___twoprim_*_finder.py"),
        venv / "bin" / "nbgrader",
        venv / "bin" / "jupyter",
        venv / "pyvenv.cfg",
        venv / "etc" / "jupyter" / "nbgrader_config.py",
    ]


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    return {str(p): (p.stat().st_ino, hashlib.sha256(p.read_bytes()).hexdigest()) for p in _files_naming(root)}


@pytest.fixture
def moved():
    """moved(name) -> a copy of the course at /tmp/twoprim-moved-*/name, its .venv hard-linked from this one's."""
    base = Path(tempfile.mkdtemp(prefix="twoprim-moved-", dir="/tmp"))
    base.chmod(0o755)  # an unprivileged user must reach it in one test
    original = _snapshot(ROOT)

    def copy(name: str) -> Path:
        dest = base / name
        files = (
            subprocess.run(
                ["git", "ls-files", "-co", "--exclude-standard", "-z"],
                cwd=ROOT,
                capture_output=True,
                check=True,
                timeout=60,
            )
            .stdout.decode()
            .split("\0")
        )
        for rel in filter(None, files):
            if (ROOT / rel).is_file() and not rel.startswith("node_modules/"):
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, dest / rel)
        subprocess.run(["cp", "-al", str(ROOT / ".venv"), str(dest / ".venv")], check=True, timeout=300)
        return dest

    yield copy
    assert _snapshot(ROOT) == original, "the original .venv was changed through a hard link"
    shutil.rmtree(base, ignore_errors=True)


def _run(argv: list, cwd: Path, timeout: int = 240, **kwargs) -> subprocess.CompletedProcess:
    # no warm grader: it would outlive the test by its 15 idle minutes (test_selfgrade covers it)
    env = {
        "PATH": SYSTEM_PATH,
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "TWOPRIM_WARM_GRADER": "off",
    }
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kwargs
    )


def _points(aid: str) -> float:
    nb = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)
    return sum(
        float(c.metadata["nbgrader"]["points"])
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
    )


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def test_selfgrade_in_a_copied_course_grades_the_copy(moved):
    dest = moved("course")
    solved = ROOT / "solutions" / "ex01_dot" / "ex01_dot.ipynb"
    run = _run([dest / "course", "selfgrade", "ex01_dot", "--notebook", solved], cwd=dest.parent, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"note: {dest}/.venv was built in {ROOT} (the course was copied or moved here)" in run.stderr, run.stderr
    total = _number(_points("ex01_dot"))
    assert f"ex01_dot: {total} / {total} points" in run.stdout, run.stdout
    assert "no result" not in run.stdout and "error in" not in run.stdout

    imported = _run([dest / ".venv" / "bin" / "python", "-c", "import twoprim; print(twoprim.__file__)"], cwd=Path("/"))
    assert imported.stdout.strip() == str(dest / "twoprim" / "__init__.py"), imported
    assert (dest / ".venv" / "bin" / "nbgrader").read_text().splitlines()[0] == f"#!{dest}/.venv/bin/python"
    assert (
        f"load_subconfig('{dest}/grader/nbgrader_config.py')"
        in (dest / ".venv" / "etc" / "jupyter" / "nbgrader_config.py").read_text()
    )

    again = _run([dest / "course", "--check-venv"], cwd=dest)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", ""), "a repaired .venv is left alone"


def test_make_lab_and_make_test_check_the_venv_first(moved):
    dest = moved("course")
    plan = _run(["make", "-C", dest, "--no-print-directory", "-n", "test"], cwd=dest).stdout.splitlines()
    check = next(i for i, line in enumerate(plan) if "course --check-venv" in line)
    assert check < next(i for i, line in enumerate(plan) if "-m pytest" in line), plan

    lab = _run(["make", "-C", dest, "--no-print-directory", "lab", "LAB_ARGS=--help"], cwd=dest)
    assert lab.returncode == 0, lab.stdout + lab.stderr
    assert f"note: {dest}/.venv was built in {ROOT}" in lab.stderr, lab.stderr
    finder = next(p for p in _files_naming(dest) if p.name.endswith("_finder.py"))
    assert f"'twoprim': '{dest}/twoprim'" in finder.read_text()


def test_a_venv_it_cannot_rewrite_gets_the_command_to_run(moved):
    """As a user who may not write the copy (root owns it): the exact command, and nothing half-rewritten."""
    python = shutil.which("python3.11", path=SYSTEM_PATH)
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root (to run as nobody) and a Python 3.11 on the system path that nobody can run")
    dest = moved("course")
    venv = dest / ".venv"
    (venv / "pyvenv.cfg").unlink()  # new files: a Python nobody can run (the course's lives in /root)
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n")
    (venv / "bin" / "python3.11").unlink()
    (venv / "bin" / "python3.11").symlink_to(python)
    before = {p: p.read_bytes() for p in _files_naming(dest) if p.name != "pyvenv.cfg"}

    run = _run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", dest / "course", "--check-venv"], cwd=Path("/")
    )
    assert run.returncode == 1, run.stdout + run.stderr
    [error] = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert f"error: {venv} was built in {ROOT}, not here (the course was copied or moved)" in error, error
    assert "cannot point it here (Permission denied" in error and "Traceback" not in run.stderr
    assert f"To fix it, work in a copy of your own: git clone '{dest}' ~/two-primitives" in error, error
    assert {p: p.read_bytes() for p in before} == before, "nothing may be half rewritten"
