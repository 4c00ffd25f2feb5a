"""Autograde a class on a Dask cluster: each submission is one task (`submission.grade_task`), run by whichever
worker is free, on this machine (a `LocalCluster` of worker processes, the default) or on a cluster of many
(`--scheduler tls://HOST:8786`, with Dask's TLS: `tls`; the same code runs on Slurm/PBS through dask-jobqueue and
on Kubernetes through dask-kubernetes). One grading path: local grading is the same tasks on a local cluster.

Beside the submissions, one task per graded test cell computes that cell's expected values, once in the run
(`oracle`): grading tasks start without waiting for them, and each judge takes a cell's values as it reaches that
cell (no worker computes them again for its first submission). What a run pays once is overlapped with the rest: the
local cluster starts while this process prepares the assignment's release and tasks, and each worker, as soon as it
is up, starts its forkserver and warms the assignment's checks and test cells in it (`keeper`, a thread of its own
that lives as long as the worker) while it computes expected values.

Results come back to this process, which alone writes the gradebook (SQLite or PostgreSQL, `gradebook`) and the
reports, one submission per transaction, as they arrive. Dask regrades a task whose worker died on another worker;
a grade is merged once, when its result arrives. A fault of the grader is never a student's grade: a task the
cluster lost (every copy of the scattered gradebook snapshot gone with its workers, the scheduler gone, a cancelled
task, the grader's own error) is sent again once the cluster is back (`MAX_ATTEMPTS` in all, the snapshot scattered
again), and what is still not graded is recorded so (`gradebook.record_not_graded`): no grade written, an earlier
one and its autograded notebook kept, graded by the next run. A submission that ran into a time limit judged on the
wall clock while others were graded beside it is graded again alone before that limit counts.

A submission already committed in its current form (same files, same assignment source) is not graded again unless
named with `--student` or `--force`, so a run that stopped half way (the database went away) is finished by running
it again.

Why this module is long: one run's whole life on a cluster, in the instructor's process and on the workers: the
cluster started early and its workers warmed, the tasks, the expected values beside them, and every way a cluster
fails a run (a lost worker, a lost scheduler, a gradebook gone) with what the run does about each.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

from twoprim.config import ROOT
from twoprim.core.catalog import checks_module_name
from twoprim.core.errors import CourseError
from twoprim.grading import keeper, oracle, sandbox, tls
from twoprim.grading.gradebook import (
    GradebookUnavailable,
    committed,
    database_url,
    digest,
    init_db,
    merge,
    read_submission,
    record_not_graded,
    refresh_late_penalties,
    released_notebooks,
    scratch_gradebooks,
    snapshot,
    submitted_students,
)
from twoprim.grading.preprocessors import DEFAULT_CELL_TIMEOUT
from twoprim.grading.reports import write_reports
from twoprim.grading.submission import NOT_GRADED, SUBMISSION_WALL_SECONDS, Outcome, grade_task, make_task

__all__ = ["autograde", "connect", "SCHEDULER_ENV"]

SCHEDULER_ENV = "TWOPRIM_SCHEDULER"
CONNECT_TIMEOUT_S = 10
MAX_ATTEMPTS = 3  # a submission the cluster lost is sent this many times in all before it is "not graded"
RECOVER_S = 60  # how long a run waits for a lost cluster (scheduler, workers) to come back between tries
SCATTER_TIMEOUT_S = 60
MERGE_TRIES = 3  # the gradebook gone: tried again after 1 s and 2 s before the run stops
IN_PROCESS_MAX = 2  # at most this many submissions (and no scheduler given): graded here, no cluster


@cache
def _local_cluster(workers: int):
    """A cluster of `workers` processes on this machine (one thread each: a submission at a time), kept for the
    life of this process so that repeated runs (tests, a notebook) start it once."""
    from distributed import LocalCluster

    # everything on loopback, the scheduler's HTTP endpoint included (on a port of its own: never 8787's clash)
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
        memory_limit=0,
        env={v: "1" for v in sandbox.THREAD_VARIABLES} if workers > 1 else {},
    )
    atexit.register(cluster.close)
    _LOCALS.append(cluster)
    return cluster


_LOCALS: list = []


def close_local_clusters() -> None:
    """Close this process's local clusters now (the next run starts one anew, as a new `./course autograde` does)."""
    with _LOCAL_LOCK:
        for cluster in _LOCALS:
            with contextlib.suppress(Exception):
                cluster.close()
        _LOCALS.clear()
        _local_cluster.cache_clear()


