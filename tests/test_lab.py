"""`make lab` works the first time, as root (containers, CI) and as an ordinary user.

Each run starts the README's command, reads the URL it prints last, and through JupyterLab's own API checks what a
learner meets: lesson 00 served with that token, the news prompt configured off, the notebook's kernel one the
environment provides (no kernel-selection dialog), started with the course's .venv, and nbgrader's Validate loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from twoprim.classroom import lab
from twoprim.config import ROOT

from .accounts import SYSTEM_PATH, clone_for, delete_account, point_venv_at, python_for, shared_tmp

URL_LINE = re.compile(r"^(http://[^/\s]+)/lab/tree/lessons/00_start_here\.ipynb\?token=(\w+)$")
NEWS_PLUGIN = "@jupyterlab/apputils-extension:notification"
START_S = 90  # JupyterLab starts in ~5 s alone, 15-20 s on 2 busy cores (nbgrader's formgrader imports slowly)


class Lab:
    """`make lab LAB_ARGS=...` in a process group of its own (as `user` when given), its output kept by line."""

    def __init__(self, cwd: Path, lab_args: str, env: dict[str, str], user: pwd.struct_passwd | None = None):
        ids: dict[str, Any] = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[]) if user else {}
        self.proc = subprocess.Popen(
            ["make", "lab", f"LAB_ARGS={lab_args}"],
            cwd=cwd,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **ids,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None  # (a pipe)
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def url(self) -> tuple[str, str]:
        """(base URL, token) from the lesson URL `make lab` prints, once the server answers."""
        deadline = time.monotonic() + START_S
        while True:
            for line in list(self.lines):
                if m := URL_LINE.match(line):
                    return m.group(1), m.group(2)
            assert self.proc.poll() is None, (
                f"make lab exited ({self.proc.returncode}) before printing a URL:\n{self.output}"
            )
            assert time.monotonic() < deadline, f"no lesson URL from make lab within {START_S} s:\n{self.output}"
            time.sleep(0.2)

    def finish(self, timeout: float = 30) -> int:
        """Wait for `make lab` to end by itself (a start that must fail); its exit code."""
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)


def _api(base: str, token: str, path: str, method: str = "GET", body: dict | None = None):
    request = urllib.request.Request(
        f"{base}{path}",
        method=method,
        headers={"Authorization": f"token {token}"},
        data=None if body is None else json.dumps(body).encode(),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return response.status, (json.loads(raw) if raw and "json" in response.headers.get("Content-Type", "") else raw)


def _kernel_executable(kernel_id: str) -> str:
    """argv[0] of the kernel process with this id (its connection file is named after it)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if any(arg.endswith(f"kernel-{kernel_id}.json") for arg in cmdline):
                return cmdline[0]
        time.sleep(0.2)
    raise AssertionError(f"no process for kernel {kernel_id} within 20 s")


def _check_serves_course(run: Lab, venv_bin: Path) -> tuple[str, str]:
    base, token = run.url()
    time.sleep(1.5)  # JupyterLab logs nothing more until someone uses it: the URL stays the last line
    assert URL_LINE.match(run.lines[-1]), f"the lesson URL is not the last line printed:\n{run.output}"
    status, model = _api(base, token, "/api/contents/lessons/00_start_here.ipynb")
    assert status == 200 and model["type"] == "notebook", model
    kernel_name = model["content"]["metadata"]["kernelspec"]["name"]
    _, specs = _api(base, token, "/api/kernelspecs")
    assert kernel_name in specs["kernelspecs"], (
        f"lesson 00 asks for kernel {kernel_name!r}, the server has {sorted(specs['kernelspecs'])}: "
        "JupyterLab would ask"
    )
    _, news = _api(base, token, f"/lab/api/settings/{NEWS_PLUGIN}")
    fetch = news["schema"]["properties"]["fetchNews"]
    assert fetch["default"] == "false", f"fetchNews defaults to {fetch['default']!r}: JupyterLab asks about news"
    assert news["settings"].get("fetchNews", fetch["default"]) == "false"
    assert news["schema"]["properties"]["checkForUpdates"]["default"] is False
    status, page = _api(base, token, "/lab")
    assert status == 200 and b"@jupyter/nbgrader" in page, "nbgrader's lab extension (Validate) is not loaded"

    _, session = _api(
        base,
        token,
        "/api/sessions",
        "POST",
        {
            "path": "lessons/00_start_here.ipynb",
            "name": "00_start_here.ipynb",
            "type": "notebook",
            "kernel": {"name": kernel_name},
        },
    )
    try:
        executable = Path(_kernel_executable(session["kernel"]["id"]))
        assert executable.parent == venv_bin, f"lesson 00's kernel runs {executable}, not the course's {venv_bin}"
    finally:
        _api(base, token, f"/api/sessions/{session['id']}", "DELETE")
    return base, token


