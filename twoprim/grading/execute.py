"""The cell time limit of autograde: nbgrader's Execute preprocessor, judged on the graded kernel's CPU time
where the grader can see it (`CpuTimedExecute`), so that a cell is never failed because the machine was loaded."""
from __future__ import annotations

import asyncio
import os
import time

from nbgrader.preprocessors import Execute

from twoprim.grading.preprocessors import CPU_LIMIT_LOG_ENV, KERNEL_UID_ENV, STRETCH

__all__ = ["CpuTimedExecute", "kernel_cpu_seconds"]


_KERNEL: dict[int, object] = {}   # pid -> psutil.Process of the graded kernel's uid, found once, read cheaply


def kernel_cpu_seconds(rescan: bool = False) -> float | None:
    """CPU seconds used so far by the graded kernel's processes (those of its uid, `KERNEL_UID_ENV`), children
    that ended included; None when the grader cannot tell (no uid of its own). The processes are looked for once
    (or with `rescan`, which also finds ones started since), then read from /proc alone: a cell costs microseconds."""
    import psutil

    uid = os.environ.get(KERNEL_UID_ENV, "")
    if not uid.isdigit():
        return None

    def total() -> float:
        seconds = 0.0
        for pid, proc in list(_KERNEL.items()):
            try:
                if int(uid) not in proc.uids():
                    raise psutil.NoSuchProcess(pid)
                t = proc.cpu_times()
            except psutil.Error:
                _KERNEL.pop(pid, None)
                continue
            seconds += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
        return seconds

    seconds = total()
    if rescan or not _KERNEL:
        for proc in psutil.process_iter(["uids"]):
            uids = proc.info.get("uids")
            if uids is not None and int(uid) in uids and proc.pid not in _KERNEL:
                _KERNEL[proc.pid] = proc
        seconds = total()
    return seconds


class CpuTimedExecute(Execute):
    """nbgrader's Execute, with a cell's time limit judged on the kernel's CPU time, not the machine's load.

    When a cell reaches its limit in wall-clock time, the grader looks at how much CPU its kernel used in it: a
    kernel that had its CPU (at least 90% of the limit), or that sat idle (less than a tenth of the time: sleeping
    or waiting, which load does not slow), is interrupted there, as nbgrader would. One that was working but starved
    of CPU by other processes gets another period, until it has used the limit in CPU seconds or `STRETCH` times it
    in wall-clock time. Without the kernel's uid (unisolated grading) the limit is wall-clock time alone."""

    def preprocess_cell(self, cell, resources, index):
        self._cell_clock = (time.monotonic(), kernel_cpu_seconds() if cell.get("cell_type") == "code" else None)
        return super().preprocess_cell(cell, resources, index)

    async def _async_handle_timeout(self, timeout, cell=None):
        started, cpu0 = getattr(self, "_cell_clock", (None, None))
        cpu = kernel_cpu_seconds(rescan=True) if cpu0 is not None else None
        verdict = "wall"
        if started is not None and cpu is not None:
            wall, used = time.monotonic() - started, cpu - cpu0
            if used < 0.9 * timeout and used >= 0.1 * wall and wall < STRETCH * timeout:
                self.log.warning(f"cell past {timeout} s of wall-clock time with {used:.1f} s of CPU: starved by "
                                 f"the machine's load, given more time")
                await asyncio.sleep(min(1.0, timeout / 10))
                return None
            verdict = "cpu"
        path = os.environ.get(CPU_LIMIT_LOG_ENV)
        if path:
            with open(path, "a") as f:
                f.write(f"{verdict}\n")
        return await super()._async_handle_timeout(timeout, cell)
