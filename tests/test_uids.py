"""Two grading runs at once on one machine (an instructor's autograde beside a learner's selfgrade) never run
kernels under the same uid at the same time: each submission's kernel claims a uid no other grading kernel holds."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from .classroom import answered, course_copy, write

AID = "ex01_dot"
LINE = re.compile(r"probe-uid (\d+) ([\d.]+) ([\d.]+)")
# A cell of the student's own: its kernel names itself `probe-hold` and holds its uid until the test sends SIGUSR1
# (at most 120 s), then says which uid it ran as, and when. The test so sees both runs' kernels alive at once,
# however long either run takes to start one.
PROBE = textwrap.dedent("""\
    import ctypes, os, signal, time
    released = []
    signal.signal(signal.SIGUSR1, lambda *_: released.append(1))
    ctypes.CDLL(None).prctl(15, b"probe-hold")  # PR_SET_NAME: what /proc/<pid>/comm says
    start = time.time()
    while not released and time.time() < start + 120:
        time.sleep(0.05)
    print('probe-uid', os.getuid(), start, time.time())
""")


def _with_probe() -> nbformat.NotebookNode:
    nb = answered(AID)
    nb.cells.insert(2, nbformat.v4.new_code_cell(PROBE))
    return nb


def _holding(pid: int) -> dict[int, int]:
    """{pid: uid} of the processes below `pid` that are a probe holding its uid."""
    children: dict[int, list[int]] = {}
    holding: dict[int, int] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = dict(line.split(":\t", 1) for line in (proc / "status").read_text().splitlines() if ":\t" in line)
        except OSError:  # the process ended while it was read
            continue
        children.setdefault(int(fields["PPid"]), []).append(int(proc.name))
        if fields["Name"] == "probe-hold":
            holding[int(proc.name)] = int(fields["Uid"].split()[0])
    below, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in below:
                below.add(child)
                todo.append(child)
    return {p: uid for p, uid in holding.items() if p in below}


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="only a grader running as root gives each kernel a uid of its own "
    "(otherwise every kernel is `nobody` in a user namespace)",
)
def test_an_autograde_beside_a_selfgrade_never_shares_a_uid(tmp_path):
    instructor, learner = course_copy(tmp_path / "instructor", AID), course_copy(tmp_path / "learner", AID)
    # one submission of the instructor's: the autograde's kernels of one run never overlap (a run of up to
    # cluster.IN_PROCESS_MAX submissions grades them one after another), so a second proved nothing more
    write(instructor / "grader" / "submitted", "s0", AID, _with_probe())
    mine = tmp_path / "mine.ipynb"
    nbformat.write(_with_probe(), str(mine))
    runs = {
        "autograde": f"from twoprim import grading\ngrading.autograde({AID!r}, root=__import__('pathlib').Path("
        f"{str(instructor)!r}), workers=2, progress=False, trust=['s0'])\n",
        "selfgrade": f"from twoprim import grading\nprint(grading.selfgrade({AID!r}, notebook=__import__('pathlib')"
        f".Path({str(mine)!r}), root=__import__('pathlib').Path({str(learner)!r})).describe())\n",
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for name, code in runs.items()
    }
    together = None  # {run: {pid: uid}} at the first moment both runs' kernels held their uids
    deadline = time.monotonic() + 240
    while any(proc.poll() is None for proc in procs.values()) and time.monotonic() < deadline:
        holding = {name: _holding(proc.pid) for name, proc in procs.items()}
        if together is None and all(holding.values()):
            together = holding
        if together is not None:  # release every probe: those seen together, and any that starts after
            for pid in (p for held in holding.values() for p in held):
                with contextlib.suppress(ProcessLookupError):  # it ended since it was listed
                    os.kill(pid, signal.SIGUSR1)
        time.sleep(0.1)
    outputs = {name: proc.communicate(timeout=60)[0] for name, proc in procs.items()}
    assert together is not None, f"the two runs' kernels were never alive at the same time: {outputs}"
    autograde_uids, selfgrade_uids = set(together["autograde"].values()), set(together["selfgrade"].values())
    assert not autograde_uids & selfgrade_uids, f"kernels running at once shared a uid: {together}"
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name} failed:\n{outputs[name][-3000:]}"

    seen = []  # (run, uid, start, end)
    for path in (instructor / "grader" / "autograded").rglob("*.ipynb"):
        seen += [("autograde", int(u), float(a), float(b)) for u, a, b in LINE.findall(path.read_text())]
    html = (learner / "grader" / "selfgrade" / f"{AID}.html").read_text()
    seen += [("selfgrade", int(u), float(a), float(b)) for u, a, b in LINE.findall(html)]
    assert sorted(r for r, *_ in seen) == ["autograde", "selfgrade"], (seen, outputs)
    overlapping = [(x, y) for i, x in enumerate(seen) for y in seen[i + 1 :] if x[2] < y[3] and y[2] < x[3]]
    assert any(x[0] != y[0] for x, y in overlapping), f"the two runs' kernels never ran at the same time: {seen}"
    assert all(x[1] != y[1] for x, y in overlapping), f"kernels running at once shared a uid: {overlapping}"
    assert all(uid >= 61000 for _, uid, _, _ in seen), seen
