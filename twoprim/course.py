"""Course commands for authors and instructors; run as `./course COMMAND` from anywhere in the repository.

Authors:
    ./course generate [ASSIGNMENT ...]   regenerate exercises/ from solutions/ with nbgrader, then clean them
    ./course clean [NOTEBOOK ...]        strip outputs and stray metadata from notebooks (all by default)
    ./course bench-lessons               execute every lesson and report its time against the 60 s budget

A class, one command per step (the exchange is $TWOPRIM_EXCHANGE, else nbgrader's /srv/nbgrader/exchange):
    ./course release ASSIGNMENT          copy the student version to the exchange for students to fetch
                                         (--due '2026-12-09 23:59 Europe/Berlin': its deadline)
    ./course collect ASSIGNMENT          copy submissions from the exchange into grader/submitted/
    ./course autograde ASSIGNMENT        grade every submission in parallel; write grader/reports/
                                         (--scheduler tls://HOST:8786: on a Dask cluster; --db URL: PostgreSQL)
    ./course extend ASSIGNMENT STUDENT --until DATE   more time for one student (--remove takes it back)
    ./course db-init [--db URL]          create the gradebook's tables (SQLite, or PostgreSQL for many machines)
    ./course cluster-certs FOLDER        TLS certificates for a grading cluster's scheduler, workers and client
    ./course feedback ASSIGNMENT         generate feedback HTML and release it to the exchange
    ./course report ASSIGNMENT           rewrite the reports from the gradebook and print the summary
    ./course similarity ASSIGNMENT       pairs of students ranked by how alike their answers are (--threshold)
    ./course analysis ASSIGNMENT         item analysis of every test: difficulty, discrimination, broken tests
    ./course export ASSIGNMENT=ID ... --roster R --canvas   grades out to Canvas (or a plain CSV without --canvas)
    ./course hub --students alice,bob    (as root) the classroom on JupyterHub: accounts, exchange, formgrader
                                         (--public HOST --ssl-cert F --ssl-key K: for students on other machines)

Learners on their own:
    ./course lab [LAB OPTION ...]        JupyterLab on lesson 00, as `make lab` starts it (as root too)
    ./course selfgrade ASSIGNMENT        grade exercises/ASSIGNMENT as an instructor would, hidden checks included
    ./course progress                    lessons run, visible checks passing, self-grades, hints used, what next

    ./course nbgrader ARGS ...           any nbgrader command, with the course configuration and environment
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from twoprim.grading.nbgrader_cli import CourseError, generate_assignment, nbgrader
from twoprim.core.notebooks import ROOT, assignments, clean, execute, lessons
from twoprim.learner.state import workspace

LESSON_BUDGET_S = 60.0


def generate(ids: list[str] | None = None, *, root: Path = ROOT, into: Path | None = None) -> list[Path]:
    """Generate student versions of `ids` (default: all) from solutions/ into `into` (default: exercises/).

    nbgrader writes them, then they are cleaned like every committed notebook. With `into`, the gradebook used
    is a throw-away one, so checking for drift never touches the instructor's gradebook.
    """
    known = assignments(root)
    ids = ids or known
    unknown = sorted(set(ids) - set(known))
    if unknown:
        raise CourseError(f"no assignment {', '.join(unknown)} in {root / 'solutions'}; known: {', '.join(known)}.")
    import nbformat

    out_dir = into or root / "exercises"
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        throwaway = f"sqlite:///{Path(scratch) / 'gradebook.db'}" if into is not None else None
        for aid in ids:  # in this process: nbgrader is imported once, not once per assignment
            generate_assignment(aid, root=root, release=into, db_url=throwaway)
            for path in sorted((out_dir / aid).glob("*.ipynb")):
                nb = nbformat.read(str(path), as_version=4)
                nbformat.write(clean(nb), str(path))
                written.append(path)
    return written


def due_date(text: str, flag: str = "--due"):
    """A due date with its time zone ("2026-12-09 23:59 UTC", "2026-12-09 23:59 Europe/Berlin", ISO 8601 or
    "... +0100" with an offset) as nbgrader stores it: naive UTC. Without a zone it is refused: nbgrader would read
    it as UTC."""
    import dateutil.parser
    import dateutil.tz

    example = f"e.g. {flag} '2026-12-09 23:59 Europe/Berlin' or {flag} '2026-12-09T23:59:00+01:00'"
    parts = text.split()
    try:
        if len(parts) == 3 and not parts[2].lstrip("+-").isdigit():  # a named zone: nbgrader's own format
            zone = dateutil.tz.gettz(parts[2])
            if zone is None:
                raise CourseError(f"{flag} {text!r}: {parts[2]!r} is not a time zone: {example}")
            when = dateutil.parser.parse(" ".join(parts[:2])).replace(tzinfo=zone)
        else:
            when = dateutil.parser.parse(text)
    except (ValueError, OverflowError) as err:
        raise CourseError(f"{flag} {text!r} is not a date and time ({err}): {example}") from err
    if when.tzinfo is None:
        raise CourseError(f"{flag} {text!r} has no time zone, and a deadline must say which: {example}")
    return (when - when.utcoffset()).replace(tzinfo=None)


def extend(aid: str, student: str, until: str | None, *, root: Path = ROOT, db: str | None = None) -> str:
    """Let `student` submit `aid` until `until` (a date with its zone; None takes it back); what was done, in words.
    The student must be known: in the gradebook, in grader/submitted/, or in the classroom's roster."""
    import json

    from twoprim.grading.gradebook import database_url, grant_extension, gradebook, submitted_students

    url = database_url(root, db)
    when = due_date(until, flag="--until") if until is not None else None
    try:
        roster = json.loads((root / "grader" / "classroom.json").read_text()).get("students", [])
    except (OSError, ValueError, AttributeError):
        roster = []
    with gradebook(url) as gb:
        known = {s.id for s in gb.students} | set(submitted_students(aid, root)) | set(roster)
    if student not in known:
        raise CourseError(f"no student {student!r} in the gradebook, grader/submitted/ or the classroom's roster; "
                          f"known: {', '.join(sorted(known)) or 'none yet'}")
    due = grant_extension(aid, student, when, root, url)
    if when is None:
        return f"{student}'s extension of {aid} is taken back: due {due:%Y-%m-%d %H:%M} UTC, as for everyone"
    from twoprim.learner.deadlines import span

    return (f"{student} may submit {aid} until {when:%Y-%m-%d %H:%M} UTC ({span((when - due).total_seconds())} after "
            f"its due date, {due:%Y-%m-%d %H:%M} UTC); their late penalty follows it from now on")


