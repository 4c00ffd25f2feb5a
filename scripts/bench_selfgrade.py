"""Benchmark: a learner's self-grade of each assignment, from pressing to the table, cold and warm, by the command
and by the notebook's cell; writes data/selfgrade_timings.json (date, machine, load average with each number).

    .venv/bin/python scripts/bench_selfgrade.py [--assignments ex01_dot ...] [--repeat 2] [--out PATH]

Each assignment is self-graded in a throw-away copy of the course, on its answered notebook (every solution in
place: the kernel runs real work), four ways:
- `cold command`: `./course selfgrade AID --notebook ...` with $TWOPRIM_WARM_GRADER=off (no warm grader: every
  self-grade pays Python's start, the grading code's imports, a forkserver and the assignment's release);
- `first warm`: the same command, the warm grader already running but this assignment not yet graded by it;
- `warm command`: the same command again (the learner's second press), best of --repeat;
- `warm cell`: the self-grade cell in a running kernel (`selfgrade(AID)`, the kernel told its notebook as
  JupyterLab does), from the execute request to the reply, best of --repeat.
Times are to the table: the result line, before the feedback HTML is written. The warm grader is this script's
own (a folder of its own) and is stopped at the end.

With `--lab`, each assignment is measured as a learner under `./course lab` meets it instead: the answered notebook
saved (the assignment the learner works on), then a warm grader started as `./course lab` starts it (living while
this process does, told the course), which prepares what the learner works on ahead of any self-grade
(`twoprim.grading.warm`); `lab prepared` is when its log said the assignment was prepared (seconds after its start),
then `lab first` and `lab second` are the learner's first and second `./course selfgrade`. The grader is stopped
after each assignment, so each starts cold. With `--record NOTE` the run is appended, with the machine's load
average before and after, to data/benchmarks/selfgrade_lab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.classroom import answered, course_copy  # noqa: E402
from twoprim.core.notebooks import assignments  # noqa: E402
from twoprim.learner import selfgrade as sg  # noqa: E402

TARGETS = {"ex01_dot": 3.0, "ex06_compile": 10.0}  # seconds, warm; every other assignment 5 s
DEFAULT_TARGET = 5.0
COMMAND_S = 600  # one ./course selfgrade at most
PREPARE_S = 600  # a warm grader preparing one assignment at most (it imports torch and nbgrader first)
LAB_RECORD = ROOT / "data" / "benchmarks" / "selfgrade_lab.json"


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def command(aid: str, notebook: Path, warm: bool) -> tuple[float, str]:
    """Seconds until `./course selfgrade` printed its score line, and its output."""
    env = {**os.environ, sg.ENV_WARM: "on" if warm else "off"}
    start, since = time.monotonic(), time.strftime("%H:%M:%S")
    proc = subprocess.Popen(
        [str(ROOT / "course"), "selfgrade", aid, "--notebook", str(notebook)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    seen, out = None, []
    try:
        for raw in sg.pipe_lines(proc.stdout, start + COMMAND_S):  # bounded, even if a kernel holds the pipe
            line = raw.decode(errors="replace") + "\n"
            out.append(line)
            if seen is None and f"{aid}: " in line and " points" in line:
                seen = time.monotonic() - start
        proc.wait(timeout=60)
    except TimeoutError:
        proc.kill()
        proc.wait(timeout=10)
        raise SystemExit(
            f"{aid}: `./course selfgrade` printed no score within {COMMAND_S} s (since {since}):\n{''.join(out)}"
        ) from None
    if seen is None:
        raise SystemExit(f"{aid}: the command printed no score (exit {proc.returncode}):\n{''.join(out)}")
    return seen, "".join(out)


class Kernel:
    """One kernel, told its notebook as JupyterLab tells it (JPY_SESSION_NAME), for the cell path."""

    def __init__(self, notebook: Path):
        from jupyter_client.manager import start_new_kernel

        env = {**os.environ, "JPY_SESSION_NAME": str(notebook), sg.ENV_WARM: "on"}
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(notebook.parent))
        self.run("from twoprim.selfgrade import selfgrade")

    def run(self, code: str) -> tuple[float, str]:
        start = time.monotonic()
        out: list[str] = []
        reply = self.kc.execute_interactive(
            code,
            timeout=600,
            output_hook=lambda m: out.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None,
        )
        if reply["content"]["status"] != "ok":
            raise SystemExit(f"the cell failed: {reply['content']}")
        return time.monotonic() - start, "".join(out)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def bench(aid: str, base: Path, repeat: int) -> dict:
    course = course_copy(base / aid, aid)
    notebook = course / "exercises" / aid / f"{aid}.ipynb"
    import nbformat

    nbformat.write(answered(aid), str(notebook))
    row: dict = {}
    row["cold command"], out = command(aid, notebook, warm=False)
    row["cold load"] = _load()
    row["score"] = next(
        line.split(": ", 1)[1].split(" points")[0] for line in out.splitlines() if line.startswith(f"{aid}: ")
    )
    row["first warm"], _ = command(aid, notebook, warm=True)
    row["warm command"] = min(command(aid, notebook, warm=True)[0] for _ in range(repeat))
    row["warm command load"] = _load()
    kernel = Kernel(notebook)
    try:
        cells = [kernel.run(f"selfgrade({aid!r})") for _ in range(repeat)]
    finally:
        kernel.close()
    row["warm cell"] = min(t for t, _ in cells)
    row["warm cell load"] = _load()
    shown = [line for line in cells[-1][1].splitlines() if line.startswith("Self-grade: ")]
    row["cell shows"] = shown[0] if shown else cells[-1][1][-300:]
    row["target"] = TARGETS.get(aid, DEFAULT_TARGET)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}


def lab(aid: str, base: Path) -> dict:
    """`--lab`: the learner's first and second self-grade of `aid` under ./course lab's warm grader, once it has
    prepared the assignment the learner works on."""
    import nbformat

    course = course_copy(base / f"lab-{aid}", aid)
    notebook = course / "exercises" / aid / f"{aid}.ipynb"
    nbformat.write(answered(aid), str(notebook))  # what the learner saved last
    log = sg.grader_socket().with_suffix(".log")
    seen = log.read_text(errors="replace") if log.is_file() else ""
    row: dict = {"load before": _load()}
    start, since = time.monotonic(), time.strftime("%H:%M:%S")
    why = sg.start_warm_grader(os.getpid(), course)  # as ./course lab does, beside JupyterLab
    if why:
        raise SystemExit(f"{aid}: the warm grader did not start: {why}")
    line = f"prepared {aid} of {course.resolve()}"
    while line not in (text := log.read_text(errors="replace")[len(seen) :]):
        if f"{aid} of {course.resolve()} not prepared" in text or time.monotonic() - start > PREPARE_S:
            sg.stop_warm_grader()
            raise SystemExit(
                f"{aid}: the warm grader did not prepare it within {PREPARE_S} s (since {since}); its "
                f"log:\n{text[-3000:]}"
            )
        time.sleep(0.2)
    row["lab prepared"] = time.monotonic() - start
    row["lab first"], out = command(aid, notebook, warm=True)
    row["lab second"], _ = command(aid, notebook, warm=True)
    row["score"] = next(
        line.split(": ", 1)[1].split(" points")[0] for line in out.splitlines() if line.startswith(f"{aid}: ")
    )
    row["load after"] = _load()
    sg.stop_warm_grader()
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}


def record(rows: dict, note: str, argv: list[str], loads: tuple) -> None:
    """Append this `--lab` run to data/benchmarks/selfgrade_lab.json (one record per run)."""
    data = (
        json.loads(LAB_RECORD.read_text())
        if LAB_RECORD.is_file()
        else {
            "title": "A learner's first self-grade under `./course lab`",
            "about": "`scripts/bench_selfgrade.py --lab`: for each assignment, its answered notebook saved, then a "
            "warm grader started as `./course lab` starts it, which prepares the assignments the learner works on "
            'before any self-grade (`twoprim/grading/warm.py`); "prepared" is when it had prepared this one '
            '(seconds after its start), "first" and "second" the learner\'s first and second `./course '
            "selfgrade` after that, to the score line. Each assignment starts with a new warm grader.",
            "columns": {
                "assignment": "assignment",
                "prepared_s": "prepared after s",
                "first_s": "first self-grade s",
                "second_s": "second self-grade s",
                "load_before": "load average before",
                "load_after": "load average after",
                "score": "score",
            },
            "runs": [],
        }
    )
    data["runs"].append(
        {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "time": time.strftime("%H:%M", time.gmtime()),
            "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, {platform.node()}",
            "command": " ".join(["scripts/bench_selfgrade.py", *argv]),
            "conditions": f"load average {loads[0]} before, {loads[1]} after (1, 5, 15 min)",
            "numbers": [
                {
                    "assignment": aid,
                    "prepared_s": r["lab prepared"],
                    "first_s": r["lab first"],
                    "second_s": r["lab second"],
                    "load_before": r["load before"],
                    "load_after": r["load after"],
                    "score": r["score"],
                }
                for aid, r in rows.items()
            ],
            "note": note,
        }
    )
    LAB_RECORD.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"recorded in {LAB_RECORD}")


def main() -> None:
    """Measure, print a table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assignments", nargs="*", default=None)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "selfgrade_timings.json")
    parser.add_argument("--lab", action="store_true", help="as a learner under ./course lab meets it (see above)")
    parser.add_argument("--record", metavar="NOTE", help="with --lab: append the run to " + str(LAB_RECORD))
    args = parser.parse_args()
    aids = args.assignments or assignments()
    rows = {}
    if args.lab:
        before = tuple(round(x, 2) for x in os.getloadavg())
        with tempfile.TemporaryDirectory(prefix="bench-selfgrade-") as tmp:
            folder = Path(tmp) / "grader"
            folder.mkdir(mode=0o700)
            os.environ[sg.ENV_DIR] = str(folder)
            os.environ[sg.ENV_WARM] = "on"
            for aid in aids:
                rows[aid] = r = lab(aid, Path(tmp))
                print(
                    f"{aid:<16} prepared after {r['lab prepared']:6.2f} s  first {r['lab first']:6.2f} s  second "
                    f"{r['lab second']:6.2f} s  (load {r['load before']} -> {r['load after']}; score {r['score']})",
                    flush=True,
                )
        if args.record:
            record(rows, args.record, sys.argv[1:], (before, tuple(round(x, 2) for x in os.getloadavg())))
        return
    with tempfile.TemporaryDirectory(prefix="bench-selfgrade-") as tmp:
        folder = Path(tmp) / "grader"
        folder.mkdir(mode=0o700)
        os.environ[sg.ENV_DIR] = str(folder)
        os.environ[sg.ENV_WARM] = "on"
        start = time.monotonic()
        sg._start(sg.grader_socket()).close()
        started = time.monotonic() - start
        try:
            for aid in aids:
                rows[aid] = bench(aid, Path(tmp), args.repeat)
                r = rows[aid]
                print(
                    f"{aid:<16} cold {r['cold command']:6.2f} s  first warm {r['first warm']:6.2f} s  "
                    f"warm command {r['warm command']:5.2f} s  warm cell {r['warm cell']:5.2f} s  "
                    f"(target {r['target']:g} s; load {r['warm command load']}; score {r['score']})",
                    flush=True,
                )
        finally:
            sg.stop_warm_grader()
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        },
        "load average at the end": [round(x, 2) for x in os.getloadavg()],
        "warm grader start s": round(started, 2),
        "seconds": rows,
        "meaning": "seconds from pressing to the table (the score line), per assignment: cold = no warm grader; "
        "first warm = the grader running, this assignment's first self-grade in it; warm = again "
        "(best of the repeats); cell = the notebook's self-grade cell in a running kernel",
    }
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
