"""Give-aways: a graded answer inside a lesson (the course spec: a lesson "never contains the graded function of an
exercise, verbatim or renamed"). `python -m twoprim.analytics.giveaways` prints the table; `tests/test_giveaways.py`
fails on a give-away.

Every code cell of every lesson is compared with every graded answer: the code between `### BEGIN SOLUTION` and
`### END SOLUTION` in each answer cell of solutions/<aid>/<aid>.ipynb (a cell may hold several such pieces, as ex09's
kernel and its launch wrapper; each piece is fingerprinted on its own, so no fingerprint spans two). The fingerprints
are `./course similarity`'s (`twoprim.analytics.similarity`, copydetect): its tokenizer turns every variable,
attribute and function name into one letter and drops comments and whitespace (docstrings and other bare strings are
blanked first, as the comments they are), so renaming and recommenting change nothing; every k-gram of `NOISE`
characters of that token stream is a fingerprint wherever it stands, so reordering statements changes little.
Fingerprints that two or more graded answers share (`(M, K), N = A.shape, B.shape[1]`, `for i in range(M): for j in
range(N):`) tell no answer apart and are boilerplate, as MOSS ignores code many submissions share.

**How much of an answer a lesson holds** (`share`): the fraction of the answer's fingerprints (k-gram positions,
boilerplate left out) that occur in the lesson, in its best cell or in all its cells together, whichever is more (an
answer split over two cells is still found). A give-away is

- a `share` of at least `THRESHOLD`, for an answer long enough to fingerprint (`MIN_CHARS` characters of token
  stream or more), or
- for any answer, a function the lesson defines (a `def`, or a lambda given a name) whose body is the answer's,
  statement for statement, once parameters and local names are numbered in order of appearance ("same function").

**Why 0.25.** Measured on this course (the tests pin each case): verbatim and renamed copies score 0.9-1.0 (lesson
09's three kernels at e3f7c9b: 1.00 each); reordered copies 0.33 (`mlx_op_counts`, short enough that moving one line
breaks most of its k-grams) and 0.69 (`capture`); partial copies 0.77 (the loops and the `torch.dot` of
`matmul_dots`), 0.50 (`capture` at level "aten" only) and, in the lessons before this detector, 0.42 (lesson 02's
NumPy `matmul_dots`), 0.36 and 0.33 (lesson 05's `mlx_op_counts` and multi-head attention), 0.32 (lesson 06's
`capture`). What a lesson may show scores at most 0.11: a Triton GEMV kernel beside `matmul_kernel` 0.11, one tile
of C beside `matmul_tiled` 0.09, a GEMV in blocks of rows 0.04, a row max kernel, one fixed `mx.export_function`
trace, Dynamo's graphs through `torch._logging`: 0; the lessons as they stand, 0.09 at most. 0.25 sits in the
gap between 0.11 and 0.32. Counting fingerprints rather than characters covered matters here: two chance matches of
25 characters cover 40% of a 7-line answer's token stream but are 4% of its fingerprints. A tiled GEMV written with
the GEMM's own loop nest (tile loops over rows and K, 2-D slices) scores 0.41 against `matmul_tiled`: it is most of
that answer; one tile of C, or a GEMV in blocks of rows, teaches the same and is not.

**Short answers.** An answer under `MIN_CHARS` characters of token stream (`2 * M * N * K`, `mx.inner(x, w)`,
`(x * w).sum()`, five measured numbers) has so few fingerprints that one shared line would read as most of it, and
such a one-liner *is* the formula a lesson teaches: writing `2 * M * N * K` in a lesson is teaching the FLOP count. So
a short answer is given away only when the lesson hands it over *as the graded function*: a `def`, or a named lambda,
whose body is the answer's (same function, names aside). An expression evaluated in a cell, printed, or timed as an
inline lambda is the formula; a function the learner could paste is the answer.

What this cannot see: a lesson's own rewrite of an answer (another spelling of the same algorithm, say layer norm
with `** 2` for `x * x`) shares few fingerprints, and a package function the lesson calls shows no code at all. Read
the lessons beside the solutions too; the detector catches what is copied. A reading found give-aways in four
lessons after the detector passed (cosine similarity and a ranking inline in lesson 01, fused Q/K/V, a one-hot GEMM
and a fused RNN cell in lesson 03, tile and wave efficiency in lesson 08, ex10's four functions called from the
package in lesson 10). No rule added here would have found them, measured before deciding: flagging an inline
expression equal to a one-line answer's body with the answer's parameter names as its free names matches 11
expressions in the lessons (`(x * w).sum()`, `2 * M * N * K`, `mx.inner(x, w)`: the formulas they teach) and none of
those, which renamed their variables (`E`, `q` for `keys`, `query`), spelled a call another way (`norm`, `argsort`,
`math.ceil`) or spread an answer over statements. An answer the package holds is kept from learners by the checks
instead (`twoprim.core.checks.no_grader_calls`: calling it fails the visible check).

Why this module is long: the comparison (every lesson cell's fingerprints against every answer's), the normalisation
that makes a renamed or recommented copy read as its source, the rules for short answers and the measurements the
threshold rests on, and the command's table.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from twoprim.analytics.similarity import NOISE, WINDOW, _fingerprint
from twoprim.config import ROOT
from twoprim.core.notebooks import lessons

__all__ = [
    "Solution",
    "Cell",
    "Score",
    "solutions",
    "lesson_cells",
    "scores",
    "giveaways",
    "table",
    "THRESHOLD",
    "MIN_CHARS",
]

THRESHOLD = 0.25  # a lesson holding this share of a solution's fingerprints gives it away
MIN_CHARS = 2 * NOISE  # token-stream characters below which a solution is a one-liner: only "same function" counts
_MARKED = re.compile(r"^[ \t]*### BEGIN SOLUTION[ \t]*\n(.*?)^[ \t]*### END SOLUTION", re.S | re.M)


@dataclass(frozen=True)
class Solution:
    """One graded answer cell: its assignment, grade id, the names it defines and its solution pieces."""

    assignment: str
    grade_id: str
    names: tuple[str, ...]  # the functions the cell defines, or the names an answer cell assigns
    functions: bool  # whether `names` are functions
    pieces: tuple[str, ...]  # the code of each BEGIN/END SOLUTION block, dedented
    params: tuple[tuple[str, ...], ...] = ()  # per piece: the parameters of the function it sits in

    @property
    def label(self) -> str:
        """What the report calls it: `matmul_tiled`, `add_kernel/add`, `answers`."""
        task = self.grade_id.removeprefix(f"{self.assignment}-").removesuffix("-solution")
        return "/".join(self.names) if self.functions else task

    @property
    def code(self) -> str:
        return "\n".join(self.pieces)


@dataclass(frozen=True)
class Cell:
    """One code cell of a lesson: the lesson's stem, the cell's index among all the notebook's cells, its source."""

    lesson: str
    index: int
    code: str


