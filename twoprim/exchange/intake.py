"""Every submission an exchange hands over, on its way into grader/submitted/ (grader side).

Both exchanges (`filesystem`, nbgrader's shared folder; the classroom's service) hand `admit` what they received,
as `Submission`s: who the exchange knows sent it, its bytes, and the time the exchange saw it arrive. The student's
own clock (the timestamp.txt nbgrader submit writes) is kept for the report and never used:

    grader/submitted/<student>/<aid>/             the student's newest submission; timestamp.txt = its arrival
    grader/archive/<aid>/<student>/<arrival>/     each earlier version this replaced (nothing collected is lost)
    grader/reports/<aid>-collect.json             what this collect took in, set aside and flagged

A submission that cannot be trusted (`SetAside`: a link, a FIFO, someone else's file, a forged name) is never
written into grader/submitted/; a collected one that looks copied (`Flag`: the instructor's source notebook, every
answer the solution's, the same answers as another student) is collected and flagged for the instructor to decide.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from twoprim.core.notebooks import answers

__all__ = [
    "Submission",
    "SetAside",
    "Flag",
    "CollectReport",
    "admit",
    "check_name",
    "stamp",
    "MAX_BYTES",
    "misplaced",
    "release_notebooks",
]

STAMP = "%Y-%m-%d %H:%M:%S.%f UTC"  # nbgrader's timestamp.txt format
MAX_BYTES = 100 * 1024 * 1024  # one file of a submission, as the service exchange's default limit
EXCHANGE_FILES = {"timestamp.txt"}  # written by the grader from the arrival time, never taken from the student


@dataclass
class Submission:
    """One submission as an exchange received it."""

    student: str  # who the exchange knows sent it (the account that owns it; the hub's user)
    files: dict[str, bytes]  # relative path -> bytes: notebooks and every other file, not timestamp.txt
    arrived: datetime.datetime  # naive UTC, observed by the exchange when the bytes arrived
    source: str  # where it came from, for the report
    claimed: str | None = None  # the student's own timestamp.txt: shown, never trusted


@dataclass
class SetAside:
    """A submission collect refused: left where it is, never copied into grader/submitted/."""

    account: str  # the account that made it
    named: str  # the student it says it is from
    path: str
    reason: str
    within: bool = False  # one file (or folder) set aside from a student's submission, the rest taken as usual

    def __str__(self) -> str:
        return f"{self.account}: {self.reason} [{self.path}]"


@dataclass
class Flag:
    """A collected submission the instructor should look at: collected and graded as usual, never failed."""

    student: str
    reason: str

    def __str__(self) -> str:
        return f"{self.student}: {self.reason}"


@dataclass
class CollectReport:
    """What a collect took in, found unchanged, set aside, left as older and flagged, and what the exchange service
    refused, said in lines."""

    aid: str
    new: list[dict] = field(default_factory=list)  # {student, arrived, source, claimed, replaced}
    unchanged: list[str] = field(default_factory=list)  # students whose newest submission was already collected
    set_aside: list[SetAside] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    skipped: list[SetAside] = field(default_factory=list)  # a student's older submissions: their newest counts
    refused: list[dict] = field(default_factory=list)  # the service's refusals: {student, at, limit, message}

    def lines(self) -> list[str]:
        out = [
            f"{len(self.new)} new submission(s) of {self.aid} collected"
            + (
                f" ({', '.join(r['student'] + (' (newer)' if r['replaced'] else '') for r in self.new)})"
                if self.new
                else ""
            )
            + (f"; {len(self.unchanged)} unchanged" if self.unchanged else "")
        ]
        for r in self.new:
            if r["claimed"] is not None and _claim_differs(r["claimed"], r["arrived"]):
                out.append(
                    f"  {r['student']}: submission time is the arrival, {r['arrived']}; the student's own "
                    f"timestamp.txt said {r['claimed'][:40]!r} (not used)"
                )
        whole = [s for s in self.set_aside if not s.within]
        parts = [s for s in self.set_aside if s.within]
        if whole:
            out.append(f"{len(whole)} submission(s) set aside, not collected (left in the exchange):")
            out += [f"  {s}" for s in whole]
        if parts:
            out.append(
                f"{len(parts)} file(s) set aside from a student's submission, the rest of it taken as usual "
                f"(left in the exchange):"
            )
            out += [f"  {s}" for s in parts]
        if self.skipped:
            out.append(
                f"{len(self.skipped)} older submission(s) not collected (each student's newest counts; left "
                f"in the exchange):"
            )
            out += [f"  {s}" for s in self.skipped]
        out += refusal_lines(self.refused)
        if self.flags:
            out.append(f"{len(self.flags)} flagged for you to look at (collected and graded as usual):")
            out += [f"  {f}" for f in self.flags]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


LIMITS = {
    "submissions": "over the quota of submissions",
    "stored": "over the quota of stored bytes",
    "upload": "an upload over the size limit",
    "file": "a file over the size limit",
    "notebook": "a notebook not where the release put it",
}


def refusal_lines(refused: list[dict]) -> list[str]:
    """The exchange service's refusals, one line per student: how often, which limits, and the last message."""
    by: dict[str, list[dict]] = {}
    for r in refused:
        by.setdefault(r["student"], []).append(r)
    if not by:
        return []
    out = [
        f"{len(refused)} submission(s) refused by the exchange service, from {len(by)} student(s) (each was told "
        f"why; what they handed in before stands):"
    ]
    for student, theirs in sorted(by.items()):
        kinds: dict[str, int] = {}
        for r in theirs:
            label = LIMITS.get(r.get("limit") or "", "refused for another reason")
            kinds[label] = kinds.get(label, 0) + 1
        last = theirs[-1]
        out.append(
            f"  {student}: {len(theirs)} time(s) ({', '.join(f'{n} {k}' for k, n in kinds.items())}); the "
            f"last, {last['at'][:19].replace('T', ' ')} UTC: {last['message']}"
        )
    return out


