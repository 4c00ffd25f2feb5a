"""Grading that student code cannot cheat or break out of.

A class of honest students and attackers is graded together. Every attack is first held by the audit (flagged, 0
points, a reason naming what it reached for). Then the instructor trusts every attacker, so each attack really runs
in the sandbox, and must still score no more than the honest blank submission, leave no trace outside its box, and
leave the honest students' grades exactly as they are."""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import socket
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from twoprim import grading
from twoprim.config import ROOT
from twoprim.core import verdicts
from twoprim.core.notebooks import assignments
from twoprim.grading import audit, sandbox

from .classroom import answered, student_version, write
from .test_autograde import broken, expected_without, points, solution_code
from .test_grading import _course

AID = "ex01_dot"
MARKER = "twoprim-attack-7f3a"
FULL = sum(points(AID).values())

FUNCTIONS_RETURNING_ZEROS = """
def dot_loop(x, w):
    return 0.0
def dot(x, w):
    return torch.zeros((), dtype=x.dtype)
def neuron(x, w, b):
    return torch.zeros((), dtype=x.dtype)
def cosine_similarity(q, keys):
    return torch.zeros(keys.shape[0], dtype=q.dtype)
def top_k(query, keys, k):
    return torch.arange(k)
"""


def attacks(course: Path, port: int, grader_marker: Path, home_secret: Path) -> dict[str, str]:
    """attack name -> the code of the cell it adds to the blank student version (after the imports)."""
    secrets = [
        course / "solutions" / AID / f"{AID}.ipynb",
        course / "grader" / "gradebook.db",
        course / "grader" / "submitted" / "perfect" / AID / f"{AID}.ipynb",
        home_secret,
    ]
    folders = [ROOT / "solutions", course / "grader", Path.home()]
    return {
        "patch_allclose": "import numpy.testing\ntorch.allclose = lambda *a, **k: True\n"
        "torch.testing.assert_close = lambda *a, **k: None\n"
        "numpy.testing.assert_allclose = lambda *a, **k: None\n" + FUNCTIONS_RETURNING_ZEROS,
        "patch_checks": "from twoprim import checks\nfor name in dir(ex01):\n    if name.startswith('check_'):\n"
        "        setattr(ex01, name, lambda *a, **k: None)\n"
        "checks.run_check = lambda *a, **k: None\n",
        "input_transformer": "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n",
        "exception_handlers": "import sys\nsys.excepthook = lambda *a: None\n"
        "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)\n",
        "rewrite_builtins": "import builtins\nbuiltins.AssertionError = type('AssertionError', (Exception,), {})\n"
        "builtins.print = lambda *a, **k: None\n" + FUNCTIONS_RETURNING_ZEROS,
        "fake_pass": "print('✔ ex01_dot-dot: passed 5 cases.')\nprint('Score: 15.0 / 15.0')\n"
        + FUNCTIONS_RETURNING_ZEROS,
        "frame_peek": "import inspect\n"
        "def _peek():\n    f = inspect.currentframe().f_back\n    while f is not None:\n"
        "        for key in ('want', 'expected', 'reference'):\n"
        "            if isinstance(f.f_locals.get(key), (torch.Tensor, float)):\n"
        "                return f.f_locals[key]\n        f = f.f_back\n    return torch.zeros(())\n"
        "def dot_loop(x, w):\n    return float(_peek())\ndef dot(x, w):\n    return _peek()\n"
        "def neuron(x, w, b):\n    return _peek()\ndef cosine_similarity(q, keys):\n    return _peek()\n"
        "def top_k(query, keys, k):\n    return _peek()\n",
        "exit_early": "import os\nos._exit(0)\n",
        "read_secrets": f"import os\nfor path in {[str(p) for p in secrets]!r}:\n"
        "    try:\n        data = open(path, 'rb').read(64)\n"
        "        print('LEAKED', path, data)\n    except Exception as err:\n"
        "        print('blocked', path, type(err).__name__)\n"
        f"for path in {[str(p) for p in folders]!r}:\n"
        "    try:\n        print('listed', path, sorted(os.listdir(path)))\n"
        "    except Exception as err:\n        print('blocked', path, type(err).__name__)\n",
        "write_outside": "import sqlite3\nfor target in {!r}:\n    try:\n        with open(target, 'ab') as f:\n"
        "            f.write(b'owned')\n        print('WROTE', target)\n"
        "    except Exception as err:\n        print('blocked', target, type(err).__name__)\n"
        'try:\n    db = sqlite3.connect({!r})\n    db.execute("update grade set auto_score = 99")\n'
        "    db.commit()\n    print('WROTE gradebook')\nexcept Exception as err:\n"
        "    print('blocked gradebook', type(err).__name__)\n".format(
            [str(secrets[2]), str(course / "grader" / "reports" / f"{AID}.csv")], str(secrets[1])
        ),
        "network": "import socket\ntry:\n"
        f"    socket.create_connection(('127.0.0.1', {port:d}), timeout=3).sendall(b'{MARKER}')\n"
        "    print('CONNECTED')\nexcept OSError as err:\n    print('blocked network', type(err).__name__)\n",
        "background_process": "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{MARKER}'],\n"
        "                 start_new_session=True)\n"
        f"subprocess.Popen(['sh', '-c', 'nohup sleep 600 {MARKER} >/dev/null 2>&1 &'])\n",
        "fork_bomb": "import os, time\nchildren = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
        "            time.sleep(30)\n            os._exit(0)\n        children += 1\n"
        "except OSError as err:\n    print('fork stopped after', children, type(err).__name__)\n",
        "memory_bomb": "try:\n    hog = bytearray(64 * 2**30)\n    print('ALLOCATED')\nexcept MemoryError:\n"
        "    print('blocked memory')\n",
        "forged_results": "import os, pickle\nclass Payload:\n    def __reduce__(self):\n"
        f"        return (os.system, ('touch {grader_marker}',))\n"
        "with open(os.path.join(os.environ['TWOPRIM_CAPTURE_DIR'], '000000-forged.pt'), 'wb') as f:\n"
        "    pickle.dump(Payload(), f)\n",
    }


