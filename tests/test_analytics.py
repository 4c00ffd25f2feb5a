"""What an instructor learns from a graded class: similarity on a synthetic class with planted, disguised copies;
item analysis on a class graded here, with one test cell broken on purpose (it passes only wrong answers); grades
out to Canvas's gradebook import format."""

from __future__ import annotations

import argparse
import csv
import math
from typing import Any

import nbformat
import pytest
from nbgrader.api import Gradebook

from twoprim import grading
from twoprim.analytics import commands, export, items, similarity
from twoprim.core.notebooks import answers
from twoprim.grading.gradebook import database_url

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
    assert any(flagged[pair].overall < result.threshold and flagged[pair].why() == ["answers"] for pair in partial), [
        (flagged[p].overall, flagged[p].why()) for p in partial
    ]
    # each copy group (a student and everyone who copied them) is shown as one group
    groups = [set(g) for g in result.groups()]
    for group in klass.groups:
        assert sum(set(group) <= g for g in groups) == 1, (group, groups)
    # a one-line answer (gemm_flops) is below the noise threshold: two independent students never match on it
    honest = [s for s in klass.students.values() if not s.copied]
    assert all(
        f"{GEMM}-gemm_flops-solution" not in p.raw for p in result.pairs if {p.a, p.b} <= {s.name for s in honest}
    ), "a one-line answer matched"
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
        ns: dict[str, Any] = {"torch": torch, "ex02": ex02}
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
    """ex01_dot graded for a class of eight, with the visible top_k test broken (its oracle ranks the wrong way):
    three strong students (every answer right) lose it; three weaker ones (one other answer wrong, and a top_k that
    ranks the wrong way) pass it; `dtype` returns dot in float32 whatever the input (every other answer right); one
    notebook is handed in blank. weak1's dot returns float64 whatever the input: the same mistake as dtype's, met on
    another case (float32 where dtype's meets float64)."""
    course = course_copy(tmp_path_factory.mktemp("items") / "course", AID)
    source = course / "solutions" / AID / f"{AID}.ipynb"
    nb = nbformat.read(str(source), as_version=4)
    nb.cells[cell_index(nb, f"{AID}-top_k")].source = BROKEN
    nbformat.write(nb, str(source))
    code = solution_code(AID)
    dot = code[f"{AID}-dot-solution"]
    backwards = code[f"{AID}-top_k-solution"].replace("descending=True", "descending=False")
    wrong = {
        "dot": dot.replace("return (x * w).sum()", "return (x * w).sum().to(torch.float64)"),
        "cosine_similarity": code[f"{AID}-cosine_similarity-solution"].replace(
            "dots / norms.clamp_min(1e-8)", "2 * dots / norms.clamp_min(1e-8)"
        ),
        "dot_loop": code[f"{AID}-dot_loop-solution"].replace("total += ", "total = "),
    }
    assert all(body != code[f"{AID}-{fn}-solution"] for fn, body in wrong.items())
    submitted = course / "grader" / "submitted"
    for n in (1, 2, 3):
        write(submitted, f"strong{n}", AID, answered(AID))
    for n, (fn, body) in enumerate(wrong.items(), 1):
        write(
            submitted,
            f"weak{n}",
            AID,
            answered(AID, {f"{AID}-{fn}-solution": body, f"{AID}-top_k-solution": backwards}),
        )
    write(
        submitted,
        "dtype",
        AID,
        answered(AID, {f"{AID}-dot-solution": dot.replace("return (x * w).sum()", "return (x * w).sum().float()")}),
    )
    write(submitted, "blank", AID, student_version(AID))
    grading.autograde(AID, root=course, workers=2, progress=False)
    return course


def _grades(course) -> dict[str, dict[str, tuple[float, float]]]:
    with Gradebook(database_url(course), grading.COURSE_ID) as gb:
        return {
            sub.student.id: {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}
            for sub in gb.assignment_submissions(AID)
        }


