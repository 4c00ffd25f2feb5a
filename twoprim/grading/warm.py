"""A learner's warm grader: one process per user and copy of the course that self-grades notebooks
(`twoprim.grading.learner.selfgrade`, the same task autograde runs) and keeps, between them, what a cold
`./course selfgrade` pays every time: the grading code imported (nbgrader, torch), the forkserver of warm kernels
(`kernels.warm_forkserver`, with every assignment's checks, each assignment warmed once) and each assignment's
generated release and snapshot gradebook.

While no self-grade waits, it prepares ahead the assignments the learner works on (`worked_on`: those open in
JupyterLab, then those last saved, checked or self-graded, in the course ./course lab started it for
($TWOPRIM_GRADER_ROOT), and in every course a request came from), one at a time, looking again every `WATCH_S`
seconds: each is graded once as released (`learner.selfgrade(dry=True)`: its release and snapshot generated, the
forkserver warmed with its checks and test cells, nbgrader's path run) and its expected values computed
(`oracle.prime`), so that the learner's first self-grade of it is as fast as the second. Nothing of that is saved.

It listens on a Unix socket in a folder only its user can open (`twoprim.learner.selfgrade.grader_socket`), answers
only its own user (the peer's uid, from the kernel), grades one notebook at a time, and exits after
$TWOPRIM_GRADER_IDLE_S seconds unused (default 900; started by `./course lab`, when that process ends), when asked,
or when a request comes from other code than its own (the course was updated: the client starts a new one). The
events it sends are described in `twoprim.learner.selfgrade`.

    python -m twoprim.grading.warm serve SOCKET          the warm grader (started by the first self-grade)
    python -m twoprim.grading.warm once AID NOTEBOOK ROOT  one self-grade, its events on stdout (no warm grader)
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from twoprim.grading import kernels, sandbox
from twoprim.grading.learner import graded_tests, require_hidden_checks, selfgrade, source_digest
from twoprim.learner.selfgrade import IDLE_ENV, ROOT_ENV, WHILE_ENV, code_version, worked_on

__all__ = ["serve", "grade_events", "main"]

DEFAULT_IDLE_S = 900
PREPARE_MAX = 3  # assignments prepared ahead in each course (`worked_on`)
WATCH_S = 30.0  # how often an idle grader looks again at what the learner works on


def grade_events(aid: str, notebook: Path, root: Path, send) -> None:
    """Self-grade `notebook` of `aid` under `root`, telling `send(event)` as it goes (see the module's events)."""
    started = time.monotonic()
    try:
        require_hidden_checks(aid, root)
        rows = graded_tests(aid, root)
        gids = {gid for gid, _ in rows}
        send({"event": "start", "assignment": aid, "notebook": str(notebook), "tests": rows})
        done: list[str] = []

        def on_cell(cell, phase: str) -> None:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if phase == "end" and gid in gids and gid not in done:
                done.append(gid)
                send({"event": "cell", "grade_id": gid, "done": len(done), "total": len(rows)})

        def on_result(result) -> None:
            o = result.outcome
            scores = {gid: s for (_, gid), s in o.grades.items()}
            send(
                {
                    "event": "result",
                    "assignment": aid,
                    "notebook": str(notebook),
                    "status": o.status,
                    "reason": o.reason,
                    "score": o.score,
                    "max_score": o.max_score,
                    "tests": [[gid, scores.get(gid), points] for gid, points in rows],
                    "text": result.describe(),
                    "seconds": round(time.monotonic() - started, 2),
                    "phases": {k: v if isinstance(v, dict) else round(v, 3) for k, v in o.phases.items()},
                }
            )

        result = selfgrade(aid, notebook=notebook, root=root, on_cell=on_cell, on_result=on_result)
        send(
            {
                "event": "feedback",
                "path": str(result.feedback) if result.feedback else None,
                "seconds": round(time.monotonic() - started, 2),
            }
        )
    except SystemExit as err:  # what the learner should do instead (no hidden checks here, no such notebook)
        send({"event": "error", "message": str(err).removeprefix("error: ")})
    except Exception as err:  # noqa: BLE001 - the grader's own fault, said in words
        send({"event": "error", "message": f"the grader itself failed: {type(err).__name__}: {err}"})


def prepare(aid: str, root: Path) -> float:
    """Warm what the first self-grade of `aid` in `root` would otherwise pay: the released notebook graded once
    (`selfgrade(dry=True)`: release, snapshot, the forkserver's warm-up of its checks and test cells, nbgrader's
    path), then every expected value of its test cells computed here (`oracle.prime`). Nothing is saved; a
    failure is logged and the learner's self-grade computes the same itself. Returns the seconds it took."""
    from twoprim.grading import oracle

    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the log, never the events
            selfgrade(aid, root=root, dry=True)
            source = {p.name: p.read_bytes() for p in sorted((root / "solutions" / aid).glob("*.ipynb"))}
            values = oracle.prime(source)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the self-grade does the same work itself
        print(f"{aid} of {root} not prepared: {type(err).__name__}: {err}", flush=True)
    else:
        print(f"prepared {aid} of {root} in {time.monotonic() - started:.1f} s ({values} expected values)", flush=True)
    return time.monotonic() - started


class _Server:
    """The warm grader: a thread accepts and reads requests; the main thread grades them one at a time. The main
    thread starts the forkserver too, and lives as long as the grader: the sandbox ends the forkserver when the
    thread that started it ends (bwrap's --die-with-parent)."""

    def __init__(self, path: Path, idle_s: float):
        self.path, self.idle_s = path, idle_s
        self.version = code_version()
        self.queue: queue.Queue = queue.Queue()
        self.last = time.monotonic()
        self.stopping = threading.Event()
        # started by ./course lab: it lives while that process does, however long unused ($TWOPRIM_GRADER_WHILE_PID)
        self.while_pid = int(os.environ.get(WHILE_ENV) or 0)
        self.roots: list[Path] = [Path(os.environ[ROOT_ENV])] if os.environ.get(ROOT_ENV) else []
        self.prepared: set[tuple[str, str, str]] = set()  # (course, assignment, its source's digest)
        self.next_look = 0.0

    def listen(self) -> socket.socket:
        with contextlib.suppress(OSError):  # a live grader already listens there: leave it be
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.connect(str(self.path))
            probe.close()
            raise SystemExit(f"a warm grader already listens on {self.path}")
        self.path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            server.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        server.listen(8)
        return server

    def run(self) -> None:
        server = self.listen()
        threading.Thread(target=self.accept, args=(server,), daemon=True).start()
        if self.while_pid:
            threading.Thread(target=self.watch, daemon=True).start()
        try:
            self.warm()
            while not self.stopping.is_set():
                if self.queue.empty() and self.prepare_ahead():
                    continue  # one assignment prepared: look at the queue again before the next
                try:
                    conn, request = self.queue.get(timeout=1.0)
                except queue.Empty:
                    if not self.while_pid and time.monotonic() - self.last > self.idle_s:
                        print(f"idle for {self.idle_s:.0f} s: exiting", flush=True)
                        break
                    if not self.path.exists():  # its socket removed (the folder cleaned): nobody can reach it
                        break
                    continue
                with conn:
                    grade_events(request["assignment"], Path(request["notebook"]), Path(request["root"]), _sender(conn))
                self.last = time.monotonic()
                self.graded(request["assignment"], Path(request["root"]))
        finally:
            server.close()
            self.path.unlink(missing_ok=True)
            _exit()

    def warm(self) -> None:
        """Start the forkserver now, while the learner works, so the first self-grade finds it warm."""
        with contextlib.suppress(Exception):
            if sandbox.missing() is None:
                kernels.warm_forkserver(None)
        print(f"warm in {time.monotonic() - START:.1f} s", flush=True)

    def _key(self, aid: str, root: Path) -> tuple[str, str, str] | None:
        try:
            return str(root), aid, source_digest(aid, root)
        except OSError:
            return None

    def graded(self, aid: str, root: Path) -> None:
        """A self-grade of `aid` in `root` has run: that course is watched, `aid` as warm as preparing makes it."""
        if root.resolve() not in [r.resolve() for r in self.roots]:
            self.roots.append(root)
            self.next_look = 0.0
        key = self._key(aid, root)
        if key is not None:
            self.prepared.add(key)

    def prepare_ahead(self) -> bool:
        """Prepare the next assignment the learner works on that is not prepared yet (`worked_on`); True when one
        was. What the learner works on is looked at again every WATCH_S seconds."""
        if time.monotonic() < self.next_look or self.stopping.is_set():
            return False
        for root in list(self.roots):
            try:
                aids = worked_on(root, PREPARE_MAX)
            except Exception as err:  # noqa: BLE001 - nothing prepared ahead; self-grades work as before
                print(f"could not tell what the learner works on in {root}: {type(err).__name__}: {err}", flush=True)
                aids = []
            for aid in aids:
                key = self._key(aid, root)
                if key is None or key in self.prepared:
                    continue
                self.prepared.add(key)
                prepare(aid, root)
                return True
        self.next_look = time.monotonic() + WATCH_S
        return False

    def watch(self) -> None:
        """Exit once `./course lab` has ended, even while still warming or grading (its learner is gone)."""
        while _alive(self.while_pid):  # as long as ./course lab runs: unbounded by design
            time.sleep(1.0)
        print(f"process {self.while_pid} (./course lab) has ended: exiting", flush=True)
        self.path.unlink(missing_ok=True)
        _exit()

    def accept(self, server: socket.socket) -> None:
        while True:  # serves until the grader exits (its socket closed in `run`): unbounded by design
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn: socket.socket) -> None:
        """Read one request from its own user; queue it for grading, or stop (asked to, or another code version)."""
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        if uid != os.getuid():
            conn.close()
            return
        conn.settimeout(30)
        data = b""
        with contextlib.suppress(OSError):
            while not data.endswith(b"\n") and len(data) < 1 << 16:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        try:
            request = json.loads(data)
            if not request.get("stop"):
                _ = request["assignment"], request["notebook"], request["root"]  # all three present
        except (ValueError, KeyError, TypeError, AttributeError):
            conn.close()
            return
        conn.settimeout(60)  # each event sent: a learner's end that stops reading holds the grader 60 s at most
        if request.get("stop") or request.get("version") != self.version:
            _sender(conn)({"event": "stopping" if request.get("stop") else "restart"})
            conn.close()
            self.stopping.set()
            return
        self.last = time.monotonic()
        self.queue.put((conn, request))


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _exit() -> None:
    """Stop the forkserver, remove the scratch folder, and exit at once: a thread still warming (importing torch)
    must not meet the interpreter's teardown (MKL aborts the process with a fatal error there)."""
    import shutil

    sys.stdout.flush()
    for server in list(kernels._WARM.values()):
        with contextlib.suppress(Exception):
            server.stop()
    if kernels.scratch.cache_info().currsize:
        shutil.rmtree(kernels.scratch(), ignore_errors=True)
    os._exit(0)


def _sender(conn: socket.socket):
    def send(event: dict) -> None:
        with contextlib.suppress(OSError):  # the learner went away: the self-grade still finishes and is saved
            conn.sendall((json.dumps(event) + "\n").encode())

    return send


START = time.monotonic()


def serve(path: Path, idle_s: float | None = None) -> None:
    """The warm grader on `path` until idle for `idle_s` seconds (default $TWOPRIM_GRADER_IDLE_S, else 900)."""
    idle = idle_s if idle_s is not None else float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S)
    _Server(path, idle).run()


def main(argv: list[str]) -> int:
    """`serve SOCKET` or `once AID NOTEBOOK ROOT`."""
    if argv[:1] == ["serve"] and len(argv) == 2:
        serve(Path(argv[1]))
        return 0
    if argv[:1] == ["once"] and len(argv) == 4:
        out = sys.stdout
        sys.stdout = sys.stderr  # only events on stdout

        def send(event: dict) -> None:
            out.write(json.dumps(event) + "\n")
            out.flush()

        grade_events(argv[1], Path(argv[2]), Path(argv[3]), send)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
