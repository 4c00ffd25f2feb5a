"""`./course analysis ASSIGNMENT`: item analysis of every test cell from the gradebook, and what the class got wrong
(instructor side).

For each test cell (nbgrader's grade cells; visible ones run in the learner's notebook, hidden ones only in grading)
over the students whose submission was graded:

    difficulty       the mean fraction of its points students got (1.0: everyone passes; 0.0: nobody does)
    discrimination   the corrected point-biserial correlation: the test's score against the rest of the assignment
                     (the total without this test), Pearson's r (`scipy.stats.pearsonr`; with a pass/fail test it
                     is the point-biserial). Near 1: the students who pass it are those who do well elsewhere.
                     Negative: the strong students lose it, which usually means the test is broken.
    interval         a 95% bootstrap interval on the discrimination (students resampled `BOOTSTRAP` times, seeded, so
                     the same class gives the same interval; resamples where the test or the rest is the same for
                     everyone are skipped)
    lost             how many students did not get all of its points, and who (who passed, who lost)

Flagged: tests nobody or everybody passes (they tell the class apart from nothing), and tests whose discrimination
is negative. Failed or held submissions (a broken notebook, a held audit) are left out: their zeros say nothing
about a test. So are blank notebooks (every answer left as released), reported apart: a blank scores 0 on every test
and would make every test look like it separates the class (`--with-blank` keeps them in). Under `SMALL_CLASS`
students a discrimination moves a lot with one student (one blank notebook can turn a sound test's discrimination
negative): the report says so, and the interval shows how much.

The misconceptions (`misconceptions`): per graded function, the causes the checks named in the students' feedback,
with how many students and who.

    grader/reports/<aid>-items.csv            one row per test
    grader/reports/<aid>-misconceptions.csv   one row per function and cause
    grader/reports/<aid>-items.html           the tables, the warnings, flags with who passed and lost, the plots
    grader/reports/<aid>-items.png            score histogram; difficulty against discrimination, every test drawn
"""

from __future__ import annotations

import collections
import csv
import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twoprim.analytics.misconceptions import Misconceptions

__all__ = [
    "Item",
    "Analysis",
    "analyse",
    "item_statistics",
    "bootstrap_interval",
    "blank_students",
    "plot_points",
    "write_report",
    "SMALL_CLASS",
    "BOOTSTRAP",
]

SMALL_CLASS = 20  # under this many students, discrimination is read with its interval, and the report says so
BOOTSTRAP = 2000  # resamples for the interval
SEED = 0


@dataclass
class Item:
    """One test cell's statistics: its points, difficulty (mean score ÷ points), discrimination and its interval, who
    passed and who lost it, whether it is hidden, flags."""

    name: str
    points: float
    difficulty: float
    discrimination: float | None  # None when the test or the rest is the same for everyone
    lost: int
    flags: list[str] = field(default_factory=list)
    interval: tuple[float, float] | None = None
    passed_by: list[str] = field(default_factory=list)
    lost_by: list[str] = field(default_factory=list)
    hidden: bool = False