@dataclass
class Score:
    """How much of one solution one lesson holds (its best cell, or its cells together), and which of its cells
    define the solution as a function."""

    lesson: str
    solution: Solution
    share: float  # fingerprinted share: the larger of the best cell's and the union's
    cells: tuple[int, ...]  # the cells that share counts
    fingerprintable: bool  # the solution has MIN_CHARS of token stream or more
    same_function: tuple[int, ...] = ()  # cells defining a function whose body is the solution's, names aside
    passages: list[str] = field(default_factory=list)  # the solution's lines found in the lesson

    @property
    def giveaway(self) -> bool:
        return bool(self.same_function) or (self.fingerprintable and self.share >= THRESHOLD)

    def describe(self) -> str:
        """One line: lesson, cells, assignment, graded function, how much of it is there."""
        found = []
        if self.same_function:
            found.append(
                f"cell{'s' if len(self.same_function) > 1 else ''} {', '.join(map(str, self.same_function))}"
                f" define{'s' if len(self.same_function) == 1 else ''} it as a function (names aside)"
            )
        if self.share:
            found.append(
                f"{self.share:.0%} of its fingerprints in cell{'s' if len(self.cells) > 1 else ''} "
                f"{', '.join(map(str, self.cells))}"
            )
        return f"{self.lesson}: {self.solution.assignment} {self.solution.label}: {'; '.join(found)}"