# Reaches only for the machinery that observes the rules: the audit is what stops it (see the closing note of
# twoprim/core/verdicts.py), so it is graded in the audited run only.
AUDIT_ONLY = {
    "rule_tamper": "from twoprim import checks\nimport contextlib\n"
    "checks.record_calls = lambda: contextlib.nullcontext(checks.CallLog())\n",
}


def with_cell(code: str) -> nbformat.NotebookNode:
    """The blank student version with `code` as a cell of the student's own after the imports."""
    nb = student_version(AID)
    nb.cells.insert(2, nbformat.v4.new_code_cell(code))
    return nb


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def attacked_class(tmp_path_factory):
    course = _course(tmp_path_factory.mktemp("attacked"))
    grader_marker = tmp_path_factory.mktemp("grader") / "unpickled-by-the-grader"
    home_secret = Path.home() / f".twoprim-test-secret-{os.getpid()}"
    home_secret.write_text("the grader's credentials")

    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve():
        server.settimeout(0.5)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.settimeout(5)  # a connection that sends nothing holds the listener 5 s at most
                received.append(conn.recv(100))
                conn.close()
            except OSError:
                continue

    stop = threading.Event()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    submitted = course / "grader" / "submitted"
    honest = {
        "perfect": answered(AID),
        "blank": student_version(AID),
        "broken_top_k": answered(AID, broken(AID, "top_k")),
    }
    for student, nb in honest.items():
        write(submitted, student, AID, nb)
    planted = {**attacks(course, server.getsockname()[1], grader_marker, home_secret), **AUDIT_ONLY}
    for name, code in planted.items():
        write(submitted, name, AID, with_cell(code))
    grading.autograde(AID, root=course, workers=2, progress=False)
    with open(course / "grader" / "reports" / f"{AID}.csv") as f:
        audited = {r["student"]: r for r in csv.DictReader(f)}
    victim = submitted / "perfect" / AID / f"{AID}.ipynb"
    victim_digest = _digest(victim)

    trusted = sorted(set(planted) - set(AUDIT_ONLY))
    outcomes = {
        o.student: o
        for o in grading.autograde(AID, root=course, workers=2, progress=False, students=trusted, trust=trusted)
    }
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the listener for the network attack did not stop within 10 s"
    server.close()
    home_secret.unlink()
    yield {
        "course": course,
        "audited": audited,
        "outcomes": outcomes,
        "received": received,
        "grader_marker": grader_marker,
        "victim": victim,
        "victim_digest": victim_digest,
        "attacks": planted,
    }


