"""A grading forkserver warms an assignment once, before its first kernel is forked (`forkserver._warm_assignment`):
the assignment's own `warm_up()`, run on one thread (an OpenMP pool started here would be inherited broken by every
forked kernel), at most once, never for a module the forkserver did not import, and a failing warm-up is logged
while the kernels do the work themselves. ex06's warm-up leaves the graphs of its visible count_ops check captured,
so a kernel forked after it hands the learner's code copies instead of capturing them again."""
from __future__ import annotations

import gc
import sys
import types

import pytest
import torch

from twoprim.assignments import ex06_compile as ex06
from twoprim.grading import forkserver


@pytest.fixture
def fake(monkeypatch):
    """A checks module `twoprim.ex97` the forkserver imported, whose warm_up records the threads it ran on."""
    module = types.ModuleType("twoprim.ex97")
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
    forkserver._warm_assignment("twoprim.assignments.ex06_compile")  # not among this forkserver's modules: never imported or run
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
    for a, b in zip(first, second):  # each case gets a copy of its own: changing one changes no other
        assert a.args[0] is not b.args[0] and a.args[0].code == b.args[0].code


def test_the_forkserver_skips_timing_dynamos_guards_for_every_kernel(monkeypatch):
    import torch._dynamo.guards as guards

    import twoprim.topics.inside_torch_compile  # noqa: F401 - a grading forkserver has imported it with ex06's checks

    timed = []
    monkeypatch.setattr(guards, "profile_guard_manager", lambda *args: timed.append(args) or 1.0)
    forkserver._warm_up()
    assert guards.profile_guard_manager.skipped_by_twoprim and guards.profile_guard_manager(None, {}, 1) == 0.0
    assert timed == []
