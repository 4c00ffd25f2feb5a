"""Students' kernels forked from their server's zygote (`twoprim.classroom.warm_kernels`, `twoprim.learner.zygote`):
one student's server-equivalent, run as a throwaway account inside a control group of its own with a small memory
limit (the classroom's own limit code, `limits.make_user_group`), starts its kernels with the provisioner the
classroom's kernelspec names, as a Jupyter server does (jupyter_client's AsyncIOLoopKernelManager, with its
restarter):

- the first kernel, before the zygote was started, starts the usual way and the server's log says why;
- every later kernel is forked from the zygote: it runs as the student, in the student's control group, its parent
  the zygote, and is a fresh namespace (a variable set in one kernel is not in the next);
- an interrupt stops a running cell with KeyboardInterrupt;
- a kernel that fills more than the student's memory limit is killed (the group's out-of-memory kill count grows)
  and the restarter starts it again, forked again, with the zygote still there; its first cell says why
  (`notices.py`, loaded in forked kernels as in the others).

Root only (accounts and control groups): CI runs as root; as another user the test says so and is skipped."""

from __future__ import annotations

import json
import os
import pwd
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import scripts
from tests.accounts import delete_account, shared_tmp

MEMORY_MB = 1024  # the zygote (~340 MB resident), this server-equivalent and two kernels fit; a 2 GiB array does not
RUN_S = 240  # the whole scenario on a loaded 2-core machine (measured: 24 s at a load average of 6)

# The student's server-equivalent: the kernel managers a Jupyter server makes, one JSON line per finding.
SERVER = r"""
import asyncio, json, logging, os, sys, time
from jupyter_client.ioloop import AsyncIOLoopKernelManager
from traitlets.config import Config
from twoprim.classroom import warm_kernels

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")
log = logging.getLogger("server")
MEMORY = int(sys.argv[1])

def say(**what):
    print(json.dumps(what), flush=True)

async def run(km, code, timeout=60):
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=timeout)
        out = []
        def hook(m):
            if m["msg_type"] == "stream":
                out.append(m["content"]["text"])
            elif m["msg_type"] == "error":
                out.append(m["content"]["ename"] + ": " + m["content"]["evalue"])
        reply = await kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        return reply["content"]["status"], "".join(out)
    finally:
        kc.stop_channels()

def manager():
    # the restarter looks every 0.5 s (a server, every 3 s): the test need not wait that long
    return AsyncIOLoopKernelManager(kernel_name="python3", log=log,
                                    config=Config({"KernelRestarter": {"time_to_dead": 0.5}}))

def forked(km):
    f = getattr(km.provisioner, "forked", None)
    return f.pid if f is not None else None

async def main():
    zygote = warm_kernels.zygote()
    cold = manager()
    await cold.start_kernel()   # no server extension started the zygote: this one starts the usual way
    say(step="cold", forked=forked(cold), result=await run(cold, "print(6 * 7)", timeout=120))
    await cold.shutdown_kernel(now=True)
    ready = await zygote.wait_ready(180)
    say(step="zygote", ready=ready, pid=zygote.proc.pid, threads=zygote.threads, failure=zygote.failure)

    first = manager()
    await first.start_kernel()
    first.start_restarter()
    say(step="first", forked=forked(first), result=await run(
        first, "import os, torch\nsecret = 41\nprint(os.getuid(), os.getppid(), open('/proc/self/cgroup').read())"))
    second = manager()
    await second.start_kernel()
    fresh = await run(second, "print('secret' in globals(), 'torch' in globals())")
    say(step="second", forked=forked(second), result=fresh)

    kc = second.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=60)
    msg_id = kc.execute("import time\nfor _ in range(600):\n    time.sleep(0.1)\n")
    await asyncio.sleep(1.0)
    asked = time.monotonic()
    await second.interrupt_kernel()
    error = None
    while True:
        msg = await kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            error = msg["content"]["ename"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    kc.stop_channels()
    say(step="interrupt", error=error, seconds=time.monotonic() - asked)

    before = forked(first)
    kc = first.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=60)
    msg_id = kc.execute(f"import numpy as np\nhog = np.ones({2 * MEMORY} // 8)\nprint(hog.sum())")
    deadline = time.monotonic() + 120
    while (forked(first) in (None, before) or not await first.is_alive()) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    replies = []
    while True:  # what came back for the request before its kernel died: no successful reply
        try:
            msg = await kc.get_shell_msg(timeout=0.5)
        except Exception:
            break
        if msg["parent_header"].get("msg_id") == msg_id:
            replies.append(msg["content"]["status"])
    kc.stop_channels()
    say(step="memory", replies=replies, before=before, after=forked(first), zygote=zygote.proc.poll() is None,
        result=await run(first, "print('secret' in globals())"))
    first.stop_restarter()
    for km in (first, second):
        await km.shutdown_kernel(now=True)
    warm_kernels.stop_zygotes()
    say(step="done")

asyncio.run(main())
"""