def exchange_root(root: Path = ROOT) -> Path:
    """The exchange the course's nbgrader configuration names ($TWOPRIM_EXCHANGE, the classroom's, or nbgrader's)."""
    from traitlets.config.loader import PyFileConfigLoader

    return Path(PyFileConfigLoader("nbgrader_config.py", path=str(root / "grader")).load_config().Exchange.root)


def release(aid: str, *, root: Path = ROOT, due: str | None = None):
    """Copy the student version of `aid` to the exchange, for students to fetch; `due`: its due date, recorded in
    the gradebook (submissions after it are late: the report says by how long, and nbgrader's late-submission
    plugin, if configured, sets the penalty). The gradebook's due date (from `due`, or set in the formgrader) is
    also written where students can read it (`twoprim.learner.deadlines`); returns it (naive UTC), or None."""
    from twoprim.grading.gradebook import database_url, gradebook, released_notebooks

    if due is not None:
        when = due_date(due)
        url = database_url(root)
        released_notebooks(aid, root, url)  # the assignment registered in the gradebook
        with gradebook(url) as gb:
            gb.update_or_create_assignment(aid, duedate=when)
    nbgrader(["release_assignment", aid, "--force"], root=root, capture=True)
    _seal_inbound(exchange_root(root))
    return _publish_due_date(aid, root)


def _seal_inbound(exchange: Path) -> None:
    """The sticky bit on the exchange's inbound folder (nbgrader makes it 0733, writable by every student): a
    student may still hand in, but only the owner of a submission may rename or delete it."""
    import stat

    from twoprim.config import COURSE_ID

    inbound = exchange / COURSE_ID / "inbound"
    with contextlib.suppress(OSError):
        st = inbound.lstat()
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & stat.S_ISVTX:
            inbound.chmod(stat.S_IMODE(st.st_mode) | stat.S_ISVTX)


