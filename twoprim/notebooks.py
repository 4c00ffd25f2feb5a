"""Notebook files: read, clean (no outputs, only the metadata that matters), execute with timing.

nbformat is imported where a function needs it: this module names the course root for every graded kernel, and
nbformat's import (jsonschema and its format checkers) costs over a second of CPU that a kernel never needs.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

__all__ = ["ROOT", "lessons", "assignments", "clean", "is_clean", "execute", "code_of"]

ROOT = Path(__file__).resolve().parent.parent
KEEP_NOTEBOOK_METADATA = ("kernelspec", "language_info")
KEEP_CELL_METADATA = ("nbgrader", "editable", "deletable", "tags")


def lessons(root: Path = ROOT) -> list[Path]:
    return sorted((root / "lessons").glob("[0-9][0-9]_*.ipynb"))


def assignments(root: Path = ROOT) -> list[str]:
    """Assignment ids: every solutions/<id>/<id>.ipynb."""
    return sorted(p.parent.name for p in (root / "solutions").glob("*/*.ipynb") if p.stem == p.parent.name)


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip outputs, execution counts and all metadata but the kernel's and nbgrader's (in place)."""
    import nbformat

    meta = nb.metadata
    kept = {k: meta[k] for k in KEEP_NOTEBOOK_METADATA if k in meta}
    if "language_info" in kept:
        kept["language_info"] = {"name": kept["language_info"].get("name", "python")}
    if "kernelspec" in kept:
        ks = kept["kernelspec"]
        kept["kernelspec"] = {"display_name": ks.get("display_name", "Python 3"), "language": ks.get("language", "python"),
                              "name": ks.get("name", "python3")}
    nb.metadata = nbformat.from_dict(kept)
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({k: cell.metadata[k] for k in KEEP_CELL_METADATA if k in cell.metadata})
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def is_clean(nb: nbformat.NotebookNode) -> list[str]:
    """What is not clean about a notebook, as readable problems (empty when clean)."""
    problems = []
    extra = set(nb.metadata) - set(KEEP_NOTEBOOK_METADATA)
    if extra:
        problems.append(f"notebook metadata {sorted(extra)}")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None):
            problems.append(f"cell {i} has outputs or an execution count")
        extra = set(cell.metadata) - set(KEEP_CELL_METADATA)
        if extra:
            problems.append(f"cell {i} metadata {sorted(extra)}")
    return problems


def write_clean(nb: nbformat.NotebookNode, path: Path) -> None:
    import nbformat

    nbformat.write(clean(nb), str(path))


def code_of(path: Path, *, graded_tests: bool = False) -> list[str]:
    """The code cells' sources; nbgrader test cells (grade without solution) only when `graded_tests`."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        is_test = meta.get("grade", False) and not meta.get("solution", False)
        if is_test and not graded_tests:
            continue
        out.append(cell.source)
    return out


def execute(path: Path, *, timeout: int = 600, cwd: Path | None = None) -> tuple[nbformat.NotebookNode, float]:
    """Run a notebook top to bottom in a fresh kernel; return the executed notebook and the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd or path.parent)}})
    start = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - start