@pytest.fixture
def student():
    """A throwaway account with a home, and a control group of its own (the classroom's limit code) of MEMORY_MB."""
    if os.geteuid() != 0:
        pytest.skip("a student's account and control group need root (CI runs as root)")
    from twoprim.classroom.limits import find_hierarchy, make_user_group, remove_user_group

    hierarchy = find_hierarchy()
    assert hierarchy is not None, "this machine lets root make no control group: the memory limit cannot hold here"
    base = shared_tmp("twoprim-warm-")
    name = f"tpwk{os.getpid() % 100000}{os.urandom(2).hex()}"
    subprocess.run(
        ["useradd", "--create-home", "--home-dir", str(base / "home"), "--user-group", "--shell", "/bin/bash", name],
        check=True,
        capture_output=True,
        timeout=60,
    )
    folders = make_user_group(hierarchy, name, MEMORY_MB * 2**20, 2.0)
    try:
        yield pwd.getpwnam(name), base, hierarchy, folders
    finally:
        delete_account(name)
        deadline = time.monotonic() + 10
        while (
            any((f / "cgroup.procs").read_text().strip() for f in folders if f.is_dir()) and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        remove_user_group(hierarchy, name)
        shutil.rmtree(base, ignore_errors=True)


def _as_student(user: pwd.struct_passwd, folders):
    """In the child, as root: enter the student's group, then become the student (as ClassroomSpawner does)."""

    def preexec():
        for folder in folders:
            with open(folder / "cgroup.procs", "w") as f:
                f.write("0")
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return preexec


def test_a_students_kernels_are_forked_warm_fresh_their_own_interruptible_and_restarted_at_the_limit(student):
    from twoprim.classroom import notices, warm_kernels
    from twoprim.classroom.limits import oom_kills

    user, base, hierarchy, folders = student
    share = base / "share"
    spec = share / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(warm_kernels.kernel_spec(sys.executable)))
    for path in (share, share / "kernels", spec, spec / "kernel.json"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    home = Path(user.pw_dir)
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "USER": user.pw_name,
        "LANG": "C.UTF-8",
        "JUPYTER_PATH": str(share),
        "JUPYTER_RUNTIME_DIR": str(home / ".runtime"),
        "JUPYTER_DATA_DIR": str(home / ".data"),
    }
    kills = oom_kills(hierarchy, user.pw_name)
    log = base / "server.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(MEMORY_MB * 2**20)],
            cwd=home,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            preexec_fn=_as_student(user, folders),
        )
    steps: dict[str, dict] = {}
    deadline = time.monotonic() + RUN_S
    try:
        buffer = b""
        while "done" not in steps:
            left = deadline - time.monotonic()
            assert left > 0, (
                f"the server-equivalent did not finish within {RUN_S} s; its steps: {steps}\n{log.read_text()[-3000:]}"
            )
            out = proc.stdout
            assert out is not None
            if not select.select([out], [], [], left)[0]:
                continue
            chunk = os.read(out.fileno(), 65536)
            assert chunk, f"the server-equivalent exited ({proc.wait()}); its steps: {steps}\n{log.read_text()[-3000:]}"
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                record = json.loads(line)
                steps[record["step"]] = record
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    text = log.read_text()

    cold, zygote = steps["cold"], steps["zygote"]
    assert cold["forked"] is None and cold["result"] == ["ok", "42\n"], cold
    assert "started the usual way: the zygote cannot serve it: it was not started" in text, text[-3000:]
    assert zygote["ready"], (zygote, text[-3000:])

    first, second = steps["first"], steps["second"]
    assert first["forked"] and second["forked"] and first["forked"] != second["forked"], (first, second)
    uid, parent, cgroups = first["result"][1].split(" ", 2)
    assert first["result"][0] == "ok" and int(uid) == user.pw_uid, first  # the student's, never root's
    assert int(parent) == zygote["pid"], first  # forked from the zygote
    assert f"/{user.pw_name}\n" in cgroups and hierarchy.memory.name in cgroups, cgroups  # the student's group
    assert second["result"] == ["ok", "False False\n"], second  # a fresh namespace
    assert text.count("forked from the zygote") >= 2, text[-3000:]
    # each line names whose server it is: a hub's log interleaves every student's
    named = rf"twoprim warm kernels \({user.pw_name}\): kernel [0-9a-f-]{{36}} forked from the zygote"
    assert re.search(named, text), text[-3000:]
    assert all(user.pw_name in line for line in text.splitlines() if "twoprim warm kernels" in line), text[-3000:]

    assert steps["interrupt"]["error"] == "KeyboardInterrupt" and steps["interrupt"]["seconds"] < 20, steps

    memory = steps["memory"]
    assert "ok" not in memory["replies"], memory  # it never got its 2 GiB
    assert oom_kills(hierarchy, user.pw_name) > kills, memory  # the student's limit stopped it
    assert memory["after"] and memory["after"] != memory["before"], memory  # restarted, forked again
    # the restarted kernel is fresh, and its first cell says what happened (notices.py, loaded in forked kernels too)
    assert memory["zygote"] and memory["result"] == ["ok", notices.message(1, MEMORY_MB) + "False\n"], memory