@dataclass
class Analysis:
    """The item analysis of one assignment: the students counted, their totals, every test's Item, who was left out
    (failed or held; blank) and what the class got wrong."""

    aid: str
    students: list[str]
    totals: list[float]
    max_score: float
    items: list[Item]
    left_out: dict[str, str] = field(default_factory=dict)  # student -> status
    blank: list[str] = field(default_factory=list)  # blank notebooks, left out unless with_blank
    with_blank: bool = False
    misconceptions: Misconceptions | None = None

    def flagged(self) -> list[Item]:
        return [i for i in self.items if i.flags]

    def small(self) -> bool:
        """Whether the class is too small to read a discrimination without its interval."""
        return len(self.students) < SMALL_CLASS

    def warnings(self) -> list[str]:
        """What to keep in mind reading the numbers: a small class, blank notebooks."""
        out = []
        if self.small():
            out.append(
                f"a small class: {len(self.students)} students (under {SMALL_CLASS}); one student moves a "
                f"discrimination a lot, so read each with its 95% interval"
            )
        if self.blank:
            out.append(
                f"{len(self.blank)} blank notebook(s) ({', '.join(self.blank)}): "
                + (
                    "kept in the statistics (--with-blank)"
                    if self.with_blank
                    else "left out of the statistics (--with-blank keeps them)"
                )
            )
        return out

    def describe(self) -> str:
        """The terminal's table, the warnings, who passed and lost each flagged test, and the misconceptions."""
        width = max([len(i.name) for i in self.items] + [4])
        lines = [
            f"{self.aid}: {len(self.students)} graded submissions, {len(self.items)} tests"
            + (f" ({len(self.left_out)} failed or held, left out)" if self.left_out else "")
        ]
        lines += [f"  ! {w}" for w in self.warnings()]
        lines.append(f"  {'test':<{width}}  kind    points  difficulty  discrimination  95% interval    lost")
        for i in self.items:
            disc = "    —" if i.discrimination is None else f"{i.discrimination:+.2f}"
            ci = "" if i.interval is None else f"[{i.interval[0]:+.2f}, {i.interval[1]:+.2f}]"
            lines.append(
                f"  {i.name:<{width}}  {'hidden' if i.hidden else 'visible':7} {i.points:6g}  "
                f"{i.difficulty:10.2f}  {disc:>14}  {ci:>14}  {i.lost:4d}"
                + (f"  ⚑ {'; '.join(i.flags)}" if i.flags else "")
            )
        for i in self.flagged():
            lines.append(
                f"  {i.name}: passed by {', '.join(i.passed_by) or 'nobody'}; lost by "
                f"{', '.join(i.lost_by) or 'nobody'}"
            )
        if self.misconceptions is not None:
            lines.append(self.misconceptions.describe())
        return "\n".join(lines)


def bootstrap_interval(
    frac: list[float], rest: list[float], *, resamples: int = BOOTSTRAP, seed: int = SEED
) -> tuple[float, float] | None:
    """The 95% percentile interval of Pearson's r between `frac` and `rest` over `resamples` resamples of the
    students (seeded); resamples where either is constant are skipped; None if under half are usable."""
    import numpy as np

    x, y = np.asarray(frac, dtype=float), np.asarray(rest, dtype=float)
    if len(x) < 3:
        return None
    idx = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))
    xs, ys = x[idx], y[idx]
    xs, ys = xs - xs.mean(axis=1, keepdims=True), ys - ys.mean(axis=1, keepdims=True)
    sx, sy = np.sqrt((xs**2).sum(axis=1)), np.sqrt((ys**2).sum(axis=1))
    usable = (sx > 1e-12) & (sy > 1e-12)
    if usable.sum() < resamples / 2:
        return None
    r = np.clip((xs * ys).sum(axis=1)[usable] / (sx * sy)[usable], -1.0, 1.0)
    low, high = np.percentile(r, [2.5, 97.5])
    return float(low), float(high)


def item_statistics(
    scores: dict[str, dict[str, float]], points: dict[str, float], *, hidden: set[str] | frozenset[str] = frozenset()
) -> list[Item]:
    """Items from `scores` (student -> test -> points got) and `points` (test -> its points); `hidden`: the tests
    that are hidden."""
    from scipy import stats

    students = sorted(scores)
    totals = [sum(scores[s].values()) for s in students]
    items = []
    for name, full in points.items():
        got = [scores[s].get(name, 0.0) for s in students]
        frac = [g / full if full else 0.0 for g in got]
        rest = [t - g for t, g in zip(totals, got, strict=True)]
        difficulty = sum(frac) / len(frac) if frac else math.nan
        r = None
        if len(set(frac)) > 1 and len(set(rest)) > 1:
            # PearsonRResult is a tuple-bunch whose fields scipy declares at run time, unseen by its stubs
            r = float(stats.pearsonr(frac, rest).statistic)  # pyright: ignore[reportAttributeAccessIssue]
        item = Item(
            name,
            full,
            difficulty,
            r,
            sum(1 for g in got if g < full),
            hidden=name in hidden,
            interval=bootstrap_interval(frac, rest) if r is not None else None,
            passed_by=[s for s, g in zip(students, got, strict=True) if g >= full],
            lost_by=[s for s, g in zip(students, got, strict=True) if g < full],
        )
        if frac and difficulty == 1.0:
            item.flags.append("everybody passes: it tells no one apart")
        elif frac and difficulty == 0.0:
            item.flags.append("nobody passes: too hard, or broken")
        if r is not None and r < -1e-9:  # (a correlation of exactly 0 comes out as -1e-17)
            item.flags.append("negative discrimination: the students who do well elsewhere lose it; check the test")
        items.append(item)
    return items