# ----------------------------------------------------------------------------------------------------------------
# Reading the course
# ----------------------------------------------------------------------------------------------------------------


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    args = node.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a is not None]


def _defined(source: str) -> tuple[list[str], list[tuple[str, ...]]]:
    """The top-level functions a cell defines (or, without any, the names it assigns), and for each marked piece the
    parameters of the function it sits in."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [], []
    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    names = [f.name for f in functions] or [
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    ]
    params = []
    for match in _MARKED.finditer(source):
        line = source[: match.start()].count("\n") + 1
        around = [f for f in functions if f.lineno <= line <= (f.end_lineno or line)]
        params.append(tuple(a for f in around for a in _params(f)))
    return names, params


def _defines_functions(source: str) -> bool:
    try:
        return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.parse(source).body)
    except SyntaxError:
        return False


def solutions(root: Path = ROOT) -> list[Solution]:
    """Every graded answer cell of solutions/*/*.ipynb with its solution pieces, in course order."""
    import nbformat

    out = []
    for path in sorted(Path(root).glob("solutions/*/*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.get("cell_type") != "code" or not meta.get("solution") or not meta.get("grade_id"):
                continue
            pieces = tuple(textwrap.dedent(m.group(1)).strip("\n") for m in _MARKED.finditer(cell.source))
            if not any(p.strip() for p in pieces):
                continue
            names, params = _defined(cell.source)
            out.append(
                Solution(
                    path.parent.name,
                    meta["grade_id"],
                    tuple(names),
                    _defines_functions(cell.source),
                    pieces,
                    tuple(params),
                )
            )
    return out


def lesson_cells(path: Path) -> list[Cell]:
    """The code cells of one lesson notebook, with their index among all its cells."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    return [Cell(Path(path).stem, i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def course_cells(root: Path = ROOT) -> list[Cell]:
    """The code cells of every lesson on disk."""
    return [cell for path in lessons(root) for cell in lesson_cells(path)]


# ----------------------------------------------------------------------------------------------------------------
# Fingerprints: similarity's (copydetect), per solution piece and per cell
# ----------------------------------------------------------------------------------------------------------------


def _uncommented(code: str) -> str:
    """`code` with every string statement (docstrings, bare strings) blanked out, positions kept: the tokenizer
    already drops comments, and a docstring is a comment too. IPython lines (`%magic`, `!shell`) are blanked for
    parsing only."""
    parsable = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
    try:
        tree = ast.parse(parsable)
    except SyntaxError:
        return code
    lines = code.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    chars = list(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            assert node.end_lineno is not None and node.end_col_offset is not None  # (set by ast.parse)
            begin = starts[node.lineno - 1] + len(lines[node.lineno - 1].encode()[: node.col_offset].decode())
            end = starts[node.end_lineno - 1] + len(lines[node.end_lineno - 1].encode()[: node.end_col_offset].decode())
            for i in range(begin, end):
                if chars[i] != "\n":
                    chars[i] = " "
    return "".join(chars)


def _print(name: str, code: str, boilerplate=None):
    """similarity's fingerprint of `code` without its string statements; `boilerplate`: hashes that never count."""
    return _fingerprint(name, _uncommented(code), boilerplate)


def _shared_by_solutions(graded: Sequence[Solution]):
    """The fingerprints found in two or more graded answers: idioms such as `(M, K), N = A.shape, B.shape[1]` or
    `for i in range(M): for j in range(N):`, which tell no answer apart, are boilerplate (as MOSS ignores code that
    many submissions share), so a share measures what is particular to one answer."""
    from collections import Counter

    import numpy as np

    seen: Counter = Counter()
    for solution in graded:
        seen.update({h for i, p in enumerate(solution.pieces) for h in _print(f"{solution.grade_id}-{i}", p).hashes})
    return np.array(sorted(h for h, n in seen.items() if n >= 2))


def _positions(piece) -> int:
    """How many fingerprints (k-gram positions, boilerplate excluded) a piece has."""
    return sum(len(where) for where in piece.hash_idx.values())