# --- a zygote whose kernels die at start ----------------------------------------------------------------------------

# Every kernel the first zygote forks dies at once (exit code 3), as from a zygote whose warm state is broken; kernels
# started the usual way, and a second zygote's, are sound. An at-fork hook: subprocess's own starts never run it.
BROKEN_ZYGOTE = """
import os, sys
def _die_if_first_zygote():
    if len(sys.argv) > 1 and sys.argv[1].endswith("-1.sock"):
        os._exit(3)
os.register_at_fork(after_in_child=_die_if_first_zygote)
"""

# A server's kernel manager (with its restarter) over the classroom's kernelspec, one JSON line per finding.
RETIRING_SERVER = r"""
import asyncio, json, logging, sys, time
from jupyter_client.ioloop import AsyncIOLoopKernelManager
from traitlets.config import Config
from twoprim.classroom import warm_kernels

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")
log = logging.getLogger("server")

def say(**what):
    print(json.dumps(what), flush=True)

def manager():
    return AsyncIOLoopKernelManager(kernel_name="python3", log=log,
                                    config=Config({"KernelRestarter": {"time_to_dead": 0.5}}))

async def run(km, code):
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=120)
        out = []
        hook = lambda m: m["msg_type"] == "stream" and out.append(m["content"]["text"])
        reply = await kc.execute_interactive(code, timeout=120, output_hook=hook)
        return reply["content"]["status"], "".join(out)
    finally:
        kc.stop_channels()

async def picked(zygote, km):  # the zygote's state when the kernel's ports were picked
    deadline = time.monotonic() + 60
    while not km.shell_port:
        if time.monotonic() > deadline:
            return "never, in 60 s"
        await asyncio.sleep(0.005)
    return zygote.state()

async def main():
    zygote = warm_kernels.zygote()
    zygote.start(log)
    first_zygote = zygote.proc
    asked = zygote.state()
    km = manager()  # asked for at once, as a student who opens a notebook as their server starts
    ports = asyncio.create_task(picked(zygote, km))
    await km.start_kernel()
    say(step="zygote", asked=asked, ports=await ports, ready=zygote.ready.is_set())
    km.start_restarter()
    forks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the restarter's kernel runs, whichever way it started
        f = km.provisioner.forked
        if f is not None and f.pid not in forks:
            forks.append(f.pid)
        if f is None and await km.is_alive():
            break
        await asyncio.sleep(0.1)
    say(step="restarted", forks=forks, forked=km.provisioner.forked is not None, result=await run(km, "print(6 * 7)"),
        retired=[p.pid for p in zygote.retired], first_zygote=first_zygote.pid)
    try:
        first_zygote.wait(30)  # its kernels all died: it exits
    except Exception:
        pass
    ready = await zygote.wait_ready(180)
    later = manager()
    await later.start_kernel()
    f = later.provisioner.forked
    say(step="later", first_zygote_exit=first_zygote.poll(), ready=ready, zygote=zygote.proc.pid,
        forked=f is not None, result=await run(later, "import os\nprint(os.getppid())"))
    km.stop_restarter()
    await km.shutdown_kernel(now=True)
    await later.shutdown_kernel()  # asked to shut down, it exits by itself: no news in the log
    warm_kernels.stop_zygotes()
    say(step="done")

asyncio.run(main())
"""


