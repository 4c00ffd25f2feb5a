"""What the course holds, discovered from its files rather than kept in lists by hand.

- lessons: `lessons/NN_*.ipynb`; assignments: every `solutions/<id>/<id>.ipynb` (see `notebooks`);
- an assignment's checks module: `twoprim/assignments/exNN_<name>.py` for assignment `exNN_<name>` (notebooks
  import it as `twoprim.exNN`);
- its hints: the `HINTS` table in that module;
- the course's modules a notebook may name (`ex01`, `checks`, `layers`, ...): every module of this package.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from types import ModuleType

import twoprim
from twoprim.config import ASSIGNMENT_ID, PACKAGE, ROOT
from twoprim.core.notebooks import assignments

__all__ = [
    "package_modules",
    "checks_module_name",
    "id_problem",
    "checks_module_path",
    "checks_modules",
    "checks_module",
    "assignment_ids",
    "hints_of",
    "all_hints",
]

_PACKAGE = PACKAGE


def package_modules() -> frozenset[str]:
    """The names a notebook may import from this package (`ex01`, `checks`, `grading`, ...): the short public names
    and subpackages (`twoprim.public_names`), listed anew each time: a grading worker that outlives an author's new
    assignment module still knows it."""
    return twoprim.public_names()


def checks_module_name(aid: str) -> str:
    """`ex01_dot` -> `ex01` (`ex01b_axpy` -> `ex01b`): the short name notebooks import the assignment's checks and
    hints by."""
    match = ASSIGNMENT_ID.fullmatch(aid)
    if not match:
        raise ValueError(
            f"{aid!r} is not an assignment id: ids are exNN_topic, NN the lesson's number (exNNb_topic "
            f"for the lesson's second assignment), e.g. ex01_dot"
        )
    return match.group(1)


def id_problem(aid: str, ids: Iterable[str]) -> str | None:
    """What is wrong with `aid` as an assignment id among the course's `ids`, as a sentence; None when nothing is:
    not of the form exNN_topic (`config.ASSIGNMENT_ID`), or its short name (`exNN`) already another's."""
    match = ASSIGNMENT_ID.fullmatch(aid)
    if not match:
        return (
            f"{aid!r} is not an assignment id: ids are exNN_topic, NN the two-digit number of the lesson it "
            f"follows (exNNb_topic for the lesson's second assignment), e.g. ex01_dot; see docs/guides/authors.md"
        )
    short = match[1]
    taken = [other for other in ids if other != aid and (m := ASSIGNMENT_ID.fullmatch(other)) and m[1] == short]
    if taken:
        return (
            f"{aid} and {taken[0]} have the same short name, {short}, which notebooks import their checks by: "
            f"a lesson's second assignment adds a letter to the number ({short[:4]}b_..., then {short[:4]}c_...); "
            f"see docs/guides/authors.md"
        )
    return None


def checks_module_path(aid: str) -> Path:
    """`ex01_dot` -> twoprim/assignments/ex01_dot.py: the module that holds the assignment's checks and hints."""
    checks_module_name(aid)
    return _PACKAGE / "assignments" / f"{aid}.py"


def checks_modules() -> list[str]:
    """Every assignment's short checks-module name in this package (`ex01`, `ex02`, ...)."""
    return sorted(twoprim.assignment_modules())


def checks_module(aid: str) -> ModuleType:
    """The imported checks module of assignment `aid` (`twoprim.assignments.ex01_dot` for `ex01_dot`)."""
    if not checks_module_path(aid).is_file():
        raise LookupError(
            f"assignment {aid} has no checks module: create twoprim/assignments/{aid}.py (see the "
            f"guide docs/guides/authors.md)"
        )
    return importlib.import_module(f"twoprim.assignments.{aid}")


def assignment_ids(root: Path | None = None) -> list[str]:
    """Assignment ids with a solutions notebook, in order (`notebooks.assignments`)."""
    return assignments(root or ROOT)


def _hints_in(path: Path) -> dict[str, tuple[str, ...]]:
    """The `HINTS` literal of one checks module's source, {} when it defines none."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "HINTS" and value is not None:
            return ast.literal_eval(value)
    return {}


@cache
def all_hints() -> dict[str, tuple[str, ...]]:
    """Every assignment's hints, from the package's own checks modules (`twoprim/assignments/exNN_name.py`): found
    where only the package is, as in a graded kernel's sandbox or a learner's copy without solutions/."""
    return {
        gid: texts
        for path in sorted((_PACKAGE / "assignments").glob("ex[0-9][0-9]*_*.py"))
        for gid, texts in _hints_in(path).items()
    }


@cache
def hints_of(aid: str) -> dict[str, tuple[str, ...]]:
    """The `HINTS` table of assignment `aid`'s checks module, read from its source as a literal: showing a hint in
    one assignment never imports the others' modules (MLX, Dynamo). {} when the module defines none."""
    path = checks_module_path(aid)
    if not path.is_file():
        return {}
    table = _hints_in(path)
    wrong = [gid for gid in table if not gid.startswith(f"{aid}-")]
    if wrong:
        raise ValueError(f"{path.name}: hint ids {wrong} do not start with {aid}-")
    return table
