"""`./course analysis ASSIGNMENT`: item analysis of every test cell, from the gradebook (instructor side).

For each test cell (nbgrader's grade cells, visible and hidden) over the students whose submission was graded:

    difficulty       the mean fraction of its points students got (1.0: everyone passes; 0.0: nobody does)
    discrimination   the corrected point-biserial correlation: the test's score against the rest of the assignment
                     (the total without this test), Pearson's r (`scipy.stats.pearsonr`; with a pass/fail test it
                     is the point-biserial). Near 1: the students who pass it are those who do well elsewhere.
                     Negative: the strong students lose it, which usually means the test is broken.
    lost             how many students did not get all of its points

Flagged: tests nobody or everybody passes (they tell the class apart from nothing), and tests whose discrimination
is negative. Failed or held submissions (a broken notebook, a held audit) are left out: their zeros say nothing
about a test.

    grader/reports/<aid>-items.csv     one row per test
    grader/reports/<aid>-items.html    the table, flags, and the two plots below
    grader/reports/<aid>-items.png     score histogram; difficulty against discrimination
"""
from __future__ import annotations

import csv
import html
import math
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Item", "Analysis", "analyse", "item_statistics", "write_report"]


@dataclass
class Item:
    """One test cell's statistics: its points, difficulty (mean score ÷ points), discrimination, how many lost it,
    flags."""

    name: str
    points: float
    difficulty: float
    discrimination: float | None   # None when the test or the rest is the same for everyone
    lost: int
    flags: list[str] = field(default_factory=list)


@dataclass
class Analysis:
    """The item analysis of one assignment: the graded students, their totals and every test's Item."""

    aid: str
    students: list[str]
    totals: list[float]
    max_score: float
    items: list[Item]
    left_out: dict[str, str] = field(default_factory=dict)   # student -> status

    def flagged(self) -> list[Item]:
        return [i for i in self.items if i.flags]

    def describe(self) -> str:
        width = max([len(i.name) for i in self.items] + [4])
        lines = [f"{self.aid}: {len(self.students)} graded submissions, {len(self.items)} tests"
                 + (f" ({len(self.left_out)} failed or held, left out)" if self.left_out else ""),
                 f"  {'test':<{width}}  points  difficulty  discrimination  lost"]
        for i in self.items:
            disc = "    —" if i.discrimination is None else f"{i.discrimination:+.2f}"
            lines.append(f"  {i.name:<{width}}  {i.points:6g}  {i.difficulty:10.2f}  {disc:>14}  {i.lost:4d}"
                         + (f"  ⚑ {'; '.join(i.flags)}" if i.flags else ""))
        return "\n".join(lines)


def item_statistics(scores: dict[str, dict[str, float]], points: dict[str, float]) -> list[Item]:
    """Items from `scores` (student -> test -> points got) and `points` (test -> its points)."""
    from scipy import stats

    students = sorted(scores)
    totals = [sum(scores[s].values()) for s in students]
    items = []
    for name, full in points.items():
        got = [scores[s].get(name, 0.0) for s in students]
        frac = [g / full if full else 0.0 for g in got]
        rest = [t - g for t, g in zip(totals, got)]
        difficulty = sum(frac) / len(frac) if frac else math.nan
        r = None
        if len(set(frac)) > 1 and len(set(rest)) > 1:
            r = float(stats.pearsonr(frac, rest).statistic)
        item = Item(name, full, difficulty, r, sum(1 for g in got if g < full))
        if frac and difficulty == 1.0:
            item.flags.append("everybody passes: it tells no one apart")
        elif frac and difficulty == 0.0:
            item.flags.append("nobody passes: too hard, or broken")
        if r is not None and r < 0:
            item.flags.append("negative discrimination: the students who do well elsewhere lose it; check the test")
        items.append(item)
    return items


