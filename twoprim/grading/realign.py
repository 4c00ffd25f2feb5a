"""Putting a submission's nbgrader cells back as the assignment made them before nbgrader sees it: nbgrader obeys the
metadata of the notebook it grades (which cells are graded, their grade ids and points, which are locked), and a
student can edit all of it. Here the released assignment decides. Deleted, duplicated, retyped or stripped cells are
matched to the released ones and repaired; every matched cell gets the release's nbgrader metadata back (grade id,
points, graded or not, answer or not, locked, checksum), its cell type, and, unless it is an answer cell, its code or
text; what was changed is said in words. Only a notebook with nothing of the assignment in it is refused
(`NotTheAssignment`)."""

from __future__ import annotations

import copy
import re
import uuid

import nbformat

from twoprim.grading.preprocessors import grade_id

__all__ = ["realign", "NotTheAssignment"]

MOST_NAMED = 6  # cells named in one note; the rest are counted


class NotTheAssignment(ValueError):
    """A notebook none of whose cells is one of the assignment's: there is nothing to grade it by."""


def _signature(source: str) -> str | None:
    found = re.search(r"^def (\w+)\(", source, flags=re.M)
    return found.group(1) if found else None


def _names(items: list[str]) -> str:
    return ", ".join(items[:MOST_NAMED]) + (f" and {len(items) - MOST_NAMED} more" if len(items) > MOST_NAMED else "")


def realign(student: nbformat.NotebookNode, release: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, list[str]]:
    """Match a submission's cells to the released assignment's nbgrader cells and put back what students change.

    Tests and read-only cells belong to the instructor: a deleted one is put back where it was, a duplicated copy
    is dropped, one turned into markdown is a code cell again, one whose metadata was stripped is recognised by its
    source, and one whose code was edited gets the release's code back. A duplicated answer cell stays as plain code;
    an answer cell that lost its metadata is recognised by the function it defines. A cell with an unknown grade id
    (renamed, or made up), or with nbgrader metadata and no grade id, becomes plain code and the real one comes back.
    Every matched cell's nbgrader metadata is the release's, whatever the submission says. Returns the repaired
    notebook (a copy) and what was repaired, in words; raises `NotTheAssignment` when no cell matches at all.
    """
    nb = copy.deepcopy(student)
    by_id = {gid: c for c in release.cells if (gid := grade_id(c))}
    is_answer = {gid: bool(c.metadata["nbgrader"].get("solution")) for gid, c in by_id.items()}
    notes: list[str] = []
    seen: set[str] = set()
    _drop_metadata_without_id(nb.cells, notes)
    cells = _match_by_grade_id(nb.cells, by_id, is_answer, seen, notes)
    _recognise_stripped(cells, by_id, is_answer, seen, notes)
    graded = {g for g, c in by_id.items() if is_answer[g] or c.metadata["nbgrader"].get("grade")}
    if graded and not seen & graded:
        raise NotTheAssignment(_unmatched(student, by_id, graded))
    _restore_cells(cells, by_id, is_answer, notes)
    order = {gid: i for i, gid in enumerate(by_id)}
    unanswered, deleted = [], []
    for gid in [g for g in by_id if g not in seen]:  # put the rest back where they were
        before = [i for i, c in enumerate(cells) if (cid := grade_id(c)) in order and order[cid] < order[gid]]
        cells.insert(before[-1] + 1 if before else 0, copy.deepcopy(by_id[gid]))
        if is_answer[gid]:
            unanswered.append(gid)
        elif by_id[gid].metadata.get("nbgrader", {}).get("grade"):  # given text, setup and hint cells: silently
            deleted.append(gid)
    if len(unanswered) == 1:
        notes.append(f"answer cell {unanswered[0]} was missing; graded as unanswered")
    elif unanswered:
        notes.append(f"{len(unanswered)} answer cells were missing; graded as unanswered: {_names(unanswered)}")
    if len(deleted) == 1:
        notes.append(f"restored the deleted cell {deleted[0]}")
    elif deleted:
        notes.append(f"restored {len(deleted)} deleted cells: {_names(deleted)}")
    ids = set()
    for cell in cells:
        if "id" in cell and cell["id"] in ids:
            cell["id"] = uuid.uuid4().hex[:8]
        ids.add(cell.get("id"))
    nb.cells = cells
    return nb, notes


def _unmatched(student: nbformat.NotebookNode, by_id: dict, graded: set[str]) -> str:
    """Why a notebook cannot be graded as this assignment, in words."""
    if not student.cells:
        return "the notebook has no cells"
    theirs = [g for g in (grade_id(c) for c in student.cells) if isinstance(g, str) and g]
    named = f"; its grade ids are {_names(theirs)}: another assignment's notebook?" if theirs else ""
    wanted = next(g for g in by_id if g in graded)
    return (
        f"none of the notebook's {len(student.cells)} cells is one of the assignment's answer or test cells (by "
        f"grade id, by the test's code or by the function an answer defines, e.g. {wanted}){named}"
    )


