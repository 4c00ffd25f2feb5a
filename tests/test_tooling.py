"""The code's checks, as `make lint` runs them: ruff's lint (import order included) and formatting, and pyright's
types, each on the whole scope of pyproject.toml (the package, tests, scripts, the site's Python, the template); and
the pre-commit configuration that runs them at each commit with `./course clean`.

Cost: pyright ~60 s of one core and ~80 CPU-seconds alone (one process, the whole scope), so a whole run of the suite
starts it with the session at the lowest priority, beside the tests (tests/background.py); ruff's two checks and
pre-commit's validation about 0.1 s each."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import types
from collections import Counter
from pathlib import Path

import pytest
import yaml

from twoprim.config import ROOT

from . import background

RUFF = Path(sys.executable).parent / "ruff"
PRE_COMMIT = Path(sys.executable).parent / "pre-commit"
PYRIGHT = ROOT / "node_modules" / ".bin" / "pyright"
# -p: pyproject.toml's [tool.pyright], named; without it pyright takes a pyrightconfig.json from any folder above the
# checkout instead (one left in /tmp made a clone there check 0 files)
PYRIGHT_ARGV = [str(PYRIGHT), "-p", str(ROOT), "--outputjson"]


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """`argv` from the repository root, as `make lint` runs it; a tool that hangs fails the test, saying which."""
    if not Path(argv[0]).exists():
        pytest.fail(f"{argv[0]} is missing: `make setup` installs ruff and pre-commit, `npm ci` pyright")
    try:
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(map(str, argv))}` did not finish in {timeout:.0f} s")


def _by_file(paths: list[str]) -> str:
    """Files and how many problems each has, the most first."""
    return "\n".join(f"  {path}: {n}" for path, n in Counter(paths).most_common())


def _makefile_lint_recipe() -> list[str]:
    """The commands of the Makefile's `lint` target, with $(BIN)/ and the like left as written."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index(next(line for line in lines if line.startswith("lint:")))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_ruff_check_passes():
    proc = _run([str(RUFF), "check", "--output-format", "json", "--no-cache"], timeout=120)
    problems = json.loads(proc.stdout or "[]")
    files = [str(Path(p["filename"]).relative_to(ROOT)) for p in problems]
    rules = Counter(p["code"] for p in problems)
    assert proc.returncode == 0 and not problems, (
        f"`ruff check` found {len(problems)} problems ({dict(rules.most_common())}) in:\n{_by_file(files)}\n"
        f"{proc.stderr}See them with `.venv/bin/ruff check`; `.venv/bin/ruff check --fix` fixes the safe ones "
        f"(import order among them)."
    )


def test_ruff_format_check_passes():
    proc = _run([str(RUFF), "format", "--check", "--no-cache", "--output-format", "concise"], timeout=120)
    files = re.findall(r"^(.+?):\d+:\d+: unformatted", proc.stdout, flags=re.MULTILINE)
    assert proc.returncode == 0 and not files, (
        f"`ruff format --check` would reformat {len(files)} files:\n"
        + "".join(f"  {path}\n" for path in sorted(files))
        + f"{proc.stderr}"
        f"Run `.venv/bin/ruff format` (or `.venv/bin/ruff format FILE`)."
    )


# pyright's own bound: it checks in ~60 s of one core, but took 290 s alone on this 2-core VM (12-06) while the host
# was slow to give it fresh memory (its heap grows to ~1 GB); the bound ends a hung run, not a slow one
PYRIGHT_WAIT = 540


