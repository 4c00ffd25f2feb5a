"""`./course similarity ASSIGNMENT`: which students handed in the same code (instructor side).

Only what students wrote is compared: the answer cells (nbgrader's solution cells) of each collected notebook in
grader/submitted/, with everything the released notebook already holds (signatures, docstrings, guards, the tests)
as boilerplate. The comparison is copydetect's (winnowing, as MOSS does, run here: student code never leaves the
machine): its tokenizer replaces every variable, attribute and function name by one letter and drops comments, so
renaming and recommenting change nothing, and fingerprints are k-grams wherever they stand, so reordering changes
little. A passage shorter than the noise threshold (`NOISE` characters of that token stream) is never a match: a
4-line `dot` that many students write the natural way does not make them similar.

A pair's similarity of one answer is the mean over its two sides of the fraction of each side's fingerprinted code
found in the other's same answer (copydetect's per-file similarity); overall, each side's fraction is taken over
all its answers together (weighted by how much code each holds), and the pair's is the mean of the two sides. Pairs are ranked, never judged: the
report says which answers match and shows the matching passages side by side.

    grader/reports/<aid>-similarity.csv    every pair, overall and per answer
    grader/reports/<aid>-similarity.html   the pairs at or above the threshold, passages highlighted
"""
from __future__ import annotations

import csv
import html
import io
import itertools
from dataclasses import dataclass, field
from pathlib import Path

from twoprim.core.notebooks import ROOT, answers

__all__ = ["Pair", "Result", "compare", "compare_answers", "write_report", "NOISE", "WINDOW", "THRESHOLD"]

NOISE = 25          # copydetect's noise threshold: matches shorter than this many filtered characters are ignored
# Every k-gram is a fingerprint (a winnowing window of 1): answers are short, so this costs little, finds every
# match of NOISE characters or more, and gives the same numbers on every run. A wider window samples fingerprints
# by the minimum of Python's string hash, which is randomised per process: the same class scored 0.60-0.74 for one
# disguised copy from run to run.
WINDOW = 1
THRESHOLD = 0.5     # pairs at or above this overall similarity are shown in the HTML report


@dataclass
class Pair:
    """Two students and how alike their answers are: overall, each way, per answer cell, with the passages."""

    a: str
    b: str
    overall: float
    sides: tuple[float, float]                                    # a's code found in b, b's code found in a
    answers: dict[str, float] = field(default_factory=dict)       # grade_id -> similarity (where either has code)
    passages: dict[str, tuple[str, str]] = field(default_factory=dict)  # grade_id -> (a, b) highlighted HTML

    def matching(self, at: float) -> list[str]:
        """The answers whose similarity reaches `at`, most similar first."""
        return [gid for gid, s in sorted(self.answers.items(), key=lambda kv: -kv[1]) if s >= at]


@dataclass
class Result:
    """Every pair of one assignment's submissions, most similar first, and the notebooks left out with why."""

    aid: str
    students: list[str]
    pairs: list[Pair]                 # ranked, most similar first
    skipped: dict[str, str]           # student -> why their notebook was not compared
    threshold: float = THRESHOLD

    def above(self) -> list[Pair]:
        return [p for p in self.pairs if p.overall >= self.threshold]

    def describe(self, top: int = 10) -> str:
        lines = [f"{len(self.students)} submissions of {self.aid} compared, {len(self.pairs)} pairs; "
                 f"{len(self.above())} at or above {self.threshold:.2f} (a ranking to read, never a verdict)"]
        for p in self.pairs[:top]:
            which = ", ".join(g.removeprefix(f"{self.aid}-").removesuffix("-solution")
                              for g in p.matching(self.threshold)) or "no single answer"
            lines.append(f"  {p.overall:.2f}  {p.a} ~ {p.b}  (matching: {which})")
        for student, why in sorted(self.skipped.items()):
            lines.append(f"  not compared: {student}: {why}")
        return "\n".join(lines)


def _fingerprint(name: str, code: str, boilerplate):
    from copydetect import CodeFingerprint

    return CodeFingerprint(f"{name}.py", NOISE, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code),
                           language="python")


def _boilerplate(code: str):
    """Every k-gram of the released code, as copydetect takes boilerplate."""
    import numpy as np

    return np.unique(np.array(sorted(_fingerprint("released", code, None).hashes)))


def _similarity(fa, fb) -> tuple[float, tuple[float, float], tuple]:
    from copydetect import compare_files

    if not fa.token_coverage or not fb.token_coverage:
        return 0.0, (0.0, 0.0), ((), ())
    _, (sa, sb), slices = compare_files(fa, fb)
    sa, sb = float(sa), float(sb)
    return (sa + sb) / 2, (sa, sb), slices


def _highlight(fp, slices) -> str:
    from copydetect.utils import highlight_overlap

    if len(slices) == 0 or len(slices[0]) == 0:
        return html.escape(fp.raw_code)
    text, _ = highlight_overlap(fp.raw_code, slices, "<mark>", "</mark>", escape_html=True)
    return text


def _written(answer: str, stub: str) -> str:
    """What the student wrote in an answer cell: its lines, less those the released cell already had (signature,
    docstring, guards), so that no match can span the stub and the student's first line."""
    given = {line.strip() for line in stub.splitlines() if line.strip()}
    return "\n".join(line for line in answer.splitlines() if line.strip() not in given)


