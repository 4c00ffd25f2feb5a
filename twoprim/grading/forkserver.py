"""Warm kernels for grading: a forkserver inside the sandbox imports torch, Dynamo, ipykernel and every
assignment's checks once, and forks a fresh kernel from that state for every submission.

A cold kernel spends seconds of CPU importing the same modules for every submission (torch and Dynamo ~2 s on the
course's 2-core machine). Here one process per grading worker pays that once. It never runs a
student's code itself: each submission's kernel is a new child forked from it, which then

- takes the submission's own uid (when the grader is root: `sandbox.claimed_uid`), drops every capability and sets
  no_new_privs; its own limits (`sandbox.rlimits`: address space, CPU, file size, processes); its own session;
- works in the submission's own box (home, capture folder, IPC sockets), with the kernel environment
  `sandbox.kernel_env` and nothing of the grader's;
- becomes `ipykernel` on the connection file the grader wrote.

The forkserver itself runs in the sandbox that `sandbox.forkserver_command` builds (read-only system and
environment, no network, its own PID namespace, dying with the worker). When a kernel ends, the grader kills what
is left of its uid; when the grader is not root (every kernel is the same mapped user) the forkserver kills every
process in its namespace but itself once no kernel is running: a worker grades one submission at a time, so
nothing one submission starts survives into the next.

Whose a kernel's death is (`kernel_death`): the launcher notes, in a file of the grader's that no kernel reaches
($TWOPRIM_KERNEL_END), that it started, the kernel's pid, and how the kernel ended as the forkserver reported it
(its exit status from wait4, with its CPU seconds, peak memory and the system's count of out-of-memory kills over
its life), or that the forkserver went away first. A kernel that died in a cell is the student's only when that
report came and names something of the student's doing: an exit of its own, a crash signal, its CPU or file-size
limit (its memory limit is the address space: an allocation past it fails with MemoryError, or aborts). Anything else
is the grader's, never a grade: no report (the forkserver, its sandbox or the launcher killed; a kernel that never
answered, before any of the notebook's code ran), the machine's out-of-memory killer (counted in /proc/vmstat over
the kernel's life), or a signal with nothing of the student's behind it (the grader cannot tell who sent it). When the
grader runs as root each kernel has a uid of its own and cannot signal the forkserver; otherwise they share one (user
namespaces map a single uid), and a submission's code could kill it: that submission is then not graded, on every
run, and the reason says to read it.

A request with `"warm": true` (a grading worker's, `cluster`) warms its assignment (module and cells) and forks
nothing, so the first kernel of that assignment is forked at once.

Two commands, both run with `python -I -m twoprim.grading.forkserver` and importing no torch unless serving:
- `serve SOCKET MODULE...`: the forkserver (started by the grading worker, `Forkserver`);
- `launch CONNECTION_FILE`: the kernelspec's argv (`sandbox.kernelspec`): asks the forkserver named by
  $TWOPRIM_FORKSERVER for a kernel in the box $TWOPRIM_SANDBOX_BOX as $TWOPRIM_SANDBOX_UID, then waits for it to end,
  noting what it sees ($TWOPRIM_KERNEL_END); killed, it takes the kernel with it.

Why this module is long: the server that runs inside the sandbox, the client the grader starts and talks to it with, the
launcher each kernel starts from and the report of how a kernel ended share one protocol (the requests and the end
report), kept in one module so that both sides change together.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import json
import os
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from twoprim.core import json_lines

ENV_SOCKET = "TWOPRIM_FORKSERVER"
ENV_MODULE = "TWOPRIM_CHECKS_MODULE"  # the assignment's checks module: its kernel keeps what its import set
ENV_CELLS = "TWOPRIM_WARM_CELLS"  # a file of the grader's: the instructor's test cells, for `warm_cells`
ENV_END = "TWOPRIM_KERNEL_END"  # a file of the grader's: what the launcher saw of its kernel (`kernel_death`)
READY = "twoprim-forkserver-ready"
START_TIMEOUT_S = 180  # importing torch and the checks on a busy 2-core machine
PR_SET_NO_NEW_PRIVS = 38
_SET_BY: dict[str, dict[str, str]] = {}  # module -> what importing it set in the environment
_WARMED: set[str] = set()  # checks modules whose warm_up has run here, and "module:digest" of cells


# ----------------------------------------------------------------------------------------------------------------
# The forkserver (inside the sandbox)
# ----------------------------------------------------------------------------------------------------------------


def _warm_up() -> None:
    """Pay once what every graded kernel would pay on its first check: torch wraps a dispatch mode's handler so that
    its first call imports Dynamo (~3 s of CPU on the course's 2-core machine). Every kernel's Dynamo also skips
    timing each new frame's guards (`compiler.skip_guard_profiling`: 26 ms per frame compiled, for a metric)."""
    if "twoprim.topics.inside_torch_compile" in sys.modules:
        sys.modules["twoprim.topics.inside_torch_compile"].skip_guard_profiling()
    if "twoprim.core.record" in sys.modules:
        import torch

        from twoprim.core.record import record_calls

        with record_calls():
            (torch.ones(3, dtype=torch.float64) * 2).sum()


def _warm_assignment(module: str, cells: Sequence[str] = ()) -> None:
    """Before the first kernel of an assignment is forked: its checks module's `warm_up()`, if it has one, run here
    once, so every kernel of that assignment inherits what it computed (ex06: Dynamo's and AOTAutograd's first
    capture, and the graphs its visible check hands the learner's code, the same for every submission). Then, for
    each new set of the instructor's test cells (`cells`, the trusted source nbgrader runs, sent by the grader's
    launcher: keyed by their digest, so a changed hidden check is warmed anew), its `warm_cells(cells)`: what those
    cells build before calling a check (ex06: the seeded graphs its hidden checks hand the learner's code).
    Only assignments this forkserver imported are warmed; a warm-up that fails is logged and the kernels compute
    the same themselves."""
    if module not in _SET_BY:
        return
    if module not in _WARMED:
        _WARMED.add(module)
        _warm_run(getattr(sys.modules[module], "warm_up", None), module, "warm_up")
    warm_cells = getattr(sys.modules[module], "warm_cells", None)
    key = f"{module}:{hashlib.sha256(json.dumps(list(cells)).encode()).hexdigest()}"
    if cells and warm_cells is not None and key not in _WARMED:
        _WARMED.add(key)
        _warm_run(lambda: warm_cells(list(cells)), module, "warm_cells")


def _warm_run(fn, module: str, what: str) -> None:
    if fn is None:
        return
    start = time.monotonic()
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else 1
    try:
        if torch:  # on one thread: a parallel region here would start OpenMP's pool, which a forked kernel inherits
            torch.set_num_threads(1)  # broken (its first parallel op then waits forever on threads it does not have)
        fn()
    except Exception as exc:  # noqa: BLE001 - the kernels do the same work themselves
        print(
            f"twoprim.grading.forkserver: {module}.{what} failed: {type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )
    else:
        print(f"twoprim.grading.forkserver: {module} {what} in {time.monotonic() - start:.2f} s", flush=True)
    finally:
        if torch:
            torch.set_num_threads(threads)
    import gc

    gc.collect()
    gc.freeze()


def serve(socket_path: str, modules: list[str]) -> None:
    """The forkserver: import `modules`, warm up, then fork a kernel for each launcher that asks, until killed."""
    # what each import sets in the environment (ex09 turns on Triton's interpreter), a kernel keeps for the modules
    # it uses (all but the assignments' checks, and its own assignment's), as if it had imported them itself
    # pydevd (imported with ipykernel's debugger) warns at import that frozen modules may hide breakpoints: not here
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    for name in modules:
        before = dict(os.environ)
        importlib.import_module(name)
        _SET_BY[name] = {k: v for k, v in os.environ.items() if before.get(k) != v}
    _warm_up()
    import gc

    gc.collect()
    gc.freeze()  # the warm heap stays shared with every kernel: the collector never writes to its pages
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    os.chmod(socket_path, 0o600)
    server.listen(8)
    log = os.open(str(Path(socket_path).parent / "forkserver.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    kernels: dict[int, socket.socket] = {}
    born: dict[int, int | None] = {}  # kernel pid -> the system's count of out-of-memory kills when it was forked
    print(READY, flush=True)
    os.dup2(log, 1)  # from here on, what it and its kernels print goes to its log, never into a full pipe
    os.dup2(log, 2)
    os.close(log)
    while True:  # serves until its worker stops it (SIGTERM, or SIGKILL with the sandbox): unbounded by design
        for key, _ in selector.select():
            if key.data == "accept":
                conn, _ = server.accept()
                conn.settimeout(30)
                try:
                    request = json_lines.receive(conn, limit=1 << 20)
                except (OSError, ValueError):
                    request = None
                if not request:
                    conn.close()
                    continue
                cells = request.get("cells")
                _warm_assignment(
                    str(request.get("module") or ""),
                    [c for c in cells if isinstance(c, str)] if isinstance(cells, list) else [],
                )
                if request.get("warm"):  # a grading worker warming an assignment ahead of its kernels: no fork
                    with contextlib.suppress(OSError):
                        json_lines.send(conn, {"warmed": True})
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _become_kernel(request, [server, conn, *kernels.values()], wake_r, wake_w)
                conn.settimeout(None)
                born[pid] = oom_kills()
                json_lines.send(conn, {"pid": pid})
                kernels[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
            elif key.data == "child":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(kernels, selector, born)
            else:  # the launcher went away (its kernel was shut down or killed): the kernel goes too
                pid = key.data
                selector.unregister(key.fileobj)
                _kill(pid)
        _reap(kernels, selector, born)


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the kernel leads a session of its own
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (any cgroup's included), or None
    where /proc/vmstat does not say (its `oom_kill` line is Linux 4.13's)."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _reap(kernels: dict[int, socket.socket], selector: selectors.BaseSelector, born: dict[int, int | None]) -> None:
    """Each kernel that ended: its launcher is told how (`exit`: its exit code, negative for a signal) and what it
    used (CPU seconds, peak resident memory, out-of-memory kills on the system during its life): what
    `kernel_death` reads to say whose its end was."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = kernels.pop(pid, None)
        before = born.pop(pid, None)
        if conn is None:
            continue
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        after = oom_kills()
        with contextlib.suppress(OSError):
            json_lines.send(
                conn,
                {
                    "exit": os.waitstatus_to_exitcode(status),
                    "cpu_s": usage.ru_utime + usage.ru_stime,
                    "maxrss": usage.ru_maxrss * 1024,
                    "oom_kills": after - before if after is not None and before is not None else None,
                },
            )
        conn.close()
        if not kernels and os.geteuid() != 0:
            _kill_everything_else()


def _kill_everything_else() -> None:
    """Every process of this PID namespace but its init and this forkserver (what kernels left behind), gone."""
    from twoprim.grading.sandbox import kill_until_gone

    keep = {1, os.getpid()}
    kill_until_gone(
        lambda: [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and int(e.name) not in keep]
    )


def _become_kernel(request: dict, fds: list, wake_r: int, wake_w: int) -> None:
    """In the forked child: drop to the submission's uid and limits, then run ipykernel. Never returns."""
    code = 1
    try:
        for obj in fds:
            obj.close()
        signal.set_wakeup_fd(-1)
        os.close(wake_r)
        os.close(wake_w)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        for name, (soft, hard) in request["limits"].items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        uid = request.get("uid")
        if uid is not None and os.geteuid() == 0:
            if not isinstance(uid, int) or uid < 1000:
                raise SystemExit(f"refusing to run a kernel as uid {uid!r}")
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)  # every capability goes with uid 0
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise SystemExit("could not set no_new_privs")
        box = Path(request["box"])
        os.chdir(box / "home")
        os.environ.clear()
        os.environ.update(request["env"])
        for module, changes in _SET_BY.items():
            if not re.fullmatch(r"twoprim\.ex\d\d[a-z]?", module) or module == request.get("module"):
                os.environ.update(changes)
        threads = request["env"].get("OMP_NUM_THREADS")
        if threads and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads))
        # IPython's history in memory, as nbclient asks of every kernel (its --HistoryManager.hist_file=:memory:
        # reaches the launcher, not this argv): the SQLite file took up to 0.9 s while other kernels wrote to disk
        sys.argv = ["ipykernel_launcher", "-f", request["connection_file"], "--HistoryManager.enabled=False"]
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, int) and exc.code:
            print(f"twoprim.grading.forkserver: {exc.code}", file=sys.stderr, flush=True)
    except BaseException as exc:  # noqa: BLE001 - reported, then the child ends
        print(
            f"twoprim.grading.forkserver: the kernel could not start: {type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )
    finally:
        os._exit(code)


# ----------------------------------------------------------------------------------------------------------------
# The grader's side: starting a forkserver, and the kernelspec's launcher
# ----------------------------------------------------------------------------------------------------------------


class Forkserver:
    """A forkserver for one grading worker: `start()` runs it in the sandbox and waits until its modules are
    imported; `socket` is what the launcher connects to; `pids()` its process tree (spared by the worker's
    watchdog, which kills the kernels)."""

    def __init__(self, boxes: Path, control: Path, modules: list[str]):
        self.boxes, self.control, self.modules = boxes, control, modules
        self.socket = control / "socket"
        self.proc: subprocess.Popen | None = None

    def alive(self) -> bool:
        """Started, still running, and answering on its socket (a forkserver killed inside its sandbox leaves the
        sandbox's process running for a moment: it no longer accepts)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(5)
        try:
            probe.connect(str(self.socket))
        except OSError:
            return False
        finally:
            probe.close()
        return True

    def start(self) -> Forkserver:
        from twoprim.grading import sandbox

        self.control.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.boxes.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self.proc = proc = subprocess.Popen(
            sandbox.forkserver_command(self.boxes, self.control, self.modules),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None  # stdout=PIPE
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT_S
        seen = []
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip() == READY:
                selector.close()
                return self
            seen.append(line.rstrip())
        selector.close()
        self.stop()
        raise RuntimeError(
            f"the grading forkserver did not start within {START_TIMEOUT_S} s "
            f"(it printed: {' | '.join(seen[-5:]) or 'nothing'})"
        )

    def pids(self) -> set[int]:
        proc = self.proc
        if proc is None or not self.alive():
            return set()
        import psutil

        try:
            root = psutil.Process(proc.pid)
            return {root.pid, *(p.pid for p in root.children(recursive=True))}
        except psutil.Error:
            return set()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


def _note(record: dict) -> None:
    """What the launcher saw of its kernel, one JSON line appended to the grader's file named in $TWOPRIM_KERNEL_END
    (outside the sandbox: no kernel reaches it), for `kernel_death`."""
    path = os.environ.get(ENV_END)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def launch(connection_file: str) -> int:
    """The kernelspec's argv: one kernel for the submission whose box the grader named, forked by the forkserver.
    What it sees of the kernel (started, how it ended, or the forkserver lost before it said) goes to `_note`."""
    from twoprim.grading import sandbox

    _note({"launcher": os.getpid()})  # each kernel's notes begin here (an assignment of several notebooks: several)
    box = os.environ.get(sandbox.ENV_BOX)
    server = os.environ.get(ENV_SOCKET)
    if not box or not server:
        raise SystemExit(
            f"twoprim.grading.forkserver: {sandbox.ENV_BOX} and {ENV_SOCKET} must be set; only the grader "
            f"starts this kernel"
        )
    box = Path(box)
    uid = int(os.environ[sandbox.ENV_UID]) if os.environ.get(sandbox.ENV_UID) else None
    info = json.loads(Path(connection_file).read_text())
    if info.get("transport") != "ipc" or box / "run" not in Path(info.get("ip", "")).parents:
        raise SystemExit(
            f"twoprim.grading.forkserver: the kernel must listen on Unix sockets in {box / 'run'} (transport "
            f"'ipc', ip under that folder); got transport {info.get('transport')!r}, ip "
            f"{info.get('ip')!r}. The grader configures KernelManager.transport and .ip"
        )
    inside = box / "run" / "connection.json"  # a copy the kernel's user can read, in the one folder it shares
    inside.write_text(json.dumps(info))
    if uid is not None and os.geteuid() == 0:
        os.chown(inside, uid, uid)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(server)
    except OSError as err:
        _note({"lost": f"the launcher could not reach the grading forkserver ({type(err).__name__}: {err})"})
        return 1

    def terminated(signum, _frame):  # closing the connection ends the kernel
        _note({"lost": f"the kernel's launcher was stopped by {signal.Signals(signum).name} before its kernel ended"})
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    cells = []
    if os.environ.get(ENV_CELLS):  # written by the grader (`execute.CpuTimedExecute`), where no kernel reaches
        try:
            cells = json.loads(Path(os.environ[ENV_CELLS]).read_text())
        except (OSError, ValueError):
            cells = []
    json_lines.send(
        conn,
        {
            "connection_file": str(inside),
            "box": str(box),
            "uid": uid,
            "env": sandbox.kernel_env(box),
            "limits": sandbox.rlimits(),
            "module": os.environ.get(ENV_MODULE, ""),
            "cells": cells,
        },
    )
    while True:  # as long as its kernel lives, which the grader's cell limits and watchdog bound
        try:
            message = json_lines.receive(conn, limit=1 << 20)
        except (OSError, ValueError) as err:
            message, lost = None, f"{type(err).__name__}: {err}"
        else:
            lost = "its connection closed"
        if message is None:
            shared = (
                ""
                if os.geteuid() == 0
                else (
                    "; the grader does not run as root, so the kernel runs as the forkserver's own user and could kill "
                    "it: a submission never graded on every run is one to read"
                )
            )
            _note({"lost": f"the grading forkserver died under the kernel ({lost}){shared}"})
            return 1
        if "pid" in message:
            _note({"kernel": message["pid"]})
        if "exit" in message:
            _note(message)
            return int(message["exit"]) if int(message["exit"]) >= 0 else 128 - int(message["exit"])


_CRASHES = {
    "SIGSEGV": "a segmentation fault: memory read or written where there is none, e.g. through ctypes or a "
    "library called with bad arguments",
    "SIGBUS": "a bus error: memory accessed in a way the machine cannot",
    "SIGILL": "an illegal instruction",
    "SIGFPE": "an arithmetic fault (an integer divided by zero in C code)",
    "SIGABRT": "aborted by its code or a library it called, e.g. on an allocation that failed under the "
    "address-space limit of {memory}",
    "SIGSYS": "a forbidden system call",
}


def kernel_death(records: list[dict], *, cpu_limit: float, memory_limit: int, file_limit: int) -> tuple[str, str]:
    """Whose fault a kernel that died in the middle of a cell was, from what its launcher noted (`_note`): ("student",
    why) only when the forkserver, alive, reported the kernel's own end and that end is the student's code's doing
    (an exit of its own, a crash, its CPU or file-size limit); else ("grader", why): the forkserver or the launcher
    died first (nothing reported the kernel's end), the machine's out-of-memory killer chose it (the student's memory
    limit is the address space, which fails an allocation with MemoryError instead), or a signal with nothing of the
    student's behind it killed the kernel (the grader cannot tell who sent it, so it never counts against them)."""
    starts = [i for i, r in enumerate(records) if "launcher" in r]
    records = records[starts[-1] :] if starts else records  # the last kernel's: the one that died
    if not records:
        return "grader", "the kernel's launcher (a grader process) died before it could start the kernel"
    last = records[-1]
    if "lost" in last:
        return "grader", last["lost"]
    if "exit" not in last:
        if "kernel" not in last:
            return "grader", "the kernel's launcher (a grader process) died before the kernel started"
        return "grader", "the kernel's launcher (a grader process) was killed, taking the kernel with it"
    code = int(last["exit"])
    if code >= 0:
        return "student", (
            f"the student's code ended the kernel's process (exit status {code}, as os._exit({code}) does)"
        )
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    cpu, rss, oom = last.get("cpu_s"), last.get("maxrss"), last.get("oom_kills")
    if name in _CRASHES:
        what = _CRASHES[name].format(memory=f"{memory_limit / 2**30:.0f} GiB")
        return "student", f"the kernel crashed in the student's code ({name}, {what})"
    if name == "SIGXCPU" or (name == "SIGKILL" and cpu is not None and cpu >= cpu_limit - 1):
        return "student", f"the kernel used up its CPU limit of {cpu_limit:.0f} s ({name})"
    if name == "SIGXFSZ":
        return "student", f"the student's code wrote a file past the limit of {file_limit / 2**20:.0f} MiB ({name})"
    if name == "SIGKILL" and oom:  # the student's limit is the address space (a MemoryError); the machine's is not
        held = f"{rss / 2**30:.1f} GiB at its peak, " if rss else ""
        return "grader", (
            f"the machine ran out of memory and its out-of-memory killer stopped the kernel (it held "
            f"{held}within its own limit of {memory_limit / 2**30:.0f} GiB)"
        )
    return "grader", (
        f"the kernel was killed by {name} from outside, not by one of its limits or the out-of-memory "
        f"killer (the grader cannot tell who sent it)"
    )


def main(argv: list[str]) -> int:
    """`python -I -m twoprim.grading.forkserver serve SOCKET MODULE...` or `launch CONNECTION_FILE`."""
    if argv[:1] == ["serve"] and len(argv) >= 2:
        serve(argv[1], argv[2:])
        return 0
    if argv[:1] == ["launch"] and len(argv) == 2:
        return launch(argv[1])
    raise SystemExit("usage: python -I -m twoprim.grading.forkserver serve SOCKET MODULE... | launch CONNECTION_FILE")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
