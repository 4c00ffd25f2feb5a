"""The learner's own state, in one untracked file at the course root (`.twoprim-progress.json`): cached results
of `./course progress` and the hints revealed. Written atomically; a file that cannot be read is set aside (renamed,
never deleted) and a fresh state starts, with a note that says so. Deleting it loses only history.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from .notebooks import ROOT

__all__ = ["STATE_FILE", "STATE_VERSION", "load_state", "update_state"]

STATE_FILE = ".twoprim-progress.json"
STATE_VERSION = 1


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
    return _fresh_state(), (f"{path} could not be read ({problem}); {where} and progress starts afresh. Only "
                            f"history is lost: cached check results and hint counts.")


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
