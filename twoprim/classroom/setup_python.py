"""Which Python `make setup` builds .venv from, so that `make hub` after `make setup` as root works the first time.

Students' servers run the course environment as the students: a .venv built by root from a Python in a private
folder (pyenv under /root, mode 0700) cannot start them. As root, `make setup` therefore checks that the Python it
found can be run by another account (it runs it as `nobody`); when it cannot, it builds from the system's
python3.11 (Debian's /usr/bin/python3.11) when that one can, saying so; when there is none, it refuses, saying what
to do. A Python named on the command line (`make setup PYTHON=...`) is used as given, with a warning when students
could not run it. As anyone else it uses the Python found: only root makes a classroom.

Run by make with the Python it found, before any environment exists, so it imports nothing but the standard
library: `python twoprim/classroom/setup_python.py PYTHON [--explicit]` prints the Python to build from (notes and
errors on stderr; exit code 1 when it refuses).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
PROBE = "import sys, venv, ensurepip, ssl, sqlite3; assert sys.version_info[:2] == (3, 11)"


@dataclass(frozen=True)
class Choice:
    """The Python to build .venv from (None: refuse), and what to tell the person running make setup."""

    python: str | None
    message: str = ""


def runnable_by_others(python: str) -> bool:
    """Whether `nobody` (any other account) can run `python` as a Python 3.11 that makes environments."""
    try:
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    except KeyError:
        uid = gid = 65534
    try:
        probe = subprocess.run(
            [python, "-I", "-c", PROBE],
            user=uid,
            group=gid,
            extra_groups=[],
            cwd="/",
            env={"PATH": SYSTEM_PATH},
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _private_folder(path: str) -> str:
    """The first folder on the way to `path` (as given, then with links resolved) that other accounts cannot
    enter, said as 'FOLDER is mode 700', or ''."""
    for way in (os.path.abspath(path), os.path.realpath(path)):
        folder = os.sep
        for part in way.split(os.sep)[1:-1]:
            folder = os.path.join(folder, part)
            try:
                mode = os.stat(folder).st_mode
            except OSError:
                return f"{folder} cannot be read"
            if not mode & 0o001:
                return f"{folder} is mode {mode & 0o777:o}"
    return ""


def choose(
    python: str,
    *,
    explicit: bool,
    euid: int | None = None,
    runnable: Callable[[str], bool] = runnable_by_others,
    system: str | None = None,
) -> Choice:
    """The Python to build the course environment from (see the module's docstring); `system`: the system's
    python3.11 (default: found on /usr/local/bin:/usr/bin:/bin)."""
    euid = os.geteuid() if euid is None else euid
    found = shutil.which(python) or python
    if euid != 0 or runnable(found):
        return Choice(found)
    real = os.path.realpath(found)
    why = _private_folder(found) or "it does not run as another account"
    system = system if system is not None else (shutil.which("python3.11", path=SYSTEM_PATH) or "")
    shared = system if system and runnable(system) else ""
    students = (
        "students' servers run the course environment as the students, and they cannot run "
        f"{found}{' -> ' + real if real != found else ''} ({why})"
    )
    if explicit:
        return Choice(
            found,
            f"warning: building .venv from {found} as you asked, but {students}: make lab and "
            f"make test work for root, make hub will refuse."
            + (f" For a classroom: rm -rf .venv && make setup PYTHON={shared}" if shared else ""),
        )
    if shared:
        return Choice(
            shared,
            f"note: building .venv from {shared}, not {found}: {students}, and every account can "
            f"run {shared} (for root alone, e.g. no classroom: make setup PYTHON={found})",
        )
    return Choice(
        None,
        f"error: {students}, and this machine has no python3.11 that every account can run. Install "
        f"one (apt-get install python3.11-venv), then run make setup again; or, for root alone "
        f"(make lab, make test, never make hub): make setup PYTHON={found}",
    )


def main(argv: list[str]) -> int:
    """Print the chosen Python (make reads it), its message on stderr; 1 when it refuses."""
    choice = choose(argv[0], explicit="--explicit" in argv[1:])
    if choice.message:
        print(choice.message, file=sys.stderr)
    if choice.python is None:
        return 1
    print(choice.python)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
