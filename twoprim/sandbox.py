"""Each graded submission's kernel runs in a sandbox: bubblewrap (Linux namespaces) with util-linux's `prlimit`
and `setpriv`.

What the kernel sees and may do:
- a file system of read-only system folders (/usr, /etc), the Python it runs on, the course environment (.venv)
  and the `twoprim` package; its own writable box (HOME, the folder its results go to, its IPC sockets); a
  private /tmp. Nothing else: not `solutions/`, the gradebook, other students' work or the grader's home.
- no network (a network namespace with only a loopback that is down), its own process tree (a PID namespace,
  killed with the grading worker: nothing it starts outlives it), its own IPC and host name.
- as an unprivileged user: when the grader runs as root, a uid of its own per grading worker (61000 + n) with no
  capabilities and no new privileges; otherwise the instructor's uid, mapped to `nobody` in a user namespace.
- limits: address space, CPU seconds, file size, number of processes (a fork bomb or a memory bomb ends that
  submission only).

The kernel talks to the grader over Unix sockets in its box (jupyter's `ipc` transport), which cross the network
namespace; TCP ports are neither needed nor shared between workers.

`python -I twoprim/sandbox.py CONNECTION_FILE` is the kernelspec's argv: it builds the sandbox around
`ipykernel_launcher` and execs it. Where isolation is impossible (not Linux, bubblewrap missing, user namespaces
disabled), `missing()` says what is missing and what to install.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

ENV_BOX = "TWOPRIM_SANDBOX_BOX"      # the submission's writable box (set by the grader per submission)
ENV_UID = "TWOPRIM_SANDBOX_UID"      # the uid the kernel runs as when the grader is root
BASE_UID = 61000
KERNEL_NAME = "twoprim-sandbox"

MEMORY_LIMIT_BYTES = 8 * 2**30       # address space: torch's import alone reserves ~1 GiB
CPU_LIMIT_SECONDS = 600
FILE_SIZE_LIMIT_BYTES = 256 * 2**20
PROCESS_LIMIT = 256                  # processes and threads of the sandbox's uid

INSTALL = ("install bubblewrap and util-linux: `sudo apt-get install bubblewrap util-linux` (Debian, Ubuntu), "
           "`sudo dnf install bubblewrap util-linux` (Fedora)")


@cache
def missing() -> str | None:
    """None when submissions can be isolated here; else what is missing and what to do."""
    if sys.platform != "linux":
        return (f"isolating submissions needs Linux namespaces (bubblewrap); this is {sys.platform}. Grade on a "
                f"Linux machine, or pass --unisolated to run students' code as yourself, without isolation")
    tools = ["bwrap", "prlimit"] + (["setpriv"] if os.geteuid() == 0 else [])
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return f"{', '.join(absent)} not found: {INSTALL}; or pass --unisolated to grade without isolation"
    probe = subprocess.run(_bwrap_args([], Path("/"), probe=True) + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return (f"bubblewrap cannot create namespaces here ({probe.stderr.strip()[:200]}); enable unprivileged user "
                f"namespaces (sysctl kernel.unprivileged_userns_clone=1) or run the grader as root; or pass "
                f"--unisolated to grade without isolation")
    return None


def kernelspec(folder: Path) -> str:
    """Write the sandboxed kernelspec under `folder`/kernels (put `folder` on JUPYTER_PATH); return its name."""
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    # run as a plain script (-I: nothing from the environment or the script's folder): importing the package
    # would import torch, a second or more per kernel, before the kernel imports it again
    argv = [sys.executable, "-I", str(Path(__file__).resolve()), "{connection_file}"]
    # interrupts go as messages: the kernel is in a session of its own, out of reach of the grader's signals
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3 (graded, sandboxed)",
                                                  "language": "python", "interrupt_mode": "message"}))
    return KERNEL_NAME


def prepare_box(box: Path, uid: int | None = None) -> dict[str, Path]:
    """Create the submission's box: home/ (HOME and working folder), capture/ (results), run/ (connection file
    and sockets: the grader sets KernelManager.ip to run/kernel). Owned by the sandbox's uid when the grader is
    root."""
    paths = {name: box / name for name in ("home", "capture", "run")}
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        uid = uid if uid is not None else BASE_UID
        for path in [box, *paths.values()]:
            os.chown(path, uid, uid)
    return paths


def _ancestors(path: Path) -> list[Path]:
    return [p for p in reversed(path.parents) if p != Path("/")]


def _bwrap_args(binds: list[tuple[str, Path]], box: Path, *, probe: bool = False) -> list[str]:
    """bubblewrap's argv: namespaces, then the read-only system, the binds ("ro" | "rw", path), the box."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-net",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if os.geteuid() == 0:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # only for setpriv, which drops them all
    else:
        args += ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    args += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--tmpfs", "/tmp"]  # a private /tmp anyone in the sandbox may write (MLX caches there)
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
    package = Path(__file__).resolve().parent
    root = package.parent
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


def limits() -> list[str]:
    """`prlimit` with the limits of a submission's processes, as an argv prefix (also for unisolated grading)."""
    return ["prlimit", f"--as={MEMORY_LIMIT_BYTES}", f"--cpu={CPU_LIMIT_SECONDS}", f"--fsize={FILE_SIZE_LIMIT_BYTES}",
            f"--nproc={_process_limit()}", "--core=0", "--"]


def command(connection_file: Path, box: Path, uid: int) -> list[str]:
    """The argv that starts ipykernel on `connection_file` inside the sandbox."""
    env = {
        "HOME": box / "home", "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
        "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin", "TMPDIR": "/tmp",
        "IPYTHONDIR": box / "home" / ".ipython", "MPLCONFIGDIR": box / "home" / ".matplotlib",
        "TWOPRIM_INDUCTOR_CACHE": box / "home" / ".cache" / "inductor", "PYTHONDONTWRITEBYTECODE": "1",
        "TWOPRIM_CAPTURE_DIR": box / "capture",
    }
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if name in os.environ:
            env[name] = os.environ[name]
    argv = limits() + _bwrap_args(_readable_binds(), box) + ["--chdir", str(box / "home"), "--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, str(value)]
    argv.append("--")
    if os.geteuid() == 0:
        argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs", "--"]
    argv += [str(Path(sys.prefix) / "bin" / "python"), "-m", "ipykernel_launcher", "-f", str(connection_file)]
    return argv


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -I twoprim/sandbox.py CONNECTION_FILE (started by the grader's kernelspec)")
    connection_file = Path(argv[0]).resolve()
    box = os.environ.get(ENV_BOX)
    if not box:
        raise SystemExit(f"twoprim.sandbox: {ENV_BOX} is not set; only the grader starts this kernel")
    box = Path(box)
    uid = int(os.environ.get(ENV_UID, BASE_UID))
    info = json.loads(connection_file.read_text())
    if info.get("transport") != "ipc" or box / "run" not in Path(info.get("ip", "")).parents:
        raise SystemExit(f"twoprim.sandbox: the kernel must listen on Unix sockets in {box / 'run'} (transport "
                         f"'ipc', ip under that folder); got transport {info.get('transport')!r}, ip "
                         f"{info.get('ip')!r}. The grader configures KernelManager.transport and .ip")
    inside = box / "run" / "connection.json"  # a copy the sandbox user can read, in the one folder it shares
    inside.write_text(json.dumps(info))
    if os.geteuid() == 0:
        os.chown(inside, uid, uid)
    args = command(inside, box, uid)
    os.execvp(args[0], args)


if __name__ == "__main__":
    main(sys.argv[1:])