def _covered(piece, hashes: set) -> tuple[int, list[tuple[int, int]]]:
    """How many of `piece`'s fingerprints (k-gram positions) are in `hashes`, and the raw-code spans they cover."""
    import numpy as np
    from copydetect.utils import get_copied_slices

    common = piece.hashes & hashes
    if not common:
        return 0, []
    idx = np.concatenate([np.array(piece.hash_idx[h]) for h in common]).astype(int)
    covered = len(idx)
    slices = get_copied_slices(idx, piece.k)
    raw = []
    if len(piece.offsets):  # from the token stream back to the raw code, as copydetect's compare_files does
        shift = piece.offsets[:, 1][np.clip(np.searchsorted(piece.offsets[:, 0], slices), 0, len(piece.offsets) - 1)]
        raw = list(zip(*(slices + shift).tolist(), strict=True))
    return covered, raw


def _lines_in(code: str, spans: Iterable[tuple[int, int]]) -> list[str]:
    """The lines of `code` that the spans touch, stripped, in order."""
    lines, pos, out = code.splitlines(keepends=True), 0, []
    bounds = []
    for line in lines:
        bounds.append((pos, pos + len(line)))
        pos += len(line)
    spans = list(spans)
    for (a, b), line in zip(bounds, lines, strict=True):
        if line.strip() and any(s < b and e > a for s, e in spans):
            out.append(line.strip())
    return out


# ----------------------------------------------------------------------------------------------------------------
# Same function: a def or lambda whose body is the solution's, names aside
# ----------------------------------------------------------------------------------------------------------------


class _Numbered(ast.NodeTransformer):
    """Replace each parameter and local name by its order of first appearance (`_0`, `_1`, ...)."""

    def __init__(self, local: set[str]):
        self.local, self.seen = local, {}

    def _name(self, name: str) -> str:
        if name not in self.local:
            return name
        return self.seen.setdefault(name, f"_{len(self.seen)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id=self._name(node.id), ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.copy_location(ast.arg(arg=self._name(node.arg)), node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self._name(node.name)
        return self.generic_visit(node)


def _locals(body: Sequence[ast.AST], params: Iterable[str]) -> set[str]:
    names = set(params)
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
    return names


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1:]
    return body


def _shape(body: list[ast.stmt], params: Iterable[str]) -> str:
    body = _without_docstring(body)
    numbered = _Numbered(_locals(body, params))
    return "\n".join(ast.dump(numbered.visit(ast.parse(ast.unparse(s)).body[0])) for s in body)


def _piece_shape(piece: str, params: Iterable[str]) -> str | None:
    try:
        return _shape(ast.parse(piece).body, params)
    except SyntaxError:
        return None


def _function_shapes(code: str) -> list[str]:
    """The numbered body of every function a cell defines: each `def`'s body, and `return <expr>` for each lambda
    given a name (`f = lambda x, w: ...`). A lambda written inline (a value in a table of spellings to time) is an
    expression, the formula itself, not a function handed over."""
    try:
        tree = ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()))
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(_shape(node.body, _params(node)))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Lambda):
            out.append(_shape([ast.Return(value=node.value.body)], _params(node.value)))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Scores
# ----------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _answer_prints(graded: tuple[Solution, ...]) -> list[tuple[list, set[str]]]:
    """Per answer: the fingerprints of its pieces (boilerplate left out) and the numbered shapes of its bodies."""
    shared = _shared_by_solutions(graded)
    out = []
    for solution in graded:
        pieces = [_print(f"{solution.grade_id}-{i}", p, shared) for i, p in enumerate(solution.pieces)]
        params = solution.params or ((),) * len(solution.pieces)
        out.append((pieces, {s for s in map(_piece_shape, solution.pieces, params) if s}))
    return out