def _scores(course: Path) -> dict[str, dict[str, float]]:
    with Gradebook(f"sqlite:///{course / 'grader' / 'gradebook.db'}", grading.COURSE_ID) as gb:
        return {
            s.student.id: {g.name: g.score for nb in s.notebooks for g in nb.grades}
            for s in gb.assignment_submissions(AID)
        }


def _printed(course: Path, student: str) -> str:
    nb = nbformat.read(str(course / "grader" / "autograded" / student / AID / f"{AID}.ipynb"), as_version=4)
    return "".join(
        o.get("text", "") + o.get("evalue", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )


def test_the_audit_holds_every_attack_with_its_reason(attacked_class):
    audited = attacked_class["audited"]
    for name in attacked_class["attacks"]:
        row = audited[name]
        assert (row["status"], float(row["score"])) == ("flagged", 0.0), (name, row)
        assert row["reason"].startswith("held for review, not run: cell 3 line "), (name, row["reason"])
        assert f"--trust {name}" in row["reason"]
    assert "rewrites a library or the course's checks" in audited["patch_allclose"]["reason"]
    assert "rewrites cells before they run" in audited["input_transformer"]["reason"]
    assert "inspects the caller's frame" in audited["frame_peek"]["reason"]
    assert "reaches the course's checks" in audited["rule_tamper"]["reason"]


def test_honest_students_are_graded_exactly_as_without_the_attackers(attacked_class):
    scores = _scores(attacked_class["course"])
    assert scores["perfect"] == expected_without(AID, None)
    assert scores["broken_top_k"] == expected_without(AID, "top_k")
    assert set(scores["blank"].values()) == {0.0}
    assert _digest(attacked_class["victim"]) == attacked_class["victim_digest"]


def test_trusted_attacks_run_and_score_no_more_than_a_blank_submission(attacked_class):
    outcomes, scores = attacked_class["outcomes"], _scores(attacked_class["course"])
    blank = sum(scores["blank"].values())
    for name, outcome in outcomes.items():
        assert outcome.status in ("graded", "failed"), (name, outcome.reason)
        assert sum(scores[name].values()) <= blank, (name, scores[name], outcome.reason)
        assert "trusted by the instructor despite: cell 3 line " in outcome.reason or outcome.status == "failed", (
            name,
            outcome.reason,
        )


def test_the_grader_judges_what_the_kernel_computed_not_what_it_claims(attacked_class):
    course, outcomes = attacked_class["course"], attacked_class["outcomes"]
    # patched checks or a cell-swallowing transformer: no result reaches the grader for any check
    for name in ("patch_checks", "input_transformer"):
        text = _printed(course, name)
        assert "no result of this check came back from the notebook's kernel" in text, name
    # a forged results file is never unpickled by the grader
    assert not attacked_class["grader_marker"].exists()
    assert "000000-forged.pt could not be read safely" in outcomes["forged_results"].reason
    # exiting the kernel early ends grading of that submission only, with the reason
    assert outcomes["exit_early"].status == "failed"
    assert "the kernel died while running" in outcomes["exit_early"].reason


def test_the_sandbox_hides_the_course_and_blocks_writes_network_processes_and_bombs(attacked_class):
    course = attacked_class["course"]
    read = _printed(course, "read_secrets")
    # the grader's home shows only the folder that leads to the Python the kernel runs on, if Python lives there
    # (pyenv, uv); where Python lives elsewhere (Debian's /usr) the home is not in the box at all
    python_home = Path(sys.base_prefix).resolve()
    if Path.home() in python_home.parents:
        shown = [python_home.relative_to(Path.home()).parts[0]]
        assert f"listed {Path.home()} {shown!r}" in read, read
        assert "LEAKED" not in read and read.count("blocked") == 6, read
    else:
        assert f"blocked {Path.home()} FileNotFoundError" in read, read
        assert "LEAKED" not in read and "listed" not in read and read.count("blocked") == 7, read
    wrote = _printed(course, "write_outside")
    assert "WROTE" not in wrote and wrote.count("blocked") == 3, wrote
    assert "blocked network" in _printed(course, "network") and attacked_class["received"] == []
    assert "fork stopped after" in _printed(course, "fork_bomb")
    assert "blocked memory" in _printed(course, "memory_bomb")
    survivors = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if MARKER.encode() in cmdline.read_bytes():
                survivors.append(cmdline.parent.name)
        except OSError:
            continue
    assert survivors == [], f"processes started by a submission outlived its kernel: {survivors}"


def test_autograde_refuses_without_isolation_unless_told(tmp_path, monkeypatch):
    course = _course(tmp_path)
    write(course / "grader" / "submitted", "perfect", AID, answered(AID))
    sandbox.missing.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        with pytest.raises(
            SystemExit,
            match=r"cannot isolate students' code: isolating submissions needs Linux "
            r"namespaces \(bubblewrap\); this is darwin.*--unisolated",
        ):
            grading.autograde(AID, root=course, progress=False)
        monkeypatch.setattr(sys, "platform", "linux")
        sandbox.missing.cache_clear()
        real_which = shutil.which
        monkeypatch.setattr(
            shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k)
        )
        with pytest.raises(SystemExit, match=r"bwrap not found: install bubblewrap"):
            grading.autograde(AID, root=course, progress=False)
        [outcome] = grading.autograde(AID, root=course, progress=False, unisolated=True, workers=1)
        assert (outcome.status, outcome.score) == ("graded", FULL), outcome.reason
    finally:
        sandbox.missing.cache_clear()


