"""Grading beyond one machine: the same class graded on a Dask cluster (a scheduler and two `dask worker`
processes, every connection under Dask's TLS with `./course cluster-certs` certificates) into a PostgreSQL gradebook
gets exactly the grades local SQLite grading gives, also when a worker dies in the middle of a submission or
PostgreSQL goes down half way; an unreachable scheduler, or one this client has no certificate for, is refused before
anything is written. Every server is real, started here on loopback."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import threading
import time
from pathlib import Path
from typing import cast

import psutil
import pytest
from dask import config as dask_config
from nbgrader.api import Gradebook

from twoprim import course as course_cli
from twoprim import grading
from twoprim.core.errors import CourseError
from twoprim.grading import cluster, tls

from .classroom import answered, course_copy, prepend, solution_code, student_version, write
from .servers import DaskCluster, Postgres, free_port

# left out of `make test-fast`; a limit of its own: PostgreSQL, a Dask scheduler and two workers start in the first
# test's setup, then a class is graded
pytestmark = [pytest.mark.servers, pytest.mark.timeout(300)]

AID = "ex01_dot"
SOL = {fn: f"{AID}-{fn}-solution" for fn in ("dot_loop", "dot", "neuron", "cosine_similarity", "top_k")}
CRASHING = ["crash_exit", "crash_segfault"]
CLASS_SIZE = 10  # _class


def _class(course: Path) -> None:
    """10 students: 2 correct (the same file from two students), a blank, one wrong function each for 5, 2 whose
    kernels crash. Every kind once or twice: each extra copy is graded again in every run of every test here."""
    submitted = course / "grader" / "submitted"
    for i in range(2):
        write(submitted, f"correct{i}", AID, answered(AID))
    write(submitted, "blank0", AID, student_version(AID))
    for fn, gid in SOL.items():
        write(
            submitted,
            f"wrong_{fn}",
            AID,
            answered(AID, {gid: solution_code(AID)[gid] + f"\n\ndef {fn}(*args, **kwargs):\n    return None\n"}),
        )
    write(submitted, "crash_exit", AID, prepend(AID, SOL["cosine_similarity"], "import os\nos._exit(3)"))
    write(submitted, "crash_segfault", AID, prepend(AID, SOL["top_k"], "import ctypes\nctypes.string_at(0)"))


def _course(base: Path) -> Path:
    _class(course_copy(base, AID))
    return base


def _grades(url: str) -> dict[str, dict[str, float]]:
    with Gradebook(grading.database_url(Path("/"), url), grading.COURSE_ID) as gb:
        return {
            s.student.id: {g.name: g.score for nb in s.notebooks for g in nb.grades}
            for s in gb.assignment_submissions(AID)
        }


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The class graded locally, into SQLite: the grades every other way of grading must give. Graded in this
    process, one after another (the same tasks a local cluster runs: no cluster's workers to start for it)."""
    course = _course(tmp_path_factory.mktemp("local"))
    outcomes = grading.autograde(AID, root=course, progress=False, trust=CRASHING, in_process=True)
    grades = _grades(f"sqlite:///{course / 'grader' / 'gradebook.db'}")
    assert len(grades) == CLASS_SIZE and {o.student for o in outcomes} == set(grades)
    assert sum(grades["correct0"].values()) == 15 and sum(grades["blank0"].values()) == 0
    assert {o.student: o.status for o in outcomes}["crash_exit"] == "failed"
    return grades


@pytest.fixture(scope="module")
def servers(tmp_path_factory, monkeypatch_module):
    base = tmp_path_factory.mktemp("servers")
    pg = Postgres().init().start()
    monkeypatch_module.setenv("PGPASSWORD", pg.password)  # how libpq gets it: never a file, never the URL
    dask = DaskCluster(base / "dask", workers=2, tls=tls.cluster_certs(base / "tls"))
    try:
        dask.start()
        with dask_config.set(_client_config(dask.tls)):  # how an instructor's client finds them: Dask's config
            yield pg, dask
    finally:
        dask.stop()
        pg.remove()