def scores(cells: Sequence[Cell], graded: Sequence[Solution]) -> list[Score]:
    """For every lesson and every solution: how much of the solution the lesson holds (its best cell, or its cells
    together when that is more) and which cells define it as a function. Pairs with nothing in common are left out;
    ordered by lesson, give-aways first, then by share."""
    by_lesson: dict[str, list[Cell]] = {}
    for cell in cells:
        by_lesson.setdefault(cell.lesson, []).append(cell)
    cell_hashes = {(c.lesson, c.index): set(_print(f"{c.lesson}-{c.index}", c.code).hashes) for c in cells}
    cell_functions = {(c.lesson, c.index): set(_function_shapes(c.code)) for c in cells}
    out: list[Score] = []
    for solution, (pieces, shapes) in zip(graded, _answer_prints(tuple(graded)), strict=True):
        total = sum(map(_positions, pieces))
        fingerprintable = sum(len(p.filtered_code) for p in pieces) >= MIN_CHARS
        for lesson, its_cells in by_lesson.items():
            same = tuple(c.index for c in its_cells if shapes & cell_functions[(c.lesson, c.index)])
            best, best_cells, union, contributing = 0.0, (), set(), []
            for cell in its_cells if total else ():
                hashes = cell_hashes[(cell.lesson, cell.index)]
                covered = sum(_covered(p, hashes)[0] for p in pieces)
                if covered:
                    contributing.append(cell.index)
                    union |= hashes
                    if covered / total > best:
                        best, best_cells = covered / total, (cell.index,)
            if not contributing and not same:
                continue
            found = [_covered(p, union) for p in pieces]
            together = sum(c for c, _ in found) / total if total else 0.0
            share, where = (together, tuple(contributing)) if together > best + 1e-9 else (best, best_cells)
            if same:
                passages = [line.strip() for p in solution.pieces for line in p.splitlines() if line.strip()]
            else:
                passages = [
                    line
                    for piece, (_, spans) in zip(solution.pieces, found, strict=True)
                    for line in _lines_in(_uncommented(piece), spans)
                ]
            out.append(Score(lesson, solution, share, where, fingerprintable, same, passages))
    out.sort(key=lambda s: (s.lesson, not s.giveaway, -s.share, s.solution.grade_id))
    return out


def giveaways(
    cells: Sequence[Cell] | None = None, graded: Sequence[Solution] | None = None, *, root: Path = ROOT
) -> list[Score]:
    """Every give-away: a lesson holding `THRESHOLD` or more of a fingerprintable solution, or defining a solution
    as a function (names aside). Defaults: every lesson and every solution on disk."""
    cells = course_cells(root) if cells is None else cells
    graded = solutions(root) if graded is None else graded
    return [s for s in scores(cells, graded) if s.giveaway]


def table(found: Sequence[Score], *, top: int = 3) -> str:
    """The `top` largest shares per lesson, one line each; give-aways always, marked."""
    lines = [f"{'lesson':24} {'cells':>10}  {'assignment':15} {'graded function':24} {'share':>5}  verdict"]
    per: dict[str, int] = {}
    for s in found:
        per[s.lesson] = per.get(s.lesson, 0) + 1
        if per[s.lesson] > top and not s.giveaway:
            continue
        cells = ",".join(map(str, sorted(set(s.cells) | set(s.same_function))))
        cells = cells if len(cells) <= 10 else cells[:9] + "…"
        verdict = "GIVE-AWAY" if s.giveaway else ""
        if s.same_function:
            verdict += " (same function)"
        elif not s.fingerprintable:
            verdict += "(short answer: only a same function counts)"
        lines.append(
            f"{s.lesson:24} {cells:>10}  {s.solution.assignment:15} {s.solution.label:24} {s.share:5.2f}  "
            f"{verdict}".rstrip()
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the top shares per lesson and every give-away; exit status 1 when there is one."""
    import argparse

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--top", type=int, default=3, help="lines per lesson (give-aways are always shown)")
    args = parser.parse_args(argv)
    found = scores(course_cells(), solutions())
    print(table(found, top=args.top))
    bad = [s for s in found if s.giveaway]
    for s in bad:
        print(f"\ngive-away: {s.describe()}")
        for line in s.passages[:12]:
            print(f"    {line}")
    print(
        f"\n{len(bad)} give-away{'s' if len(bad) != 1 else ''} (threshold {THRESHOLD}, fingerprints of {NOISE} "
        f"characters, window {WINDOW})"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
