"""The progress view (`./course progress`, `progress.show()` in lesson 00) on copies of the course in a temporary
folder, never on the repository: a fresh checkout (nothing done, nothing executed), the solutions in the learner's
place (every visible check passes; with full self-grades the next step is "done"), and learner notebooks that crash
halfway, loop forever or do not parse (reported with their cell, the rest of the report still there). Results are
cached by content hash; the learner's notebooks are never modified; a corrupt state file is set aside, not lost."""

from __future__ import annotations

import ast
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from twoprim import course, grading
from twoprim.assignments import ex06_compile as ex06
from twoprim.config import ROOT
from twoprim.core.notebooks import assignments, lessons
from twoprim.learner import deadlines, progress
from twoprim.learner.hints import hint
from twoprim.learner.state import load_state, update_state

from .classroom import answered, cell_index, prepend

GRADED = {
    aid: {
        c.metadata["nbgrader"]["grade_id"].removeprefix(f"{aid}-")
        for c in nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"]["grade_id"].endswith("-hidden")
    }
    for aid in assignments()
}


@pytest.fixture
def learner(tmp_path: Path) -> Path:
    """A learner's copy of the course: the committed exercises/ and lessons/, nothing done yet."""
    for folder in ("exercises", "lessons"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def put(root: Path, aid: str, nb: nbformat.NotebookNode) -> Path:
    path = root / "exercises" / aid / f"{aid}.ipynb"
    nbformat.write(nb, str(path))
    return path


def mark_run(root: Path, upto: str = "99") -> None:
    """Save lessons numbered up to `upto` as a learner who ran every cell would (execution counts set)."""
    for path in lessons(root):
        if path.name[:2] <= upto:
            nb = nbformat.read(str(path), as_version=4)
            for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
                cell.execution_count = n + 1
            nbformat.write(nb, str(path))


def selfgraded(root: Path, aid: str, failing: tuple[str, ...] = ()) -> None:
    """Write grader/selfgrade/<aid>.json with the writer `./course selfgrade` uses."""
    nb = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)
    points = {
        c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
    }
    outcome = grading.Outcome("learner", status="graded", max_score=sum(points.values()))
    outcome.grades = {(aid, gid): 0.0 if gid.removeprefix(f"{aid}-") in failing else p for gid, p in points.items()}
    outcome.score = sum(outcome.grades.values())
    notebook = root / "exercises" / aid / f"{aid}.ipynb"
    grading.SelfGrade(aid, outcome, None).save(root / "grader" / "selfgrade" / f"{aid}.json", notebook)


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for d in ("exercises", "lessons")
        for p in sorted((root / d).rglob("*"))
        if p.is_file()
    }


def by_aid(report: progress.Report) -> dict[str, progress.AssignmentStatus]:
    return {a.aid: a for a in report.assignments}


def test_fresh_checkout_nothing_done_nothing_run(learner):
    r = progress.report(learner)
    assert [lesson.name for lesson in r.lessons] == [p.stem for p in lessons(ROOT)]
    assert all(not lesson.done and lesson.detail == "not run yet" for lesson in r.lessons)
    assert sorted(by_aid(r)) == assignments()
    for aid, a in by_aid(r).items():
        assert a.status == "not started" and a.problem is None, aid
        assert set(a.checks) == GRADED[aid] and set(a.checks.values()) == {progress.TODO}
        assert a.selfgrade is None and a.hints_used == 0 and a.hints_total >= 2 * len(GRADED[aid])
    assert r.next_step.startswith("run lessons/00_start_here.ipynb to the end")
    assert not (learner / progress.STATE_FILE).exists(), "nothing was executed, so nothing needed caching"
    text = r.text()
    assert all(aid in text for aid in assignments()) and "next: run lessons/00_start_here.ipynb" in text

    hint("dot", root=learner)
    hint("dot", root=learner)
    assert by_aid(progress.report(learner))["ex01_dot"].hints_used == 2


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> tuple[Path, progress.Report, dict[str, str]]:
    """A learner's copy with every assignment answered by its solution and every lesson run, and its first progress
    report (each notebook run in a fresh kernel): the folder, the report, and its notebooks' digests before it."""
    learner = tmp_path_factory.mktemp("solved")
    for folder in ("exercises", "lessons"):
        shutil.copytree(ROOT / folder, learner / folder)
    for aid in assignments():
        put(learner, aid, answered(aid))
    mark_run(learner)
    before = digest(learner)
    return learner, progress.report(learner), before