def test_replayed_results_are_read_without_running_code(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import pickle

    (tmp_path / "000001-evil.pt").write_bytes(pickle.dumps(Payload(), protocol=2))
    replay = verdicts.Replay(tmp_path)
    assert replay.captures == [] and not marker.exists()
    assert replay.problems == ["000001-evil.pt could not be read safely (UnpicklingError)"]


@pytest.mark.parametrize("aid", assignments())
def test_the_audit_never_holds_the_solutions(aid):
    assert {gid: audit.audit(code) for gid, code in solution_code(aid).items() if audit.audit(code)} == {}


@pytest.mark.parametrize(
    "code, why",
    [
        ("c = ex01.checks\nc.record_calls = None", "reaches the course's checks"),
        ("m = torch.nn.Linear(2, 2)\nm.forward = print", "rewrites an attribute of an object it did not create"),
        ("f = getattr(torch, 'ma' + 'tmul')", "reads an attribute by computed name"),
        ("torch._C._set_grad_enabled(False)", "reaches torch's C internals"),
        ("x = 10**40**10", "a size of a billion or more"),
        ("print('✔ ex01_dot-dot: passed')", "imitates a check's verdict"),
    ],
)
def test_the_audit_names_what_the_code_reached_for(code, why):
    found = audit.audit(code)
    assert any(why in line for line in found), found


def test_recorded_values_never_name_code_for_the_grader_to_call_or_import():
    assert isinstance(verdicts.decode({"t": "dtype", "v": "load"}), verdicts.Opaque)
    assert verdicts.decode({"t": "tuple", "cls": "torch.return_types.pytree", "items": [1]}) == (1,)
    assert verdicts._resolve("os.system") is None and verdicts._resolve("antigravity.geohash") is None
    graph = verdicts.decode(
        {
            "t": "fx",
            "nodes": [
                ["placeholder", "x", "x"],
                ["call_function", "f", "os.system"],
                ["call_function", "g", "torch.ops.aten.mm.default"],
                ["output", "output", "output"],
            ],
        }
    )
    assert [n.target.__name__ for n in graph.graph.nodes if n.op == "call_function"] == ["system", "mm.default"]