def test_item_analysis_flags_the_broken_test_and_matches_a_hand_computation(graded_class):
    course = graded_class
    analysis = items.analyse(AID, database_url(course), course)
    # the blank notebook is reported apart and left out of every statistic
    assert analysis.blank == ["blank"] and "blank" not in analysis.students
    assert analysis.students == ["dtype", "strong1", "strong2", "strong3", "weak1", "weak2", "weak3"]
    by_name = {i.name: i for i in analysis.items}
    broken = by_name[f"{AID}-top_k"]
    assert broken.discrimination is not None and broken.discrimination < 0, analysis.describe()
    assert any("negative discrimination" in f for f in broken.flags)
    # who passed and who lost the flagged test
    assert broken.passed_by == ["weak1", "weak2", "weak3"] and broken.lost_by == [
        "dtype",
        "strong1",
        "strong2",
        "strong3",
    ]
    assert broken.lost == 4 and broken.difficulty == pytest.approx(3 / 7)
    # by hand: difficulty = mean fraction of points; discrimination = Pearson's r of the item against the rest
    grades = _grades(course)
    students = analysis.students
    for name, item in by_name.items():
        frac = [grades[s][name][0] / grades[s][name][1] for s in students]
        rest = [sum(g for g, _ in grades[s].values()) - grades[s][name][0] for s in students]
        assert item.difficulty == pytest.approx(sum(frac) / len(frac))
        assert item.lost == sum(f < 1 for f in frac)
        mf, mr = sum(frac) / len(frac), sum(rest) / len(rest)
        sxy = sum((f - mf) * (r - mr) for f, r in zip(frac, rest, strict=True))
        sxx, syy = sum((f - mf) ** 2 for f in frac), sum((r - mr) ** 2 for r in rest)
        if sxx == 0 or syy == 0:
            assert item.discrimination is None and item.interval is None, name
        else:
            assert item.discrimination == pytest.approx(sxy / math.sqrt(sxx * syy)), name
            assert item.interval is not None and item.discrimination is not None, name
            low, high = item.interval  # the bootstrap interval holds the estimate
            assert -1 <= low <= item.discrimination <= high <= 1, (name, item.interval)
        assert item.hidden == name.endswith("-hidden")
    # the broken test stands out: the most negative of all (in a class of seven a sound test can dip below 0)
    ordered = sorted((i for i in analysis.items if i.discrimination is not None), key=lambda i: i.discrimination or 0)
    sound = by_name[f"{AID}-top_k-hidden"]  # the sound check of the same function
    assert sound.discrimination is not None and broken.discrimination is not None and sound.interval is not None
    assert ordered[0] is broken and sound.discrimination - broken.discrimination > 0.5, analysis.describe()
    assert not sound.flags and sound.interval[1] - sound.interval[0] > 0.5  # a small class: a wide interval
    # a class of eight is small: the report says so, and gives every discrimination its interval
    assert analysis.small() and any("a small class: 7 students (under 20)" in w for w in analysis.warnings())
    out = analysis.describe()
    assert "! a small class" in out and "1 blank notebook(s) (blank): left out of the statistics" in out
    assert "ex01_dot-top_k: passed by weak1, weak2, weak3; lost by dtype, strong1, strong2, strong3" in out
    # --with-blank keeps the blank notebook: it loses every test
    kept = items.analyse(AID, database_url(course), course, with_blank=True)
    assert "blank" in kept.students and all("blank" in i.lost_by for i in kept.items)
    paths = items.write_report(analysis, course / "grader" / "reports")
    assert [p.stat().st_size > 0 for p in paths] == [True] * 4
    page = paths[1].read_text()
    assert "negative discrimination" in page and "a small class" in page and "95% interval" in page
    # every test is drawn, visible and hidden told apart, none on top of another
    points = items.plot_points(analysis)
    assert sorted(p[0] for p in points) == sorted(by_name)
    assert len({(round(x, 3), round(y, 3)) for _, x, y, _ in points}) == len(points)
    assert {h for *_, h in points} == {True, False}


