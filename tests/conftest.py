"""Shared test fixtures: the repository root, solution code loaded as a namespace, lesson timings in the summary."""

from __future__ import annotations

import linecache
import os
import sys
import tempfile
from pathlib import Path

import pytest

from twoprim.config import ROOT
from twoprim.core.notebooks import code_of
from twoprim.grading.sandbox import THREAD_VARIABLES

from . import background
from .test_tooling import PYRIGHT, PYRIGHT_ARGV

BIN = Path(sys.executable).parent
# Course commands need the environment's bin/ (nbgrader -> alembic), as `make test` provides.
os.environ["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
# `./course selfgrade` in a test grades in its own process: no learner's warm grader outlives a test
# (tests/test_selfgrade.py starts its own, in a folder of its own, and stops it)
os.environ["TWOPRIM_WARM_GRADER"] = "off"
# `make test` runs two test processes on two cores: each process, and every kernel, grader and command it starts,
# computes on one thread, as the grader gives each worker of its local cluster one and a progress report each of its
# two kernels. With torch's default (a thread per core) each process's thread pool waits for the core the other
# process holds: test_autograde.py and test_notebooks.py side by side took 110-112 s and 191-192 CPU-s so, 98 s and
# 174 CPU-s with one thread each (2026-12-05, two runs each). A single test process keeps the default.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for variable in THREAD_VARIABLES:
        os.environ.setdefault(variable, "1")


def fails(check, *args, **kwargs) -> str:
    """The message of the CheckFailure that `check(*args, **kwargs)` must raise."""
    from twoprim.core.checks import CheckFailure

    with pytest.raises(CheckFailure) as info:
        check(*args, **kwargs)
    return str(info.value)


def check_of(aid: str, fn: str):
    """The visible check of graded function `fn` of assignment `aid`: `check_<fn>` in the assignment's module."""
    from twoprim.core import catalog

    return getattr(catalog.checks_module(aid), f"check_{fn}")


def solution_namespace(assignment: str) -> dict:
    """Execute the non-test code cells of solutions/<assignment> (imports and solution functions)."""
    ns: dict = {"__name__": f"solution_{assignment}"}
    for i, source in enumerate(code_of(ROOT / "solutions" / assignment / f"{assignment}.ipynb")):
        # each cell's source is registered with linecache, as IPython does, so inspect.getsource works on what it
        # defines (Triton reads a kernel's source)
        name = f"<{assignment}-cell-{i}>"
        linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
        exec(compile(source, name, "exec"), ns)  # noqa: S102 - our own committed notebook
    return ns


@pytest.fixture(scope="session")
def sol01():
    """The ex01_dot solution functions (dot_loop, dot, neuron, cosine_similarity, top_k)."""
    return solution_namespace("ex01_dot")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


# The files that take longest, run first: `make test` hands whole files to its processes (pytest-xdist, loadfile,
# in this order: --no-loadscope-reorder, or xdist would put the files with most tests first), and a long file
# started last would leave the other process idle at the end. The files of 15 s or more are named (their times in
# `make test-fast --durations=0`, 2026-12-05 23:28), most of all those that wait (test_waits.py, test_suite_ends.py:
# limits waited out), which at the end of the alphabet left the cores 60% busy in the run's last minute; the files
# of a few seconds each follow in name order and fill the end evenly.
LONG_FIRST = (
    "test_hub_load.py",
    "test_hub.py",
    "test_autograde.py",
    "test_cluster.py",
    "test_grading.py",
    "test_notebooks.py",
    "test_sandbox.py",
    "test_progress.py",
    "test_new_assignment.py",
    "test_moved_course.py",
    "test_uids.py",
    "test_selfgrade.py",
    "test_browser.py",
    "test_lab.py",
    "test_waits.py",
    "test_ex06.py",
    "test_analytics.py",
    "test_assignments.py",
    "test_structure.py",
    "test_exchange_filesystem.py",
    "test_warm_kernels.py",
    "test_suite_ends.py",
)


_RUNS = pytest.StashKey[background.Runs]()


def pytest_configure(config):
    """pyright's ~80 CPU-seconds start now at the lowest priority, in the session's first process, when its test is in
    the run: it takes the cores the tests leave idle, and test_pyright_passes reads its report (tests/background.py)."""
    if hasattr(config, "workerinput") or background.folder() is not None:
        return  # a test process of pytest-xdist (it inherits the folder), or a pytest run inside a test
    if PYRIGHT.exists() and background.in_scope(config, Path(__file__).with_name("test_tooling.py")):
        runs = background.Runs(Path(tempfile.mkdtemp(prefix="twoprim-background-")))
        os.environ[background.VARIABLE] = str(runs.top)  # before pytest-xdist starts the test processes
        config.stash[_RUNS] = runs
        runs.start("pyright", PYRIGHT_ARGV, ROOT)


def pytest_unconfigure(config):
    runs = config.stash.get(_RUNS, None)
    if runs is not None:
        runs.stop()
        os.environ.pop(background.VARIABLE, None)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))  # stable: each file's order kept


def pytest_terminal_summary(terminalreporter):
    rows = []
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        for key, value in getattr(report, "user_properties", []):
            if key == "lesson_seconds" and report.when == "call":
                rows.append(value)
    if rows:
        terminalreporter.section("lesson run times (fresh kernel; budget 60 s each, checked by `make bench-lessons`)")
        for name, secs in sorted(rows):
            terminalreporter.write_line(f"{name:40s} {secs:6.1f} s")
