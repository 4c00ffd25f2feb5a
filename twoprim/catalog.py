"""What the course holds, discovered from its files rather than kept in lists by hand.

- lessons: `lessons/NN_*.ipynb`; assignments: every `solutions/<id>/<id>.ipynb` (see `notebooks`);
- an assignment's checks module: `twoprim/exNN.py` for assignment `exNN_<name>`;
- its hints: the `HINTS` table in that module;
- the course's modules a notebook may name (`ex01`, `checks`, `layers`, ...): every module of this package.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from functools import cache
from pathlib import Path
from types import ModuleType

from .notebooks import ROOT, assignments

__all__ = ["package_modules", "checks_module_name", "checks_modules", "checks_module", "assignment_ids", "hints_of", "all_hints"]

_PACKAGE = Path(__file__).resolve().parent
_ASSIGNMENT = re.compile(r"^(ex\d\d)_\w+$")


def package_modules() -> frozenset[str]:
    """Names of this package's modules and subpackages (`ex01`, `checks`, `grading`, ...), listed anew each time (a
    folder listing): a grading worker that outlives an author's new `exNN.py` still knows it."""
    return frozenset(m.name for m in pkgutil.iter_modules([str(_PACKAGE)]))


def checks_module_name(aid: str) -> str:
    """`ex01_dot` -> `ex01`: the module that holds the assignment's checks and hints."""
    match = _ASSIGNMENT.match(aid)
    if not match:
        raise ValueError(f"{aid!r} is not an assignment id: ids are exNN_name, e.g. ex01_dot")
    return match.group(1)


def checks_modules() -> list[str]:
    """Every assignment's checks module in this package (`ex01`, `ex02`, ...)."""
    return sorted(m for m in package_modules() if re.fullmatch(r"ex\d\d", m))


def checks_module(aid: str) -> ModuleType:
    """The imported checks module of assignment `aid` (`twoprim.ex01` for `ex01_dot`)."""
    name = checks_module_name(aid)
    if name not in package_modules():
        raise LookupError(f"assignment {aid} has no checks module: create twoprim/{name}.py (see the README's "
                          f"'Writing an assignment')")
    return importlib.import_module(f"{__package__}.{name}")


def assignment_ids(root: Path | None = None) -> list[str]:
    """Assignment ids with a solutions notebook, in order (`notebooks.assignments`)."""
    return assignments(root or ROOT)


def _hints_in(path: Path) -> dict[str, tuple[str, ...]]:
    """The `HINTS` literal of one checks module's source, {} when it defines none."""
    for node in ast.parse(path.read_text()).body:
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0] if isinstance(node, ast.Assign) \
            else None
        if isinstance(target, ast.Name) and target.id == "HINTS":
            return ast.literal_eval(node.value)
    return {}


@cache
def all_hints() -> dict[str, tuple[str, ...]]:
    """Every assignment's hints, from the package's own checks modules (`twoprim/exNN.py`): found where only the
    package is, as in a graded kernel's sandbox or a learner's copy without solutions/."""
    return {gid: texts for path in sorted(_PACKAGE.glob("ex[0-9][0-9].py")) for gid, texts in _hints_in(path).items()}


@cache
def hints_of(aid: str) -> dict[str, tuple[str, ...]]:
    """The `HINTS` table of assignment `aid`'s checks module, read from its source as a literal: showing a hint in
    one assignment never imports the others' modules (MLX, Dynamo). {} when the module defines none."""
    path = _PACKAGE / f"{checks_module_name(aid)}.py"
    if not path.is_file():
        return {}
    table = _hints_in(path)
    wrong = [gid for gid in table if not gid.startswith(f"{aid}-")]
    if wrong:
        raise ValueError(f"{path.name}: hint ids {wrong} do not start with {aid}-")
    return table
