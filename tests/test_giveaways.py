"""The give-away detector (`twoprim.analytics.giveaways`): no lesson holds a graded answer, verbatim, renamed or in
part; the detector finds lesson 09 as it was at e3f7c9b, renamed and partial copies built here, and leaves alone the
neighbouring cases a lesson is meant to teach on. About 3 s: every lesson and every solution are fingerprinted once.
"""

from __future__ import annotations

import ast
import io
import json
import textwrap
import tokenize
from pathlib import Path

import pytest

from twoprim.analytics import giveaways as g

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def graded() -> list[g.Solution]:
    return g.solutions()


def _solution(graded, grade_id: str) -> g.Solution:
    return next(s for s in graded if s.grade_id == grade_id)


def _lesson(*codes: str, name: str = "99_made_up") -> list[g.Cell]:
    return [g.Cell(name, i, textwrap.dedent(code)) for i, code in enumerate(codes)]


def _scores(cells, graded) -> dict[str, g.Score]:
    """graded function's label -> its score in that made-up lesson."""
    return {s.solution.label: s for s in g.scores(cells, graded)}


def _renamed(code: str, prefix: str) -> str:
    """`code` with every name its author chose changed (parameters, locals, inner functions: not the modules and
    library calls it uses) and every comment rewritten; the layout is kept."""
    tree = ast.parse(code)
    chosen = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    chosen |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    chosen |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    chosen |= {"A", "B", "M", "N", "K", "tile", "fun", "args", "model", "x", "level", "train"}  # the parameters
    lines = code.splitlines(keepends=True)
    edits, previous = [], None
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.NAME and tok.string in chosen and previous != ".":
            edits.append((tok.start, tok.end, f"{prefix}_{tok.string[::-1]}"))
        elif tok.type == tokenize.COMMENT:
            edits.append((tok.start, tok.end, "# rewritten in my own words"))
        previous = tok.string
    for (row, col), (_, end), new in reversed(edits):  # right to left: earlier columns stay valid
        lines[row - 1] = lines[row - 1][:col] + new + lines[row - 1][end:]
    return "".join(lines)


def _as_function(name: str, params: str, body: str) -> str:
    return f"def {name}({params}):\n    '''Written for this lesson.'''\n" + textwrap.indent(body, "    ") + "\n"


# ------------------------------------------------------------------------------------------------------------------
# (a) the lessons on disk
# ------------------------------------------------------------------------------------------------------------------


def test_no_lesson_holds_a_graded_answer(graded):
    found = g.giveaways(g.course_cells(), graded)
    assert not found, (
        "lessons that hold a graded answer (teach on a neighbouring case, or stop a step short):\n"
        + "\n".join(f"  {s.describe()}\n" + "".join(f"      {line}\n" for line in s.passages[:8]) for s in found)
    )


# ------------------------------------------------------------------------------------------------------------------
# (b) lesson 09 as it was: its kernels were ex09's, line for line
# ------------------------------------------------------------------------------------------------------------------


def test_lesson_09_at_e3f7c9b_is_found_with_all_three_kernels(graded):
    """Its kernels were ex09's line for line then; ex09's solutions have grown since (strides of `out`), and the old
    cells still hold most of each answer."""
    old = json.loads((DATA / "lesson09_e3f7c9b_cells.json").read_text(encoding="utf-8"))
    cells = [g.Cell("09_triton_gemm@e3f7c9b", int(i), code) for i, code in old["cells"].items()]
    found = {s.solution.label: s for s in g.giveaways(cells, graded)}
    kernels = {"add_kernel/add": 3, "softmax_kernel/softmax": 7, "matmul_kernel/matmul": 9}
    assert set(kernels) <= set(found), g.table(g.scores(cells, graded))
    for label, cell in kernels.items():
        score = found[label]
        assert score.cells == (cell,) and score.share >= 2 * g.THRESHOLD, score.describe()
        assert score.describe().startswith(f"09_triton_gemm@e3f7c9b: ex09_triton {label}: "), score.describe()
    # the fingerprints alone find them: without the `def` lines, no cell defines a function, and each is still most
    # of its answer
    bodies = [
        g.Cell(
            "bodies",
            int(i),
            textwrap.dedent("\n".join(line for line in code.splitlines() if not line.startswith(("def ", "@")))),
        )
        for i, code in old["cells"].items()
    ]
    shares = _scores(bodies, graded)
    for label in kernels:
        assert shares[label].giveaway and not shares[label].same_function, shares[label].describe()