def test_misconceptions_count_the_causes_each_students_feedback_names(graded_class):
    """The checks' messages in each student's autograded notebook (what their feedback shows) grouped by cause: the
    same mistake met on another case counts once, under one cause; every failed test is under exactly one cause."""
    from twoprim.analytics import misconceptions

    course = graded_class
    analysis = items.analyse(AID, database_url(course), course)
    m = analysis.misconceptions
    assert m is not None
    assert m.students == analysis.students and m.blank == ["blank"] and not m.unread
    feedback = {
        s: {
            gid: text
            for p in (course / "grader" / "autograded" / s / AID).glob("*.ipynb")
            for gid, text in misconceptions.messages(nbformat.read(str(p), as_version=4)).items()
        }
        for s in m.students
    }
    # every failed test of every student is named under one cause of its function, and nothing else is
    named = [(s, gid) for causes in m.causes.values() for c in causes for s, gids in c.named.items() for gid in gids]
    assert sorted(named) == sorted((s, gid) for s, tests in feedback.items() for gid in tests)
    for function, causes in m.causes.items():
        for c in causes:
            for s, gids in c.named.items():
                for gid in gids:
                    assert gid.split("-")[1] == function
                    words = c.label.split(" (next: ")[0]
                    assert (
                        words in misconceptions.normalise(feedback[s][gid])
                        or words == f"{misconceptions.NO_CAUSE} ({gid})"
                    ), (words, feedback[s][gid])
    # the planted mistakes: dot in the wrong dtype, met by weak1 on float32 and by dtype on float64, is one cause
    dtype = next(c for c in m.causes["dot"] if c.label.startswith("dtype ‹dtype›, expected ‹dtype›"))
    assert dtype.students == ["dtype", "weak1"] and dtype.line(len(m.students)).startswith("2 of 7: dtype")
    assert "dtype float32, expected float64" in feedback["dtype"][f"{AID}-dot"]
    assert "dtype float64, expected float32" in feedback["weak1"][f"{AID}-dot"]
    assert set(dtype.tests) >= {f"{AID}-dot", f"{AID}-dot-hidden"}
    # neuron calls dot: its checks say so for both, one cause
    assert [(c.students, "fails its check" in c.label) for c in m.causes["neuron"]] == [(["dtype", "weak1"], True)]
    # top_k: the broken visible check fails every right answer, the hidden one the backwards rankings, neither with
    # a diagnosis: two causes, one per test; weak2's top_k is blamed on its cosine_similarity
    top = {tuple(c.students): (c.label, c.tests) for c in m.causes["top_k"]}
    assert top[("dtype", "strong1", "strong2", "strong3")] == (
        f"{misconceptions.NO_CAUSE} ({AID}-top_k)",
        [f"{AID}-top_k"],
    )
    assert top[("weak1", "weak3")][1] == [f"{AID}-top_k-hidden"]
    assert "`cosine_similarity` fails its check" in top[("weak2",)][0]
    assert m.causes["dot_loop"][0].students == ["weak3"] and m.causes["cosine_similarity"][0].students == ["weak2"]
    assert all("blank" not in c.students for causes in m.causes.values() for c in causes)
    # in the terminal, the CSV and the HTML
    out = analysis.describe()
    assert "What the checks told the class (7 graded notebooks; 1 blank, left out: blank):" in out
    assert f"    {dtype.line(7)}  (dtype, weak1)" in out
    paths = items.write_report(analysis, course / "grader" / "reports")
    with open(paths[3], newline="") as f:
        rows = list(csv.DictReader(f))
    assert {"function": "dot", "students": "2", "of": "7", "cause": dtype.label, "who": "dtype weak1"}.items() <= next(
        r for r in rows if r["cause"] == dtype.label
    ).items()
    assert "What the checks told the class" in paths[1].read_text() and "2 of 7" in paths[1].read_text()


def test_analysis_command_prints_the_warnings_and_the_misconceptions(graded_class, capsys):
    args = argparse.Namespace(command="analysis", assignment=AID, db=None, with_blank=False)
    assert commands.run(args, graded_class) == 0
    out = capsys.readouterr().out
    assert "! a small class: 7 students (under 20)" in out and "left out: blank" in out
    assert "2 of 7: dtype ‹dtype›, expected ‹dtype› (the input's dtype)  (dtype, weak1)" in out
    assert f"{AID}-misconceptions.csv" in out and f"{AID}-items.png" in out


