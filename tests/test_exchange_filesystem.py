"""nbgrader's shared-folder exchange, attacked by students with their own Unix accounts (root only: CI runs as
root).

ann submits honestly; ben and cat, with the shell tools any student has, try to submit as ann, to hand in the
instructor's solution through a link, to hand in ann's file as their own, and to make collect hang on a FIFO; dan
and eve backdate or garble the timestamp.txt their own clock wrote. `./course collect` takes only what each
student's own account made, names every other submission with the account that made it and why, and times every
submission by its arrival; autograde then gives ann her own grade and dan and eve the late penalty of their real
arrival. Then, in an exchange of their own, submissions made with the course's configuration: sealed as they are
made (ben can change nothing of ann's), a classmate's file in a folder nbgrader's own submit left open set aside
alone, a backdated older folder named, a notebook in a subfolder refused with its expected path, lateness to the
second.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import pwd
import re
import secrets
import stat
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from twoprim import course as course_cli
from twoprim import grading
from twoprim.exchange import intake

from .accounts import delete_account, python_as, shared_tmp
from .classroom import answered, course_copy, solution_code

AID = "ex01_dot"
ANN_DOT = (
    'def dot(x, w):\n    """ann\'s own: x·w = Σᵢ xᵢ wᵢ."""\n    guards.same_length("dot", x=x, w=w)\n'
    "    return (x * w).sum()  # (n,) * (n,) -> ()\n"
)
LATE_POLICY = '\nc.LateSubmissionPlugin.penalty_method = "zero"  # late scores nothing\n'

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="students are Unix accounts, which only root can make (CI runs as root)"
)