def stamp(when: datetime.datetime) -> str:
    """`when` in the exchange's timestamp format (STAMP)."""
    return when.strftime(STAMP)


def _claim_differs(claimed: str, arrived: str) -> bool:
    return claimed.strip()[:19] != arrived[:19]


def check_name(rel: str) -> str | None:
    """Why `rel` cannot be a file of a submission, or None: a relative path of plain names, nothing hidden above."""
    if not rel or "\0" in rel or "\\" in rel:
        return f"the file name {rel!r} is not a plain relative path"
    parts = PurePosixPath(rel).parts
    if PurePosixPath(rel).is_absolute() or any(p in ("", ".", "..") for p in parts) or len(rel) > 255:
        return f"the file name {rel!r} is not a plain relative path"
    return None


def release_notebooks(root: Path, aid: str) -> set[str]:
    """The notebooks the release of `aid` put in the assignment's folder (exercises/<aid>/), as relative paths."""
    folder = Path(root) / "exercises" / aid
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*.ipynb")
        if not any(part.startswith(".") for part in p.relative_to(folder).parts)
    }


def misplaced(aid: str, expected, submitted) -> str | None:
    """Why a submission's notebooks are not where the release put them, naming the expected path, or None: a
    released notebook's name anywhere else (`sub/ex01_dot.ipynb`), or none of the released notebooks in place."""
    expected = sorted(set(expected))
    if not expected:
        return None
    notebooks = sorted(rel for rel in submitted if rel.endswith(".ipynb"))
    where = {PurePosixPath(rel).name: rel for rel in expected}
    for rel in notebooks:
        if rel not in expected and PurePosixPath(rel).name in where:
            right = where[PurePosixPath(rel).name]
            return (
                f"{rel} is not where the release put it: the notebook must be {right}, as fetched "
                f"({aid}/{right}), not in another folder; move it back and submit again"
            )
    if not set(expected) & set(notebooks):
        return (
            f"none of the released notebooks is where the release put it: expected {aid}/{expected[0]}"
            + (f" (and {len(expected) - 1} more)" if len(expected) > 1 else "")
            + f"; this submission has {', '.join(notebooks) or 'no notebook'}"
        )
    return None


