"""The cell time limit of autograde: nbgrader's Execute preprocessor, judged on the graded kernel's CPU time
where the grader can see it (`CpuTimedExecute`), so that a cell is never failed because the machine was loaded."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from queue import Empty
from typing import TYPE_CHECKING

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from nbgrader.preprocessors import Execute
from traitlets import default

from twoprim.grading.forkserver import ENV_CELLS, ENV_SOCKET
from twoprim.grading.kernels import scratch
from twoprim.grading.preprocessors import CPU_LIMIT_LOG_ENV, KERNEL_UID_ENV, STRETCH

if TYPE_CHECKING:
    import psutil

__all__ = [
    "CpuTimedExecute",
    "PromptKernelManager",
    "PromptKernelClient",
    "kernel_cpu_seconds",
    "watching_cells",
    "share_test_cells",
]

SHUTDOWN_POLL_S = 0.01  # how often the grader looks whether a shut-down kernel has exited (jupyter_client: 0.1 s)

_ON_CELL: list[Callable] = []  # told of each cell as it starts and ends (`watching_cells`): a self-grade's progress


@contextlib.contextmanager
def watching_cells(callback: Callable[[dict, str], None] | None) -> Iterator[None]:
    """While inside: `callback(cell, "start" | "end")` for every cell nbgrader runs in this process (a learner's
    self-grade shows its progress per test cell). A callback that fails never fails the grading."""
    if callback is None:
        yield
        return
    _ON_CELL.append(callback)
    try:
        yield
    finally:
        _ON_CELL.remove(callback)


def share_test_cells(nb) -> bool:
    """When a forkserver makes the kernel: write the source of `nb`'s graded test cells (nbgrader has just put back
    the instructor's own, hidden checks included) to a file of this grader's, where no kernel reaches, and name it
    in $TWOPRIM_WARM_CELLS for the kernel's launcher (`forkserver.launch`). True when written."""
    if not os.environ.get(ENV_SOCKET):
        return False
    from twoprim.core import verdicts

    cells = [cell.code for cell in verdicts.graded_cells(nb)]
    if not cells:
        return False
    data = json.dumps(cells).encode()
    path = scratch() / "cells" / f"{hashlib.sha256(data).hexdigest()[:24]}.json"
    if not path.is_file():
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fresh = path.with_suffix(f".{os.getpid()}.tmp")
        fresh.write_bytes(data)
        os.replace(fresh, path)
    os.environ[ENV_CELLS] = str(path)
    return True


def _tell(cell, phase: str) -> None:
    for callback in list(_ON_CELL):
        with contextlib.suppress(Exception):
            callback(cell, phase)


_KERNEL: dict[int, psutil.Process] = {}  # pid -> psutil.Process of the graded kernel's uid, found once, read cheaply


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


class PromptKernelClient(AsyncKernelClient):
    """jupyter_client's kernel client, ready as soon as the kernel has answered on both channels.

    jupyter_client's `wait_for_ready` ends by reading IOPub until it has been quiet for 0.2 s: 0.2 s idle for every
    kernel the grader starts, 4% of a self-grade of ex01. Here what IOPub already holds is dropped without waiting:
    nbclient reads only the messages whose parent is the request it sent (a late status of this kernel_info is
    ignored there). The rest is jupyter_client's: kernel_info until the reply, then a message on IOPub (the
    kernel's welcome or status) to know it is connected, the start's timeout, a kernel that died."""

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        started, since = time.monotonic(), time.strftime("%H:%M:%S")
        deadline = started + (float("inf") if timeout is None else timeout)  # None: jupyter_client's "no limit"
        asked, replied = 0, False
        while True:
            self.kernel_info()
            asked += 1
            try:
                msg = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                pass
            else:
                if msg["msg_type"] == "kernel_info_reply":
                    replied = True
                    try:
                        await self.iopub_channel.get_msg(timeout=0.2)
                    except Empty:  # IOPub not connected yet: ask again
                        pass
                    else:
                        self._handle_kernel_info_reply(msg)
                        break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Kernel didn't respond in {timeout} seconds: waited since {since} "
                    f"({time.monotonic() - started:.1f} s) for a kernel_info_reply on shell and then a message on "
                    f"IOPub; kernel_info sent {asked} times, "
                    + ("a reply came, IOPub stayed silent" if replied else "no reply came")
                )
        drained = time.monotonic() + 1.0  # what IOPub holds now, not a stream that never stops (at most 1 s)
        while time.monotonic() < drained:
            try:
                await self.iopub_channel.get_msg(timeout=0)
            except Empty:
                return