def _as(user: str, script: str) -> None:
    """Run `script` in sh as the account `user`, with nothing but the shell tools every student has."""
    pw = pwd.getpwnam(user)
    proc = subprocess.run(
        ["sh", "-ec", script],
        user=pw.pw_uid,
        group=pw.pw_gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": "/"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, f"{user}: {proc.stderr}"


def _submit(
    inbound: Path,
    user: str,
    named: str,
    notebook: Path,
    *,
    stamp: str = "2026-12-02 09:00:00.000000 UTC",
    then: str = "",
) -> Path:
    """What `nbgrader submit` does, as `user`, with the name `named`: a folder in inbound/ and the files in it;
    then `then`, a shell line in which $NB is the notebook handed in."""
    folder = inbound / f"{named}+{AID}+{stamp}+{secrets.token_urlsafe(9)}"
    _as(
        user,
        f"NB='{folder}/{AID}.ipynb'\nmkdir '{folder}'\ncp '{notebook}' \"$NB\"\n"
        f"printf '%s' '{stamp}' > '{folder}/timestamp.txt'\n{then}",
    )
    return folder


@pytest.fixture(scope="module")
def exchange_class(tmp_path_factory):
    tag = secrets.token_hex(2)
    names = {k: f"tp{tag}{k}" for k in ("ann", "ben", "cat", "dan", "eve")}
    made = []
    base = shared_tmp("twoprim-exchange-test-")
    try:
        for name in names.values():
            subprocess.run(
                ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, timeout=60
            )
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
        notebooks = {
            "ann": answered(AID, {f"{AID}-dot-solution": ANN_DOT}),
            "right": answered(AID),
            "wrong": answered(
                AID,
                {f"{AID}-dot-solution": solution_code(AID)[f"{AID}-dot-solution"].replace("return", "return 0 *", 1)},
            ),
        }
        for key, nb in notebooks.items():
            nbformat.write(nb, str(work / f"{key}.ipynb"))
            (work / f"{key}.ipynb").chmod(0o644)
        solution = course / "solutions" / AID / f"{AID}.ipynb"
        ann, ben, cat, dan, eve = names.values()
        ann_folder = _submit(inbound, ann, ann, work / "ann.ipynb")
        attacks = {
            "forged": _submit(inbound, ben, ann, work / "wrong.ipynb", stamp="2026-12-02 09:30:00.000000 UTC"),
            "solution_link": _submit(inbound, ben, ben, work / "wrong.ipynb", then=f"ln -sf '{solution}' \"$NB\""),
            "folder_link": None,
            "other_students_file": _submit(
                inbound, cat, cat, work / "wrong.ipynb", then=f"ln -sf '{ann_folder}/{AID}.ipynb' \"$NB\""
            ),
            "fifo": _submit(
                inbound,
                cat,
                cat,
                work / "wrong.ipynb",
                stamp="2026-12-02 09:10:00.000000 UTC",
                then='rm "$NB" && mkfifo "$NB"',
            ),
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
        due = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(seconds=1)
        course_cli.release(AID, root=course, due=due.isoformat())
        time.sleep(max(0.0, (due - datetime.datetime.now(datetime.UTC)).total_seconds()) + 0.1)
        backdated = _submit(inbound, dan, dan, work / "right.ipynb", stamp="2026-01-01 00:00:00.000000 UTC")
        garbage = _submit(inbound, eve, eve, work / "right.ipynb", stamp="the day before the deadline, honest")
        before = {p: (p.lstat().st_mode, p.lstat().st_mtime_ns) for p in inbound.rglob("*")}
        mp.undo()
        yield {
            "course": course,
            "exchange": exchange,
            "inbound": inbound,
            "names": names,
            "ann": ann_folder,
            "attacks": attacks,
            "before": before,
            "backdated": backdated,
            "garbage": garbage,
            "work": work,
            "solution": solution,
            "due": due,
        }
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
        "hard_link": (
            cat,
            cat,
            f"{AID}.ipynb belongs to account {ann}, not to {cat} (a hard link to someone else's file)",
        ),
    }
    assert len(aside) == len(expected), report["set_aside"]
    for kind, (account, named, reason) in expected.items():
        got = aside[attacks[kind].name]
        assert (got["account"], got["named"]) == (account, named), (kind, got)
        assert reason in got["reason"], (kind, got)
        line = [ln for ln in text.splitlines() if attacks[kind].name in ln]  # the terminal names each one
        assert len(line) == 1 and reason in line[0] and account in line[0], (kind, text)
    assert "6 submission(s) set aside, not collected" in text
    # nothing in the exchange was touched
    assert {p: (p.lstat().st_mode, p.lstat().st_mtime_ns) for p in c["inbound"].rglob("*")} == c["before"]

    # the submission time is the arrival the collector saw, never the student's clock
    arrived = {
        s: datetime.datetime.strptime((submitted / s / AID / "timestamp.txt").read_text(), intake.STAMP)
        for s in (ann, dan, eve)
    }
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
        "status": "graded",
        "score": "15",
        "seconds_late": "0",
        "late_penalty": "0",
    }, rows[ann]
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
    subs = [
        intake.Submission("ann", {"../../escape.ipynb": b"{}"}, now, "test 1"),
        intake.Submission("../ann", {f"{AID}.ipynb": b"{}"}, now, "test 2"),
        intake.Submission("bob", {"/etc/passwd": b"x"}, now, "test 3"),
        intake.Submission("cy", {f"{AID}.ipynb": b"{}", "sub/data.csv": b"1,2\n"}, now, "test 4"),
    ]
    report = intake.admit(AID, subs, [], root=course)
    assert [s.path for s in report.set_aside] == ["test 1", "test 2", "test 3"], report.set_aside
    assert "not a plain relative path" in report.set_aside[0].reason
    assert "cannot be a student's folder name" in report.set_aside[1].reason
    assert sorted(p.name for p in (course / "grader" / "submitted").iterdir()) == ["cy"]
    assert (course / "grader" / "submitted" / "cy" / AID / "sub" / "data.csv").read_bytes() == b"1,2\n"
    assert not (tmp_path / "escape.ipynb").exists() and not list(tmp_path.rglob("escape.ipynb"))


