"""Every assignment: the solutions pass their visible and hidden checks, and each visible check announces exactly
as many hidden checks as its hidden cell runs."""

from __future__ import annotations

import re
import sys
from functools import cache

import nbformat
import pytest

import twoprim
from twoprim.config import ROOT
from twoprim.core import checks
from twoprim.core.notebooks import assignments

from .conftest import solution_namespace


def _graded_cells(aid: str) -> dict[str, str]:
    nb = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
    }


# Each assignment's solution cells run once, for all its checks, as in the notebook (one kernel, one namespace):
# ex06's setup and solutions compile models with torch.compile, seconds each time they run.
_namespace = cache(solution_namespace)

CASES = [(aid, gid) for aid in assignments() for gid in _graded_cells(aid) if not gid.endswith("-hidden")]


@pytest.mark.parametrize("aid, grade_id", CASES)
def test_solution_passes_and_visible_check_announces_the_hidden_count(aid, grade_id, capsys, monkeypatch):
    cells = _graded_cells(aid)
    assert f"{grade_id}-hidden" in cells, f"{grade_id} has no hidden check cell"
    assert "BEGIN HIDDEN TESTS" in cells[f"{grade_id}-hidden"]
    ns = _namespace(aid)
    exec(cells[grade_id], ns)  # noqa: S102 - the visible check, on the solution
    found = re.search(r"Grading runs (\d+) more hidden", capsys.readouterr().out)
    assert found, f"the visible check {grade_id} must say how many hidden checks grading adds"

    ran = []
    original = checks.run_check

    def counting(*args, **kwargs):
        result = original(*args, **kwargs)
        ran.append(result.cases)
        return result

    for module in [m for name, m in sys.modules.items() if name.startswith("twoprim.")] + [twoprim]:
        if getattr(module, "run_check", None) is original:
            monkeypatch.setattr(module, "run_check", counting)
    exec(cells[f"{grade_id}-hidden"], ns)  # noqa: S102 - the hidden check, on the solution
    assert ran == [int(found.group(1))], (
        f"{grade_id}: the visible check announces {found.group(1)} hidden checks, the hidden cell ran {ran}"
    )