def _client_config(certs: dict[str, Path] | None) -> dict:
    return {
        "distributed.comm.tls.ca-file": certs and str(certs["ca"]),
        "distributed.comm.tls.client.cert": certs and str(certs["cert"]),
        "distributed.comm.tls.client.key": certs and str(certs["key"]),
    }


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _is_kernel_launch(proc: psutil.Process) -> bool:
    """Whether `proc` is a forkserver's kernel launch; a process that ends (or is a zombie) while we look is not."""
    try:
        cmdline = proc.cmdline()
    except psutil.Error:  # NoSuchProcess, ZombieProcess (a finished submission's kernel not yet reaped)
        return False
    return "twoprim.grading.forkserver" in " ".join(cmdline) and "launch" in cmdline


def _in_flight(dask: DaskCluster, worker: str, timeout: float = 120) -> set[str]:
    """Students whose submission `worker` is grading, once one of its kernels is running."""
    pid = dask.procs[worker].pid
    deadline = time.monotonic() + timeout
    with dask.client(timeout=10) as client:
        while time.monotonic() < deadline:
            kernels = [p for p in psutil.Process(pid).children(recursive=True) if _is_kernel_launch(p)]
            processing = cast("dict", client.processing(workers=[dask.workers[worker]]))  # a dict (sync client)
            keys = processing.get(dask.workers[worker], [])
            if kernels and keys:
                return {k.removeprefix(f"grade-{AID}-").rsplit("-", 1)[0] for k in keys}
            time.sleep(0.1)
    raise AssertionError(f"{worker} started no kernel within {timeout:.0f} s:\n{dask.logs()}")


def _graded_in_background(course: Path, dask: DaskCluster, url: str, **options) -> tuple[threading.Thread, dict]:
    """`./course autograde` of the class (its printing path and exit status) on the cluster, in a thread."""
    done: dict = {}

    def run():
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                done["rc"] = course_cli.run_autograde(
                    AID, root=course, progress=False, trust=CRASHING, scheduler=dask.address, db=url, **options
                )
        except BaseException as err:  # noqa: BLE001 - reported by the test
            done["error"] = err
        done["printed"] = out.getvalue()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


def test_workers_killed_mid_submission_with_the_scattered_gradebook_lose_and_double_nothing(
    tmp_path, servers, reference
):
    """worker0 dies in the middle of a submission (its tasks go to worker1), then worker1 too, taking with it every
    copy of the assignment's gradebook snapshot the run scattered (Dask cancels every task that needs it: "already
    forgotten"). Both come back; the run sends the snapshot again, grades what was lost, and ends with exactly the
    grades of a clean run, each submission committed once."""
    pg, dask = servers
    course = _course(tmp_path / "course")
    url = pg.createdb("killed_workers")
    thread, done = _graded_in_background(course, dask, url)
    try:
        victims = _in_flight(dask, "worker0")
        dask.kill("worker0")
        _in_flight(dask, "worker1")
        dask.kill("worker1")
        dask.restart("worker0", wait=False)
        dask.restart("worker1")
        thread.join(timeout=300)
        assert not thread.is_alive(), "grading did not finish after its workers died"
    finally:
        if thread.is_alive() or len(dask.workers) < 2:
            dask.restart_all()
    assert "error" not in done, done.get("error")
    assert done["rc"] == 0, done["printed"]
    assert _grades(url) == reference
    rows = grading.statuses(AID, grading.database_url(course, url))
    assert set(rows) == set(reference) and all(r["worker"] for r in rows.values())
    assert victims and not grading.not_graded(AID, grading.database_url(course, url))
    assert "not graded" not in done["printed"] and "NOT GRADED" not in done["printed"], done["printed"]