def compare_answers(by_student: dict[str, dict[str, str]], boilerplate: dict[str, str], *,
                    aid: str = "", threshold: float = THRESHOLD) -> Result:
    """Rank every pair of students by the similarity of their answers (`by_student`: student -> grade_id ->
    code); `boilerplate`: grade_id -> the released code of that cell (and "" -> all other released code)."""
    gids = list(dict.fromkeys(g for a in by_student.values() for g in a))
    shared = _boilerplate("\n\n".join(boilerplate.values()))
    prints: dict[str, dict[str, object]] = {}
    for student, given in by_student.items():
        given = {gid: _written(code, boilerplate.get(gid, "")) for gid, code in given.items()}
        prints[student] = {gid: _fingerprint(f"{student}-{gid}", given.get(gid, ""), shared) for gid in gids}
    pairs = []
    for a, b in itertools.combinations(sorted(by_student), 2):
        pair = Pair(a, b, 0.0, (0.0, 0.0))
        found, covered = [0.0, 0.0], [0, 0]  # per side: fingerprinted code found in the other's same answer
        for gid in gids:
            fa, fb = prints[a][gid], prints[b][gid]
            if not fa.token_coverage and not fb.token_coverage:
                continue
            s, (sa, sb), slices = _similarity(fa, fb)
            pair.answers[gid] = s
            for side, (fp, sim) in enumerate(((fa, sa), (fb, sb))):
                found[side] += sim * fp.token_coverage
                covered[side] += fp.token_coverage
            if s > 0:
                pair.passages[gid] = (_highlight(fa, slices[0]), _highlight(fb, slices[1]))
        pair.sides = tuple(f / c if c else 0.0 for f, c in zip(found, covered))
        pair.overall = sum(pair.sides) / 2
        pairs.append(pair)
    pairs.sort(key=lambda p: (-p.overall, p.a, p.b))
    return Result(aid, sorted(by_student), pairs, {}, threshold)


def compare(aid: str, *, root: Path = ROOT, threshold: float = THRESHOLD) -> Result:
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
                given.update({f"{path.stem}/{gid}" if len(released) > 1 else gid: code for gid, code in
                              answers(nbformat.read(str(mine), as_version=4)).items()})
            except Exception as err:  # unreadable: grading reports why; here it is only not compared
                skipped[student] = f"{path.name} could not be read as a notebook ({type(err).__name__})"
                break
        else:
            by_student[student] = given
    result = compare_answers(by_student, boilerplate, aid=aid, threshold=threshold)
    result.skipped = skipped
    return result


def write_report(result: Result, folder: Path) -> tuple[Path, Path]:
    """The CSV of every pair and the HTML of the pairs at or above the threshold; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    gids = list(dict.fromkeys(g for p in result.pairs for g in p.answers))
    short = {g: g.removeprefix(f"{result.aid}-").removesuffix("-solution") for g in gids}
    csv_path = folder / f"{result.aid}-similarity.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rank", "student_a", "student_b", "overall", "a_in_b", "b_in_a", *(short[g] for g in gids)])
        for rank, p in enumerate(result.pairs, 1):
            writer.writerow([rank, p.a, p.b, f"{p.overall:.3f}", f"{p.sides[0]:.3f}", f"{p.sides[1]:.3f}",
                             *(f"{p.answers[g]:.3f}" if g in p.answers else "" for g in gids)])
    html_path = folder / f"{result.aid}-similarity.html"
    esc = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>{esc(result.aid)}: similar code</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid "
             "#ccc;padding:4px 8px;vertical-align:top}pre{margin:0;white-space:pre-wrap;font-size:12px}"
             "mark{background:#ffd54f}.pair{margin-top:2em}</style>",
             f"<h1>{esc(result.aid)}: pairs of students whose answers match</h1>",
             f"<p>{len(result.students)} submissions, {len(result.pairs)} pairs, ranked by the similarity of the code "
             f"students wrote (answer cells only; the released notebook is boilerplate; names and comments do not "
             f"count; passages under {NOISE} characters of code never match). Shown: pairs at or above "
             f"{result.threshold:.2f}. A ranking to read, never a verdict: short answers written the natural way "
             f"can match honestly.</p>",
             "<table><tr><th>rank</th><th>pair</th><th>overall</th>"
             + "".join(f"<th>{esc(short[g])}</th>" for g in gids) + "</tr>"]
    for rank, p in enumerate(result.pairs, 1):
        if p.overall < result.threshold:
            break
        parts.append(f"<tr><td>{rank}</td><td><a href='#p{rank}'>{esc(p.a)} ~ {esc(p.b)}</a></td>"
                     f"<td>{p.overall:.2f}</td>"
                     + "".join(f"<td>{p.answers[g]:.2f}</td>" if g in p.answers else "<td></td>" for g in gids)
                     + "</tr>")
    parts.append("</table>")
    for rank, p in enumerate(result.pairs, 1):
        if p.overall < result.threshold:
            break
        parts.append(f"<div class='pair' id='p{rank}'><h2>{rank}. {esc(p.a)} ~ {esc(p.b)}: {p.overall:.2f}</h2>"
                     f"<table><tr><th>answer</th><th>{esc(p.a)}</th><th>{esc(p.b)}</th></tr>")
        for gid in p.matching(0.0):
            if gid in p.passages:
                left, right = p.passages[gid]
                parts.append(f"<tr><td>{esc(short[gid])}<br>{p.answers[gid]:.2f}</td><td><pre>{left}</pre></td>"
                             f"<td><pre>{right}</pre></td></tr>")
        parts.append("</table></div>")
    html_path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return csv_path, html_path
