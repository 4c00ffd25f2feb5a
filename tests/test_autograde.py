"""The course's autograde (nbgrader underneath) grades every assignment as an instructor would: the solutions
score full marks, the committed blank student version zero, and one wrong function loses exactly that function's
points. Scores come from the gradebook, not from logs. Works for any assignment without per-assignment code."""

from __future__ import annotations

import ast
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, cast

import nbformat
import pytest
from nbgrader.api import Gradebook

from twoprim import grading
from twoprim.config import ROOT
from twoprim.core.notebooks import assignments
from twoprim.grading import kernels
from twoprim.grading.nbgrader_cli import generate_assignment

ASSIGNMENTS = assignments()


def _source(aid: str) -> nbformat.NotebookNode:
    return nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)


@cache
def solution_code(aid: str) -> dict[str, str]:
    """grade_id -> the solution cell's code without the nbgrader markers."""
    out = {}
    for cell in _source(aid).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            lines = [
                line
                for line in cell.source.splitlines()
                if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
            ]
            out[meta["grade_id"]] = "\n".join(lines)
    return out


@cache
def points(aid: str) -> dict[str, float]:
    """grade_id of every graded test cell -> its points, from the solution notebook's nbgrader metadata."""
    return {
        c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
        for c in _source(aid).cells
        if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
    }


def graded_functions(aid: str) -> list[str]:
    """Functions with a visible check cell `<aid>-<function>`."""
    return [gid.removeprefix(f"{aid}-") for gid in points(aid) if not gid.endswith("-hidden")]


def leaf_functions(aid: str) -> list[str]:
    """Graded functions no other solution cell calls: breaking one must cost exactly its own points."""
    used = set()
    for code in solution_code(aid).values():
        tree = ast.parse(code)
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        used |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - defined
    return [fn for fn in graded_functions(aid) if fn not in used]


def submission(aid: str, overrides: dict[str, str] | None = None, *, answered: bool = True) -> nbformat.NotebookNode:
    """The committed student version with every solution cell answered, then `overrides` applied."""
    nb = nbformat.read(str(ROOT / "exercises" / aid / f"{aid}.ipynb"), as_version=4)
    answers = {**(solution_code(aid) if answered else {}), **(overrides or {})}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    return nb


def broken(aid: str, fn: str) -> dict[str, str]:
    """The solution cell defining `fn`, with `fn` redefined at its end to return nothing."""
    gid = next(g for g, code in solution_code(aid).items() if f"def {fn}(" in code)
    return {gid: solution_code(aid)[gid] + f"\n\n\ndef {fn}(*args, **kwargs):\n    return None  # wrong on purpose\n"}


def replaced(aid: str, grade_id: str, old: str, new: str) -> dict[str, str]:
    code = solution_code(aid)[grade_id]
    assert old in code, f"{old!r} is not in the solution of {grade_id}"
    return {grade_id: code.replace(old, new)}


