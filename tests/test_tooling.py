"""The code's checks, as `make lint` runs them: ruff's lint (import order included) and formatting, and pyright's
types, each on the whole scope of pyproject.toml (the package, tests, scripts, the site's Python, the template); and
the pre-commit configuration that runs them at each commit with `./course clean`.

Cost on 2 busy cores: pyright 30-45 s (one process, the whole scope); ruff's two checks and pre-commit's validation
about 0.1 s each."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from twoprim.config import ROOT

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


def test_pyright_passes():
    proc = _run(PYRIGHT_ARGV, timeout=200)  # within pytest-timeout's 240 s, to fail saying what it waited for
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
