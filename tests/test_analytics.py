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
# A check broken on purpose, as an instructor's slip would break one: its oracle ranks the least similar key first,
# so it passes only a top_k that sorts the wrong way
BROKEN = """from twoprim.core.checks import run_check
run_check("ex01_dot-top_k", top_k, ex01.search_cases([(10, 8)], [torch.float64], k=3),
          expected=lambda query, keys, k: ex01._expected_top_k(-query, keys, k), judge=ex01._judge_top_k,
          proves="the k most similar keys (says the broken oracle)")"""


def _ranked(result: similarity.Result) -> list[tuple[frozenset, float]]:
    return [(frozenset((p.a, p.b)), p.overall) for p in result.pairs]


# --- similarity ------------------------------------------------------------------------------------------------


def test_every_planted_copy_ranks_above_every_pair_of_independent_solutions():
    nb = student_version(AID)
    boilerplate = {**answers(nb), "": "\n\n".join(c.source for c in nb.cells if c.cell_type == "code")}
    result = similarity.compare_answers(similar_class.students(), boilerplate, aid=AID)
    planted = {frozenset(p) for p in similar_class.PLANTED}
    ranked = _ranked(result)
    full = [s for pair, s in ranked if pair in planted and "partial" not in pair]
    independent = [s for pair, s in ranked if pair not in planted]
    assert len(full) == 4 and len(independent) == len(ranked) - 5
    assert min(full) > max(independent), (sorted(full), sorted(independent)[-5:])
    # at the default threshold every planted copy (the partial one too) is shown, and nothing else
    shown = {frozenset((p.a, p.b)) for p in result.above()}
    assert shown == planted, (shown ^ planted, ranked[:8])
    # the report names the answers that were copied: the partial copy took cosine_similarity and top_k only
    partial = next(p for p in result.pairs if {p.a, p.b} == {"partial", "indep_5"})
    assert {g.split("-")[1] for g in partial.matching(result.threshold)} == similar_class.PARTIAL_FUNCTIONS
    # the natural one-line dot many students write alike matches no one: below the noise threshold
    assert all(p.answers.get(f"{AID}-dot-solution", 0.0) == 0.0 for p in result.pairs), \
        [(p.a, p.b, p.answers.get(f"{AID}-dot-solution")) for p in result.pairs if p.answers.get(f"{AID}-dot-solution")]


def test_similarity_command_reads_the_collected_notebooks_and_writes_csv_and_html(tmp_path, capsys):
    course = course_copy(tmp_path / "course", AID)
    similar_class.write_class(course / "grader" / "submitted")
    result = similarity.compare(AID, root=course)
    assert len(result.students) == len(similar_class.students()) and not result.skipped
    csv_path, html_path = similarity.write_report(result, course / "grader" / "reports")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == math.comb(len(result.students), 2)
    assert {frozenset((r["student_a"], r["student_b"])) for r in rows[:5]} == \
        {frozenset(p) for p in similar_class.PLANTED}
    page = html_path.read_text()
    assert page.count("class='pair'") == 5 and "<mark>" in page and "never a verdict" in page
    # the command's own path (./course similarity), on this course
    assert commands.run(argparse.Namespace(command="similarity", assignment=AID, threshold=0.95), course) == 0
    out = capsys.readouterr().out
    assert f"{len(result.students)} submissions of {AID} compared, 55 pairs; 2 at or above 0.95" in out, out
    assert "1.00  indep_1 ~ renamed  (matching: dot_loop, cosine_similarity, top_k)" in out, out


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