def ran_before(solved, home: Path, aid: str) -> None:
    """Put into `home`'s progress state the run of `aid`'s answered notebook that `solved`'s report measured, as a
    learner who ran `./course progress` before has it: the report takes it from the cache instead of a kernel."""
    root, _, _ = solved
    run = load_state(root)[0]["runs"][aid]
    update_state(home, lambda data: data["runs"].update({aid: run}))


def test_solutions_in_the_learners_place_pass_every_visible_check(solved):
    learner, r, before = solved
    for aid, a in by_aid(r).items():
        assert (a.status, a.problem, a.cached) == ("ran", None, False), (aid, a.problem)
        # a check that reads only an answer's form is answered, never passed: its value is graded by a self-grade
        assert a.checks == {
            fn: progress.ANSWERED if fn in FORM_ONLY.get(aid, ()) else progress.PASS for fn in GRADED[aid]
        }, aid
    assert all(lesson.done for lesson in r.lessons)
    assert r.next_step.startswith("run `./course selfgrade ex01_dot`"), r.next_step
    assert "3 of 8 pass, 5 answered" in r.text()  # ex06_compile: three functions, five short answers
    assert digest(learner) == before, "the learner's notebooks must never be modified"
    # every copy ran in a kernel forked from the report's zygote (torch imported once), which the report stopped
    runs = load_state(learner)[0]["runs"]
    assert {aid: run["result"]["kernel"] for aid, run in runs.items()} == dict.fromkeys(GRADED, "forked")
    assert not _zygotes_of_this_process(), "the report's zygote outlived it"


def _zygotes_of_this_process() -> list[int]:
    import psutil

    return [
        p.pid
        for p in psutil.Process().children(recursive=True)
        if any("twoprim.learner.zygote" in part for part in p.cmdline())
    ]


def test_a_warm_kernel_of_the_report_is_fresh_and_one_notebook_starts_its_own(learner, tmp_path):
    """Two notebooks: both kernels forked from one zygote, each a fresh namespace (what the first defined, the second
    does not see) with a NumPy generator of its own, the zygote stopped after them; one notebook alone: a kernel
    started the usual way (a zygote would cost what that one kernel costs)."""
    seen = tmp_path / "seen"
    seen.mkdir()

    def probe(aid: str, code: str) -> Path:
        cell = f"import numpy, pathlib\n{code}\npathlib.Path({str(seen / aid)!r}).write_text(repr(facts))"
        return put(learner, aid, nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]))

    first = probe("ex01_dot", "left_behind = 1\nfacts = (True, float(numpy.random.rand()))")
    second = probe("ex02_gemm", "facts = ('left_behind' in dir(), float(numpy.random.rand()))")
    todo = [(progress.AssignmentStatus(p.parent.name, p, "missing"), "key") for p in (first, second)]
    results = progress._run_copies(todo, learner, timeout=60, workers=1, log=lambda line: None)
    assert {aid: result["kernel"] for aid, (_, result) in results.items()} == dict.fromkeys(
        ("ex01_dot", "ex02_gemm"), "forked"
    )
    (defined, one), (leaked, two) = (ast.literal_eval((seen / aid).read_text()) for aid in ("ex01_dot", "ex02_gemm"))
    assert defined and not leaked, "the second kernel saw a name the first notebook defined"
    assert one != two, "two forked kernels drew the same random number: NumPy's generator was not reseeded"
    assert not _zygotes_of_this_process(), "the report's zygote outlived it"
    assert progress.execute_copy(second, "ex02_gemm", timeout=60)["kernel"] == "started"


