"""What an instructor learns from a graded class: similarity on a synthetic class with planted, disguised copies;
item analysis on a class graded here, with one test cell broken on purpose (it passes only wrong answers); grades
out to Canvas's gradebook import format."""
from __future__ import annotations

import argparse
import csv
import math

import nbformat
import pytest
from nbgrader.api import Gradebook

from twoprim import grading
from twoprim.analytics import commands, export, items, similarity
from twoprim.grading.gradebook import database_url
from twoprim.core.notebooks import answers

from . import similar_class
from .classroom import answered, cell_index, course_copy, solution_code, student_version, write

AID = "ex01_dot"
GEMM = similar_class.AID
# A check broken on purpose, as an instructor's slip would break one: its oracle ranks the least similar key first,
# so it passes only a top_k that sorts the wrong way
BROKEN = """from twoprim.core.checks import run_check
run_check("ex01_dot-top_k", top_k, ex01.search_cases([(10, 8)], [torch.float64], k=3),
          expected=lambda query, keys, k: ex01._expected_top_k(-query, keys, k), judge=ex01._judge_top_k,
          proves="the k most similar keys (says the broken oracle)")"""


# --- similarity ------------------------------------------------------------------------------------------------

# A class of 24 built as an instructor's (tests/similar_class.py): 14 independent students, one blank, and 10 copies,
# each of the five disguises twice, two of them copies of one student (a group of three). Every test below that
# needs a class uses this one; scripts/bench_similarity.py measures the same method on many such classes.
CLASS = dict(size=24, seed=3, copies_per_disguise=2)


@pytest.fixture(scope="module")
def built_class():
    klass = similar_class.build(**CLASS)
    assert similar_class.verify(klass) == []  # every answer does what it was written to do
    return klass


def _boilerplate(aid: str) -> dict[str, str]:
    nb = student_version(aid)
    return {**answers(nb), "": "\n\n".join(c.source for c in nb.cells if c.cell_type == "code")}


def test_similarity_finds_whole_partial_and_grouped_copies(built_class):
    klass = built_class
    result = similarity.compare_answers(similar_class.answers(klass), _boilerplate(GEMM), aid=GEMM)
    flagged = {frozenset((p.a, p.b)): p for p in result.flagged()}
    within, copied = klass.pairs(), klass.copied_pairs()
    precision = len(set(flagged) & within) / len(flagged)
    recall = len(set(flagged) & set(copied)) / len(copied)
    assert precision >= 0.9 and recall >= 0.9, (precision, recall, result.describe())
    assert set(copied.values()) == set(similar_class.DISGUISES) and len(klass.groups[0]) == 3
    # every partial copy is flagged, and its report names the answers it copied as matching
    partial = klass.partial_copies()
    assert len(partial) == 2
    for pair, functions in partial.items():
        assert pair in flagged, (sorted(pair), result.describe())
        named = {result.short(g) for g in flagged[pair].matching()}
        assert functions <= named, (sorted(pair), functions, named)
    # a partial copy is flagged by its answers although its overall similarity is below the overall threshold
    assert any(flagged[pair].overall < result.threshold and flagged[pair].why() == ["answers"] for pair in partial), \
        [(flagged[p].overall, flagged[p].why()) for p in partial]
    # each copy group (a student and everyone who copied them) is shown as one group
    groups = [set(g) for g in result.groups()]
    for group in klass.groups:
        assert sum(set(group) <= g for g in groups) == 1, (group, groups)
    # a one-line answer (gemm_flops) is below the noise threshold: two independent students never match on it
    honest = [s for s in klass.students.values() if not s.copied]
    assert all(f"{GEMM}-gemm_flops-solution" not in p.raw for p in result.pairs
               if {p.a, p.b} <= {s.name for s in honest}), "a one-line answer matched"
    # a passage that many students wrote alike counts less than one only two of them wrote
    assert similarity.rarity(2, 20) == 1.0 and similarity.rarity(20, 20) == 0.0
    assert 1.0 > similarity.rarity(3, 20) > similarity.rarity(10, 20) > 0.0