def analyse(aid: str, url: str) -> Analysis:
    """The item analysis of `aid` from the gradebook at `url`."""
    from twoprim.grading.gradebook import gradebook, statuses

    known = statuses(aid, url)
    scores: dict[str, dict[str, float]] = {}
    points: dict[str, float] = {}
    left_out: dict[str, str] = {}
    max_score = 0.0
    with gradebook(url) as gb:
        for sub in gb.assignment_submissions(aid):
            status = known.get(sub.student.id, {}).get("status", "graded")
            if status != "graded":
                left_out[sub.student.id] = status
                continue
            max_score = float(sub.max_score)
            mine = scores.setdefault(sub.student.id, {})
            for nb in sub.notebooks:
                for grade in nb.grades:
                    if grade.max_score:
                        points[grade.name] = float(grade.max_score)
                        mine[grade.name] = float(grade.score or 0.0)
    order = sorted(points)
    students = sorted(scores)
    return Analysis(aid, students, [sum(scores[s].values()) for s in students], max_score,
                    item_statistics(scores, {n: points[n] for n in order}), left_out)


def write_report(analysis: Analysis, folder: Path) -> tuple[Path, Path, Path]:
    """The analysis as CSV, HTML and a PNG chart in `folder`; their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    aid = analysis.aid
    csv_path, html_path, png_path = (folder / f"{aid}-items.{ext}" for ext in ("csv", "html", "png"))
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["test", "points", "difficulty", "discrimination", "lost", "flags"])
        for i in analysis.items:
            writer.writerow([i.name, f"{i.points:g}", f"{i.difficulty:.3f}",
                             "" if i.discrimination is None else f"{i.discrimination:.3f}", i.lost,
                             "; ".join(i.flags)])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.hist(analysis.totals, bins=min(20, max(5, len(set(analysis.totals)))), color="#4c72b0")
    left.set_xlabel(f"score (of {analysis.max_score:g})")
    left.set_ylabel("students")
    left.set_title(f"{aid}: {len(analysis.students)} graded submissions")
    for i in analysis.items:
        d = 0.0 if i.discrimination is None else i.discrimination
        right.scatter(i.difficulty, d, color="#c44e52" if i.flags else "#4c72b0")
        if i.flags:
            right.annotate(i.name.removeprefix(f"{aid}-"), (i.difficulty, d), fontsize=7)
    right.axhline(0, color="#888", linewidth=0.8)
    right.set_xlim(-0.05, 1.05)
    right.set_ylim(-1.05, 1.05)
    right.set_xlabel("difficulty (mean fraction of points)")
    right.set_ylabel("discrimination (corrected point-biserial)")
    right.set_title("each test; flagged in red")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    esc = html.escape
    rows = "".join(
        f"<tr{' class=flag' if i.flags else ''}><td>{esc(i.name)}</td><td>{i.points:g}</td>"
        f"<td>{i.difficulty:.2f}</td><td>{'—' if i.discrimination is None else f'{i.discrimination:+.2f}'}</td>"
        f"<td>{i.lost}</td><td>{esc('; '.join(i.flags))}</td></tr>" for i in analysis.items)
    html_path.write_text(
        f"<!doctype html><meta charset='utf-8'><title>{esc(aid)}: item analysis</title><style>body{{font-family:"
        f"sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}"
        f"tr.flag{{background:#fde2e2}}</style><h1>{esc(aid)}: item analysis</h1>"
        f"<p>{len(analysis.students)} graded submissions"
        f"{f', {len(analysis.left_out)} failed or held (left out)' if analysis.left_out else ''}. Difficulty: mean "
        f"fraction of a test's points. Discrimination: Pearson's r between the test's score and the rest of the "
        f"assignment (corrected point-biserial); negative usually means a broken test.</p>"
        f"<table><tr><th>test</th><th>points</th><th>difficulty</th><th>discrimination</th><th>lost</th>"
        f"<th>flags</th></tr>{rows}</table><p><img src='{esc(png_path.name)}' alt='score histogram and items'></p>\n",
        encoding="utf-8")
    return csv_path, html_path, png_path
