"""Course commands for authors and instructors; run as `./course COMMAND` from anywhere in the repository.

Authors:
    ./course generate [ASSIGNMENT ...]   regenerate exercises/ from solutions/ with nbgrader, then clean them;
                                         and lesson 00's outline from README.md's lesson table
    ./course clean [NOTEBOOK ...]        strip outputs and stray metadata from notebooks (all by default)
    ./course bench-lessons               execute every lesson and report its time against the 60 s budget
    ./course install-config              (make setup) nbgrader in this environment uses the course's configuration

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
    ./course similarity ASSIGNMENT       pairs and groups of students whose answers match, whole or in part
    ./course analysis ASSIGNMENT         item analysis of every test, and what the class got wrong, counted
    ./course export ASSIGNMENT=ID ... --roster R --canvas   grades out to Canvas (or a plain CSV without --canvas)
    ./course lti-grades ASSIGNMENT --lti CONFIG   scores to the LMS over LTI AGS (autograde --lti: after grading)
    ./course hub --students alice,bob    (as root) the classroom on JupyterHub: accounts, exchange, formgrader
                                         (--public HOST --ssl-cert F --ssl-key K: for students on other machines)
    ./course nbgrader ARGS ...           any nbgrader command, with the course configuration and environment

Learners on their own:
    ./course lab [LAB OPTION ...]        JupyterLab on lesson 00, as `make lab` starts it (as root too)
    ./course selfgrade ASSIGNMENT        grade exercises/ASSIGNMENT as an instructor would, hidden checks included
    ./course progress                    lessons run, visible checks passing, self-grades, hints used, what next

Why this module is long: the table of every course command (its help, arguments, what it runs and who may run it) is the
one place the command line is defined, and `./course --help` is checked against it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from twoprim.config import ROOT
from twoprim.core.catalog import id_problem
from twoprim.core.errors import CourseError
from twoprim.core.notebooks import OUTLINE_LESSON, assignments, clean, execute, lessons, outline, write_outline

# the class's steps (twoprim/exchange/steps.py), named here too: scripts and tests call `course.release(...)`
from twoprim.exchange.steps import collect, collected, due_date, exchange_root, extend, release  # noqa: F401
from twoprim.grading.nbgrader_cli import generate_assignment, nbgrader
from twoprim.learner.state import workspace

LESSON_BUDGET_S = 60.0


def generate(ids: list[str] | None = None, *, root: Path = ROOT, into: Path | None = None) -> list[Path]:
    """Generate student versions of `ids` (default: all) from solutions/ into `into` (default: exercises/), and
    lesson 00's outline from README.md's lesson table (`notebooks.write_outline`).

    nbgrader writes them, then they are cleaned like every committed notebook. With `into`, the gradebook used
    is a throw-away one, so checking for drift never touches the instructor's gradebook (nor lesson 00).
    """
    known = assignments(root)
    ids = ids or known
    unknown = sorted(set(ids) - set(known))
    if unknown:
        raise CourseError(f"no assignment {', '.join(unknown)} in {root / 'solutions'}; known: {', '.join(known)}.")
    problem = next(filter(None, (id_problem(aid, known) for aid in ids)), None)
    if problem:
        raise CourseError(problem)
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
    if into is None and outline(root) and (root / OUTLINE_LESSON).is_file():
        written += filter(None, [write_outline(root)])
    return written


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
        raise CourseError(
            f"`./course {command}` is the instructor's command: it works in {grader}, which only the "
            f"instructor can open. As a student, hand in with Submit in JupyterLab's Assignments tab "
            f"(or `nbgrader submit ASSIGNMENT`), fetch your feedback there too, and run `course "
            f"progress` to see where you stand."
        )


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
    tmp.write_text(
        "# Written by `make setup` (python -m twoprim.course install-config): nbgrader in this environment\n"
        "# uses the Two Primitives course configuration from any folder, where this account may read it.\n"
        "import os\n\n"
        f"if os.access({str(config)!r}, os.R_OK):\n"
        f"    load_subconfig({str(config)!r})  # noqa: F821\n"
    )
    os.replace(tmp, target)
    return target


def install_lab_settings() -> Path:
    """Write the course's JupyterLab setting defaults (no news prompt) into this environment."""
    from twoprim.classroom import lab

    return lab.install_settings()


# --- the command table: each command's help, what it runs, who runs it, and its arguments ------------------------

AUTHOR, INSTRUCTOR, LEARNER, ANYONE, SUPERUSER = "author", "instructor", "learner", "anyone", "root"


def arg(*names: str, **options) -> tuple[tuple[str, ...], dict]:
    """One argument of a command: its names and `ArgumentParser.add_argument`'s options."""
    return names, options