# Submissions beyond the generic ones: (assignment, student) -> (overrides, the function whose points are lost).
EXTRA = {
    # dot calls torch.dot, which the exercise forbids: dot's points are lost; neuron, built on it, keeps its own.
    ("ex01_dot", "forbidden_dot"): (
        lambda: replaced("ex01_dot", "ex01_dot-dot-solution", "(x * w).sum()", "torch.dot(x, w)"),
        "dot",
    ),
    # conv2d_gemm calls F.conv2d, a convolution op the exercise forbids: only conv2d_gemm's points are lost.
    ("ex04_conv", "forbidden_conv"): (
        lambda: replaced(
            "ex04_conv",
            "ex04_conv-conv2d_gemm-solution",
            "out = w @ cols ",
            "out = F.conv2d(x, weight, None, stride, "
            "padding, dilation, groups).permute(1, 0, 2, 3).reshape(groups, "
            "M, N * L)  # ",
        ),
        "conv2d_gemm",
    ),
    # qkv_projection runs three GEMMs, which its rule forbids: only qkv_projection's points are lost.
    ("ex03_layers", "three_gemm_qkv"): (
        lambda: replaced(
            "ex03_layers",
            "ex03_layers-qkv_projection-solution",
            "fused = x.reshape(-1, x.shape[-1]) @ W.T",
            "fused = torch.cat([x.reshape(-1, x.shape[-1]) @ w.T for w in (Wq, Wk, Wv)], dim=1)",
        ),
        "qkv_projection",
    ),
    # gnn_layer multiplies in the costlier order: right values, but only gnn_layer's points are lost.
    ("ex03_layers", "costly_gnn"): (
        lambda: replaced(
            "ex03_layers",
            "ex03_layers-gnn_layer-solution",
            "if W.shape[1] < W.shape[0]:",
            "if W.shape[1] > W.shape[0]:",
        ),
        "gnn_layer",
    ),
    # the matmul wrapper launches the kernel but returns torch's product: a rule of the exercise, judged in the
    # kernel and carried to the grader as "broken"; only matmul_kernel's points are lost.
    ("ex09_triton", "torch_matmul"): (
        lambda: replaced("ex09_triton", "ex09_triton-matmul_kernel-solution", "    return C", "    return A @ B"),
        "matmul_kernel",
    ),
}


def plan(aid: str) -> dict[str, tuple]:
    """student id -> (how to build their notebook, the one function whose points they lose; None: all or nothing).
    Built from solutions/ only, so collecting the tests never needs exercises/."""
    out: dict[str, tuple[Callable[[], Any], str | None]] = {
        "perfect": (lambda: submission(aid), None),
        "blank": (lambda: submission(aid, answered=False), None),
    }
    for fn in leaf_functions(aid):
        out[f"broken_{fn}"] = (lambda fn=fn: submission(aid, broken(aid, fn)), fn)
    for (a, student), (make, fn) in EXTRA.items():
        if a == aid:
            out[student] = (lambda make=make: submission(aid, make()), fn)
    return out


@cache
def students(aid: str) -> dict[str, tuple[nbformat.NotebookNode, str | None]]:
    """student id -> (their notebook, the one function whose points they lose)."""
    return {student: (make(), lost) for student, (make, lost) in plan(aid).items()}


@pytest.fixture(scope="module")
def grade(tmp_path_factory):
    """grade(aid) -> the temporary course in which `nbgrader autograde aid` graded every student of students().
    The warm forkserver this process grades with stops with the module: no grader outlives these tests."""
    done: dict[str, Path] = {}

    def run(aid: str) -> Path:
        if aid not in done:
            course = tmp_path_factory.mktemp(aid)
            (course / "grader").mkdir()
            shutil.copy(ROOT / "grader" / "nbgrader_config.py", course / "grader")
            shutil.copytree(ROOT / "solutions" / aid, course / "solutions" / aid)
            generate_assignment(aid, root=course)  # nbgrader's generate_assignment, in this process
            for student, (nb, _) in students(aid).items():
                target = course / "grader" / "submitted" / student / aid
                target.mkdir(parents=True)
                nbformat.write(nb, str(target / f"{aid}.ipynb"))
            # what `./course autograde` runs, its tasks (`grade_task`: sandbox, warm forkserver, nbgrader, verdicts,
            # gradebook merge, reports) graded in this process rather than on a Dask LocalCluster: the cluster's
            # scheduler, worker processes and second forkserver cost this file 218 s of CPU against 132 s graded here.
            # Grading on the LocalCluster is tests/test_grading.py's (a class of ex01_dot), and the same grades from a
            # cluster of `dask worker`s is tests/test_cluster.py's.
            grading.autograde(aid, root=course, in_process=True, progress=False)
            done[aid] = course
        return done[aid]

    yield run
    kernels.stop_forkservers()


def gradebook_scores(course: Path, aid: str, student: str) -> tuple[float, float, dict[str, float]]:
    with Gradebook(f"sqlite:///{course / 'grader' / 'gradebook.db'}", "two-primitives") as gb:
        sub = gb.find_submission(aid, student)
        per_test = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
        # nbgrader declares both None on the class and makes them column properties afterwards
        return sub.score, sub.max_score, per_test  # pyright: ignore[reportReturnType]


