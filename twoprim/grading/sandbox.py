"""Each graded submission's kernel runs in a sandbox: bubblewrap (Linux namespaces), with the process limits set
in the kernel itself.

What the kernel sees and may do:
- a file system of read-only system folders (/usr, /etc), the Python it runs on, the course environment (.venv)
  and the `twoprim` package; its own writable box (HOME, the folder its results go to, its IPC sockets); a
  private /tmp. Nothing else: not `solutions/`, the gradebook, other students' work or the grader's home.
- no network (a network namespace with only a loopback that is down), its own process tree (a PID namespace,
  killed with the grading worker: nothing it starts outlives it), its own IPC and host name.
- as an unprivileged user: when the grader runs as root, a uid of its own per submission (`claimed_uid`: one of
  61000-61999 that no other grading kernel on this machine holds, whichever grading run it belongs to) with no
  capabilities and no new privileges; otherwise the instructor's uid, mapped to `nobody` in a user namespace.
- limits: address space, CPU seconds, file size, number of processes (a fork bomb or a memory bomb ends that
  submission only).

The kernel talks to the grader over Unix sockets in its box (jupyter's `ipc` transport), which cross the network
namespace; TCP ports are neither needed nor shared between workers.

Kernels are forked from a warm process inside the sandbox (`twoprim.grading.forkserver`): `forkserver_command` is the
bubblewrap argv that starts it, once per grading worker and assignment, and `kernelspec` names the launcher that
asks it for one kernel per submission, each with its own box, uid (`claimed_uid`) and limits (`rlimits`). Where
isolation is impossible (not Linux, bubblewrap missing, user namespaces disabled), `missing()` says what is missing
and what to install.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

from twoprim.config import PACKAGE, ROOT

ENV_BOX = "TWOPRIM_SANDBOX_BOX"  # the submission's writable box (set by the grader per submission)
ENV_UID = "TWOPRIM_SANDBOX_UID"  # the uid the kernel runs as when the grader is root
BASE_UID = 61000
UIDS = range(BASE_UID, BASE_UID + 1000)  # the uids sandboxed kernels run as when the grader is root
KERNEL_NAME = "twoprim-sandbox"
PROBE_S = 60  # bubblewrap running `true` in an empty sandbox (well under a second when it works)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

MEMORY_LIMIT_BYTES = 8 * 2**30  # address space: torch's import alone reserves ~1 GiB
CPU_LIMIT_SECONDS = 600
FILE_SIZE_LIMIT_BYTES = 256 * 2**20
PROCESS_LIMIT = 256  # processes and threads of the sandbox's uid

INSTALL = (
    "install bubblewrap and util-linux: `sudo apt-get install bubblewrap util-linux` (Debian, Ubuntu), "
    "`sudo dnf install bubblewrap util-linux` (Fedora)"
)


@cache
def missing() -> str | None:
    """None when submissions can be isolated here; else what is missing and what to do."""
    if sys.platform != "linux":
        return (
            f"isolating submissions needs Linux namespaces (bubblewrap); this is {sys.platform}. Grade on a "
            f"Linux machine, or pass --unisolated to run students' code as yourself, without isolation"
        )
    tools = ["bwrap"]
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return f"{', '.join(absent)} not found: {INSTALL}; or pass --unisolated to grade without isolation"
    try:
        probe = subprocess.run(
            _bwrap_args([], Path("/"), probe=True) + ["true"], capture_output=True, text=True, timeout=PROBE_S
        )
    except subprocess.TimeoutExpired:
        return (
            f"bubblewrap did not run `true` in an empty sandbox within {PROBE_S} s; or pass --unisolated to "
            f"grade without isolation"
        )
    if probe.returncode != 0:
        return (
            f"bubblewrap cannot create namespaces here ({probe.stderr.strip()[:200]}); enable unprivileged user "
            f"namespaces (sysctl kernel.unprivileged_userns_clone=1) or run the grader as root; or pass "
            f"--unisolated to grade without isolation"
        )
    return None


def python() -> str:
    """The environment's Python, as the kernel runs it."""
    return str(Path(sys.prefix) / "bin" / "python")


