"""Reports an instructor can act on: grader/reports/<aid>.csv (one row per student with status, reason and
lateness), a per-test chart <aid>_tests.png and a one-screen summary, all read from the gradebook (nbgrader's scores
and late penalties, and the course's `twoprim_autograde` row of each submission: its status, reason and worker)."""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

from ..notebooks import ROOT
from .gradebook import database_url, gradebook, statuses

__all__ = ["write_reports", "summary", "format_summary", "number"]

# score: after the late penalty (nbgrader export's `score`); seconds_late and late_penalty from the due date, if any
REPORT_FIELDS = ["student", "score", "max_score", "status", "reason", "seconds_late", "late_penalty"]


def write_reports(aid: str, *, root: Path = ROOT, url: str | None = None) -> dict:
    """grader/reports/<aid>.csv, <aid>_tests.png and the summary, from the gradebook at `url` (default: the
    course's)."""
    url = url or database_url(root)
    reports = root / "grader" / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    known = statuses(aid, url)
    rows, per_test = [], {}
    workers: dict[str, int] = {}
    with gradebook(url) as gb:
        for sub in sorted(gb.assignment_submissions(aid), key=lambda s: s.student.id):
            st = known.get(sub.student.id, {"status": "graded", "reason": ""})
            if st.get("worker"):
                workers[st["worker"]] = workers.get(st["worker"], 0) + 1
            penalty = sub.late_submission_penalty or 0.0
            rows.append({"student": sub.student.id, "score": number(max(0.0, sub.score - penalty)),
                         "max_score": number(sub.max_score), "status": st["status"], "reason": st["reason"],
                         "seconds_late": number(sub.total_seconds_late), "late_penalty": number(penalty)})
            for nb in sub.notebooks:
                for grade in nb.grades:
                    per_test.setdefault(grade.name, []).append((grade.score, grade.max_score))
    with open(reports / f"{aid}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=REPORT_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    _histogram(aid, per_test, reports / f"{aid}_tests.png")
    return {**summary(aid, rows), "workers": workers}


def number(x: float) -> float | int:
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
    graded = [r for r in rows if r["status"] == "graded"]
    scores = [float(r["score"]) for r in graded]
    return {"assignment": aid, "submissions": len(rows), "graded": len(graded), "failed": len(rows) - len(graded),
            "flagged": sum(r["status"] == "flagged" for r in rows),
            "late": sum(float(r.get("seconds_late") or 0) > 0 for r in rows),
            "mean": statistics.mean(scores) if scores else None, "median": statistics.median(scores) if scores else None,
            "max_score": rows[0]["max_score"] if rows else None}


def format_summary(s: dict, root: Path = ROOT) -> str:
    mean = "-" if s["mean"] is None else f"{s['mean']:.2f}"
    median = "-" if s["median"] is None else f"{s['median']:.2f}"
    reports = (root / "grader" / "reports").relative_to(root)
    held = f" ({s['flagged']} held for review)" if s.get("flagged") else ""
    held += f"; {s['late']} late (scores after the late penalty)" if s.get("late") else ""
    workers = s.get("workers") or {}
    by = (f"\ngraded by {len(workers)} workers: " + ", ".join(f"{w} ({n})" for w, n in sorted(workers.items()))
          if len(workers) > 1 else "")
    return (f"{s['assignment']}: {s['submissions']} submissions, {s['graded']} graded, {s['failed']} failed{held}; "
            f"mean {mean}, median {median} of {s['max_score']}{by}\n"
            f"reports: {reports}/{s['assignment']}.csv, {reports}/{s['assignment']}_tests.png")
