"""Putting a damaged submission back in shape before nbgrader sees it: deleted, duplicated, retyped or stripped
nbgrader cells are matched to the released assignment and repaired, and what was repaired is said in words."""
from __future__ import annotations

import copy
import re
import uuid

import nbformat

from twoprim.grading.preprocessors import grade_id

__all__ = ["realign"]


def _signature(source: str) -> str | None:
    found = re.search(r"^def (\w+)\(", source, flags=re.M)
    return found.group(1) if found else None


def realign(student: nbformat.NotebookNode, release: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, list[str]]:
    """Match a submission's cells to the released assignment's nbgrader cells and repair what students break.

    Tests and read-only cells belong to the instructor: a deleted one is put back where it was, a duplicated copy
    is dropped, one turned into markdown is a code cell again, and one whose metadata was stripped is recognised
    by its source. A duplicated answer cell stays as plain code; an answer cell that lost its metadata is
    recognised by the function it defines. A cell with an unknown grade id (renamed) becomes plain code and the
    real one comes back. Returns the repaired notebook (a copy) and what was repaired, in words.
    """
    nb = copy.deepcopy(student)
    by_id = {grade_id(c): c for c in release.cells if grade_id(c)}
    is_answer = {gid: bool(c.metadata["nbgrader"].get("solution")) for gid, c in by_id.items()}
    notes: list[str] = []
    seen: set[str] = set()
    cells = _match_by_grade_id(nb.cells, by_id, is_answer, seen, notes)
    _recognise_stripped(cells, by_id, is_answer, seen, notes)
    order = {gid: i for i, gid in enumerate(by_id)}
    for gid in [g for g in by_id if g not in seen]:                        # put the rest back where they were
        before = [i for i, c in enumerate(cells) if grade_id(c) in order and order[grade_id(c)] < order[gid]]
        cells.insert(before[-1] + 1 if before else 0, copy.deepcopy(by_id[gid]))
        if is_answer[gid]:
            notes.append(f"answer cell {gid} was missing; graded as unanswered")
        elif by_id[gid].metadata.get("nbgrader", {}).get("grade"):  # given text, setup and hint cells: silently
            notes.append(f"restored the deleted cell {gid}")
    ids = set()
    for cell in cells:
        if "id" in cell and cell["id"] in ids:
            cell["id"] = uuid.uuid4().hex[:8]
        ids.add(cell.get("id"))
    nb.cells = cells
    return nb, notes


def _match_by_grade_id(cells: list, by_id: dict, is_answer: dict, seen: set[str], notes: list[str]) -> list:
    """The cells kept, in order: an unknown grade id becomes plain code, a second copy of a cell is dropped (of an
    answer cell: plain code), a cell of the wrong type is restored; the grade ids found go to `seen`."""
    kept = []
    for cell in cells:
        gid = grade_id(cell)
        if gid is None:
            kept.append(cell)
            continue
        if gid not in by_id:
            cell.metadata.pop("nbgrader")
            notes.append(f"a cell with the unknown grade id {gid!r} was graded as the student's own code")
            kept.append(cell)
            continue
        if gid in seen:
            if is_answer[gid]:
                cell.metadata.pop("nbgrader")
                kept.append(cell)
                notes.append(f"a second copy of answer cell {gid} ran as plain code")
            else:
                notes.append(f"removed a duplicated copy of {gid}")
            continue
        seen.add(gid)
        if cell.cell_type != by_id[gid].cell_type:
            fixed = copy.deepcopy(by_id[gid])
            fixed.source = cell.source if is_answer[gid] else by_id[gid].source
            cell = fixed
            notes.append(f"{gid} was turned into {'markdown' if by_id[gid].cell_type == 'code' else 'code'}; "
                         f"restored")
        kept.append(cell)
    return kept


def _recognise_stripped(cells: list, by_id: dict, is_answer: dict, seen: set[str], notes: list[str]) -> None:
    """Cells that lost their nbgrader metadata get it back: the instructor's by identical source, answer cells by
    the function they define."""
    recognised: list[str] = []

    def restore(cell, gid):
        cell.metadata["nbgrader"] = copy.deepcopy(by_id[gid].metadata["nbgrader"])
        seen.add(gid)
        recognised.append(gid)

    for gid in [g for g in by_id if g not in seen and not is_answer[g]]:      # by identical source
        for cell in cells:
            if grade_id(cell) is None and cell.cell_type == by_id[gid].cell_type and \
                    cell.source.strip() == by_id[gid].source.strip():
                restore(cell, gid)
                break
    for gid in [g for g in by_id if g not in seen and is_answer[g]]:          # by the function it defines
        name = _signature(by_id[gid].source)
        for cell in cells:
            if name and grade_id(cell) is None and cell.cell_type == "code" and _signature(cell.source) == name:
                restore(cell, gid)
                break
    if len(recognised) == 1:
        notes.append(f"{recognised[0]} had lost its nbgrader metadata; recognised it")
    elif recognised:
        notes.append(f"{len(recognised)} cells had lost their nbgrader metadata; recognised them by their source "
                     f"and the functions they define")
