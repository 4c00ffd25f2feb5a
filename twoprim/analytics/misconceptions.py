"""What the class got wrong, counted: per graded function, the causes its checks named in the feedback, each with how
many students and who (part of `./course analysis ASSIGNMENT`; instructor side).

The checks diagnose: a failed check's message (`twoprim.core.checks`) is a headline, `✘ <test>: <what>`, then fields,
one a line: `case:`, `tried:`, `expected:`, `got:`, and where the check recognised the mistake, `cause:` (ex09: "the
K offset never advances", strides exchanged, a missing mask), `layout:` (strides ignored), `order:` (axes swapped),
`found:` (which rule the code broke, and how), then `next:`. The grader writes each test cell's message into the
student's autograded notebook (grader/autograded/<student>/<aid>/, the cell's error output), which is what their
feedback shows; this module reads it there.

A message's cause is its most specific diagnosis: the `cause:` line, else `layout:`, `order:`, a broken rule with what
was `found:`, what came back (`got:`) when it says more than the values, else the headline (the code raised, is not
written, calls a function whose own check fails, ran out of time). Its key is that text with the case taken out:
every number is N (a list of them one N), every dtype ‹dtype›, values shown [...], so the same mistake met on another
case, shape or dtype, in the visible or the hidden check, counts once. Two messages whose diagnoses differ only in
their next step (`next:`) are different causes: the next step is part of the key. A wrong value with no diagnosis is
counted as such, per test ("wrong values; the check names no cause (ex01_dot-top_k)"): the visible check and a hidden
one that fail without a diagnosis may fail for different reasons (a broken check among them).

A student counts once per cause of a function however many of its tests named it, and may count under two causes of
one function. Blank notebooks (nothing written) are left out and listed apart: every check of a blank notebook says
"not written yet", which teaches nothing about the class.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Cause", "Misconceptions", "cause_of", "normalise", "messages", "count", "NO_CAUSE"]

NO_CAUSE = "wrong values; the check names no cause"
_DTYPES = r"\b(?:b?float(?:16|32|64)|u?int(?:8|16|32|64)|complex(?:64|128)|bool|fp(?:16|32|64)|bf16)\b"
_DESCRIBED = re.compile(
    r"^(?:MLX )?‹dtype› (?:tensor|array) of shape \([^)]*\)"
    r"(?: \(non-contiguous, strides \([^)]*\)\))?[:,]?\s*"
)
_FIELD = re.compile(r"^\s+([a-z][a-z ]{1,20}):\s+(.*)$")


def normalise(text: str) -> str:
    """`text` with the case taken out: numbers N (a run of them one N), dtypes ‹dtype›, shown values [...]."""
    text = re.sub(_DTYPES, "‹dtype›", text)
    text = re.sub(r"\[[-+0-9., e*naif]*(?:\.\.\.)?\]", "[...]", text)
    text = re.sub(r"(?<![\w‹])[-+]?(?:\d{1,3}(?:[,_]\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?(?![\w›])", "N", text)
    text = re.sub(r"\bN(?:(?:, | and |–|-|\.\.|×| x )N)+\b", "N", text)
    return " ".join(text.split())


@dataclass
class _Message:
    headline: str
    fields: dict[str, str]


def _parse(message: str) -> _Message | None:
    """The first failure of a check's message: its headline (without `✘ <test>:`) and its fields."""
    lines = message.splitlines()
    start = next((n for n, line in enumerate(lines) if line.lstrip().startswith("✘")), None)
    if start is None:
        return None
    headline = re.sub(r"^✘\s+\S+?:\s*", "", lines[start].strip())
    fields: dict[str, str] = {}
    for line in lines[start + 1 :]:
        if line.lstrip().startswith("✘"):
            break  # a second failure quoted under the first (a function whose dependency fails): the first says why
        m = _FIELD.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2).strip()
    return _Message(headline, fields)


def _says_more(got: str) -> bool:
    """Whether what came back (`got:`) says more than the values: their type, shape and the values themselves."""
    text = _DESCRIBED.sub("", normalise(got))
    text = re.sub(
        r"^(?:‹dtype›|int|float|bool|str|list|tuple|dict|NoneType|Counter)\s+(?:N|\[\.\.\.\]|None|'[^']*')?"
        r"\s*[:;,]?\s*",
        "",
        text,
    )
    return not re.fullmatch(r"(?:(?:[a-z]+ )?\[\.\.\.\]|N of N elements wrong|N)?", text.strip())


def cause_of(message: str) -> tuple[str, str] | None:
    """(key, label) of the cause a failed check's message names; None for a message that is no check's failure.
    The label is the cause in words (the case taken out), the key that and the rest of the diagnosis."""
    m = _parse(message)
    if m is None:
        return None
    f = {k: normalise(v) for k, v in m.fields.items()}
    headline = normalise(m.headline).rstrip(".")
    if "cause" in f:
        label = f["cause"]
    elif "layout" in f:
        label = f["layout"]
    elif "order" in f:
        label = f["order"]
    elif "found" in f and "breaks a rule" in headline:
        label = f"{headline.split(': ', 1)[-1]}: {f['found']}"
    elif headline != "wrong result":
        label = headline
    elif _says_more(m.fields.get("got", "")):
        label = f["got"]
    else:
        label = NO_CAUSE
    key = " | ".join([headline, label, f.get("next", "")])
    return key, label