def test_a_zygote_whose_kernels_die_at_start_is_retired_and_the_student_gets_a_kernel(tmp_path):
    """A kernel asked for while the zygote starts gets its ports once the zygote is ready. Two forked kernels that
    die at start (the restarter's first try and its second) retire the zygote: the log
    names each death (exit code, seconds after the fork) and the retirement, the restarter's next kernel starts the
    usual way and runs a cell, the retired zygote exits once its kernels are gone, and the next kernel is forked from a
    new zygote. As any user: no account or control group is needed."""
    from twoprim.classroom import warm_kernels

    share = tmp_path / "share" / "kernels" / "python3"
    share.mkdir(parents=True)
    (share / "kernel.json").write_text(json.dumps(warm_kernels.kernel_spec(sys.executable)))
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(BROKEN_ZYGOTE)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hooks), str(Path(__file__).resolve().parents[1])]),
        "JUPYTER_PATH": str(tmp_path / "share"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    log = tmp_path / "server.log"
    with log.open("w") as err:
        proc = subprocess.run(
            [sys.executable, "-c", RETIRING_SERVER],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=RUN_S,
        )
    text = log.read_text()
    steps = {r["step"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert "done" in steps, (proc.returncode, steps, text[-4000:])
    # asked for while the zygote was starting, the kernel's ports were picked once it was ready, a moment before the
    # fork that binds them: not seconds before (then taken by another process, every restart died on them)
    assert steps["zygote"] == {"step": "zygote", "asked": "starting", "ports": "ready", "ready": True}, steps

    restarted = steps["restarted"]
    assert len(restarted["forks"]) == 2, (restarted, text[-4000:])  # the first try and the restarter's second
    assert not restarted["forked"] and restarted["result"] == ["ok", "42\n"], restarted  # then the usual way
    assert restarted["retired"] == [restarted["first_zygote"]], restarted
    ended = re.findall(
        r"kernel \S+ \(pid (\d+)\) ended ([\d.]+) s after its fork, not stopped by its server: (.+)", text
    )
    assert [(int(pid), how) for pid, _, how in ended] == [(pid, "exit code 3") for pid in restarted["forks"]], text
    assert all(float(seconds) < 10 for _, seconds, _ in ended), ended
    why = "its last 2 kernels died within 10 s of their fork, the last: exit code 3"
    assert f"the zygote (pid {restarted['first_zygote']}) is retired: {why}" in text, text[-4000:]
    assert f"started the usual way: the zygote cannot serve it: it does not serve ({why})" in text, text[-4000:]
    assert "retired: it forks no more kernels" in text, text[-4000:]  # the zygote's own line

    later = steps["later"]
    assert later["first_zygote_exit"] is not None, later  # no kernel of its own left: it exited
    assert later["ready"] and later["zygote"] != restarted["first_zygote"], later
    assert later["forked"] and later["result"] == ["ok", f"{later['zygote']}\n"], later  # forked from the new one

    # the classroom's load report counts them from the same lines (scripts/bench_hub.py)
    counted = scripts.load("scripts/bench_hub.py").warm_kernel_lines(text)
    assert (counted["ended"], counted["ended_how"], counted["retired"]) == (2, ["exit code 3"], 1), counted
    assert counted["forked"] == 3 and counted["usual"] == 1, counted


def test_a_kernels_ports_are_held_from_their_pick_until_the_kernel_binds_them():
    """The provisioner picks a kernel's five ports and holds them until the kernel binds them: in between, a socket
    that does not ask to reuse a port is refused each one (and the machine hands none of them to a bind to port 0:
    tests/test_hub.py shows it for the same helper), while ZeroMQ binds each as the kernel does. They are in
    jupyter_client's port cache while the kernel may use them, and given back when it is gone for good."""
    import asyncio
    import errno
    import socket

    import zmq
    from jupyter_client.connect import LocalPortCache

    from twoprim.learner.progress import _warm_kernel_manager

    km = _warm_kernel_manager()
    asyncio.run(km._async_pre_start_kernel())  # the provisioner's pre_launch: the ports picked, the connection file
    try:
        names = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")
        ports = [getattr(km, name) for name in names]
        assert len(set(ports)) == 5 and all(ports), ports
        assert set(ports) <= LocalPortCache.instance().currently_used_ports
        assert json.loads(Path(km.connection_file).read_text())["shell_port"] == km.shell_port
        for port in ports:
            with socket.socket() as plain, pytest.raises(OSError) as taken:
                plain.bind((km.ip, port))
            assert taken.value.errno == errno.EADDRINUSE, (port, taken.value)
        context, bound = zmq.Context(), []
        try:
            for port in ports:  # as ipykernel binds them
                sock = context.socket(zmq.ROUTER)
                sock.bind(f"tcp://{km.ip}:{port}")
                bound.append(sock)
        finally:
            for sock in bound:
                sock.close(linger=0)
            context.term()
        assert km.provisioner is not None
        asyncio.run(km.provisioner.cleanup(restart=False))
        assert not set(ports) & LocalPortCache.instance().currently_used_ports
    finally:
        km.cleanup_connection_file()