def test_a_cause_is_the_checks_diagnosis_with_the_case_taken_out():
    """Real messages of ex02's visible checks on wrong answers, run here: the same mistake met on different cases
    has one key; different diagnoses have different keys, told apart in words where the words are the same."""
    import contextlib
    import io

    import torch

    from twoprim.analytics import misconceptions
    from twoprim.assignments import ex02_gemm as ex02
    from twoprim.core.checks import CheckFailure

    def message(check, fn, cases=None) -> str:
        with pytest.raises(CheckFailure) as info, contextlib.redirect_stdout(io.StringIO()):
            check(fn) if cases is None else check(fn, cases)
        return str(info.value)

    def loops(dtype):  # a triple loop that builds C in a fixed dtype
        def matmul_loops(A, B):
            C = torch.zeros(A.shape[0], B.shape[1], dtype=dtype)
            for i in range(A.shape[0]):
                for j in range(B.shape[1]):
                    C[i, j] = sum(float(A[i, k]) * float(B[k, j]) for k in range(A.shape[1]))
            return C

        return matmul_loops

    as32 = message(ex02.check_matmul_loops, loops(torch.float32))
    as64 = message(ex02.check_matmul_loops, loops(torch.float64), ex02.matmul_cases([(3, 4, 5)], [torch.float32]))
    assert "dtype float32, expected float64" in as32 and "dtype float64, expected float32" in as64
    assert misconceptions.cause_of(as32) == misconceptions.cause_of(as64)
    assert (misconceptions.cause_of(as32) or ("", ""))[1] == "dtype ‹dtype›, expected ‹dtype› (the input's dtype)"
    # the same wrong count on other sizes: one key; another wrong count: another key (its next step differs)
    half = [
        message(ex02.check_gemm_flops, lambda M, N, K: M * N * K, ex02.flops_cases([s]))
        for s in ((3, 4, 5), (64, 32, 16))
    ]
    minus = message(ex02.check_gemm_flops, lambda M, N, K: M * N * (2 * K - 1))
    assert misconceptions.cause_of(half[0]) == misconceptions.cause_of(half[1]) != misconceptions.cause_of(minus)
    # a rule broken is named with what was found; a wrong value with no diagnosis is said to be one
    cause = misconceptions.cause_of(message(ex02.check_matmul_outer, lambda A, B: A @ B))
    assert cause is not None
    rule = cause[1]
    assert rule.startswith("no dot, matrix-vector or matrix-matrix product (outer products only): it called aten.mm")
    outer_short = lambda A, B: sum(torch.outer(A[:, k], B[k]) for k in range(A.shape[1] - 1))  # noqa: E731
    plain = misconceptions.cause_of(message(ex02.check_matmul_outer, outer_short))
    assert plain is not None and plain[1] == misconceptions.NO_CAUSE
    assert misconceptions.cause_of("✔ ex02_gemm-gemm: passed 16 cases") is None


def test_canvas_export_has_canvas_columns_and_reports_who_is_missing(graded_class, tmp_path):
    course = graded_class
    roster = tmp_path / "roster.csv"
    people = [
        ("strong1", "One, Strong", "1001"),
        ("strong2", "Two, Strong", "1002"),
        ("weak1", "One, Weak", "1004"),
        ("weak2", "Two, Weak", "1005"),
        ("weak3", "Three, Weak", "1006"),
        ("absent", "Away, Always", "1009"),
    ]
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
    assert body["One, Strong"] == [
        "One, Strong",
        "1001",
        "S1001",
        "strong1@uni.example",
        "Section A",
        report["strong1"]["score"],
    ]
    assert body["Away, Always"][-1] == ""  # no submission: blank, not 0
    assert len(body) == len(people)
    assert "absent: no submission of ex01_dot: left blank" in result.notes
    assert any(n.startswith("strong3 has a submission of ex01_dot but is not in the roster") for n in result.notes)
    # a plain CSV for any other LMS
    plain = export.export(
        export.parse_assignments([AID], [AID], canvas=False),
        roster,
        root=course,
        url=database_url(course),
        canvas=False,
        out=tmp_path / "plain.csv",
    )
    with open(plain.path, newline="") as f:
        assert list(csv.reader(f))[:2] == [["student", AID], ["strong1", report["strong1"]["score"]]]
    with pytest.raises(SystemExit, match=r"Canvas needs each assignment's numeric id.*ex01_dot=ID"):
        export.parse_assignments([AID], [AID], canvas=True)
    (tmp_path / "bad.csv").write_text("student,name\nann,Ann\n")
    with pytest.raises(SystemExit, match=r"has no `id`.*column"):
        export.read_roster(tmp_path / "bad.csv", canvas=False)


# Canvas's own gradebook export, as canvas-lms's GradebookExporter writes it: the student columns, one column per
# assignment named "title (id)", the totals (read only), a "    Points Possible" row, a row per student, the Test
# Student (no SIS login) last.
CANVAS_EXPORT = [
    [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        f"{AID} (4321)",
        "Quiz 1 (4400)",
        "Current Score",
        "Unposted Current Score",
        "Final Score",
        "Unposted Final Score",
    ],
    ["    Points Possible", "", "", "", "", "9.00", "5.00", "(read only)", "(read only)", "(read only)", "(read only)"],
    ["One, Strong", "1001", "S1001", "strong1", "Section A", "", "4.00", "80.00", "80.00", "30.77", "30.77"],
    [
        "Two, Weak",
        "1005",
        "S1005",
        "weak2",
        "Section A and Section B",
        "",
        "5.00",
        "100.00",
        "100.00",
        "38.46",
        "38.46",
    ],
    ['="=Equals, Ed"', "1007", "S1007", "dtype", "Section B", "", "", "", "", "0.00", "0.00"],
    ["Student, Test", "1099", "", "", "Section A", "", "", "", "", "0.00", "0.00"],
]


