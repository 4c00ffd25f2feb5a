"""Benchmark: the course's autograde against plain sequential `nbgrader autograde`, side by side, on one class.

    .venv/bin/python scripts/bench_autograde.py [--students 20] [--assignments ex01_dot ...] [--workers N]
    .venv/bin/python scripts/bench_autograde.py --scheduler tls://HOST:8786 [--students 40]
    .venv/bin/python scripts/bench_autograde.py --repeat 3 [--students 20]   (scores only: identical every run?)

For each assignment (all of them by default) it builds a class (60% correct, 20% blank, 20% with one wrong
function) in two copies of the course and grades it twice, one after the other on the same machine: with
`twoprim.grading.autograde` (sandboxed, forked warm kernels, grader-side verdicts, this machine's cores) and with
one `nbgrader autograde` over the whole class (plain nbgrader: sequential, unisolated). It prints seconds per
submission of each, their ratio, and whether both gave every student the same score; then the projected time of
200 students × every assignment measured.

Start-up is measured apart, first: the local cluster and each worker's warm forkserver, which every
`./course autograde` command pays once (nbgrader's own start is inside its seconds). Each assignment's class is then
graded on that warm cluster; its first submissions still pay what a run does once per assignment (the workers'
warm-up of its checks and test cells, its expected values), overlapped with its grading. "with start-up" charges
start-up to every assignment; with `--all-in`, each class is then graded again as a new command grades it, on a
cluster started by that run (the one before closed first), so that its seconds hold the start-up as the run
overlaps it (`all_in`). The projection charges start-up once per assignment and fits each assignment's run as fixed
+ marginal: the marginal rate from when the second half of the class's grades arrived, the fixed part what the run
took beyond n × that rate. `--students 40` on one assignment checks the fit against a class twice the size. With
`--record NOTE` the table is appended as a run, with the machine's load average before and after, to
data/benchmarks/autograde_speedup.json.

With `--scheduler` it grades the class of each assignment on that Dask cluster twice, on its first worker alone
and on its first two workers, and prints submissions per second of each (the ratio is the figure: it scales with
machines).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.classroom import answered, course_copy, solution_code, student_version, write  # noqa: E402
from twoprim import grading  # noqa: E402
from twoprim.core.notebooks import assignments  # noqa: E402
from twoprim.grading.nbgrader_cli import generate_assignment, nbgrader  # noqa: E402

PROJECTED_CLASS = 200


def make_course(base: Path, aid: str, n: int) -> Path:
    course = course_copy(base, aid)
    sols = [gid for gid, code in solution_code(aid).items() if "\ndef " in f"\n{code}"]  # short answers have none
    for i in range(n):
        kind = i % 5
        if kind in (0, 1, 2):
            nb = answered(aid)
        elif kind == 3:
            nb = student_version(aid)
        else:  # one wrong function: an answer cell redefines its function to return nothing
            gid = sols[i % len(sols)]
            fn = next(
                line.split("(")[0][4:] for line in solution_code(aid)[gid].splitlines() if line.startswith("def ")
            )
            nb = answered(aid, {gid: solution_code(aid)[gid] + f"\n\n\ndef {fn}(*args, **kwargs):\n    return None\n"})
        write(course / "grader" / "submitted", f"s{i:03d}", aid, nb)
    with tempfile.TemporaryDirectory() as release:
        generate_assignment(aid, root=course, release=Path(release))
    return course


def scores(course: Path, aid: str) -> dict[str, float | None]:
    from nbgrader.api import Gradebook

    with Gradebook(grading.database_url(course), grading.COURSE_ID) as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(aid)}


def fit(arrivals: list[float]) -> tuple[float, float]:
    """(fixed s, marginal s/submission) of a run whose grades arrived at `arrivals` (seconds from its start): the
    marginal rate over the second half of the class, the fixed part what the whole run took beyond n × that."""
    times, n = sorted(arrivals), len(arrivals)
    half = n // 2
    marginal = (times[-1] - times[half - 1]) / (n - half) if half else times[-1] / n
    return max(0.0, times[-1] - n * marginal), marginal


def differences(
    runs: list[dict[str, float | None]], reference: dict[str, float | None] | None = None
) -> dict[str, list]:
    """student -> [score of each run (, the reference's)] for every student whose scores are not all the same (or a
    student missing from a run: None there); empty when every run gave every student the same score."""
    students = sorted(set().union(*runs, reference or {}))
    out = {}
    for s in students:
        scores = [run.get(s) for run in runs] + ([reference.get(s)] if reference is not None else [])
        if len(set(scores)) > 1:
            out[s] = scores
    return out


def repeated(args) -> int:
    """Grade each assignment's class `--repeat` times in a row with ./course autograde (--force) and once with plain
    nbgrader; every student must get the same score every time. Exit 1 when one does not."""
    print(
        f"{args.students} students per assignment, {args.workers} workers, {args.repeat} runs in a row, "
        f"{os.cpu_count()} cores"
    )
    bad = 0
    for aid in args.assignments:
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            ours = make_course(Path(tmp) / "ours", aid, args.students)
            plain = make_course(Path(tmp) / "plain", aid, args.students)
            runs = []
            for _ in range(args.repeat):
                grading.autograde(aid, root=ours, workers=args.workers, progress=False, force=True)
                runs.append(scores(ours, aid))
            nbgrader(["autograde", aid, "--force"], root=plain, capture=True)
            differ = differences(runs, scores(plain, aid))
            bad += bool(differ)
            print(
                f"{aid:14s} "
                + (
                    f"DIFFER (runs..., nbgrader): {differ}"
                    if differ
                    else f"identical in {args.repeat} runs and plain nbgrader "
                    f"({len(runs[0])} students, mean {sum(runs[0].values()) / len(runs[0]):.2f})"
                ),
                flush=True,
            )
    return 1 if bad else 0


def start_up(workers: int) -> float:
    """Seconds to start what one `./course autograde` run starts before its first submission: the local cluster of
    `workers` processes, each one's warm forkserver (one thread per kernel, as autograde runs them) and the imports its
    grading tasks need, done by the worker's keeper thread as a run has it do them (`twoprim.grading.keeper`)."""
    from twoprim.grading import cluster, keeper

    start = time.perf_counter()
    client = cluster.connect(None, workers)
    try:
        client.run(keeper.warm_worker, "", 1 if workers > 1 else None, [])  # the forkserver, the grading imports
        client.run(keeper.forkserver, 1 if workers > 1 else None)  # returns once the keeper has done both
    finally:
        client.close()
    return time.perf_counter() - start


def _graded(aid: str, course: Path, workers: int) -> tuple[float, list[float]]:
    """Seconds `grading.autograde` took on `course`, and when each outcome arrived (seconds from its start)."""
    arrivals: list[float] = []
    start = time.perf_counter()
    grading.autograde(
        aid,
        root=course,
        workers=workers,
        progress=False,
        on_outcome=lambda _: arrivals.append(time.perf_counter() - start),
    )
    return time.perf_counter() - start, arrivals


def side_by_side(args) -> int:
    from twoprim.grading import cluster

    print(f"{args.students} students per assignment, {args.workers} workers, {os.cpu_count()} cores")
    before = _load()
    startup = start_up(args.workers)
    print(
        f"start-up (once per ./course autograde run): {startup:.1f} s, the local cluster and its workers' forkservers"
    )
    print(
        f"{'assignment':14s} {'course s/sub':>12s} {'nbgrader s/sub':>15s} {'speedup':>8s} {'with start-up':>14s} "
        f"{'fixed s':>8s} {'marginal s/sub':>15s} {'load':>11s}  scores"
    )
    average, projected, rows = 0.0, 0.0, []
    for aid in args.assignments:
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            ours = make_course(Path(tmp) / "ours", aid, args.students)
            plain = make_course(Path(tmp) / "plain", aid, args.students)
            load = _load()
            t_ours, arrivals = _graded(aid, ours, args.workers)
            start = time.perf_counter()
            nbgrader(["autograde", aid, "--force"], root=plain, capture=True)
            t_plain = time.perf_counter() - start
            mine, theirs = scores(ours, aid), scores(plain, aid)
            mismatch = {s: (a, theirs.get(s)) for s, a in mine.items() if theirs.get(s) != a}
            n = args.students
            fixed, marginal = fit(arrivals)
            average += t_ours / n
            projected += startup + fixed + PROJECTED_CLASS * marginal
            rows.append(
                {
                    "assignment": aid,
                    "course_s": round(t_ours / n, 2),
                    "nbgrader_s": round(t_plain / n, 2),
                    "speedup": round(t_plain / t_ours, 2),
                    "with_startup": round(t_plain / (t_ours + startup), 2),
                    "fixed_s": round(fixed, 1),
                    "marginal_s": round(marginal, 2),
                    "theirs": theirs,
                    "t_plain": t_plain,
                    "mismatch": mismatch,
                }
            )
            print(
                f"{aid:14s} {t_ours / n:12.2f} {t_plain / n:15.2f} {t_plain / t_ours:7.2f}× "
                f"{t_plain / (t_ours + startup):13.2f}× {fixed:8.1f} {marginal:15.2f} {load:5.2f}->{_load():<5.2f} "
                + (f"DIFFER: {mismatch}" if mismatch else "identical"),
                flush=True,
            )
    k = len(args.assignments)
    print(
        f"projected: {PROJECTED_CLASS} students × {k} assignments = {projected / 60:.1f} min on this machine "
        f"(per assignment: start-up + fixed + {PROJECTED_CLASS} × marginal); at each class's average rate "
        f"instead, {(k * startup + PROJECTED_CLASS * average) / 60:.1f} min"
    )
    if args.all_in:
        print("each class again as a new `./course autograde` grades it, its own cluster started inside its seconds:")
        for row in rows:
            with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
                ours = make_course(Path(tmp) / "ours", row["assignment"], args.students)
                cluster.close_local_clusters()
                load = _load()
                t_all, _ = _graded(row["assignment"], ours, args.workers)
                row["mismatch"].update(
                    {
                        s: (a, row["theirs"].get(s))
                        for s, a in scores(ours, row["assignment"]).items()
                        if row["theirs"].get(s) != a
                    }
                )
                row["all_in"] = round(row["t_plain"] / t_all, 2)
                print(
                    f"{row['assignment']:14s} {t_all:6.1f} s in all: {row['all_in']:5.2f}× plain nbgrader "
                    f"(load {load:.2f}->{_load():.2f})" + (f" DIFFER: {row['mismatch']}" if row["mismatch"] else ""),
                    flush=True,
                )
    if args.record:
        _record(rows, args, before, _load(), startup, projected)
    return 0 if not any(r["mismatch"] for r in rows) else 1


RECORD = ROOT / "data" / "benchmarks" / "autograde_speedup.json"


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _record(rows: list[dict], args, before: float, after: float, startup: float, projected: float) -> None:
    """Append this run (every assignment's row) to data/benchmarks/autograde_speedup.json."""
    import json
    import platform

    data = json.loads(RECORD.read_text(encoding="utf-8"))
    data["columns"].setdefault("all_in", "a new command, start-up inside ×")
    keys = ("assignment", "course_s", "nbgrader_s", "speedup", "with_startup", "all_in", "fixed_s", "marginal_s")
    data["runs"].append(
        {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "time": time.strftime("%H:%M", time.gmtime()),
            "machine": data["runs"][-1]["machine"]
            if os.cpu_count() == 2
            else f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
            "command": " ".join(
                ["scripts/bench_autograde.py", *(a if a != args.record else "NOTE" for a in sys.argv[1:])]
            ),
            "conditions": f"load average {before} before, {after} after (the machine is shared)",
            "numbers": [{k: r[k] for k in keys if k in r} for r in rows],
            "note": args.record,
            "summary": {
                "start-up (the local cluster and each worker's warm forkserver, measured apart)": f"{startup:.1f} s",
                f"{PROJECTED_CLASS} students × these {len(rows)} assignments, projected (start-up + fixed + "
                f"{PROJECTED_CLASS} × marginal)": f"{projected / 60:.1f} min",
                "scores identical to plain nbgrader": "every student"
                if not any(r["mismatch"] for r in rows)
                else "NO: " + ", ".join(r["assignment"] for r in rows if r["mismatch"]),
            },
        }
    )
    RECORD.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded in {RECORD}")


def on_cluster(args) -> int:
    from twoprim.grading import connect

    with connect(args.scheduler, 1) as client:  # tls:// with Dask's TLS configuration, as ./course autograde
        workers = sorted(client.scheduler_info()["workers"])
    if len(workers) < 2:
        raise SystemExit(f"error: the cluster at {args.scheduler} has {len(workers)} worker(s); start two")
    print(f"{args.students} students per assignment on {args.scheduler}")
    print(f"{'assignment':14s} {'1 worker sub/s':>15s} {'2 workers sub/s':>16s} {'ratio':>6s}")
    for aid in args.assignments:
        rates = []
        for some in (workers[:1], workers[:2]):
            with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
                course = make_course(Path(tmp) / "c", aid, args.students)
                start = time.perf_counter()
                grading.autograde(aid, root=course, progress=False, scheduler=args.scheduler, on_workers=some)
                rates.append(args.students / (time.perf_counter() - start))
        print(f"{aid:14s} {rates[0]:15.2f} {rates[1]:16.2f} {rates[1] / rates[0]:5.2f}×", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--assignments", nargs="+", default=assignments())
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--scheduler", default=None, help="a Dask scheduler: compare one worker with two")
    parser.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="grade each class this many times in a row (and once with nbgrader): are the scores identical?",
    )
    parser.add_argument(
        "--record",
        metavar="NOTE",
        help="append the side-by-side table as a run to " + "data/benchmarks/autograde_speedup.json, with NOTE",
    )
    parser.add_argument(
        "--all-in",
        action="store_true",
        help="then grade each class again as a new command does, "
        "its own cluster started inside its seconds (the `all_in` column)",
    )
    args = parser.parse_args()
    if args.repeat:
        return repeated(args)
    return on_cluster(args) if args.scheduler else side_by_side(args)


if __name__ == "__main__":
    sys.exit(main())
