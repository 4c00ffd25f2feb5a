"""Two grading runs at once on one machine (an instructor's autograde beside a learner's selfgrade) never run
kernels under the same uid at the same time: each submission's kernel claims a uid no other grading kernel holds."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import nbformat
import pytest


from .classroom import answered, course_copy, write

AID = "ex01_dot"
# a cell of the student's own: which uid the kernel runs as, and when (each kernel holds it for 4 s)
PROBE = "import os, time\nstart = time.time()\ntime.sleep(4)\nprint('probe-uid', os.getuid(), start, time.time())\n"
LINE = re.compile(r"probe-uid (\d+) ([\d.]+) ([\d.]+)")


def _with_probe() -> nbformat.NotebookNode:
    nb = answered(AID)
    nb.cells.insert(2, nbformat.v4.new_code_cell(PROBE))
    return nb


@pytest.mark.skipif(os.geteuid() != 0, reason="only a grader running as root gives each kernel a uid of its own "
                                               "(otherwise every kernel is `nobody` in a user namespace)")
def test_an_autograde_beside_a_selfgrade_never_shares_a_uid(tmp_path):
    instructor, learner = course_copy(tmp_path / "instructor", AID), course_copy(tmp_path / "learner", AID)
    for student in ("s0", "s1"):
        write(instructor / "grader" / "submitted", student, AID, _with_probe())
    mine = tmp_path / "mine.ipynb"
    nbformat.write(_with_probe(), str(mine))
    runs = {
        "autograde": f"from twoprim import grading\ngrading.autograde({AID!r}, root=__import__('pathlib').Path("
                     f"{str(instructor)!r}), workers=2, progress=False, trust=['s0', 's1'])\n",
        "selfgrade": f"from twoprim import grading\nprint(grading.selfgrade({AID!r}, notebook=__import__('pathlib')"
                     f".Path({str(mine)!r}), root=__import__('pathlib').Path({str(learner)!r})).describe())\n",
    }
    procs = {name: subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for name, code in runs.items()}
    outputs = {name: proc.communicate(timeout=300)[0] for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name} failed:\n{outputs[name][-3000:]}"

    seen = []  # (run, uid, start, end)
    for path in (instructor / "grader" / "autograded").rglob("*.ipynb"):
        seen += [("autograde", int(u), float(a), float(b)) for u, a, b in LINE.findall(path.read_text())]
    html = (learner / "grader" / "selfgrade" / f"{AID}.html").read_text()
    seen += [("selfgrade", int(u), float(a), float(b)) for u, a, b in LINE.findall(html)]
    assert sorted(r for r, *_ in seen) == ["autograde", "autograde", "selfgrade"], (seen, outputs)
    overlapping = [(x, y) for i, x in enumerate(seen) for y in seen[i + 1:] if x[2] < y[3] and y[2] < x[3]]
    assert any(x[0] != y[0] for x, y in overlapping), f"the two runs' kernels never ran at the same time: {seen}"
    assert all(x[1] != y[1] for x, y in overlapping), f"kernels running at once shared a uid: {overlapping}"
    assert all(uid >= 61000 for _, uid, _, _ in seen), seen