def _uid_locks() -> Path:
    folder = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
    locks = folder / "twoprim-sandbox-uids"
    locks.mkdir(mode=0o700, exist_ok=True)
    return locks


def _processes_of(uid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
            uids = next(line for line in lines if line.startswith("Uid:")).split()[1:]
            state = next(line for line in lines if line.startswith("State:")).split()[1]
        except (OSError, StopIteration, IndexError):
            continue
        if str(uid) in uids and state != "Z":
            found.append(int(status.parent.name))
    return found


def kill_until_gone(find: Callable[[], list[int]], wait_s: float = 10.0) -> None:
    """SIGKILL the processes `find()` lists until it lists none (at most `wait_s`): the next kernel must not find
    its process limit taken by the dying."""
    deadline = time.monotonic() + wait_s
    while (pids := find()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _kill_uid(uid: int) -> None:
    """Every process running as `uid` (what a submission left behind), gone."""
    kill_until_gone(lambda: _processes_of(uid))


_NEXT_UID = itertools.count(random.randrange(len(UIDS)))


@contextlib.contextmanager
def claimed_uid() -> Iterator[int | None]:
    """A uid for one submission's kernel that no other grading kernel on this machine holds (a lock file per uid,
    held while the block runs: two grading runs at once never share one). Its processes are killed before and
    after. None when the grader is not root (the kernel then runs as `nobody` in a user namespace)."""
    if os.geteuid() != 0:
        yield None
        return
    locks = _uid_locks()
    start = next(_NEXT_UID) % len(UIDS)  # round the range: the uid a submission just left is the last one reused
    for uid in [*UIDS[start:], *UIDS[:start]]:
        fd = os.open(locks / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            _kill_uid(uid)
            yield uid
        finally:
            _kill_uid(uid)
            os.close(fd)  # releases the lock
        return
    raise RuntimeError(
        f"all {len(UIDS)} sandbox uids ({UIDS.start}-{UIDS.stop - 1}) are held by running grading "
        f"kernels; wait for a grading run to finish"
    )


def kernelspec(folder: Path) -> str:
    """Write the sandboxed kernelspec under `folder`/kernels (put `folder` on JUPYTER_PATH); return its name. Its
    argv is the forkserver's launcher (-I: nothing from the environment; it imports no torch)."""
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    argv = [python(), "-I", "-m", "twoprim.grading.forkserver", "launch", "{connection_file}"]
    # interrupts go as messages: the kernel is in a session of its own, out of reach of the grader's signals
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "display_name": "Python 3 (graded, sandboxed)",
                "language": "python",
                "interrupt_mode": "message",
            }
        )
    )
    return KERNEL_NAME


