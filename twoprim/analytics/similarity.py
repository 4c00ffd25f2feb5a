"""`./course similarity ASSIGNMENT`: which students handed in the same code, whole or in part (instructor side).

Only what students wrote is compared: the answer cells (nbgrader's solution cells) of each collected notebook in
grader/submitted/, with everything the released notebook already holds (signatures, docstrings, guards, the tests)
as boilerplate. Each answer is first put in the form the comparison reads (`canonical.normalise`: comments, dead
code and docstrings gone, counted `while` loops as `for` loops), then compared by copydetect (winnowing, as MOSS
does, run here: student code never leaves the machine): its tokenizer replaces every name by one letter, so renaming
changes nothing, and its fingerprints are k-grams wherever they stand, so reordering changes little. A passage
shorter than `NOISE` characters of that token stream is never a match.

Two numbers per answer of a pair:

    raw        copydetect's similarity: the mean over the two sides of the share of each side's code found in the
               other's same answer (1.0: the same code, up to names, comments and dead code)
    weighted   the same share with each matching passage counted by how rare it is in the class: a passage that only
               these two wrote counts 1, one that d of the n students who wrote that answer share counts
               log(n/d) / log(n/2) (what MOSS's -m does with a cut-off, done smoothly), so the natural way that half
               the class writes alike counts little, and a copy of it proves little

and two per pair, each with its threshold; a pair is flagged when either reaches its own:

    overall    the weighted share of each side's code, over all its answers, found in the other's same answers,
               averaged over the two sides (`THRESHOLD`): a copy of the whole notebook, however disguised
    answers    the weighted similarity of the pair's two most similar answers among those that are near-identical
               (raw at least `NEAR`), averaged (`ANSWERS_THRESHOLD`): a copy of two answers with the rest written

Students linked by flagged pairs form a group (connected components): three who share one source show as one group,
not as three pairs. Pairs are ranked, never judged: the report names the matching answers and shows the passages.

    grader/reports/<aid>-similarity.csv    every pair, both scores, each answer weighted and raw, its group
    grader/reports/<aid>-similarity.html   every flagged pair and group, the matching passages side by side

What each threshold finds on classes built as an instructor's is measured by scripts/bench_similarity.py
(data/benchmarks/similarity.json).
"""

from __future__ import annotations

import collections
import csv
import html
import io
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from twoprim.analytics.canonical import normalise
from twoprim.config import ROOT
from twoprim.core.notebooks import answers

if TYPE_CHECKING:
    from copydetect import CodeFingerprint

__all__ = [
    "Pair",
    "Result",
    "compare",
    "compare_answers",
    "write_report",
    "rarity",
    "NOISE",
    "WINDOW",
    "THRESHOLD",
    "ANSWERS_THRESHOLD",
    "NEAR",
]

NOISE = 25  # copydetect's noise threshold: matches shorter than this many filtered characters are ignored
# Every k-gram is a fingerprint (a winnowing window of 1): answers are short, so this costs little, finds every
# match of NOISE characters or more, and gives the same numbers on every run (a wider window samples fingerprints
# by the minimum of Python's string hash, which is randomised per process).
WINDOW = 1
THRESHOLD = 0.5  # overall (weighted) at or above this: flagged
ANSWERS_THRESHOLD = 0.7  # the two most similar near-identical answers (weighted) at or above this: flagged
NEAR = 0.9  # an answer whose raw similarity reaches this is near-identical: named as matching


@dataclass
class Pair:
    """Two students and how alike their answers are: overall and by their most similar answers (weighted by rarity),
    each answer weighted and raw, and the passages."""

    a: str
    b: str
    overall: float = 0.0
    answers_score: float = 0.0
    sides: tuple[float, float] = (0.0, 0.0)  # a's code found in b, b's found in a (weighted)
    overall_raw: float = 0.0
    answers: dict[str, float] = field(default_factory=dict)  # grade_id -> weighted similarity, where both wrote code
    raw: dict[str, float] = field(default_factory=dict)  # grade_id -> copydetect's similarity
    passages: dict[str, tuple[str, str]] = field(default_factory=dict)  # grade_id -> (a, b) highlighted HTML
    top: list[str] = field(default_factory=list)  # the answers `answers_score` averages

    def matching(self, at: float = NEAR) -> list[str]:
        """The answers whose raw similarity reaches `at`, most similar (weighted) first."""
        return sorted((g for g, s in self.raw.items() if s >= at), key=lambda g: (-self.answers[g], g))

    def why(self, threshold: float = THRESHOLD, answers_threshold: float = ANSWERS_THRESHOLD) -> list[str]:
        """Why the pair is flagged: 'overall', 'answers', both or neither."""
        return [
            w
            for w, hit in (("overall", self.overall >= threshold), ("answers", self.answers_score >= answers_threshold))
            if hit
        ]


