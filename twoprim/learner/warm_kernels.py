"""Kernels start warm: a kernel provisioner (jupyter_client's provisioning API) that forks each kernel from a zygote
of the process that asks (`twoprim.learner.zygote`), a process that has already imported torch, ipykernel and the
course, instead of starting a new interpreter that imports them again.

Registered as the entry point `twoprim-warm` (pyproject.toml, `jupyter_client.kernel_provisioners`). Two users:

- Every kernel of a student's server on the classroom hub: the classroom's python3 kernelspec names it
  (`twoprim.classroom.warm_kernels`, which also starts the zygote with the server, while the student logs in): a
  notebook's kernel, and Validate's fresh kernel (nbgrader's Execute starts it with a KernelManager in the server,
  from the same kernelspec).
- A learner's `./course progress` that runs two notebooks or more (`twoprim.learner.progress`): one zygote for the
  report, stopped when it ends.

- The zygote is the asking process's child: it runs as the student, in their control group and under their
  address-space limit (`twoprim.classroom.limits` on the hub), and serves this one process. Each kernel forked from
  it is counted against the student's memory limit too, sharing the zygote's pages until it writes them.
- Each kernel is a fresh interpreter state to the student: the zygote has run no notebook code, each kernel is
  forked before any, and IPython's namespace is made in the kernel.
- Interrupt, restart, shutdown and kill work as for a kernel started the usual way: signals go to the kernel's
  process group (it leads a session of its own), the zygote reports its exit status, and the server's restarter
  starts a new one (forked again) when it dies; the hub's notices (`twoprim.classroom.notices`) read the kill count
  of the student's own control group, which holds the forked kernels as it held the others.
- Where the zygote cannot serve (not started yet: the first kernel of a server without the extension; it died; a
  kernelspec whose command is not this environment's `python -m ipykernel_launcher`), the kernel starts the usual
  way and the server's log says why; a zygote that died is started again in the background for the next kernels.
- A forked kernel that ends by itself (not stopped by the server) is named in the server's log with how it ended
  and how long after its fork. When two in a row end that way within `EARLY_S` of their fork (a crash at start,
  not the student's code: a kill at the memory limit, SIGKILL, or a clean exit do not count), the zygote is retired:
  it forks no more and exits once its running kernels have ended, the next kernel (the restarter's) starts the
  usual way, and a new zygote is started in the background for the ones after it. A student never waits on a
  zygote whose kernels cannot start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from jupyter_client.connect import LocalPortCache
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from twoprim.learner.zygote import READY, account

__all__ = ["NAME", "WarmProvisioner", "Zygote", "zygote", "stop_zygotes"]

NAME = "twoprim-warm"  # the provisioner's entry point, as a kernelspec names it
LOG = f"twoprim warm kernels ({account()})"  # a hub's log interleaves every student's server
START_S = 180  # the zygote importing torch while a whole class logs in on 2 cores
FORK_S = 30  # the zygote's answer to a request (it forks at once)
RESTARTS = 3  # a zygote that keeps dying is not started again more often than this per server
EARLY_S = 10.0  # a forked kernel that ends by itself this soon after its fork died at start (ipykernel's start: < 1 s)
EARLY_DEATHS = 2  # this many in a row retire the zygote


def how_it_ended(code: int) -> str:
    """A kernel's exit status in words: `exit code 1`, `killed by SIGSEGV`, or the zygote's having gone first."""
    if code == -1:
        return "ended after its zygote (no exit status)"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Zygote:
    """The zygote of this server process for one Python: started on demand (`start`), in the background; ready once
    it said so; `fork` asks it for a kernel."""

    def __init__(self, python: str):
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.ready = threading.Event()
        self.failure = ""  # why it is not serving (it exited, did not start in time)
        self.starts = 0
        self.started_at = 0.0
        self.threads = 0  # the zygote's threads when it said it was ready (1: none started before forks)
        self.lock = threading.Lock()
        self.socket: Path | None = None
        self.early = 0  # this zygote's forked kernels that died at start, in a row
        self.retired: list[subprocess.Popen] = []  # zygotes that fork no more, left to their running kernels

    def state(self) -> str:
        """ "ready", "starting", "dead" (it was started and exited, or never said ready) or "absent" (never started)."""
        if self.proc is None:
            return "absent"
        if self.proc.poll() is not None:
            if not self.failure:
                self.failure = f"it exited with status {self.proc.returncode}"
            return "dead"
        if self.ready.is_set():
            return "ready" if not self.failure else "dead"
        return "starting"

    def start(self, log=None, stderr=None) -> bool:
        """Start it in the background unless it runs or is starting; False when it has failed too often or cannot
        start (`failure` says why). Its kernels write to `stderr` (default: this process's, the server's log)."""
        with self.lock:
            if self.state() in ("ready", "starting"):
                return True
            if self.starts >= RESTARTS:
                self.failure = f"it failed {RESTARTS} times in this server and is not started again"
                return False
            self.starts += 1
            try:
                folder = _private_folder()
            except OSError as err:
                self.failure = f"it has nowhere to listen: {err}"
                return False
            self.socket = folder / f"zygote-{os.getpid()}-{self.starts}.sock"
            self.socket.unlink(missing_ok=True)
            self.ready.clear()
            self.failure = ""
            self.early = 0
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                [self.python, "-P", "-m", "twoprim.learner.zygote", str(self.socket), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=os.path.expanduser("~"),
                start_new_session=True,
            )
            threading.Thread(target=self._wait_ready, args=(self.proc, log), daemon=True).start()
            return True

    def _wait_ready(self, proc: subprocess.Popen, log) -> None:
        """Read the zygote's one line (READY and its thread count); a zygote that exits or stays silent fails."""
        line, out = b"", proc.stdout
        assert out is not None  # started with stdout=PIPE
        timer = threading.Timer(START_S, lambda: proc.poll() is None and proc.kill())
        timer.daemon = True
        timer.start()
        try:
            line = out.readline()
        except (OSError, ValueError):
            pass
        finally:
            timer.cancel()
            with contextlib.suppress(OSError):
                out.close()
        words = line.decode(errors="replace").split()
        if words[:1] == [READY] and proc.poll() is None:
            self.threads = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
            if log is not None:
                log.info(
                    "%s: the zygote (pid %d) is ready, %.1f s after it was started",
                    LOG,
                    proc.pid,
                    time.monotonic() - self.started_at,
                )
        else:
            late = time.monotonic() - self.started_at >= START_S
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            self.failure = (
                f"it was not ready within {START_S} s and was stopped"
                if late
                else f"it exited with status {proc.returncode} before it was ready"
            )
            if log is not None:
                log.warning(
                    "%s: the zygote (pid %d) failed: %s; its output above says why", LOG, proc.pid, self.failure
                )
        self.ready.set()

    async def wait_ready(self, seconds: float) -> bool:
        """Wait (without blocking the event loop) until it is ready or has failed; True when ready."""
        deadline = time.monotonic() + seconds
        while not self.ready.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.state() == "ready"

    def fork(self, argv: list[str], env: dict[str, str], cwd: str) -> tuple[socket.socket, int, int]:
        """A kernel forked from the zygote: (its connection to the zygote, pid, pidfd)."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(FORK_S)
        try:
            conn.connect(str(self.socket))
            conn.sendall((json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n").encode())
            data, fds, _, _ = socket.recv_fds(conn, 4096, 1)
            while data and not data.endswith(b"\n"):
                more = conn.recv(4096)
                if not more:
                    break
                data += more
            reply = json.loads(data) if data else {}
            if "pid" not in reply or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise OSError(f"the zygote answered {data[:200]!r} without a kernel")
        except BaseException:
            conn.close()
            raise
        conn.setblocking(False)
        return conn, int(reply["pid"]), fds[0]

    def ended(self, generation: int, code: int, after_s: float, log=None) -> None:
        """A kernel this zygote forked (its `generation`: which start of it) ended by itself `after_s` s after its
        fork: two that died at start in a row retire the zygote (see the module's docstring)."""
        with self.lock:
            if generation != self.starts or self.failure or self.proc is None or self.proc.poll() is not None:
                return  # an older zygote's kernel, or this one is already known not to serve (`state` says why)
            if code in (0, -signal.SIGKILL) or after_s >= EARLY_S:
                self.early = 0  # the student's doing (exit(), the memory limit) or a kernel that ran: not at start
                return
            self.early += 1
            if self.early < EARLY_DEATHS:
                return
            self.failure = f"its last {self.early} kernels died within {EARLY_S:.0f} s of their fork, the last: " + (
                how_it_ended(code)
            )
            proc = self.proc
            self.retired.append(proc)
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGUSR1)  # it forks no more, and exits when its running kernels have ended
        if log is not None:
            log.warning(
                "%s: the zygote (pid %d) is retired: %s; the next kernels start the usual way while a new one starts",
                LOG,
                proc.pid,
                self.failure,
            )

    def stop(self) -> None:
        for proc in [*self.retired, self.proc]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        self.retired = [p for p in self.retired if p.poll() is None]


