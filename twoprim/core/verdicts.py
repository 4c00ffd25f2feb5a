"""Verdicts the submission cannot fake: its kernel computes, the grader judges.

When a submission is graded, its kernel only *runs* the learner's functions. Every `run_check` there records, case
by case, what came back (or what was raised, or which rule of the exercise the call broke) into the box's capture
folder (`TWOPRIM_CAPTURE_DIR`). After the notebook has run, the grader process executes each graded test cell's
trusted source itself, with the learner's functions replaced by `Recorded` stand-ins: `run_check` then builds the
cases and the expected values in the grader, takes what the kernel recorded for the same cases, and judges it
there. A point is earned only when that grader-side check passes, so patching `torch.allclose`, the check
functions, `sys.excepthook`, IPython's input transformers or `builtins`, printing a fake pass, inspecting frames
for expected values (they never exist in the kernel's memory at grading time: they are computed in the grader) or
exiting early cannot earn one.

Values travel as plain data: tensors, numbers, strings, containers, NumPy and MLX arrays (as tensors with their
dtype), FX graphs (as their nodes); files are read with `torch.load(weights_only=True)`, which runs no code.
Anything else arrives as a stand-in that says what it was, and the judge rejects it.

Rules (a forbidden op inside the call) are observed where the code runs, in the kernel; `audit` reads the
submitted code in the grader (`twoprim.grading.audit`) and holds a submission that reaches for the machinery that
observes them.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import hashlib
import importlib
import io
import os
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from twoprim.core.catalog import package_modules
from twoprim.core.failures import CheckFailure

CAPTURE_ENV = "TWOPRIM_CAPTURE_DIR"
MAX_CAPTURE_BYTES = 512 * 2**20
_MAX_DEPTH = 24
_MAX_ITEMS = 200_000
_MAX_TEXT = 4000

# ----------------------------------------------------------------------------------------------------------------
# Values as plain data
# ----------------------------------------------------------------------------------------------------------------


class Opaque:
    """A value the capture could not carry (its type and repr are kept for the message)."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text


def _opaque(value: Any) -> dict:
    try:
        text = repr(value)[:300]
    except Exception:  # noqa: BLE001 - a repr that raises is described by its type
        text = f"<{type(value).__name__}>"
    return {"t": "opaque", "type": type(value).__name__[:100], "repr": text}


def encode(value: Any, depth: int = 0) -> Any:
    """`value` as data `torch.load(weights_only=True)` reads back."""
    if depth > _MAX_DEPTH:
        return _opaque(value)
    try:
        return _encode(value, depth)
    except Exception:  # noqa: BLE001 - whatever cannot be carried is described instead
        return _opaque(value)


