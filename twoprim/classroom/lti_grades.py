"""Grades back to the LMS over LTI Assignment and Grade Services (AGS): `./course lti-grades ASSIGNMENT --lti CONFIG`,
and `./course autograde ASSIGNMENT --lti CONFIG` as its last step.

The tool side is pylti1p3's: a `ToolConfDict` built from CONFIG (the platform's issuer, client id, token URL and the
tool's private key), its `ServiceConnector` for the client-credentials grant (a JWT assertion signed with the tool's
key, exchanged at the platform's token URL for a bearer token), and its `AssignmentsGradesService` to find the line
item of the assignment (tag = the assignment's name) or create it, and to post each student's score.

What goes: for each student with a grade in the gradebook, the score after the late penalty the gradebook holds
(nbgrader's `late_submission_penalty`, as the course's reports show it) as scoreGiven, the assignment's points as
scoreMaximum, the time, activityProgress Completed and gradingProgress FullyGraded (PendingManual, without a score,
for a submission held for the instructor). To whom: the LMS user each account launched as (grader/lti-users.json).
Where: the line items URL the LMS sent with the launches (its AGS claim).

Every send is recorded in grader/lti-grades.sqlite with the platform's answer; a rerun sends only what changed since
the last score the platform accepted. A failed send is tried again (up to `TRIES` times, waiting longer each time,
for an unreachable platform, a 5xx or a 429); each student whose score could not be sent is named, and the command
exits 1.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from twoprim.classroom import lti_config as lc
from twoprim.config import COURSE_ID
from twoprim.core.errors import CourseError

RECORD = "lti-grades.sqlite"  # in grader/
TRIES = 3
BACKOFF_S = 0.5  # then 1 s, 2 s ...
HTTP_TIMEOUT = (10, 60)  # connect, read: every request to the platform ends
SCOPES = (
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "https://purl.imsglobal.org/spec/lti-ags/scope/score",
)
SCHEMA = """CREATE TABLE IF NOT EXISTS sent (
    id INTEGER PRIMARY KEY AUTOINCREMENT, course TEXT NOT NULL, assignment TEXT NOT NULL, student TEXT NOT NULL,
    user_id TEXT NOT NULL, lineitem TEXT, score REAL, maximum REAL, progress TEXT NOT NULL, timestamp TEXT NOT NULL,
    ok INTEGER NOT NULL, status INTEGER, answer TEXT, tries INTEGER NOT NULL)"""


@dataclass(frozen=True)
class Score:
    """What one student's grade becomes in the LMS."""

    student: str
    user_id: str | None  # their LMS user (`sub`), None when they never launched from the LMS
    score: float | None  # after the late penalty; None while held for the instructor
    maximum: float
    progress: str  # AGS gradingProgress: FullyGraded or PendingManual


def scores(aid: str, root: Path, db: str | None = None) -> list[Score]:
    """Each graded student's score of `aid` as the gradebook holds it after the late penalty, with their LMS user."""
    from twoprim.grading.gradebook import database_url, gradebook, statuses

    url = database_url(root, db)
    status = statuses(aid, url)
    users = {name: entry.get("sub") for name, entry in lc.accounts(root).items() if entry.get("role") == "student"}
    out = []
    with gradebook(url) as gb:
        for sub in gb.assignment_submissions(aid):
            state = (status.get(sub.student.id) or {}).get("status", "graded")
            if state == "not graded":
                continue  # the grader failed it: nothing to send until it is graded
            held = state == "flagged" or sub.needs_manual_grade
            penalty = sub.late_submission_penalty or 0.0
            out.append(
                Score(
                    sub.student.id,
                    users.get(sub.student.id),
                    None if held else round(max(0.0, sub.score - penalty), 6),
                    float(sub.max_score),
                    "PendingManual" if held else "FullyGraded",
                )
            )
    return sorted(out, key=lambda s: s.student)


def _session():
    """A requests session whose every request has a deadline (pylti1p3 gives none of its own)."""
    import requests

    class Bounded(requests.Session):
        def request(self, *args: Any, **kw: Any):
            kw.setdefault("timeout", HTTP_TIMEOUT)
            return super().request(*args, **kw)

    session = Bounded()
    session.headers["User-Agent"] = "two-primitives (pylti1p3)"
    return session


def service(config: lc.LTIConfig, lineitems: str, scope: list[str] | None = None):
    """pylti1p3's AssignmentsGradesService for the platform of `config`, at the line items URL `lineitems`."""
    from pylti1p3.assignments_grades import AssignmentsGradesService, TAssignmentsGradersData
    from pylti1p3.service_connector import ServiceConnector
    from pylti1p3.tool_config.dict import TIssConf, ToolConfDict

    settings: TIssConf = {
        "default": True,
        "client_id": config.client_id,
        "auth_login_url": config.auth_login_url,
        "auth_token_url": config.auth_token_url,
        "key_set_url": config.jwks_url,
        "deployment_ids": list(config.deployment_ids),
    }
    if config.auth_audience:
        settings["auth_audience"] = config.auth_audience
    tool = ToolConfDict({config.issuer: [settings]})
    pem = config.private_key_pem()
    from jwcrypto.jwk import JWK

    tool.set_private_key(config.issuer, pem, client_id=config.client_id)
    tool.set_public_key(config.issuer, JWK.from_pem(pem.encode()).export_to_pem().decode(), client_id=config.client_id)
    registration = tool.find_registration_by_params(config.issuer, config.client_id)
    connector = ServiceConnector(registration, requests_session=_session())
    # the scopes are AGS's own (SCOPES, or the caller's choice among them), typed there as literals
    data = cast(TAssignmentsGradersData, {"scope": list(scope or SCOPES), "lineitems": lineitems})
    return AssignmentsGradesService(connector, data)