def admit(
    aid: str, submissions: list[Submission], set_aside: list[SetAside], *, root: Path, refused: Sequence[dict] = ()
) -> CollectReport:
    """Write each student's newest submission of `aid` into grader/submitted/ (timestamp.txt = its arrival),
    keeping any version it replaces under grader/archive/; flag copies; write the collect report, which names every
    submission set aside or left as older, and `refused`, the exchange service's refusals."""
    report = CollectReport(aid, set_aside=list(set_aside), refused=list(refused))
    expected = release_notebooks(root, aid)
    valid: dict[str, list[Submission]] = {}
    for sub in submissions:
        bad = _why_set_aside(aid, expected, sub)
        if bad is not None:
            report.set_aside.append(SetAside(sub.student, sub.student, sub.source, bad))
            continue
        valid.setdefault(sub.student, []).append(sub)
    newest: dict[str, Submission] = {}
    for student, theirs in valid.items():
        theirs.sort(key=lambda s: s.arrived)
        newest[student] = last = theirs[-1]
        for older in theirs[:-1]:
            said = (
                f"; its own timestamp.txt says {older.claimed.strip()[:40]!r} (not used)"
                if older.claimed is not None and _claim_differs(older.claimed, stamp(older.arrived))
                else ""
            )
            report.skipped.append(
                SetAside(
                    student,
                    student,
                    older.source,
                    f"arrived {stamp(older.arrived)}, before "
                    f"{student}'s newest ({last.source}, arrived {stamp(last.arrived)}){said}",
                )
            )
    grader = root / "grader"
    submitted = grader / "submitted"
    submitted.mkdir(parents=True, exist_ok=True)
    for student, sub in sorted(newest.items()):
        target = submitted / student / aid
        files = {rel: data for rel, data in sub.files.items() if rel not in EXCHANGE_FILES}
        arrived = stamp(sub.arrived)
        held = _held(target)
        if held is not None and held[0] >= sub.arrived:  # this one, or a newer one, is collected already
            report.unchanged.append(student)
            continue
        staging = Path(tempfile.mkdtemp(prefix=f".collect-{aid}-", dir=grader))
        try:
            for rel, data in files.items():
                path = staging / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            (staging / "timestamp.txt").write_text(arrived)
            target.parent.mkdir(parents=True, exist_ok=True)
            replaced = None
            if target.exists() or target.is_symlink():
                replaced = _archive(target, grader / "archive" / aid / student, held)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        for path in [target, *target.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        report.new.append(
            {
                "student": student,
                "arrived": arrived,
                "source": sub.source,
                "claimed": sub.claimed,
                "replaced": str(replaced.relative_to(root)) if replaced else None,
            }
        )
    report.flags = flags(aid, root=root)
    _write_collect_report(grader / "reports", report)
    return report


def _why_set_aside(aid: str, expected: set[str], sub: Submission) -> str | None:
    """Why a submission cannot be collected (a file's name or size, the student's name, a misplaced notebook), or
    None when it can."""
    bad = next((why for why in map(check_name, sub.files) if why), None)
    if bad is None:
        bad = next(
            (
                f"{rel} is {len(data):,} bytes, over the limit of {MAX_BYTES:,}"
                for rel, data in sub.files.items()
                if len(data) > MAX_BYTES
            ),
            None,
        )
    if bad is None and (
        check_name(sub.student) is not None or "/" in sub.student or sub.student.startswith(".") or "+" in sub.student
    ):
        bad = f"{sub.student!r} cannot be a student's folder name"
    if bad is None:
        bad = misplaced(aid, expected, sub.files)
    return bad


def _write_collect_report(reports: Path, report: CollectReport) -> None:
    """grader/reports/<aid>-collect.json: what the collect did, each submission set aside or skipped with why."""
    aid = report.aid
    reports.mkdir(parents=True, exist_ok=True)
    (reports / f"{aid}-collect.json").write_text(
        json.dumps(
            {
                "assignment": aid,
                "collected_at": stamp(datetime.datetime.now(datetime.UTC).replace(tzinfo=None)),
                "new": report.new,
                "unchanged": report.unchanged,
                "set_aside": [asdict(s) for s in report.set_aside],
                "skipped": [asdict(s) for s in report.skipped],
                "refused": report.refused,
                "flags": [asdict(f) for f in report.flags],
            },
            indent=1,
        )
        + "\n"
    )


def _held(target: Path) -> tuple[datetime.datetime, dict[str, bytes]] | None:
    """The collected submission at `target`: its arrival (from the timestamp.txt collect wrote) and its files."""
    if not target.is_dir() or target.is_symlink():
        return None
    try:
        when = datetime.datetime.strptime((target / "timestamp.txt").read_text().strip(), STAMP)
    except (OSError, ValueError):
        when = datetime.datetime.min  # placed by hand without a time: any collected submission is newer
    files = {
        str(p.relative_to(target)): p.read_bytes()
        for p in sorted(target.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name not in EXCHANGE_FILES
    }
    return when, files


def _archive(target: Path, folder: Path, held) -> Path:
    """Move the collected version at `target` aside under `folder`, named by its arrival; returns where."""
    label = held[0].strftime("%Y%m%dT%H%M%S.%fZ") if held and held[0] != datetime.datetime.min else "no-time"
    dest = folder / label
    n = 1
    while dest.exists():
        n += 1
        dest = folder / f"{label}-{n}"
    folder.mkdir(parents=True, exist_ok=True)
    os.replace(target, dest)
    return dest


# --- copies, for the instructor to look at --------------------------------------------------------------------


def _solution_answers(nb) -> dict[str, str]:
    markers = ("### BEGIN SOLUTION", "### END SOLUTION")
    out = {}
    for gid, text in answers(nb).items():
        out[gid] = "\n".join(line for line in text.splitlines() if line.strip() not in markers).strip()
    return out


def flags(aid: str, *, root: Path) -> list[Flag]:
    """Each collected submission of `aid` that holds the instructor's source notebook, answers every question with
    the solution's code character for character, or gives the same answers as another student's."""
    import nbformat

    source_dir = root / "solutions" / aid
    release_dir = root / "exercises" / aid
    out: list[Flag] = []
    by_answers: dict[str, list[str]] = {}
    base = root / "grader" / "submitted"
    students = sorted(p.name for p in base.iterdir() if (p / aid).is_dir()) if base.is_dir() else []
    for nb_path in sorted(source_dir.glob("*.ipynb")):
        source_bytes = nb_path.read_bytes()
        try:
            solution = _solution_answers(nbformat.reads(source_bytes.decode(), as_version=4))
            stubs = answers(nbformat.read(str(release_dir / nb_path.name), as_version=4))
        except (OSError, ValueError, KeyError):
            solution, stubs = {}, {}
        for student in students:
            path = base / student / aid / nb_path.name
            if not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
            if data == source_bytes:
                out.append(Flag(student, f"{nb_path.name} is the instructor's source notebook, byte for byte"))
                continue
            text = data.decode("utf-8", errors="replace")
            if "### BEGIN HIDDEN TESTS" in text or "### BEGIN SOLUTION" in text:
                out.append(
                    Flag(
                        student,
                        f"{nb_path.name} holds the instructor's solution or hidden-test markers, "
                        f"which no released notebook has",
                    )
                )
                continue
            try:
                given = answers(nbformat.reads(text, as_version=4))
            except Exception:  # noqa: BLE001 - unreadable: grading says why
                continue
            answered = {gid: a for gid, a in given.items() if a and a != stubs.get(gid, "").strip()}
            if not answered:
                continue
            if (
                solution
                and len(answered) == len(solution)
                and all(answered.get(gid) == code for gid, code in solution.items() if code)
            ):
                out.append(
                    Flag(student, f"every answer in {nb_path.name} is the solution's code, character for character")
                )
            key = hashlib.sha256(json.dumps(sorted(answered.items())).encode()).hexdigest() + nb_path.name
            by_answers.setdefault(key, []).append(student)
    for group in by_answers.values():
        for student in group if len(group) > 1 else ():
            others = ", ".join(s for s in group if s != student)
            out.append(Flag(student, f"the same answers, character for character, as {others}'s submission"))
    return sorted(out, key=lambda f: (f.student, f.reason))
