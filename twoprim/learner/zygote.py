"""A zygote: one process per Jupyter server (a student's on the classroom hub) or per `./course progress` report that
has imported what every kernel of the course imports (torch, numpy, ipykernel, IPython, matplotlib, the course's
checks) and forks each new kernel from that state.

It is started by the kernel provisioner (`twoprim.learner.warm_kernels`) as a child of the student's own server (or
of the learner's report), so it runs as the student, in the student's control group and under their address-space
limit, and serves that one process alone: never shared between students. It never runs a notebook's code itself:
each kernel is a child forked from it before any user code, which then

- leads a session of its own (an interrupt is SIGINT to its process group, as for a kernel started the usual way);
- takes the environment, working folder and command-line arguments the server gave it (`python -m
  ipykernel_launcher ARGS`), and reseeds what would otherwise be the same in every kernel (NumPy's global
  generator; Python's `random` reseeds itself at fork);
- watches the zygote as its parent (ipykernel's parent poller): when the zygote goes, its kernels go too.

The zygote does what the grading forkserver learnt to do (`twoprim.grading.forkserver`): no thread pool of torch is
started before a fork (no torch operation runs here), no ZMQ context is made here (each kernel makes its own), the
warm heap is frozen for the garbage collector so that it stays shared, and what its imports set in the environment
is set again in each kernel. A kernel's connection file is the server's, read by the kernel itself.

Protocol, over a Unix socket in a folder only the student can open, from their own uid only (SO_PEERCRED): one JSON
line per kernel, `{"argv": [...], "env": {...}, "cwd": "..."}`; the answer `{"pid": N}` comes with a pidfd of the
kernel (SCM_RIGHTS), then `{"exit": CODE}` (negative: the signal) when the zygote has reaped it. A connection that
closes takes its kernel with it (the server that asked is gone). The zygote exits when the server that started it
does (a pidfd of the server in its loop), killing what it forked. SIGUSR1 retires it (the provisioner's answer to
kernels that keep dying at start): it forks no more, and exits once the kernels it forked have ended.

    python -P -m twoprim.learner.zygote SOCKET SERVER_PID
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import pwd
import selectors
import signal
import socket
import struct
import sys
import time

from twoprim.core import json_lines

READY = "twoprim-zygote-ready"
# What a kernel of the course imports before its first cell answers: ipykernel and IPython, torch and numpy, the
# plotting stack and the course's core (`from twoprim import ex01, guards`, `from twoprim import plots`). No
# assignment's checks module: importing one may set the environment its own kernels need (ex09: Triton's
# interpreter), which a kernel that never imports it must not get. No classroom code either (a learner's
# `./course progress` forks its kernels from a zygote too): the classroom kernel's extension, the memory-limit
# notice, is imported by each kernel as it loads it (a millisecond).
MODULES = (
    "numpy",
    "torch",
    "IPython",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "ipykernel.debugger",
    "ipywidgets",
    "matplotlib",
    "matplotlib.pyplot",
    "matplotlib_inline.backend_inline",
    "twoprim.core.checks",
    "twoprim.core.guards",
    "twoprim.core.verdicts",
    "twoprim.core.timing",
    "twoprim.learner.hints",
    "twoprim.topics.plots",
)
INLINE = "module://matplotlib_inline.backend_inline"  # what ipykernel sets MPLBACKEND to when it is unset
_SET_BY: dict[str, str] = {}  # what importing MODULES set in the environment: set again in every kernel


def account() -> str:
    """The account this process runs as, for its log lines: a hub's log interleaves every student's server."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"


def _say(message: str) -> None:
    """A line in the server's log (the zygote's stderr), naming the student."""
    print(f"twoprim.learner.zygote ({account()}): {message}", file=sys.stderr, flush=True)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _warm() -> None:
    """Import MODULES (one that fails is logged and left to the kernels), noting what they set in the environment."""
    os.environ.setdefault("MPLBACKEND", INLINE)  # matplotlib reads it at import; a kernel of ipykernel's sets it so
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # pydevd's warning about frozen modules at import
    before = dict(os.environ)
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - the kernel imports it itself, as without a zygote
            _say(f"{name} not imported ({type(err).__name__}: {err})")
    _SET_BY.update({k: v for k, v in os.environ.items() if before.get(k) != v})
    gc.collect()
    gc.freeze()  # the imported heap stays shared with every kernel: the collector never writes to its pages


def _peer_uid(conn: socket.socket) -> int:
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):  # the kernel leads a session (and process group) of its own
        try:
            kill(pid, signal.SIGKILL)
            return
        except OSError:
            continue


