"""A grading forkserver warms an assignment once, before its first kernel is forked (`forkserver._warm_assignment`):
the assignment's own `warm_up()`, run on one thread (an OpenMP pool started here would be inherited broken by every
forked kernel), at most once, never for a module the forkserver did not import, and a failing warm-up is logged
while the kernels do the work themselves. ex06's warm-up leaves the graphs of its visible count_ops check captured,
so a kernel forked after it hands the learner's code copies instead of capturing them again."""

from __future__ import annotations

import gc
import json
import os
import sys
import types
from typing import Any

import pytest
import torch

from twoprim.assignments import ex06_compile as ex06
from twoprim.grading import forkserver


@pytest.fixture
def fake(monkeypatch):
    """A checks module `twoprim.ex97` the forkserver imported, whose warm_up records the threads it ran on."""
    module: Any = types.ModuleType("twoprim.ex97")  # an assignment module made up for the test
    module.calls = []
    module.warm_up = lambda: module.calls.append(torch.get_num_threads())
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(forkserver, "_SET_BY", {module.__name__: {}})
    monkeypatch.setattr(forkserver, "_WARMED", set())
    monkeypatch.setattr(gc, "freeze", lambda: None)  # the forkserver's heap is frozen for its forks; not this one's
    return module


def test_an_assignment_is_warmed_once_on_one_thread(fake, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2, raising=True)  # as if the machine had two cores
    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    fake.warm_up = lambda: fake.calls.append(threads[-1])
    forkserver._warm_assignment(fake.__name__)
    forkserver._warm_assignment(fake.__name__)
    assert fake.calls == [1], "warmed once, on one thread"
    assert threads == [1, 2], "the thread count is put back afterwards"


def test_only_imported_modules_are_warmed_and_a_failure_is_logged(fake, capsys):
    forkserver._warm_assignment(
        "twoprim.assignments.ex06_compile"
    )  # not among this forkserver's modules: never imported or run
    forkserver._warm_assignment("")
    assert fake.calls == []

    def broken():
        raise RuntimeError("no graphs today")

    fake.warm_up = broken
    forkserver._warm_assignment(fake.__name__)
    assert "twoprim.ex97.warm_up failed: RuntimeError: no graphs today" in capsys.readouterr().err


def test_ex06_warm_up_leaves_the_visible_graphs_captured():
    ex06._captured.cache_clear()
    ex06.warm_up()
    captured = ex06._captured.cache_info()
    assert captured.currsize == len(ex06.VISIBLE_GRAPHS)
    first = ex06.graph_cases(ex06.VISIBLE_GRAPHS)
    assert ex06._captured.cache_info().misses == captured.misses, "nothing captured again"
    second = ex06.graph_cases(ex06.VISIBLE_GRAPHS)
    assert [c.label for c in first] == [c.label for c in second]
    for a, b in zip(first, second, strict=True):  # each case gets a copy of its own: changing one changes no other
        assert a.args[0] is not b.args[0] and a.args[0].code == b.args[0].code


def test_the_forkserver_skips_timing_dynamos_guards_for_every_kernel(monkeypatch):
    import torch._dynamo.guards as guards

    import twoprim.topics.inside_torch_compile  # noqa: F401 - a grading forkserver has imported it with ex06's checks

    timed = []
    monkeypatch.setattr(guards, "profile_guard_manager", lambda *args: timed.append(args) or 1.0)
    forkserver._warm_up()
    # torch's guard profiler as the course replaced it (torch does not re-export the name for type checkers)
    assert guards.profile_guard_manager.skipped_by_twoprim and guards.profile_guard_manager(None, {}, 1) == 0.0  # pyright: ignore[reportPrivateImportUsage, reportFunctionMemberAccess, reportArgumentType]
    assert timed == []


def test_the_instructors_test_cells_are_warmed_once_per_version(monkeypatch):
    """The grader hands the forkserver the instructor's test cells (`execute.share_test_cells`); ex06's `warm_cells`
    captures the graphs they build, once for each version of the cells, so every kernel forked later gets copies."""
    name = ex06.__name__
    monkeypatch.setattr(forkserver, "_SET_BY", {name: {}})
    monkeypatch.setattr(forkserver, "_WARMED", {name})  # its warm_up has run
    monkeypatch.setattr(gc, "freeze", lambda: None)
    runs = []
    real = ex06.warm_cells
    monkeypatch.setattr(ex06, "warm_cells", lambda cells: (runs.append(cells), real(cells)))
    cell = (
        'S = ex06.Spec\nex06.check_count_ops(count_ops, ex06.graph_cases([S("mlp", "dynamo", batch=(2,))], seed=977))'
    )
    ex06._captured.cache_clear()
    forkserver._warm_assignment(name, [cell])
    forkserver._warm_assignment(name, [cell])
    assert runs == [[cell]], "the same cells are warmed once"
    assert ex06._captured.cache_info().currsize == 1, "the graphs the hidden check builds are captured here"
    ex06.graph_cases([ex06.Spec("mlp", "dynamo", batch=(2,))], seed=977)
    assert ex06._captured.cache_info().misses == 1, "a kernel forked afterwards captures nothing again"
    forkserver._warm_assignment(name, [cell + "  # changed"])
    assert len(runs) == 2, "a changed test cell is warmed anew"


def test_the_grader_shares_test_cells_only_with_a_forkserver(monkeypatch, tmp_path):
    import nbformat

    from twoprim.grading import execute

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("check(x)")])
    nb.cells[0].metadata["nbgrader"] = {"solution": True, "grade": False}
    nb.cells[1].metadata["nbgrader"] = {"solution": False, "grade": True}
    monkeypatch.delenv(forkserver.ENV_SOCKET, raising=False)
    monkeypatch.setenv(forkserver.ENV_CELLS, "")  # what it was is put back after the test
    monkeypatch.delenv(forkserver.ENV_CELLS)
    assert not execute.share_test_cells(nb) and forkserver.ENV_CELLS not in os.environ
    monkeypatch.setenv(forkserver.ENV_SOCKET, str(tmp_path / "socket"))
    assert execute.share_test_cells(nb)
    with open(os.environ[forkserver.ENV_CELLS]) as cells:
        assert json.load(cells) == ["check(x)"], "test cells only"
