"""The environment: one place holds the pins, environment.yml agrees with it, setup is not redone."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import yaml
from packaging.requirements import Requirement

from twoprim.config import ROOT


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pins() -> dict[str, Requirement]:
    project = _pyproject()["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {str(Requirement(r)): Requirement(r) for r in reqs}


def _key(r: Requirement) -> tuple:
    return (r.name.lower(), tuple(sorted(r.extras)), str(r.specifier), str(r.marker or ""))


def test_every_dependency_is_pinned_exactly():
    loose = [str(r) for r in _pins().values() if len(r.specifier) != 1 or next(iter(r.specifier)).operator != "=="]
    assert not loose, f"pin these with == in pyproject.toml (a loose torch pulls a multi-GB CUDA build): {loose}"


def test_torch_is_the_cpu_friendly_pin():
    torch = [r for r in _pins().values() if r.name == "torch"]
    assert [str(r.specifier) for r in torch] == ["==2.13.0"]


def test_environment_yml_mirrors_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps, "environment.yml must ask for python=3.11"
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    yml = {_key(Requirement(r)) for r in pip_section if not r.startswith("-e")}
    ours = {_key(r) for r in _pins().values()}
    assert yml - ours == set(), f"pinned in environment.yml but not in pyproject.toml: {sorted(yml - ours)}"
    assert ours - yml == set(), f"pinned in pyproject.toml but not in environment.yml: {sorted(ours - yml)}"
    assert "-e ." in pip_section, "environment.yml must install the course package (-e .)"
    assert _pyproject()["project"]["requires-python"] == "==3.11.*"


def test_setup_is_not_redone_once_built():
    # `make test` built the environment before running us; asking again must find nothing to do.
    proc = subprocess.run(["make", "-q", ".venv/.installed"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"make would rebuild .venv although it is up to date:\n{proc.stdout}{proc.stderr}"
    dry = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert "pip install" not in dry, f"make test would reinstall packages:\n{dry}"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / "README.md").read_text()
    lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "make test" in lines, ".ci/run must run exactly the README's `make test`"


def test_the_course_command_is_on_the_environments_path():
    """`course progress` for a classroom student (./course hub puts the environment's bin/ first on every server's
    PATH) or a learner with the environment activated, without knowing where the course folder is."""
    proc = subprocess.run(
        ["course", "progress", "--help"],
        env={"PATH": f"{ROOT / '.venv' / 'bin'}:/usr/bin:/bin"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "usage: course progress" in proc.stdout, proc


def test_nbformat_imports_without_building_iri_parsers():
    # jsonschema 4.24 and later import rfc3987-syntax whenever it is installed, and it compiles ~35 Earley parsers
    # (lark) at import: 1.3-2 s in every process that imports nbformat, each grading worker and ./course command
    # among them. The pinned jsonschema must not pull it in, whatever else is installed.
    code = (
        "import sys, nbformat, jsonschema, nbgrader.api; "
        "print(sorted(m for m in ('rfc3987_syntax', 'lark') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert proc.stdout.strip() == "[]", f"importing nbformat and nbgrader also imported {proc.stdout.strip()}"