_LOCAL_LOCK = threading.Lock()


def _local(workers: int):
    """`_local_cluster`, started once even when two threads ask at once (the early start and the run)."""
    with _LOCAL_LOCK:
        return _local_cluster(workers)


def connect(scheduler: str | None, workers: int, early: ThreadFuture | None = None):
    """A Dask client: on the scheduler at `scheduler` (an error naming it when it cannot be reached), else on this
    machine's own cluster of `workers` processes (or the one `early` started, `_start_early`)."""
    from distributed import Client

    if not scheduler:
        return Client(early.result() if early is not None else _local(workers), set_as_default=False)
    security = tls.client_security(scheduler)  # tls:// needs the cluster's certificate
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False, security=security)
    except (OSError, TimeoutError) as err:
        if "certificate" in str(err).lower():  # a TLS handshake failed: the two ends trust different CAs
            raise CourseError(
                f"the Dask scheduler at {scheduler} and this client do not accept each other's TLS "
                f"certificate ({' '.join(str(err).split())[:200]}); nothing was graded or written. "
                f"Point {', '.join(tls.CLIENT_ENV.values())} at the files of the `./course "
                f"cluster-certs` folder the scheduler was started with"
            ) from err
        raise CourseError(
            f"cannot reach the Dask scheduler at {scheduler} ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:200]}); nothing was graded or written. Start it with "
            f"`dask scheduler` and its workers with `dask worker {scheduler}` in the course's "
            f"environment, or leave out --scheduler to grade on this machine"
        ) from err


def _check_workers(client, unisolated: bool) -> None:
    """Every worker of a remote cluster must be able to isolate students' code (or the instructor said not to)."""
    if unisolated:
        return
    problems = {w: why for w, why in client.run(sandbox.missing).items() if why}
    if problems:
        worker, why = next(iter(problems.items()))
        raise CourseError(f"{len(problems)} of the cluster's workers cannot isolate students' code; {worker}: {why}")