def _encode(value: Any, depth: int) -> Any:
    import numpy as np

    if value is None or type(value) in (bool, int, float):
        return value
    if type(value) is str:
        return {"t": "str", "v": value[:100_000]}
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.is_sparse or value.device.type != "cpu":
            return _opaque(value)
        return {"t": "tensor", "v": value.detach().clone(memory_format=torch.preserve_format)}
    if isinstance(value, torch.dtype):
        return {"t": "dtype", "v": str(value).removeprefix("torch.")}
    if isinstance(value, np.ndarray):
        return {"t": "ndarray", "dtype": str(value.dtype), "v": torch.from_numpy(np.array(value, copy=True))}
    if isinstance(value, np.generic):
        return {"t": "npscalar", "dtype": str(value.dtype), "v": value.item()}
    if type(value).__module__.startswith("mlx") and hasattr(value, "dtype") and hasattr(value, "shape"):
        import mlx.core as mx

        dtype = str(value.dtype).removeprefix("mlx.core.")
        wide = value.astype(mx.float32) if dtype == "bfloat16" else value
        return {"t": "mx", "dtype": dtype, "v": torch.from_numpy(np.array(wide, copy=True))}
    if isinstance(value, torch.fx.GraphModule):
        return {"t": "fx", "nodes": [_encode_node(n) for n in value.graph.nodes]}
    if isinstance(value, (list, tuple, set, frozenset)):
        if len(value) > _MAX_ITEMS:
            return _opaque(value)
        kind = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}.get(type(value))
        cls = "" if kind else f"{type(value).__module__}.{type(value).__qualname__}"
        kind = kind or ("tuple" if isinstance(value, tuple) else "list" if isinstance(value, list) else "set")
        return {"t": kind, "cls": cls, "items": [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        if len(value) > _MAX_ITEMS:
            return _opaque(value)
        cls = {collections.Counter: "Counter", collections.OrderedDict: "OrderedDict"}.get(type(value), "dict")
        if isinstance(value, collections.Counter) and cls == "dict":
            cls = "Counter"
        return {
            "t": "dict",
            "cls": cls,
            "items": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()],
        }
    return _opaque(value)


def _encode_node(node: torch.fx.Node) -> list:
    from twoprim.core.record import target_name

    return [node.op, node.name, target_name(node) if node.op == "call_function" else str(node.target)]


def decode(data: Any) -> Any:
    """The value `encode` carried (NumPy and MLX arrays rebuilt, unknown types as `Opaque` stand-ins)."""
    if data is None or type(data) in (bool, int, float):
        return data
    if not isinstance(data, dict) or "t" not in data:
        return Opaque(type(data).__name__, repr(data)[:300])
    t = data["t"]
    if t == "str":
        return str(data["v"])
    if t == "tensor":
        return data["v"]
    if t == "dtype":
        dtype = getattr(torch, str(data["v"]), None)
        return dtype if isinstance(dtype, torch.dtype) else Opaque("dtype", repr(data["v"])[:100])
    if t in ("ndarray", "npscalar"):
        import numpy as np

        if t == "npscalar":
            return np.dtype(data["dtype"]).type(data["v"])
        return data["v"].numpy().astype(data["dtype"], copy=False)
    if t == "mx":
        import mlx.core as mx

        dtype = getattr(mx, str(data["dtype"]), None)
        if not isinstance(dtype, mx.Dtype):
            return Opaque("array", f"an MLX array of unknown dtype {str(data['dtype'])[:40]!r}")
        if data["dtype"] == "bfloat16":  # carried as float32, which holds every bfloat16 exactly
            return mx.array(data["v"].numpy(), dtype=mx.float32).astype(dtype)
        return mx.array(data["v"].numpy(), dtype=dtype)
    if t == "fx":
        return _graph_module(data["nodes"])
    if t in ("list", "tuple", "set", "frozenset"):
        items = [decode(v) for v in data["items"]]
        cls = data.get("cls") or ""
        result_type = (
            getattr(torch.return_types, cls.rsplit(".", 1)[-1], None) if cls.startswith("torch.return_types.") else None
        )
        if isinstance(result_type, type) and issubclass(result_type, tuple):
            return result_type(items)
        if cls == "torch.Size":
            return torch.Size(items)
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[t](items)
    if t == "dict":
        cls = {"Counter": collections.Counter, "OrderedDict": collections.OrderedDict}.get(data.get("cls") or "", dict)
        return cls({decode(k): decode(v) for k, v in data["items"]})
    if t == "opaque":
        stand_in = type(str(data.get("type", "object"))[:100] or "object", (Opaque,), {})
        return stand_in(str(data.get("type", "")), str(data.get("repr", ""))[:300])
    return Opaque(str(t), repr(data)[:300])


_RESOLVABLE = ("torch", "operator", "_operator", "math", "builtins")


def _resolve(qualified: str) -> Any:
    """The object a qualified name such as "torch.ops.aten.addmm.default" or "operator.matmul" names, or None.
    Only names under torch, operator, math and builtins: a recorded graph must not make the grader import modules."""
    parts = qualified.split(".")
    if parts[0] not in _RESOLVABLE:
        return None
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001 - try a shorter module prefix
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            return None
    return None


def _graph_module(nodes: list) -> torch.fx.GraphModule:
    """An FX GraphModule with the recorded nodes (inputs, attributes and submodule calls become placeholders).
    Only its nodes are read: it is never compiled to code nor run."""
    graph = torch.fx.Graph()
    last = None
    for op, name, target in nodes:
        if op == "call_function":
            fn = _resolve(str(target))
            if not callable(fn):

                def fn(*args, **kwargs):
                    raise RuntimeError("recorded graph")

                fn.__name__ = fn.__qualname__ = str(target).rsplit(".", 1)[-1]
            last = graph.call_function(fn, ())
        elif op == "call_method":
            last = graph.call_method(str(target), ())
        elif op == "output":
            graph.output(last)
        else:
            last = graph.placeholder(str(name))
    module = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    module._graph = graph  # the graph property's setter would generate code from nodes that have no arguments
    return module


# ----------------------------------------------------------------------------------------------------------------
# In the kernel: record what each check's calls gave
# ----------------------------------------------------------------------------------------------------------------

_SEQUENCE = [0]


@dataclass
class Capture:
    """What one `run_check` saw in the kernel: per case "ok" (with the value), "raised", "not_written" or
    "broken" (a rule of the exercise), saved as it goes."""

    task: str
    fn: str
    labels: list
    folder: Path
    cases: list = field(default_factory=list)

    def __post_init__(self):
        _SEQUENCE[0] += 1
        self.path = self.folder / f"{_SEQUENCE[0]:06d}-{uuid.uuid4().hex[:8]}.pt"

    def add(self, status: str, value: Any = None, **text: str) -> None:
        entry = {"status": status, **{k: str(v)[:_MAX_TEXT] for k, v in text.items()}}
        if status == "ok":
            entry["value"] = encode(value)
        self.cases.append(entry)
        self.save()

    def save(self) -> None:
        torch.save({"task": self.task, "fn": self.fn[:200], "labels": self.labels, "cases": self.cases}, self.path)


def start_capture(task: str, fn_name: str, labels: list[str]) -> Capture | None:
    """A Capture when this kernel is being graded (the sandbox sets TWOPRIM_CAPTURE_DIR), else None."""
    folder = os.environ.get(CAPTURE_ENV)
    if not folder or current_replay() is not None:
        return None
    capture = Capture(task, fn_name, list(labels), Path(folder))
    capture.save()
    return capture


# ----------------------------------------------------------------------------------------------------------------
# In the grader: replay the recorded results through the same checks
# ----------------------------------------------------------------------------------------------------------------

_REPLAY: ContextVar[Replay | None] = ContextVar("twoprim_replay", default=None)
_CELL: ContextVar[str | None] = ContextVar("twoprim_cell", default=None)


def current_replay() -> Replay | None:
    """The replay the grader is judging in this context, or None in a learner's (or a graded) kernel."""
    return _REPLAY.get()


def current_cell() -> str | None:
    """While the grader judges a test cell: the digest of that cell's source (its cases, and so their expected
    values, are the same for every submission)."""
    return _CELL.get()


class Recorded:
    """Stands for one of the learner's functions (or answers) in the grader: never called, only named."""

    def __init__(self, name: str):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} runs only in the submission's kernel")

    def __repr__(self) -> str:
        return f"your {self.__name__}"