def test_a_hub_student_sees_their_home_fetches_and_submits(tmp_path, monkeypatch):
    """On the classroom hub (`./course hub` sets TWOPRIM_WORKSPACE=~ on a student's server) progress and hints are of
    the student's home: the lessons copied there, the assignments released and fetched, the state file there; the
    next step is to fetch or submit (nbgrader's record of a submission), never to self-grade."""
    home, exchange, data = tmp_path / "home", tmp_path / "exchange", tmp_path / "jupyter-data"
    shutil.copytree(ROOT / "lessons", home / "lessons")
    for aid in ("ex01_dot", "ex02_gemm"):  # released; only ex01_dot fetched so far
        (exchange / "two-primitives" / "outbound" / aid).mkdir(parents=True)
    put_dir = home / "exercises" / "ex01_dot"
    put_dir.mkdir(parents=True)
    put(home, "ex01_dot", answered("ex01_dot"))
    mark_run(home)
    monkeypatch.setenv("TWOPRIM_WORKSPACE", str(home))
    monkeypatch.setenv("TWOPRIM_EXCHANGE", str(exchange))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))

    hint("dot")  # the hint button's record goes to the student's home, not the course folder
    r = progress.report()
    assert r.root == home and r.classroom and (home / progress.STATE_FILE).is_file()
    assert sorted(by_aid(r)) == ["ex01_dot", "ex02_gemm"], "released and fetched ones only"
    ex01, ex02 = by_aid(r)["ex01_dot"], by_aid(r)["ex02_gemm"]
    assert ex01.status == "ran" and ex01.hints_used == 1 and ex01.selfgrade is None
    assert (ex02.status, ex02.problem) == ("missing", "not fetched yet: fetch it from the Assignments tab")
    assert r.next_step.startswith(
        "submit ex01_dot from the Assignments tab: your instructor's grading adds the hidden checks"
    ), r.next_step
    assert "submitted" in r.text() and "self-grade" not in r.text()
    assert not progress._complete(ex01), "every visible check passes, but it is not submitted yet"

    # nbgrader submit keeps a copy of each submission, its time in timestamp.txt
    cached = data / "nbgrader_cache" / "two-primitives" / "student+ex01_dot+2026-12-02 10:00:00.000000 UTC"
    cached.mkdir(parents=True)
    (cached / "timestamp.txt").write_text("2026-12-02 10:00:00.000000 UTC")
    notebook = home / "exercises" / "ex01_dot" / "ex01_dot.ipynb"
    saved_at = os.stat(cached / "timestamp.txt").st_mtime - 60
    os.utime(notebook, (saved_at, saved_at))
    r = progress.report()
    assert by_aid(r)["ex01_dot"].submitted == {"at": "2026-12-02 10:00:00.000000 UTC", "stale": ""}
    assert "2026-12-02 10:00" in r.text() and progress._complete(by_aid(r)["ex01_dot"])
    assert r.next_step == (
        "fetch ex02_gemm from the Assignments tab (Nbgrader → Assignments): it lands in exercises/ex02_gemm/."
    ), r.next_step

    later = os.stat(cached / "timestamp.txt").st_mtime + 60
    os.utime(notebook, (later, later))  # saved again after submitting
    assert progress.report().next_step.startswith(
        "submit ex01_dot from the Assignments tab again (you saved the notebook after submitting it)"
    )