def _listening_grader(folder: Path, within_s: float = 90) -> psutil.Process:
    """The warm grader process listening in `folder` (a socket there that accepts)."""
    deadline = time.monotonic() + within_s
    while True:
        for path in folder.glob("*.sock"):
            with socket.socket(socket.AF_UNIX) as probe, contextlib.suppress(OSError):
                probe.connect(str(path))
                for proc in psutil.process_iter(["cmdline"]):
                    if (proc.info["cmdline"] or [])[-2:] == ["serve", str(path)]:
                        return proc
        assert time.monotonic() < deadline, f"no warm grader listened in {folder} within {within_s:.0f} s"
        time.sleep(0.5)


def test_command_adds_allow_root_only_for_root_and_explains_it():
    argv, notes = lab.command(["--no-browser"], euid=0)
    assert "--allow-root" in argv and notes == [lab.ROOT_NOTE]
    assert argv[-1] == lab.LESSON and argv[:3] == [sys.executable, "-m", "jupyterlab"]
    argv, notes = lab.command(["--allow-root"], euid=0)
    assert argv.count("--allow-root") == 1 and notes == []
    argv, notes = lab.command(["--no-browser"], euid=1000)
    assert "--allow-root" not in argv and notes == []


@pytest.mark.parametrize(
    "args, env, port",
    [
        ([], {}, 8888),
        ([], {"JUPYTER_PORT": "9000"}, 9000),
        (["--port=0"], {}, 0),
        (["--port", "8899"], {}, 8899),
        (["--ServerApp.port=7000", "--no-browser"], {"JUPYTER_PORT": "9000"}, 7000),
    ],
)
def test_requested_port(args, env, port):
    assert lab.requested_port(args, env) == port


def test_requested_port_that_is_not_a_number_says_how_to_pass_one():
    with pytest.raises(SystemExit, match=r"the port 'abc' is not a number.*--port=8899"):
        lab.requested_port(["--port=abc"], {})


