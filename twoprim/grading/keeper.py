"""In a grading worker on a cluster, the thread that starts its forkserver and lives as long as the worker.

The sandbox ends a forkserver with the thread that started it (bubblewrap's --die-with-parent), and a Dask task's
thread may end while its worker goes on: one that left the worker's thread pool to wait for the run's expected values
(`oracle.Expected`) leaves it for good once its task is done. So a worker's forkserver is started here, by one thread
that never ends (`Keeper`), and grading tasks ask it (`forkserver`) before they need it.

As soon as a worker is up, the run has it warm the assignment (`warm_worker`, through `Client.run`): the keeper
starts the forkserver and has it warm the assignment's checks and each notebook's test cells (a request that forks
nothing, `forkserver.serve`), while the worker itself computes expected values, so that the first kernel of the
assignment is forked at once. This module imports nothing but the standard library when it is loaded: `Client.run`
unpickles `warm_worker` in the worker's event loop, which must not wait for torch; the keeper imports it.
"""

from __future__ import annotations

import queue
import threading

__all__ = ["Keeper", "warm_worker", "forkserver", "WAIT_S"]

WAIT_S = 300  # a forkserver started (its imports, on a busy machine) and an assignment warmed in it, at most


class Keeper(threading.Thread):
    """The worker's keeper thread: runs what it is given, one job after another, for the life of the worker."""

    _running: Keeper | None = None
    _lock = threading.Lock()

    def __init__(self):
        super().__init__(daemon=True, name="twoprim-forkserver-keeper")
        self.jobs: queue.Queue = queue.Queue()

    @classmethod
    def get(cls) -> Keeper:
        """This worker's keeper, started on first use."""
        with cls._lock:
            if cls._running is None or not cls._running.is_alive():
                cls._running = cls()
                cls._running.start()
            return cls._running

    def run(self) -> None:
        while True:  # as long as the worker: unbounded by design
            job, done = self.jobs.get()
            try:
                job()
            except Exception:  # noqa: BLE001 - a grading task starts the forkserver itself, and says what failed
                pass
            finally:
                done.set()

    def do(self, job) -> threading.Event:
        """Queue `job`; the event is set once it has run."""
        done = threading.Event()
        self.jobs.put((job, done))
        return done


def warm_worker(module: str, threads: int | None, cells: list[list[str]]) -> None:
    """At once, in the worker (`Client.run`): its keeper starts the forkserver (`kernels.warm_forkserver(threads)`),
    has it warm `module` and each notebook's test `cells`, and meanwhile imports what the worker's grading tasks
    import (nbgrader, the grading modules: a worker's first task would). Returns before any of that has run."""

    def job():
        import json
        import socket

        from twoprim.grading import kernels

        server = kernels.warm_forkserver(threads)
        asked = []
        try:
            for notebook in cells:
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                asked.append(conn)
                conn.settimeout(WAIT_S)
                conn.connect(str(server.socket))
                conn.sendall((json.dumps({"warm": True, "module": module, "cells": notebook}) + "\n").encode())
            _import_grading()  # while the forkserver warms
            for conn in asked:
                conn.recv(1024)  # its answer, once warmed
        finally:
            for conn in asked:
                conn.close()

    Keeper.get().do(job)


def _import_grading() -> None:
    """What a worker's first grading task would import (nbgrader's autograde, the grader's judging)."""
    import nbgrader.apps.api
    import nbgrader.preprocessors  # noqa: F401

    import twoprim.grading.execute
    import twoprim.grading.oracle
    import twoprim.grading.submission  # noqa: F401


def forkserver(threads: int | None) -> None:
    """In a grading task: the worker's forkserver for `threads` running, started by the keeper if it is not (after
    whatever the keeper was given before, such as `warm_worker`); waits WAIT_S at most."""

    def job():
        from twoprim.grading import kernels

        kernels.warm_forkserver(threads)

    Keeper.get().do(job).wait(WAIT_S)