@dataclass
class Result:
    """Every pair of one assignment's submissions (most similar overall first), the notebooks left out with why, and
    the thresholds a pair is flagged at."""

    aid: str
    students: list[str]
    pairs: list[Pair]
    skipped: dict[str, str]
    threshold: float = THRESHOLD
    answers_threshold: float = ANSWERS_THRESHOLD

    def flagged(self) -> list[Pair]:
        """The pairs flagged by either score, the strongest first (each score as a share of its threshold)."""
        hits = [p for p in self.pairs if p.why(self.threshold, self.answers_threshold)]
        return sorted(
            hits, key=lambda p: (-max(p.overall / self.threshold, p.answers_score / self.answers_threshold), p.a, p.b)
        )

    def by_answers(self) -> list[Pair]:
        """Every pair ranked by its most similar answers."""
        return sorted(self.pairs, key=lambda p: (-p.answers_score, -p.overall, p.a, p.b))

    def groups(self) -> list[list[str]]:
        """Students linked by flagged pairs, each group (two or more) sorted, the largest first (scipy's connected
        components)."""
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        index = {s: n for n, s in enumerate(self.students)}
        hits = self.flagged()
        if not hits:
            return []
        rows, cols = zip(*((index[p.a], index[p.b]) for p in hits), strict=True)
        graph = coo_matrix(([1] * len(rows), (rows, cols)), shape=(len(index), len(index)))
        _, labels = connected_components(graph, directed=False)
        members: dict[int, list[str]] = collections.defaultdict(list)
        for student, label in zip(self.students, labels, strict=True):
            members[int(label)].append(student)
        return sorted((sorted(m) for m in members.values() if len(m) > 1), key=lambda g: (-len(g), g))

    def short(self, gid: str) -> str:
        """The answer's name without the assignment and `-solution` (`matmul_tiled`)."""
        return gid.removeprefix(f"{self.aid}-").removesuffix("-solution")

    def describe(self, top: int = 15) -> str:
        """What the command prints: the counts, every flagged pair (up to `top`) with its matching answers, the groups
        and the notebooks left out."""
        flagged = self.flagged()
        by = collections.Counter(w for p in flagged for w in p.why(self.threshold, self.answers_threshold))
        lines = [
            f"{len(self.students)} submissions of {self.aid} compared, {len(self.pairs)} pairs; {len(flagged)} "
            f"flagged: {by['overall']} by overall similarity >= {self.threshold:.2f}, {by['answers']} by their "
            f"two most similar answers >= {self.answers_threshold:.2f} (a ranking to read, never a verdict)",
            "  overall  answers  pair",
        ]
        for p in flagged[:top]:
            which = ", ".join(f"{self.short(g)} {p.answers[g]:.2f}" for g in p.matching()) or "no answer near-identical"
            lines.append(f"  {p.overall:7.2f}  {p.answers_score:7.2f}  {p.a} ~ {p.b}  (matching: {which})")
        if len(flagged) > top:
            lines.append(f"  ... {len(flagged) - top} more flagged pairs in the reports")
        for n, group in enumerate(self.groups(), 1):
            lines.append(f"  group {n}: {', '.join(group)} ({len(group)} students linked by flagged pairs)")
        for student, why in sorted(self.skipped.items()):
            lines.append(f"  not compared: {student}: {why}")
        return "\n".join(lines)


# --- fingerprints and the two similarities ------------------------------------------------------------------------


def _fingerprint(name: str, code: str, boilerplate):
    from copydetect import CodeFingerprint

    return CodeFingerprint(
        f"{name}.py", NOISE, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code), language="python"
    )


def _boilerplate(code: str):
    """Every k-gram of the released code, as copydetect takes boilerplate."""
    import numpy as np

    return np.unique(np.array(sorted(_fingerprint("released", normalise(code), None).hashes)))