def one_of(*arguments: tuple, required: bool = True) -> tuple[tuple[str, ...], dict]:
    """Arguments of which a command takes one (a mutually exclusive group)."""
    return (), {"one_of": arguments, "required": required}


ASSIGNMENT = arg("assignment")
DB = arg(
    "--db",
    default=None,
    help="the gradebook: postgresql://USER@HOST:5432/DB (password from PGPASSWORD or "
    "~/.pgpass) or sqlite:///PATH (default: $TWOPRIM_DB, else grader/gradebook.db)",
)
WHEN = "'YYYY-MM-DD HH:MM ZONE'"


@dataclass(frozen=True)
class Command:
    """One `./course` command: its one-line help, what it runs, who runs it, and its arguments (`arg`, `one_of`).

    `who`: "author" and "instructor" commands work in solutions/ or grader/, so they are refused to a classroom's
    students and to root in a classroom's course; "learner" and "anyone" commands are not, nor "root" ones (the hub,
    which checks that root runs it). `raw`: the rest of the command line goes to `run` untouched as `args.args`
    (argparse would reject nbgrader's, JupyterLab's or the hub's own options)."""

    help: str
    run: Callable[[argparse.Namespace], int | None]
    who: str
    arguments: tuple = ()
    raw: bool = False

    @property
    def refused_to_students(self) -> bool:
        """Whether the command is the author's or instructor's, refused where grader/ is not the caller's."""
        return self.who in (AUTHOR, INSTRUCTOR)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's arguments to its subparser."""
        for names, options in self.arguments:
            if "one_of" in options:
                group = parser.add_mutually_exclusive_group(required=options["required"])
                for inner, inner_options in options["one_of"]:
                    group.add_argument(*inner, **inner_options)
            else:
                parser.add_argument(*names, **options)


def _run_generate(args) -> None:
    for path in generate(args.assignments):
        print(f"generated {path.relative_to(ROOT)}")