def test_the_compared_form_undoes_each_disguise_and_keeps_what_the_code_does(built_class):
    """A renamed, reordered or rewritten (while loops, dead code) copy reads, token for token, as its source once in
    the compared form (copydetect's tokens: every name one letter); the form still runs and gives what the source
    gives. (A wrapped copy keeps its helper's extra lines: it is found by its similarity, not by identity.)"""
    import torch
    from copydetect.utils import filter_code

    from twoprim.analytics.canonical import normalise
    from twoprim.assignments import ex02_gemm as ex02

    klass = built_class
    tokens = lambda code: filter_code(normalise(code), "x.py", "python")[0]  # noqa: E731
    A, B, C = (torch.randn(*s, dtype=torch.float64) for s in ((5, 7), (7, 3), (5, 3)))
    calls = {"gemm": (1.5, A, B, 0.5, C), "matmul_tiled": (A, B, 2), "gemm_flops": (5, 3, 7)}

    def outcome(code: str, fn: str):
        ns = {"torch": torch, "ex02": ex02}
        try:
            exec(code, ns)  # noqa: S102 - the class's own answer
            got = ns[fn](*calls.get(fn, (A, B)))
            return got if isinstance(got, int) else (got.dtype, got.tolist())
        except Exception as err:  # noqa: BLE001 - a wrong answer may raise: then the same error
            return type(err).__name__

    compared = 0
    for copy in (s for s in klass.students.values() if s.disguise in ("renamed", "reordered", "rewritten")):
        source = klass.students[copy.copied]
        mine, theirs = similar_class.answers_of(copy), similar_class.answers_of(source)
        for fn in copy.bodies:
            gid = f"{GEMM}-{fn}-solution"
            assert tokens(mine[gid]) == tokens(theirs[gid]), (copy.disguise, gid, normalise(mine[gid]))
            assert outcome(normalise(mine[gid]), fn) == outcome(theirs[gid], fn), (copy.disguise, gid)
            compared += 1
    assert compared >= 3 * 2 * 4


def test_similarity_command_reports_every_flagged_pair_and_group(tmp_path, capsys, built_class):
    klass = built_class
    course = course_copy(tmp_path / "course", GEMM)
    similar_class.write_class(klass, course / "grader" / "submitted")
    result = similarity.compare(GEMM, root=course)
    assert result.students == sorted(klass.students) and not result.skipped
    csv_path, html_path = similarity.write_report(result, course / "grader" / "reports")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == math.comb(len(result.students), 2)
    flagged = result.flagged()
    assert sum(bool(r["flagged"]) for r in rows) == len(flagged)
    page = html_path.read_text()
    # every flagged pair is on the page, those flagged by their answers alone too
    assert page.count("class='pair'") == len(flagged) and any(p.why() == ["answers"] for p in flagged)
    for p in flagged:
        assert f"{p.a} ~ {p.b}" in page
    assert "an empty cell means one of the two wrote no code in that answer" in page and "<mark>" in page
    group = ", ".join(sorted(klass.groups[0]))
    assert f"group 1: {group} (3 students)" in page and "never a verdict" in page
    # the command's own path (./course similarity), on this course
    args = argparse.Namespace(command="similarity", assignment=GEMM, threshold=None, answers_threshold=None)
    assert commands.run(args, course) == 0
    out = capsys.readouterr().out
    assert f"{len(result.students)} submissions of {GEMM} compared, {len(rows)} pairs; {len(flagged)} flagged" in out
    assert f"group 1: {group} (3 students linked by flagged pairs)" in out, out


