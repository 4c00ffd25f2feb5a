"""Tests as other Unix accounts (root only): a copy of the course that another account can use, throwaway accounts.

The course's .venv is usually built by root from a Python under /root (pyenv, mode 0700), which no other account
can run. A clone (this working tree with the .venv hard-linked in, seconds instead of a multi-minute build) is
pointed at a Python 3.11 every account can run, such as Debian's /usr/bin/python3.11. Used by test_lab.py (make lab
as an ordinary user) and test_hub.py (the classroom on JupyterHub).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from twoprim.classroom import lab
from twoprim.config import ROOT

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def shared_tmp(prefix: str) -> Path:
    """A fresh folder under /tmp that every account may pass through (pytest's tmp_path is under a 0700 folder)."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    base.chmod(0o755)
    return base


def python_for(user: pwd.struct_passwd | None = None) -> str | None:
    """A Python 3.11 that `user` (default: nobody) can run (Debian's /usr/bin/python3.11 is world-executable)."""
    python = shutil.which("python3.11", path=SYSTEM_PATH)
    if python is None:
        return None
    user = user or pwd.getpwnam("nobody")
    probe = subprocess.run(
        [python, "-c", "import sys; assert sys.version_info[:2] == (3, 11)"],
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        env={"PATH": SYSTEM_PATH},
        capture_output=True,
        timeout=60,
    )
    return python if probe.returncode == 0 else None


def runnable_by(python: str, user: pwd.struct_passwd) -> bool:
    try:
        probe = subprocess.run(
            [python, "-c", "import sys, ssl, sqlite3; assert sys.version_info[:2] == (3, 11)"],
            user=user.pw_uid,
            group=user.pw_gid,
            extra_groups=[],
            env={"PATH": SYSTEM_PATH},
            capture_output=True,
            timeout=60,
        )
    except PermissionError:  # a folder on the way is private
        return False
    return probe.returncode == 0


def shared_python(dest: Path) -> str:
    """The course .venv's own base Python, where every account can run it; returns the interpreter's path.

    Usually it is pyenv's, in root's private home: then it is hard-linked into `dest` (without its site-packages)
    and the interpreter is a patched copy that finds libpython beside itself ($ORIGIN/../lib, in place of its
    RUNPATH under the private home). The very interpreter .venv was built with keeps the test about the classroom,
    not about a second Python (tests/test_lab.py tries Debian's python3.11 for a learner).
    """
    base = Path(sys.base_prefix).resolve()
    exe = base / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    nobody = pwd.getpwnam("nobody")
    if runnable_by(str(exe), nobody):
        return str(exe)
    site = base / "lib" / exe.name / "site-packages"
    for dirpath, dirnames, filenames in os.walk(base / "lib"):
        if Path(dirpath) == site:
            dirnames[:] = []
            continue
        target = dest / Path(dirpath).relative_to(base)
        target.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            if not (Path(dirpath) / name).is_symlink():
                os.link(Path(dirpath) / name, target / name)
            else:
                (target / name).symlink_to(os.readlink(Path(dirpath) / name))
    (dest / "lib" / exe.name / "site-packages").mkdir(exist_ok=True)
    data = exe.read_bytes()
    old = str(base / "lib").encode() + b"\0"
    new = b"$ORIGIN/../lib"
    if data.count(old) == 1:  # DT_RUNPATH: a NUL-terminated string, shortened in place
        data = data.replace(old, new + b"\0" * (len(old) - len(new)))
    (dest / "bin").mkdir(parents=True)
    copy = dest / "bin" / exe.name
    copy.write_bytes(data)
    copy.chmod(0o755)
    assert runnable_by(str(copy), nobody), f"could not make {exe} runnable by other accounts (as {copy})"
    return str(copy)


def clone_for(dest: Path, user: pwd.struct_passwd | None = None, *, node_modules: bool = False) -> Path:
    """This working tree (tracked and new files) at `dest` (owned by `user` when given), with the course .venv
    hard-linked in (and node_modules/ when asked); returns the clone's .venv.

    A copy of the environment costs seconds where building one costs minutes. Its files stay root's and
    read-only to `user` (hard links: never written through). What names this checkout is rewritten in new files.
    """
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
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    if user is not None:
        subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(dest)], check=True, timeout=300)
    lab.install_settings(ROOT / ".venv")  # the file make setup writes, before the copy shares it
    venv = dest / ".venv"
    subprocess.run(["cp", "-al", str(ROOT / ".venv"), str(venv)], check=True, timeout=300)
    if node_modules:
        link_node_modules(dest)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    old, new = str(ROOT).encode(), str(dest).encode()
    for path in [
        *(venv / "bin").iterdir(),
        *site.glob("*.pth"),
        *site.glob("__editable__*.py"),
        *(venv / "etc").rglob("*.py"),
    ]:
        if path.is_file() and not path.is_symlink() and old in (data := path.read_bytes()):
            mode = path.stat().st_mode
            path.unlink()  # a new file: the hard link to the course's own stays as it was
            path.write_bytes(data.replace(old, new))
            path.chmod(mode)
    return venv