class Replay:
    """The captures one submission's kernel wrote, read safely; `find` returns the last one for a check.

    `Replay.priming_run()` has no submission behind it: judging a test cell in it computes (and keeps) the expected
    value of every case the cell's checks build, and judges nothing (`twoprim.grading.oracle`)."""

    priming = False

    @classmethod
    def priming_run(cls) -> Replay:
        replay = cls(None)
        replay.priming = True
        return replay

    def __init__(self, folder: Path | None):
        self.captures: list[dict] = []
        self.problems: list[str] = []
        total = 0
        for path in sorted(Path(folder).glob("*.pt")) if folder is not None else []:
            total += path.stat().st_size
            if total > MAX_CAPTURE_BYTES:
                self.problems.append(
                    f"the kernel wrote more than {MAX_CAPTURE_BYTES >> 20} MiB of results; the rest was ignored"
                )
                break
            try:
                data = torch.load(path, weights_only=True, map_location="cpu")
                if isinstance(data, dict) and isinstance(data.get("task"), str) and isinstance(data.get("cases"), list):
                    self.captures.append(data)
                else:
                    self.problems.append(f"{path.name} is not a result the checks write")
            except Exception as err:  # noqa: BLE001 - an unreadable file counts as no result
                self.problems.append(f"{path.name} could not be read safely ({type(err).__name__})")

    def find(self, task: str, labels: list[str]) -> dict | None:
        for capture in reversed(self.captures):
            if capture["task"] == task and capture.get("labels") == labels:
                return capture
        return None

    @contextlib.contextmanager
    def active(self):
        token = _REPLAY.set(self)
        try:
            yield self
        finally:
            _REPLAY.reset(token)


