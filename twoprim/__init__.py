"""Two Primitives: the course package, laid out by who runs the code (docs/guides/architecture.md, "Module map").

    config                       the course's one configuration: COURSE_ID, the repository root, its folders
    core/        layer 1         recording, checks, verdicts, guards, cases, timing, notebooks and the catalog
    topics/      layer 2         one module per lesson: its reference specs, measurements, figures, explorers
    assignments/ layer 3         one module per assignment (`ex01_dot.py`): its cases, checks and hints
    learner/     layer 4         what runs for the learner: hints, self-checks, progress, state, due dates
    grading/, exchange/, classroom/, analytics/, course    the instructor's side; never imported by layers 1-4

Notebooks name modules by their short public names, the same in every notebook a student already holds:
`from twoprim import ex01`, `from twoprim.hints import hints`, `twoprim.checks`. Each short name is the very
module object of its home (`twoprim.ex01 is twoprim.assignments.ex01_dot`), resolved on first import by `_Alias`
below; `public_names()` lists them. Modules load on first use: importing the package alone imports no torch, so
nbgrader's configuration and JupyterLab start fast.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path

from twoprim.config import ASSIGNMENT_ID

__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent

# short public name -> its home in the package (assignments `exNN` are found on disk: see _home)
PUBLIC = {
    "record": "core.record",
    "checks": "core.checks",
    "verdicts": "core.verdicts",
    "failures": "core.failures",
    "guards": "core.guards",
    "cases": "core.cases",
    "timing": "core.timing",
    "backends": "core.backends",
    "notebooks": "core.notebooks",
    "catalog": "core.catalog",
    "reference": "topics.dot_product",
    "gemm": "topics.gemm",
    "layers": "topics.layers_as_gemms",
    "conv": "topics.convolution",
    "attention": "topics.attention",
    "compiler": "topics.inside_torch_compile",
    "mlx_tools": "topics.mlx",
    "triton_tools": "topics.triton_gemm",
    "triton_compile": "topics.triton_compiled",
    "flash_tools": "topics.flash_attention",
    "xla_tools": "topics.xla",
    "explorers": "topics.explorers",
    "plots": "topics.plots",
    "hints": "learner.hints",
    "progress": "learner.progress",
    "state": "learner.state",
    "selfcheck": "learner.selfcheck",
    "deadlines": "learner.deadlines",
    "selfgrade": "learner.selfgrade",
    "audit": "grading.audit",
    "sandbox": "grading.sandbox",
    "forkserver": "grading.forkserver",
    "nbgrader_cli": "grading.nbgrader_cli",
    "hub": "classroom.hub",
    "hub_checks": "classroom.hub_checks",
    "hub_config": "classroom.hub_config",
    "lab": "classroom.lab",
}
SUBPACKAGES = (
    "config",
    "core",
    "topics",
    "assignments",
    "learner",
    "grading",
    "exchange",
    "classroom",
    "analytics",
    "course",
)


def assignment_modules() -> dict[str, str]:
    """`ex01` -> `ex01_dot`: every assignment module on disk (its id's form: `config.ASSIGNMENT_ID`), listed anew
    each call (an author's new one counts)."""
    found = {}
    for path in sorted((_HERE / "assignments").glob("ex[0-9][0-9]*_*.py")):
        match = ASSIGNMENT_ID.fullmatch(path.stem)
        if match:
            found[match.group(1)] = path.stem
    return found


def _home(short: str) -> str | None:
    """The full name of the module a short public name stands for, or None."""
    if short in PUBLIC:
        return f"{__name__}.{PUBLIC[short]}"
    full = assignment_modules().get(short)
    return f"{__name__}.assignments.{full}" if full else None


def public_names() -> frozenset[str]:
    """Every name a notebook may import from the package: the short names, the assignments and the subpackages."""
    return frozenset(PUBLIC) | frozenset(assignment_modules()) | frozenset(SUBPACKAGES)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import twoprim.ex01` binds the module `twoprim.assignments.ex01_dot` itself (one module, one state)."""

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, short = fullname.rpartition(".")
        if prefix != __name__ or _home(short) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        # the import system returns whatever sys.modules holds under the name once this returns
        home = _home(module.__name__.rpartition(".")[2])
        assert home is not None  # (find_spec gives a spec only to a name with a home)
        sys.modules[module.__name__] = importlib.import_module(home)


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.append(_Alias())

__all__ = sorted(public_names())


def __getattr__(name: str):
    if name in public_names():
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