def test_a_hub_student_sees_each_due_date_and_whether_they_submitted_late(tmp_path, monkeypatch, solved):
    """nbgrader's assignment list never shows a due date (students cannot read the gradebook, nbgrader#943): the
    due dates `./course release` writes into the exchange appear in the student's progress, with the time left."""
    home, exchange, data = tmp_path / "home", tmp_path / "exchange", tmp_path / "jupyter-data"
    shutil.copytree(ROOT / "lessons", home / "lessons")
    for aid in ("ex01_dot", "ex02_gemm"):
        (exchange / "two-primitives" / "outbound" / aid).mkdir(parents=True)
    (home / "exercises" / "ex01_dot").mkdir(parents=True)
    put(home, "ex01_dot", answered("ex01_dot"))
    mark_run(home)
    # ex01_dot's run is the one `solved` measured (running it in a hub home is the test above's): due dates here
    ran_before(solved, home, "ex01_dot")
    for name, value in (("TWOPRIM_WORKSPACE", home), ("TWOPRIM_EXCHANGE", exchange), ("JUPYTER_DATA_DIR", data)):
        monkeypatch.setenv(name, str(value))
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0)
    soon, gone = now + datetime.timedelta(days=2, hours=3, minutes=30), now - datetime.timedelta(hours=5, minutes=30)
    deadlines.publish(exchange, "ex01_dot", soon)
    deadlines.publish(exchange, "ex02_gemm", gone)
    assert deadlines.path(exchange).stat().st_mode & 0o777 == 0o644
    assert json.loads(deadlines.path(exchange).read_text()) == {
        "ex01_dot": f"{soon:%Y-%m-%dT%H:%M:%SZ}",
        "ex02_gemm": f"{gone:%Y-%m-%dT%H:%M:%SZ}",
    }

    r = progress.report()
    ex01, ex02 = by_aid(r)["ex01_dot"], by_aid(r)["ex02_gemm"]
    assert ex01.cached and ex01.status == "ran", ex01
    assert (ex01.due, ex02.due) == (soon, gone)
    assert r.next_step.startswith(
        f"submit ex01_dot from the Assignments tab (due {soon:%Y-%m-%d %H:%M} UTC (in 2 "
        f"days 3 h)): your instructor's grading"
    ), r.next_step
    assert f"due {gone:%Y-%m-%d %H:%M} UTC (passed 5 h 30 min ago: a submission now is late)" in r.text(), r.text()

    # submitted a day before the deadline ex01 had until the instructor moved it: late now
    cached = data / "nbgrader_cache" / "two-primitives" / "student+ex01_dot+t"
    cached.mkdir(parents=True)
    (cached / "timestamp.txt").write_text(f"{now - datetime.timedelta(days=1):%Y-%m-%d %H:%M:%S}.000000 UTC")
    saved_at = os.stat(cached / "timestamp.txt").st_mtime - 60
    os.utime(home / "exercises" / "ex01_dot" / "ex01_dot.ipynb", (saved_at, saved_at))
    deadlines.publish(exchange, "ex01_dot", now - datetime.timedelta(days=2))
    line = next(ln for ln in progress.report().text().splitlines() if "ex01_dot" in ln)
    assert "(late)" in line and "due " not in line, line  # submitted: its due date is no longer news
    deadlines.publish(exchange, "ex01_dot", None)
    assert "ex01_dot" not in deadlines.read(exchange) and "ex02_gemm" in deadlines.read(exchange)


def test_a_hub_student_on_the_exchange_service_sees_released_due_and_submitted(tmp_path, monkeypatch, solved):
    """With the classroom's exchange service (./course hub's default) no folder is shared with students: progress asks
    the service, with the server's own hub token, what is released, this student's deadlines (read from the
    gradebook at each request: a date moved in the formgrader shows at once) and their submissions."""
    from twoprim.exchange import service as svc

    from .test_exchange_service import TOKENS, Running, _gradebook_with_due_dates, _notebook

    home = tmp_path / "home"
    shutil.copytree(ROOT / "lessons", home / "lessons")
    (home / "exercises" / "ex01_dot").mkdir(parents=True)
    put(home, "ex01_dot", answered("ex01_dot"))
    mark_run(home)
    ran_before(solved, home, "ex01_dot")  # its run measured once, by `solved`: the exchange service is what is new here
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0)
    soon = now + datetime.timedelta(days=2, hours=3, minutes=30)
    url = _gradebook_with_due_dates(tmp_path, {"ex01_dot": soon})
    running = Running(tmp_path / "store", deadlines=svc.gradebook_deadlines(url))
    try:
        for aid in ("ex01_dot", "ex02_gemm"):
            running.store.release("two-primitives", aid, {f"{aid}.ipynb": _notebook("pass")}, by="teach", force=False)
        ann = next(t for t, who in TOKENS.items() if who == "ann")
        for name, value in (
            ("TWOPRIM_WORKSPACE", home),
            ("TWOPRIM_EXCHANGE_URL", running.url),
            ("JUPYTERHUB_API_TOKEN", ann),
            ("JUPYTER_DATA_DIR", tmp_path / "data"),
        ):
            monkeypatch.setenv(name, str(value))
        monkeypatch.delenv("TWOPRIM_EXCHANGE", raising=False)
        r = progress.report()
        assert r.classroom and not r.notes and sorted(by_aid(r)) == ["ex01_dot", "ex02_gemm"], r.notes
        ex01 = by_aid(r)["ex01_dot"]
        assert ex01.cached and ex01.status == "ran", ex01
        assert (ex01.due, ex01.submitted) == (soon, {"at": "", "stale": ""})
        assert r.next_step.startswith(f"submit ex01_dot from the Assignments tab (due {soon:%Y-%m-%d %H:%M} UTC"), (
            r.next_step
        )

        answer = running.store.submit(
            "two-primitives",
            "ex01_dot",
            "ann",
            {"ex01_dot.ipynb": (home / "exercises" / "ex01_dot" / "ex01_dot.ipynb").read_bytes()},
        )
        saved_at = time.time() - 120  # saved before it
        os.utime(home / "exercises" / "ex01_dot" / "ex01_dot.ipynb", (saved_at, saved_at))
        moved = soon + datetime.timedelta(days=1)
        _gradebook_with_due_dates(tmp_path, {"ex01_dot": moved})  # edited in the formgrader
        ex01 = by_aid(progress.report())["ex01_dot"]
        assert ex01.submitted == {"at": answer["timestamp"], "stale": ""} and ex01.due == moved
        assert progress._complete(ex01)
    finally:
        running.stop()
    r = progress.report()  # the service gone: said so, never a traceback
    assert len(r.notes) == 1 and "the classroom's exchange service did not answer" in r.notes[0], r.notes


