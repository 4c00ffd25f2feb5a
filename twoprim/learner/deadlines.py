"""Due dates students can read: nbgrader keeps an assignment's due date in the gradebook, which students cannot
open, so its assignment list never shows it (jupyter/nbgrader#943). `./course release` also writes every released
assignment's due date into the exchange, beside what students fetch:

    <exchange>/two-primitives/deadlines.json    {"ex01_dot": "2026-12-09T22:59:00Z", ...}   (UTC; mode 0644)

and a student's progress (lesson 00's progress cell, `./course progress` on the hub) shows each one and how long is
left. The gradebook stays the authority for grading: lateness and penalties are computed from it
(`grading.gradebook.late_penalties`).
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

from twoprim.config import COURSE_ID
from twoprim.core.files import write_json

__all__ = ["FILE", "path", "read", "publish", "describe", "span"]

FILE = "deadlines.json"
FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def path(exchange: str | os.PathLike) -> Path:
    """The file of published due dates in the shared-folder exchange."""
    return Path(exchange) / COURSE_ID / FILE


def read(exchange: str | os.PathLike | None) -> dict[str, datetime.datetime]:
    """assignment -> its due date (naive UTC, as nbgrader stores it); {} when there is none or it is unreadable."""
    if not exchange:
        return {}
    try:
        raw = json.loads(path(exchange).read_text())
        return {aid: datetime.datetime.strptime(when, FORMAT) for aid, when in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def publish(exchange: str | os.PathLike, aid: str, when: datetime.datetime | None) -> Path:
    """Record `aid`'s due date (naive UTC; None removes it) in the exchange, keeping the others; written whole and
    renamed into place, readable by every account."""
    target = path(exchange)
    current = {a: d.strftime(FORMAT) for a, d in read(exchange).items()}
    if when is None:
        current.pop(aid, None)
    else:
        current[aid] = when.strftime(FORMAT)
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_json(target, dict(sorted(current.items())), mode=0o644)


def describe(when: datetime.datetime, now: datetime.datetime | None = None) -> str:
    """'due 2026-12-09 22:59 UTC (in 2 days 3 h)', or '(passed 5 h ago: a submission now is late)'."""
    now = now or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    left = (when - now).total_seconds()
    how_long = span(abs(left))
    tail = f"in {how_long}" if left > 0 else f"passed {how_long} ago: a submission now is late"
    return f"due {when:%Y-%m-%d %H:%M} UTC ({tail})"


def span(seconds: float, *, exact: bool = False) -> str:
    """'2 days 3 h', '5 h 30 min', '12 min'; `exact`: to the second, '1 h 0 min 9 s', '9 s', '30 min'."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    if exact and 0 < seconds < 1:
        return f"{seconds:.1f} s"
    if exact:
        units = [(days, " day" + ("s" if days != 1 else "")), (hours, " h"), (rest // 60, " min"), (rest % 60, " s")]
        first = next((i for i, (n, _) in enumerate(units) if n), 3)  # the largest unit present to the smallest,
        last = max((i for i, (n, _) in enumerate(units) if n), default=3)  # none skipped between them
        return " ".join(f"{n}{unit}" for n, unit in units[first : last + 1])
    if days:
        return f"{days} day{'s' if days > 1 else ''}" + (f" {hours} h" if hours else "")
    if hours:
        return f"{hours} h" + (f" {rest // 60} min" if rest // 60 else "")
    return f"{max(1, rest // 60)} min"
