"""Autograde a class on a Dask cluster: each submission is one task (`submission.grade_task`), run by whichever
worker is free, on this machine (a `LocalCluster` of worker processes, the default) or on a cluster of many
(`--scheduler tls://HOST:8786`, with Dask's TLS: `tls`; the same code runs on Slurm/PBS through dask-jobqueue and
on Kubernetes through dask-kubernetes). One grading path: local grading is the same tasks on a local cluster.

Results come back to this process, which alone writes the gradebook (SQLite or PostgreSQL, `gradebook`) and the
reports, one submission per transaction, as they arrive. Dask regrades a task whose worker died on another worker;
a grade is merged once, when its result arrives. A submission already committed in its current form (same files,
same assignment source) is not graded again unless named with `--student` or `--force`, so a run that stopped half
way (the database went away) is finished by running it again.
"""
from __future__ import annotations

import atexit
import collections
import logging
import os
from functools import cache
from pathlib import Path
from typing import Callable

from .. import sandbox
from ..nbgrader_cli import CourseError
from ..notebooks import ROOT
from .gradebook import (GradebookUnavailable, committed, database_url, digest, init_db, merge, refresh_late_penalties,
                        released_notebooks, scratch_gradebooks, snapshot, submission_files, submitted_students)
from .preprocessors import DEFAULT_CELL_TIMEOUT
from .reports import write_reports
from .submission import SUBMISSION_WALL_SECONDS, Outcome, grade_task, make_task
from . import tls

__all__ = ["autograde", "connect", "SCHEDULER_ENV"]

SCHEDULER_ENV = "TWOPRIM_SCHEDULER"
CONNECT_TIMEOUT_S = 10


@cache
def _local_cluster(workers: int):
    """A cluster of `workers` processes on this machine (one thread each: a submission at a time), kept for the
    life of this process so that repeated runs (tests, a notebook) start it once."""
    from distributed import LocalCluster

    # everything on loopback, the scheduler's HTTP endpoint included (on a port of its own: never 8787's clash)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR, memory_limit=0,
                           env={v: "1" for v in sandbox.THREAD_VARIABLES} if workers > 1 else {})
    atexit.register(cluster.close)
    return cluster


def connect(scheduler: str | None, workers: int):
    """A Dask client: on the scheduler at `scheduler` (an error naming it when it cannot be reached), else on this
    machine's own cluster of `workers` processes."""
    from distributed import Client

    if not scheduler:
        return Client(_local_cluster(workers), set_as_default=False)
    security = tls.client_security(scheduler)  # tls:// needs the cluster's certificate
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False, security=security)
    except (OSError, TimeoutError) as err:
        if "certificate" in str(err).lower():  # a TLS handshake failed: the two ends trust different CAs
            raise CourseError(f"the Dask scheduler at {scheduler} and this client do not accept each other's TLS "
                              f"certificate ({' '.join(str(err).split())[:200]}); nothing was graded or written. "
                              f"Point {', '.join(tls.CLIENT_ENV.values())} at the files of the `./course "
                              f"cluster-certs` folder the scheduler was started with") from err
        raise CourseError(f"cannot reach the Dask scheduler at {scheduler} ({type(err).__name__}: "
                          f"{' '.join(str(err).split())[:200]}); nothing was graded or written. Start it with "
                          f"`dask scheduler` and its workers with `dask worker {scheduler}` in the course's "
                          f"environment, or leave out --scheduler to grade on this machine") from err


def _check_workers(client, unisolated: bool) -> None:
    """Every worker of a remote cluster must be able to isolate students' code (or the instructor said not to)."""
    if unisolated:
        return
    problems = {w: why for w, why in client.run(sandbox.missing).items() if why}
    if problems:
        worker, why = next(iter(problems.items()))
        raise CourseError(f"{len(problems)} of the cluster's workers cannot isolate students' code; {worker}: {why}")