# --- item analysis and export ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """ex01_dot graded for six students, with the visible top_k test broken: three strong students (every answer
    right) lose it; three weaker ones (one other answer wrong, and a top_k that ranks the wrong way) pass it."""
    course = course_copy(tmp_path_factory.mktemp("items") / "course", AID)
    source = course / "solutions" / AID / f"{AID}.ipynb"
    nb = nbformat.read(str(source), as_version=4)
    nb.cells[cell_index(nb, f"{AID}-top_k")].source = BROKEN
    nbformat.write(nb, str(source))
    code = solution_code(AID)
    backwards = code[f"{AID}-top_k-solution"].replace("descending=True", "descending=False")
    wrong = {"dot": code[f"{AID}-dot-solution"].replace("(x * w).sum()", "x.sum() * w.sum()"),
             "cosine_similarity": code[f"{AID}-cosine_similarity-solution"].replace(
                 "dots / norms.clamp_min(1e-8)", "2 * dots / norms.clamp_min(1e-8)"),
             "dot_loop": code[f"{AID}-dot_loop-solution"].replace("total += ", "total = ")}
    submitted = course / "grader" / "submitted"
    for n in (1, 2, 3):
        write(submitted, f"strong{n}", AID, answered(AID))
    for n, (fn, body) in enumerate(wrong.items(), 1):
        write(submitted, f"weak{n}", AID, answered(AID, {f"{AID}-{fn}-solution": body,
                                                        f"{AID}-top_k-solution": backwards}))
    grading.autograde(AID, root=course, workers=2, progress=False)
    return course


def _grades(course) -> dict[str, dict[str, tuple[float, float]]]:
    with Gradebook(database_url(course), grading.COURSE_ID) as gb:
        return {sub.student.id: {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}
                for sub in gb.assignment_submissions(AID)}


def test_item_analysis_flags_the_broken_test_and_matches_a_hand_computation(graded_class):
    course = graded_class
    analysis = items.analyse(AID, database_url(course))
    assert analysis.students == ["strong1", "strong2", "strong3", "weak1", "weak2", "weak3"], analysis.left_out
    by_name = {i.name: i for i in analysis.items}
    broken = by_name[f"{AID}-top_k"]
    assert broken.discrimination is not None and broken.discrimination < 0, analysis.describe()
    assert any("negative discrimination" in f for f in broken.flags)
    assert broken.lost == 3 and broken.difficulty == pytest.approx(0.5)
    # by hand: difficulty = mean fraction of points; discrimination = Pearson's r of the item against the rest
    grades = _grades(course)
    students = sorted(grades)
    for name, item in by_name.items():
        frac = [grades[s][name][0] / grades[s][name][1] for s in students]
        rest = [sum(g for g, _ in grades[s].values()) - grades[s][name][0] for s in students]
        assert item.difficulty == pytest.approx(sum(frac) / len(frac))
        assert item.lost == sum(f < 1 for f in frac)
        mf, mr = sum(frac) / len(frac), sum(rest) / len(rest)
        sxy = sum((f - mf) * (r - mr) for f, r in zip(frac, rest))
        sxx, syy = sum((f - mf) ** 2 for f in frac), sum((r - mr) ** 2 for r in rest)
        if sxx == 0 or syy == 0:
            assert item.discrimination is None, name
        else:
            assert item.discrimination == pytest.approx(sxy / math.sqrt(sxx * syy)), name
    # the broken test stands out: the most negative of all, by far (in a class of six a sound test can dip below 0)
    ordered = sorted((i for i in analysis.items if i.discrimination is not None), key=lambda i: i.discrimination)
    assert ordered[0] is broken and ordered[1].discrimination - broken.discrimination > 0.5, analysis.describe()
    assert by_name[f"{AID}-top_k-hidden"].discrimination > 0.5  # the sound check of the same function
    paths = items.write_report(analysis, course / "grader" / "reports")
    assert [p.stat().st_size > 0 for p in paths] == [True] * 3
    assert "negative discrimination" in paths[1].read_text()


def test_canvas_export_has_canvas_columns_and_reports_who_is_missing(graded_class, tmp_path):
    course = graded_class
    roster = tmp_path / "roster.csv"
    people = [("strong1", "One, Strong", "1001"), ("strong2", "Two, Strong", "1002"), ("weak1", "One, Weak", "1004"),
              ("weak2", "Two, Weak", "1005"), ("weak3", "Three, Weak", "1006"), ("absent", "Away, Always", "1009")]
    with open(roster, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "canvas_id", "sis_user_id", "sis_login_id", "section"])
        for sid, name, cid in people:
            w.writerow([sid, name, cid, f"S{cid}", f"{sid}@uni.example", "Section A"])
    wanted = export.parse_assignments([f"{AID}=4321"], [AID], canvas=True)
    result = export.export(wanted, roster, root=course, url=database_url(course), canvas=True)
    with open(result.path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{AID} (4321)"]
    with open(course / "grader" / "reports" / f"{AID}.csv") as f:
        report = {r["student"]: r for r in csv.DictReader(f)}
    assert rows[1] == ["Points Possible", "", "", "", "", report["strong1"]["max_score"]]
    body = {r[0]: r for r in rows[2:]}
    assert body["One, Strong"] == ["One, Strong", "1001", "S1001", "strong1@uni.example", "Section A",
                                   report["strong1"]["score"]]
    assert body["Away, Always"][-1] == ""  # no submission: blank, not 0
    assert len(body) == len(people)
    assert "absent: no submission of ex01_dot: left blank" in result.notes
    assert any(n.startswith("strong3 has a submission of ex01_dot but is not in the roster") for n in result.notes)
    # a plain CSV for any other LMS
    plain = export.export(export.parse_assignments([AID], [AID], canvas=False), roster, root=course,
                          url=database_url(course), canvas=False, out=tmp_path / "plain.csv")
    with open(plain.path, newline="") as f:
        assert list(csv.reader(f))[:2] == [["student", AID], ["strong1", report["strong1"]["score"]]]
    with pytest.raises(SystemExit, match=r"Canvas needs each assignment's numeric id.*ex01_dot=ID"):
        export.parse_assignments([AID], [AID], canvas=True)
    (tmp_path / "bad.csv").write_text("student,name\nann,Ann\n")
    with pytest.raises(SystemExit, match=r"has no `id`.*column"):
        export.read_roster(tmp_path / "bad.csv", canvas=False)
