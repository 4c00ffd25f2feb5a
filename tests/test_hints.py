"""Self-paced help: two or three hints per graded function, none of them solution code, revealed one at a time (a
button, or `hint()`), counted in the progress state without touching grades; and a further-reading section at the
end of every lesson."""

from __future__ import annotations

import re

import nbformat
import pytest

from twoprim.config import ROOT
from twoprim.core.notebooks import assignments, lessons
from twoprim.learner.hints import HINTS, hint, hints, resolve, used
from twoprim.learner.progress import STATE_FILE


def _solution(aid: str) -> nbformat.NotebookNode:
    return nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)


def _gid(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def graded_functions() -> set[str]:
    """Grade ids of every visible check `<aid>-<fn>` in solutions/."""
    return {
        _gid(c)
        for aid in assignments()
        for c in _solution(aid).cells
        if c.metadata.get("nbgrader", {}).get("grade")
        and not c.metadata["nbgrader"].get("solution")
        and not _gid(c).endswith("-hidden")
    }


def solution_lines() -> set[str]:
    """Every non-trivial code line between BEGIN and END SOLUTION, comments removed, whitespace collapsed; also
    without a leading `return`. Trivial: blank, comments, and lines of fewer than three tokens (`return C`, `else:`)."""
    out = set()
    for aid in assignments():
        for cell in _solution(aid).cells:
            if not cell.metadata.get("nbgrader", {}).get("solution"):
                continue
            inside = False
            for line in cell.source.splitlines():
                if line.strip() in ("### BEGIN SOLUTION", "### END SOLUTION"):
                    inside = line.strip() == "### BEGIN SOLUTION"
                    continue
                code = " ".join(re.split(r"\s+#|^#", line.strip())[0].split())
                for variant in (code, code.removeprefix("return ")):
                    if inside and len(re.findall(r"\w+|[^\w\s]", variant)) >= 3:
                        out.add(variant)
    return out


def leaks(text: str, lines: set[str]) -> list[str]:
    flat = " ".join(text.split())
    return sorted(line for line in lines if line in flat or line in flat.replace("`", ""))


def test_every_graded_function_has_two_or_three_hints():
    assert set(HINTS) == graded_functions(), "one entry per visible check `<aid>-<fn>` of solutions/, no others"
    for gid, texts in HINTS.items():
        assert 2 <= len(texts) <= 3, f"{gid} has {len(texts)} hints"
        assert all(len(t.split()) >= 8 for t in texts) and len(set(texts)) == len(texts), gid


def test_no_hint_contains_a_solution_line():
    lines = solution_lines()
    assert len(lines) > 150, "the solution lines were not collected"
    sample = next(iter(sorted(lines)))
    assert leaks(f"try `{sample}` here", lines), "the comparison must catch a pasted solution line"
    found = {gid: leaks(text, lines) for gid, texts in HINTS.items() for text in texts if leaks(text, lines)}
    assert not found, f"hints that contain solution code: {found}"


def test_hint_reveals_the_next_one_and_counts_it(tmp_path, capsys):
    hint("matmul_tiled", root=tmp_path)
    assert capsys.readouterr().out.startswith(
        f"Hint 1 of 3 for ex02_gemm-matmul_tiled: {HINTS['ex02_gemm-matmul_tiled'][0]}"
    )
    hint("ex02_gemm-matmul_tiled", root=tmp_path)
    assert capsys.readouterr().out.startswith("Hint 2 of 3")
    hint("matmul_tiled", 1, root=tmp_path)
    assert capsys.readouterr().out.startswith("Hint 1 of 3") and used(tmp_path) == {"ex02_gemm-matmul_tiled": 2}
    hint("matmul_tiled", root=tmp_path)
    out = capsys.readouterr().out
    assert out.startswith("Hint 3 of 3") and "That is the last hint" in out
    with pytest.raises(ValueError, match="has hints 1 to 3; you asked for hint 4"):
        hint("matmul_tiled", 4, root=tmp_path)


def test_unknown_function_names_the_known_ones():
    with pytest.raises(ValueError, match=r"no hints for 'mat_mul_tiled'.*Did you mean 'matmul_tiled'"):
        resolve("mat_mul_tiled")


def test_button_reveals_one_hint_per_click_and_showing_it_writes_nothing(tmp_path):
    box = hints("softmax", root=tmp_path)
    assert box is not None  # (built: this kernel is not being graded)
    assert not (tmp_path / STATE_FILE).exists(), "displaying the button (as grading does) must record nothing"
    [[label, button], shown] = [box.children[0].children[0].children, box.children[0].children[1]]
    assert "softmax" in label.value and button.description == "Show hint 1 of 3" and shown.value == ""
    button.click()
    assert "Hint 1." in shown.value and "Hint 2." not in shown.value and button.description == "Show hint 2 of 3"
    assert used(tmp_path) == {"ex05_attention-softmax": 1}
    button.click()
    button.click()
    assert "Hint 3." in shown.value and button.disabled and used(tmp_path) == {"ex05_attention-softmax": 3}


def test_each_graded_function_has_an_ungraded_locked_hint_cell():
    for aid in assignments():
        cells = [c for c in _solution(aid).cells if _gid(c).endswith("-hints")]
        for cell in cells:
            meta = cell.metadata["nbgrader"]
            assert (meta["grade"], meta["solution"], meta["locked"], "points" in meta) == (False, False, True, False)
            assert "from twoprim.hints import hints" in cell.source, f"{_gid(cell)}: notebooks use the short name"
        named = {f"{aid}-{fn}" for c in cells for fn in re.findall(r'"(\w+)"', c.source)}
        assert named == {g for g in graded_functions() if g.startswith(f"{aid}-")}, aid


@pytest.mark.parametrize("path", lessons(), ids=lambda p: p.name)
def test_lesson_ends_with_annotated_further_reading(path):
    nb = nbformat.read(str(path), as_version=4)
    found = [
        c.source
        for c in nb.cells
        if c.cell_type == "markdown" and re.search(r"^## Further reading\s*$", c.source, flags=re.M)
    ]
    assert found, f"{path.name} has no '## Further reading' section"
    body = re.split(r"^#", re.split(r"^## Further reading\s*$", found[0], flags=re.M)[1], flags=re.M)[0]
    entries = [" ".join(e.split()) for e in re.split(r"^- ", body, flags=re.M)[1:]]
    assert len(entries) >= 3, f"{path.name}: {len(entries)} entries"
    for entry in entries:
        cited = re.match(r"(.*?[*\"\[`].*?): (.*)$", entry)
        assert cited and len(cited.group(2).split()) >= 5, (
            f"{path.name}: each entry names a source (title in *italics*, quotes, a link or code) and says in a "
            f"line why to read it: {entry[:80]!r}"
        )
    later = nb.cells[[c.source for c in nb.cells].index(found[0]) + 1 :]
    assert all(c.cell_type == "markdown" for c in later), f"{path.name}: further reading comes at the end"