def collect(aid: str, *, root: Path = ROOT) -> str:
    """Take every student's newest submission of `aid` from the exchange into grader/submitted/, trusting only
    what the exchange observed (who made it, when it arrived: `twoprim.exchange`); what was taken in, set aside
    and flagged, then what is there now and who submitted after the due date (`collected`). A due date changed in
    the formgrader since the release reaches the students' deadlines file here too."""
    from twoprim.exchange import client, filesystem, intake

    if client.uses_service(root):  # the classroom's exchange service: the hub said who sent each one
        submissions, set_aside = client.collect_from_service(aid, root), []
    else:
        submissions, set_aside = filesystem.gather(aid, exchange_root(root))
    report = intake.admit(aid, submissions, set_aside, root=root)
    _publish_due_date(aid, root)
    return f"{report}\n{collected(aid, root=root)}"


def _publish_due_date(aid: str, root: Path):
    """Write `aid`'s due date in the gradebook where students read it (`twoprim.learner.deadlines`), or take it out when it
    has none; returns it."""
    from twoprim.learner import deadlines
    from twoprim.exchange.client import uses_service
    from twoprim.grading.gradebook import database_url, due_date as due_in_gradebook

    when = due_in_gradebook(aid, database_url(root))
    if uses_service(root):  # the classroom's exchange service reads it from the gradebook at each request
        return when
    exchange = exchange_root(root)
    if deadlines.read(exchange).get(aid) != when:
        deadlines.publish(exchange, aid, when)
    return when


def collected(aid: str, *, root: Path = ROOT) -> str:
    """'3 submission(s) of ex01_dot in grader/submitted/; due ... UTC: 1 late (bob 3 h); alice's extension runs to
    ...': from each submission's timestamp.txt, the gradebook's due date and the extensions (`./course extend`)."""
    from nbgrader.utils import parse_utc

    from twoprim.learner.deadlines import span
    from twoprim.grading.gradebook import database_url, due_date as due_in_gradebook, extensions, submitted_students

    students = submitted_students(aid, root)
    line = f"{len(students)} submission(s) of {aid} in grader/submitted/"
    due = due_in_gradebook(aid, database_url(root))
    if due is None:
        return f"{line} (no due date)"
    extended = extensions(aid, database_url(root))
    late, unknown = [], []
    for student in students:
        try:
            at = parse_utc((root / "grader" / "submitted" / student / aid / "timestamp.txt").read_text().strip())
        except (OSError, ValueError, OverflowError):
            unknown.append(student)
            continue
        theirs = max(due, extended.get(student, due))
        if at > theirs:
            late.append(f"{student} {span((at - theirs).total_seconds())}")
    parts = [f"{len(late)} late" + (f" ({', '.join(late)})" if late else "")]
    parts += [f"{s}'s extension runs to {extended[s]:%Y-%m-%d %H:%M} UTC" for s in students if s in extended]
    if unknown:
        parts.append(f"no readable submission time: {', '.join(unknown)}")
    return f"{line}; due {due:%Y-%m-%d %H:%M} UTC: " + "; ".join(parts)


def feedback(aid: str, *, root: Path = ROOT):
    """Generate the feedback HTML of every graded submission of `aid` and release it to the exchange, one student at
    a time: returns who got it and why the others did not (`grading.feedback.Released`)."""
    from twoprim.grading.feedback import release_feedback

    return release_feedback(aid, root=root)


def run_autograde(aid: str, *, root: Path = ROOT, db: str | None = None, **options) -> int:
    """`./course autograde`: grade, print the summary of the report and one line per failed, held or not graded
    student; exit status 1 when a submission could not be graded through a fault of the grader (they are named)."""
    from twoprim import grading

    outcomes = grading.autograde(aid, root=root, db=db, **options)
    summary = grading.write_reports(aid, root=root, url=grading.database_url(root, db), run=outcomes)
    print(grading.format_summary(summary, root=root))
    problems = grading.format_problems(summary)
    if problems:
        print(problems)
    return 1 if any(o.status == grading.NOT_GRADED for o in outcomes) else 0


