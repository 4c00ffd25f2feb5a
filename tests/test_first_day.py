"""A hub's first day and last: `make setup` as root builds the environment from a Python every account can run (so
`make hub` works the first time), and `./course hub --remove-class` removes the accounts the hub made, and only
those. (The browser's side of a student's first day, with a running hub, is in tests/test_hub.py.)"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from twoprim.classroom import class_accounts, setup_python
from twoprim.classroom.hub_checks import MARKER
from twoprim.config import ROOT
from twoprim.core.errors import CourseError

from .accounts import SYSTEM_PATH, delete_account, shared_tmp

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="makes Unix accounts and runs programs as nobody: root only (CI runs as root)"
)


# --- make setup: a Python every account can run -------------------------------------------------------------------


@pytest.fixture
def pythons():
    """A private Python (in a 0700 folder, as pyenv's under /root) and the system's: their paths."""
    base = shared_tmp("twoprim-setup-python-")
    private = base / "home" / ".pyenv" / "bin"
    private.mkdir(parents=True)
    private.parent.parent.chmod(0o700)
    (private / "python3.11").symlink_to("/usr/bin/python3.11")
    yield str(private / "python3.11"), "/usr/bin/python3.11"
    shutil.rmtree(base, ignore_errors=True)


def test_setup_as_root_builds_from_a_python_every_account_can_run(pythons):
    """The decision, with who can run what given: root's private Python is swapped for the shared one (said, with
    how to insist); named on the command line it is kept with a warning; with no shared one, a refusal that says
    what to do; anyone but root, or a Python others can run, goes through as it is, silently."""
    private, shared = pythons
    others_can = {shared}.__contains__
    folder = str(Path(private).parent.parent.parent)
    choice = setup_python.choose(private, explicit=False, euid=0, runnable=others_can, system=shared)
    assert choice.python == shared and choice.message.startswith("note: building .venv from /usr/bin/python3.11")
    assert f"({folder} is mode 700)" in choice.message and f"make setup PYTHON={private}" in choice.message
    choice = setup_python.choose(private, explicit=True, euid=0, runnable=others_can, system=shared)
    assert (
        choice.python == private
        and choice.message.startswith("warning: ")
        and "make hub will refuse" in choice.message
        and f"rm -rf .venv && make setup PYTHON={shared}" in choice.message
    )
    choice = setup_python.choose(private, explicit=False, euid=0, runnable=others_can, system="")
    assert (
        choice.python is None
        and choice.message.startswith("error: ")
        and "apt-get install python3.11-venv" in choice.message
        and f"make setup PYTHON={private}" in choice.message
    )
    assert setup_python.choose(private, explicit=False, euid=0, runnable=others_can, system=private).python is None
    assert setup_python.choose(
        private, explicit=False, euid=1000, runnable=others_can, system=shared
    ) == setup_python.Choice(private)
    assert setup_python.choose(
        shared, explicit=False, euid=0, runnable=others_can, system=shared
    ) == setup_python.Choice(shared)


@ROOT_ONLY
def test_the_probe_runs_each_python_as_another_account(pythons):
    """What `make setup` runs: the Python found, in a private folder, prints the system's python3.11 (which nobody
    can run), with the note; the system's one is kept as it is."""
    private, shared = pythons
    if not setup_python.runnable_by_others(shared):
        pytest.fail(f"{shared} is missing or cannot run as nobody: CI's Debian image has it (python3.11-venv)")
    assert not setup_python.runnable_by_others(private)
    script = str(ROOT / "twoprim" / "classroom" / "setup_python.py")

    def run(python):
        return subprocess.run(
            [sys.executable, script, python], capture_output=True, text=True, timeout=60, env={"PATH": SYSTEM_PATH}
        )

    proc = run(private)
    assert proc.returncode == 0 and proc.stdout == f"{shared}\n" and proc.stderr.startswith("note: "), proc
    proc = run(shared)
    assert proc.returncode == 0 and proc.stdout == f"{shared}\n" and proc.stderr == "", proc


