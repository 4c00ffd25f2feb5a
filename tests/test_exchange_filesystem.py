"""nbgrader's shared-folder exchange, attacked by students with their own Unix accounts (root only: CI runs as
root).

ann submits honestly; ben and cat, with the shell tools any student has, try to submit as ann, to hand in the
instructor's solution through a link, to hand in ann's file as their own, and to make collect hang on a FIFO; dan
and eve backdate or garble the timestamp.txt their own clock wrote. `./course collect` takes only what each
student's own account made, names every other submission with the account that made it and why, and times every
submission by its arrival; autograde then gives ann her own grade and dan and eve the late penalty of their real
arrival.
"""
from __future__ import annotations

import csv
import datetime
import json
import os
import pwd
import re
import secrets
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from twoprim import course as course_cli
from twoprim import grading
from twoprim.exchange import intake

from .accounts import delete_account, shared_tmp
from .classroom import answered, course_copy, solution_code

AID = "ex01_dot"
ANN_DOT = ('def dot(x, w):\n    """ann\'s own: x·w = Σᵢ xᵢ wᵢ."""\n    guards.same_length("dot", x=x, w=w)\n'
           '    return (x * w).sum()  # (n,) * (n,) -> ()\n')
LATE_POLICY = '\nc.LateSubmissionPlugin.penalty_method = "zero"  # late scores nothing\n'

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="students are Unix accounts, which only root can make "
                                                          "(CI runs as root)")


