"""Reports an instructor can act on: grader/reports/<aid>.csv (one row per student with status, reason and
lateness), a per-test chart <aid>_tests.png and a one-screen summary, all read from the gradebook (nbgrader's scores
and late penalties, and the course's `twoprim_autograde` row of each submission: its status, reason and worker)."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from twoprim.config import ROOT
from twoprim.grading.gradebook import database_url, gradebook, not_graded, statuses

__all__ = ["write_reports", "summary", "format_summary", "number", "problems", "format_problems", "NOT_GRADED"]

NOT_GRADED = "not graded"  # `submission.NOT_GRADED` (not imported: that module imports torch)

# score: after the late penalty (nbgrader export's `score`); seconds_late and late_penalty from the due date, if any
REPORT_FIELDS = ["student", "score", "max_score", "status", "reason", "seconds_late", "late_penalty"]


def write_reports(aid: str, *, root: Path = ROOT, url: str | None = None, run: list | None = None) -> dict:
    """grader/reports/<aid>.csv, <aid>_tests.png and the summary, from the gradebook at `url` (default: the
    course's). A submission the grader could not grade (a fault of the grader, `gradebook.record_not_graded`) is
    a row "not graded" with why: its score, if any, is the earlier grade, kept. `run`: the outcomes of the run
    that just ended; the summary's workers are this run's (none without it)."""
    url = url or database_url(root)
    reports = root / "grader" / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    known = statuses(aid, url)
    pending = not_graded(aid, url)
    rows, per_test = [], {}
    with gradebook(url) as gb:
        max_score = None
        for sub in sorted(gb.assignment_submissions(aid), key=lambda s: s.student.id):
            st = known.get(sub.student.id, {"status": "graded", "reason": ""})
            penalty = sub.late_submission_penalty or 0.0
            max_score = number(sub.max_score)
            row = {
                "student": sub.student.id,
                "score": number(max(0.0, sub.score - penalty)),
                "max_score": max_score,
                "status": st["status"],
                "reason": st["reason"],
                "seconds_late": number(sub.total_seconds_late),
                "late_penalty": number(penalty),
            }
            late = pending.pop(sub.student.id, None)
            if late is not None and late["digest"] != st.get("digest"):
                row.update(
                    status=NOT_GRADED,
                    reason=f"{late['reason']}; the score is the earlier grade's, kept "
                    f"(graded {st.get('graded_at') or 'before'})",
                )
            rows.append(row)
            for nb in sub.notebooks:
                for grade in nb.grades:
                    per_test.setdefault(grade.name, []).append((grade.score, grade.max_score))
    for student, late in pending.items():  # never graded before: no score at all, never a 0
        rows.append(
            {
                "student": student,
                "score": "",
                "max_score": max_score if max_score is not None else "",
                "status": NOT_GRADED,
                "reason": late["reason"],
                "seconds_late": "",
                "late_penalty": "",
            }
        )
    rows.sort(key=lambda r: r["student"])
    with open(reports / f"{aid}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=REPORT_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    _histogram(aid, per_test, reports / f"{aid}_tests.png")
    workers: dict[str, int] = {}
    for outcome in run or []:
        if getattr(outcome, "worker", "") and outcome.status != NOT_GRADED:
            workers[outcome.worker] = workers.get(outcome.worker, 0) + 1
    return {**summary(aid, rows), "workers": workers, "problems": problems(rows)}


def number(x: float) -> float | int:
    """A score as reports show it: an int when whole, else rounded to 3 decimals."""
    return int(x) if float(x).is_integer() else round(float(x), 3)


def _histogram(aid: str, per_test: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(per_test)
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(names) + 2), 4))
    means = [statistics.mean(s / m if m else 0 for s, m in per_test[n]) for n in names] if names else []
    ax.bar(range(len(names)), means, color="#4c72b0")
    ax.set_xticks(range(len(names)), [n.removeprefix(f"{aid}-") for n in names], rotation=60, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean fraction of points")
    ax.set_title(f"{aid}: score per test ({len(next(iter(per_test.values()), []))} submissions)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary(aid: str, rows: list[dict]) -> dict:
    """Counts that add up: every row is graded, failed, flagged (held for review) or not graded."""
    graded = [r for r in rows if r["status"] == "graded"]
    scores = [float(r["score"]) for r in graded]
    return {
        "assignment": aid,
        "submissions": len(rows),
        "graded": len(graded),
        "failed": sum(r["status"] == "failed" for r in rows),
        "flagged": sum(r["status"] == "flagged" for r in rows),
        "not_graded": sum(r["status"] == NOT_GRADED for r in rows),
        "late": sum(float(r.get("seconds_late") or 0) > 0 for r in rows),
        "mean": statistics.mean(scores) if scores else None,
        "median": statistics.median(scores) if scores else None,
        "max_score": next((r["max_score"] for r in rows if r["max_score"] != ""), None),
    }


def format_summary(s: dict, root: Path = ROOT) -> str:
    """The summary autograde and report print: scores, held, not graded, late, workers and where the reports are."""
    mean = "-" if s["mean"] is None else f"{s['mean']:.2f}"
    median = "-" if s["median"] is None else f"{s['median']:.2f}"
    reports = (root / "grader" / "reports").relative_to(root)
    held = f", {s['flagged']} held for review" if s.get("flagged") else ""
    held += f", {s['not_graded']} not graded (a fault of the grader, not the students')" if s.get("not_graded") else ""
    held += f"; {s['late']} late (scores after the late penalty)" if s.get("late") else ""
    workers = s.get("workers") or {}
    by = (
        f"\nthis run was graded by {len(workers)} workers: "
        + ", ".join(f"{w} ({n})" for w, n in sorted(workers.items()))
        if len(workers) > 1
        else ""
    )
    return (
        f"{s['assignment']}: {s['submissions']} submissions, {s['graded']} graded, {s['failed']} failed{held}; "
        f"mean {mean}, median {median} of {s['max_score']}{by}\n"
        f"reports: {reports}/{s['assignment']}.csv, {reports}/{s['assignment']}_tests.png"
    )


def problems(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(status, student, reason) of every submission that is not simply graded, in the report's order."""
    return [(r["status"], r["student"], r["reason"]) for r in rows if r["status"] in ("failed", "flagged", NOT_GRADED)]


def format_problems(s: dict, width: int = 160) -> str:
    """One line per failed, held or not graded student, with its reason (cut to `width`), for the terminal; then
    what to do about those not graded."""
    label = {"failed": "failed", "flagged": "held", NOT_GRADED: "NOT GRADED"}
    lines = []
    for status, student, reason in s.get("problems") or []:
        line = f"  {label[status]:10s} {student}: {' '.join(str(reason).split())}"
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    if s.get("not_graded"):
        lines.append(
            f"{s['not_graded']} submission(s) not graded through a fault of the grader (no grade written "
            f"or changed): run the same command again, without --force, to grade them"
        )
    return "\n".join(lines)