def _stub_lines(root: Path, aid: str) -> dict[str, set[str]] | None:
    """grade_id -> the lines of each answer cell as released (exercises/<aid>/), or None without a release."""
    import nbformat

    from twoprim.core.notebooks import answers

    released = sorted((root / "exercises" / aid).glob("*.ipynb"))
    if not released:
        return None
    out: dict[str, set[str]] = {}
    for path in released:
        for gid, code in answers(nbformat.read(str(path), as_version=4)).items():
            out[gid] = {line.strip() for line in code.splitlines()}
    return out


def blank_students(aid: str, root: Path, students: list[str]) -> list[str]:
    """The students whose graded notebook (grader/autograded/) has no line of code in any answer beyond what was
    released: a blank submission."""
    import nbformat

    from twoprim.core.notebooks import answers

    stubs = _stub_lines(root, aid)
    if not stubs:
        return []
    blank = []
    for student in students:
        paths = sorted((root / "grader" / "autograded" / student / aid).glob("*.ipynb"))
        written = False
        for path in paths:
            try:
                given = answers(nbformat.read(str(path), as_version=4))
            except Exception:  # noqa: BLE001 - unreadable: not known to be blank
                written = True
                break
            written = written or any(
                line.strip() and not line.strip().startswith("#") and line.strip() not in stubs.get(gid, set())
                for gid, code in given.items()
                for line in code.splitlines()
            )
        if paths and not written:
            blank.append(student)
    return blank


def _hidden_tests(aid: str, root: Path) -> set[str]:
    """The test cells that are hidden: in the source, between BEGIN and END HIDDEN TESTS (solutions/<aid>/)."""
    import nbformat

    hidden = set()
    for path in sorted((root / "solutions" / aid).glob("*.ipynb")):
        for cell in nbformat.read(str(path), as_version=4).cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and "BEGIN HIDDEN TESTS" in cell.get("source", ""):
                hidden.add(meta.get("grade_id"))
    return hidden


def _gradebook_scores(aid: str, url: str) -> tuple[dict, dict, dict, float]:
    """student -> test -> points got, test -> its points, student -> status of those left out, the maximum score."""
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
    return scores, points, left_out, max_score


def analyse(aid: str, url: str, root: Path | None = None, *, with_blank: bool = False) -> Analysis:
    """The item analysis of `aid` from the gradebook at `url`; with the course folder `root`, blank notebooks found
    (and left out unless `with_blank`), hidden tests told apart and the misconceptions counted."""
    from twoprim.analytics import misconceptions

    scores, points, left_out, max_score = _gradebook_scores(aid, url)
    graded = sorted(scores)
    blank = blank_students(aid, root, graded) if root is not None else []
    if not with_blank:
        scores = {s: v for s, v in scores.items() if s not in blank}
    students = sorted(scores)
    hidden = _hidden_tests(aid, root) if root is not None else {n for n in points if n.endswith("-hidden")}
    analysis = Analysis(
        aid,
        students,
        [sum(scores[s].values()) for s in students],
        max_score,
        item_statistics(scores, {n: points[n] for n in sorted(points)}, hidden=hidden),
        left_out,
        blank,
        with_blank,
    )
    if root is not None:
        analysis.misconceptions = misconceptions.count(aid, root, graded, blank=blank)
    return analysis


