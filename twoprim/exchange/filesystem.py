"""nbgrader's shared-folder exchange, collected without trusting what students wrote there (grader side).

In nbgrader's exchange every student may write into `<exchange>/<course>/inbound/`, and `nbgrader collect` trusts
what it finds: the student named in a folder's name (`ann+ex01_dot+<time>+<random>`), whatever a link points to, and
the time the student's own clock wrote into timestamp.txt (nbgrader only logs a warning when the folder's owner is
not the student it names). nbgrader's submit also leaves each submission's folder 0777: any student who learns its
name may read it, add to it, rename or delete what is in it.

What the file system enforces. `./course release` makes inbound/ sticky (only a folder's owner may rename or delete
it) and set-group-ID (every folder made in it belongs to inbound's group, the instructor's). The course's submit,
`ExchangeSubmit` (selected in the students' nbgrader configuration), copies the work into a private (0700) folder
inside inbound/, writes its timestamp and secret, makes every folder 0750 and every file 0640 (0755 and 0644 where
inbound/ gave no group: the instructor must be able to read it), and only then renames it into place: from the
moment it has its name, no other student can change it, and where the group was given, none can read it.

What collect checks (`gather`). A submission is taken only when

    - it is a real folder (not a link) owned by the account of the student its name gives, and
    - everything in it is a regular file or a real folder of that same account: no symbolic link, no FIFO, socket
      or device, no file of anyone else's (a hard link to another's file keeps its owner, so it is caught too).

A file or folder of another account inside a folder other accounts may write to (a submission made by nbgrader's
own submit, 0777) is set aside alone, named with its owner: anyone could have put it there, so the owner's work is
collected without it, and that folder's change time, which the intruder moved, does not count as the arrival. In a
folder only its owner may write, it can only be the owner's doing (a hard link to a classmate's file): the whole
submission is set aside. Everything is opened relative to the folder already opened, without following links
(O_NOFOLLOW), and checked on the open file (fstat), so nothing can be swapped in between the check and the read.
The submission time is when the exchange saw it arrive: the newest change time (ctime) of the folder and its
files, which the kernel sets and no student can move back. Whatever fails is set aside (left in the exchange,
never copied) with the account that made it and why; `intake.admit` takes the rest, and names each student's older
submissions, which stay in the exchange.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import pwd
import stat
import tempfile
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.default.submit import ExchangeSubmit as _NbgraderSubmit
from nbgrader.utils import find_all_notebooks

from twoprim.config import COURSE_ID
from twoprim.core.errors import CourseError
from twoprim.exchange.intake import MAX_BYTES, SetAside, Submission, misplaced

__all__ = ["gather", "ExchangeSubmit", "seal", "config_text"]

MAX_DEPTH = 8
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFLNK: "a symbolic link",
}


class _Refused(Exception):
    """Why a submission is set aside."""


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).replace(tzinfo=None)


def _what(st: os.stat_result, name: str, dir_fd: int) -> str:
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "a regular file" if stat.S_ISREG(st.st_mode) else "not a regular file")
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            kind += f" to {os.readlink(name, dir_fd=dir_fd)}"
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
        raise CourseError(
            f"cannot read the exchange's inbound folder {inbound}: {err.strerror}; run collect "
            f"as the account that released the assignment"
        ) from err
    taken: list[Submission] = []
    aside: list[SetAside] = []
    try:
        for name in sorted(os.listdir(dir_fd)):
            parts = name.rsplit("+", 3)
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:  # removed by its owner while collect ran
                continue
            maker = _account(st.st_uid)
            where = str(inbound / name)
            if len(parts) < 3 or parts[1] != aid:
                if aid in name.split("+"):
                    aside.append(
                        SetAside(
                            maker,
                            "?",
                            where,
                            f"a name nbgrader's submit never makes (it makes <student>+{aid}+<time>+<random>)",
                        )
                    )
                continue
            named = parts[0]
            try:
                submission, foreign = _one(dir_fd, name, named, st, where)
            except _Refused as why:
                aside.append(SetAside(maker, named, where, str(why)))
                continue
            taken.append(submission)
            aside += foreign
    finally:
        os.close(dir_fd)
    return taken, aside


def _one(dir_fd: int, name: str, named: str, st: os.stat_result, where: str) -> tuple[Submission, list[SetAside]]:
    if not stat.S_ISDIR(st.st_mode):
        raise _Refused(f"{_what(st, name, dir_fd)} in place of a submission folder")
    try:
        uid = pwd.getpwnam(named).pw_uid
    except KeyError:
        raise _Refused(f"no account named {named!r} on this machine, so nobody can have submitted as them") from None
    if st.st_uid != uid:
        raise _Refused(
            f"in {named}'s name but made by account {_account(st.st_uid)}: a submission in someone else's name"
        )
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as err:
        raise _Refused(f"the folder cannot be opened ({err.strerror})") from None
    try:
        if (os.fstat(fd).st_ino, os.fstat(fd).st_dev) != (st.st_ino, st.st_dev):
            raise _Refused("the folder was replaced while it was being collected")
        files: dict[str, bytes] = {}
        foreign: list[SetAside] = []
        newest = _read_tree(fd, uid, named, "", files, 0, foreign, where)
    finally:
        os.close(fd)
    claimed = files.pop("timestamp.txt", None)
    claimed_text = claimed.decode("utf-8", errors="replace") if claimed is not None else None
    return Submission(named, files, _utc(newest or st.st_ctime), f"inbound/{name}", claimed_text), foreign


OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _read_tree(
    fd: int, uid: int, named: str, prefix: str, files: dict[str, bytes], depth: int, foreign: list[SetAside], where: str
) -> float:
    """Read every file of `named` under the open folder `fd` into `files`, and another account's entries in a
    folder others may write to into `foreign`; returns the newest ctime of what is `named`'s own and unchanged by
    anyone else (0 when there is none)."""
    if depth > MAX_DEPTH:
        raise _Refused(f"folders nested deeper than {MAX_DEPTH} levels at {prefix or '.'}")
    here = os.fstat(fd)
    open_to_others = bool(here.st_mode & OTHERS_WRITE)
    newest, intruded = 0.0, False
    for entry in sorted(os.listdir(fd)):
        rel = f"{prefix}{entry}"
        try:
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            raise _Refused(f"{rel} was removed while it was being collected") from None
        if st.st_uid != uid and open_to_others:  # anyone could have put it here: it alone is set aside
            kind = "the folder " + rel + "/" if stat.S_ISDIR(st.st_mode) else rel
            foreign.append(
                SetAside(
                    _account(st.st_uid),
                    named,
                    f"{where}/{rel}",
                    f"{kind} in {named}'s submission belongs to account {_account(st.st_uid)}: "
                    f"set aside, {named}'s own files collected without it (the folder "
                    f"{prefix or './'} is writable by other accounts, mode "
                    f"{stat.S_IMODE(here.st_mode):04o}: not made by the course's submit)",
                    within=True,
                )
            )
            intruded = True
            continue
        if stat.S_ISDIR(st.st_mode):
            if st.st_uid != uid:
                raise _Refused(f"the folder {rel}/ belongs to account {_account(st.st_uid)}, not to {named}")
            sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                newest = max(newest, _read_tree(sub, uid, named, f"{rel}/", files, depth + 1, foreign, where))
            finally:
                os.close(sub)
            continue
        if not stat.S_ISREG(st.st_mode):
            raise _Refused(f"{rel} is {_what(st, entry, fd)}, not a regular file")
        if st.st_uid != uid:  # in a folder only its owner may write: the owner put it there
            raise _Refused(
                f"{rel} belongs to account {_account(st.st_uid)}, not to {named}"
                + (" (a hard link to someone else's file)" if st.st_nlink > 1 else "")
            )
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
    if not intruded:  # another account's entry moved this folder's change time: it says nothing of the arrival
        newest = max(newest, here.st_ctime)
    return newest


# --- the student's side: nbgrader's submit, sealed ------------------------------------------------------------


def seal(folder: str | os.PathLike, group_readable: bool) -> None:
    """Only the owner may change `folder` and what is in it: folders 0750 and files 0640 when its group is the
    instructor's (`group_readable`), else 0755 and 0644."""
    dirs, files = (0o750, 0o640) if group_readable else (0o755, 0o644)
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            if not os.path.islink(os.path.join(dirpath, name)):  # (copytree copies what a link points to)
                os.chmod(os.path.join(dirpath, name), files)
        os.chmod(dirpath, dirs)


