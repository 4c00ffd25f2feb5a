"""The grader's expected values for one autograde run on a cluster: computed once, shared by every worker.

A graded test cell builds its cases from the instructor's source with fixed seeds, so its expected values are the
same for every submission, and a worker keeps those it has computed (`twoprim.core.checks`). Left to itself, each
worker computes all of them while it judges its first submission: for ex06, 43 captures by `torch.compile`, about
10 s on every worker. So a run on a cluster first submits one task per graded test cell (`cell_values`): the
scheduler spreads them over the workers, each judging its cells in a priming replay (`verdicts.Replay.priming_run`:
no submission, every case's expected value computed and kept, nothing judged). Grading tasks do not wait for them:
each runs its kernel meanwhile, and its judge takes a cell's values as it reaches that cell (`Expected`, through the
run's published dataset of futures; Dask moves them between workers) and keeps them (`keep`), so each expected
value is computed on one worker only, and the run's first submissions are not held up by all of them.

The values are the grader's own: computed in a worker process, as verdicts are, from the instructor's source;
they travel pickled between the grader's processes and never reach a kernel. What a cell could not compute, or a
value that does not pickle, is left out: the submissions compute it themselves, as they did before. A worker on a
torch other than the one that computed a value ignores it. A worker reads each result once (`keep`): every grading
task is handed the same ones, and unpickling ex06's captured graphs again took 0.1 s a submission.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import pickle
import warnings
from typing import cast

import nbformat

__all__ = ["graded_cells", "computed", "prime", "cell_values", "keep", "Expected"]

_KEPT: dict[bytes, tuple] = {}  # digest of a `cell_values` result -> the keys of the values this worker kept from it


def graded_cells(source: dict[str, bytes]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(grade_id, code, the learner's names in its notebook) for every graded test cell of the source notebooks of
    a task (`submission.make_task`'s "source"), in notebook order."""
    from twoprim.core import verdicts

    return [
        (cell.grade_id, cell.code, tuple(sorted(cell.learner)))
        for name, data in sorted(source.items())
        if name.endswith(".ipynb")
        for cell in verdicts.graded_cells(nbformat.reads(data.decode("utf-8"), as_version=4))
    ]


def computed(grade_id: str, code: str, learner: tuple[str, ...]) -> dict:
    """The expected values of one test cell's cases, computed and kept in this process (a priming replay: no
    submission, nothing judged). Never raises: what could not be computed is left out."""
    from twoprim.core import checks, verdicts

    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            verdicts.judge_cell(grade_id, code, verdicts.Replay.priming_run(), set(learner))
        return checks.expected_values(verdicts.cell_digest(grade_id, code))
    except Exception:  # noqa: BLE001 - the submissions compute what is missing, as without this
        return {}


def prime(source: dict[str, bytes]) -> int:
    """Every expected value of the graded test cells of `source` (a task's "source"), computed and kept in this
    process before any submission needs it (a learner's warm grader preparing an assignment); how many."""
    return sum(len(computed(*cell)) for cell in graded_cells(source))


def cell_values(grade_id: str, code: str, learner: tuple[str, ...], *_after) -> bytes:
    """The expected values of one test cell's cases, computed here, pickled with the torch they were computed on.
    Never raises: what could not be computed is left out. `_after`: what the task waits for and ignores (its
    place among the run's tasks, `cluster`)."""
    import torch

    values = computed(grade_id, code, learner)
    kept = {}
    for key, value in values.items():
        try:
            pickle.dumps(value)
        except Exception:  # noqa: BLE001 - e.g. a function made in the check: computed where needed
            continue
        kept[key] = value
    return pickle.dumps({"torch": torch.__version__, "values": kept})


def keep(parts: list[bytes] | tuple[bytes, ...]) -> int:
    """Keep the expected values of `cell_values` results in this worker; returns how many values were handed.
    Never raises: a part it cannot read is left for this worker to compute."""
    import torch

    from twoprim.core import checks

    given = 0
    for part in parts:
        with contextlib.suppress(Exception):
            digest = hashlib.blake2b(part, digest_size=16).digest()
            keys = _KEPT.get(digest)
            if keys is not None and checks.has_expected(keys):  # read for an earlier task, and all still kept
                given += len(keys)
                continue
            data = pickle.loads(part)  # noqa: S301 - the grader's own workers wrote it (`cell_values`), no kernel
            if data.get("torch") == torch.__version__:
                checks.keep_expected(data["values"])
                given += len(data["values"])
                _KEPT[digest] = tuple(data["values"])
    return given


class Expected:
    """In a grading task on the cluster, the run's expected values (`cell_values` tasks, published by the run under
    the name `dataset`: {cell digest: future}), taken cell by cell as the judge reaches each test cell
    (`submission.grade_task`'s `expect`). The grading task does not wait for them to start: its kernel runs while
    they are computed, and its judge waits only when it reaches a cell whose values are not ready: QUICK_S holding
    its worker's thread, then once outside the worker's thread pool (Dask's secede/rejoin, once per task: the worker
    runs the computing tasks meanwhile, its own included) until the rest of the run's values are in. What cannot be
    had (the run's dataset or a value lost with its worker, a computing task that failed, ORACLE_WAIT_S passed) the
    judge computes itself, as without this. `given`: how many values it was handed."""

    def __init__(self, dataset: str):
        self.dataset, self.given = dataset, 0
        self.futures: dict | None = None
        self.asked: set[str] = set()
        self.waited = False

    def __call__(self, grade_id: str, code: str) -> None:
        from twoprim.core.verdicts import cell_digest

        digest = cell_digest(grade_id, code)
        if digest in self.asked:
            return
        self.asked.add(digest)
        with contextlib.suppress(Exception):  # the judge computes what it was not handed
            futures = self.futures
            if futures is None:
                from distributed import get_client

                futures = self.futures = cast("dict", get_client().get_dataset(self.dataset, default=None) or {})
            future = futures.get(digest)
            if future is not None:
                self._wait(future)
                if future.done():  # computed: fetched from the worker that holds it, within FETCH_S
                    self.given += keep([future.result(timeout=FETCH_S)])

    def _wait(self, future) -> None:
        from distributed import rejoin, secede, wait

        try:
            wait([future], timeout=QUICK_S)
            return
        except Exception:  # noqa: BLE001 - not computed yet
            if self.waited:  # left the pool once already (a task may secede only once): the rest came or failed
                return
        self.waited = True
        secede()
        try:  # every value still being computed: this task needs them all, and leaves the pool only once
            wait(list((self.futures or {}).values()), timeout=ORACLE_WAIT_S)
        except Exception:  # noqa: BLE001 - those missing are computed by the judge
            pass
        finally:
            rejoin()

    def release(self) -> None:
        """Let go of the run's futures (what this task holds of them)."""
        for future in (self.futures or {}).values():
            with contextlib.suppress(Exception):
                future.release()
        self.futures = {}


QUICK_S = 0.5  # a judge waits this long for a cell's values holding its worker's thread, then leaves the pool
# ... and, once a value is computed, this long for its transfer from the worker that holds it, which on two loaded
# cores can take more than QUICK_S (with QUICK_S as the bound, tests/test_grading.py once saw a submission handed 66
# of its 72 values, the judge computing the rest again)
FETCH_S = 30
ORACLE_WAIT_S = 600  # ... and this long at most for the run's values, then computes what is missing itself