def prepare_box(box: Path, uid: int | None = None) -> dict[str, Path]:
    """Create the submission's box: home/ (HOME and working folder), capture/ (results), run/ (connection file
    and sockets: the grader sets KernelManager.ip to run/kernel). Owned by the sandbox's uid when the grader is
    root."""
    paths = {name: box / name for name in ("home", "capture", "run")}
    box.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in paths.values():
        path.mkdir(mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        uid = uid if uid is not None else BASE_UID
        for path in [box, *paths.values()]:
            os.chown(path, uid, uid)
    return paths


def _ancestors(path: Path) -> list[Path]:
    return [p for p in reversed(path.parents) if p != Path("/")]


def _bwrap_args(binds: list[tuple[str, Path]], box: Path, *, probe: bool = False) -> list[str]:
    """bubblewrap's argv: namespaces, then the read-only system, the binds ("ro" | "rw", path), the box."""
    args = [
        "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
    ]
    if os.geteuid() == 0:  # only for the forkserver, whose kernels drop them all with their uid
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    else:
        args += ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    args += [
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind",
        "/etc",
        "/etc",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
    ]  # a private /tmp anyone in the sandbox may write (MLX caches there)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    if probe:
        return args
    made: set[Path] = {Path("/tmp")}
    for mode, path in [*binds, ("rw", box)]:
        for parent in _ancestors(path):  # bubblewrap makes missing parents 0700: the sandbox user could not pass
            if parent not in made and not any(parent == Path(p) for p in ("/usr", "/etc", "/proc", "/dev")):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += ["--ro-bind" if mode == "ro" else "--bind", str(path), str(path)]
        made.add(path)
    return args


def _readable_binds() -> list[tuple[str, Path]]:
    """What the kernel reads: the base Python, the environment, the course package (and its public data)."""
    package, root = PACKAGE, ROOT
    paths = [Path(sys.base_prefix).resolve(), Path(sys.prefix)]
    paths.append(package)
    if (root / "data").is_dir():
        paths.append(root / "data")
    system = (Path("/usr"), Path("/etc"))
    kept: list[Path] = []
    for path in paths:
        if any(path == s or s in path.parents for s in system) or any(k == path or k in path.parents for k in kept):
            continue
        kept.append(path)
    return [("ro", p) for p in kept]


def _process_limit() -> int:
    """RLIMIT_NPROC counts every process of the real uid: as root the sandbox has a uid of its own; otherwise the
    instructor's own processes count too, so the limit sits that far above them."""
    if os.geteuid() == 0:
        return PROCESS_LIMIT
    mine = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if fields.get("Uid", "").split()[:1] == [str(os.getuid())]:
            mine += int(fields.get("Threads", "1").strip() or 1)
    return mine + PROCESS_LIMIT


def rlimits() -> dict[str, tuple[int, int]]:
    """The limits of a submission's processes, by `resource` name (set in each forked kernel)."""
    nproc = _process_limit()
    return {
        "RLIMIT_AS": (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES),
        "RLIMIT_CPU": (CPU_LIMIT_SECONDS, CPU_LIMIT_SECONDS),
        "RLIMIT_FSIZE": (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES),
        "RLIMIT_NPROC": (nproc, nproc),
        "RLIMIT_CORE": (0, 0),
    }


def limits() -> list[str]:
    """The same limits as a `prlimit` argv prefix (for `--unisolated` grading, which has no forkserver)."""
    return [
        "prlimit",
        f"--as={MEMORY_LIMIT_BYTES}",
        f"--cpu={CPU_LIMIT_SECONDS}",
        f"--fsize={FILE_SIZE_LIMIT_BYTES}",
        f"--nproc={_process_limit()}",
        "--core=0",
        "--",
    ]


def kernel_env(box: Path) -> dict[str, str]:
    """The environment of a submission's kernel: its box as home, nothing of the grader's."""
    env = {
        "HOME": box / "home",
        "USER": "student",
        "LOGNAME": "student",
        "LANG": "C.UTF-8",
        "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin",
        "TMPDIR": "/tmp",
        "IPYTHONDIR": box / "home" / ".ipython",
        "MPLCONFIGDIR": box / "home" / ".matplotlib",
        "TWOPRIM_INDUCTOR_CACHE": box / "home" / ".cache" / "inductor",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TWOPRIM_CAPTURE_DIR": box / "capture",
    }
    for name in THREAD_VARIABLES:
        if name in os.environ:
            env[name] = os.environ[name]
    return {k: str(v) for k, v in env.items()}


def forkserver_command(boxes: Path, control: Path, modules: list[str]) -> list[str]:
    """The argv that starts a forkserver inside the sandbox: it sees what a kernel may read, `boxes` (where each
    submission's box is made) and `control` (its socket; 0700, out of its kernels' reach when the grader is root),
    imports `modules` and waits for the launcher's requests."""
    env = {
        "LANG": "C.UTF-8",
        "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin",
        "TMPDIR": "/tmp",
        "HOME": str(boxes),
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "agg",
    }
    for name in THREAD_VARIABLES:
        if name in os.environ:
            env[name] = os.environ[name]
    argv = _bwrap_args([*_readable_binds(), ("rw", control)], boxes) + ["--chdir", str(boxes), "--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    return argv + ["--", python(), "-I", "-m", "twoprim.grading.forkserver", "serve", str(control / "socket"), *modules]