def _drop_metadata_without_id(cells: list, notes: list[str]) -> None:
    """nbgrader metadata with no grade id (a cell marked graded by hand) is not the assignment's: plain code."""
    dropped = 0
    for cell in cells:
        meta = cell.get("metadata", {})
        if "nbgrader" in meta and not (
            isinstance(meta["nbgrader"], dict) and isinstance(grade_id(cell), str) and grade_id(cell)
        ):
            meta.pop("nbgrader")
            dropped += 1
    if dropped:
        notes.append(
            f"{dropped} cell(s) had nbgrader metadata without a grade id (not the assignment's); they ran "
            f"as the student's own code"
        )


def _match_by_grade_id(cells: list, by_id: dict, is_answer: dict, seen: set[str], notes: list[str]) -> list:
    """The cells kept, in order: an unknown grade id becomes plain code, a second copy of a cell is dropped (of an
    answer cell: plain code), a cell of the wrong type is restored; the grade ids found go to `seen`."""
    kept, unknown = [], []
    for cell in cells:
        gid = grade_id(cell)
        if gid is None:
            kept.append(cell)
            continue
        if gid not in by_id:
            cell.metadata.pop("nbgrader")
            unknown.append(repr(gid))
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
            notes.append(f"{gid} was turned into {'markdown' if by_id[gid].cell_type == 'code' else 'code'}; restored")
        kept.append(cell)
    if len(unknown) == 1:
        notes.insert(0, f"a cell with the unknown grade id {unknown[0]} was graded as the student's own code")
    elif unknown:
        notes.insert(
            0,
            f"{len(unknown)} cells with grade ids the assignment does not have were graded as the "
            f"student's own code: {_names(unknown)}",
        )
    return kept


def _recognise_stripped(cells: list, by_id: dict, is_answer: dict, seen: set[str], notes: list[str]) -> None:
    """Cells that lost their nbgrader metadata get it back: the instructor's by identical source, answer cells by
    the function they define."""
    recognised: list[str] = []

    def restore(cell, gid):
        cell.metadata["nbgrader"] = copy.deepcopy(by_id[gid].metadata["nbgrader"])
        seen.add(gid)
        recognised.append(gid)

    for gid in [g for g in by_id if g not in seen and not is_answer[g]]:  # by identical source
        for cell in cells:
            if (
                grade_id(cell) is None
                and cell.cell_type == by_id[gid].cell_type
                and cell.source.strip() == by_id[gid].source.strip()
            ):
                restore(cell, gid)
                break
    for gid in [g for g in by_id if g not in seen and is_answer[g]]:  # by the function it defines
        name = _signature(by_id[gid].source)
        for cell in cells:
            if name and grade_id(cell) is None and cell.cell_type == "code" and _signature(cell.source) == name:
                restore(cell, gid)
                break
    if len(recognised) == 1:
        notes.append(f"{recognised[0]} had lost its nbgrader metadata; recognised it")
    elif recognised:
        notes.append(
            f"{len(recognised)} cells had lost their nbgrader metadata; recognised them by their source "
            f"and the functions they define"
        )


def _changed_fields(theirs, ours: dict) -> list[str]:
    """The nbgrader metadata fields a submission changed, as `field: release's → submitted` (a checksum unquoted)."""
    if not isinstance(theirs, dict):
        return [f"not a mapping ({type(theirs).__name__})"]
    changed = []
    for key in sorted(set(theirs) | set(ours)):
        if theirs.get(key) != ours.get(key):
            changed.append(key if key == "checksum" else f"{key} {_shown(ours, key)} → {_shown(theirs, key)}")
    return changed


def _shown(meta: dict, key: str) -> str:
    return (
        repr(meta[key]).lower()
        if key in meta and isinstance(meta[key], bool)
        else (repr(meta[key]) if key in meta else "absent")
    )


def _restore_cells(cells: list, by_id: dict, is_answer: dict, notes: list[str]) -> None:
    """Every cell that is one of the release's gets the release's nbgrader metadata, and (but for answer cells) its
    code or text; notes name what the submission had changed."""
    metadata, edited = [], []
    for cell in cells:
        gid = grade_id(cell)
        if gid is None or gid not in by_id:
            continue
        ours = by_id[gid]
        changed = _changed_fields(cell.metadata.get("nbgrader"), ours.metadata["nbgrader"])
        if changed:
            metadata.append(f"{gid} ({', '.join(changed)})")
        cell.metadata["nbgrader"] = copy.deepcopy(ours.metadata["nbgrader"])
        if not is_answer[gid]:
            if cell.source.strip() != ours.source.strip():
                edited.append(gid)
            cell.source = ours.source
    if metadata:
        notes.append(f"restored the assignment's nbgrader metadata the submission had changed: {_names(metadata)}")
    if len(edited) == 1:
        notes.append(f"restored the assignment's version of {edited[0]}, which the submission had edited")
    elif edited:
        notes.append(
            f"restored the assignment's version of {len(edited)} cells the submission had edited: {_names(edited)}"
        )