# ------------------------------------------------------------------------------------------------------------------
# (c) renamed, recommented, reordered and partial copies
# ------------------------------------------------------------------------------------------------------------------


def _moved(code: str, line: str, before: str) -> str:
    """`code` with the statement `line` (and its indented block) moved in front of the line `before`."""
    lines = code.splitlines()
    start = next(i for i, text in enumerate(lines) if text.strip() == line)
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent
        ),
        len(lines),
    )
    block, rest = lines[start:end], lines[:start] + lines[end:]
    at = next(i for i, text in enumerate(rest) if text.strip() == before)
    moved = rest[:at] + block + rest[at:]
    assert sorted(moved) == sorted(lines) and moved != lines
    return "\n".join(moved)


def _copies(graded) -> dict[str, tuple[str, str]]:
    """name -> (the graded function copied, a lesson cell holding the copy)."""
    tiled = _solution(graded, "ex02_gemm-matmul_tiled-solution").code
    counts = _solution(graded, "ex07_mlx-mlx_op_counts-solution").code
    capture = _solution(graded, "ex06_compile-capture-solution").code
    return {
        "matmul_tiled, renamed and recommented, under another name": (
            "matmul_tiled",
            _renamed(_as_function("tile_product", "A, B, tile=64", tiled), "t") + "\nprint(t_tcudorp_elit(A, A.T))\n",
        ),
        "matmul_tiled's body, renamed, loose in a cell": (
            "matmul_tiled",
            "A = np.ones((70, 50))  # (M, K)\n" + _renamed(tiled.replace("return C", "print(C)"), "b"),
        ),
        "mlx_op_counts, renamed and recommented": (
            "mlx_op_counts",
            _renamed(_as_function("count_them", "fun, *args", counts), "z"),
        ),
        "mlx_op_counts, renamed and reordered": (
            "mlx_op_counts",
            "x = 3\n"
            + _renamed(
                _as_function(
                    "trace_primitives",
                    "fun, *args",
                    _moved(counts, "counts = Counter()", "mx.export_function(callback, fun, *args)"),
                ),
                "m",
            ),
        ),
        "capture, renamed and reordered": (
            "capture",
            _renamed(
                _as_function(
                    "graphs_of",
                    "model, x, level, train=False",
                    _moved(capture, "def dynamo_backend(gm, example_inputs):", "forward, backward = [], []"),
                ),
                "c",
            ),
        ),
    }


@pytest.mark.parametrize("case", sorted(_copies(g.solutions())))
def test_a_renamed_recommented_or_reordered_copy_is_found(graded, case):
    label, code = _copies(graded)[case]
    assert (
        "# rewritten in my own words" in code
        or "#" not in _solution(graded, next(s.grade_id for s in graded if s.label == label)).code
    )
    cells = _lesson("import numpy as np\nimport torch\n", code)
    scores = g.scores(cells, graded)
    found = {s.solution.label: s for s in scores if s.giveaway}
    assert label in found and found[label].cells == (1,), g.table(scores)
    if "reordered" not in case:  # renaming and recommenting change no fingerprint
        assert found[label].share > 0.9, found[label].describe()


def test_partial_copies_are_found(graded):
    dots = _solution(graded, "ex02_gemm-matmul_dots-solution").code.splitlines()
    loops = [line for line in dots if line.lstrip().startswith(("for ", "C[i, j]"))]
    assert len(loops) == 3 and len(dots) == 6  # most of matmul_dots: its loops and its one dot per element
    capture = _solution(graded, "ex06_compile-capture-solution").code
    keeping = capture[capture.index("def keeping") : capture.index("def dynamo_backend")]  # no Dynamo backend
    compiling = (
        "backend = aot_autograd(fw_compiler=keeping(forward), bw_compiler=keeping(backward))\n"
        + capture[capture.index("torch._dynamo.reset()") : capture.index("return forward + backward")]
    )
    cells = _lesson(
        "import torch\nA, B = torch.randn(30, 20), torch.randn(20, 10)  # (M, K), (K, N)\nM, N = 30, 10\n"
        "C = torch.zeros(M, N)\n" + _renamed("\n".join(loops), "p") + "\nprint(C.sum())\n",
        # capture at level "aten" only, split over two cells: the compilers, then the compile and the run
        "forward, backward = [], []\n" + _renamed(keeping, "k"),
        "model, x = make_mlp(), torch.randn(4, 16)\n" + _renamed(compiling, "k"),
    )
    scores = _scores(cells, graded)
    assert scores["matmul_dots"].giveaway and scores["matmul_dots"].cells == (0,), scores["matmul_dots"].describe()
    assert any("torch.dot(A[i, :], B[:, j])" in line for line in scores["matmul_dots"].passages)
    assert scores["capture"].giveaway and scores["capture"].cells == (1, 2), scores["capture"].describe()


