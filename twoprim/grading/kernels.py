"""A grading worker's kernels: its scratch folder, the kernelspec it grades with, its warm forkserver
(`twoprim.grading.forkserver`), the watchdog that stops a submission past its wall-clock limit, and the profile
of where a submission's time went. State of the worker process, kept between the tasks it runs."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
from functools import cache
from pathlib import Path

from twoprim.core.catalog import checks_modules
from twoprim.grading import forkserver, sandbox

__all__ = [
    "WARM_MODULES",
    "worker_name",
    "scratch",
    "kernelspec_name",
    "warm_forkserver",
    "stop_forkservers",
    "Watchdog",
    "timings",
]

# What every graded kernel imports, imported once per worker by its forkserver (plus the assignment's checks).
WARM_MODULES = (
    "numpy",
    "torch",
    "torch._dynamo",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "ipywidgets",
    "twoprim.core.record",
    "twoprim.core.checks",
    "twoprim.core.verdicts",
    "twoprim.core.guards",
    "twoprim.learner.hints",
)


def worker_name() -> str:
    """The Dask worker's address, or host:pid when grading runs outside a worker."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


@cache
def scratch() -> Path:
    """This worker process's scratch folder (the kernelspecs; one course folder and box per submission), on a
    short path: the kernel's Unix sockets live in the box, and a socket's path must fit in 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="tpg-", dir="/tmp" if os.path.isdir("/tmp") else None))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def kernelspec_name(unisolated: bool) -> str | None:
    """The kernelspec that grades (written once per worker process into its scratch, which goes on
    JUPYTER_PATH): the sandbox's forkserver launcher, or for `--unisolated` a plain kernel under the sandbox's
    `prlimit` limits (None without prlimit)."""
    folder = scratch()
    if not unisolated:
        name = sandbox.kernelspec(folder)
    elif shutil.which("prlimit") is None:
        return None
    else:
        name = "twoprim-grading"
        spec = folder / "kernels" / name
        spec.mkdir(parents=True, exist_ok=True)
        argv = sandbox.limits() + [sandbox.python(), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        (spec / "kernel.json").write_text(
            json.dumps({"argv": argv, "display_name": "Python 3 (grading, limited)", "language": "python"})
        )
    paths = os.environ.get("JUPYTER_PATH", "").split(os.pathsep)
    if str(folder) not in paths:
        os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(folder), *paths]))
    return name


_WARM: dict[int | None, forkserver.Forkserver] = {}


def warm_forkserver(threads: int | None) -> forkserver.Forkserver:
    """This worker's forkserver, started on first use with the modules every graded kernel imports and every
    assignment's checks (half a second more than one assignment's: one warm process serves them all). Another
    thread count replaces it."""
    server = _WARM.get(threads)
    if server is not None and server.alive():
        return server
    for old in _WARM.values():
        old.stop()
    _WARM.clear()
    saved = {v: os.environ.get(v) for v in sandbox.THREAD_VARIABLES}
    if threads:
        os.environ.update({v: str(threads) for v in sandbox.THREAD_VARIABLES})
    try:
        modules = [*WARM_MODULES, *(f"{__name__.split('.')[0]}.{m}" for m in checks_modules())]
        server = forkserver.Forkserver(scratch() / "boxes", scratch() / "control", modules).start()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    atexit.register(server.stop)
    _WARM[threads] = server
    return server


def stop_forkservers() -> None:
    """Stop this process's warm forkservers now rather than at its exit (the next grading here starts one again)."""
    for server in _WARM.values():
        server.stop()
    _WARM.clear()


def timings(log: Path, start: float, stop: float) -> dict:
    """Where nbgrader's run went: until the kernel answered, each cell, and nbgrader's own work around them."""
    events = []
    for line in log.read_text().splitlines() if log.is_file() else []:
        stamp, event, label = line.split("\t")
        events.append((float(stamp), event, label))
    ready = next((s for s, e, _ in events if e == "ready"), None)
    end = next((s for s, e, _ in reversed(events) if e == "end"), None)
    if ready is None or end is None:
        return {"nbgrader": stop - start}
    cells = [(s, label) for s, e, label in events if e == "cell"]
    durations = {label: (cells[i + 1][0] if i + 1 < len(cells) else end) - s for i, (s, label) in enumerate(cells)}
    return {
        "kernel start": ready - start,
        "cells": durations,
        "nbgrader bookkeeping": (stop - start) - (end - start) + (cells[0][0] - ready if cells else 0.0),
    }


class Watchdog:
    """Kills this submission's kernel when it runs past `seconds`: every process this one started from now on (the
    kernel's launcher and what it started), but none of `spare` (the forkserver's) and none that was already running
    (a test's servers, a learner's other work, when grading runs in their process)."""

    def __init__(self, seconds: float, spare: set[int] | frozenset[int] = frozenset()):
        import psutil

        self.fired = False
        self.spare = set(spare) | {p.pid for p in psutil.Process().children(recursive=True)}
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self):
        import psutil

        self.fired = True
        for child in psutil.Process().children(recursive=True):
            if child.pid not in self.spare:
                with contextlib.suppress(psutil.Error):
                    child.kill()

    def cancel(self):
        self._timer.cancel()