def test_a_scheduler_killed_mid_run_writes_no_grade_deletes_nothing_and_a_plain_rerun_finishes(
    tmp_path, servers, reference, monkeypatch
):
    """The scheduler dies while the class is graded (its workers end with it). What was committed is kept; every
    other submission is recorded "not graded" with why, never a 0, and an earlier grade and autograded notebook of
    a student who resubmitted stay as they were; the command exits 1 naming them. Once the cluster is back, the same
    command (no --force) grades exactly those, and the class ends with the grades of a clean run."""
    pg, dask = servers
    course = _course(tmp_path / "course")
    url = pg.createdb("killed_scheduler")
    full = grading.database_url(course, url)
    # an earlier grade: wrong_top_k first submitted the right answer, graded 15; then resubmitted the class's one
    folder = course / "grader" / "submitted" / "wrong_top_k" / AID
    resubmitted = (folder / f"{AID}.ipynb").read_bytes()
    write(course / "grader" / "submitted", "wrong_top_k", AID, answered(AID))
    grading.autograde(AID, root=course, progress=False, students=["wrong_top_k"], scheduler=dask.address, db=url)
    earlier = _grades(url)["wrong_top_k"]
    earlier_nb = _digest(course / "grader" / "autograded" / "wrong_top_k")
    assert sum(earlier.values()) == 15 and earlier_nb
    (folder / f"{AID}.ipynb").write_bytes(resubmitted)  # sorted last: graded after the scheduler is killed

    monkeypatch.setattr(cluster, "RECOVER_S", 3)  # how long the run waits for the scheduler to come back (60 s)
    thread, done = _graded_in_background(course, dask, url)
    try:
        _in_flight(dask, "worker0")
        dask.kill("scheduler")
        thread.join(timeout=300)
        assert not thread.is_alive(), "grading did not end after its scheduler died"
    finally:
        dask.restart_all()
    assert "error" not in done, done.get("error")
    assert done["rc"] == 1, done["printed"]
    pending = grading.not_graded(AID, full)
    graded = grading.statuses(AID, full)
    assert pending and "wrong_top_k" in pending, (pending, done["printed"])
    for student, row in pending.items():
        assert "cluster" in row["reason"], row["reason"]
        assert f"  NOT GRADED {student}: " in done["printed"], done["printed"]
    assert "run the same command again, without --force" in done["printed"]
    grades = _grades(url)
    for student in set(reference) - set(pending):  # committed before the scheduler died: what a clean run gives
        assert grades[student] == reference[student], student
    assert not (set(pending) - {"wrong_top_k"}) & set(grades), "no grade for a submission that was not graded"
    assert grades["wrong_top_k"] == earlier, "the earlier grade is kept"
    assert _digest(course / "grader" / "autograded" / "wrong_top_k") == earlier_nb, "and its autograded notebook"
    rows = _report(course)
    assert {s for s, r in rows.items() if r["status"] == "not graded"} == set(pending)
    assert (
        rows["wrong_top_k"]["score"] == "15"
        and "the score is the earlier grade's, kept" in rows["wrong_top_k"]["reason"]
    )
    assert all(rows[s]["score"] == "" for s in set(pending) - {"wrong_top_k"}), "not graded is never a 0"

    thread, done = _graded_in_background(course, dask, url)  # the same command again, on the cluster once back
    thread.join(timeout=300)
    assert not thread.is_alive() and "error" not in done, done.get("error")
    assert done["rc"] == 0, done["printed"]
    assert _grades(url) == reference
    assert not grading.not_graded(AID, full)
    assert {s: r["graded_at"] for s, r in grading.statuses(AID, full).items() if s not in pending} == {
        s: r["graded_at"] for s, r in graded.items() if s not in pending
    }, "what was committed is not graded again"
    assert all(r["status"] != "not graded" for r in _report(course).values())