def _written(answer: str, stub: str) -> str:
    """What the student wrote in an answer cell, in the compared form: its lines, less those the released cell
    already had (signature, docstring, guards), so that no match can span the stub and the student's first line."""
    given = {line.strip() for line in normalise(stub).splitlines() if line.strip()}
    return "\n".join(line for line in normalise(answer).splitlines() if line.strip() not in given)


def rarity(shared_by: int, writers: int) -> float:
    """The weight of a passage that `shared_by` of the `writers` students who wrote that answer have: 1 for a pair's
    own, log(n/d) / log(n/2) beyond, 0 for one that everybody wrote."""
    if shared_by <= 2 or writers <= 2:
        return 1.0
    return max(0.0, math.log(writers / shared_by) / math.log(writers / 2))


def _weighted(fp, common: set, weight: dict) -> float:
    """The share of `fp`'s fingerprinted code covered by the `common` passages, each token counted at the weight of
    the rarest passage covering it."""
    import numpy as np

    if not common or not fp.token_coverage:
        return 0.0
    cover = np.zeros(len(fp.filtered_code) + fp.k)
    for h in common:
        for i in fp.hash_idx[h]:
            np.maximum(cover[i : i + fp.k], weight[h], out=cover[i : i + fp.k])
    return float(cover.sum()) / fp.token_coverage


def _highlight(fp, slices) -> str:
    from copydetect.utils import highlight_overlap

    if len(slices) == 0 or len(slices[0]) == 0:
        return html.escape(fp.raw_code)
    text, _ = highlight_overlap(fp.raw_code, slices, "<mark>", "</mark>", escape_html=True)
    return text


def _answer(pair: Pair, gid: str, fa, fb, weight: dict) -> tuple[float, float, float, float]:
    """Compare one answer of `pair` (both sides wrote code): record its raw and weighted similarity and passages;
    return each side's raw and weighted share."""
    from copydetect import compare_files

    _, (ra, rb), slices = compare_files(fa, fb)
    ra, rb = float(ra), float(rb)
    common = fa.hashes & fb.hashes
    wa, wb = _weighted(fa, common, weight), _weighted(fb, common, weight)
    pair.raw[gid], pair.answers[gid] = (ra + rb) / 2, (wa + wb) / 2
    if ra + rb > 0:
        pair.passages[gid] = (_highlight(fa, slices[0]), _highlight(fb, slices[1]))
    return ra, rb, wa, wb


def _pair(a: str, b: str, prints: dict, weights: dict) -> Pair:
    """Both similarities of students `a` and `b`, every answer compared."""
    pair = Pair(a, b)
    found, raw, covered = [0.0, 0.0], [0.0, 0.0], [0, 0]
    for gid, weight in weights.items():
        fa, fb = prints[a][gid], prints[b][gid]
        covered[0] += fa.token_coverage
        covered[1] += fb.token_coverage
        if not fa.token_coverage or not fb.token_coverage:
            continue
        ra, rb, wa, wb = _answer(pair, gid, fa, fb, weight)
        found[0] += wa * fa.token_coverage
        found[1] += wb * fb.token_coverage
        raw[0] += ra * fa.token_coverage
        raw[1] += rb * fb.token_coverage
    a_side, b_side = (f / c if c else 0.0 for f, c in zip(found, covered, strict=True))
    pair.sides = (a_side, b_side)
    pair.overall = sum(pair.sides) / 2
    pair.overall_raw = sum(r / c if c else 0.0 for r, c in zip(raw, covered, strict=True)) / 2
    near = sorted((g for g, s in pair.raw.items() if s >= NEAR), key=lambda g: (-pair.answers[g], g))[:2]
    pair.top = near
    pair.answers_score = sum(pair.answers[g] for g in near) / 2
    return pair