def _private_folder() -> Path:
    """A folder only this user can open, for the zygote's socket (short: a socket's path fits in 107 bytes)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    folder = Path(base) / f"twoprim-zygote-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    st = folder.lstat()
    if folder.is_symlink() or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{folder} is not a folder of this user's alone (mode 0700)")
    return folder


_ZYGOTES: dict[str, Zygote] = {}
_ZYGOTES_LOCK = threading.Lock()


def zygote(python: str | None = None) -> Zygote:
    """This server process's zygote for `python` (default: this interpreter)."""
    python = python or sys.executable
    with _ZYGOTES_LOCK:
        if python not in _ZYGOTES:
            _ZYGOTES[python] = Zygote(python)
        return _ZYGOTES[python]


def stop_zygotes() -> None:
    """Stop this process's zygotes (the server's exit; tests)."""
    with _ZYGOTES_LOCK:
        for z in _ZYGOTES.values():
            z.stop()
        _ZYGOTES.clear()


def _same_python(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b) or os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


class _Forked:
    """A kernel the zygote forked: its pid, a pidfd of it, and the connection its exit status comes on; which start
    of the zygote forked it, when, and whether the server has signalled it to end."""

    def __init__(self, conn: socket.socket, pid: int, pidfd: int, generation: int = 0):
        self.conn, self.pid, self.pidfd = conn, pid, pidfd
        self.generation = generation
        self.forked_at = time.monotonic()
        self.stopped = False  # the server asked it to shut down, or sent SIGTERM or SIGKILL: its end is not news
        self.told = False  # its end has been noted (logged, counted against the zygote)
        self.code: int | None = None
        self.buffer = b""

    def exit_code(self) -> int | None:
        """Its exit status once it has ended (from the zygote; -1 when the zygote went first), else None."""
        if self.code is not None:
            return self.code
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                chunk = self.conn.recv(4096)
                if not chunk:
                    break
                self.buffer += chunk
        for line in self.buffer.splitlines():
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and "exit" in message:
                    self.code = int(message["exit"])
                    return self.code
        if select.select([self.pidfd], [], [], 0)[0]:  # ended, and the zygote never said how (it died first)
            self.code = -1
        return self.code

    def signal(self, signum: int) -> None:
        if self.exit_code() is not None:
            return
        if signum in (signal.SIGTERM, signal.SIGKILL):
            self.stopped = True
        try:
            os.killpg(self.pid, signum)  # the kernel and what it started, as for a kernel started the usual way
        except OSError:
            signal.pidfd_send_signal(self.pidfd, signum)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        with contextlib.suppress(OSError):
            os.close(self.pidfd)