def test_make_setup_asks_the_decision_and_insists_only_on_a_named_python(tmp_path):
    """The Makefile's setup recipe builds from the Python the decision prints, and passes --explicit only when
    PYTHON was named (command line or environment)."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").touch()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "MAKEFLAGS")}

    def recipe(*args, **extra):
        proc = subprocess.run(
            ["make", "-n", "--always-make", "setup", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            env={**env, **extra},
        )
        return next(line for line in proc.stdout.splitlines() if "setup_python.py" in line and "py=" in line)

    assert recipe().endswith('setup_python.py python3.11 )" \\')
    assert recipe("PYTHON=/opt/py/bin/python3.11").endswith('setup_python.py /opt/py/bin/python3.11 --explicit)" \\')
    assert recipe(PYTHON="/opt/py/bin/python3.11").endswith('--explicit)" \\')


def test_a_users_kernels_compute_on_as_many_threads_as_their_cpu_limit(monkeypatch):
    """The environment ClassroomSpawner gives a server (and so its kernels): torch's, MKL's and OpenBLAS's threads are
    the user's whole cores under `--cpus`, at least one; a value the configuration set is kept. (tests/test_hub.py
    reads torch's thread count in a student's kernel.)"""
    from types import SimpleNamespace

    from jupyterhub.spawner import LocalProcessSpawner

    from twoprim.classroom.limits import ClassroomSpawner

    variables = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    base = {"PATH": "/usr/bin"}
    monkeypatch.setattr(LocalProcessSpawner, "get_env", lambda self: dict(base))  # JupyterHub's own part

    def threads(cpus: float) -> dict[str, str]:
        env = ClassroomSpawner(user=SimpleNamespace(name="student", url="/user/student/"), cpus=cpus).get_env()
        assert env["PATH"] == "/usr/bin"
        return {v: env[v] for v in variables}

    for cpus, expected in ((1.0, "1"), (0.5, "1"), (2.5, "2"), (4.0, "4")):
        assert threads(cpus) == dict.fromkeys(variables, expected), cpus
    base["OMP_NUM_THREADS"] = "3"  # set in the configuration (c.Spawner.environment)
    assert threads(1.0) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


# --- ./course hub --remove-class: the accounts the hub made, and only those ---------------------------------------


@ROOT_ONLY
def test_remove_class_removes_the_accounts_the_hub_made_and_no_other(monkeypatch, capsys):
    """One account made by the hub (recorded), one made by hand in its group, with a similar name and even the
    course's marker: the question names only the first; "no" deletes nothing; a record someone else wrote is
    refused; `./course hub --remove-class --yes` deletes the first and its home, and the second stays."""
    from twoprim.classroom import hub

    course = shared_tmp("twoprim-first-day-")
    tag = os.urandom(3).hex()
    made, by_hand = f"tp{tag}s", f"tp{tag}s2"
    try:
        (course / "grader").mkdir(mode=0o700)
        account, _ = hub.ensure_account(made, "student", course=course)
        subprocess.run(
            ["useradd", "--create-home", "--gid", str(account.pw_gid), "--comment", MARKER["student"], by_hand],
            check=True,
            capture_output=True,
            timeout=60,
        )
        record = class_accounts.record_path(course)
        assert record.stat().st_uid == 0 and record.stat().st_mode & 0o777 == 0o600
        assert set(class_accounts.read_record(course)) == {made}

        asked = []
        assert class_accounts.remove_class(course, ask=lambda q: asked.append(q) or "no") == 1
        said = capsys.readouterr().out
        assert asked and f"  {made} " in said and by_hand not in said and "nothing deleted" in said, said
        assert pwd.getpwnam(made) and pwd.getpwnam(by_hand)

        os.chown(record, account.pw_uid, account.pw_gid)  # the instructor owns grader/: they could have written it
        with pytest.raises(CourseError, match="is not root's own record"):
            class_accounts.remove_class(course, yes=True)
        os.chown(record, 0, 0)

        monkeypatch.setattr(hub, "ROOT", course)
        assert hub.run(["--remove-class", "--yes"]) == 0
        said = capsys.readouterr().out
        assert "will delete 1 account(s) that ./course hub created" in said and f"deleted {made}" in said, said
        with pytest.raises(KeyError):
            pwd.getpwnam(made)
        assert not Path(account.pw_dir).exists()
        assert pwd.getpwnam(by_hand).pw_dir and Path(pwd.getpwnam(by_hand).pw_dir).is_dir()
        assert class_accounts.read_record(course) == {}
        assert hub.run(["--remove-class", "--yes"]) == 0 and "nothing to remove" in capsys.readouterr().out
    finally:
        for name in (made, by_hand):
            delete_account(name)
        shutil.rmtree(course, ignore_errors=True)


# --- the `course` command in a hub user's terminal ------------------------------------------------------------------


def test_a_hub_terminal_keeps_the_course_environment_on_path(tmp_path):
    """A JupyterLab terminal runs a login shell, and Debian's /etc/profile sets PATH afresh: with jupyter_server's own
    shell (`bash -l`) `course` is not found although the server's PATH has it; the hub's terminal command puts the
    environment's bin/ first again. (tests/test_hub.py runs `course progress` in a real student terminal.)"""
    from twoprim.classroom import hub_config

    plan = hub_config.Plan(
        course=ROOT,
        venv=ROOT / ".venv",
        proxy=Path("/"),
        exchange=Path("/"),
        instructor="",
        students=(),
        port=0,
        hub_port=0,
        proxy_api_port=0,
    )
    server_env = {"PATH": f"{ROOT / '.venv' / 'bin'}:{SYSTEM_PATH}", "HOME": str(tmp_path), "LANG": "C.UTF-8"}

    def found(shell: list[str]) -> str:
        proc = subprocess.run(
            shell,
            input="command -v course || echo none\nexit\n",
            capture_output=True,
            text=True,
            env=server_env,
            cwd=tmp_path,
            timeout=30,
        )
        return proc.stdout.strip().splitlines()[-1]

    if not Path("/etc/profile").is_file() or "PATH=" not in Path("/etc/profile").read_text():
        pytest.fail("this test needs a system /etc/profile that sets PATH (Debian's, as on the hub)")
    assert found(["/bin/bash", "-l"]) == "none"  # what the terminal ran before: the course's bin/ gone
    assert found(hub_config.terminal_command(plan)) == str(ROOT / ".venv" / "bin" / "course")