# --- submissions sealed at submit; what collect names ---------------------------------------------------------

SUBMIT = """
import os, sys
from traitlets.config import Config
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange import ExchangeFactory
from nbgrader.exchange.abc.exchange import ExchangeError

c = Config()
c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.assignment_id = {aid!r}
c.Exchange.root = {exchange!r}
c.Exchange.assignment_dir = {work!r}
c.Exchange.cache = {cache!r}
if {course_config!r}:  # what the course's nbgrader configuration selects: the sealed submit
    from twoprim.exchange.client import configure_from_classroom

    configure_from_classroom(c, {grader!r})
submit = ExchangeFactory(config=c).Submit(coursedir=CourseDirectory(config=c), authenticator=Authenticator(config=c),
                                          config=c)
try:
    submit.start()
except ExchangeError as err:
    print("refused:", err)
    sys.exit(3)
print("submitted:", os.path.join(submit.inbound_path, submit.assignment_filename))
"""


def _nbgrader_submit(c: dict, user: str, notebooks: dict[str, Path], *, course_config: bool = True) -> Path:
    """`nbgrader submit` as `user`, from a folder of theirs holding `notebooks` (path in the assignment -> file),
    with the course's configuration (the sealed submit) or nbgrader's own; the folder it made in inbound/."""
    status, out = _submit_as(c, user, notebooks, course_config=course_config)
    assert status == 0 and "submitted: " in out, out
    return Path(out.split("submitted: ")[-1].strip())


def _submit_as(c: dict, user: str, notebooks: dict[str, Path], *, course_config: bool = True) -> tuple[int, str]:
    """`nbgrader submit` as `user` (see `_nbgrader_submit`): its exit status (3: refused) and output."""
    pw = pwd.getpwnam(user)
    home = c["base"] / f"home-{user}"
    subprocess.run(["rm", "-rf", str(home)], check=True, timeout=60)
    for rel, source in notebooks.items():
        (home / "exercises" / AID / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / "exercises" / AID / rel).write_bytes(source.read_bytes())
    subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", str(home)], check=True, timeout=60)
    home.chmod(0o700)
    code = SUBMIT.format(
        course_id=grading.COURSE_ID,
        aid=AID,
        exchange=str(c["exchange"]),
        work=str(home / "exercises"),
        cache=str(home / "cache"),
        course_config=course_config,
        grader=str(c["course"] / "grader"),
    )
    return python_as(user, code, cwd=str(home))


