"""Benchmark: the course's parallel autograde against plain sequential `nbgrader autograde` on a synthetic class.

    .venv/bin/python scripts/bench_autograde.py [--students 50] [--assignments ex01_dot ex04_conv] [--workers N]

For each assignment it builds a class (60% correct, 20% blank, 20% with one wrong function), grades it twice in two
separate copies of the course — once with `twoprim.grading.autograde`, once with one `nbgrader autograde` over the
whole class — and times executing one graded notebook alone with nbclient. It prints seconds per submission and
the speedup side by side, and checks that both graders gave every student the same score.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.classroom import answered, solution_code, student_version, write  # noqa: E402
from twoprim import grading  # noqa: E402
from twoprim.course import nbgrader  # noqa: E402
from twoprim.notebooks import execute  # noqa: E402


def make_course(base: Path, aid: str, n: int) -> Path:
    course = base
    (course / "grader").mkdir(parents=True)
    shutil.copy(ROOT / "grader" / "nbgrader_config.py", course / "grader")
    shutil.copytree(ROOT / "solutions" / aid, course / "solutions" / aid)
    shutil.copytree(ROOT / "exercises" / aid, course / "exercises" / aid)
    sols = [g for g in solution_code(aid)]
    for i in range(n):
        kind = i % 5
        if kind in (0, 1, 2):
            nb = answered(aid)
        elif kind == 3:
            nb = student_version(aid)
        else:  # one wrong function: the last answer cell returns nothing
            gid = sols[i % len(sols)]
            fn = next(l.split("(")[0][4:] for l in solution_code(aid)[gid].splitlines() if l.startswith("def "))
            nb = answered(aid, {gid: solution_code(aid)[gid] + f"\n\n\ndef {fn}(*args, **kwargs):\n    return None\n"})
        write(course / "grader" / "submitted", f"s{i:03d}", aid, nb)
    with tempfile.TemporaryDirectory() as release:
        nbgrader(["generate_assignment", aid, "--force", f"--CourseDirectory.release_directory={release}"],
                 root=course, capture=True)
    return course


def scores(course: Path, aid: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{grading.gradebook_path(course)}", grading.COURSE_ID) as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(aid)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=50)
    parser.add_argument("--assignments", nargs="+", default=["ex01_dot", "ex04_conv"])
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    args = parser.parse_args()
    print(f"{args.students} students per assignment, {args.workers} workers, {os.cpu_count()} cores")
    print(f"{'assignment':14s} {'course s/sub':>12s} {'nbgrader s/sub':>15s} {'speedup':>8s} "
          f"{'nbclient alone s':>17s} {'worker s/sub':>13s} {'worker/nbclient':>16s}")
    for aid in args.assignments:
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            ours = make_course(Path(tmp) / "ours", aid, args.students)
            plain = make_course(Path(tmp) / "plain", aid, args.students)

            start = time.perf_counter()
            outcomes = grading.autograde(aid, root=ours, workers=args.workers, progress=False)
            t_ours = time.perf_counter() - start

            start = time.perf_counter()
            nbgrader(["autograde", aid, "--force"], root=plain, capture=True)
            t_plain = time.perf_counter() - start

            graded = plain / "grader" / "autograded" / "s000" / aid / f"{aid}.ipynb"
            alone = Path(tmp) / "alone.ipynb"
            shutil.copy(graded, alone)
            t_alone = min(execute(alone)[1] for _ in range(3))
            worker = sum(o.seconds for o in outcomes) / len(outcomes)

            mismatch = {s: (a, b) for s, a in scores(ours, aid).items() if (b := scores(plain, aid).get(s)) != a}
            n = args.students
            print(f"{aid:14s} {t_ours / n:12.2f} {t_plain / n:15.2f} {t_plain / t_ours:7.2f}× {t_alone:17.2f} "
                  f"{worker:13.2f} {worker / t_alone:15.2f}×" + (f"  SCORES DIFFER: {mismatch}" if mismatch else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
