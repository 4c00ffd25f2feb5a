"""Where one submission's grading time goes, per assignment.

    .venv/bin/python scripts/profile_grading.py [--assignments ex01_dot ...] [--markdown]

For each assignment it grades three correct submissions with one worker (so nothing runs beside them) and reports
the third, warm as every submission after the first in a class is: the phases `twoprim.grading` records for it
(preparing the submission, the kernel forked and answering, each cell, the grader-side verdicts, nbgrader's own
bookkeeping), and once per worker and assignment the forkserver's start (importing torch, ipykernel, Dynamo and the
checks, inside the sandbox). Beside them, what a cold kernel would pay for the same imports, measured in a fresh
interpreter: the cost the forkserver takes out of every submission.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.classroom import answered, course_copy, write  # noqa: E402
from twoprim import grading  # noqa: E402
from twoprim.core.catalog import checks_module_name  # noqa: E402
from twoprim.core.notebooks import assignments  # noqa: E402
from twoprim.grading import sandbox  # noqa: E402


def cold_imports(aid: str) -> dict[str, float]:
    """Seconds a fresh interpreter spends importing what a graded kernel needs (best of three)."""
    steps = {
        "torch": "import torch",
        "ipykernel": "import ipykernel.kernelapp, ipykernel.ipkernel",
        "Dynamo (first dispatch mode)": "import torch._dynamo",
        "twoprim checks": f"import twoprim.core.checks, twoprim.{checks_module_name(aid)}",
    }
    out, before = {}, []
    for name, stmt in steps.items():
        code = "; ".join([*before, "import time", "t = time.perf_counter()", stmt, "print(time.perf_counter() - t)"])
        runs = [
            float(
                subprocess.run(
                    [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
                ).stdout.split()[-1]
            )
            for _ in range(3)
        ]
        out[name] = min(runs)
        before.append(stmt)
    return out


def sandbox_start() -> float:
    """Seconds bubblewrap takes to build an empty sandbox and run `true` in it (best of five)."""
    argv = sandbox._bwrap_args([], Path("/"), probe=True) + ["true"]
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(argv, check=True, timeout=60)
        runs.append(time.perf_counter() - start)
    return min(runs)


def profile(aid: str) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory(prefix="profile-") as tmp:
        course = course_copy(Path(tmp) / "course", aid)
        for i in range(3):
            write(course / "grader" / "submitted", f"s{i}", aid, answered(aid))
        outcomes = grading.autograde(aid, root=course, workers=1, progress=False)
    # one forkserver per worker serves every assignment: only the first assignment profiled starts it
    start = max(o.phases.get("forkserver", 0.0) for o in outcomes)
    warm = outcomes[-1]
    assert warm.status == "graded", warm.reason
    return {**warm.phases, "total": warm.seconds}, start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assignments", nargs="+", default=assignments())
    parser.add_argument(
        "--markdown", action="store_true", help="print the table as Markdown (for docs/guides/development.md)"
    )
    args = parser.parse_args()
    nbgrader_import = min(
        float(
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import time;t=time.perf_counter();import nbgrader.apps.api;print(time.perf_counter()-t)",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=300,
            ).stdout.split()[-1]
        )
        for _ in range(3)
    )
    print(
        f"sandbox start (bwrap, empty): {sandbox_start():.3f} s; nbgrader's import, once per worker: "
        f"{nbgrader_import:.2f} s"
    )
    rows = []
    for aid in args.assignments:
        phases, warm_start = profile(aid)
        cold = cold_imports(aid)
        cells = phases.get("cells", {})
        slow = max(cells.items(), key=lambda kv: kv[1]) if cells else ("-", 0.0)
        rows.append((aid, phases, warm_start, cold, sum(cells.values()), slow))
        print(
            f"{aid}: {phases['total']:.2f} s warm; {phases}; forkserver start {warm_start:.2f} s; cold imports {cold}",
            flush=True,
        )
    if args.markdown:
        print(
            "\n| assignment | prepare | kernel forked and answering | cells | slowest cell | verdicts in the grader "
            "| nbgrader bookkeeping | one submission | forkserver start (once per worker) | a cold kernel's "
            "imports, saved per submission |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for aid, p, warm_start, cold, cells, (name, secs) in rows:
            saved = " + ".join(f"{k} {v:.2f}" for k, v in cold.items())
            print(
                f"| {aid} | {p.get('prepare', 0):.2f} | {p.get('kernel start', 0):.2f} | {cells:.2f} | "
                f"{name.removeprefix(aid + '-')} {secs:.2f} | {p.get('verdicts', 0):.2f} | "
                f"{p.get('nbgrader bookkeeping', 0):.2f} | {p['total']:.2f} | "
                f"{f'{warm_start:.2f}' if warm_start > 0.05 else 'started above'} | {saved} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
