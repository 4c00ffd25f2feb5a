"""A check of the whole checkout that needs none of the tests' fixtures (pyright's types: ~60 s of one core and ~80
CPU-seconds, run alone) starts with the session at the lowest CPU priority and runs beside the tests. It takes only
what they leave idle: `make test`'s two processes keep two cores 85-90% busy, the rest spent waiting on kernels,
servers and the limits some tests wait out. The test that asserts its report waits for it, at normal priority from
then on where the process may raise a priority (CAP_SYS_NICE, which root has outside a restricted container);
elsewhere the wait still leaves it the core the waiting process frees.

Started by the session's first process (the controller under pytest-xdist), only when the test that reads the report
is in the session's scope; its folder is named in TWOPRIM_BACKGROUND, which the test processes inherit. Stopped, if it
still runs, when the session ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

VARIABLE = "TWOPRIM_BACKGROUND"


def folder() -> Path | None:
    """This session's folder of background runs, if its first process started any."""
    value = os.environ.get(VARIABLE)
    return Path(value) if value else None


class Runs:
    """The runs started into one folder, each at nice 19 in a process group of its own (in the session's scheduling
    group); `stop` ends what still runs."""

    def __init__(self, top: Path):
        self.top = top
        self.procs: dict[str, subprocess.Popen] = {}
        self.reapers: list[threading.Thread] = []

    def start(self, name: str, argv: list[str], cwd: Path) -> None:
        """Run `argv` in `cwd`, its output and exit status into the folder under `name`."""
        out = self.top / name
        out.mkdir()
        with open(out / "stdout", "wb") as stdout, open(out / "stderr", "wb") as stderr:
            proc = subprocess.Popen(
                ["nice", "-n", "19", *argv],  # POSIX's nice: every thread the run starts has its priority
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                # a process group of its own, reniced and stopped as a whole, in the session's own session: a new
                # one (setsid) would be a scheduling group of its own (Linux's autogroup), where nice 19 is weighed
                # only against itself and takes as much as the whole session
                process_group=0,
            )
        (out / "argv").write_text("\0".join(argv))
        (out / "started").write_text(repr(time.time()))
        (out / "pid").write_text(str(proc.pid))
        self.procs[name] = proc

        def reap() -> None:
            code = proc.wait()  # bounded by the session: stop() kills what still runs when it ends
            tmp = out / "returncode.tmp"
            tmp.write_text(str(code))
            tmp.replace(out / "returncode")  # whole or absent for a reader

        reaper = threading.Thread(target=reap, name=f"background {name}", daemon=True)
        reaper.start()
        self.reapers.append(reaper)

    def stop(self) -> None:
        """Kill what still runs (a session ended early) and remove the folder."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for reaper in self.reapers:  # its exit status written before the folder goes
            reaper.join(timeout=10)
        self.procs.clear()
        self.reapers.clear()
        shutil.rmtree(self.top, ignore_errors=True)


def result(
    name: str, argv: list[str], timeout: float, top: Path | None = None
) -> subprocess.CompletedProcess | str | None:
    """The finished run of `argv` started as `name` in `top` (this session's folder by default): a CompletedProcess;
    None when none was started (run it here); a message saying what was waited for when it did not finish within
    `timeout` seconds of this call. The run is raised to normal priority first, since a test now waits on it."""
    top = top or folder()
    out = top / name if top else None
    if out is None or not (out / "pid").exists():
        return None
    started_argv = (out / "argv").read_text().split("\0")
    if started_argv != argv:
        return f"the session started {started_argv}, not {argv}"
    pid = int((out / "pid").read_text())
    with contextlib.suppress(PermissionError, ProcessLookupError):  # lowering a nice value needs CAP_SYS_NICE
        os.setpriority(os.PRIO_PGRP, pid, 0)
    deadline = time.monotonic() + timeout
    while not (out / "returncode").exists():
        if time.monotonic() > deadline:
            ran = time.time() - float((out / "started").read_text())
            last = (out / "stderr").read_bytes()[-500:].decode(errors="replace") or "(nothing on stderr)"
            return (
                f"`{' '.join(argv)}`, started with the session {ran:.0f} s ago (process {pid}), did not finish within "
                f"{timeout:.0f} s of this test's wait; its stderr ends: {last}"
            )
        time.sleep(0.2)
    return subprocess.CompletedProcess(
        argv,
        int((out / "returncode").read_text()),
        (out / "stdout").read_text(errors="replace"),
        (out / "stderr").read_text(errors="replace"),
    )


def in_scope(config, test_file: Path) -> bool:
    """Whether a run of this configuration collects `test_file` in full: its arguments (or testpaths) name the file
    or a folder above it, with no -k, --lf or --deselect narrowing the run to some tests."""
    option = config.option
    if option.keyword or getattr(option, "lf", False) or getattr(option, "deselect", None) or option.collectonly:
        return False
    base = config.invocation_params.dir
    for arg in config.args:
        path = (base / str(arg).split("::")[0]).resolve()
        if "::" not in str(arg) and (path == test_file or path in test_file.parents):
            return True
    return False