@dataclass
class Cause:
    """One cause the checks of one function named: its words, the next step they gave, who got it and in which
    tests."""

    function: str
    label: str
    next_step: str
    students: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    named: dict[str, list[str]] = field(default_factory=dict)  # student -> the tests whose message named it

    def line(self, of: int) -> str:
        """'9 of 30: <cause>'."""
        return f"{len(self.students)} of {of}: {self.label}"


@dataclass
class Misconceptions:
    """Per graded function, the causes named across the class (most common first); the students counted and the
    blank notebooks left out."""

    aid: str
    students: list[str]
    blank: list[str]
    causes: dict[str, list[Cause]] = field(default_factory=dict)  # function -> causes
    unread: dict[str, str] = field(default_factory=dict)  # student -> why their notebook was not read

    def describe(self, top: int = 5) -> str:
        """What the terminal shows: per function, its commonest causes with the students."""
        n = len(self.students)
        lines = [
            f"What the checks told the class ({n} graded notebooks"
            + (f"; {len(self.blank)} blank, left out: {', '.join(self.blank)}" if self.blank else "")
            + "):"
        ]
        if not any(self.causes.values()):
            lines.append("  every check passed")
        for function, causes in self.causes.items():
            if not causes:
                continue
            lines.append(f"  {function}")
            for c in causes[:top]:
                who = ", ".join(c.students[:8]) + (f", +{len(c.students) - 8}" if len(c.students) > 8 else "")
                lines.append(f"    {c.line(n)}  ({who})")
            if len(causes) > top:
                lines.append(f"    ... {len(causes) - top} more causes in the reports")
        for student, why in sorted(self.unread.items()):
            lines.append(f"  not read: {student}: {why}")
        return "\n".join(lines)


def _function(grade_id: str, aid: str) -> str:
    """The graded function a test cell checks: `ex02_gemm-matmul_tiled-hidden` -> `matmul_tiled`."""
    name = grade_id.removeprefix(f"{aid}-")
    return re.sub(r"-(?:hidden|visible|\d+)$", "", name).split("-")[0]


def messages(notebook) -> dict[str, str]:
    """grade_id -> the failure message of every graded test cell that failed in an autograded notebook (its error
    output, as the feedback shows it)."""
    out = {}
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out[str(meta.get("grade_id", ""))] = str(o.get("evalue") or "\n".join(o.get("traceback", [])))
                break
    return out


def count(aid: str, root: Path, students: list[str], *, blank: Sequence[str] = ()) -> Misconceptions:
    """The causes named in the autograded notebooks of `students` (grader/autograded/<student>/<aid>/), blank
    notebooks (`blank`) left out."""
    import nbformat

    counted = [s for s in students if s not in set(blank)]
    result = Misconceptions(aid, counted, sorted(blank))
    found: dict[str, dict[str, Cause]] = {}
    position: dict[str, tuple[int, int]] = {}  # function -> where its first test stands (notebook, cell)
    for student in counted:
        folder = root / "grader" / "autograded" / student / aid
        paths = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
        if not paths:
            result.unread[student] = f"no autograded notebook in grader/autograded/{student}/{aid}/"
            continue
        for number, path in enumerate(paths):
            try:
                nb = nbformat.read(str(path), as_version=4)
                failed = messages(nb)
                cells = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells]
            except Exception as err:  # noqa: BLE001 - one unreadable notebook is reported, the class still counted
                result.unread[student] = f"{path.name} could not be read ({type(err).__name__})"
                continue
            for gid, message in failed.items():
                named = cause_of(message)
                if named is None:
                    continue
                key, label = named
                if label == NO_CAUSE:  # undiagnosed: told apart by test (a broken visible check, a hidden case)
                    key, label = f"{key} | {gid}", f"{NO_CAUSE} ({gid})"
                function = _function(gid, aid)
                here = (number, cells.index(gid))
                position[function] = min(position.get(function, here), here)
                cause = found.setdefault(function, {}).setdefault(key, Cause(function, label, key.rsplit(" | ", 1)[-1]))
                if student not in cause.students:
                    cause.students.append(student)
                if gid not in cause.tests:
                    cause.tests.append(gid)
                cause.named.setdefault(student, []).append(gid)
    for function, causes in sorted(found.items(), key=lambda kv: position[kv[0]]):
        labels = collections.Counter(c.label for c in causes.values())
        for c in causes.values():  # two diagnoses in the same words, told apart by the next step each gave
            if labels[c.label] > 1:
                c.label = f"{c.label} (next: {c.next_step})"
        result.causes[function] = sorted(causes.values(), key=lambda c: (-len(c.students), c.label))
    return result