# Visible checks that read only the form of an answer (its value is measured when grading): ex06's short answers,
# and ex07's lazy_answer, which checks one of its three numbers and the form of the other two.
FORM_ONLY = {"ex06_compile": set(ex06.ANSWERS), "ex07_mlx": {"lazy_answer"}}


def test_a_wrong_short_answer_is_answered_not_passing(learner):
    """The issue's learner: backward_gemms = 4 (right: 3) and graph_break_graphs = 1 (right: 2) printed ✔ and
    counted as passing. Run for real (a copy in a fresh kernel), on ex06's setup cell, the answers and their checks."""
    aid = "ex06_compile"
    nb = answered(aid)
    gid = f"{aid}-answers-solution"
    code = nb.cells[cell_index(nb, gid)].source
    for name, wrong in (("backward_gemms", 4), ("graph_break_graphs", 1)):
        assert wrong != ex06.ANSWERS[name].measure()
        code = re.sub(rf"^{name} = \d+", f"{name} = {wrong}", code, count=1, flags=re.M)
    nb.cells[cell_index(nb, gid)].source = code
    keep = {f"{aid}-setup", gid} | {f"{aid}-{name}" for name in ex06.ANSWERS}
    nb.cells = [
        c for c in nb.cells if c.cell_type == "markdown" or c.metadata.get("nbgrader", {}).get("grade_id") in keep
    ]
    put(learner, aid, nb)

    a = by_aid(progress.report(learner, timeout=60))[aid]
    assert a.status == "ran" and a.problem is None, a.problem
    assert a.checks == {name: progress.ANSWERED for name in ex06.ANSWERS}
    assert a.passed == 0 and a.answered == 5 and not progress._complete(a)
    r = progress.report(learner)
    line = next(ln for ln in r.text().splitlines() if aid in ln)
    assert "0 of 5 pass, 5 answered" in line and not line.strip().startswith("✔"), line
    assert "answered (graded when you self-grade)" in line

    selfgraded(learner, aid, failing=("backward_gemms-hidden", "graph_break_graphs-hidden"))
    a = by_aid(progress.report(learner))[aid]
    assert a.cached and not progress._complete(a), "a self-grade with the hidden answers failing is not complete"


BROKEN = {  # assignment -> (the answer cell that breaks, the code put at its top)
    "ex01_dot": ("ex01_dot-neuron-solution", "import os\nos._exit(3)"),  # crashes halfway
    "ex02_gemm": ("ex02_gemm-matmul_outer-solution", "def oops(:\n    pass"),  # does not parse
    # never ends; the cell limit is on the wall clock, so a loop that sleeps is stopped as a busy one is, without
    # burning a core for the limit's LIMIT s
    "ex03_layers": ("ex03_layers-mlp-solution", "import time\n\nwhile True:\n    time.sleep(0.05)"),
}