def reason(course: Path, aid: str, student: str) -> str:
    """What the gradebook's status row says about this student (shown when a score assertion fails)."""
    status = grading.statuses(aid, grading.database_url(course)).get(student, {})
    return f"{student}: {status.get('status')}: {status.get('reason')}"


def expected_without(aid: str, fn: str | None) -> dict[str, float]:
    lost = {f"{aid}-{fn}", f"{aid}-{fn}-hidden"} if fn else set()
    return {gid: (0.0 if gid in lost else pts) for gid, pts in points(aid).items()}


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_every_graded_function_has_visible_and_hidden_points(aid):
    fns = graded_functions(aid)
    assert fns, f"{aid} has no graded check cells"
    for fn in fns:
        assert points(aid).get(f"{aid}-{fn}-hidden", 0) > 0, f"{aid}-{fn} has no hidden check cell with points"
    assert leaf_functions(aid), f"{aid}: every function is used by another; no function can be broken alone"


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_solution_scores_full_marks(grade, aid):
    score, max_score, per_test = gradebook_scores(grade(aid), aid, "perfect")
    assert per_test == expected_without(aid, None), reason(grade(aid), aid, "perfect")
    assert score == max_score == sum(points(aid).values())


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_blank_student_version_scores_zero(grade, aid):
    score, max_score, per_test = gradebook_scores(grade(aid), aid, "blank")
    assert (score, max_score) == (0.0, sum(points(aid).values())), reason(grade(aid), aid, "blank")
    assert set(per_test.values()) == {0.0}


@pytest.mark.parametrize(
    "aid, student", [(aid, s) for aid in ASSIGNMENTS for s in plan(aid) if s not in ("perfect", "blank")]
)
def test_one_wrong_function_loses_exactly_its_points(grade, aid, student):
    _, lost = plan(aid)[student]
    score, _, per_test = gradebook_scores(grade(aid), aid, student)
    assert per_test == expected_without(aid, lost), reason(grade(aid), aid, student)
    assert score == sum(points(aid).values()) - points(aid)[f"{aid}-{lost}"] - points(aid)[f"{aid}-{lost}-hidden"]


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_submitted_files_are_not_modified(grade, aid):
    course = grade(aid)
    for student, (nb, _) in students(aid).items():
        on_disk = nbformat.read(str(course / "grader" / "submitted" / student / aid / f"{aid}.ipynb"), as_version=4)
        assert [c.source for c in on_disk.cells] == [c.source for c in nb.cells]


def test_nbgraders_metadata_schema_is_checked_once_and_every_cell_validated_as_before(monkeypatch):
    """nbgrader validates each graded cell's metadata with `jsonschema.validate`, which first checks the schema
    itself against JSON Schema's metaschema, for every cell (profiled: about 1 s of a grading worker's CPU per ex06
    submission). With the grader's `checked_schema_once` the schema is checked once in the process; every cell is
    still validated, with nbgrader's own errors: the same ValidationError for broken metadata, SchemaTooOld and
    SchemaTooNew for another schema version."""
    import jsonschema
    import jsonschema.validators
    from nbgrader.nbgraderformat import SchemaTooNewError, SchemaTooOldError, ValidationError
    from nbgrader.nbgraderformat.v3 import MetadataValidatorV3

    from twoprim.grading.nbgrader_cli import checked_schema_once

    validator = MetadataValidatorV3()
    cls = jsonschema.validators.validator_for(validator.schema)
    checks = []
    original = cls.check_schema.__func__
    monkeypatch.setattr(
        cls, "check_schema", classmethod(lambda c, schema, **kw: (checks.append(1), original(c, schema, **kw))[1])
    )
    cells = [cell for cell in _source("ex06_compile").cells if "nbgrader" in cell.metadata]
    broken = cast(  # (a dict in, a NotebookNode out)
        nbformat.NotebookNode,
        nbformat.from_dict({**cells[1], "metadata": {"nbgrader": {**cells[1].metadata["nbgrader"], "points": "two"}}}),
    )
    with pytest.raises(ValidationError) as nbgraders:
        jsonschema.validate(broken.metadata["nbgrader"], validator.schema)  # what nbgrader's method calls
    for cell in cells:  # nbgrader's own way: the schema checked once per cell
        jsonschema.validate(cell.metadata["nbgrader"], validator.schema)
    assert len(checks) == len(cells) + 1 > 20

    checks.clear()
    checked_schema_once()
    checked_schema_once()  # installed once
    for _ in range(3):
        MetadataValidatorV3().validate_nb(nbformat.v4.new_notebook(cells=cells))
    assert len(checks) <= 1, len(checks)  # once in this process (none when an earlier test checked it)
    with pytest.raises(ValidationError) as ours:
        validator.validate_cell(broken)
    assert str(ours.value) == str(nbgraders.value) and "'two' is not of type 'number'" in str(ours.value)
    for version, error in ((2, SchemaTooOldError), (4, SchemaTooNewError)):
        old = cast(
            nbformat.NotebookNode,
            nbformat.from_dict(
                {**cells[0], "metadata": {"nbgrader": {**cells[0].metadata["nbgrader"], "schema_version": version}}}
            ),
        )
        with pytest.raises(error):
            validator.validate_cell(old)