def autograde(
    aid: str,
    *,
    root: Path = ROOT,
    workers: int | None = None,
    students: list[str] | None = None,
    progress: bool = True,
    unisolated: bool = False,
    trust: list[str] | None = None,
    cell_timeout: int = DEFAULT_CELL_TIMEOUT,
    wall_seconds: float = SUBMISSION_WALL_SECONDS,
    scheduler: str | None = None,
    db: str | None = None,
    force: bool = False,
    on_workers: list[str] | None = None,
    in_process: bool = False,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Grade the submissions of `aid` (or `students`) on a Dask cluster; merge each outcome into the gradebook as
    it arrives; set every submission's late penalty under today's due dates; write the reports; return the
    outcomes of this run.

    Each kernel runs in the `sandbox`; where isolation is impossible this refuses, unless `unisolated`. `trust`
    lists students whose code the audit held and the instructor has read. Each cell may run `cell_timeout`
    seconds, each submission `wall_seconds`. `scheduler`: a Dask scheduler's address ($TWOPRIM_SCHEDULER), else
    this machine's cores (`workers`, default one per core). `db`: the gradebook's URL ($TWOPRIM_DB), else
    grader/gradebook.db. `force`: grade again what is already committed in its current form. `on_workers`: only
    these workers of the cluster (their addresses) take the tasks. `in_process`: no cluster; the same tasks run here,
    one after another (`selfgrade`; also up to IN_PROCESS_MAX submissions graded on this machine: starting a
    cluster's workers costs more than grading them). `on_outcome`: called with each outcome once it is committed
    (the benchmark times when each arrives)."""
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    everyone = _check_request(aid, root, students, unisolated=unisolated, remote=bool(scheduler))
    url = database_url(root, db)
    client = connect(scheduler, 1) if scheduler else None  # an unreachable scheduler fails before any write
    try:
        if client is not None:
            _check_workers(client, unisolated)
        init_db(url)
        source = sorted((root / "solutions" / aid).rglob("*.ipynb"))
        files, refused, digests = _read_all(aid, root, students or everyone, source, trust or [])
        todo = _to_grade(aid, url, students or everyone, digests, again=force or bool(students), say=progress)
        if not todo:  # the reports still follow today's due dates
            refresh_late_penalties(aid, root, url)
            write_reports(aid, root=root, url=url)
            return []
        workers = max(1, workers or os.cpu_count() or 1)
        # a few submissions are graded here, one after another: starting a cluster's workers costs more than it
        # saves (2 ex01 submissions, measured: 12 s of CPU here, 33 s on a cluster of 2 workers)
        in_process = in_process or (client is None and len(todo) <= IN_PROCESS_MAX)
        threads = 1 if (scheduler or (min(workers, len(todo)) > 1 and not in_process)) else None
        warm = None if unisolated or in_process else (aid, threads, _test_cells(source), on_workers)
        client, released = _cluster_and_release(
            client, aid, root, url, min(workers, len(todo)), warm, start_here=client is None and not in_process
        )
        reconnect = (lambda: connect(scheduler, 1)) if scheduler else None
        run = _Run(client, aid, root, url, digests, on_outcome=on_outcome, on_workers=on_workers, reconnect=reconnect)
        try:
            return run.grade(
                todo,
                files,
                refused,
                released,
                progress=progress,
                trust=set(trust or []),
                unisolated=unisolated,
                cell_timeout=cell_timeout,
                wall_seconds=wall_seconds,
                kernel_threads=threads,
            )
        finally:
            client = run.client
    finally:
        if client is not None:
            # closing a client whose scheduler died can itself raise (a half-closed TLS stream: "IOStream is not
            # idle"): what the run recorded stands, so that never becomes the command's error
            with contextlib.suppress(Exception):
                client.close()


def _check_request(aid: str, root: Path, students: list[str] | None, *, unisolated: bool, remote: bool) -> list[str]:
    """Every student who submitted `aid`; refuses (SystemExit) a named student with no submission, and, on this
    machine, grading without isolation unless the instructor said `unisolated` (a remote cluster's workers are
    checked once connected, `_check_workers`)."""
    if not unisolated and not remote:
        why = sandbox.missing()
        if why:
            raise SystemExit(f"error: cannot isolate students' code: {why}")
    everyone = submitted_students(aid, root)
    unknown = sorted(set(students or []) - set(everyone))
    if unknown:
        raise SystemExit(f"error: no submission of {aid} for {', '.join(unknown)} under grader/submitted/")
    return everyone


def _to_grade(aid: str, url: str, names: list[str], digests: dict[str, str], *, again: bool, say: bool) -> list[str]:
    """The students of `names` to grade: all when `again`, else those whose submission is not committed in its
    current form (`digests`); says how many are left as they are when `say`."""
    done = committed(aid, url) if not again else {}
    todo = [s for s in names if done.get(s) != digests[s]]
    if say and len(todo) < len(names):
        print(
            f"{len(names) - len(todo)} submission(s) of {aid} already graded in their current form; grading "
            f"{len(todo)} (--force grades every one again)"
        )
    return todo


def _read_all(
    aid: str, root: Path, names: list[str], source: list[Path], trust: list[str]
) -> tuple[dict, dict, dict[str, str]]:
    """Each named student's submitted files, what was refused of them, and the digest of what grading them depends
    on (their files, the assignment's source, whether the instructor trusts them, what was refused): a submission is
    graded again only when that digest changes."""
    read = {s: read_submission(aid, s, root) for s in names}
    files = {s: f for s, (f, _) in read.items()}
    refused = {s: r for s, (_, r) in read.items()}
    digests = {
        s: digest(
            f,
            *(p.read_bytes() for p in source),
            str(s in trust).encode(),
            repr(sorted(refused[s].items())).encode(),
        )
        for s, f in files.items()
    }
    return files, refused, digests


def _cluster_and_release(client, aid: str, root: Path, url: str, workers: int, warm: tuple | None, *, start_here: bool):
    """The run's client and the released notebooks: with `start_here`, this machine's cluster of `workers` starts (and
    warms, `warm`) in a thread while the release is made; a remote cluster's workers are warmed first."""
    early = None
    if start_here:
        early = _start_early(workers, warm)
    elif client is not None and warm is not None:
        _warm_workers(client, *warm)
    released = released_notebooks(aid, root, url)
    if start_here:
        client = connect(None, workers, early)
    return client, released


def _test_cells(source: list[Path]) -> list[list[str]]:
    """Each source notebook's graded test cells (what a grading kernel's launcher hands the forkserver to warm)."""
    import nbformat

    from twoprim.core import verdicts

    return [[cell.code for cell in verdicts.graded_cells(nbformat.read(str(path), as_version=4))] for path in source]


def _start_early(workers: int, warm: tuple | None) -> ThreadFuture:
    """This machine's cluster of `workers`, started in a thread of its own while this process prepares the run
    (and its workers warmed for the assignment, `_warm_workers`, as soon as they are up); its future."""

    def start():
        cluster = _local(workers)
        if warm is not None:
            from distributed import Client

            with contextlib.suppress(Exception), Client(cluster, set_as_default=False) as client:
                _warm_workers(client, *warm)
        return cluster

    pool = ThreadPoolExecutor(1, thread_name_prefix="twoprim-cluster-start")
    try:
        return pool.submit(start)
    finally:
        pool.shutdown(wait=False)


def _warm_workers(client, aid: str, threads: int | None, cells: list[list[str]], on_workers=None) -> None:
    """Each worker (of `on_workers`) starts its forkserver and warms `aid`'s checks and test cells in it, in its
    keeper thread (`keeper`), while it takes its first tasks. A worker that cannot is warmed by its first task."""
    with contextlib.suppress(Exception):
        client.run(keeper.warm_worker, f"twoprim.{checks_module_name(aid)}", threads, cells, workers=on_workers)


def _grade_on_worker(task: dict, snapshot: bytes, dataset: str | None) -> Outcome:
    """A grading task on the cluster: the worker's forkserver made sure of by its keeper (`keeper`), then
    `grade_task`, whose judge takes the run's expected values (published as `dataset`) cell by cell
    (`oracle.Expected`)."""
    if not task["unisolated"]:
        keeper.forkserver(task.get("kernel_threads"))
    expect = oracle.Expected(dataset) if dataset else None
    try:
        out = grade_task(task, snapshot, expect)
    finally:
        if expect is not None:
            expect.release()
    out.expected_given = expect.given if expect is not None else 0
    return out


class _Run:
    """One autograde run on a cluster (or here, `client` None): every submission graded, each outcome committed as
    it arrives, a fault of the grader retried (`MAX_ATTEMPTS` in all, re-sending the gradebook snapshot a lost
    worker took with it, waiting up to `RECOVER_S` for the cluster to come back), a submission that ran into a time
    limit beside other grading graded again alone, and what could still not be graded recorded as not graded."""

    def __init__(self, client, aid, root, url, digests, *, on_outcome=None, on_workers=None, reconnect=None):
        self.client, self.aid, self.root, self.url, self.digests = client, aid, root, url, digests
        self.on_outcome, self.on_workers, self.reconnect = on_outcome, on_workers, reconnect
        self.outcomes: list[Outcome] = []
        self.logs: dict[str, str] = {}  # student -> the log of the grader's last failure on it (`Outcome.log`)
        self.counts: collections.Counter = collections.Counter()
        self.bar = None

    def grade(
        self, todo, files, refused, released, *, progress, trust, unisolated, cell_timeout, wall_seconds, kernel_threads
    ) -> list[Outcome]:
        import tempfile

        from tqdm import tqdm

        aid, root, url = self.aid, self.root, self.url
        folder = root / "solutions" / aid
        self.source = {
            str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*.ipynb"))
            if ".ipynb_checkpoints" not in p.parts
        }
        with tempfile.TemporaryDirectory(prefix=f"autograde-{aid}-") as tmp, scratch_gradebooks(Path(tmp)):
            self.snap = snapshot(aid, root, url, Path(tmp)).read_bytes()
        self.tasks = {
            student: make_task(
                aid,
                student,
                files[student],
                root=root,
                released=released,
                cell_timeout=cell_timeout,
                wall_seconds=wall_seconds,
                trusted=student in trust,
                unisolated=unisolated,
                kernel_threads=kernel_threads,
                refused=refused[student],
            )
            for student in todo
        }
        self.bar = tqdm(
            total=len(todo),
            unit="student",
            disable=not progress,
            dynamic_ncols=True,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}",
        )
        faults: dict[str, str] = {}
        try:
            if self.client is None:  # here, one after another
                for student in todo:
                    outcome = grade_task(self.tasks[student], self.snap)
                    for _ in range(MAX_ATTEMPTS - 1):
                        if outcome.status != NOT_GRADED:
                            break
                        outcome = grade_task(self.tasks[student], self.snap)
                    self._settle(student, outcome, faults)
            else:
                self._on_cluster(todo, faults)
            for student in sorted(faults):  # still not graded: said so, no grade written or changed
                outcome = Outcome(student, status=NOT_GRADED, reason=self._keep_log(student, faults[student]))
                record_not_graded(aid, student, outcome.reason, url, digest_of=self.digests[student])
                self.outcomes.append(outcome)
                self._count(outcome)
        except GradebookUnavailable as err:
            if self.client is not None:
                with contextlib.suppress(Exception):
                    self.client.cancel(list(getattr(self, "futures", {})))
            left = sorted(set(todo) - {o.student for o in self.outcomes})
            raise GradebookUnavailable(
                f"{str(err).removeprefix('error: ')}. {len(self.outcomes)} of {len(todo)} submissions were "
                f"committed before it went away and are kept; run the same command again to grade the other "
                f"{len(left)} ({_names(left)})"
            ) from err
        finally:
            self.bar.close()
        self.outcomes.sort(key=lambda o: o.student)
        try:
            refresh_late_penalties(aid, root, url)  # those graded before this run, under today's due dates
            write_reports(aid, root=root, url=url)
        except GradebookUnavailable as err:
            raise GradebookUnavailable(
                f"{str(err).removeprefix('error: ')}; every submission of this run was "
                f"committed before it went away: run `./course report {aid}` once it is "
                f"back"
            ) from err
        return self.outcomes

    def _on_cluster(self, todo, faults) -> None:
        """Every submission of `todo` on the cluster, in rounds: those the cluster lost go again in the next."""
        concurrent = len(todo) > 1 and self._threads() > 1
        left, alone, attempts = list(todo), [], collections.Counter()

        def handle(student: str, outcome: Outcome) -> None:
            if outcome.status == NOT_GRADED:
                faults[student] = f"{outcome.reason} (tried {attempts[student]} times)"
                self.logs[student] = outcome.log
                left.append(student)
            elif outcome.time_limit and concurrent and not outcome.limit_by_cpu:
                alone.append((student, outcome))  # timed on the wall clock: graded again alone before it counts
            else:
                self._settle(student, outcome, faults)

        for round_ in range(MAX_ATTEMPTS):
            sending, left[:] = list(left), []
            for student in sending:
                attempts[student] += 1
            self._submit(sending, attempts, handle)
            if not left or round_ == MAX_ATTEMPTS - 1 or not self._recover():
                break
        for student, first in alone:
            got: list[Outcome] = []
            self._submit([student], {student: "alone"}, lambda _, o, got=got: got.append(o))
            outcome = got[0] if got and got[0].status != NOT_GRADED else first
            outcome.reason = (
                f"{outcome.reason}; graded again alone, with nothing else of this run beside it, "
                f"after it ran into {first.time_limit} beside other submissions"
            )
            self._settle(student, outcome, faults)

    def _threads(self) -> int:
        try:
            info = self.client.scheduler_info()["workers"]
            return sum(w.get("nthreads", 1) for a, w in info.items() if not self.on_workers or a in self.on_workers)
        except Exception:  # noqa: BLE001
            return 2

    def _submit(self, students, attempts, handle) -> None:
        """Grade `students` on the cluster (the snapshot sent again each time: the copies a lost worker held are
        gone) and `handle` each outcome as it arrives; a lost task or cluster as a NOT_GRADED one saying why."""
        from distributed import as_completed

        client, seen, dataset = self.client, set(), None
        try:
            snap = client.scatter(self.snap, broadcast=True, workers=self.on_workers, timeout=SCATTER_TIMEOUT_S)
            expected = self._expected(students, snap)
            if expected:  # not a dependency of the grading tasks: each judge takes what it needs (`oracle.Expected`)
                dataset = f"twoprim-expected-{self.aid}-{id(self):x}-{next(_RUNS)}"
                client.publish_dataset(**{dataset: expected})
            keys = [
                f"grade-{self.aid}-{student}-{self.digests[student][:12]}"
                + ("" if attempts[student] == 1 else f".{attempts[student]}")
                for student in students
            ]
            # in one batch, as the expected values: the scheduler orders each batch by priority as a whole
            futures = client.map(
                _grade_on_worker,
                [self.tasks[s] for s in students],
                [snap] * len(students),
                [dataset] * len(students),
                key=keys,
                pure=False,
                workers=self.on_workers,
                allow_other_workers=False,
            )
            self.futures = dict(zip(futures, students, strict=True))
            for future in as_completed(self.futures, loop=client.loop):
                student = self.futures[future]
                seen.add(student)
                handle(student, _result(future, student))
        except GradebookUnavailable:
            raise
        except Exception as err:  # noqa: BLE001 - the cluster went away: its tasks were lost, not graded
            why = _fault(err, "the connection to the cluster was lost")
            for student in students:
                if student not in seen:
                    handle(student, Outcome(student, status=NOT_GRADED, reason=why))
        finally:
            if dataset is not None and client.status == "running":  # the run's expected values, let go of
                with contextlib.suppress(Exception):  # (bounded: a scheduler that went away answers nothing)
                    client.unpublish_dataset(dataset, callback_timeout=10)

    def _expected(self, students, snap) -> dict:
        """The expected values of every graded test cell, one task per cell spread over the workers, by the cell's
        digest, for every grading task to take (`oracle`): each is computed once in the run, not once per worker.
        No tasks for a single submission or a single worker, which would compute them all anyway. They are submitted
        in one batch (`Client.map`), as the grading tasks are after them, and depend on the scattered snapshot
        `snap` as those do (they ignore it): Dask decides once per batch whether to queue a batch's tasks at the
        scheduler or send them to the workers at once, and one task at a time (`submit`) sent the first few of each
        kind at once and queued the rest, so that submissions ran before most of the expected values they wait
        for; batched alike, both kinds are queued and go out by priority, the expected values first."""
        from twoprim.core.verdicts import cell_digest

        if len(students) < 2 or self._threads() < 2:
            return {}
        cells = oracle.graded_cells(self.source)
        if not cells:
            return {}
        gids, codes, learners = (list(column) for column in zip(*cells, strict=True))
        futures = self.client.map(
            oracle.cell_values,
            gids,
            codes,
            learners,
            [snap] * len(cells),
            pure=False,
            priority=1,
            key=[
                f"expected-{self.aid}-{cell_digest(g, c)[:16]}-{id(self):x}" for g, c in zip(gids, codes, strict=True)
            ],
            workers=self.on_workers,
            allow_other_workers=False,
        )
        return {cell_digest(g, c): f for g, c, f in zip(gids, codes, futures, strict=True)}

    def _recover(self) -> bool:
        """Wait (up to RECOVER_S) for the cluster to grade again: a worker, on a scheduler this client reaches."""
        deadline = time.monotonic() + RECOVER_S
        while time.monotonic() < deadline:
            try:
                if self.client.status not in ("running", "connecting") and self.reconnect is not None:
                    with contextlib.suppress(Exception):
                        self.client.close()
                    self.client = self.reconnect()
                if self.client.status == "running":
                    self.client.wait_for_workers(1, timeout=max(1.0, deadline - time.monotonic()))
                    return True
            except (Exception, CourseError):  # noqa: BLE001 - not back yet (CourseError: the scheduler unreachable)
                pass
            time.sleep(1)
        return False

    def _settle(self, student, outcome, faults) -> None:
        """Commit one outcome (a fault of the grader is kept for the end, never merged)."""
        if outcome.status == NOT_GRADED:
            faults[student] = outcome.reason
            self.logs[student] = outcome.log
            return
        if any(o.student == student for o in self.outcomes):
            return
        for attempt in range(MERGE_TRIES):
            try:
                merge(self.aid, outcome, self.root, self.url, digest_of=self.digests[student])
                break
            except GradebookUnavailable:
                if attempt == MERGE_TRIES - 1:
                    raise
                time.sleep(2**attempt)
        faults.pop(student, None)
        self.logs.pop(student, None)
        self._log_path(student).unlink(missing_ok=True)  # an earlier run's log of the grader's failure: resolved
        self.outcomes.append(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        self._count(outcome)

    def _log_path(self, student: str) -> Path:
        return self.root / "grader" / "reports" / f"{self.aid}-not-graded" / f"{student}.log"

    def _keep_log(self, student: str, reason: str) -> str:
        """The reason of a submission still not graded, naming the file where the grader's log and traceback of its
        last failure are kept for the instructor (grader/reports/<aid>-not-graded/<student>.log), when there is one."""
        log = self.logs.get(student)
        if not log:
            return reason
        path = self._log_path(student)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{student}'s submission of {self.aid} was not graded: {reason}\n\n{log}\n")
        return f"{reason}; the grader's log and traceback: {path.relative_to(self.root)}"

    def _count(self, outcome) -> None:
        self.counts[outcome.status] += 1
        if self.bar is not None:
            self.bar.set_postfix_str(
                ", ".join(f"{n} {status}" for status, n in sorted(self.counts.items()))
                + f"; {outcome.student}"
                + (f" on {outcome.worker}" if outcome.worker else "")
            )
            self.bar.update(1)


_RUNS = itertools.count()  # tells one run's published expected values from another's


def _names(students: list[str], most: int = 12) -> str:
    return ", ".join(students[:most]) + (f" and {len(students) - most} more" if len(students) > most else "")


def _fault(err: BaseException, what: str) -> str:
    return f"{what} ({type(err).__name__}: {' '.join(str(err).split())[:200]})"


def _result(future, student: str) -> Outcome:
    """The outcome a task returned, or a NOT_GRADED one saying why the cluster could not grade it: a lost worker,
    a lost scheduler, a cancelled task are faults of the grader, never a student's grade."""
    from distributed import KilledWorker

    try:
        return future.result()
    except KilledWorker as err:
        return Outcome(
            student,
            status=NOT_GRADED,
            reason=f"every worker that took this submission died while grading it ({err}); if it happens "
            f"again, look for a notebook that brings down the machine",
        )
    except Exception as err:  # noqa: BLE001 - one student's task failing never stops the batch
        return Outcome(student, status=NOT_GRADED, reason=_fault(err, "the cluster lost this submission's task"))