# The cell limit of the BROKEN report, which the loop that never ends waits out (it sleeps: no CPU). Its kernels are
# forked from the report's zygote, so no first cell imports torch (that took more than 10 s on a loaded machine when
# each kernel started the usual way); the slowest cell left is a visible check, a few seconds on a loaded machine.
LIMIT = 12


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """One progress report over a learner's copy with the three BROKEN notebooks (two at a time, LIMIT s per cell):
    the course folder, the notebooks, and the report."""
    root = tmp_path_factory.mktemp("learner")
    for folder in ("exercises", "lessons"):
        shutil.copytree(ROOT / folder, root / folder)
    mark_run(root, upto="01")
    notebooks = {aid: prepend(aid, gid, code) for aid, (gid, code) in BROKEN.items()}
    for aid, nb in notebooks.items():
        put(root, aid, nb)
    return root, notebooks, progress.report(root, timeout=LIMIT)


def test_a_notebook_that_crashes_halfway_is_reported_with_its_cell(broken):
    _, notebooks, r = broken
    a = by_aid(r)["ex01_dot"]
    cell = cell_index(notebooks["ex01_dot"], "ex01_dot-neuron-solution") + 1
    assert a.status == "crashed"
    assert f"the kernel died in cell {cell} (ex01_dot-neuron-solution)" in (a.problem or "")
    assert a.checks == {
        "dot_loop": "pass",
        "dot": "pass",
        "neuron": "not run",
        "cosine_similarity": "not run",
        "top_k": "not run",
    }
    assert r.next_step == f"fix exercises/ex01_dot/ex01_dot.ipynb: {a.problem}; then run `./course progress` again."
    rest = [b for b in r.assignments if b.aid not in BROKEN]
    assert rest and all(b.status == "not started" for b in rest), "the rest of the report must still appear"
    assert a.problem in r.text() and "ex07_mlx" in r.text() and len(r.lessons) == len(lessons(ROOT))


def test_a_syntax_error_is_reported_with_its_cell_and_later_checks_still_run(broken):
    _, notebooks, r = broken
    a = by_aid(r)["ex02_gemm"]
    cell = cell_index(notebooks["ex02_gemm"], "ex02_gemm-matmul_outer-solution") + 1
    assert a.status == "error"
    assert (a.problem or "").startswith(
        f"SyntaxError in cell {cell} (ex02_gemm-matmul_outer-solution): invalid syntax (line 1 of the cell)"
    ), a.problem
    assert a.checks == {
        "matmul_loops": "pass",
        "matmul_dots": "pass",
        "matmul_outer": "fail",
        "gemm": "pass",
        "matmul_tiled": "pass",
        "gemm_flops": "pass",
    }


def test_an_infinite_loop_is_stopped_and_reported_with_its_cell(broken):
    _, notebooks, r = broken
    a = by_aid(r)["ex03_layers"]
    cell = cell_index(notebooks["ex03_layers"], "ex03_layers-mlp-solution") + 1
    assert a.status == "timed out"
    assert (a.problem or "").startswith(f"cell {cell} (ex03_layers-mlp-solution) ran past the {LIMIT} s limit")
    assert a.checks == {
        "linear": "pass",
        "qkv_projection": "pass",
        "mlp": "not run",
        "embedding_as_gemm": "not run",
        "rnn_cell": "not run",
        "gnn_layer": "not run",
    }


def test_a_changed_notebook_runs_again_and_the_originals_are_untouched(broken):
    root, notebooks, _ = broken
    for aid, nb in notebooks.items():
        on_disk = nbformat.read(str(root / "exercises" / aid / f"{aid}.ipynb"), as_version=4)
        assert [c.source for c in on_disk.cells] == [c.source for c in nb.cells], aid
        assert not any(c.get("outputs") for c in on_disk.cells), f"{aid}: the learner's notebook was modified"
    for aid in ("ex01_dot", "ex03_layers"):  # fixed: new content, so they run instead of coming from the cache
        put(root, aid, answered(aid))
    # the default cell time limit: a kernel's first cell on a loaded machine can take more than the fixture's LIMIT
    r = by_aid(progress.report(root))
    for aid in ("ex01_dot", "ex03_layers"):
        assert (r[aid].status, r[aid].cached, set(r[aid].checks.values())) == ("ran", False, {"pass"}), r[aid]
    assert r["ex02_gemm"].cached and r["ex02_gemm"].status == "error"


