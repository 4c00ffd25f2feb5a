"""nbgrader's shared-folder exchange, collected without trusting what students wrote there (grader side).

In nbgrader's exchange every student may write into `<exchange>/<course>/inbound/`, and `nbgrader collect` trusts
what it finds: the student named in a folder's name (`ann+ex01_dot+<time>+<random>`), whatever a link points to, and
the time the student's own clock wrote into timestamp.txt (nbgrader only logs a warning when the folder's owner is
not the student it names). Here a submission is taken only when

    - it is a real folder (not a link) owned by the account of the student its name gives, and
    - everything in it is a regular file or a real folder of that same account: no symbolic link, no FIFO, socket
      or device, no file of anyone else's (a hard link to another's file keeps its owner, so it is caught too).

Everything is opened relative to the folder already opened, without following links (O_NOFOLLOW), and checked on
the open file (fstat), so nothing can be swapped in between the check and the read. The submission time is when
the exchange saw it arrive: the newest change time (ctime) of the folder and its files, which the kernel sets and
no student can move back. Whatever fails is set aside (left in the exchange, never copied) with the account that
made it and why; `intake.admit` takes the rest.
"""
from __future__ import annotations

import datetime
import errno
import os
import pwd
import stat
from pathlib import Path

from twoprim.config import COURSE_ID
from twoprim.grading.nbgrader_cli import CourseError
from twoprim.exchange.intake import MAX_BYTES, SetAside, Submission

__all__ = ["gather"]

MAX_DEPTH = 8
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFLNK: "a symbolic link"}


class _Refused(Exception):
    """Why a submission is set aside."""


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).replace(tzinfo=None)


def _what(st: os.stat_result, name: str, dir_fd: int) -> str:
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
    if stat.S_ISLNK(st.st_mode):
        try:
            kind += f" to {os.readlink(name, dir_fd=dir_fd)}"
        except OSError:
            pass
    return kind


def gather(aid: str, exchange: Path, *, course_id: str = COURSE_ID) -> tuple[list[Submission], list[SetAside]]:
    """Every submission of `aid` in the exchange's inbound folder that its student's own account made, and those
    set aside, with why."""
    inbound = Path(exchange) / course_id / "inbound"
    try:
        dir_fd = os.open(inbound, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return [], []
    except OSError as err:
        raise CourseError(f"cannot read the exchange's inbound folder {inbound}: {err.strerror}; run collect "
                              f"as the account that released the assignment") from err
    taken: list[Submission] = []
    aside: list[SetAside] = []
    try:
        for name in sorted(os.listdir(dir_fd)):
            parts = name.rsplit("+", 3)
            if len(parts) < 3 or parts[1] != aid:
                continue
            named = parts[0]
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            maker = _account(st.st_uid)
            where = str(inbound / name)
            try:
                taken.append(_one(dir_fd, name, named, st, where))
            except _Refused as why:
                aside.append(SetAside(maker, named, where, str(why)))
    finally:
        os.close(dir_fd)
    return taken, aside


def _one(dir_fd: int, name: str, named: str, st: os.stat_result, where: str) -> Submission:
    if not stat.S_ISDIR(st.st_mode):
        raise _Refused(f"{_what(st, name, dir_fd)} in place of a submission folder")
    try:
        uid = pwd.getpwnam(named).pw_uid
    except KeyError:
        raise _Refused(f"no account named {named!r} on this machine, so nobody can have submitted as them") from None
    if st.st_uid != uid:
        raise _Refused(f"in {named}'s name but made by account {_account(st.st_uid)}: a submission in someone "
                       f"else's name")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as err:
        raise _Refused(f"the folder cannot be opened ({err.strerror})") from None
    try:
        if (os.fstat(fd).st_ino, os.fstat(fd).st_dev) != (st.st_ino, st.st_dev):
            raise _Refused("the folder was replaced while it was being collected")
        files: dict[str, bytes] = {}
        newest = _read_tree(fd, uid, named, "", files, 0)
    finally:
        os.close(fd)
    claimed = files.pop("timestamp.txt", None)
    claimed_text = claimed.decode("utf-8", errors="replace") if claimed is not None else None
    return Submission(named, files, _utc(max(newest, st.st_ctime)), f"inbound/{name}", claimed_text)


def _read_tree(fd: int, uid: int, named: str, prefix: str, files: dict[str, bytes], depth: int) -> float:
    """Read every file under the open folder `fd` into `files`; returns the newest ctime seen."""
    if depth > MAX_DEPTH:
        raise _Refused(f"folders nested deeper than {MAX_DEPTH} levels at {prefix or '.'}")
    newest = os.fstat(fd).st_ctime
    for entry in sorted(os.listdir(fd)):
        rel = f"{prefix}{entry}"
        st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            if st.st_uid != uid:
                raise _Refused(f"the folder {rel}/ belongs to account {_account(st.st_uid)}, not to {named}")
            sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                newest = max(newest, _read_tree(sub, uid, named, f"{rel}/", files, depth + 1))
            finally:
                os.close(sub)
            continue
        if not stat.S_ISREG(st.st_mode):
            raise _Refused(f"{rel} is {_what(st, entry, fd)}, not a regular file")
        if st.st_uid != uid:
            raise _Refused(f"{rel} belongs to account {_account(st.st_uid)}, not to {named}"
                           + (" (a hard link to someone else's file)" if st.st_nlink > 1 else ""))
        try:
            ffd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except OSError as err:
            why = "a symbolic link" if err.errno == errno.ELOOP else err.strerror
            raise _Refused(f"{rel} cannot be opened ({why})") from None
        try:
            fst = os.fstat(ffd)
            if (fst.st_ino, fst.st_dev) != (st.st_ino, st.st_dev) or not stat.S_ISREG(fst.st_mode):
                raise _Refused(f"{rel} was replaced while it was being collected")
            if fst.st_size > MAX_BYTES:
                raise _Refused(f"{rel} is {fst.st_size:,} bytes, over the limit of {MAX_BYTES:,}")
            with os.fdopen(ffd, "rb", closefd=False) as f:
                files[rel] = f.read(MAX_BYTES + 1)
            newest = max(newest, fst.st_ctime)
        finally:
            os.close(ffd)
    return newest