def test_the_graders_kernel_is_ready_once_it_answers_and_its_first_cell_reads_only_its_own_output():
    # jupyter_client's wait_for_ready ends by reading IOPub until it is quiet for 0.2 s (0.2 s idle per submission);
    # the grader's client drops what IOPub holds instead. Shown on a kernel whose IOPub is never quiet (a thread
    # printing every 20 ms from its start), for which that wait would never end: the grader's client is ready, its
    # first cell's output is that cell's alone, and the kernel shuts down.
    import asyncio
    import time
    from queue import Empty

    from jupyter_client.manager import AsyncKernelManager

    from twoprim.grading.execute import CpuTimedExecute, PromptKernelClient, PromptKernelManager

    assert CpuTimedExecute().kernel_manager_class is PromptKernelManager
    chatter = (
        "--IPKernelApp.exec_lines=import threading, time, sys\n"
        "def _chatter():\n    while True:\n        print('chatter', flush=True); time.sleep(0.02)\n"
        "threading.Thread(target=_chatter, daemon=True).start()"
    )

    async def start(manager_class):
        km = manager_class(kernel_name="python3")
        await km.start_kernel(extra_arguments=[chatter])
        kc = km.client()
        kc.start_channels()
        return km, kc

    async def run():
        km, kc = await start(PromptKernelManager)
        try:
            assert isinstance(kc, PromptKernelClient)
            await asyncio.wait_for(kc.wait_for_ready(timeout=60), 60)
            msg_id = kc.execute("print('mine')")
            outputs, deadline, since, others = [], time.monotonic() + 30, time.strftime("%H:%M:%S"), 0
            while True:  # bounded as a whole: the chatter's messages arrive every 20 ms, a get alone never ends it
                assert time.monotonic() < deadline, (
                    f"no idle status for print('mine') within 30 s (since {since}; "
                    f"its output so far {outputs}; {others} messages of the chatter)"
                )
                try:
                    msg = await kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
                except Empty:
                    continue  # the deadline has passed: said above
                if msg["parent_header"].get("msg_id") != msg_id:
                    others += 1
                    continue
                if msg["msg_type"] == "stream":
                    outputs.append(msg["content"]["text"])
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    break
            # the chatter thread keeps printing while the cell runs, and ipykernel gives what it prints then to the
            # running cell, between the cell's own writes too ("mine", "chatter\n", "\n"): the cell's words are its own
            assert "".join(outputs).replace("chatter", " ").split() == ["mine"], outputs
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=False)
            assert not await km.is_alive()
        # the premise: jupyter_client's own client never finds this kernel's IOPub quiet
        km, kc = await start(AsyncKernelManager)
        try:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(kc.wait_for_ready(timeout=60), 3)
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    asyncio.run(run())