def refuse_students(command: str, root: Path = ROOT) -> None:
    """A class command run by an account that cannot work in grader/ (a student of the classroom): say whose command
    it is and what a student does instead, before anything else fails on the way."""
    grader = root / "grader"
    if grader.is_dir() and not os.access(grader, os.R_OK | os.W_OK | os.X_OK):
        raise CourseError(f"`./course {command}` is the instructor's command: it works in {grader}, which only the "
                          f"instructor can open. As a student, hand in with Submit in JupyterLab's Assignments tab "
                          f"(or `nbgrader submit ASSIGNMENT`), fetch your feedback there too, and run `course "
                          f"progress` to see where you stand.")


def clean_files(paths: list[Path]) -> list[Path]:
    """Clean notebooks in place; returns those that changed."""
    import nbformat

    changed = []
    for path in paths:
        before = path.read_text()
        nb = nbformat.read(str(path), as_version=4)
        nbformat.write(clean(nb), str(path))
        if path.read_text() != before:
            changed.append(path)
    return changed


def bench_lessons() -> int:
    """Execute each lesson in a fresh kernel; print its time against the budget; non-zero exit when one is over."""
    over = 0
    print(f"{'lesson':40s} {'seconds':>8s}  budget {LESSON_BUDGET_S:.0f} s")
    for path in lessons():
        _, secs = execute(path)
        flag = "" if secs <= LESSON_BUDGET_S else "  OVER BUDGET"
        over += bool(flag)
        print(f"{path.name:40s} {secs:8.1f}{flag}", flush=True)
    return 1 if over else 0


def install_config() -> Path:
    """Make every nbgrader run in this environment load the course configuration, whatever the folder.

    Where it cannot be read (a student's account in the classroom: grader/ is the instructor's), nothing is loaded
    and the account's own configuration applies. Written as a new file: a hard-linked copy of the environment
    keeps its own."""
    target = Path(sys.prefix) / "etc" / "jupyter" / "nbgrader_config.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    config = ROOT / "grader" / "nbgrader_config.py"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text("# Written by `make setup` (python -m twoprim.course install-config): nbgrader in this environment\n"
                   "# uses the Two Primitives course configuration from any folder, where this account may read it.\n"
                   "import os\n\n"
                   f"if os.access({str(config)!r}, os.R_OK):\n"
                   f"    load_subconfig({str(config)!r})  # noqa: F821\n")
    os.replace(tmp, target)
    return target


