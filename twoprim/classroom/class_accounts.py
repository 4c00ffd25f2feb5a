"""The accounts `./course hub` made, recorded so that `./course hub --remove-class` removes those and only those.

    grader/hub-accounts.json   root's, 0600: {"accounts": {name: {"uid", "role", "home", "created"}}}

`./course hub` adds an account here only when it creates it (useradd); an account it found (a person's own, or one
made by hand, even with the course's GECOS marker, its group or a similar name) is never in it. Removal takes an
account only when it is in the record, still has the uid and home recorded, still carries the course's marker, and
no process runs as it; it says what it will delete (each account and its home) and asks first (`--yes` skips the
question). A record not owned by root, or not a plain file, is refused: the instructor owns grader/, and only root
may say which accounts root deletes.
"""

from __future__ import annotations

import datetime
import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

from twoprim.classroom.hub_checks import _tool, course_made
from twoprim.core.errors import CourseError
from twoprim.core.files import write_json

RECORD = "hub-accounts.json"  # in grader/


def record_path(course: Path) -> Path:
    """Where the course records the accounts its classroom made."""
    return course / "grader" / RECORD


def read_record(course: Path) -> dict[str, dict]:
    """name -> what was recorded when `./course hub` made it; {} when there is no record. Refuses a record that
    root did not write (not root's, or not a plain file): it decides which accounts root deletes."""
    path = record_path(course)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise CourseError(
            f"cannot read {path} ({err.strerror}): it must be a plain file written by ./course hub; "
            f"remove the class's accounts by hand (userdel -r NAME)"
        ) from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            raise CourseError(
                f"{path} is not root's own record (owner uid {st.st_uid}, mode {st.st_mode & 0o777:o}):"
                f" someone else wrote it, so it cannot say which accounts to delete; check it, then "
                f"remove the class's accounts by hand (userdel -r NAME)"
            )
        try:
            return dict(json.load(f)["accounts"])
        except (ValueError, KeyError, TypeError) as err:
            raise CourseError(
                f"{path} is not a record of accounts ({err}): remove the class's accounts by hand (userdel -r NAME)"
            ) from None


def _write_record(course: Path, accounts: dict[str, dict]) -> None:
    write_json(record_path(course), {"accounts": dict(sorted(accounts.items()))}, mode=0o600)


def record_created(course: Path, account: pwd.struct_passwd, role: str) -> None:
    """Add an account `./course hub` has just created (as root: the file is root's, 0600)."""
    accounts = read_record(course)
    accounts[account.pw_name] = {
        "uid": account.pw_uid,
        "role": role,
        "home": account.pw_dir,
        "created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    _write_record(course, accounts)


def _processes_of(uid: int) -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]


def plan_removal(course: Path) -> tuple[list[tuple[str, dict]], list[str]]:
    """(accounts to delete: (name, record)), and why each other recorded account stays."""
    go, stay = [], []
    for name, made in read_record(course).items():
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            stay.append(f"{name}: already gone")
            continue
        if account.pw_uid != made.get("uid") or account.pw_dir != made.get("home") or not course_made(account):
            stay.append(
                f"{name}: not the account the course made (uid {account.pw_uid}, home {account.pw_dir}, "
                f"{account.pw_gecos or 'no description'}): left alone"
            )
            continue
        if _processes_of(account.pw_uid):
            raise CourseError(
                f"{name} still has running processes (the classroom is running?): stop ./course hub "
                f"with Ctrl-C first, then run ./course hub --remove-class again"
            )
        go.append((name, made))
    return go, stay


def remove_class(course: Path, *, yes: bool = False, ask=input, out=print) -> int:
    """`./course hub --remove-class`: say what will be deleted, ask (unless `yes`), delete; 0 when done or nothing
    to do, 1 when the answer was no."""
    if os.geteuid() != 0:
        raise CourseError(f"removing accounts needs root: sudo {course / 'course'} hub --remove-class")
    go, stay = plan_removal(course)
    for line in stay:
        out(f"kept: {line}")
    if not go:
        out(
            f"nothing to remove: {record_path(course)} lists no account of this course's classroom that still exists"
            if record_path(course).exists()
            else f"nothing to remove: ./course hub has made no account for this course (no {record_path(course)}); an "
            f"account made by hand, or by a course older than the record, goes with userdel --remove NAME"
        )
        return 0
    out(
        f"./course hub --remove-class will delete {len(go)} account(s) that ./course hub created, each with its home "
        f"and everything in it (work that was submitted stays in {course / 'grader'}):"
    )
    for name, made in go:
        out(f"  {name:<20} {made.get('role', '?'):<10} uid {made['uid']:<6} {made['home']}")
    if not yes:
        if not sys.stdin.isatty() and ask is input:
            raise CourseError("not deleting anything without an answer: run it in a terminal, or add --yes")
        if ask("Delete them? Type yes to go on: ").strip().lower() != "yes":
            out("nothing deleted")
            return 1
    accounts = read_record(course)
    for name, _ in go:
        proc = subprocess.run(
            [_tool("userdel") or "userdel", "--remove", name], capture_output=True, text=True, timeout=300
        )  # its home's files removed too
        if proc.returncode not in (0, 12):  # 12: the home could not be removed (said below)
            raise CourseError(
                f"userdel --remove {name} failed ({proc.stderr.strip()}): nothing else was changed for {name}"
            )
        accounts.pop(name, None)
        _write_record(course, accounts)
        out(f"deleted {name}" + (f" ({proc.stderr.strip()})" if proc.returncode else ""))
    return 0