def _run_clean(args) -> None:
    """The notebooks named, else every notebook git tracks."""
    paths = args.notebooks or [
        Path(p)
        for p in subprocess.run(
            ["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
    ]
    for path in clean_files([ROOT / p if not p.is_absolute() else p for p in paths]):
        print(f"cleaned {path}")


def _run_lab(args) -> int:
    from twoprim.classroom import lab

    return lab.run(args.args)


def _run_hub(args) -> int:
    from twoprim.classroom import hub  # its own options (twoprim/classroom/hub.py)

    return hub.run(args.args)


def _run_install_config(args) -> None:
    print(f"wrote {install_config()}")
    print(f"wrote {install_lab_settings()}")


def _run_release(args) -> None:
    when = release(args.assignment, due=args.due)
    due = f", due {when:%Y-%m-%d %H:%M} UTC (students see it in their progress)" if when else ""
    print(f"released {args.assignment} to the exchange{due}")


def _run_feedback(args) -> int:
    result = feedback(args.assignment)
    print(result.describe())
    return 1 if result.held else 0


def _run_report(args) -> None:
    from twoprim import grading

    summary = grading.write_reports(args.assignment, url=grading.database_url(ROOT, args.db))
    print(grading.format_summary(summary))
    if grading.format_problems(summary):
        print(grading.format_problems(summary))


def _run_db_init(args) -> None:
    from twoprim import grading

    url = grading.database_url(ROOT, args.db)
    if grading.create_db(url):
        print(f"created the database of {grading.display_url(url)}")
    grading.init_db(url)
    print(f"the gradebook at {grading.display_url(url)} has nbgrader's tables and the course's")


def _run_cluster_certs(args) -> None:
    from twoprim.grading import tls

    paths = tls.cluster_certs(args.folder, days=args.days)
    print(f"wrote {', '.join(str(p) for p in paths.values())} (valid {args.days} days)")
    print(tls.start_commands({role: p.resolve() for role, p in paths.items()}))


def _run_autograde(args) -> int:
    from twoprim import grading

    code = run_autograde(
        args.assignment,
        workers=args.workers,
        students=args.student,
        unisolated=args.unisolated,
        trust=args.trust,
        cell_timeout=args.cell_timeout or grading.DEFAULT_CELL_TIMEOUT,
        scheduler=args.scheduler,
        db=args.db,
        force=args.force,
    )
    return max(code, _run_lti_grades(args)) if args.lti is not None else code


def _run_lti_grades(args) -> int:
    """./course lti-grades (and autograde --lti): the scores of the gradebook to the LMS over AGS."""
    from twoprim.classroom import lti_config, lti_grades
    from twoprim.config import COURSE_ID
    from twoprim.exchange.client import classroom

    course = classroom(ROOT).get("course_id") or COURSE_ID
    return lti_grades.send(args.assignment, lti_config.load(args.lti, {course}), root=ROOT, course=course, db=args.db)


def _run_selfgrade(args) -> None:
    """./course selfgrade: a learner's command, yet root in a classroom's course would leave root's files in grader/."""
    from twoprim.classroom.hub import refuse_root_in_classroom
    from twoprim.learner.selfgrade import command

    refuse_root_in_classroom(args.argv)
    command(args.assignment, args.notebook)  # the learner's warm grader, a line per test cell as it runs


def _run_progress(args) -> int:
    from twoprim.learner import progress

    return progress.main(workspace(ROOT), timeout=args.cell_timeout or progress.CELL_TIMEOUT, chart_to=args.chart)


def _run_analytics(args) -> int:
    from twoprim.analytics.commands import run as analytics  # similarity, analysis and export

    return analytics(args, ROOT)


COMMANDS: dict[str, Command] = {
    "generate": Command(
        "regenerate exercises/ from solutions/, and lesson 00's outline from README.md",
        _run_generate,
        AUTHOR,
        (arg("assignments", nargs="*"),),
    ),
    "clean": Command(
        "strip outputs and stray metadata from notebooks", _run_clean, ANYONE, (arg("notebooks", nargs="*", type=Path),)
    ),
    "bench-lessons": Command("time every lesson against the 60 s budget", lambda args: bench_lessons(), ANYONE),
    "nbgrader": Command(
        "run nbgrader with the course configuration",
        lambda args: nbgrader(args.args, check=False).returncode,
        INSTRUCTOR,
        (arg("args", nargs=argparse.REMAINDER),),
        raw=True,
    ),
    "install-config": Command(
        "(make setup) point this environment's nbgrader at the course", _run_install_config, ANYONE
    ),
    "hub": Command(
        "the classroom on JupyterHub: student accounts, the exchange, the formgrader (as root)",
        _run_hub,
        SUPERUSER,
        raw=True,
    ),
    "lab": Command(
        "JupyterLab on lesson 00, as root too (what `make lab` runs)",
        _run_lab,
        LEARNER,
        (arg("args", nargs=argparse.REMAINDER, help="JupyterLab options, e.g. --no-browser --port=8899"),),
        raw=True,
    ),
    "release": Command(
        "release the student version to the exchange",
        _run_release,
        INSTRUCTOR,
        (
            ASSIGNMENT,
            arg(
                "--due",
                default=None,
                metavar=WHEN,
                help="the due date, with its time zone (submissions after it are late)",
            ),
        ),
    ),
    "collect": Command(
        "collect submissions from the exchange into grader/submitted/",
        lambda args: print(collect(args.assignment)),
        INSTRUCTOR,
        (ASSIGNMENT,),
    ),
    "feedback": Command(
        "generate feedback HTML and release it to the exchange", _run_feedback, INSTRUCTOR, (ASSIGNMENT,)
    ),
    "report": Command(
        "rewrite grader/reports/ from the gradebook and print the summary", _run_report, INSTRUCTOR, (ASSIGNMENT, DB)
    ),
    "extend": Command(
        "give one student more time for an assignment (its late penalty follows)",
        lambda args: print(extend(args.assignment, args.student, None if args.remove else args.until, db=args.db)),
        INSTRUCTOR,
        (
            ASSIGNMENT,
            arg("student"),
            one_of(
                arg("--until", metavar=WHEN, help="their own deadline, with its time zone"),
                arg("--remove", action="store_true", help="take the extension back"),
            ),
            DB,
        ),
    ),
    "db-init": Command("create the gradebook's tables (nbgrader's and the course's)", _run_db_init, INSTRUCTOR, (DB,)),
    "cluster-certs": Command(
        "write TLS certificates for a Dask grading cluster into FOLDER",
        _run_cluster_certs,
        INSTRUCTOR,
        (arg("folder", type=Path), arg("--days", type=int, default=365, help="how long they are valid (default 365)")),
    ),
    "autograde": Command(
        "grade every submission of an assignment in parallel",
        _run_autograde,
        INSTRUCTOR,
        (
            ASSIGNMENT,
            arg(
                "--scheduler",
                default=None,
                metavar="tls://HOST:8786",
                help="grade on this Dask scheduler's workers (default: $TWOPRIM_SCHEDULER, else this machine)",
            ),
            DB,
            arg(
                "--force", action="store_true", help="grade again the submissions already graded in their current form"
            ),
            arg("--workers", type=int, default=None, help="parallel workers (default: one per core)"),
            arg("--student", action="append", default=None, help="grade only this student (repeatable)"),
            arg("--cell-timeout", type=int, default=None, help="seconds per cell (default 60)"),
            arg(
                "--unisolated",
                action="store_true",
                help="run students' code as yourself, without the sandbox (only where bubblewrap is impossible)",
            ),
            arg(
                "--trust",
                action="append",
                default=None,
                metavar="STUDENT",
                help="grade this student's code although the audit held it (after reading it; repeatable)",
            ),
            arg(
                "--lti",
                type=Path,
                default=None,
                metavar="CONFIG",
                help="then send the scores to the LMS over LTI AGS (as ./course lti-grades does)",
            ),
        ),
    ),
    "lti-grades": Command(
        "send an assignment's scores to the LMS over LTI AGS (only what changed)",
        _run_lti_grades,
        INSTRUCTOR,
        (
            ASSIGNMENT,
            arg(
                "--lti",
                type=Path,
                required=True,
                metavar="CONFIG",
                help="the hub's LTI configuration (./course hub --lti)",
            ),
            DB,
        ),
    ),
    "selfgrade": Command(
        "grade your own exercises/ASSIGNMENT notebook, hidden checks included",
        _run_selfgrade,
        LEARNER,
        (ASSIGNMENT, arg("--notebook", type=Path, default=None, help="grade this notebook instead of exercises/...")),
    ),
    "progress": Command(
        "your progress: lessons run, checks passing, self-grades, what next",
        _run_progress,
        LEARNER,
        (
            arg("--cell-timeout", type=int, default=None, help="seconds per cell of your notebooks (default 60)"),
            arg("--chart", type=Path, default=None, metavar="FILE", help="also write the progress chart (PNG)"),
        ),
    ),
    "similarity": Command(
        "pairs and groups of students whose answers match, whole or in part (copydetect)",
        _run_analytics,
        INSTRUCTOR,
        (
            ASSIGNMENT,
            arg(
                "--threshold",
                type=float,
                default=None,
                help="flag pairs whose overall similarity (0-1, weighted by rarity) reaches this (default 0.5)",
            ),
            arg(
                "--answers-threshold",
                type=float,
                default=None,
                help="flag pairs whose two most similar near-identical answers (0-1, weighted by rarity) reach this "
                "(default 0.7)",
            ),
        ),
    ),
    "analysis": Command(
        "item analysis of every test cell, and the causes the checks named across the class",
        _run_analytics,
        INSTRUCTOR,
        (
            ASSIGNMENT,
            DB,
            arg(
                "--with-blank",
                action="store_true",
                help="keep blank notebooks (nothing written) in the statistics; by default they are reported apart",
            ),
        ),
    ),
    "export": Command(
        "grades out to the LMS: a Canvas gradebook CSV (--canvas) or a plain CSV",
        _run_analytics,
        INSTRUCTOR,
        (
            arg("assignments", nargs="+", metavar="ASSIGNMENT[=CANVAS_ID]"),
            arg(
                "--roster",
                type=Path,
                required=True,
                help="Canvas's gradebook export (Grades > Export), or a CSV with a column `id` "
                "(the course's student ids; "
                "for --canvas also name, canvas_id, sis_user_id, sis_login_id, section)",
            ),
            arg(
                "--roster-id",
                default=None,
                metavar="COLUMN",
                help="the column of a Canvas gradebook export that holds the course's student ids (default "
                "'SIS Login ID')",
            ),
            arg("--canvas", action="store_true", help="Canvas's gradebook import format"),
            arg("--output", type=Path, default=None, help="where to write it (default grader/reports/)"),
            DB,
        ),
    ),
}


def parser() -> argparse.ArgumentParser:
    """`./course`'s argument parser, one subcommand per entry of COMMANDS."""
    top = argparse.ArgumentParser(
        prog="course", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.add_to(sub.add_parser(name, help=command.help, add_help=name != "hub"))
    return top


def _check_assignment(args: argparse.Namespace) -> None:
    """The command's ASSIGNMENT is one of the course's (selfgrade first says what a learner without it should do)."""
    aid = getattr(args, "assignment", None)
    if not aid or aid in assignments():
        return
    if args.command == "selfgrade":
        from twoprim import grading

        grading.require_hidden_checks(aid)  # none here, or unreadable (a hub student): submit instead
    raise CourseError(f"no assignment {aid!r}; known: {', '.join(assignments())}.")


def main(argv: list[str] | None = None) -> int:
    """`./course COMMAND ...`: parse, refuse what the caller may not run, run the command; its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = COMMANDS.get(argv[0]) if argv else None
    if command is not None and command.raw:
        args = argparse.Namespace(command=argv[0], args=argv[1:], argv=argv)
    else:
        args = parser().parse_args(argv)
        args.argv = argv
        command = COMMANDS[args.command]
    if command.refused_to_students:
        from twoprim.classroom.hub import refuse_root_in_classroom  # a classroom's course is its instructor's

        refuse_root_in_classroom(argv)
        refuse_students(args.command)
    _check_assignment(args)
    return command.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