def compare_answers(
    by_student: dict[str, dict[str, str]],
    boilerplate: dict[str, str],
    *,
    aid: str = "",
    threshold: float = THRESHOLD,
    answers_threshold: float = ANSWERS_THRESHOLD,
) -> Result:
    """Every pair of students compared by their answers (`by_student`: student -> grade_id -> code);
    `boilerplate`: grade_id -> the released code of that cell (and any other key -> other released code)."""
    gids = list(dict.fromkeys(g for a in by_student.values() for g in a))
    shared = _boilerplate("\n\n".join(boilerplate.values()))
    prints: dict[str, dict[str, CodeFingerprint]] = {}
    for student, given in by_student.items():
        prints[student] = {
            gid: _fingerprint(f"{student}-{gid}", _written(given.get(gid, ""), boilerplate.get(gid, "")), shared)
            for gid in gids
        }
    weights = {}
    for gid in gids:  # how many students share each passage of this answer, and the weight that gives it
        writers = [prints[s][gid] for s in by_student if prints[s][gid].token_coverage]
        counts = collections.Counter(h for fp in writers for h in fp.hashes)
        weights[gid] = {h: rarity(d, len(writers)) for h, d in counts.items()}
    pairs = [_pair(a, b, prints, weights) for a, b in itertools.combinations(sorted(by_student), 2)]
    pairs.sort(key=lambda p: (-p.overall, -p.answers_score, p.a, p.b))
    return Result(aid, sorted(by_student), pairs, {}, threshold, answers_threshold)


def compare(
    aid: str, *, root: Path = ROOT, threshold: float = THRESHOLD, answers_threshold: float = ANSWERS_THRESHOLD
) -> Result:
    """Every collected submission of `aid` (grader/submitted/), compared pairwise."""
    import nbformat

    released = sorted((root / "exercises" / aid).glob("*.ipynb"))
    if not released:
        raise FileNotFoundError(f"no released notebook in exercises/{aid}/: run ./course generate {aid} first")
    boilerplate: dict[str, str] = {}
    for path in released:
        nb = nbformat.read(str(path), as_version=4)
        boilerplate.update(answers(nb))
        boilerplate[f"{path.name}:"] = "\n\n".join(c.source for c in nb.cells if c.cell_type == "code")
    by_student: dict[str, dict[str, str]] = {}
    skipped: dict[str, str] = {}
    base = root / "grader" / "submitted"
    for folder in sorted(base.glob(f"*/{aid}")) if base.is_dir() else []:
        student = folder.parent.name
        given: dict[str, str] = {}
        for path in released:
            mine = folder / path.name
            try:
                given.update(
                    {
                        f"{path.stem}/{gid}" if len(released) > 1 else gid: code
                        for gid, code in answers(nbformat.read(str(mine), as_version=4)).items()
                    }
                )
            except Exception as err:  # noqa: BLE001 - unreadable: grading reports why; here it is only not compared
                skipped[student] = f"{path.name} could not be read as a notebook ({type(err).__name__})"
                break
        else:
            by_student[student] = given
    result = compare_answers(by_student, boilerplate, aid=aid, threshold=threshold, answers_threshold=answers_threshold)
    result.skipped = skipped
    return result


# --- the reports ----------------------------------------------------------------------------------------------------


def _write_csv(result: Result, path: Path, gids: list[str]) -> None:
    group_of = {s: n for n, g in enumerate(result.groups(), 1) for s in g}
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "rank",
                "student_a",
                "student_b",
                "overall",
                "answers",
                "flagged",
                "group",
                "a_in_b",
                "b_in_a",
                "overall_raw",
                *(result.short(g) for g in gids),
                *(f"{result.short(g)} raw" for g in gids),
            ]
        )
        for rank, p in enumerate(result.pairs, 1):
            why = p.why(result.threshold, result.answers_threshold)
            writer.writerow(
                [
                    rank,
                    p.a,
                    p.b,
                    f"{p.overall:.3f}",
                    f"{p.answers_score:.3f}",
                    "+".join(why),
                    group_of.get(p.a, "") if why else "",
                    f"{p.sides[0]:.3f}",
                    f"{p.sides[1]:.3f}",
                    f"{p.overall_raw:.3f}",
                    *(f"{p.answers[g]:.3f}" if g in p.answers else "" for g in gids),
                    *(f"{p.raw[g]:.3f}" if g in p.raw else "" for g in gids),
                ]
            )


_STYLE = (
    "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
    "padding:4px 8px;vertical-align:top}pre{margin:0;white-space:pre-wrap;font-size:12px}mark{background:#ffd54f}"
    ".pair{margin-top:2em}td.near{background:#fde2e2}</style>"
)


