"""Every wait ends: the kernel client of `scripts/bench_hub.py` (the hub-load tests run cells with it) against kernels
that keep its websocket alive but never answer, and against a real kernel restarted under it.

- A fake kernel server on loopback (tornado, what jupyter_server is built on, in a thread of the test) that pings
  every 0.2 s: one loses the cell's IOPub output and idle status (the execute_reply comes), one chatters with
  messages for other requests, one never answers kernel_info on IOPub. The client fails within its bound, saying
  what it waited for, since when and what it last saw; and a fake whose first IOPub messages are lost (a
  subscription not yet live) is waited out before the cell runs.
- A real `jupyter server` (the course environment's, loopback, a token, no extensions): its kernel killed while it
  runs a cell, as the hub's memory limit kills a runaway's, the server's restarter starting it again, and the
  client's first cell on a new websocket right after: its output arrives every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from . import scripts
from .servers import BIN, free_port

bench = scripts.load("scripts/bench_hub.py")

PING_S = 0.2


# --- a fake kernel server ----------------------------------------------------------------------------------------


def _message(kind: str, channel: str, parent: dict, content: dict) -> str:
    return json.dumps(
        {
            "header": {
                "msg_id": secrets.token_hex(8),
                "msg_type": kind,
                "session": "fake",
                "username": "",
                "version": "5.3",
                "date": "",
            },
            "msg_type": kind,
            "parent_header": parent["header"],
            "metadata": {},
            "channel": channel,
            "buffers": [],
            "content": content,
        }
    )


class Fake:
    """How the fake kernel answers: `iopub_lost` IOPub messages dropped first (a subscription not yet live),
    `info_on_iopub`: kernel_info's busy/idle on IOPub at all, `output`: a cell's stream and idle status on IOPub,
    `chatter`: messages for another request every 0.05 s."""

    def __init__(self, *, iopub_lost: int = 0, info_on_iopub: bool = True, output: bool = True, chatter: bool = False):
        self.iopub_lost, self.info_on_iopub, self.output, self.chatter = iopub_lost, info_on_iopub, output, chatter
        self.requests: list[str] = []


@contextlib.contextmanager
def fake_kernel(fake: Fake):
    """A kernel channels websocket at ws://127.0.0.1:PORT/api/kernels/fake/channels answering as `fake` says, its
    tornado IOLoop in a thread; yields the URL."""
    import tornado.httpserver
    import tornado.ioloop
    import tornado.netutil
    import tornado.web
    import tornado.websocket

    other = {"header": {"msg_id": "someone-else", "msg_type": "execute_request"}}

    class Channels(tornado.websocket.WebSocketHandler):
        def open(self, kernel_id):
            if fake.chatter:
                self.chatter = tornado.ioloop.PeriodicCallback(
                    lambda: self.write_message(
                        _message("stream", "iopub", other, {"name": "stdout", "text": "not yours\n"})
                    ),
                    50,
                )
                self.chatter.start()

        def on_close(self):
            if fake.chatter:
                self.chatter.stop()

        def iopub(self, kind: str, parent: dict, content: dict) -> None:
            if fake.iopub_lost > 0:
                fake.iopub_lost -= 1
                return
            self.write_message(_message(kind, "iopub", parent, content))

        def on_message(self, message):
            msg = json.loads(message)
            kind = msg["header"]["msg_type"]
            fake.requests.append(kind)
            if kind == "kernel_info_request":
                if fake.info_on_iopub:
                    self.iopub("status", msg, {"execution_state": "busy"})
                self.write_message(_message("kernel_info_reply", "shell", msg, {"status": "ok"}))
                if fake.info_on_iopub:
                    self.iopub("status", msg, {"execution_state": "idle"})
            elif kind == "execute_request":
                if fake.output:
                    self.iopub("status", msg, {"execution_state": "busy"})
                    self.iopub("stream", msg, {"name": "stdout", "text": "out\n"})
                self.write_message(_message("execute_reply", "shell", msg, {"status": "ok"}))
                if fake.output:
                    self.iopub("status", msg, {"execution_state": "idle"})

    started = threading.Event()
    box: dict = {}

    def serve():
        asyncio.set_event_loop(asyncio.new_event_loop())
        app = tornado.web.Application(
            [(r"/api/kernels/([^/]+)/channels", Channels)], websocket_ping_interval=PING_S, websocket_ping_timeout=0
        )
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        server = tornado.httpserver.HTTPServer(app)
        server.add_sockets(sockets)
        box.update(loop=tornado.ioloop.IOLoop.current(), port=sockets[0].getsockname()[1], server=server)
        started.set()
        box["loop"].start()
        server.stop()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10), "the fake kernel server did not start within 10 s"
    try:
        yield f"ws://127.0.0.1:{box['port']}/api/kernels/fake/channels"
    finally:
        box["loop"].add_callback(box["loop"].stop)
        thread.join(timeout=10)
        assert not thread.is_alive(), "the fake kernel server did not stop within 10 s"


def _pings(message: str) -> int:
    found = re.search(r"(\d+) pings from the server", message)
    assert found, message
    return int(found.group(1))


def test_a_cell_whose_iopub_output_is_lost_fails_within_its_bound_naming_the_idle_status():
    """The hub's hang: the execute_reply comes on shell, the output and the idle status never come on IOPub, and
    the server pings all along (a recv that answers pings never times out by itself)."""
    with fake_kernel(Fake(output=False)) as url:
        kernel = bench.Kernel.at(url, timeout=2)
        started = time.monotonic()
        with pytest.raises(bench.StepError) as failure:
            kernel.execute("print('restarted')")
        took = time.monotonic() - started
        kernel.close()
    message = str(failure.value)
    assert took < 5, f"the 2 s bound took {took:.1f} s: {message}"
    assert message.startswith("the cell `print('restarted')`: waited 2.0 s (bound 2 s, since "), message
    assert "for its idle status on IOPub" in message and "its execute_reply came (ok, " in message, message
    assert "no output" in message and "last seen: execute_reply (shell), " in message, message
    assert _pings(message) >= 5, message  # pinged all along: the bound held through the pings


def test_messages_for_other_requests_do_not_extend_the_bound():
    """A kernel that chatters on IOPub (another client's cell printing every 0.05 s) but never answers this cell:
    every message ends a read, none moves the deadline."""
    with fake_kernel(Fake(output=False, chatter=True)) as url:
        kernel = bench.Kernel.at(url, timeout=2)
        started = time.monotonic()
        with pytest.raises(bench.StepError) as failure:
            kernel.execute("x = 1")
        took = time.monotonic() - started
        kernel.close()
    message = str(failure.value)
    assert took < 5, f"the 2 s bound took {took:.1f} s: {message}"
    assert "for its idle status on IOPub" in message, message
    assert "last seen: stream (iopub, for another request), " in message, message
    count = re.search(r"; (\d+) messages", message)
    assert count and int(count.group(1)) >= 20, message


def test_a_kernel_whose_iopub_never_answers_kernel_info_is_not_ready_within_its_bound():
    """kernel_info is answered on shell, never on IOPub (a subscription that never comes up): the client nudges
    again every 0.5 s, then fails saying so, before sending any cell."""
    fake = Fake(info_on_iopub=False)
    with fake_kernel(fake) as url:
        started = time.monotonic()
        with pytest.raises(bench.StepError) as failure:
            bench.Kernel.at(url, timeout=2)
        took = time.monotonic() - started
    message = str(failure.value)
    assert took < 5, f"the 2 s bound took {took:.1f} s: {message}"
    assert message.startswith("the kernel's readiness: waited 2.0 s (bound 2 s, since "), message
    assert "for a kernel_info_reply on shell and an IOPub status for it" in message, message
    assert "a kernel_info_reply, no IOPub status for any" in message, message
    assert "execute_request" not in fake.requests and fake.requests.count("kernel_info_request") >= 3, fake.requests


def test_a_subscription_not_yet_live_is_waited_out_before_the_first_cell():
    """The first IOPub messages are lost (a fresh subscription): kernel_info is sent again until IOPub answers,
    and only then the cell, whose output arrives."""
    fake = Fake(iopub_lost=5)
    with fake_kernel(fake) as url:
        kernel = bench.Kernel.at(url, timeout=10)
        assert kernel.execute("print('out')") == ("ok", "out\n")
        kernel.close()
    assert fake.requests[-1] == "execute_request" and fake.requests.count("kernel_info_request") >= 3, fake.requests


# --- a real Jupyter server, its kernel restarted under the client --------------------------------------------------

START_S = 60  # a bare jupyter_server starts in ~2 s alone, more on two busy cores
RUNS = 20


class JupyterServer:
    """`jupyter server` from the course environment on a loopback port, with a token, no browser and no extension,
    in `root`. Its restarter checks the kernel every 0.2 s (3 s by default), restarts it as often as needed, and
    always on new ports (as it does for a kernel that dies within `stable_start_time` of its start: the hub's
    runaway); its websockets ping every 0.2 s, as the hub's servers keep theirs alive."""

    def __init__(self, root: Path):
        self.port, self.token = free_port(), secrets.token_hex(16)
        config = root / "server_config.json"
        config.write_text(
            json.dumps(
                {
                    "ServerApp": {"tornado_settings": {"ws_ping_interval": int(PING_S * 1000)}},
                    "KernelRestarter": {"time_to_dead": 0.2, "restart_limit": 10 * RUNS, "stable_start_time": 3600},
                }
            )
        )
        self.log_path = root / "server.log"
        self.log = self.log_path.open("w")
        work = root / "work"
        work.mkdir()
        self.proc = subprocess.Popen(
            [
                str(BIN / "jupyter-server"),
                "--ip=127.0.0.1",
                f"--port={self.port}",
                "--ServerApp.port_retries=0",
                "--no-browser",
                "--allow-root",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={work}",
                f"--config={config}",
            ],
            cwd=work,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "JUPYTER_NO_CONFIG": "1", "JUPYTER_RUNTIME_DIR": str(root / "runtime")},
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline, since = time.monotonic() + START_S, time.strftime("%H:%M:%S")
        while True:
            try:
                self.api("GET", "/api/status", timeout=2)
                return
            except OSError as err:
                last = f"{type(err).__name__}: {err}"
            assert self.proc.poll() is None, f"jupyter server exited ({self.proc.returncode}):\n{self.text()}"
            assert time.monotonic() < deadline, (
                f"jupyter server did not answer /api/status within {START_S} s (since {since}; last: {last}):\n"
                f"{self.text()}"
            )
            time.sleep(0.2)

    def api(self, method: str, path: str, body: dict | None = None, timeout: float = 30) -> Any:
        request = urllib.request.Request(
            self.url + path,
            method=method,
            headers={"Authorization": f"token {self.token}"},
            data=None if body is None else json.dumps(body).encode(),
        )
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            raw = answer.read()
            return json.loads(raw) if raw else None

    def text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


def kernel_process(kernel_id: str, other_than: int | None = None, within_s: float = 30) -> psutil.Process:
    """The process of kernel `kernel_id` (its connection file is named after it), other than pid `other_than`."""
    deadline, since = time.monotonic() + within_s, time.strftime("%H:%M:%S")
    while True:
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if proc.info["pid"] != other_than and any(
                arg.endswith(f"kernel-{kernel_id}.json") for arg in proc.info["cmdline"] or []
            ):
                return proc
        assert time.monotonic() < deadline, (
            f"no process for kernel {kernel_id} (other than {other_than}) within {within_s} s, since {since}"
        )
        time.sleep(0.05)


def killed_while_busy(server: JupyterServer, kernel_id: str, channels: str, header: tuple[str, ...], pid: int) -> int:
    """The kernel killed while it runs a cell (the hub's memory limit killing a runaway's), and restarted by the
    server's restarter; the new kernel's pid."""
    busy = bench.Kernel.at(channels, timeout=30, header=header)
    busy._send(
        "execute_request",
        {
            "code": "import time; time.sleep(60)",
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        bench.Waiting("a cell that sleeps", 10),
    )
    deadline, since = time.monotonic() + 20, time.strftime("%H:%M:%S")
    while server.api("GET", f"/api/kernels/{kernel_id}")["execution_state"] != "busy":
        assert time.monotonic() < deadline, f"the kernel was not busy within 20 s (since {since})"
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    busy.close()
    return kernel_process(kernel_id, other_than=pid).pid


def test_a_restarted_kernels_first_output_arrives(tmp_path):
    """RUNS times: the kernel killed while busy and restarted by the server on new ports (the hub's runaway), then a
    new channels websocket after a random 0-1.2 s (while the kernel boots, and after: the server still calls it busy
    and skips its own kernel_info nudge) and `print('restarted')`; then once through the REST API's restart. The
    output must arrive every time: the client waits for a kernel_info reply and its IOPub status first. (The old
    client lost the output about once in 100 such runs, then waited without end.)"""
    import random

    pick = random.Random(42)
    server = JupyterServer(tmp_path)
    try:
        kernel_id = server.api("POST", "/api/kernels", {"name": "python3"})["id"]
        channels = f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels"
        header = (f"Authorization: token {server.token}",)
        pid = kernel_process(kernel_id).pid
        got, states = [], []
        for _ in range(RUNS):
            pid = killed_while_busy(server, kernel_id, channels, header, pid)
            time.sleep(pick.uniform(0, 1.2))
            states.append(server.api("GET", f"/api/kernels/{kernel_id}")["execution_state"])
            kernel = bench.Kernel.at(channels, timeout=30, header=header)
            try:
                got.append(kernel.execute("print('restarted')"))
            finally:
                kernel.close()
        server.api("POST", f"/api/kernels/{kernel_id}/restart")
        kernel = bench.Kernel.at(channels, timeout=30, header=header)
        got.append(kernel.execute("print('restarted')"))
        kernel.close()
    finally:
        server.stop()
    assert got == [("ok", "restarted\n")] * (RUNS + 1), (got, states)
    assert "busy" in states, f"the server never skipped its nudge (its state at each connect: {states})"


# --- other waits that ran out of bounds before -------------------------------------------------------------------


def test_a_jupyterlab_that_never_listens_is_stopped_with_a_message(monkeypatch, capsys):
    """`./course lab` waited without end for a server that started but never listened; now READY_S bounds it."""
    from twoprim.classroom import lab

    monkeypatch.setattr(lab, "READY_S", 1)
    monkeypatch.setattr(lab, "install_settings", lambda *args: None)
    monkeypatch.setattr(
        lab,
        "command",
        lambda args: ([sys.executable, "-c", "import time; print('starting', flush=True); time.sleep(60)"], []),
    )
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    started = time.monotonic()
    try:
        code = lab.run([])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    took, out = time.monotonic() - started, capsys.readouterr().out
    assert code == 1 and took < 10, (code, took, out)
    assert "starting" in out and "error: JupyterLab did not listen within 1 s (started " in out, out
    assert re.search(r"it wrote no \S+/jpserver-\d+\.json\); stopping it", out), out


def test_a_warm_grader_that_keeps_talking_but_never_answers_is_bounded_as_a_whole(monkeypatch, tmp_path):
    """A warm grader that sends a cell event every 0.1 s and never a result: each read gets data, so a per-read
    timeout never fires; the self-grade as a whole is bounded (GRADE_TIMEOUT_S) and says what it last heard."""
    import socket

    from twoprim.learner import selfgrade

    path = tmp_path / "grader.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    stop = threading.Event()

    def talk():
        conn, _ = server.accept()
        with conn:
            conn.settimeout(5)
            conn.recv(65536)  # the request
            done = 0
            while not stop.is_set():
                done += 1
                with contextlib.suppress(OSError):
                    conn.sendall(
                        json.dumps({"event": "cell", "grade_id": "x", "done": done, "total": 99}).encode() + b"\n"
                    )
                time.sleep(0.1)

    thread = threading.Thread(target=talk, daemon=True)
    thread.start()
    monkeypatch.setattr(selfgrade, "grader_socket", lambda: path)
    monkeypatch.setattr(selfgrade, "GRADE_TIMEOUT_S", 1)
    started = time.monotonic()
    try:
        events = list(selfgrade._warm_events({"assignment": "ex01_dot"}, start=False))
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
    took = time.monotonic() - started
    assert took < 5, took
    *cells, last = events
    assert len(cells) >= 5 and all(e["event"] == "cell" for e in cells), events
    assert last["event"] == "error" and last["message"].startswith("the warm grader gave no result within 1 s "), last
    assert f"last event: cell {len(cells)}/99" in last["message"], last


def test_a_cold_self_grade_whose_child_keeps_the_pipe_open_is_bounded(monkeypatch, tmp_path):
    """The cold self-grade's subprocess, and a process it started that holds its output open (as a kernel does),
    both silent after a first event: the self-grade ends at GRADE_TIMEOUT_S with an error event, without waiting for
    the pipe to close."""
    import types

    from twoprim.learner import selfgrade

    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho \'{"event": "start", "tests": []}\'\nsleep 30 &\nexec sleep 30\n')
    fake.chmod(0o755)
    monkeypatch.setattr(selfgrade, "sys", types.SimpleNamespace(executable=str(fake)))  # what _cold_events starts
    monkeypatch.setattr(selfgrade, "GRADE_TIMEOUT_S", 1)
    started = time.monotonic()
    events = list(selfgrade._cold_events({"assignment": "ex01_dot", "notebook": "/nb.ipynb", "root": "/course"}))
    took = time.monotonic() - started
    assert took < 5, (took, events)
    assert [e["event"] for e in events] == ["start", "error"], events
    assert events[1]["message"].startswith("the self-grade gave no result within 1 s (started "), events
    assert "last event: start" in events[1]["message"], events


def test_a_pages_polls_keep_coming_while_it_is_open_and_stop_when_it_closes():
    """bench_hub's JupyterLab page (the hub-load test's students): it asks for the running kernels and sessions every
    period while open, with the student's server and token; once closed, no request follows."""
    import http.server

    seen: list[tuple[str, str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # http.server calls it by this name
            seen.append((self.path, self.headers.get("Host", ""), self.headers.get("Authorization", "")))
            body = b"[]"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002 - http.server's parameter name: quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    c = bench.Client(f"http://127.0.0.1:{port}", port, "alice")
    c.server.headers["Authorization"] = "token t0k"
    try:
        with bench.LabPage(c, 0.2) as page:
            time.sleep(1.1)
        stopped = len(seen)
        time.sleep(0.6)
    finally:
        server.shutdown()
        server.server_close()
    assert len(seen) == stopped, "a request after the page closed"
    paths = [p for p, _, _ in seen]
    assert paths.count("/user/alice/api/kernels") >= 3 and paths.count("/user/alice/api/sessions") >= 3, paths
    assert {(h, a) for _, h, a in seen} == {(f"alice.localhost:{port}", "token t0k")}, seen
    assert page.polls == len(seen) and page.failed == 0


def test_a_page_whose_server_never_answers_closes_within_its_bound():
    """A server that accepts and never answers: each poll gives up at its bound, counted as failed, and closing the
    page does not wait for an answer."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepted by the kernel's backlog, never read nor answered
    port = listener.getsockname()[1]
    c = bench.Client(f"http://127.0.0.1:{port}", port, "bob")
    try:
        with bench.LabPage(c, 0.2) as page:
            time.sleep(1.0)
            closing = time.monotonic()
        took = time.monotonic() - closing
    finally:
        listener.close()
    assert took < 1.5, took  # within one poll's bound (0.2 s per URL), far under close()'s own limit
    assert page.polls == 0 and page.failed >= 2, (page.polls, page.failed)


def test_no_page_polls_nothing():
    c = bench.Client("http://127.0.0.1:9", 9, "carol")
    with bench.LabPage(c, None) as page:
        pass
    assert page.thread is None and page.polls == page.failed == 0