@pytest.mark.timeout(PYRIGHT_WAIT + 60)  # past its wait, pytest-timeout's stack dump
def test_pyright_passes(request):
    # started with the session at the lowest priority (tests/background.py), or here when it was not; either way
    # within PYRIGHT_WAIT, to fail saying what it waited for
    proc = background.result("pyright", PYRIGHT_ARGV, timeout=PYRIGHT_WAIT)
    if isinstance(proc, str):
        pytest.fail(proc)
    # a run of this whole file (`make test`, `make test-fast`) reads the session's run: the suite's time counts on it
    assert proc or not background.in_scope(request.config, Path(__file__)), "the session did not start pyright"
    proc = proc or _run(PYRIGHT_ARGV, timeout=PYRIGHT_WAIT)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright did not report (exit status {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr}")
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    files = [str(Path(d["file"]).relative_to(ROOT)) for d in errors]
    first = "\n".join(
        f"  {Path(d['file']).relative_to(ROOT)}:{d['range']['start']['line'] + 1}: {d.get('rule', '')}: "
        f"{d['message'].splitlines()[0]}"
        for d in errors[:20]
    )
    assert proc.returncode == 0 and not errors, (
        f"pyright found {len(errors)} errors ({report['summary']['filesAnalyzed']} files checked) in:\n"
        f"{_by_file(files)}\nThe first ones:\n{first}\n"
        f"See them all with `node_modules/.bin/pyright` (the level and scope are [tool.pyright] in pyproject.toml)."
    )
    assert report["summary"]["filesAnalyzed"] >= 100, f"pyright checked too few files: {report['summary']}"


# The nice value the probe prints at its start, then again once it changes (or after 10 s): the wait in
# background.result raises a run to normal priority, which needs CAP_SYS_NICE (root's, unless a container drops it)
# or a nice limit (RLIMIT_NICE) of 20.
NICE_PROBE = (
    "import os, sys, time\n"
    "first = os.getpriority(os.PRIO_PROCESS, 0); print(first, flush=True)\n"
    "end = time.monotonic() + 10\n"
    "while os.getpriority(os.PRIO_PROCESS, 0) == first and time.monotonic() < end:\n"
    "    time.sleep(0.01)\n"
    "print(os.getpriority(os.PRIO_PROCESS, 0))\n"
)


def _may_raise_priority() -> bool:
    """Whether this process may lower a nice value to 0: CAP_SYS_NICE (capability 23) or RLIMIT_NICE of 20."""
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^CapEff:\s*([0-9a-f]+)$", status, flags=re.MULTILINE)
    assert found, "/proc/self/status has no CapEff line"
    effective = int(found[1], 16)
    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return bool(effective >> 23 & 1) or soft == resource.RLIM_INFINITY or soft >= 20


def _scheduling_group(pid: int) -> tuple[str, str]:
    """The CPU scheduler's group of a process: its cpu cgroup and its autogroup (one per session where the kernel has
    them; an empty file for the default one, of every session no process has started since init, as in CI)."""
    cgroups = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    # cgroup v1 names the cpu controller; v2 has a single line, "0::/path", for every controller
    cpu = [line for line in cgroups if "cpu" in line.split(":")[1].split(",") or line.startswith("0::")]
    autogroup = Path(f"/proc/{pid}/autogroup")
    return "\n".join(cpu), autogroup.read_text() if autogroup.exists() else ""


def test_a_background_run_starts_at_the_lowest_priority_and_a_test_that_waits_raises_it(tmp_path: Path):
    runs = background.Runs(tmp_path / "runs")
    runs.top.mkdir()
    argv = [sys.executable, "-c", NICE_PROBE]
    runs.start("probe", argv, tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not (runs.top / "probe" / "stdout").read_text():  # its first line, before the wait renices it
            assert time.monotonic() < deadline, "the probe printed nothing in 30 s"
            time.sleep(0.05)
        # Linux weighs nice values within a scheduling group: the run shares the tests' group, so it takes only what
        # they leave
        pid = runs.procs["probe"].pid
        assert os.getpgid(pid) == pid != os.getpgid(0)  # a group of its own, stopped as one
        assert _scheduling_group(pid) == _scheduling_group(os.getpid())
        assert background.result("other", argv, timeout=1, top=runs.top) is None  # never started: run it here
        proc = background.result("probe", argv, timeout=30, top=runs.top)
        assert isinstance(proc, subprocess.CompletedProcess), proc
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["19", "0" if _may_raise_priority() else "19"]
        # a run of another command under the same name is not taken for it
        mismatch = background.result("probe", [sys.executable, "-V"], timeout=1, top=runs.top)
        assert isinstance(mismatch, str) and "not" in mismatch and "-V" in mismatch
    finally:
        runs.stop()
    assert not runs.top.exists()


def test_a_background_run_that_does_not_finish_is_named_and_stopped_with_the_session(tmp_path: Path):
    runs = background.Runs(tmp_path / "runs")
    runs.top.mkdir()
    argv = [
        sys.executable,
        "-c",
        "import sys, time; print('still checking', file=sys.stderr, flush=True); time.sleep(60)",
    ]
    runs.start("slow", argv, tmp_path)
    proc = runs.procs["slow"]
    try:
        began = time.monotonic()
        while "still checking" not in (runs.top / "slow" / "stderr").read_text():
            assert time.monotonic() - began < 30, "the slow run wrote nothing in 30 s"
            time.sleep(0.05)
        began = time.monotonic()
        message = background.result("slow", argv, timeout=1, top=runs.top)
        assert 1 <= time.monotonic() - began < 5
        assert isinstance(message, str)
        assert "did not finish within 1 s of this test's wait" in message, message
        assert " ".join(argv) in message and f"process {proc.pid}" in message and "still checking" in message
    finally:
        runs.stop()
    assert proc.poll() == -signal.SIGKILL and not runs.top.exists()


@pytest.mark.parametrize(
    "args, keyword, expected",
    [
        (["tests"], "", True),
        (["."], "", True),
        (["tests/test_tooling.py"], "", True),
        (["tests/test_ex01.py", "tests/test_tooling.py"], "", True),
        (["tests/test_tooling.py::test_pyright_passes"], "", False),  # one test: it runs pyright itself
        (["tests/test_ex01.py"], "", False),
        (["tests"], "pyright", False),  # -k: a narrowed run
    ],
)
def test_the_session_starts_pyright_only_when_its_test_file_runs_whole(args, keyword, expected):
    option = types.SimpleNamespace(keyword=keyword, lf=False, deselect=None, collectonly=False)
    config = types.SimpleNamespace(args=args, option=option, invocation_params=types.SimpleNamespace(dir=ROOT))
    assert background.in_scope(config, ROOT / "tests" / "test_tooling.py") is expected


def test_pre_commit_config_is_valid_and_runs_the_lint_checks():
    config = ROOT / ".pre-commit-config.yaml"
    proc = _run([str(PRE_COMMIT), "validate-config", str(config)], timeout=60)
    assert proc.returncode == 0, f"pre-commit rejects {config.name}:\n{proc.stdout}{proc.stderr}"
    hooks = [hook for repo in yaml.safe_load(config.read_text())["repos"] for hook in repo["hooks"]]
    assert all(hook["language"] == "system" for hook in hooks), "every hook runs a pinned local tool (nothing fetched)"
    entries = {hook["id"]: hook["entry"] for hook in hooks}
    # the Makefile's lint commands, each run by a hook (ruff format as a hook rewrites instead of only checking)
    for command in _makefile_lint_recipe():
        tool = command.replace("$(BIN)/", ".venv/bin/").replace(" --check", "").split()
        assert any(entry.split()[: len(tool)] == tool for entry in entries.values()), (
            f"`make lint` runs `{command}` but no pre-commit hook does: {entries}"
        )
    clean = [hook for hook in hooks if hook["entry"].split()[:2] == ["./course", "clean"]]
    assert clean and clean[0].get("types") == ["jupyter"], "a hook runs `./course clean` on the staged notebooks"


def test_makefile_lint_runs_the_three_checks():
    assert _makefile_lint_recipe() == [
        "$(BIN)/ruff check",
        "$(BIN)/ruff format --check",
        "node_modules/.bin/pyright -p .",
    ]