def _intro(result: Result, flagged: list[Pair]) -> str:
    return (
        f"<p>{len(result.students)} submissions, {len(result.pairs)} pairs, {len(flagged)} flagged. Compared: "
        f"the code students wrote (answer cells only; the released notebook is boilerplate), after comments, "
        f"docstrings and dead code are removed and counted <code>while</code> loops are read as <code>for</code> "
        f"loops; names never count; passages under {NOISE} characters of code never match. Each passage counts "
        f"by how rare it is in the class: one only these two wrote counts fully, one that most of the class "
        f"wrote alike counts little. A pair is flagged when its <b>overall</b> similarity reaches "
        f"{result.threshold:.2f} (a copy of the whole notebook), or when its <b>answers</b> score, the two most "
        f"similar near-identical answers (raw at least {NEAR:.2f}), reaches {result.answers_threshold:.2f} (a "
        f"copy of some answers, the rest written). Each answer's cell is its rarity-weighted similarity; "
        f"<b>an empty cell means one of the two wrote no code in that answer</b> (left as released), so there "
        f"was nothing to compare; a red cell is near-identical. A ranking to read, never a verdict: short answers "
        f"written the natural way can match honestly.</p>"
    )


def _groups_html(result: Result) -> list[str]:
    groups = result.groups()
    if not groups:
        return ["<h2>Groups</h2><p>No students are linked by flagged pairs.</p>"]
    esc = html.escape
    return (
        [
            "<h2>Groups</h2><p>Students linked by flagged pairs (directly or through one another): one source "
            "shared by several shows here once.</p><ul>"
        ]
        + [f"<li>group {n}: {esc(', '.join(g))} ({len(g)} students)</li>" for n, g in enumerate(groups, 1)]
        + ["</ul>"]
    )


def _pair_html(result: Result, n: int, p: Pair) -> list[str]:
    esc = html.escape
    why = " and ".join(p.why(result.threshold, result.answers_threshold))
    out = [
        f"<div class='pair' id='p{n}'><h2>{n}. {esc(p.a)} ~ {esc(p.b)}: overall {p.overall:.2f}, answers "
        f"{p.answers_score:.2f} (flagged by {why})</h2>",
        f"<p>Matching (near-identical) answers: {esc(', '.join(result.short(g) for g in p.matching())) or 'none'}"
        f".</p><table><tr><th>answer</th><th>{esc(p.a)}</th><th>{esc(p.b)}</th></tr>",
    ]
    for gid in sorted(p.passages, key=lambda g: -p.answers[g]):
        left, right = p.passages[gid]
        out.append(
            f"<tr><td>{esc(result.short(gid))}<br>weighted {p.answers[gid]:.2f}<br>raw {p.raw[gid]:.2f}</td>"
            f"<td><pre>{left}</pre></td><td><pre>{right}</pre></td></tr>"
        )
    return out + ["</table></div>"]


def write_report(result: Result, folder: Path) -> tuple[Path, Path]:
    """The CSV of every pair and the HTML of every flagged pair and group; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    gids = list(dict.fromkeys(g for p in result.pairs for g in p.answers))
    csv_path, html_path = folder / f"{result.aid}-similarity.csv", folder / f"{result.aid}-similarity.html"
    _write_csv(result, csv_path, gids)
    esc = html.escape
    flagged = result.flagged()
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>{esc(result.aid)}: similar code</title>",
        _STYLE,
        f"<h1>{esc(result.aid)}: pairs of students whose answers match</h1>",
        _intro(result, flagged),
        "<table><tr><th>#</th><th>pair</th><th>overall</th><th>answers</th><th>flagged by</th>"
        + "".join(f"<th>{esc(result.short(g))}</th>" for g in gids)
        + "</tr>",
    ]
    for n, p in enumerate(flagged, 1):
        cells = "".join(
            ("<td class='near'>" if p.raw.get(g, 0) >= NEAR else "<td>") + f"{p.answers[g]:.2f}</td>"
            if g in p.answers
            else "<td></td>"
            for g in gids
        )
        why = " + ".join(p.why(result.threshold, result.answers_threshold))
        parts.append(
            f"<tr><td>{n}</td><td><a href='#p{n}'>{esc(p.a)} ~ {esc(p.b)}</a></td><td>{p.overall:.2f}</td>"
            f"<td>{p.answers_score:.2f}</td><td>{esc(why)}</td>{cells}</tr>"
        )
    parts.append("</table>")
    parts += _groups_html(result)
    for n, p in enumerate(flagged, 1):
        parts += _pair_html(result, n, p)
    html_path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return csv_path, html_path