# ------------------------------------------------------------------------------------------------------------------
# (d) what a lesson may show: a neighbouring case, a step short, the formula
# ------------------------------------------------------------------------------------------------------------------

NEIGHBOURS = {
    "a GEMV in blocks of rows": """\
        def gemv_blocked(A, x, rows):
            '''y = A·x, `rows` rows of A at a time.'''
            M, K = A.shape
            y = torch.empty(M, dtype=A.dtype)
            for i0 in range(0, M, rows):
                y[i0:i0 + rows] = A[i0:i0 + rows] @ x  # (rows, K) @ (K,) -> (rows,)
            return y
        """,
    "one tile step of a GEMM": """\
        i0, j0, t = 32, 64, 32
        C_tile = torch.zeros(t, t)                                    # (t, t): one tile of C
        for k0 in range(0, K, t):                                     # K a multiple of t here
            C_tile += A[i0:i0 + t, k0:k0 + t] @ B[k0:k0 + t, j0:j0 + t]  # (t, t) @ (t, t) -> (t, t)
        print(torch.allclose(C_tile, (A @ B)[i0:i0 + t, j0:j0 + t]))
        """,
    "a Triton GEMV kernel": """\
        @triton.jit
        def gemv_kernel(a_ptr, x_ptr, y_ptr, M, K, stride_am, stride_ak, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
            pid = tl.program_id(axis=0)
            rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
            rk = tl.arange(0, BLOCK_K)
            acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                a = tl.load(a_ptr + rm[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak)
                x = tl.load(x_ptr + k0 + rk)
                acc += tl.sum(a * x[None, :], axis=1)
            tl.store(y_ptr + rm, acc)
        """,
    "a Triton row max kernel": """\
        @triton.jit
        def row_max_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK_N: tl.constexpr):
            row = tl.program_id(axis=0)
            cols = tl.arange(0, BLOCK_N)
            x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
            tl.store(out_ptr + row, tl.max(x, axis=0))
        """,
    "one fixed MLX trace read once": """\
        entries = []
        mx.export_function(entries.append, layer, x)      # nothing runs: one dict per entry of the graph
        for e in entries:
            if e["type"] == "primitive":
                print(e["name"], [tuple(shape) for _, shape, _ in e["inputs"]])
        """,
    "Dynamo's graph through torch._logging": """\
        torch._dynamo.reset()
        with compiler.captured_output(graph_code=True, aot_graphs=True) as logged:
            with torch.no_grad():
                torch.compile(model, backend="aot_eager")(x)
        print(logged.artifact("graph_code"))
        """,
    "the formulas, evaluated": """\
        M, N, K = 64, 32, 16
        print(2 * M * N * K, (x * w).sum(), torch.softmax(s, dim=-1))
        speeds = {"(x * w).sum()": lambda x, w: (x * w).sum(), "mx.inner": lambda x, w: mx.inner(x, w)}
        """,
}


@pytest.mark.parametrize("case", sorted(NEIGHBOURS))
def test_a_neighbouring_case_is_not_a_giveaway(graded, case):
    cells = _lesson(NEIGHBOURS[case])
    scores = g.scores(cells, graded)
    assert not [s for s in scores if s.giveaway], g.table(scores)


def test_a_short_answer_counts_only_when_handed_over_as_a_function(graded):
    flops = _solution(graded, "ex02_gemm-gemm_flops-solution")
    inline = _lesson("M, N, K = 4, 5, 6\nprint(f'{2 * M * N * K:,} FLOPs')\n")
    as_def = _lesson("def flops_of(m, n, k):\n    '''2·M·N·K'''\n    return 2 * m * n * k  # a multiply and an add\n")
    as_name = _lesson("count = lambda rows, cols, depth: 2 * rows * cols * depth\n")
    assert not [s for s in g.scores(inline, [flops]) if s.giveaway]
    for cells in (as_def, as_name):
        found = g.giveaways(cells, [flops])
        assert [s.solution.label for s in found] == ["gemm_flops"] and found[0].same_function == (0,), found
        assert not found[0].fingerprintable
