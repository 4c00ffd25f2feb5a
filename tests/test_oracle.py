"""The expected values an autograde run computes once and hands every worker (`twoprim.grading.oracle`): judged
with them, a submission gets exactly the verdicts it gets from values computed where it is judged, and nothing is
computed again; what cannot travel is left out for the worker to compute. On a cluster, every grading task is
handed them (tests/test_grading.py)."""

from __future__ import annotations

import collections
import pickle

import pytest
import torch

from twoprim.assignments import ex06_compile as ex06
from twoprim.config import ROOT
from twoprim.core import checks, verdicts
from twoprim.grading import oracle
from twoprim.topics import inside_torch_compile as compiler

from .conftest import solution_namespace

AID = "ex06_compile"
# a passing check (the grader's own seeded graphs as cases), a failing one (expected: the grader's graphs), an answer
CELLS = (f"{AID}-count_ops-hidden", f"{AID}-capture-hidden", f"{AID}-forward_gemms-hidden")


def _cells() -> list[tuple[str, str, tuple[str, ...]]]:
    source = {p.name: p.read_bytes() for p in (ROOT / "solutions" / AID).glob("*.ipynb")}
    every = oracle.graded_cells(source)
    assert {gid for gid, _, _ in every} >= set(CELLS) and all(gid.startswith(AID) for gid, _, _ in every)
    return [c for c in every if c[0] in CELLS]


def _judge(cells, folder) -> list[tuple[bool, str]]:
    replay = verdicts.Replay(folder)
    return [
        (v.passed, v.text)
        for v in (verdicts.judge_cell(gid, code, replay, set(learner)) for gid, code, learner in cells)
    ]


def test_values_computed_once_elsewhere_give_the_same_verdicts_and_nothing_is_computed_again(tmp_path, monkeypatch):
    cells = _cells()
    ns = {**solution_namespace(AID), "ex06": ex06, "torch": torch}
    right = ns["capture"]
    ns["capture"] = lambda model, x, level, train=False: right(model, x, level, train)[:-1]  # one graph short
    ns["forward_gemms"] = 3
    # the submission's kernel: it records what the learner's functions returned, judging nothing
    monkeypatch.setenv(verdicts.CAPTURE_ENV, str(tmp_path))
    for _, code, _ in cells:
        exec(compile(code, "<test cell>", "exec"), ns)  # noqa: S102 - the course's own test cells
    monkeypatch.delenv(verdicts.CAPTURE_ENV)

    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())
    before = compiler.uses()["capture_graphs"]
    here = _judge(cells, tmp_path)  # a worker computing every value itself
    assert compiler.uses()["capture_graphs"] > before
    computed = dict(checks._EXPECTED)
    assert [passed for passed, _ in here] == [True, False, False], here
    assert "expected: 2 ATen graphs" in here[1][1] or "expected: 1 Dynamo graph" in here[1][1], here[1][1]

    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())
    parts = [pickle.loads(pickle.dumps(oracle.cell_values(*cell))) for cell in cells]  # noqa: S301 - as Dask moves them
    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())  # the worker that judges computed none
    # every case's value, also those a failing check never reached here (it stops at its first wrong case)
    assert oracle.keep(parts) == len(checks._EXPECTED) > len(computed)
    assert set(checks._EXPECTED) > set(computed)
    before = compiler.uses()["capture_graphs"]
    assert _judge(cells, tmp_path) == here
    assert compiler.uses()["capture_graphs"] == before, "a value handed over was computed again"


def test_a_value_that_cannot_travel_is_left_out_and_another_torch_is_ignored(monkeypatch):
    values = {("cell", "task", ("a",), 0): 3, ("cell", "task", ("a",), 1): lambda x: x}  # a function: no pickle
    monkeypatch.setattr(checks, "expected_values", lambda cell: values)
    part = oracle.cell_values("ex01_dot-dot", "pass", ())
    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())
    assert oracle.keep([part]) == 1 and dict(checks._EXPECTED) == {("cell", "task", ("a",), 0): 3}

    other = pickle.dumps({**pickle.loads(part), "torch": "1.0.0"})  # noqa: S301 - the test's own
    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())
    assert oracle.keep([other]) == 0 and not checks._EXPECTED
    assert oracle.keep([b"not a pickle", part]) == 1, "a part it cannot read is left for the worker to compute"