def _report(course: Path) -> dict[str, dict]:
    with open(course / "grader" / "reports" / f"{AID}.csv") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def test_postgres_down_mid_run_keeps_what_was_committed_and_a_rerun_finishes(tmp_path, servers, reference):
    pg, dask = servers
    course = _course(tmp_path / "course")
    url = pg.createdb("went_away")
    full = grading.database_url(course, url)
    stop = threading.Event()

    def stop_postgres_after(n: int):
        from sqlalchemy import create_engine, text

        engine = create_engine(full)
        while not stop.is_set():
            try:
                with engine.connect() as conn:
                    count = conn.execute(text("select count(*) from twoprim_autograde")).scalar()
            except Exception:  # noqa: BLE001 - the table does not exist yet
                count = 0
            if (count or 0) >= n:
                engine.dispose()
                pg.stop("immediate")
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=stop_postgres_after, args=(4,))
    watcher.start()
    try:
        with pytest.raises(grading.GradebookUnavailable) as info:
            grading.autograde(AID, root=course, progress=False, trust=CRASHING, scheduler=dask.address, db=url)
    finally:
        stop.set()
        watcher.join(timeout=30)
        if not pg.running:
            pg.start()
    message = str(info.value)
    assert "cannot be reached" in message and "run the same command again to grade the other" in message, message
    assert pg.password not in message
    before = grading.statuses(AID, full)
    assert 4 <= len(before) < CLASS_SIZE, f"{len(before)} committed"
    assert f"{len(before)} of {CLASS_SIZE} submissions were committed" in message, message

    outcomes = grading.autograde(AID, root=course, progress=False, trust=CRASHING, scheduler=dask.address, db=url)
    assert sorted(o.student for o in outcomes) == sorted(set(reference) - set(before)), "only the rest is graded"
    after = grading.statuses(AID, full)
    assert {s: after[s]["graded_at"] for s in before} == {s: row["graded_at"] for s, row in before.items()}
    assert _grades(url) == reference
    report = (course / "grader" / "reports" / f"{AID}.csv").read_text()
    assert report.count("\n") == CLASS_SIZE + 1  # the header and one row per student


def test_an_unreachable_scheduler_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    course = _course(tmp_path / "course")
    before = _digest(course)
    address = f"tcp://127.0.0.1:{free_port()}"
    # Dask retries a refused connection until the client's timeout (10 s): the refusal is the same after 2
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)
    start = time.monotonic()
    with pytest.raises(CourseError) as info:
        grading.autograde(AID, root=course, progress=False, scheduler=address)
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert f"cannot reach the Dask scheduler at {address}" in message and "nothing was graded or written" in message
    assert _digest(course) == before and not (course / "grader" / "gradebook.db").exists()


def test_only_a_client_holding_the_clusters_certificate_reaches_it(tmp_path, servers):
    _, dask = servers
    assert dask.address.startswith("tls://")
    course = _course(tmp_path / "course")
    before = _digest(course)
    with dask_config.set(_client_config(None)), pytest.raises(CourseError) as info:
        grading.autograde(AID, root=course, progress=False, scheduler=dask.address)
    message = str(info.value)
    assert f"the Dask scheduler at {dask.address} speaks TLS" in message and "nothing was graded or written" in message
    assert "no DASK_DISTRIBUTED__COMM__TLS__CA_FILE and no DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT" in message
    assert "./course cluster-certs" in message

    stranger = tls.cluster_certs(tmp_path / "another_ca")  # a certificate, but not signed by the cluster's CA
    with dask_config.set(_client_config(stranger)), pytest.raises(CourseError) as info:
        grading.autograde(AID, root=course, progress=False, scheduler=dask.address)
    message = str(info.value)
    assert f"the Dask scheduler at {dask.address} and this client do not accept each other's TLS" in message
    assert (
        "nothing was graded or written" in message and "cluster-certs` folder the scheduler was started with" in message
    )

    plain = dask.address.replace("tls://", "tcp://")
    with dask_config.set({"distributed.comm.require-encryption": True}), pytest.raises(CourseError) as info:
        grading.autograde(AID, root=course, progress=False, scheduler=plain)
    assert f"requires TLS (DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION), but {plain} is not a tls://" in str(info.value)
    assert _digest(course) == before and not (course / "grader" / "gradebook.db").exists()