# --- the reports ----------------------------------------------------------------------------------------------------


def plot_points(analysis: Analysis) -> list[tuple[str, float, float, bool]]:
    """Where each test is drawn on difficulty against discrimination: (name, x, y, hidden). Tests at the same point
    are spread side by side so that every one shows; a test without a discrimination is drawn at 0."""
    at: dict[tuple, list[Item]] = collections.defaultdict(list)
    for i in analysis.items:
        d = 0.0 if i.discrimination is None else i.discrimination
        at[(round(i.difficulty, 2), round(d, 2))].append(i)
    out = []
    for (x, y), items in at.items():
        for n, i in enumerate(items):
            out.append((i.name, x + 0.025 * (n - (len(items) - 1) / 2), y, i.hidden))
    return out


def _plot(analysis: Analysis, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aid = analysis.aid
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    left.hist(analysis.totals, bins=min(20, max(5, len(set(analysis.totals)))), color="#4c72b0")
    left.set_xlabel(f"score (of {analysis.max_score:g})")
    left.set_ylabel("students")
    left.set_title(f"{aid}: {len(analysis.students)} graded submissions")
    flagged = {i.name for i in analysis.flagged()}
    for name, x, y, hidden in plot_points(analysis):
        right.scatter(
            x,
            y,
            marker="^" if hidden else "o",
            s=40,
            color="#c44e52" if name in flagged else "#4c72b0",
            edgecolors="black",
            linewidths=0.4,
        )
        right.annotate(
            name.removeprefix(f"{aid}-"), (x, y), fontsize=6, rotation=30, xytext=(3, 3), textcoords="offset points"
        )
    right.scatter([], [], marker="o", color="#4c72b0", label="visible test")
    right.scatter([], [], marker="^", color="#4c72b0", label="hidden test")
    right.scatter([], [], marker="s", color="#c44e52", label="flagged")
    right.legend(fontsize=7, loc="lower left")
    right.axhline(0, color="#888", linewidth=0.8)
    right.set_xlim(-0.1, 1.1)
    right.set_ylim(-1.1, 1.1)
    right.set_xlabel("difficulty (mean fraction of points)")
    right.set_ylabel("discrimination (corrected point-biserial)")
    right.set_title(f"every test ({len(analysis.items)}); tests at one point side by side; no discrimination: at 0")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _write_csvs(analysis: Analysis, items_path: Path, causes_path: Path) -> None:
    with open(items_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "test",
                "kind",
                "points",
                "difficulty",
                "discrimination",
                "interval_low",
                "interval_high",
                "lost",
                "flags",
                "lost_by",
                "passed_by",
            ]
        )
        for i in analysis.items:
            low, high = i.interval or ("", "")
            writer.writerow(
                [
                    i.name,
                    "hidden" if i.hidden else "visible",
                    f"{i.points:g}",
                    f"{i.difficulty:.3f}",
                    "" if i.discrimination is None else f"{i.discrimination:.3f}",
                    low if low == "" else f"{low:.3f}",
                    high if high == "" else f"{high:.3f}",
                    i.lost,
                    "; ".join(i.flags),
                    " ".join(i.lost_by),
                    " ".join(i.passed_by),
                ]
            )
    m = analysis.misconceptions
    with open(causes_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["function", "students", "of", "cause", "next_step", "who", "tests"])
        if m is not None:
            for function, causes in m.causes.items():
                for c in causes:
                    writer.writerow(
                        [
                            function,
                            len(c.students),
                            len(m.students),
                            c.label,
                            c.next_step,
                            " ".join(c.students),
                            " ".join(c.tests),
                        ]
                    )