def autograde(aid: str, *, root: Path = ROOT, workers: int | None = None, students: list[str] | None = None,
              progress: bool = True, unisolated: bool = False, trust: list[str] | None = None,
              cell_timeout: int = DEFAULT_CELL_TIMEOUT, wall_seconds: float = SUBMISSION_WALL_SECONDS,
              scheduler: str | None = None, db: str | None = None, force: bool = False,
              on_workers: list[str] | None = None, in_process: bool = False,
              on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Grade the submissions of `aid` (or `students`) on a Dask cluster; merge each outcome into the gradebook as
    it arrives; set every submission's late penalty under today's due dates; write the reports; return the
    outcomes of this run.

    Each kernel runs in the `sandbox`; where isolation is impossible this refuses, unless `unisolated`. `trust`
    lists students whose code the audit held and the instructor has read. Each cell may run `cell_timeout`
    seconds, each submission `wall_seconds`. `scheduler`: a Dask scheduler's address ($TWOPRIM_SCHEDULER), else
    this machine's cores (`workers`, default one per core). `db`: the gradebook's URL ($TWOPRIM_DB), else
    grader/gradebook.db. `force`: grade again what is already committed in its current form. `on_workers`: only
    these workers of the cluster (their addresses) take the tasks. `in_process`: no cluster; the same tasks run here,
    one after another (`selfgrade`; also one submission graded on this machine: starting a cluster's worker costs
    more than grading it). `on_outcome`: called with each outcome once it is committed (the benchmark times when
    each arrives)."""
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if not unisolated and not scheduler:
        why = sandbox.missing()
        if why:
            raise SystemExit(f"error: cannot isolate students' code: {why}")
    everyone = submitted_students(aid, root)
    unknown = sorted(set(students or []) - set(everyone))
    if unknown:
        raise SystemExit(f"error: no submission of {aid} for {', '.join(unknown)} under grader/submitted/")
    url = database_url(root, db)
    client = connect(scheduler, 1) if scheduler else None  # an unreachable scheduler fails before any write
    try:
        if client is not None:
            _check_workers(client, unisolated)
        init_db(url)
        released = released_notebooks(aid, root, url)
        source = sorted((root / "solutions" / aid).rglob("*.ipynb"))
        files = {s: submission_files(aid, s, root) for s in (students or everyone)}
        digests = {s: digest(f, *(p.read_bytes() for p in source), str(s in (trust or [])).encode())
                   for s, f in files.items()}
        done = committed(aid, url) if not (force or students) else {}
        todo = [s for s in (students or everyone) if done.get(s) != digests[s]]
        if progress and len(todo) < len(students or everyone):
            print(f"{len(students or everyone) - len(todo)} submission(s) of {aid} already graded in their current "
                  f"form; grading {len(todo)} (--force grades every one again)")
        if not todo:  # the reports still follow today's due dates
            refresh_late_penalties(aid, root, url)
            write_reports(aid, root=root, url=url)
            return []
        workers = max(1, workers or os.cpu_count() or 1)
        in_process = in_process or (client is None and len(todo) == 1)  # one submission: no worker to start
        if client is None and not in_process:
            client = connect(None, min(workers, len(todo)))
        return _run(client, aid, root, url, todo, files, digests, released, progress=progress, trust=set(trust or []),
                    unisolated=unisolated, cell_timeout=cell_timeout, wall_seconds=wall_seconds,
                    kernel_threads=1 if (scheduler or (min(workers, len(todo)) > 1 and client is not None)) else None,
                    on_workers=on_workers, on_outcome=on_outcome)
    finally:
        if client is not None:
            client.close()


def _run(client, aid, root, url, todo, files, digests, released, *, progress, trust, unisolated, cell_timeout,
         wall_seconds, kernel_threads, on_workers=None, on_outcome=None) -> list[Outcome]:
    import tempfile

    from distributed import as_completed
    from tqdm import tqdm

    with tempfile.TemporaryDirectory(prefix=f"autograde-{aid}-") as tmp, scratch_gradebooks(Path(tmp)):
        snap = snapshot(aid, root, url, Path(tmp)).read_bytes()
    if client is not None:
        snap = client.scatter(snap, broadcast=True, workers=on_workers)
    tasks = {student: make_task(aid, student, files[student], root=root, released=released,
                                cell_timeout=cell_timeout, wall_seconds=wall_seconds, trusted=student in trust,
                                unisolated=unisolated, kernel_threads=kernel_threads) for student in todo}
    if client is None:  # here, one after another
        futures = {}
        results = ((student, grade_task(task, snap)) for student, task in tasks.items())
    else:
        futures = {client.submit(grade_task, task, snap, key=f"grade-{aid}-{student}-{digests[student][:12]}",
                                 pure=False, workers=on_workers, allow_other_workers=False): student
                   for student, task in tasks.items()}
        results = ((futures[f], _result(f, futures[f])) for f in as_completed(futures, loop=client.loop))
    bar = tqdm(total=len(tasks), unit="student", disable=not progress, dynamic_ncols=True,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}")
    outcomes: list[Outcome] = []
    by_worker: collections.Counter = collections.Counter()
    failed = 0
    try:
        for student, outcome in results:
            try:
                merge(aid, outcome, root, url, digest_of=digests[student])
            except GradebookUnavailable as err:
                if client is not None:
                    client.cancel(list(futures))
                bar.close()
                left = len(tasks) - len(outcomes)
                raise GradebookUnavailable(
                    f"{str(err).removeprefix('error: ')}. {len(outcomes)} of {len(tasks)} submissions were "
                    f"committed before it went away and are kept; run the same command again to grade the other "
                    f"{left}") from err
            outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome)
            by_worker[outcome.worker] += 1
            failed += outcome.status == "failed"
            bar.set_postfix_str(f"graded {len(outcomes) - failed}, failed {failed}; {outcome.student} on "
                                f"{outcome.worker}")
            bar.update(1)
    finally:
        bar.close()
    if progress and len(by_worker) > 1:
        print("graded by: " + ", ".join(f"{w} ({n})" for w, n in sorted(by_worker.items())))
    outcomes.sort(key=lambda o: o.student)
    try:
        refresh_late_penalties(aid, root, url)  # those graded before this run, under today's due dates
        write_reports(aid, root=root, url=url)
    except GradebookUnavailable as err:
        raise GradebookUnavailable(f"{str(err).removeprefix('error: ')}; every submission of this run was committed "
                                   f"before it went away: run `./course report {aid}` once it is back") from err
    return outcomes


def _result(future, student: str) -> Outcome:
    """The outcome a task returned, or a failed one saying why the cluster could not grade it."""
    from distributed import KilledWorker

    try:
        return future.result()
    except KilledWorker as err:
        return Outcome(student, reason=f"every worker that took this submission died while grading it ({err}); "
                                       f"look for a notebook that brings down the machine")
    except Exception as err:  # noqa: BLE001 - one student's task failing never stops the batch
        return Outcome(student, reason=f"the cluster could not grade it: {type(err).__name__}: {err}")