def test_a_canvas_gradebook_export_is_the_roster_and_late_work_is_in_the_notes(graded_class, tmp_path, capsys):
    """The file an instructor downloads from Canvas is read as the roster (the course's id from SIS Login ID, each
    assignment's Canvas id from its column); a student 2 h 31 min late is in the notes with the lateness and the
    penalty applied, under the late policy the notes state."""
    import datetime

    from twoprim.grading.gradebook import refresh_late_penalties

    course = graded_class
    url = database_url(course)
    due = datetime.datetime(2026, 11, 30, 9, 0)
    with Gradebook(url, grading.COURSE_ID) as gb:
        gb.update_or_create_assignment(AID, duedate=due)  # pyright: ignore[reportArgumentType] (nbgrader: **kwargs: dict)
        for sub in gb.assignment_submissions(AID):
            # a SQLAlchemy column of nbgrader's, typed as the Column itself
            sub.timestamp = due + (  # pyright: ignore[reportAttributeAccessIssue]
                datetime.timedelta(hours=2, minutes=31) if sub.student.id == "weak2" else -datetime.timedelta(hours=1)
            )
        gb.db.commit()
    refresh_late_penalties(AID, course, url)
    roster = tmp_path / "gradebook.csv"
    with open(roster, "w", newline="", encoding="utf-8-sig") as f:  # Canvas may write a byte-order mark
        csv.writer(f).writerows(CANVAS_EXPORT)
    ids = export.canvas_assignment_ids(roster)
    assert ids == {AID: "4321", "Quiz 1": "4400"}
    wanted = export.parse_assignments([AID], [AID], canvas=True, ids=ids)  # the id taken from the export
    result = export.export(wanted, roster, root=course, url=url, canvas=True)
    with open(result.path, newline="") as f:
        rows = list(csv.reader(f))
    with open(course / "grader" / "reports" / f"{AID}.csv") as f:
        report = {r["student"]: r for r in csv.DictReader(f)}
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{AID} (4321)"]
    assert rows[2:] == [
        ["One, Strong", "1001", "S1001", "strong1", "Section A", report["strong1"]["score"]],
        ["Two, Weak", "1005", "S1005", "weak2", "Section A and Section B", report["weak2"]["score"]],
        ["=Equals, Ed", "1007", "S1007", "dtype", "Section B", report["dtype"]["score"]],
    ]
    # the late student: lateness and penalty in the notes, beside the export too; the policy stated
    assert float(report["weak2"]["seconds_late"]) == 9060 and float(report["strong1"]["seconds_late"]) == 0
    late = [n for n in result.notes if " late (" in n]
    assert late == [
        f"weak2: {AID} submitted 2 h 31 min late (9060 s after their deadline); late penalty 0 of "
        f"{report['weak2']['max_score']} points applied: {report['weak2']['score']} exported"
    ]
    assert result.notes[0].startswith("late policy: none (nbgrader's LateSubmissionPlugin, penalty_method 'none'")
    assert any(n.startswith("Student, Test (Canvas ID 1099) has no SIS Login ID: not exported") for n in result.notes)
    assert result.notes_path is not None and result.notes_path.read_text().splitlines() == result.notes
    # a semicolon-separated export (Canvas's setting for a comma decimal separator), first and last names apart
    semi = tmp_path / "semicolon.csv"
    semi.write_text(
        "LastName;FirstName;ID;SIS Login ID;Section;ex01_dot (4321)\n    Points Possible;;;;;9,00\n"
        "Weak;Two;1005;weak2;A;\n",
        encoding="utf-8",
    )
    assert export.read_roster(semi, canvas=True) == [
        {
            "id": "weak2",
            "name": "Weak, Two",
            "canvas_id": "1005",
            "sis_user_id": "",
            "sis_login_id": "weak2",
            "section": "A",
        }
    ]
    with pytest.raises(SystemExit, match=r"without a column 'Email'.*--roster-id"):
        export.read_roster(roster, canvas=True, id_column="Email")
    # the command's own path (./course export ex01_dot --roster gradebook.csv --canvas): the id from the export
    args = argparse.Namespace(
        command="export",
        assignments=[AID],
        roster=roster,
        canvas=True,
        db=None,
        output=tmp_path / "out.csv",
        roster_id=None,
    )
    assert commands.run(args, course) == 0
    out = capsys.readouterr().out
    assert f"weak2: {AID} submitted 2 h 31 min late" in out and "late policy: none" in out
    assert (tmp_path / "out.csv").read_text().splitlines()[0].endswith(f"{AID} (4321)")