def _retrying(call, tries: int = TRIES, backoff: float = BACKOFF_S):
    """call(), tried again after an unreachable platform, a 5xx or a 429; (result, None, tries) or (None, error,
    tries) with the platform's answer in words."""
    import requests
    from pylti1p3.exception import LtiServiceException

    why: tuple[int | None, str] = (None, f"not tried (tries={tries})")
    for attempt in range(1, tries + 1):
        try:
            return call(), None, attempt
        except LtiServiceException as err:
            status = err.response.status_code
            why = (status, f"{status} {err.response.text[:300]}")
            if status < 500 and status != 429:
                return None, why, attempt
        except requests.RequestException as err:
            why = (None, f"{type(err).__name__}: {err}")
        if attempt < tries:
            time.sleep(backoff * 2 ** (attempt - 1))
    return None, why, tries


def _db(root: Path) -> sqlite3.Connection:
    db = sqlite3.connect(Path(root) / "grader" / RECORD, timeout=30, isolation_level=None)
    db.execute(SCHEMA)
    return db


def last_accepted(db, course: str, aid: str, student: str) -> tuple | None:
    """What the platform last accepted for the student (user, line item, score, maximum, progress), or None."""
    return db.execute(
        "SELECT user_id, lineitem, score, maximum, progress FROM sent WHERE course=? AND assignment=? "
        "AND student=? AND ok=1 ORDER BY id DESC LIMIT 1",
        (course, aid, student),
    ).fetchone()


def _lineitem(ags, aid: str, maximum: float):
    from pylti1p3.lineitem import LineItem

    item = LineItem().set_tag(aid).set_label(aid).set_resource_id(aid).set_score_maximum(maximum)
    return ags.find_or_create_lineitem(item, find_by="tag")


def send(
    aid: str,
    config: lc.LTIConfig,
    *,
    root: Path,
    course: str = COURSE_ID,
    db: str | None = None,
    out=print,
    tries: int = TRIES,
    backoff: float = BACKOFF_S,
) -> int:
    """Send every changed score of `aid` to the LMS; 0 when all were accepted (or nothing changed), 1 otherwise."""
    record = lc.read_record(root)
    lineitems = record["ags"].get("lineitems")
    if not lineitems:
        raise CourseError(
            f"no LTI launch into this course has carried the LMS's grade service (AGS) yet, so there is "
            f"no line item URL to send {aid}'s grades to: launch the assignment once from the LMS (as "
            f"its instructor), then run this again"
        )
    todo = scores(aid, root, db)
    if not todo:
        out(f"{aid}: no graded submission in the gradebook: nothing to send")
        return 0
    ags = service(config, lineitems)
    maximum = max(s.maximum for s in todo)
    item, error, _ = _retrying(lambda: _lineitem(ags, aid, maximum), tries, backoff)
    if error:
        raise CourseError(
            f"the LMS refused {aid}'s line item at {lineitems} ({error[1]}): nothing was sent; check "
            f"the tool's AGS scopes in the LMS (line items and scores)"
        )
    assert item is not None  # (no error: the platform's line item)
    failed, sent, same, unknown = [], [], [], []
    with _db(root) as store:
        for s in todo:
            if s.user_id is None:
                unknown.append(s.student)
                continue
            values = (s.user_id, item.get_id(), s.score, s.maximum, s.progress)
            if last_accepted(store, course, aid, s.student) == values:
                same.append(s.student)
                continue
            ok, answer, count = _send_one(ags, item, s, tries, backoff)
            stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
            store.execute(
                "INSERT INTO sent (course, assignment, student, user_id, lineitem, score, maximum, progress, "
                "timestamp, ok, status, answer, tries) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (course, aid, s.student, *values, stamp, int(ok), answer[0], answer[1], count),
            )
            (sent if ok else failed).append((s.student, answer[1]))
    out(
        f"{aid} -> {item.get_label() or aid} ({item.get_id()}): {len(sent)} score(s) sent, {len(same)} unchanged "
        f"since the last send, {len(failed)} failed"
    )
    for student in unknown:
        out(
            f"  not sent: {student} never launched from the LMS, so the LMS user is unknown (their score stays in "
            f"the gradebook)"
        )
    for student, why in failed:
        out(f"  FAILED: {student}: {why} (after {tries} tries; run the command again to retry)")
    return 1 if failed else 0


def _send_one(ags, item, s: Score, tries: int, backoff: float) -> tuple[bool, tuple, int]:
    from pylti1p3.grade import Grade

    assert s.user_id is not None  # (a student who never launched from the LMS is not sent)
    grade = (
        Grade()
        .set_score_maximum(s.maximum)
        .set_user_id(s.user_id)
        .set_activity_progress("Completed")
        .set_grading_progress(s.progress)
        .set_timestamp(datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"))
    )
    if s.score is not None:
        grade.set_score_given(s.score)
    answer, error, count = _retrying(lambda: ags.put_grade(grade, item), tries, backoff)
    if error:
        return False, error, count
    assert answer is not None  # (no error: the platform's answer)
    body = answer.get("body")
    return True, (200, json.dumps(body) if body is not None else "accepted"), count