def _misconceptions_html(analysis: Analysis) -> str:
    esc = html.escape
    m = analysis.misconceptions
    if m is None:
        return ""
    rows = "".join(
        f"<tr><td>{esc(function)}</td><td>{len(c.students)} of {len(m.students)}</td><td>{esc(c.label)}"
        f"</td><td>{esc(c.next_step)}</td><td>{esc(', '.join(c.students))}</td></tr>"
        for function, causes in m.causes.items()
        for c in causes
    )
    return (
        f"<h2>What the checks told the class</h2><p>Per graded function, each cause the checks named in the "
        f"students' feedback (the same mistake met on another case counts once), over {len(m.students)} "
        f"notebooks{'; blank ones left out: ' + esc(', '.join(m.blank)) if m.blank else ''}. What to teach "
        f"again.</p><table><tr><th>function</th><th>students</th><th>cause</th><th>the next step it gave</th>"
        f"<th>who</th></tr>{rows or '<tr><td colspan=5>every check passed</td></tr>'}</table>"
    )


def write_report(analysis: Analysis, folder: Path) -> tuple[Path, Path, Path, Path]:
    """The analysis as CSV (tests; misconceptions), HTML and a PNG chart in `folder`; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    aid = analysis.aid
    csv_path, html_path, png_path = (folder / f"{aid}-items.{ext}" for ext in ("csv", "html", "png"))
    causes_path = folder / f"{aid}-misconceptions.csv"
    _write_csvs(analysis, csv_path, causes_path)
    _plot(analysis, png_path)
    esc = html.escape
    rows = "".join(
        f"<tr{' class=flag' if i.flags else ''}><td>{esc(i.name)}</td><td>{'hidden' if i.hidden else 'visible'}</td>"
        f"<td>{i.points:g}</td><td>{i.difficulty:.2f}</td>"
        f"<td>{'—' if i.discrimination is None else f'{i.discrimination:+.2f}'}</td>"
        f"<td>{'' if i.interval is None else f'[{i.interval[0]:+.2f}, {i.interval[1]:+.2f}]'}</td>"
        f"<td>{i.lost}</td><td>{esc('; '.join(i.flags))}</td></tr>"
        for i in analysis.items
    )
    who = "".join(
        f"<li>{esc(i.name)}: passed by {esc(', '.join(i.passed_by) or 'nobody')}; lost by "
        f"{esc(', '.join(i.lost_by) or 'nobody')}</li>"
        for i in analysis.flagged()
    )
    warnings = "".join(f"<p class=warn>{esc(w)}</p>" for w in analysis.warnings())
    html_path.write_text(
        f"<!doctype html><meta charset='utf-8'><title>{esc(aid)}: item analysis</title><style>body{{font-family:"
        f"sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}"
        f"tr.flag{{background:#fde2e2}}.warn{{background:#fff3cd;padding:6px}}</style><h1>{esc(aid)}: item analysis"
        f"</h1>{warnings}<p>{len(analysis.students)} graded submissions"
        f"{f', {len(analysis.left_out)} failed or held (left out)' if analysis.left_out else ''}. Difficulty: mean "
        f"fraction of a test's points. Discrimination: Pearson's r between the test's score and the rest of the "
        f"assignment (corrected point-biserial), with a 95% bootstrap interval ({BOOTSTRAP} resamples of the "
        f"students, seeded); negative usually means a broken test. Visible tests run in the learner's notebook, "
        f"hidden ones only in grading.</p><table><tr><th>test</th><th>kind</th><th>points</th><th>difficulty</th>"
        f"<th>discrimination</th><th>95% interval</th><th>lost</th><th>flags</th></tr>{rows}</table>"
        f"{'<h2>Flagged tests: who passed, who lost</h2><ul>' + who + '</ul>' if who else ''}"
        f"{_misconceptions_html(analysis)}<p><img src='{esc(png_path.name)}' alt='score histogram and items'></p>\n",
        encoding="utf-8",
    )
    return csv_path, html_path, png_path, causes_path
