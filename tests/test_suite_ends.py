"""The suite always ends: a test that hangs is stopped by the configured per-test limit (pyproject.toml's
`timeout`, pytest-timeout), reported with its stack, and every other test of the run still runs and reports.

Shown on a throwaway project this test builds, with the suite's own pytest configuration (only the limit is made
short), run as `make test` runs the suite: two xdist processes, a file at a time.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

from twoprim.config import ROOT

LIMIT_S = 3

HANGS = '''
import socket
import threading
import time


def test_passes_before():
    assert 1 + 1 == 2


def test_reads_from_a_peer_that_keeps_the_connection_alive_but_never_answers():
    """The hang that stopped CI: a read loop with no deadline, on a peer that sends keep-alives forever."""
    server = socket.create_server(("127.0.0.1", 0))

    def keep_alive():
        conn, _ = server.accept()
        while True:
            conn.sendall(b"p")
            time.sleep(0.1)

    threading.Thread(target=keep_alive, daemon=True).start()
    client = socket.create_connection(server.getsockname(), timeout=1.0)  # each read bounded, the loop not
    reply = b""
    while b"reply" not in reply:
        reply += client.recv(1)


def test_passes_after():
    assert "still" in "the suite still runs"
'''

OTHER = """
def test_in_another_file():
    assert sum(range(4)) == 6
"""


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _suite_options() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_the_suite_has_a_per_test_limit_that_raises_inside_the_test():
    options = _suite_options()
    assert 0 < options["timeout"] <= 300, options.get("timeout")
    assert options["timeout_method"] == "signal"  # fixtures torn down, the worker goes on to the next test


def test_a_hanging_test_is_stopped_with_its_stack_and_the_rest_of_the_suite_reports(tmp_path: Path):
    options = {**_suite_options(), "timeout": LIMIT_S, "testpaths": ["tests"]}
    options["addopts"] = options["addopts"].replace("--durations=25", "")  # a short report to read
    ini = "\n".join(f"{key} = {_toml_value(value)}" for key, value in options.items())
    (tmp_path / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\n{ini}\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_hangs.py").write_text(textwrap.dedent(HANGS))
    (tmp_path / "tests" / "test_other.py").write_text(textwrap.dedent(OTHER))
    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--numprocesses=2",
            "--dist=loadfile",
            "--no-loadscope-reorder",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    assert time.monotonic() - started < 60, out[-3000:]
    assert f"Timeout (>{float(LIMIT_S)}s) from pytest-timeout" in out, out[-3000:]
    # the stack says where it hung: the read loop, in the test's own file
    assert "reply += client.recv(1)" in out and "test_hangs.py" in out, out[-3000:]
    assert (
        "FAILED tests/test_hangs.py::test_reads_from_a_peer_that_keeps_the_connection_alive_but_never_answers" in out
    ), out[-3000:]
    assert "1 failed, 3 passed" in out, out[-3000:]


def test_the_files_named_to_run_first_exist_each_once_and_are_ordered_first():
    """conftest.LONG_FIRST orders the files `make test` hands out: a misspelt or removed name would silently leave
    its file to run in name order, where a long one idles the other process at the end."""
    from .conftest import LONG_FIRST, pytest_collection_modifyitems

    present = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    assert not set(LONG_FIRST) - present, f"named in LONG_FIRST but not in tests/: {set(LONG_FIRST) - present}"
    assert len(set(LONG_FIRST)) == len(LONG_FIRST), "a file is named twice in LONG_FIRST"

    class Item:  # what the hook reads of a collected test: its file
        def __init__(self, name: str):
            self.path = ROOT / "tests" / name

    items = [Item(name) for name in sorted(present)]
    pytest_collection_modifyitems(items)
    assert [item.path.name for item in items[: len(LONG_FIRST)]] == list(LONG_FIRST)
    assert [item.path.name for item in items[len(LONG_FIRST) :]] == sorted(present - set(LONG_FIRST))