class ExchangeSubmit(_NbgraderSubmit):
    """nbgrader's submit into the shared folder, sealed: the submission is copied into a private folder inside
    inbound/, sealed (`seal`: only its owner may change it) and then renamed into place, never the 0777 folder
    nbgrader's own submit leaves; a notebook not where the release put it is refused, naming the expected path."""

    coursedir: CourseDirectory  # nbgrader's trait (allow_none): every app that runs an exchange sets it

    def copy_files(self):
        import secrets
        import shutil

        self.init_release()
        aid = self.coursedir.assignment_id
        why = misplaced(aid, find_all_notebooks(self.release_path), find_all_notebooks(self.src_path))
        if why:
            self.fail(f"Assignment {aid} not submitted: {why}")
        self.check_filename_diff()
        secret = secrets.token_hex(64)
        dest = os.path.join(self.inbound_path, self.assignment_filename)
        private = tempfile.mkdtemp(prefix=".submitting-", dir=self.inbound_path)  # 0700: nobody else gets in
        try:
            staged = os.path.join(private, "submission")
            self.do_copy(self.src_path, staged)
            for name, text in (("timestamp.txt", self.timestamp), ("submission_secret.txt", secret)):
                with open(os.path.join(staged, name), "w") as fh:
                    fh.write(text)
            inbound_gid = os.stat(self.inbound_path).st_gid
            seal(staged, group_readable=os.stat(staged).st_gid == inbound_gid)
            os.rename(staged, dest)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        self.log.info("Source: %s", self.src_path)
        self.log.info("Destination: %s (only you may change it)", dest)
        cache = os.path.join(
            self.cache_path,
            self.assignment_filename.rsplit("+", 1)[0] if self.add_random_string else self.assignment_filename,
        )
        os.makedirs(self.cache_path, exist_ok=True)
        self.do_copy(self.src_path, cache)  # what nbgrader's own submit keeps for `nbgrader list --cached`
        for name, text in (("timestamp.txt", self.timestamp), ("submission_secret.txt", secret)):
            with open(os.path.join(cache, name), "w") as fh:
                fh.write(text)
        self.log.info("Submitted as: %s %s %s", self.coursedir.course_id, aid, self.timestamp)


def config_text() -> str:
    """The line of a student's nbgrader_config.py that selects the sealed submit (./course hub, shared folder)."""
    return f"c.ExchangeFactory.submit = {__name__ + '.ExchangeSubmit'!r}\n"
