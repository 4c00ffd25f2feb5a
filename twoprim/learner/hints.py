"""Hints for every graded function, revealed one at a time: `hints("dot")` shows a button, `hint("dot")` prints the
next one. Each function has two or three, from what to look at, to which shape to build, to which identity to use;
none is solution code. They live beside each assignment's checks (`HINTS` in `twoprim/assignments/exNN_name.py`).
Revealing a hint never changes a grade; the count is kept in `.twoprim-progress.json` at the top of the learner's
workspace (the course folder; on the classroom hub, the student's home: `twoprim.learner.state.workspace`), read by
`./course progress`.
"""

from __future__ import annotations

import difflib
import html
import os
import re
from pathlib import Path

from twoprim.core.catalog import all_hints
from twoprim.learner.state import load_state, update_state, workspace

__all__ = ["HINTS", "hint", "hints", "resolve", "used"]

# grade id of the visible check -> hints, least detailed first: every assignment's `HINTS`, kept beside its checks.
# Read from the package alone: a graded kernel's sandbox and a learner's copy have no solutions/ to list them from.
HINTS: dict[str, tuple[str, ...]] = all_hints()


def resolve(name: str) -> str:
    """The grade id for `name`: a grade id itself ("ex01_dot-dot") or a function name ("dot") of one assignment."""
    if name in HINTS:
        return name
    found = [gid for gid in HINTS if gid.split("-", 1)[1] == name]
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(f"{name!r} is graded in several assignments ({', '.join(found)}); pass one of those ids")
    names = sorted({gid.split("-", 1)[1] for gid in HINTS})
    close = difflib.get_close_matches(name, names, n=3)
    maybe = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"no hints for {name!r}: hints exist for the graded functions {', '.join(names)}.{maybe}")


def used(root: Path | None = None) -> dict[str, int]:
    """grade id -> how many of its hints the learner has revealed (from the progress state file)."""
    return dict(load_state(workspace() if root is None else root)[0]["hints"])


def _record(gid: str, number: int, root: Path) -> str | None:
    """Remember that hint `number` of `gid` was revealed; never raises (a hint is worth more than its count)."""

    def change(data: dict) -> None:
        data["hints"][gid] = max(int(data["hints"].get(gid, 0)), number)

    try:
        return update_state(root, change)
    except OSError as err:
        return f"could not record the hint in {root}: {err}"


def _format(gid: str, number: int) -> str:
    total = len(HINTS[gid])
    return f"Hint {number} of {total} for {gid}: {HINTS[gid][number - 1]}"


def hint(name: str, number: int | None = None, *, root: Path | None = None) -> None:
    """Print the next hint for graded function `name` (or hint `number` again); never changes a grade."""
    root = workspace() if root is None else root
    gid = resolve(name)
    total = len(HINTS[gid])
    data, note = load_state(root)
    if number is None:
        number = min(data["hints"].get(gid, 0) + 1, total)
    if not 1 <= number <= total:
        raise ValueError(f"{gid} has hints 1 to {total}; you asked for hint {number}")
    note = _record(gid, number, root) or note
    print(_format(gid, number))
    if number == total:
        print(
            f"That is the last hint. hint({name!r}, 1) shows the first again; the lesson named at the top of the "
            f"assignment covers the rest."
        )
    if note:
        print(f"note: {note}")


def _html(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def hints(*names: str, root: Path | None = None):
    """A button per graded function in `names` that reveals its hints one at a time (ipywidgets; in a terminal, use
    `hint(name)`). In a kernel being graded (`verdicts.CAPTURE_ENV` is set) nobody can press it: nothing is built."""
    if not names:
        raise ValueError('name the graded functions to show hints for, e.g. hints("dot")')
    gids = [resolve(n) for n in names]
    if os.environ.get("TWOPRIM_CAPTURE_DIR"):
        return None
    root = workspace() if root is None else root
    import ipywidgets as widgets

    boxes = []
    for gid in gids:
        total = len(HINTS[gid])
        button = widgets.Button(
            description=f"Show hint 1 of {total}",
            tooltip=f"hints for {gid}; grades unchanged",
            layout=widgets.Layout(width="auto"),
        )
        shown = widgets.HTML()
        state = {"n": 0}

        def reveal(_, gid=gid, total=total, button=button, shown=shown, state=state):
            state["n"] += 1
            note = _record(gid, state["n"], root)
            shown.value += f"<p><b>Hint {state['n']}.</b> {_html(HINTS[gid][state['n'] - 1])}</p>"
            if note:
                shown.value += f"<p><i>{html.escape(note)}</i></p>"
            if state["n"] == total:
                button.description, button.disabled = "No more hints", True
            else:
                button.description = f"Show hint {state['n'] + 1} of {total}"

        button.on_click(reveal)
        label = widgets.HTML(f"Stuck on <code>{gid.split('-', 1)[1]}</code>? Hints never change your grade.")
        boxes.append(widgets.VBox([widgets.HBox([label, button]), shown]))
    return widgets.VBox(boxes)