class PromptKernelManager(AsyncKernelManager):
    """The grader's kernel manager: `PromptKernelClient`s, and a shut-down kernel's exit seen within
    `SHUTDOWN_POLL_S` (jupyter_client polls every 0.1 s: 0.05-0.1 s idle at the end of every submission)."""

    @default("client_factory")
    # jupyter_client annotates its own default `-> Type` (traitlets' trait class), where it returns a class
    def _client_factory_default(self):  # pyright: ignore[reportIncompatibleMethodOverride]
        return PromptKernelClient

    async def _async_finish_shutdown(self, waittime=None, pollinterval=0.1, restart=False):
        return await super()._async_finish_shutdown(waittime, min(pollinterval, SHUTDOWN_POLL_S), restart)


class CpuTimedExecute(Execute):
    """nbgrader's Execute, with a cell's time limit judged on the kernel's CPU time, not the machine's load.

    When a cell reaches its limit in wall-clock time, the grader looks at how much CPU its kernel used in it: a
    kernel that had its CPU (at least 90% of the limit), or that sat idle (less than a tenth of the time: sleeping
    or waiting, which load does not slow), is interrupted there, as nbgrader would. One that was working but starved
    of CPU by other processes gets another period, until it has used the limit in CPU seconds or `STRETCH` times it
    in wall-clock time. Without the kernel's uid (unisolated grading) the limit is wall-clock time alone. Its
    kernels are `PromptKernelManager`'s."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", PromptKernelManager)  # nbgrader's Execute passes AsyncKernelManager
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, *args, **kwargs):
        """Run the notebook; with a forkserver, its launcher is first handed the instructor's test cells
        (`share_test_cells`), so the forkserver warms what they build before it forks this kernel."""
        shared = share_test_cells(nb)
        try:
            return super().preprocess(nb, *args, **kwargs)
        finally:
            if shared:
                os.environ.pop(ENV_CELLS, None)

    def preprocess_cell(self, cell, resources, index):
        self._cell_clock = (time.monotonic(), kernel_cpu_seconds() if cell.get("cell_type") == "code" else None)
        _tell(cell, "start")
        try:
            return super().preprocess_cell(cell, resources, index)
        finally:
            _tell(cell, "end")

    async def _async_handle_timeout(self, timeout, cell=None):
        started, cpu0 = getattr(self, "_cell_clock", (None, None))
        cpu = kernel_cpu_seconds(rescan=True) if cpu0 is not None else None
        verdict = "wall"
        if started is not None and cpu is not None and cpu0 is not None:
            wall, used = time.monotonic() - started, cpu - cpu0
            if used < 0.9 * timeout and used >= 0.1 * wall and wall < STRETCH * timeout:
                self.log.warning(
                    f"cell past {timeout} s of wall-clock time with {used:.1f} s of CPU: starved by "
                    f"the machine's load, given more time"
                )
                await asyncio.sleep(min(1.0, timeout / 10))
                return None
            verdict = "cpu"
        path = os.environ.get(CPU_LIMIT_LOG_ENV)
        if path:
            with open(path, "a") as f:
                f.write(f"{verdict}\n")
        return await super()._async_handle_timeout(timeout, cell)