class WarmProvisioner(LocalProvisioner):
    """jupyter_client's LocalProvisioner, its kernels forked from the server's zygote where it can serve (see the
    module's docstring); otherwise the same kernel started the usual way, with a line in the server's log."""

    forked: _Forked | None = None

    @property
    def has_process(self) -> bool:
        return self.forked is not None or super().has_process

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """A zygote still starting is waited for here, before the kernel's ports are picked (`_hold_ports`): they are
        bound by the fork a moment later. Picked before the wait, they stayed unbound while the zygote imported (20 s
        under a class's load), long enough for another process to take one, and jupyter_client keeps a kernel's ports
        across its restarts, so every restart died on the same taken port. Now they are also held meanwhile."""
        z = zygote()
        if z.state() == "starting":
            await z.wait_ready(max(0.0, START_S - (time.monotonic() - z.started_at)))
        self._hold_ports()
        return await super().pre_launch(**kwargs)

    def _hold_ports(self) -> None:
        """The kernel's five ports, picked here rather than by `super` (which binds port 0 and closes: free at that
        moment only, jupyter_client#487) and held until the kernel binds them: ephemeral-port-reserve leaves each in
        TIME_WAIT, so for 60 s the machine hands it to no other socket bound to port 0 nor to an outgoing connection,
        while ZeroMQ, which sets SO_REUSEADDR, binds it. Registered in jupyter_client's port cache as `super` would,
        which frees them when the kernel is gone for good; kept across restarts (`ports_cached`), as there."""
        km = self.parent
        if km is None or km.transport != "tcp" or not km.cache_ports or self.ports_cached:
            return
        from ephemeral_port_reserve import reserve

        used = LocalPortCache.instance().currently_used_ports
        for name in ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port"):
            port = reserve(km.ip)
            while port in used:
                port = reserve(km.ip)
            used.add(port)
            setattr(km, name, port)
        self.ports_cached = True

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        z = zygote()
        why = self._unsuitable(cmd)
        if why is None:
            state = z.state()
            if state in ("absent", "dead"):
                why = (
                    "it was not started (no server extension)"
                    if state == "absent"
                    else f"it does not serve ({z.failure})"
                )
                if not z.start(self.log):
                    why += f"; not started: {z.failure}"
            elif not await z.wait_ready(max(0.0, START_S - (time.monotonic() - z.started_at))):
                why = f"it did not become ready ({z.failure or 'still starting'})"
        if why is None:
            try:
                started, generation = time.monotonic(), z.starts
                conn, pid, pidfd = await asyncio.get_running_loop().run_in_executor(
                    None, z.fork, cmd[3:], dict(kwargs.get("env") or os.environ), str(kwargs.get("cwd") or os.getcwd())
                )
            except (OSError, ValueError) as err:
                why = f"it did not fork the kernel ({type(err).__name__}: {err})"
            else:
                self.forked = _Forked(conn, pid, pidfd, generation)
                self.pid = self.pgid = pid
                self.cwd = kwargs.get("cwd", Path.cwd())
                self.log.info(
                    "%s: kernel %s forked from the zygote (pid %d) in %.0f ms",
                    LOG,
                    self.kernel_id,
                    pid,
                    1000 * (time.monotonic() - started),
                )
                return self.connection_info
        self.log.warning(
            "%s: kernel %s started the usual way: the zygote cannot serve it: %s", LOG, self.kernel_id, why
        )
        return await super().launch_kernel(cmd, **kwargs)

    @staticmethod
    def _unsuitable(cmd: list[str]) -> str | None:
        if len(cmd) < 3 or cmd[1:3] != ["-m", "ipykernel_launcher"] or not _same_python(cmd[0], sys.executable):
            return (
                f"its command ({' '.join(cmd[:3])} ...) is not `{sys.executable} -m ipykernel_launcher`, the zygote's"
            )
        return None

    def _noted(self, forked: _Forked, code: int | None) -> int | None:
        """`code`, once its end is noted: a kernel that ended by itself is named in the log and told to its zygote."""
        if code is None or forked.told:
            return code
        forked.told = True
        if forked.stopped or code == -1:  # the server's doing, or its zygote's end (said when a kernel next needs it)
            return code
        after = time.monotonic() - forked.forked_at
        self.log.warning(
            "%s: kernel %s (pid %d) ended %.1f s after its fork, not stopped by its server: %s",
            LOG,
            self.kernel_id,
            forked.pid,
            after,
            how_it_ended(code),
        )
        zygote().ended(forked.generation, code, after, self.log)
        return code

    async def poll(self) -> int | None:
        if self.forked is not None:
            return self._noted(self.forked, self.forked.exit_code())
        return await super().poll()

    async def wait(self) -> int | None:
        if self.forked is None:
            return await super().wait()
        while (code := self.forked.exit_code()) is None:  # callers bound it (KernelManager's shutdown timeouts)
            await asyncio.sleep(0.05)
        self._noted(self.forked, code)
        self.forked.close()
        self.forked = None
        return code

    async def shutdown_requested(self, restart: bool = False) -> None:
        """The server asked the kernel to shut down (a message on its control channel): its exit is not news."""
        if self.forked is not None:
            self.forked.stopped = True
        await super().shutdown_requested(restart)

    async def send_signal(self, signum: int) -> None:
        if self.forked is not None:
            self.forked.signal(signum)
            return
        await super().send_signal(signum)

    async def kill(self, restart: bool = False) -> None:
        if self.forked is not None:
            self.forked.signal(signal.SIGKILL)
            return
        await super().kill(restart)

    async def terminate(self, restart: bool = False) -> None:
        if self.forked is not None:
            self.forked.signal(signal.SIGTERM)
            return
        await super().terminate(restart)

    async def cleanup(self, restart: bool = False) -> None:
        if self.forked is not None and self.forked.exit_code() is not None:
            self.forked.close()
            self.forked = None
        await super().cleanup(restart)