def serve(socket_path: str, server_pid: int) -> None:
    """Import, listen on `socket_path`, fork a kernel for each request of this uid, until the server exits."""
    _warm()
    server_fd = os.pidfd_open(server_pid)  # raises if the server is already gone: nothing to serve
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(socket_path)
    finally:
        os.umask(old)
    listener.listen(16)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    retiring: list[bool] = []
    signal.signal(signal.SIGUSR1, lambda *_: retiring.append(True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server's Ctrl-C is the server's; it stops this one itself
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    selector.register(server_fd, selectors.EVENT_READ, "server")
    kernels: dict[int, socket.socket] = {}
    print(f"{READY} {_threads()}", flush=True)
    os.dup2(2, 1)  # from here on, what it and its kernels print goes where the server's own output goes
    try:
        while True:  # serves until its server exits (or SIGTERM): unbounded by design
            for key, _ in selector.select():
                if key.data == "server":
                    return
                if key.data == "accept":
                    _accept(listener, selector, kernels, [listener, server_fd, wake_r, wake_w])
                elif key.data == "child":
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                else:  # the server closed its connection: the kernel it asked for goes with it
                    selector.unregister(key.fileobj)
                    _kill(key.data)
            _reap(kernels, selector)
            if retiring:
                if listener.fileno() >= 0:  # it forks no more; its kernels are left to finish
                    selector.unregister(listener)
                    listener.close()
                    with contextlib.suppress(OSError):
                        os.unlink(socket_path)
                    _say(f"retired: it forks no more kernels and exits when its {len(kernels)} running ones end")
                if not kernels:
                    return
    finally:
        for pid in list(kernels):
            _kill(pid)
        with contextlib.suppress(OSError):
            os.unlink(socket_path)


def _accept(listener: socket.socket, selector, kernels: dict[int, socket.socket], own: list) -> None:
    conn, _ = listener.accept()
    if _peer_uid(conn) != os.getuid():
        conn.close()
        return
    conn.settimeout(30)
    try:
        request = json_lines.receive(conn, limit=4 << 20)
    except (OSError, ValueError):
        request = None
    if (
        not isinstance(request, dict)
        or not isinstance(request.get("argv"), list)
        or not isinstance(request.get("env"), dict)
        or not isinstance(request.get("cwd"), str)
    ):
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        _become_kernel(request, [*own, conn, *kernels.values()])
    pidfd = os.pidfd_open(pid)  # before it can be reaped: the server signals and watches this very process
    try:
        json_lines.send(conn, {"pid": pid}, (pidfd,))
    except OSError:
        _kill(pid)
    finally:
        os.close(pidfd)
    conn.settimeout(None)
    kernels[pid] = conn
    selector.register(conn, selectors.EVENT_READ, pid)


def _reap(kernels: dict[int, socket.socket], selector) -> None:
    """Each kernel that ended: its server is told how (`exit`: its exit code, negative for a signal)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = kernels.pop(pid, None)
        if conn is None:
            continue
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        with contextlib.suppress(OSError):
            json_lines.send(conn, {"exit": os.waitstatus_to_exitcode(status)})
        conn.close()


def _become_kernel(request: dict, fds: list) -> None:
    """In the forked child: the kernel the server asked for (`python -m ipykernel_launcher ARGV` in its environment
    and folder). Never returns."""
    code = 1
    try:
        for obj in fds:
            if isinstance(obj, int):
                os.close(obj)
            else:
                obj.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in any new interpreter
        os.setsid()
        os.chdir(request["cwd"])
        zygote = os.getppid()
        env = {str(k): str(v) for k, v in request["env"].items()}
        env.update({k: v for k, v in _SET_BY.items() if k not in env})
        env["JPY_PARENT_PID"] = str(zygote)
        os.environ.clear()
        os.environ.update(env)
        _fresh_state(env)
        # ipykernel read JPY_PARENT_PID when the zygote imported it: its parent poller watches the zygote (the
        # kernel's parent) by this argument; the kernel goes when the zygote does, which goes with the server
        sys.argv = ["ipykernel_launcher", *map(str, request["argv"]), f"--IPKernelApp.parent_handle={zygote}"]
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001 - said in the server's log, then the child ends
        _say(f"kernel {os.getpid()} could not start: {type(exc).__name__}: {exc}")
    finally:
        import atexit

        try:
            atexit._run_exitfuncs()  # what a kernel's interpreter runs as it exits (IPython's history saved)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _fresh_state(env: dict[str, str]) -> None:
    """What a kernel started the usual way would not share with its siblings: NumPy's global generator (seeded from
    the system at import), torch's thread count from the kernel's environment, the kernel's PYTHONPATH, its
    matplotlib backend when the server asks for another."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    threads = env.get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[0:0] = extra
    backend = env.get("MPLBACKEND")
    matplotlib = sys.modules.get("matplotlib")
    if backend and backend != INLINE and matplotlib is not None:
        matplotlib.rcParams["backend"] = backend


def main(argv: list[str]) -> int:
    """`python -P -m twoprim.learner.zygote SOCKET SERVER_PID`: serve until the server exits."""
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -P -m twoprim.learner.zygote SOCKET SERVER_PID", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        serve(argv[0], int(argv[1]))
    except ProcessLookupError:
        _say(f"the server (pid {argv[1]}) had exited {time.monotonic() - started:.1f} s after starting this zygote")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
