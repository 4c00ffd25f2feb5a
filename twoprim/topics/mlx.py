"""Looking inside MLX: count the primitives a function builds, read and draw its graph, time lazy evaluation.

MLX records operations into a graph and runs nothing until `mx.eval` (or printing, `.item()`, NumPy conversion).
Two official ways to see that graph, both used here:

- `mx.export_function(callback, fun, *args)` traces `fun` on example inputs without running it and calls
  `callback` once per entry: the inputs, the outputs, the constants, then one `{"type": "primitive", "name": ...}`
  per primitive (`AddMM`, `Matmul`, `Transpose`, ...). `primitive_counts` is the course's (and the grader's) count.
- `mx.export_to_dot(file, *arrays)` writes the graph still *pending* behind some arrays as Graphviz DOT: only the
  primitives that have not run yet. `pending` parses it; `draw` renders it (with Graphviz `dot` when installed,
  otherwise with matplotlib, laid out here).

The two can name a primitive differently (the DOT printer says `Sum` where export says `Reduce`); a function
traced with `export_function` sees through `mx.compile`, while a pending graph shows the fused `Compiled...`
primitive that a compiled call really left behind.

The module imports without MLX (so the course package imports everywhere); its functions then raise ImportError.

Why this module is long: MLX's graph is read two ways (export_function's callback and its DOT export), and drawing it as
a figure needs a small layout of its own (no graph-drawing package is a dependency).
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # MLX's types; at run time it may be missing
    import mlx.core as mx
else:
    try:
        import mlx.core as mx
    except ImportError:  # the course package must import on machines without MLX; the lessons guard their MLX cells
        mx = None

__all__ = [
    "GEMM_PRIMITIVES",
    "Graph",
    "primitive_counts",
    "trace",
    "dot_source",
    "pending",
    "pending_counts",
    "gemm_count",
    "fused_ops",
    "draw",
    "render_dot",
    "build_and_eval_seconds",
    "eval_seconds",
    "blas_libraries",
    "format_counts",
]

# Primitives that are a dot product, GEMV or GEMM (MLX's own names).
GEMM_PRIMITIVES = frozenset(
    {"Matmul", "AddMM", "BlockMaskedMM", "GatherMM", "SegmentedMM", "QuantizedMatmul", "GatherQMM"}
)

_EXPORT = mx.export_function if mx is not None else None  # kept before anything can patch mx.export_function
_TO_DOT = mx.export_to_dot if mx is not None else None


def need_mlx(what: str = "twoprim.topics.mlx") -> None:
    """ImportError, saying what needs MLX and how to install it, where MLX is not installed."""
    if mx is None:
        raise ImportError(f"{what} needs MLX: `mlx` on Apple silicon, `mlx[cpu]` on Linux (the course environment).")


# ----------------------------------------------------------------------------------------------------------------
# Who is asking: the grader notes when a learner's function calls these helpers (ex07 rules them out there)
# ----------------------------------------------------------------------------------------------------------------

_WATCH = threading.local()


class watching:
    """Context manager used by the checks: `with watching() as used:` lists the helpers called inside."""

    def __enter__(self) -> list[str]:
        self.previous = getattr(_WATCH, "used", None)
        _WATCH.used = []
        return _WATCH.used

    def __exit__(self, *exc):
        _WATCH.used = self.previous
        return False


def _note(name: str) -> None:
    used = getattr(_WATCH, "used", None)
    if used is not None:
        used.append(f"twoprim.topics.mlx.{name}")


# ----------------------------------------------------------------------------------------------------------------
# Graphs
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Node:
    """An array (kind input, constant, source, array or output) or a primitive (kind primitive)."""

    id: str
    kind: str
    label: str
    shape: tuple | None = None
    dtype: str | None = None


@dataclass
class Graph:
    """A computation graph: array and primitive nodes, edges array -> primitive -> array."""

    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)

    def primitives(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == "primitive"]

    def counts(self) -> Counter:
        """Primitive name -> how many times it occurs."""
        return Counter(n.label for n in self.primitives())

    def add(self, node: Node) -> None:
        if node.id not in self.nodes or (
            node.kind in ("input", "constant", "output", "source") and self.nodes[node.id].kind == "array"
        ):
            self.nodes[node.id] = node


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("mlx.core.", "")


def _export(fun: Callable, args: tuple, kwargs: dict) -> list[dict]:
    need_mlx()
    assert _EXPORT is not None  # (MLX is installed)
    entries: list[dict] = []
    _EXPORT(entries.append, fun, *args, **kwargs)
    return entries


def trace(fun: Callable, *args, **kwargs) -> Graph:
    """The graph `fun(*args, **kwargs)` builds, traced with `mx.export_function` (nothing runs)."""
    _note("trace")
    return _graph_of_entries(_export(fun, args, kwargs))


def _graph_of_entries(entries: list[dict]) -> Graph:
    g = Graph()
    outputs: list = []
    for entry in entries:
        kind = entry["type"]
        if kind == "inputs":
            for name, shape, dtype in entry["inputs"]:
                g.add(Node(name, "input", name, tuple(shape), _dtype_name(dtype)))
        elif kind == "keyword_inputs":
            for item in entry["keywords"]:
                key, name, shape, dtype = item if len(item) == 4 else (item[0], item[0], item[1], item[2])
                g.add(Node(name, "input", str(key), tuple(shape), _dtype_name(dtype)))
        elif kind == "constants":
            for name, value in entry["constants"]:
                g.add(Node(name, "constant", name, tuple(value.shape), _dtype_name(value.dtype)))
        elif kind == "outputs":
            outputs = entry["outputs"]
        elif kind == "primitive":
            pid = f"p{len(g.primitives())}"
            g.add(Node(pid, "primitive", entry["name"]))
            for name, shape, dtype in entry["inputs"]:
                g.add(Node(name, "array", name, tuple(shape), _dtype_name(dtype)))
                g.edges.append((name, pid))
            for name, shape, dtype in entry["outputs"]:
                g.add(Node(name, "array", name, tuple(shape), _dtype_name(dtype)))
                g.edges.append((pid, name))
    for name, shape, dtype in outputs:
        node = g.nodes.get(name)
        if node is None or node.kind == "array":
            g.nodes[name] = Node(name, "output", name, tuple(shape), _dtype_name(dtype))
    return g


def primitive_counts(fun: Callable, *args, **kwargs) -> Counter:
    """Primitive name -> count in the graph `fun(*args, **kwargs)` builds, from `mx.export_function`'s callback.

    This is the count the ex07 grader measures (MLX's own names: `AddMM`, `Matmul`, `Transpose`, ...).
    """
    _note("primitive_counts")
    return Counter(e["name"] for e in _export(fun, args, kwargs) if e["type"] == "primitive")


def dot_source(*arrays, **named) -> str:
    """`mx.export_to_dot` of the graph still pending behind `arrays`, as a string of Graphviz DOT."""
    need_mlx()
    _note("dot_source")
    out = io.StringIO()
    assert _TO_DOT is not None  # (MLX is installed)
    _TO_DOT(out, *arrays, **named)
    return out.getvalue()


_DOT_PRIMITIVE = re.compile(r'^\{ (\S+) \[label ="(.*?)", shape=rectangle\]; \}$')
_DOT_ARRAY = re.compile(r'^\{ (?:rank=(source|sink); )?"(.+?)"; \}$')
_DOT_EDGE = re.compile(r'^"?([^"\s]+)"? -> "?([^"\s]+)"?$')


def parse_dot(text: str) -> Graph:
    """Read the DOT that `mx.export_to_dot` writes into a `Graph` (arrays: sources have no pending producer)."""
    g = Graph()
    for line in text.splitlines():
        line = line.strip()
        if m := _DOT_PRIMITIVE.match(line):
            g.add(Node(m.group(1), "primitive", m.group(2)))
        elif m := _DOT_ARRAY.match(line):
            rank, name = m.groups()
            g.add(Node(name, {"source": "source", "sink": "output"}.get(rank, "array"), name))
        elif m := _DOT_EDGE.match(line):
            g.edges.append((m.group(1), m.group(2)))
    return g


def pending(*arrays, **named) -> Graph:
    """The primitives that have not run yet behind `arrays` (what the next `mx.eval` of them will run)."""
    _note("pending")
    return parse_dot(dot_source(*arrays, **named))


def pending_counts(*arrays) -> Counter:
    """Primitive name -> count, for the primitives still waiting to run behind `arrays`."""
    _note("pending_counts")
    return parse_dot(dot_source(*arrays)).counts()


def gemm_count(counts: Counter | dict) -> int:
    """How many of the counted primitives are a dot product or GEMM (`Matmul`, `AddMM`, ...)."""
    return sum(n for name, n in counts.items() if name in GEMM_PRIMITIVES)


def format_counts(counts: Counter | dict, *, limit: int | None = None) -> str:
    """`AddMM ×2, Transpose ×2, ...`, most frequent first (GEMM primitives first among equals)."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] not in GEMM_PRIMITIVES, kv[0]))
    shown = [f"{name} ×{n}" for name, n in items[:limit]]
    if limit is not None and len(items) > limit:
        shown.append(f"... ({len(items) - limit} more kinds)")
    return ", ".join(shown) if shown else "(none)"


# Primitive names with more than one capital, so that a fused name splits correctly.
_NAMES = sorted(
    {
        "AddMM",
        "AsType",
        "ErfInv",
        "LogAddExp",
        "LogicalNot",
        "LogicalAnd",
        "LogicalOr",
        "NotEqual",
        "GreaterEqual",
        "LessEqual",
        "ArcTan",
        "ArcTan2",
        "ArcSin",
        "ArcCos",
        "ArcTanh",
        "ArcSinh",
        "ArcCosh",
        "StopGradient",
        "ExpandDims",
        "RandomBits",
        "LogSumExp",
        "BitwiseBinary",
        "BitwiseInvert",
        "NumberOfElements",
        "DivMod",
        "Log1p",
        "Expm1",
        "IsNaN",
        "IsInf",
    },
    key=len,
    reverse=True,
)


def fused_ops(label: str) -> list[str]:
    """The primitives inside a compiled one: `CompiledBroadcastMultiplyAdd` -> ['Broadcast', 'Multiply', 'Add']."""
    rest = label.removeprefix("Compiled")
    ops = []
    while rest:
        name = next((n for n in _NAMES if rest.startswith(n)), None)
        if name is None:
            m = re.match(r"[A-Z][a-z0-9]*", rest)
            name = m.group(0) if m else rest
        ops.append(name)
        rest = rest[len(name) :]
    return ops


# ----------------------------------------------------------------------------------------------------------------
# Pictures
# ----------------------------------------------------------------------------------------------------------------

_GEMM_COLOUR, _FUSED_COLOUR, _OTHER_COLOUR, _ARRAY_COLOUR = "#f6a04d", "#c39bd3", "#dbe4ee", "#ffffff"


def _short(label: str, width: int = 24) -> str:
    """A primitive's box text: a compiled primitive as 'Compiled: n ops' and its op counts, wrapped."""
    if not label.startswith("Compiled"):
        return label
    ops = Counter(fused_ops(label))
    words = [f"{op} ×{n}" if n > 1 else op for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines, line = [f"Compiled: {sum(ops.values())} ops"], ""
    for word in words:
        if line and len(line) + 2 + len(word) > width:
            lines.append(line + ",")
            line = word
        else:
            line = f"{line}, {word}" if line else word
    return "\n".join(lines + [line])


def _is_auto_name(name: str) -> bool:
    """MLX names unnamed arrays A, B, ..., Z, AA, AB, ...; such names say nothing in a picture."""
    return re.fullmatch(r"[A-Z]+", name) is not None


def _lines(g: Graph, n: str) -> int:
    node = g.nodes[n]
    return len(_short(node.label).splitlines()) if node.kind == "primitive" else 1


def _layout(g: Graph) -> tuple[dict[str, tuple[float, float]], list[tuple[str, str]], list[str]]:
    """Positions for the drawable nodes (primitives, source arrays, outputs) with intermediate arrays collapsed."""
    producers: dict[str, list[str]] = {}
    consumers: dict[str, list[str]] = {}
    for a, b in g.edges:
        consumers.setdefault(a, []).append(b)
        producers.setdefault(b, []).append(a)
    shown = [
        nid
        for nid, n in g.nodes.items()
        if n.kind == "primitive"
        or (n.kind in ("input", "constant", "source") and nid in consumers)
        or n.kind == "output"
    ]
    keep = set(shown)
    edges = []
    for nid in shown:  # shown -> shown, through one collapsed array
        for nxt in consumers.get(nid, []):
            if nxt in keep:
                edges.append((nid, nxt))
            else:
                edges.extend((nid, prim) for prim in consumers.get(nxt, []) if prim in keep)
        if g.nodes[nid].kind == "output":
            edges.extend((p, nid) for p in producers.get(nid, []) if p in keep)
    edges = list(dict.fromkeys(edges))
    preds: dict[str, list[str]] = {n: [] for n in shown}
    succs: dict[str, list[str]] = {n: [] for n in shown}
    for a, b in edges:
        preds[b].append(a)
        succs[a].append(b)
    layer: dict[str, int] = {}

    def depth(n: str) -> int:
        if n not in layer:
            layer[n] = 0  # guards against cycles, which a computation graph never has
            layer[n] = 1 + max((depth(p) for p in preds[n]), default=-1)
        return layer[n]

    for n in shown:
        depth(n)
    for n in sorted(shown, key=lambda n: -layer[n]):  # then as late as possible: each node just above its first use
        if succs[n]:
            layer[n] = max(layer[n], min(layer[s] for s in succs[n]) - 1)
    rows: dict[int, list[str]] = {}
    for n in shown:
        rows.setdefault(layer[n], []).append(n)
    pos_in_row = {n: float(i) for row in rows.values() for i, n in enumerate(row)}
    for sweep in range(6):  # barycentre ordering, alternating down and up sweeps
        order = sorted(rows) if sweep % 2 == 0 else sorted(rows, reverse=True)
        ref = preds if sweep % 2 == 0 else succs
        for r in order:

            def centre(n: str, ref: dict = ref) -> float:
                near = [pos_in_row[m] for m in ref[n]]
                return sum(near) / len(near) if near else pos_in_row[n]

            rows[r].sort(key=centre)
            for i, n in enumerate(rows[r]):
                pos_in_row[n] = i - (len(rows[r]) - 1) / 2

    def width(n: str) -> float:  # in layout units (one unit is about 1.45 inches of figure)
        node = g.nodes[n]
        if node.kind != "primitive":
            return 1.0
        return max(1.0, 0.085 * max(len(line) for line in _short(node.label).splitlines()) + 0.35)

    pos, y = {}, 0.0
    for r in sorted(rows):
        row = rows[r]
        tall = max(_lines(g, n) for n in row)
        y -= 0.5 + 0.09 * tall  # half of this row's height below the previous row's centre
        widths = [width(n) for n in row]
        x, total = 0.0, sum(widths)
        for n, w in zip(row, widths, strict=True):
            pos[n] = (x + w / 2 - total / 2, y)
            x += w
        y -= 0.5 + 0.09 * tall
    return pos, edges, shown


def _draw_node(ax, node: Node, x: float, y: float) -> None:
    """One node of `draw`: a primitive as a coloured box with its name, an array as a small circle labelled with its
    name and shape."""
    if node.kind == "primitive":
        colour = (
            _GEMM_COLOUR
            if node.label in GEMM_PRIMITIVES
            else _FUSED_COLOUR
            if node.label.startswith("Compiled")
            else _OTHER_COLOUR
        )
        ax.text(
            x,
            y,
            _short(node.label),
            ha="center",
            va="center",
            fontsize=8,
            zorder=3,
            bbox=dict(boxstyle="round,pad=0.3", fc=colour, ec="#555555", lw=0.8),
        )
        return
    name = "" if _is_auto_name(node.label) else node.label
    if not name and node.kind in ("output", "input"):
        name = node.kind
    if node.kind == "constant":
        name = "const"
    text = f"{name} {tuple(node.shape)}" if node.shape is not None else name
    ax.plot([x], [y], "o", ms=7, mfc=_ARRAY_COLOUR, mec="#333333", zorder=3)
    below = node.kind == "output"  # outputs: arrows come in from above, so the label goes underneath
    ax.text(
        x,
        y - 0.16 if below else y + 0.16,
        text.strip(),
        ha="center",
        va="top" if below else "bottom",
        fontsize=7,
        color="#333333",
        zorder=4,
    )


def draw(graph: Graph, *, title: str = "", ax=None):
    """Draw a graph with matplotlib: GEMM primitives orange, fused (compiled) ones purple, arrays as circles.

    Intermediate arrays are folded into the edges; inputs, constants and evaluated arrays are small circles
    labelled with their name (when MLX was given one) and shape (when known). Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    pos, edges, shown = _layout(graph)
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]
    if ax is None:
        width = min(16.0, max(6.0, 1.45 * (max(xs) - min(xs) + 2)))
        height = min(18.0, max(3.0, 0.7 * (max(ys) - min(ys) + 1.6)))
        fig, ax = plt.subplots(figsize=(width, height))
    else:
        fig = ax.figure

    def half_height(n: str) -> float:
        return 0.06 + 0.075 * _lines(graph, n) if graph.nodes[n].kind == "primitive" else 0.08

    for a, b in edges:
        (x0, y0), (x1, y1) = pos[a], pos[b]
        ax.annotate(
            "",
            xy=(x1, y1 + half_height(b)),
            xytext=(x0, y0 - half_height(a)),
            arrowprops=dict(arrowstyle="-|>", color="#7a7a7a", lw=0.8, shrinkA=1, shrinkB=1),
        )
    for nid in shown:
        _draw_node(ax, graph.nodes[nid], *pos[nid])
    ax.set_xlim(min(xs) - 1, max(xs) + 1)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.axis("off")
    handles = [
        Patch(fc=_GEMM_COLOUR, ec="#555555", label="GEMM primitive"),
        Patch(fc=_FUSED_COLOUR, ec="#555555", label="compiled (fused) primitive"),
        Patch(fc=_OTHER_COLOUR, ec="#555555", label="other primitive"),
        Line2D([], [], marker="o", ls="", mfc=_ARRAY_COLOUR, mec="#333333", label="array (input / evaluated)"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def render_dot(text: str, *, title: str = ""):
    """A picture of DOT text from `mx.export_to_dot`: Graphviz `dot` when installed, else `draw` (matplotlib).

    Returns (figure, renderer) where renderer says which of the two drew it.
    """
    import matplotlib.pyplot as plt

    exe = shutil.which("dot")
    if exe:
        png = subprocess.run([exe, "-Tpng", "-Gdpi=90"], input=text.encode(), capture_output=True, check=True).stdout
        image = plt.imread(io.BytesIO(png), format="png")
        fig, ax = plt.subplots(figsize=(min(16, image.shape[1] / 90), min(22, image.shape[0] / 90)))
        ax.imshow(image)
        ax.axis("off")
        if title:
            ax.set_title(title, fontsize=10)
        return fig, f"Graphviz ({exe})"
    return draw(parse_dot(text), title=title), "matplotlib (Graphviz `dot` is not installed)"


# ----------------------------------------------------------------------------------------------------------------
# Timing lazy evaluation
# ----------------------------------------------------------------------------------------------------------------


def build_and_eval_seconds(build: Callable[[], Any], *, repeats: int = 5) -> dict[str, float]:
    """Median seconds to *build* a graph (`out = build()`, nothing runs) and to *run* it (`mx.eval(out)`)."""
    need_mlx()
    from twoprim.core.timing import step_seconds

    built, ran = step_seconds(build, mx.eval, repeats=repeats)
    return {"build": built, "eval": ran}


def eval_seconds(fn: Callable[[], Any], *, min_run_time: float = 0.1) -> float:
    """Median seconds of `mx.eval(fn())`: building the graph and running it (torch's benchmark timer)."""
    need_mlx()
    from twoprim.core.timing import seconds

    return seconds(lambda: mx.eval(fn()), min_run_time=min_run_time)


def blas_libraries() -> list[str]:
    """The BLAS/LAPACK shared libraries bundled in the installed MLX wheel (empty when it bundles none)."""
    need_mlx()
    import mlx

    site = Path(mlx.__path__[0]).parent
    found = []
    for folder in sorted(site.glob("mlx*.libs")) + [Path(mlx.__path__[0]) / "lib"]:
        if folder.is_dir():
            found += [f"{folder.name}/{p.name}" for p in sorted(folder.iterdir()) if re.search(r"blas|lapack", p.name)]
    return found


def iter_primitives(entries: Iterable[dict]) -> Iterable[str]:
    """Names of the primitive entries among `mx.export_function` callback entries."""
    return (e["name"] for e in entries if e.get("type") == "primitive")
