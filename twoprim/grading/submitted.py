"""What a student handed in, as grader/submitted/<student>/<aid>/ holds it: regular files only, read without ever
following a link or blocking on a pipe (`read_submission`, `read_regular`), and why a file in a notebook's place is
not a gradable notebook, in words (`notebook_text`, `missing_reason`): not there, renamed, a folder, a link, a FIFO,
empty, binary, another encoding (with the byte), a UTF-8 byte-order mark (dropped: the notebook is valid), broken
JSON, a notebook format nbformat cannot upgrade (versions 1-3 are upgraded to 4, as Jupyter does)."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = [
    "BOM",
    "NotRegularFile",
    "read_regular",
    "read_submission",
    "submission_files",
    "submitted_students",
    "notebook_text",
    "upgraded_from",
    "missing_reason",
]

BOM = b"\xef\xbb\xbf"


def submitted_students(aid: str, root: Path) -> list[str]:
    """Every student with something at grader/submitted/<student>/<aid> (a folder, or anything else in its place,
    which `read_submission` refuses with its reason); links are never followed."""
    base = root / "grader" / "submitted"
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and os.path.lexists(p / aid))


class NotRegularFile(OSError):
    """What sits where a regular file should (a link, a FIFO, a device, a folder), in words."""


def _what_it_is(mode: int, path: Path) -> str:
    import stat

    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link (to {os.readlink(path)})"
        except OSError:
            return "a symbolic link"
    return {
        stat.S_IFDIR: "a folder",
        stat.S_IFIFO: "a named pipe (FIFO)",
        stat.S_IFSOCK: "a socket",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
    }.get(stat.S_IFMT(mode), "not a file")


def read_regular(path: Path) -> bytes:
    """The bytes of `path`, a regular file; a link, FIFO, device or folder in its place raises `NotRegularFile`
    naming what it is. Never reads through a link (O_NOFOLLOW) and never blocks on a pipe (O_NONBLOCK)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise err from None
        raise NotRegularFile(_what_it_is(mode, path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(_what_it_is(mode, path))
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def read_submission(aid: str, student: str, root: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    """(files, refused) of grader/submitted/<student>/<aid>/, top level only (nbgrader submits a flat folder): the
    bytes of each regular file, and for anything else (a symbolic link, a FIFO, a device, a folder, or the
    submission folder itself not being one) what it is. Nothing is read through a link."""
    import stat

    folder = root / "grader" / "submitted" / student / aid
    for place, key in ((folder.parent, ".."), (folder, ".")):
        try:
            mode = os.lstat(place).st_mode
        except FileNotFoundError:
            return {}, {}
        if not stat.S_ISDIR(mode):
            return {}, {key: _what_it_is(mode, place)}
    files, refused = {}, {}
    for p in sorted(folder.iterdir()):
        try:
            files[p.name] = read_regular(p)
        except NotRegularFile as err:
            refused[p.name] = str(err)
        except OSError as err:
            refused[p.name] = f"unreadable ({err.strerror or err})"
    return files, refused


def submission_files(aid: str, student: str, root: Path) -> dict[str, bytes]:
    """The regular files of a student's submission folder (`read_submission` without what it refused)."""
    return read_submission(aid, student, root)[0]


def notebook_text(name: str, data: bytes) -> tuple[str | None, str | None]:
    """(the notebook's text, None), or (None, why the submitted file is not a gradable notebook). A UTF-8
    byte-order mark is dropped (some editors write one; the notebook is valid)."""
    if not data.strip():
        return None, f"{name} is empty ({len(data)} bytes)"
    if data.startswith(BOM):
        data = data[len(BOM) :]
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return None, (
            f"{name} is UTF-16 text (it starts with UTF-16's byte-order mark), not UTF-8: the file was "
            f"re-saved in another encoding; a notebook saved by Jupyter is UTF-8 JSON"
        )
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as err:
        binary = b"\0" in data[:4096]
        return None, (
            f"{name} is {'a binary file' if binary else 'not UTF-8 text'} (byte {err.start}: "
            f"{data[err.start : err.start + 4].hex(' ')}, {err.reason}); a notebook saved by Jupyter is "
            f"UTF-8 JSON{'' if binary else ': the file was re-saved in another encoding'}"
        )
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as err:
        return None, (
            f"{name} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); the file is "
            f"truncated or was not saved from Jupyter"
        )
    if not isinstance(parsed, dict) or not isinstance(parsed.get("cells", parsed.get("worksheets")), list):
        return None, f"{name} is JSON but not a notebook (no list of cells)"
    major = parsed.get("nbformat")
    if not isinstance(major, int) or isinstance(major, bool) or not 1 <= major <= 4:
        return None, (
            f"{name} is a notebook of format version {major!r}, not 4 (what Jupyter writes today) nor an "
            f"older one nbformat upgrades: opened in JupyterLab and saved, it becomes one"
        )
    import nbformat

    try:
        upgraded = nbformat.reads(raw, as_version=4)  # versions 1-3 are upgraded, as Jupyter does on opening them
    except Exception as err:  # noqa: BLE001
        if major != 4:
            return None, (
                f"{name} says it is a notebook of format version {major}, but nbformat cannot read it as one "
                f"to upgrade it to version 4 ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
            )
        return None, f"{name} is JSON but not a notebook ({type(err).__name__}: {str(err)[:200]})"
    return (raw if major == 4 else nbformat.writes(upgraded)), None


def upgraded_from(data: bytes) -> int | None:
    """The format version of a notebook older than 4 (read upgraded by `notebook_text`), else None."""
    try:
        major = json.loads(data.removeprefix(BOM)).get("nbformat")
    except (ValueError, AttributeError):
        return None
    return major if isinstance(major, int) and major < 4 else None


def missing_reason(task: dict, missing: list[str], present: list[str]) -> str:
    """Why the notebook(s) `missing` cannot be graded: not there, or something that is not a file in its place."""
    student, aid, refused = task["student"], task["aid"], task.get("refused") or {}
    where = f"grader/submitted/{student}/{aid}/"
    if ".." in refused or "." in refused:
        which = ".." if ".." in refused else "."
        place = f"grader/submitted/{student}/" if which == ".." else where
        return (
            f"{place} is {refused[which]}, not a folder: refused, nothing was read through it; collect the "
            f"submission again (grading reads only regular files)"
        )
    in_place = [f"{m} is {refused[m]}" for m in missing if m in refused]
    if in_place:
        return (
            f"{'; '.join(in_place)} in {where}, not a file: refused, nothing was read through it (grading reads "
            f"only regular files); ask the student to submit {', '.join(missing)}"
        )
    others = [p for p in present if p.endswith(".ipynb")]
    found = ", ".join(present + [f"{n} ({what})" for n, what in refused.items()]) or "nothing"
    wanted = ", ".join(missing)
    if len(missing) == 1 and len(others) == 1:
        advice = f"{others[0]} looks like it, renamed: ask the student to rename it {wanted} and resubmit"
    else:
        advice = f"ask the student to submit {wanted}"
    return f"missing notebook {wanted} in {where} (found: {found}); {advice}"