def link_node_modules(dest: Path) -> None:
    """The course's node_modules/ (installed by `make test` / `make hub` with npm ci), hard-linked into `dest`."""
    source = ROOT / "node_modules"
    assert (source / ".bin" / "configurable-http-proxy").exists(), (
        f"{source} has no configurable-http-proxy: run the tests with `make test`, which installs it (npm ci), or "
        f"run `make node_modules/.installed` first"
    )
    subprocess.run(["cp", "-al", str(source), str(dest / "node_modules")], check=True, timeout=300)


def point_venv_at(venv: Path, python: str) -> None:
    """Make `venv` run on `python` (the Python it was built with is where other accounts cannot go)."""
    (venv / "pyvenv.cfg").unlink()
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n")
    (venv / "bin" / "python3.11").unlink()
    (venv / "bin" / "python3.11").symlink_to(python)


def delete_account(name: str, timeout_s: float = 15) -> None:
    """`userdel -r` the account (its home too), waiting a moment for its last processes to end."""
    deadline = time.monotonic() + timeout_s
    while True:
        proc = subprocess.run(["userdel", "-r", name], capture_output=True, text=True, timeout=120)
        if proc.returncode in (0, 6) or "does not exist" in proc.stderr:  # 6: no such user
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"could not delete the throwaway account {name} within {timeout_s:g} s: {proc.stderr.strip()}"
            )
        time.sleep(0.5)


def python_as(
    user: str, code: str, *, cwd: str = "/", env: dict | None = None, timeout: float = 120
) -> tuple[int, str]:
    """Run Python `code` as the account `user` (no supplementary groups); its exit status and output (stdout and
    stderr together).

    With this course's Python when the account can run it and import the course (a checkout others may read, as
    `make hub` needs); otherwise in a child of this process that drops to the account (fork, setgid, setuid), where
    what this process imported is already there."""
    import select
    import signal

    pw = pwd.getpwnam(user)
    env = {"PATH": SYSTEM_PATH, "HOME": cwd, **(env or {})}
    probe = [sys.executable, "-c", "import importlib.util, twoprim; assert importlib.util.find_spec('nbgrader')"]
    try:
        usable = (
            subprocess.run(
                probe,
                user=pw.pw_uid,
                group=pw.pw_gid,
                extra_groups=[],
                env=env,
                cwd=cwd,
                capture_output=True,
                timeout=timeout,
            ).returncode
            == 0
        )
    except PermissionError:
        usable = False
    if usable:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            user=pw.pw_uid,
            group=pw.pw_gid,
            extra_groups=[],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return proc.returncode, proc.stdout + proc.stderr
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the account's, with this process's modules
        status = 1
        try:
            os.close(read)
            os.dup2(write, 1)
            os.dup2(write, 2)
            # (a test runner may have put its own in their place); they stay open until the child exits
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            exec(compile(code, f"<as {user}>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the test's own code
            status = 0
        except SystemExit as done:
            status = done.code if isinstance(done.code, int) else 1
        except BaseException:  # noqa: BLE001 - said on the pipe, as an interpreter would
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    os.close(write)
    out, deadline = b"", time.monotonic() + timeout
    with os.fdopen(read, "rb") as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError(f"python as {user} did not finish within {timeout:g} s: {out.decode()[-2000:]}")
            piece = os.read(pipe.fileno(), 65536)
            if not piece:
                break
            out += piece
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