def test_a_cell_that_fails_in_the_grader_hands_nothing_and_never_raises(monkeypatch):
    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())
    part = oracle.cell_values("ex01_dot-dot", "raise RuntimeError('the instructor made a typo')", ("dot",))
    assert pickle.loads(part)["values"] == {}  # noqa: S301 - the test's own


@pytest.mark.parametrize("value", [torch.arange(6.0).reshape(2, 3), {"bmm": 3}, 7])
def test_a_value_already_kept_stays(monkeypatch, value):
    key = ("cell", "task", ("a",), 0)
    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict({key: "computed here"}))
    assert checks.keep_expected({key: value, ("cell", "task", ("a",), 1): value}) == 1
    assert checks._EXPECTED[key] == "computed here"


def test_a_worker_reads_each_result_once_and_again_when_its_values_were_dropped(monkeypatch):
    # every grading task is handed the same results: unpickling ex06's graphs for each took 0.1 s a submission
    key = ("cell", "task", ("a",), 0)
    part = pickle.dumps({"torch": torch.__version__, "values": {key: torch.arange(3.0)}})
    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())
    monkeypatch.setattr(oracle, "_KEPT", {})
    reads = []
    loads = pickle.loads
    monkeypatch.setattr(pickle, "loads", lambda data: reads.append(1) or loads(data))
    assert [oracle.keep([part]) for _ in range(3)] == [1, 1, 1]
    assert len(reads) == 1 and torch.equal(checks._EXPECTED[key], torch.arange(3.0))
    checks._EXPECTED.clear()  # the worker's bounded cache dropped it: read again, not assumed
    assert oracle.keep([part]) == 1 and len(reads) == 2 and key in checks._EXPECTED


class _Future:
    """A cell's values as a Dask future gives them: done or not, and fetched in `fetch_s` (a transfer from the worker
    that holds them)."""

    def __init__(self, part: bytes, done: bool, fetch_s: float):
        self.part, self.is_done, self.fetch_s, self.fetched = part, done, fetch_s, 0

    def done(self) -> bool:
        return self.is_done

    def result(self, timeout: float | None = None) -> bytes:
        import time

        self.fetched += 1
        if timeout is not None and timeout < self.fetch_s:
            raise TimeoutError(f"not fetched within {timeout} s")
        time.sleep(self.fetch_s)
        return self.part


def test_a_computed_value_slow_to_arrive_is_still_handed_and_one_not_computed_is_not_waited_for(monkeypatch):
    import distributed

    key = ("cell", "task", ("a",), 0)
    part = pickle.dumps({"torch": torch.__version__, "values": {key: torch.arange(3.0)}})
    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())
    monkeypatch.setattr(oracle, "_KEPT", {})
    monkeypatch.setattr(distributed, "wait", lambda futures, timeout=None: None)  # computed, as wait() reports it
    slow = _Future(part, done=True, fetch_s=oracle.QUICK_S + 0.3)  # a transfer longer than the judge's quick wait
    expect = oracle.Expected("run")
    expect.futures = {verdicts.cell_digest("ex01_dot-dot", "pass"): slow}
    expect("ex01_dot-dot", "pass")
    assert expect.given == 1 and checks._EXPECTED[key].tolist() == [0.0, 1.0, 2.0]

    monkeypatch.setattr(checks, "_EXPECTED", collections.OrderedDict())
    monkeypatch.setattr(oracle, "_KEPT", {})
    pending = _Future(part, done=False, fetch_s=0)  # still being computed after the wait: the judge computes it
    expect = oracle.Expected("run")
    expect.futures = {verdicts.cell_digest("ex01_dot-dot", "pass"): pending}
    expect.waited = True  # left the pool once already
    monkeypatch.setattr(distributed, "wait", lambda futures, timeout=None: (_ for _ in ()).throw(TimeoutError()))
    expect("ex01_dot-dot", "pass")
    assert expect.given == 0 and pending.fetched == 0 and not checks._EXPECTED