@dataclass
class Verdict:
    """The grader's judgement of one graded test cell: passed or not, and the text the learner sees."""

    grade_id: str
    passed: bool
    text: str


_LIBRARIES = {
    "torch": "torch",
    "np": "numpy",
    "numpy": "numpy",
    "math": "math",
    "F": "torch.nn.functional",
    "nn": "torch.nn",
    "Counter": "collections",
}


def defined_names(code: str) -> set[str]:
    """Top-level names a cell defines (functions, classes, assignments): in a solution cell, the learner's."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


class GradedCell(NamedTuple):
    """A graded test cell of the instructor's notebook, and the names the learner defines in that notebook."""

    grade_id: str
    code: str
    points: float
    learner: frozenset


def graded_cells(nb) -> list[GradedCell]:
    """Every graded test cell of the notebook `nb` (an nbformat notebook), in order."""
    meta = [c.get("metadata", {}).get("nbgrader", {}) if c.get("cell_type") == "code" else {} for c in nb.cells]
    learner = frozenset().union(
        *(defined_names(c.source) for c, m in zip(nb.cells, meta, strict=True) if m.get("solution"))
    )
    return [
        GradedCell(str(m.get("grade_id", "")), c.source, _points(m.get("points")), learner)
        for c, m in zip(nb.cells, meta, strict=True)
        if m.get("grade") and not m.get("solution")
    ]


def _points(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _namespace(code: str, learner: set[str]) -> dict:
    """A `Recorded` stand-in for each of the learner's names the test cell uses; the modules it names."""
    import builtins

    tree = ast.parse(code)
    bound = {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    }
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    ns: dict[str, Any] = {}
    for name in sorted(names - bound - set(dir(builtins))):
        if name in learner:
            ns[name] = Recorded(name)
        elif name in package_modules():
            ns[name] = importlib.import_module(f"twoprim.{name}")
        elif name in _LIBRARIES:
            module = importlib.import_module(_LIBRARIES[name])
            ns[name] = getattr(module, name) if name == "Counter" else module
        elif name == "mx":
            from twoprim.core import backends

            ns[name] = backends.mlx("grading this assignment")
        else:
            ns[name] = Recorded(name)
    return ns


def cell_digest(grade_id: str, code: str) -> str:
    """What the expected values of a test cell's cases are kept under (`current_cell`): its id and source."""
    return hashlib.sha256(f"{grade_id}\0{code}".encode()).hexdigest()


def judge_cell(grade_id: str, code: str, replay: Replay, learner: set[str]) -> Verdict:
    """Run one graded test cell's trusted `code` in the grader against the kernel's recorded results; `learner`
    names the functions and answers the learner defines (`defined_names` of the solution cells)."""
    out = io.StringIO()
    token = _CELL.set(cell_digest(grade_id, code))
    try:
        ns = _namespace(code, learner)
        with replay.active(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(code, f"<{grade_id}>", "exec"), ns)  # noqa: S102 - the course's own test cell
    except CheckFailure as failure:
        return Verdict(grade_id, False, str(failure))
    except Exception as err:  # noqa: BLE001 - anything else fails the cell, with what happened
        return Verdict(
            grade_id, False, f"✘ {grade_id}: the grader could not check this cell: {type(err).__name__}: {err}"
        )
    finally:
        _CELL.reset(token)
    return Verdict(grade_id, True, out.getvalue())