def _try_as(user: str, script: str) -> subprocess.CompletedProcess:
    """`script` in sh as `user`, its result whatever it is (what the file system let them do)."""
    pw = pwd.getpwnam(user)
    return subprocess.run(
        ["sh", "-c", script],
        user=pw.pw_uid,
        group=pw.pw_gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": "/"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def _collect(c: dict) -> str:
    mp = pytest.MonkeyPatch()
    mp.setenv("TWOPRIM_EXCHANGE", str(c["exchange"]))
    try:
        return course_cli.collect(AID, root=c["course"])
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def sealed_class(tmp_path_factory):
    """A fresh exchange (released by ./course release: inbound/ sticky and set-group-ID) and four students."""
    tag = secrets.token_hex(2)
    names = {k: f"tp{tag}{k}" for k in ("ann", "ben", "cat", "dan")}
    made = []
    base = shared_tmp("twoprim-sealed-test-")
    try:
        for name in names.values():
            subprocess.run(
                ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, timeout=60
            )
            made.append(name)
        course = course_copy(tmp_path_factory.mktemp("sealed") / "course", AID)
        exchange = base / "exchange"
        exchange.mkdir(mode=0o755)
        mp = pytest.MonkeyPatch()
        mp.setenv("TWOPRIM_EXCHANGE", str(exchange))
        try:
            course_cli.release(AID, root=course)
        finally:
            mp.undo()
        inbound = exchange / grading.COURSE_ID / "inbound"
        assert inbound.stat().st_mode & 0o7777 == 0o3733, oct(inbound.stat().st_mode)  # sticky, set-group-ID
        work = base / "work"
        work.mkdir(mode=0o755)
        for key, nb in {"ann": answered(AID, {f"{AID}-dot-solution": ANN_DOT}), "right": answered(AID)}.items():
            nbformat.write(nb, str(work / f"{key}.ipynb"))
            (work / f"{key}.ipynb").chmod(0o644)
        yield {"course": course, "exchange": exchange, "inbound": inbound, "names": names, "base": base, "work": work}
    finally:
        for name in made:
            delete_account(name)
        subprocess.run(["rm", "-rf", str(base)], check=False, timeout=300)


def test_a_classmate_cannot_change_a_submission_and_an_intruders_file_is_set_aside_alone(sealed_class):
    """ann submits with the course's configuration: her folder is 0750 in the instructor's group, her files 0640,
    and ben, who knows its name, can neither list, read, add, rename, remove nor chmod anything in it (the file
    system refuses). A submission made by nbgrader's own submit is 0777: ben adds a file and a folder to it; collect
    takes ann's notebook from it and sets aside only ben's two entries, named with his account; ann's earlier,
    sealed submission is named as older."""
    c = sealed_class
    ann, ben = c["names"]["ann"], c["names"]["ben"]
    inbound = c["inbound"]
    sealed = _nbgrader_submit(c, ann, {f"{AID}.ipynb": c["work"] / "ann.ipynb"})
    notebook = sealed / f"{AID}.ipynb"
    st = sealed.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (
        0o750,
        pwd.getpwnam(ann).pw_uid,
        inbound.stat().st_gid,
    ), oct(st.st_mode)
    assert (
        stat.S_IMODE(notebook.stat().st_mode) == 0o640
        and notebook.read_bytes() == (c["work"] / "ann.ipynb").read_bytes()
    )
    assert not [p for p in inbound.iterdir() if p.name.startswith(".submitting-")]  # nothing left half-made
    before = {p.name: p.read_bytes() for p in sealed.iterdir()}
    for attempt in (
        f"ls '{sealed}'",
        f"cat '{notebook}'",
        f"echo mine > '{sealed}/extra.txt'",
        f"mv '{notebook}' '{sealed}/renamed.ipynb'",
        f"rm -f '{notebook}'",
        f"chmod 777 '{sealed}'",
        f"mv '{sealed}' '{inbound}/{ben}+{AID}+taken'",
    ):
        tried = _try_as(ben, attempt)
        assert tried.returncode != 0 and ("Permission denied" in tried.stderr or "not permitted" in tried.stderr), (
            attempt,
            tried.returncode,
            tried.stderr,
        )
    assert {p.name: p.read_bytes() for p in sealed.iterdir()} == before

    time.sleep(0.05)  # a later arrival, to the kernel's clock
    plain = _nbgrader_submit(c, ann, {f"{AID}.ipynb": c["work"] / "ann.ipynb"}, course_config=False)
    assert stat.S_IMODE(plain.stat().st_mode) == 0o777  # what nbgrader's own submit leaves
    done = _try_as(ben, f"echo mine > '{plain}/extra.txt' && mkdir '{plain}/more' && echo x > '{plain}/more/x.txt'")
    assert done.returncode == 0, done.stderr
    text = _collect(c)
    held = c["course"] / "grader" / "submitted" / ann / AID
    assert (held / f"{AID}.ipynb").read_bytes() == (c["work"] / "ann.ipynb").read_bytes(), text
    assert not (held / "extra.txt").exists() and not (held / "more").exists()
    report = json.loads((c["course"] / "grader" / "reports" / f"{AID}-collect.json").read_text())
    within = {Path(s["path"]).name: s for s in report["set_aside"] if s["within"]}
    assert sorted(within) == ["extra.txt", "more"], report["set_aside"]
    for name, s in within.items():
        assert (
            (s["account"], s["named"]) == (ben, ann)
            and f"belongs to account {ben}: set aside, {ann}'s own files collected without it" in s["reason"]
            and "mode 0777" in s["reason"]
        ), s
        line = [ln for ln in text.splitlines() if s["path"] in ln]
        assert len(line) == 1 and line[0].startswith(f"  {ben}: "), (name, text)
    assert "2 file(s) set aside from a student's submission, the rest of it taken as usual" in text, text
    older = [ln for ln in text.splitlines() if sealed.name in ln]
    assert (
        len(older) == 1
        and older[0].startswith(f"  {ann}: arrived ")
        and f"before {ann}'s newest (inbound/{plain.name}" in older[0]
    ), text


def test_collect_names_the_backdated_folder_refuses_a_nested_notebook_and_says_lateness_to_the_second(sealed_class):
    """ben's backdated folder (an old time in its name, its timestamp.txt and its files' times), then his real
    submission: the backdated one is named, with his account, as older. cat's only notebook in sub/: the course's
    submit refuses it naming the expected path, and a folder made by hand with it is set aside naming that path.
    dan's submission 9 s after the due date is reported 9 s late."""
    from twoprim.grading.gradebook import database_url, gradebook

    c = sealed_class
    ben, cat, dan = c["names"]["ben"], c["names"]["cat"], c["names"]["dan"]
    old = "2026-01-01 00:00:00.000000 UTC"
    backdated = _submit(
        c["inbound"],
        ben,
        ben,
        c["work"] / "right.ipynb",
        stamp=old,
        then='touch -d \'2026-01-01 00:00\' "$NB" "$(dirname "$NB")"',
    )
    time.sleep(0.05)
    real = _nbgrader_submit(c, ben, {f"{AID}.ipynb": c["work"] / "right.ipynb"})

    status, out = _submit_as(c, cat, {f"sub/{AID}.ipynb": c["work"] / "right.ipynb"})
    assert (
        status == 3
        and f"sub/{AID}.ipynb is not where the release put it: the notebook must be {AID}.ipynb, "
        f"as fetched ({AID}/{AID}.ipynb)"
        in out
    ), out
    nested = _submit(
        c["inbound"],
        cat,
        cat,
        c["work"] / "right.ipynb",
        then=f'mkdir "$(dirname "$NB")/sub" && mv "$NB" "$(dirname "$NB")/sub/{AID}.ipynb"',
    )
    _nbgrader_submit(c, dan, {f"{AID}.ipynb": c["work"] / "right.ipynb"})

    text = _collect(c)
    lines = text.splitlines()
    named = [ln for ln in lines if backdated.name in ln]
    assert (
        len(named) == 1
        and named[0].startswith(f"  {ben}: arrived ")
        and f"before {ben}'s newest (inbound/{real.name}" in named[0]
        and f"its own timestamp.txt says {old!r} (not used)" in named[0]
    ), text
    assert (c["course"] / "grader" / "submitted" / ben / AID / "timestamp.txt").read_text() > "2026-01-02"
    aside = [ln for ln in lines if nested.name in ln]
    assert len(aside) == 1 and aside[0].startswith(
        f"  {cat}: sub/{AID}.ipynb is not where the release put it: the notebook must be {AID}.ipynb"
    ), text
    assert not (c["course"] / "grader" / "submitted" / cat).exists()

    arrived = datetime.datetime.strptime(
        (c["course"] / "grader" / "submitted" / dan / AID / "timestamp.txt").read_text(), intake.STAMP
    )
    with gradebook(database_url(c["course"])) as gb:  # what ./course release --due writes
        gb.update_or_create_assignment(AID, duedate=arrived - datetime.timedelta(seconds=9.4))
    text = _collect(c)
    assert re.search(rf"late \([^)]*\b{dan} 9 s\b", text), text