def test_a_corrupt_state_file_is_set_aside_not_lost(learner):
    state = learner / progress.STATE_FILE
    state.write_text('{"version": 1, "runs": {')
    r = progress.report(learner)
    [aside] = learner.glob(f"{progress.STATE_FILE}.bad-*")
    assert aside.read_text() == '{"version": 1, "runs": {'
    assert len(r.notes) == 1 and "could not be read" in r.notes[0] and aside.name in r.notes[0]
    assert f"note: {r.notes[0]}" in r.text() and len(r.assignments) == len(assignments())
    hint("top_k", root=learner)
    assert json.loads(state.read_text())["hints"] == {"ex01_dot-top_k": 1}


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_course_progress_command_prints_aligned_tables_and_writes_only_its_state(
    learner, monkeypatch, capsys, tmp_path
):
    monkeypatch.setattr(course, "ROOT", learner)
    before = _files(learner)
    assert course.main(["progress"]) == 0
    out = capsys.readouterr().out
    assert "ex01_dot" in out and "next: run lessons/00_start_here.ipynb" in out
    changed = {f for f, t in _files(learner).items() if before.get(f) != t}
    assert changed <= {progress.STATE_FILE}, changed  # the one file progress keeps, nothing else
    # every column of each table starts at the same place on every line
    lines = out.splitlines()
    for labels in (["lesson", "status"], ["assignment", "visible checks", "self-graded", "hints", "notebook"]):
        top = next(i for i, ln in enumerate(lines) if ln.split()[:1] == [labels[0]])
        table = lines[top : lines.index("", top)]
        assert len(table) > 2, table
        for at in (table[0].index(label) for label in labels):
            for row in table[1:]:
                assert row[at - 2 : at] == "  " and row[at] != " ", (labels, at, row)
    # the chart, where asked for
    assert course.main(["progress", "--chart", str(tmp_path / "chart.png")]) == 0
    assert f"chart: {tmp_path / 'chart.png'}" in capsys.readouterr().out
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")


def test_a_self_grade_of_another_notebook_is_not_this_notebooks_score(learner):
    record = learner / "grader" / "selfgrade" / "ex01_dot.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    mine = learner / "exercises" / "ex01_dot" / "ex01_dot.ipynb"
    for graded, shown in ((learner / "scratch.ipynb", "-"), (mine, "6 of 12")):
        record.write_text(json.dumps({"graded_at": stamp, "score": 6, "max_score": 12, "notebook": str(graded)}))
        row = by_aid(progress.report(learner))["ex01_dot"]
        assert progress._selfgrade_cell(row) == shown, (graded, row.selfgrade)


def test_the_state_file_is_untracked():
    for name in (progress.STATE_FILE, f"{progress.STATE_FILE}.bad-20261130-090000"):
        ignored = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT, capture_output=True, timeout=60)
        assert ignored.returncode == 0, f"{name} must be ignored by git (.gitignore)"


def test_next_step_follows_the_course_outline_each_lesson_then_its_assignment(learner):
    """README's outline pairs each lesson with its assignment (lesson 09, Triton, with ex09_triton); lesson 08 has
    none: its turn goes to lesson 09, then ex09_triton."""
    done = [progress.LessonStatus(p.stem, p, p.stem[:2] != "09", "not run yet") for p in lessons(learner)]
    ex09 = progress.AssignmentStatus(
        "ex09_triton",
        learner / "exercises" / "ex09_triton" / "ex09_triton.ipynb",
        "not started",
        checks={"add_kernel": progress.TODO},
    )
    step = progress._next_step(learner, done, [ex09])
    assert step.startswith("run lessons/09_triton_gemm.ipynb to the end"), step
    at = next(i for i, lesson in enumerate(done) if lesson.name.startswith("09"))
    done[at] = progress.LessonStatus(done[at].name, done[at].path, True, "run to the end")
    assert progress._next_step(learner, done, [ex09]).startswith("make `add_kernel` pass its check")