def _as(user: str, script: str) -> None:
    """Run `script` in sh as the account `user`, with nothing but the shell tools every student has."""
    pw = pwd.getpwnam(user)
    proc = subprocess.run(["sh", "-ec", script], user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd="/",
                          env={"PATH": "/usr/bin:/bin", "HOME": "/"}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"{user}: {proc.stderr}"


def _submit(inbound: Path, user: str, named: str, notebook: Path, *, stamp: str = "2026-12-02 09:00:00.000000 UTC",
            then: str = "") -> Path:
    """What `nbgrader submit` does, as `user`, with the name `named`: a folder in inbound/ and the files in it;
    then `then`, a shell line in which $NB is the notebook handed in."""
    folder = inbound / f"{named}+{AID}+{stamp}+{secrets.token_urlsafe(9)}"
    _as(user, f"NB='{folder}/{AID}.ipynb'\nmkdir '{folder}'\ncp '{notebook}' \"$NB\"\n"
              f"printf '%s' '{stamp}' > '{folder}/timestamp.txt'\n{then}")
    return folder


@pytest.fixture(scope="module")
def exchange_class(tmp_path_factory):
    tag = secrets.token_hex(2)
    names = {k: f"tp{tag}{k}" for k in ("ann", "ben", "cat", "dan", "eve")}
    made = []
    base = shared_tmp("twoprim-exchange-test-")
    try:
        for name in names.values():
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                           timeout=60)
            made.append(name)
        course = course_copy(tmp_path_factory.mktemp("exchange") / "course", AID)
        with open(course / "grader" / "nbgrader_config.py", "a") as f:
            f.write(LATE_POLICY)
        exchange = base / "exchange"
        exchange.mkdir(mode=0o755)
        mp = pytest.MonkeyPatch()
        mp.setenv("TWOPRIM_EXCHANGE", str(exchange))
        course_cli.release(AID, root=course)
        inbound = exchange / grading.COURSE_ID / "inbound"
        assert inbound.is_dir() and inbound.stat().st_mode & 0o1733 == 0o1733  # writable by all, and sticky
        # what students hand in, readable by their accounts
        work = base / "work"
        work.mkdir(mode=0o755)
        notebooks = {"ann": answered(AID, {f"{AID}-dot-solution": ANN_DOT}), "right": answered(AID),
                     "wrong": answered(AID, {f"{AID}-dot-solution": solution_code(AID)[f"{AID}-dot-solution"].replace(
                         "return", "return 0 *", 1)})}
        for key, nb in notebooks.items():
            nbformat.write(nb, str(work / f"{key}.ipynb"))
            (work / f"{key}.ipynb").chmod(0o644)
        solution = course / "solutions" / AID / f"{AID}.ipynb"
        ann, ben, cat, dan, eve = names.values()
        ann_folder = _submit(inbound, ann, ann, work / "ann.ipynb")
        attacks = {
            "forged": _submit(inbound, ben, ann, work / "wrong.ipynb", stamp="2026-12-02 09:30:00.000000 UTC"),
            "solution_link": _submit(inbound, ben, ben, work / "wrong.ipynb",
                                     then=f"ln -sf '{solution}' \"$NB\""),
            "folder_link": None,
            "other_students_file": _submit(inbound, cat, cat, work / "wrong.ipynb",
                                           then=f"ln -sf '{ann_folder}/{AID}.ipynb' \"$NB\""),
            "fifo": _submit(inbound, cat, cat, work / "wrong.ipynb", stamp="2026-12-02 09:10:00.000000 UTC",
                            then='rm "$NB" && mkfifo "$NB"'),
        }
        with pytest.raises(AssertionError, match="Operation not permitted"):  # the sticky bit: not his to move
            _as(ben, f"mv '{ann_folder}' '{inbound}/{ben}+{AID}+taken'")
        link = inbound / f"{ben}+{AID}+2026-12-02 09:20:00.000000 UTC+{secrets.token_urlsafe(9)}"
        _as(ben, f"ln -s '{ann_folder}' '{link}'")
        attacks["folder_link"] = link
        # a hard link to ann's file (what a machine without fs.protected_hardlinks lets anyone make)
        hard = _submit(inbound, cat, cat, work / "wrong.ipynb", stamp="2026-12-02 09:40:00.000000 UTC")
        (hard / f"{AID}.ipynb").unlink()
        os.link(ann_folder / f"{AID}.ipynb", hard / f"{AID}.ipynb")
        attacks["hard_link"] = hard
        # the deadline passes; then dan and eve hand in, their clocks saying otherwise
        due = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(seconds=1)
        course_cli.release(AID, root=course, due=due.isoformat())
        time.sleep(max(0.0, (due - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 0.1)
        backdated = _submit(inbound, dan, dan, work / "right.ipynb", stamp="2026-01-01 00:00:00.000000 UTC")
        garbage = _submit(inbound, eve, eve, work / "right.ipynb", stamp="the day before the deadline, honest")
        before = {p: (p.lstat().st_mode, p.lstat().st_mtime_ns) for p in inbound.rglob("*")}
        mp.undo()
        yield {"course": course, "exchange": exchange, "inbound": inbound, "names": names, "ann": ann_folder,
               "attacks": attacks, "before": before, "backdated": backdated, "garbage": garbage, "work": work,
               "solution": solution, "due": due}
    finally:
        for name in made:
            delete_account(name)
        subprocess.run(["rm", "-rf", str(base)], check=False, timeout=300)


def test_collect_takes_only_what_each_students_own_account_made(exchange_class):
    c = exchange_class
    course, names, attacks = c["course"], c["names"], c["attacks"]
    ann, ben, cat, dan, eve = names.values()
    mp = pytest.MonkeyPatch()
    mp.setenv("TWOPRIM_EXCHANGE", str(c["exchange"]))
    try:
        text = course_cli.collect(AID, root=course)
    finally:
        mp.undo()
    submitted = course / "grader" / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted([ann, dan, eve]), text
    # ann's own notebook, not ben's later one in her name
    assert (submitted / ann / AID / f"{AID}.ipynb").read_bytes() == (c["work"] / "ann.ipynb").read_bytes()
    for path in submitted.rglob("*"):
        assert path.is_dir() or (path.is_file() and not path.is_symlink()), path
    assert "BEGIN HIDDEN TESTS" not in "".join(p.read_text() for p in submitted.rglob("*.ipynb"))

    report = json.loads((course / "grader" / "reports" / f"{AID}-collect.json").read_text())
    aside = {Path(s["path"]).name: s for s in report["set_aside"]}
    expected = {
        "forged": (ben, ann, f"in {ann}'s name but made by account {ben}: a submission in someone else's name"),
        "solution_link": (ben, ben, f"{AID}.ipynb is a symbolic link to {c['solution']}, not a regular file"),
        "folder_link": (ben, ben, f"a symbolic link to {c['ann']} in place of a submission folder"),
        "other_students_file": (cat, cat, f"{AID}.ipynb is a symbolic link to {c['ann']}/{AID}.ipynb"),
        "fifo": (cat, cat, f"{AID}.ipynb is a FIFO, not a regular file"),
        "hard_link": (cat, cat, f"{AID}.ipynb belongs to account {ann}, not to {cat} (a hard link to someone "
                                f"else's file)"),
    }
    assert len(aside) == len(expected), report["set_aside"]
    for kind, (account, named, reason) in expected.items():
        got = aside[attacks[kind].name]
        assert (got["account"], got["named"]) == (account, named), (kind, got)
        assert reason in got["reason"], (kind, got)
        line = [l for l in text.splitlines() if attacks[kind].name in l]  # the terminal names each one
        assert len(line) == 1 and reason in line[0] and account in line[0], (kind, text)
    assert "6 submission(s) set aside, not collected" in text
    # nothing in the exchange was touched
    assert {p: (p.lstat().st_mode, p.lstat().st_mtime_ns) for p in c["inbound"].rglob("*")} == c["before"]

    # the submission time is the arrival the collector saw, never the student's clock
    arrived = {s: datetime.datetime.strptime((submitted / s / AID / "timestamp.txt").read_text(), intake.STAMP)
               for s in (ann, dan, eve)}
    due = c["due"].replace(tzinfo=None)
    assert arrived[ann] < due < arrived[dan] and due < arrived[eve], (arrived, due)
    claims = {r["student"]: r["claimed"] for r in report["new"]}
    assert claims[dan] == "2026-01-01 00:00:00.000000 UTC" and claims[eve].startswith("the day before")
    assert f"{dan}: submission time is the arrival" in text and "'2026-01-01 00:00:00.000000 UTC' (not used)" in text
    assert re.search(rf"2 late \({dan} [^,]+, {eve} [^)]+\)", text), text

    # dan and eve handed in the same answers, the solution's code: flagged, collected, for the instructor to judge
    flagged = {(f["student"], f["reason"]) for f in report["flags"]}
    assert (dan, f"the same answers, character for character, as {eve}'s submission") in flagged
    assert (dan, f"every answer in {AID}.ipynb is the solution's code, character for character") in flagged
    assert not any(s == ann for s, _ in flagged), flagged

    # graded: ann keeps her own grade; a backdated or garbled clock gets the penalty of the real arrival
    grading.autograde(AID, root=course, workers=2, progress=False)
    with open(course / "grader" / "reports" / f"{AID}.csv") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == sorted([ann, dan, eve])
    assert {k: rows[ann][k] for k in ("status", "score", "seconds_late", "late_penalty")} == {
        "status": "graded", "score": "15", "seconds_late": "0", "late_penalty": "0"}, rows[ann]
    for student in (dan, eve):
        assert rows[student]["status"] == "graded", rows[student]
        assert float(rows[student]["seconds_late"]) > 0, rows[student]
        assert rows[student]["score"] == "0" and rows[student]["late_penalty"] == "15", rows[student]


def test_a_newer_submission_replaces_the_collected_one_which_is_archived(exchange_class, tmp_path):
    c = exchange_class
    course, inbound = c["course"], c["inbound"]
    ann = c["names"]["ann"]
    mp = pytest.MonkeyPatch()
    mp.setenv("TWOPRIM_EXCHANGE", str(c["exchange"]))
    try:
        course_cli.collect(AID, root=course)
        again = course_cli.collect(AID, root=course)
        assert again.startswith(f"0 new submission(s) of {AID} collected; 3 unchanged"), again
        held = course / "grader" / "submitted" / ann / AID
        old = (held / f"{AID}.ipynb").read_bytes()
        old_stamp = (held / "timestamp.txt").read_text()
        _submit(inbound, ann, ann, c["work"] / "right.ipynb", stamp="2026-12-02 11:00:00.000000 UTC")
        text = course_cli.collect(AID, root=course)
    finally:
        mp.undo()
    assert text.startswith(f"1 new submission(s) of {AID} collected ({ann} (newer)); 2 unchanged"), text
    assert (held / f"{AID}.ipynb").read_bytes() == (c["work"] / "right.ipynb").read_bytes()
    archived = list((course / "grader" / "archive" / AID / ann).iterdir())
    assert len(archived) == 1 and (archived[0] / f"{AID}.ipynb").read_bytes() == old
    assert (archived[0] / "timestamp.txt").read_text() == old_stamp


def test_names_no_exchange_could_have_made_are_set_aside(tmp_path):
    """What an exchange hands over is checked again before anything is written: names that climb out of the
    folder, or a student's name that is not a plain folder name."""
    course = course_copy(tmp_path / "course", AID)
    now = datetime.datetime(2026, 12, 2, 9)
    subs = [intake.Submission("ann", {"../../escape.ipynb": b"{}"}, now, "test 1"),
            intake.Submission("../ann", {f"{AID}.ipynb": b"{}"}, now, "test 2"),
            intake.Submission("bob", {"/etc/passwd": b"x"}, now, "test 3"),
            intake.Submission("cy", {f"{AID}.ipynb": b"{}", "sub/data.csv": b"1,2\n"}, now, "test 4")]
    report = intake.admit(AID, subs, [], root=course)
    assert [s.path for s in report.set_aside] == ["test 1", "test 2", "test 3"], report.set_aside
    assert "not a plain relative path" in report.set_aside[0].reason
    assert "cannot be a student's folder name" in report.set_aside[1].reason
    assert sorted(p.name for p in (course / "grader" / "submitted").iterdir()) == ["cy"]
    assert (course / "grader" / "submitted" / "cy" / AID / "sub" / "data.csv").read_bytes() == b"1,2\n"
    assert not (tmp_path / "escape.ipynb").exists() and not list(tmp_path.rglob("escape.ipynb"))