def test_cluster_certs_writes_a_private_key_and_never_overwrites(tmp_path, capsys):
    folder = tmp_path / "certs"
    assert course_cli.main(["cluster-certs", str(folder), "--days", "30"]) == 0
    out = capsys.readouterr().out
    assert f"--tls-ca-file {folder / 'ca.pem'} --tls-cert {folder / 'cert.pem'} --tls-key {folder / 'key.pem'}" in out
    assert f"export DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY={folder / 'key.pem'}" in out
    assert (folder / "key.pem").stat().st_mode & 0o777 == 0o600
    from cryptography import x509

    ca = x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate((folder / "cert.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert 29 <= (cert.not_valid_after_utc - cert.not_valid_before_utc).days <= 30
    written = _digest(folder)
    with pytest.raises(CourseError, match=r"ca\.pem.*already exist.*never overwritten"):
        course_cli.main(["cluster-certs", str(folder)])
    assert _digest(folder) == written and sorted(p.name for p in folder.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    with pytest.raises(CourseError, match="--days must be at least 1"):
        course_cli.main(["cluster-certs", str(tmp_path / "never"), "--days", "0"])
    assert not (tmp_path / "never").exists()


def test_db_init_creates_the_schema_and_a_bad_url_says_what_to_pass(servers, tmp_path):
    pg, _ = servers
    url = pg.createdb("initialised")
    grading.init_db(grading.database_url(tmp_path, url))
    from sqlalchemy import create_engine, inspect

    tables = set(inspect(create_engine(grading.database_url(tmp_path, url))).get_table_names())
    assert {"assignment", "submitted_assignment", "grade", "twoprim_autograde", "alembic_version"} <= tables
    # a database the server does not have yet: an error that says how it comes to be, then db-init creates it
    fresh = f"postgresql://twoprim@127.0.0.1:{pg.port}/not_created_yet"
    with pytest.raises(grading.GradebookUnavailable) as info:
        grading.init_db(grading.database_url(tmp_path, fresh))
    assert "database 'not_created_yet' does not exist" in str(info.value)
    assert f"createdb -h 127.0.0.1 -p {pg.port} -U twoprim not_created_yet" in str(info.value)
    assert course_cli.main(["db-init", "--db", fresh]) == 0
    assert grading.create_db(grading.database_url(tmp_path, fresh)) is False  # there now: left as it is
    assert "twoprim_autograde" in inspect(create_engine(grading.database_url(tmp_path, fresh))).get_table_names()
    with pytest.raises(CourseError, match=r"neither SQLite nor PostgreSQL: pass --db postgresql://USER@HOST"):
        grading.database_url(tmp_path, "mysql://root:hunter2@db/grades")
    with pytest.raises(CourseError) as info:
        grading.database_url(tmp_path, "mysql://root:hunter2@db/grades")
    assert "hunter2" not in str(info.value)


def test_the_guides_cluster_commands_run_as_written_with_the_dashboard_on_loopback():
    """The cluster guide's (docs/guides/cluster.md) `dask scheduler` and `dask worker` lines name the environment's
    own executable (a fresh shell has no `dask` on PATH), and neither leaves Dask's plain-HTTP dashboard open on the
    network: the scheduler's listens on loopback, the workers have none. Every option they pass is one this Dask
    accepts."""
    import re
    import shlex
    import subprocess

    from twoprim.config import ROOT

    section = (ROOT / "docs" / "guides" / "cluster.md").read_text()  # the page "Grading on many machines"
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if "dask " in line.split("#")[0]]
    assert [shlex.split(line)[:2] for line in lines] == [[".venv/bin/dask", "scheduler"], [".venv/bin/dask", "worker"]]
    for line in lines:
        argv = shlex.split(line)
        assert (ROOT / argv[0]).is_file(), argv[0]
        dashboard = re.search(r"--dashboard-address (\S+)", line)
        assert "--no-dashboard" in argv or (dashboard and dashboard.group(1).startswith("127.0.0.1:")), line
        known = subprocess.run(
            [str(ROOT / argv[0]), argv[1], "--help"], capture_output=True, text=True, timeout=60
        ).stdout
        for option in [a for a in argv if a.startswith("--")]:
            assert option in known, (option, line)
    assert "createdb" in section and "./course db-init" in section