def install_lab_settings() -> Path:
    """Write the course's JupyterLab setting defaults (no news prompt) into this environment."""
    from twoprim.classroom import lab

    return lab.install_settings()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["lab"]:  # the rest goes to JupyterLab untouched (argparse would reject its --options)
        from twoprim.classroom import lab

        return lab.run(argv[1:])
    if argv[:1] == ["hub"]:  # the classroom on JupyterHub: its own options (twoprim/classroom/hub.py)
        from twoprim.classroom import hub

        return hub.run(argv[1:])
    parser = argparse.ArgumentParser(prog="course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="regenerate exercises/ from solutions/")
    g.add_argument("assignments", nargs="*")
    c = sub.add_parser("clean", help="strip outputs and stray metadata from notebooks")
    c.add_argument("notebooks", nargs="*", type=Path)
    sub.add_parser("bench-lessons", help="time every lesson against the 60 s budget")
    n = sub.add_parser("nbgrader", help="run nbgrader with the course configuration")
    n.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("install-config", help="(make setup) point this environment's nbgrader at the course")
    sub.add_parser("hub", help="the classroom on JupyterHub: student accounts, the exchange, the formgrader (as root)",
                   add_help=False)
    lb = sub.add_parser("lab", help="JupyterLab on lesson 00, as root too (what `make lab` runs)")
    lb.add_argument("args", nargs=argparse.REMAINDER, help="JupyterLab options, e.g. --no-browser --port=8899")
    for name, text in (("release", "release the student version to the exchange"),
                       ("collect", "collect submissions from the exchange into grader/submitted/"),
                       ("feedback", "generate feedback HTML and release it to the exchange")):
        command = sub.add_parser(name, help=text)
        command.add_argument("assignment")
        if name == "release":
            command.add_argument("--due", default=None, metavar="'YYYY-MM-DD HH:MM ZONE'",
                                 help="the due date, with its time zone (submissions after it are late)")
    db_help = ("the gradebook: postgresql://USER@HOST:5432/DB (password from PGPASSWORD or ~/.pgpass) or sqlite:///PATH "
               "(default: $TWOPRIM_DB, else grader/gradebook.db)")
    rp = sub.add_parser("report", help="rewrite grader/reports/ from the gradebook and print the summary")
    rp.add_argument("assignment")
    rp.add_argument("--db", default=None, help=db_help)
    ex = sub.add_parser("extend", help="give one student more time for an assignment (its late penalty follows)")
    ex.add_argument("assignment")
    ex.add_argument("student")
    when = ex.add_mutually_exclusive_group(required=True)
    when.add_argument("--until", metavar="'YYYY-MM-DD HH:MM ZONE'", help="their own deadline, with its time zone")
    when.add_argument("--remove", action="store_true", help="take the extension back")
    ex.add_argument("--db", default=None, help=db_help)
    di = sub.add_parser("db-init", help="create the gradebook's tables (nbgrader's and the course's)")
    di.add_argument("--db", default=None, help=db_help)
    cc = sub.add_parser("cluster-certs", help="write TLS certificates for a Dask grading cluster into FOLDER")
    cc.add_argument("folder", type=Path)
    cc.add_argument("--days", type=int, default=365, help="how long they are valid (default 365)")
    a = sub.add_parser("autograde", help="grade every submission of an assignment in parallel")
    a.add_argument("assignment")
    a.add_argument("--scheduler", default=None, metavar="tls://HOST:8786",
                   help="grade on this Dask scheduler's workers (default: $TWOPRIM_SCHEDULER, else this machine)")
    a.add_argument("--db", default=None, help=db_help)
    a.add_argument("--force", action="store_true",
                   help="grade again the submissions already graded in their current form")
    a.add_argument("--workers", type=int, default=None, help="parallel workers (default: one per core)")
    a.add_argument("--student", action="append", default=None, help="grade only this student (repeatable)")
    a.add_argument("--cell-timeout", type=int, default=None, help="seconds per cell (default 60)")
    a.add_argument("--unisolated", action="store_true",
                   help="run students' code as yourself, without the sandbox (only where bubblewrap is impossible)")
    a.add_argument("--trust", action="append", default=None, metavar="STUDENT",
                   help="grade this student's code although the audit held it (after reading it; repeatable)")
    sg = sub.add_parser("selfgrade", help="grade your own exercises/ASSIGNMENT notebook, hidden checks included")
    sg.add_argument("assignment")
    sg.add_argument("--notebook", type=Path, default=None, help="grade this notebook instead of exercises/...")
    pr = sub.add_parser("progress", help="your progress: lessons run, checks passing, self-grades, what next")
    pr.add_argument("--cell-timeout", type=int, default=None, help="seconds per cell of your notebooks (default 60)")
    pr.add_argument("--chart", type=Path, default=None, metavar="FILE", help="also write the progress chart (PNG)")
    si = sub.add_parser("similarity", help="rank pairs of students by how alike their answers are (copydetect)")
    si.add_argument("assignment")
    si.add_argument("--threshold", type=float, default=None,
                    help="pairs at or above this similarity (0-1) are shown in the HTML report (default 0.5)")
    an = sub.add_parser("analysis", help="item analysis of every test cell: difficulty, discrimination, flags")
    an.add_argument("assignment")
    an.add_argument("--db", default=None, help=db_help)
    xp = sub.add_parser("export", help="grades out to the LMS: a Canvas gradebook CSV (--canvas) or a plain CSV")
    xp.add_argument("assignments", nargs="+", metavar="ASSIGNMENT[=CANVAS_ID]")
    xp.add_argument("--roster", type=Path, required=True,
                    help="CSV with a column `id` (the course's student ids); for --canvas also name, canvas_id, "
                         "sis_user_id, sis_login_id, section")
    xp.add_argument("--canvas", action="store_true", help="Canvas's gradebook import format")
    xp.add_argument("--output", type=Path, default=None, help="where to write it (default grader/reports/)")
    xp.add_argument("--db", default=None, help=db_help)
    args = parser.parse_args(argv)
    if args.command in ("release", "collect", "autograde", "feedback", "report", "nbgrader", "generate", "selfgrade",
                        "db-init", "extend", "similarity", "analysis", "export"):
        from twoprim.classroom.hub import refuse_root_in_classroom  # a classroom's course is its instructor's, not root's

        refuse_root_in_classroom(argv)
        if args.command != "selfgrade":  # (selfgrade says itself what a student who cannot read it should do)
            refuse_students(args.command)
    # grading and progress import torch (through the checks): only the commands that need them pay for it
    if args.command in ("autograde", "report", "selfgrade", "db-init", "extend"):
        from twoprim import grading
    if args.command == "progress":
        from twoprim.learner import progress

    if args.command == "selfgrade" and args.assignment not in assignments():
        grading.require_hidden_checks(args.assignment)  # none here, or unreadable (a hub student): submit instead
    if getattr(args, "assignment", None) and args.assignment not in assignments():
        raise CourseError(f"no assignment {args.assignment!r}; known: {', '.join(assignments())}.")

    if args.command == "generate":
        for path in generate(args.assignments):
            print(f"generated {path.relative_to(ROOT)}")
    elif args.command == "clean":
        paths = args.notebooks or [Path(p) for p in subprocess.run(
            ["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()]
        for path in clean_files([ROOT / p if not p.is_absolute() else p for p in paths]):
            print(f"cleaned {path}")
    elif args.command == "bench-lessons":
        return bench_lessons()
    elif args.command == "nbgrader":
        return nbgrader(args.args, check=False).returncode
    elif args.command == "install-config":
        print(f"wrote {install_config()}")
        print(f"wrote {install_lab_settings()}")
    elif args.command == "release":
        when = release(args.assignment, due=args.due)
        due = f", due {when:%Y-%m-%d %H:%M} UTC (students see it in their progress)" if when else ""
        print(f"released {args.assignment} to the exchange{due}")
    elif args.command == "collect":
        print(collect(args.assignment))
    elif args.command == "autograde":
        return run_autograde(args.assignment, workers=args.workers, students=args.student,
                             unisolated=args.unisolated, trust=args.trust,
                             cell_timeout=args.cell_timeout or grading.DEFAULT_CELL_TIMEOUT,
                             scheduler=args.scheduler, db=args.db, force=args.force)
    elif args.command == "feedback":
        result = feedback(args.assignment)
        print(result.describe())
        return 1 if result.held else 0
    elif args.command == "report":
        url = grading.database_url(ROOT, args.db)
        summary = grading.write_reports(args.assignment, url=url)
        print(grading.format_summary(summary))
        if grading.format_problems(summary):
            print(grading.format_problems(summary))
    elif args.command in ("similarity", "analysis", "export"):
        from twoprim.analytics.commands import run as analytics

        return analytics(args, ROOT)
    elif args.command == "extend":
        print(extend(args.assignment, args.student, None if args.remove else args.until, db=args.db))
    elif args.command == "db-init":
        url = grading.database_url(ROOT, args.db)
        if grading.create_db(url):
            print(f"created the database of {grading.display_url(url)}")
        grading.init_db(url)
        print(f"the gradebook at {grading.display_url(url)} has nbgrader's tables and the course's")
    elif args.command == "cluster-certs":
        from twoprim.grading import tls

        paths = tls.cluster_certs(args.folder, days=args.days)
        print(f"wrote {', '.join(str(p) for p in paths.values())} (valid {args.days} days)")
        print(tls.start_commands({role: p.resolve() for role, p in paths.items()}))
    elif args.command == "selfgrade":
        result = grading.selfgrade(args.assignment, notebook=args.notebook)
        print(result.describe())
    elif args.command == "progress":
        return progress.main(workspace(ROOT), timeout=args.cell_timeout or progress.CELL_TIMEOUT, chart_to=args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
