"""What a student is told in their notebook when the classroom's memory limit stopped one of their kernels.

Over the limit (limits.py), the operating system kills the largest process of the student's control group, usually
the notebook's kernel; JupyterLab says only "the kernel appears to have died" and restarts it. Every kernel of a
student's server loads this IPython extension (the classroom's python3 kernel spec, hub_config.py), and before each
cell it reads the group's count of such kills: when it grew since the student was last told, that cell's output
starts with what happened, the limit, and what to do. Standard library only: it runs in every student kernel.

The count lives in the student's own control group (memory.events on cgroup v2, memory.oom_control on v1), which a
process may read from inside; what was last told lives in the student's home (~/.twoprim/memory-kills-told), so
nothing of root's is involved and a student who edits that file only changes what they are told.
"""

from __future__ import annotations

import sys
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
TOLD = Path("~/.twoprim/memory-kills-told")


def own_path(controller: str, proc_cgroup: str) -> str | None:
    """This process's group in the hierarchy of `controller` ("" for v2), from /proc/self/cgroup's text."""
    for line in proc_cgroup.splitlines():
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            return path.lstrip("/")
    return None


def oom_kills_in(folder: Path, version: int) -> int:
    """How many processes of the memory group `folder` the kernel killed for going over its limit (0 if unknown)."""
    source = folder / ("memory.events" if version == 2 else "memory.oom_control")
    try:
        fields = dict(line.split() for line in source.read_text().splitlines() if len(line.split()) == 2)
    except OSError:
        return 0
    return int(fields.get("oom_kill", 0))


def own_memory_group(root: Path = CGROUP_ROOT) -> tuple[Path, int] | None:
    """This process's memory group and the cgroup version, or None where there is none to read."""
    try:
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    if (root / "cgroup.controllers").exists():
        path = own_path("", own)
        return None if path is None else (root / path, 2)
    path = own_path("memory", own)
    return None if path is None else (root / "memory" / path, 1)


def limit_mb(folder: Path, version: int) -> int | None:
    """The group's memory limit in MB, or None when it has none."""
    try:
        text = (folder / ("memory.max" if version == 2 else "memory.limit_in_bytes")).read_text().strip()
    except OSError:
        return None
    return None if text == "max" or int(text) >= 2**60 else int(text) // 2**20


def message(kills: int, limit: int | None) -> str:
    """What the student reads: what happened, why, and what to do."""
    over = f"your memory limit of {limit} MB" if limit else "your memory limit"
    times = "a kernel" if kills == 1 else f"{kills} kernels"
    return (
        f"⚠ The classroom stopped {times} of yours: your programs together went over {over} (each student has "
        f"their own, so one notebook cannot take the machine from the class), and the largest one was ended, "
        f"usually this notebook's kernel. Its variables are gone: run the cells above again. If one cell needs "
        f"that much, make its sizes smaller; if the course's own cells do, tell your instructor.\n"
    )


def pending(group: tuple[Path, int] | None, told: Path) -> str | None:
    """The message, once, when the group's kill count grew since `told` was written; None otherwise. A count below
    the one told (a new group: the server was started again) is taken as the new starting point."""
    if group is None:
        return None
    kills = oom_kills_in(*group)
    try:
        before = int(told.read_text())
    except (OSError, ValueError):
        before = 0
    if kills == before:
        return None
    try:
        told.parent.mkdir(parents=True, exist_ok=True)
        told.write_text(str(kills))
    except OSError:
        pass
    return message(kills - before, limit_mb(*group)) if kills > before else None


def load_ipython_extension(ip) -> None:
    """Before each cell, tell the student if the memory limit stopped one of their kernels since they were told."""
    group, told = own_memory_group(), TOLD.expanduser()
    if group is None:
        return

    def before_cell(*_):
        text = pending(group, told)
        if text:
            print(text, file=sys.stderr, end="")
            sys.stderr.flush()

    ip.events.register("pre_run_cell", before_cell)


def kernel_spec(python: str) -> dict:
    """The classroom's python3 kernel: ipykernel with this extension loaded."""
    return {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}", f"--IPKernelApp.extensions={__name__}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "metadata": {"debugger": True},
    }