def test_every_notebook_names_a_kernel_the_course_environment_provides():
    """A kernelspec name the environment lacks makes JupyterLab open its kernel-selection dialog."""
    from jupyter_client.kernelspec import NATIVE_KERNEL_NAME

    provided = {NATIVE_KERNEL_NAME, *(p.name for p in (Path(sys.prefix) / "share" / "jupyter" / "kernels").iterdir())}
    committed = subprocess.run(
        ["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert committed
    for name in committed:
        kernel = json.loads((ROOT / name).read_text())["metadata"].get("kernelspec", {}).get("name")
        assert kernel in provided, f"{name} asks for kernel {kernel!r}; the course environment has {sorted(provided)}"


def test_make_lab_serves_lesson_00_here(tmp_path):
    """As whoever runs the tests (root in CI: --allow-root added and explained), with the asked-for port taken."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_", "TWOPRIM_WARM"))}
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"),
        TWOPRIM_GRADER_DIR=str(tmp_path / "grader"),
    )
    with socket.socket() as blocker:  # another JupyterLab already has the port the learner asks for
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        run = Lab(ROOT, f"--no-browser --port={taken}", env)
        try:
            base, _ = _check_serves_course(run, ROOT / ".venv" / "bin")
            # the learner's warm grader started beside JupyterLab, for the first self-grade cell
            grader = _listening_grader(tmp_path / "grader")
        finally:
            run.stop()
        # ... and it ends with ./course lab, not 15 idle minutes later
        deadline = time.monotonic() + 30
        while grader.is_running() and grader.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the warm grader outlived ./course lab by 30 s"
            time.sleep(0.5)
        assert not list((tmp_path / "grader").glob("*.sock"))
        assert "(./course lab) has ended: exiting" in "".join(
            p.read_text() for p in (tmp_path / "grader").glob("*.log")
        )
    assert not base.endswith(f":{taken}")
    assert f"note: port {taken} is in use" in run.output and f"listens on port {base.rsplit(':', 1)[1]}" in run.output
    root_notes = [line for line in run.lines if line.startswith("note: running as root")]
    assert len(root_notes) == (1 if os.geteuid() == 0 else 0), run.output
    assert "Running as root is not recommended" not in run.output


# --- as an ordinary user, where the tests run as root -----------------------------------------------------------


@pytest.fixture
def throwaway_user():
    if os.geteuid() != 0:
        pytest.skip(
            "an ordinary user: test_make_lab_serves_lesson_00_here already ran make lab as one "
            "(only root can create a throwaway user to try it as another)"
        )
    base = shared_tmp("twoprim-lab-")  # pytest's tmp_path is under /tmp/pytest-of-root (0700): out of reach
    name = f"tplab{os.getpid()}{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", "--create-home", "--home-dir", str(base / "home"), "--user-group", "--shell", "/bin/bash", name],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        yield pwd.getpwnam(name), base
    finally:
        delete_account(name)  # the user's processes are gone once make lab is stopped; allowed a moment
        shutil.rmtree(base, ignore_errors=True)


def test_make_lab_as_an_ordinary_user(throwaway_user):
    """A user's own clone: a clear error while the .venv's Python is out of reach; lesson 00 once it is not."""
    user, base = throwaway_user
    python = python_for(user)
    if python is None:
        pytest.skip(
            f"no Python 3.11 on {SYSTEM_PATH} that user {user.pw_name} can run, so no course "
            f"environment they could use without a multi-minute build"
        )
    clone = base / "two-primitives"
    clone.mkdir()
    venv = clone_for(clone, user)
    env = {
        "PATH": SYSTEM_PATH,
        "HOME": user.pw_dir,
        "USER": user.pw_name,
        "LOGNAME": user.pw_name,
        "TWOPRIM_WARM_GRADER": "off",  # test_make_lab_serves_lesson_00_here checks the warm grader beside lab
        "LANG": "C.UTF-8",
    }

    # Built by root from a Python under a folder only root may enter (pyenv in /root, mode 0700).
    private = base / "private"
    private.mkdir(mode=0o700)
    (private / "python3.11").symlink_to(python)
    point_venv_at(venv, str(private / "python3.11"))
    failed = Lab(clone, "--no-browser --port=0", env, user)
    assert failed.finish() != 0, failed.output
    error = [line for line in failed.lines if line.startswith("error:")]
    assert len(error) == 1, failed.output
    assert f"{user.pw_name} cannot run the course environment's Python" in error[0], error[0]
    assert f"git clone '{clone}'" in error[0] and f"make lab PYTHON={python}" in error[0], error[0]
    assert "Traceback" not in failed.output

    point_venv_at(venv, python)
    run = Lab(clone, "--no-browser --port=0", env, user)
    try:
        _check_serves_course(run, venv / "bin")
    finally:
        run.stop()
    assert "--allow-root" not in run.output and "Running as root" not in run.output
