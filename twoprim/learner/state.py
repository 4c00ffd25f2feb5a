"""The learner's own state, in one untracked file at the top of their workspace (`.twoprim-progress.json`): cached
results of `./course progress` and the hints revealed. Written atomically; a file that cannot be read is set aside
(renamed, never deleted) and a fresh state starts, with a note that says so. Deleting it loses only history.

The workspace (`workspace()`) is the learner's own copy of the course: the course folder for a learner with a
checkout of their own; on the classroom hub (`./course hub`), each student's home, where their lessons/ and the
exercises/ they fetched are, since the course folder is the instructor's and students cannot write to it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from twoprim.config import ROOT

__all__ = ["STATE_FILE", "STATE_VERSION", "WORKSPACE_ENV", "workspace", "in_classroom", "load_state", "update_state"]

STATE_FILE = ".twoprim-progress.json"
STATE_VERSION = 1
WORKSPACE_ENV = "TWOPRIM_WORKSPACE"  # set by ./course hub on each student's server: their home


def workspace(course: Path = ROOT) -> Path:
    """The learner's own copy of the course: $TWOPRIM_WORKSPACE (`~` expanded) when it is set, else the course
    folder (`course`)."""
    value = os.environ.get(WORKSPACE_ENV, "").strip()
    return Path(value).expanduser() if value else Path(course)


def in_classroom() -> bool:
    """A student on the classroom hub: assignments are fetched and submitted from the Assignments tab, and graded by
    the instructor (a student cannot read the hidden checks, so never self-graded)."""
    return bool(os.environ.get(WORKSPACE_ENV, "").strip())


def _fresh_state() -> dict:
    return {"version": STATE_VERSION, "runs": {}, "hints": {}}


def _state_problem(data) -> str | None:
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        return f"it is not a version-{STATE_VERSION} progress file"
    if not isinstance(data.get("runs"), dict) or not isinstance(data.get("hints"), dict):
        return "its 'runs' or 'hints' entry is missing or not a mapping"
    if not all(isinstance(n, int) and n >= 0 for n in data["hints"].values()):
        return "a hint count is not a whole number"
    return None


def load_state(root: Path = ROOT) -> tuple[dict, str | None]:
    """The state in `root`/.twoprim-progress.json and a note for the learner when it had to be set aside.

    A file that cannot be read is renamed to `.twoprim-progress.json.bad-<time>` (kept, never deleted) and a fresh
    state is returned with a note that says so.
    """
    path = Path(root) / STATE_FILE
    if not path.exists():
        return _fresh_state(), None
    data: dict = {}
    try:
        data = json.loads(path.read_text())
        problem = _state_problem(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        problem = f"{type(err).__name__}: {err}"
    if problem is None:
        return data, None
    aside = path.with_name(f"{STATE_FILE}.bad-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        path.rename(aside)
        where = f"it was moved to {aside.name}"
    except OSError as err:
        where = f"it could not be moved aside ({err}); move or delete it by hand"
    return _fresh_state(), (
        f"{path} could not be read ({problem}); {where} and progress starts afresh. Only "
        f"history is lost: cached check results and hint counts."
    )


def _save_state(root: Path, data: dict) -> None:
    """Write the state atomically (a temporary file renamed over the old one)."""
    path = Path(root) / STATE_FILE
    tmp = path.with_name(f"{STATE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def update_state(root: Path, change: Callable[[dict], None]) -> str | None:
    """Read the state, apply `change` to it, write it back; returns load_state's note (None when all was well)."""
    data, note = load_state(root)
    change(data)
    _save_state(root, data)
    return note
