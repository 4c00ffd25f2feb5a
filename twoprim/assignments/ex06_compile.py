"""Checks for assignment ex06_compile: capture what `torch.compile` builds and count its GEMMs.

Nothing here holds a count: every expected value is measured when the check runs, by the grader's own capture and
counting code (`twoprim.topics.inside_torch_compile`), on the torch that is installed. So the checks stay right on
another torch release, where a graph may gain or lose an op.

The models the checks try are defined here, with one-line reprs so a failure message says what was tried. Visible
checks use the default cases; the hidden checks in the solution notebook pass their own (same builders, other
models: a 3-layer MLP, einsum attention, a model with two graph breaks) and `hidden=0`.

Why this module is long: one assignment's checks (three graded functions and the short answers measured at grading
time), with the models the checks capture, their messages and hints; split further, a check would sit apart from the
models and messages it needs.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import numbers
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch import nn

from twoprim.core import guards, verdicts
from twoprim.core.checks import Case, CheckResult, Mismatch, Rule, no_grader_calls, run_check
from twoprim.core.counting import as_counter, difference
from twoprim.topics import inside_torch_compile as compiler

__all__ = [
    "GEMM_OPS",
    "MLP",
    "MatmulMLP",
    "EinsumMLP",
    "EinsumAttention",
    "MLPWithBreak",
    "LoggedMLP",
    "Spec",
    "build",
    "model_cases",
    "graph_cases",
    "answer_cases",
    "graph_module",
    "capture_args",
    "check_count_ops",
    "check_capture",
    "check_gemm_count",
    "check_forward_gemms",
    "check_backward_gemms",
    "check_backward_gemms_input_grad",
    "check_no_bias_gemms",
    "check_graph_break_graphs",
]

TASK = "ex06_compile"
GEMM_OPS = compiler.GEMM_OPS


# ----------------------------------------------------------------------------------------------------------------
# The models the checks try
# ----------------------------------------------------------------------------------------------------------------


def _arrow(sizes: Sequence[int]) -> str:
    return "→".join(str(s) for s in sizes)


class MLP(nn.Sequential):
    """Linear, ReLU, Linear, ... for sizes (in, hidden..., out): `MLP(16, 32, 8)` is the 2-layer MLP."""

    def __init__(self, *sizes: int, bias: bool = True):
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            layers += [nn.Linear(n_in, n_out, bias=bias)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
        super().__init__(*layers)
        self.sizes, self.bias = tuple(sizes), bias

    def __repr__(self) -> str:
        return f"MLP({_arrow(self.sizes)}{'' if self.bias else ', bias=False'})"


class MatmulMLP(nn.Module):
    """The 2-layer MLP written with `@`: relu(x @ W1.T + b1) @ W2.T + b2."""

    def __init__(self, n_in: int, hidden: int, n_out: int):
        super().__init__()
        self.W1 = nn.Parameter(torch.randn(hidden, n_in) / n_in**0.5)  # (H, K), nn.Linear's layout
        self.b1 = nn.Parameter(torch.zeros(hidden))
        self.W2 = nn.Parameter(torch.randn(n_out, hidden) / hidden**0.5)
        self.b2 = nn.Parameter(torch.zeros(n_out))
        self.sizes = (n_in, hidden, n_out)

    def forward(self, x):
        h = torch.relu(x @ self.W1.T + self.b1)  # (M, K) @ (K, H) -> (M, H)
        return h @ self.W2.T + self.b2  # (M, H) @ (H, N) -> (M, N)

    def __repr__(self) -> str:
        return f"MatmulMLP({_arrow(self.sizes)}, x @ W.T + b)"


class EinsumMLP(MatmulMLP):
    """The 2-layer MLP written with einsum: '...k,hk->...h'."""

    def forward(self, x):
        h = torch.relu(torch.einsum("...k,hk->...h", x, self.W1) + self.b1)
        return torch.einsum("...h,nh->...n", h, self.W2) + self.b2

    def __repr__(self) -> str:
        return f"EinsumMLP({_arrow(self.sizes)}, einsum)"


class EinsumAttention(nn.Module):
    """Single-head self-attention written with einsum: x (B, S, D) -> (B, S, D)."""

    def __init__(self, d: int):
        super().__init__()
        self.W_qkv = nn.Parameter(torch.randn(3, d, d) / d**0.5)  # q, k, v projections
        self.W_o = nn.Parameter(torch.randn(d, d) / d**0.5)
        self.d = d

    def forward(self, x):
        q, k, v = torch.einsum("bsd,ned->nbse", x, self.W_qkv)  # 3 × (B, S, D)
        scores = torch.einsum("bsd,btd->bst", q, k) / self.d**0.5  # (B, S, D) @ (B, D, S) -> (B, S, S)
        out = torch.einsum("bst,btd->bsd", scores.softmax(dim=-1), v)  # (B, S, S) @ (B, S, D) -> (B, S, D)
        return out @ self.W_o.T

    def __repr__(self) -> str:
        return f"EinsumAttention(D={self.d})"


class MLPWithBreak(MLP):
    """The 2-layer MLP with a sanity check between the layers: a data-dependent `if`, so Dynamo breaks the graph."""

    def __init__(self, n_in: int, hidden: int, n_out: int):
        super().__init__(n_in, hidden, n_out)

    # x as in every model here (Sequential names it `input`; it is only ever passed positionally)
    def forward(self, x):  # pyright: ignore[reportIncompatibleMethodOverride]
        linear1, relu, linear2 = self  # unpacked, not self[i]: Dynamo traces Sequential.__getitem__ (a quarter of
        h = relu(linear1(x))  # a capture), and the graphs are the same
        if not torch.isfinite(h).all():  # Python needs a bool from a tensor: a graph break
            raise FloatingPointError("non-finite activations")
        return linear2(h)

    def __repr__(self) -> str:
        return f"MLPWithBreak({_arrow(self.sizes)}, an `if` on a tensor between the layers)"


@torch.compiler.disable
def _record_activation(h: torch.Tensor) -> None:
    """A hook that runs as plain Python, outside any graph (as activation logging does)."""


class LoggedMLP(MLP):
    """An MLP that passes every hidden activation to a `torch.compiler.disable`d logging hook."""

    def __init__(self, n_in: int, hidden1: int, hidden2: int, n_out: int):
        super().__init__(n_in, hidden1, hidden2, n_out)

    # x as in every model here (Sequential names it `input`; it is only ever passed positionally)
    def forward(self, x):  # pyright: ignore[reportIncompatibleMethodOverride]
        linear1, relu1, linear2, relu2, linear3 = self  # unpacked, as MLPWithBreak
        h = relu1(linear1(x))
        _record_activation(h)  # Dynamo may not trace it: a graph break
        h = relu2(linear2(h))
        _record_activation(h)  # and another (no loop here: a graph break inside a loop makes Dynamo
        return linear3(h)  # give up on the whole frame and run it eagerly)

    def __repr__(self) -> str:
        return f"LoggedMLP({_arrow(self.sizes)}, a compiler.disable'd hook after each ReLU)"


MODELS: dict[str, Callable[[], MLP | MatmulMLP | EinsumAttention]] = {
    "mlp": lambda: MLP(16, 32, 8),
    "mlp_no_bias": lambda: MLP(16, 32, 8, bias=False),
    "matmul": lambda: MatmulMLP(16, 32, 8),
    "einsum": lambda: EinsumMLP(16, 32, 8),
    "break": lambda: MLPWithBreak(16, 32, 8),
    "mlp3": lambda: MLP(12, 24, 24, 6),
    "mlp3_no_bias": lambda: MLP(12, 24, 24, 6, bias=False),
    "attention": lambda: EinsumAttention(8),
    "logged": lambda: LoggedMLP(12, 24, 24, 6),
}


@dataclass(frozen=True)
class Spec:
    """One case: which model, its input (`batch` leading dims, float dtype, requires_grad), level and train."""

    model: str
    level: str = "aten"
    train: bool = False
    dtype: torch.dtype = torch.float32
    batch: tuple[int, ...] = (4,)
    input_grad: bool = False


def build(spec: Spec, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """The model and its input x of shape (*spec.batch, in_features), seeded."""
    torch.manual_seed(seed)
    model = MODELS[spec.model]().to(spec.dtype)
    n_in = model.d if isinstance(model, EinsumAttention) else model.sizes[0]
    if isinstance(model, EinsumAttention) and len(spec.batch) != 2:
        raise ValueError(f"{spec.model}: attention takes x of shape (B, S, D): give batch=(B, S), got {spec.batch}")
    x = torch.randn(*spec.batch, n_in, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = x.to(spec.dtype)
    return model, x.requires_grad_(spec.input_grad)


def _label(spec: Spec, model: nn.Module, x: torch.Tensor) -> str:
    parts = [
        repr(model),
        f"x {tuple(x.shape)} {str(x.dtype)[6:]}" + (" requires_grad" if x.requires_grad else ""),
        f"level {spec.level!r}",
        "train=True (forward + backward)" if spec.train else "train=False (no_grad)",
    ]
    return ", ".join(parts)


def model_cases(specs: Sequence[Spec], *, seed: int = 0) -> list[Case]:
    """Cases (model, x, level, train) for capture and gemm_count."""
    cases = []
    for i, spec in enumerate(specs):
        model, x = build(spec, seed + i)
        cases.append(Case(_label(spec, model, x), (model, x, spec.level, spec.train)))
    return cases


def _named(gm: torch.fx.GraphModule, text: str) -> torch.fx.GraphModule:
    """Give one captured graph a readable repr (each GraphModule has a class of its own, so this touches no other)."""
    cls = type(gm)
    cls.__repr__ = lambda self: f"GraphModule({text})"
    cls.__name__ = "GraphModule"  # AOTAutograd's graphs come with a class named "<lambda>"
    return gm


def graph_cases(specs: Sequence[Spec], *, seed: int = 0) -> list[Case]:
    """Cases (graph_module,) for count_ops: every graph the grader captures for each spec, captured now."""
    cases = []
    for i, spec in enumerate(specs):
        model_repr, forward, backward = _graphs_of(spec, seed + i)
        kinds = [("Dynamo graph" if spec.level == "dynamo" else "ATen forward graph", gm) for gm in forward]
        kinds += [("ATen backward graph", gm) for gm in backward]
        for j, (kind, gm) in enumerate(kinds):
            text = f"{kind} {j + 1} of {len(kinds)} of {model_repr}, {'training' if spec.train else 'no_grad'}"
            cases.append(Case(text, (_named(gm, text),)))
    return cases


def _graphs_of(spec: Spec, seed: int) -> tuple[str, list, list]:
    """The graphs captured for one seeded spec: the same every time, so a process captures each once (the grader
    for every submission it judges, a grading forkserver for every kernel it forks: `warm_up`) and hands out a copy
    per case (nothing the learner's code or a judge does to one reaches the next). The grader judging a test cell
    (`verdicts.current_cell`) takes them as they are: no learner's code runs there, and its judges only read them."""
    model_repr, forward, backward = _captured(spec, seed)
    if verdicts.current_cell() is not None:
        return model_repr, list(forward), list(backward)
    return model_repr, [copy.deepcopy(g) for g in forward], [copy.deepcopy(g) for g in backward]


@functools.lru_cache(maxsize=64)
def _captured(spec: Spec, seed: int) -> tuple[str, list, list]:
    model, x = build(spec, seed)
    cap = _ground_truth(model, x, spec.level, spec.train)
    return repr(model), list(cap.forward), list(cap.backward)


def warm_up() -> None:
    """Run by a grading forkserver once, before it forks the first ex06 kernel (`twoprim.grading.forkserver`): Dynamo's
    and AOTAutograd's first captures (lazy imports, first-call set-up) and the visible check's graphs, which every
    kernel would otherwise pay for again."""
    graph_cases(VISIBLE_GRAPHS)


class _CasesOnly:
    """This module as a test cell sees it while `warm_cells` runs the cell: its checks do nothing (the cases they
    are handed are built all the same), everything else is the module's own."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("check_"):
            return lambda *args, **kwargs: None
        return getattr(sys.modules[__name__], name)


class _CellNames(dict):
    """A test cell's names: `ex06` (checks doing nothing), `torch`; any other (the learner's functions) is None."""

    def __missing__(self, name: str) -> Any:
        return None


def warm_cells(sources: list[str]) -> None:
    """Run by a grading forkserver for each new set of the instructor's test cells (`twoprim.grading.forkserver`):
    each cell's code with the checks doing nothing, so the seeded graphs its hidden checks hand the learner's code
    (`graph_cases`, the same for every submission) are captured once here, and every kernel forked afterwards gets
    copies instead of capturing them again. A cell that fails here is skipped: its kernel builds its own cases."""
    import builtins

    for source in sources:
        names = _CellNames(ex06=_CasesOnly(), torch=torch)
        with contextlib.suppress(Exception):
            exec(compile(source, "<ex06 test cell>", "exec"), {"__builtins__": builtins}, names)  # noqa: S102


# ----------------------------------------------------------------------------------------------------------------
# Guards
# ----------------------------------------------------------------------------------------------------------------


def graph_module(fn: str, value: Any) -> None:
    """`value` is a torch.fx.GraphModule."""
    if isinstance(value, torch.fx.GraphModule):
        return
    hint = ""
    if isinstance(value, (list, tuple)):
        hint = f" (a {type(value).__name__} of {len(value)}: capture returns a list, pass one of its graphs)"
    elif isinstance(value, nn.Module):
        hint = " (a model: capture it first, then count the ops of one of the graphs capture returns)"
    raise TypeError(
        f"{fn}: graph_module must be a torch.fx.GraphModule, the graph a Dynamo backend or an AOTAutograd "
        f"compiler receives; got {type(value).__name__}{hint}."
    )


def capture_args(fn: str, model: Any, x: Any, level: Any, train: Any) -> None:
    """model is callable, x a floating tensor of the model's dtype that the model accepts, level "dynamo" or
    "aten", train a bool."""
    if not callable(model):
        raise TypeError(f"{fn}: model must be an nn.Module or a function, got {type(model).__name__}.")
    guards.tensor(fn, "x", x)
    if level not in compiler.LEVELS:
        raise ValueError(f"{fn}: level must be 'dynamo' or 'aten', got {level!r}.")
    if not isinstance(train, bool):
        raise TypeError(f"{fn}: train must be True or False, got {type(train).__name__} {train!r}.")
    params = [p for p in model.parameters() if p.is_floating_point()] if isinstance(model, nn.Module) else []
    if params and params[0].dtype != x.dtype:
        raise TypeError(
            f"{fn}: the model's parameters are {params[0].dtype} but x is {x.dtype}; convert one so "
            f"both match (model.to(x.dtype) or x.to({params[0].dtype}))."
        )
    try:
        with torch.no_grad():
            model(x)
    except Exception as err:  # noqa: BLE001 - said in words, with the shapes
        raise ValueError(
            f"{fn}: model(x) fails before any compiling, for x of shape {tuple(x.shape)}: {type(err).__name__}: {err}"
        ) from None
    if train and isinstance(model, nn.Module) and not x.requires_grad and not any(p.requires_grad for p in params):
        raise ValueError(
            f"{fn}: train=True, but neither x nor any parameter requires grad: there is no backward to capture."
        )


# ----------------------------------------------------------------------------------------------------------------
# Running the learner's code outside the recorder, and the rule "don't call the grader"
# ----------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _outside_recording():
    """Step out of the torch-function and dispatch modes that `run_check` records calls with: while any mode is
    active, Dynamo runs a frame eagerly and never calls a backend, so nothing could be captured."""
    from torch.utils._python_dispatch import _disable_current_modes

    function_modes = []
    while torch._C._len_torch_function_stack() > 0:
        function_modes.append(torch._C._pop_torch_function_stack())
    try:
        with _disable_current_modes():
            yield
    finally:
        for mode in reversed(function_modes):
            torch._C._push_on_torch_function_stack(mode)


def _outside(fn: Callable, *args, **kwargs) -> Any:
    """`fn(*args, **kwargs)` run outside the recorder (`no_grader_calls`' `call`)."""
    with _outside_recording():
        return fn(*args, **kwargs)


def _own(fn: Callable) -> tuple[Callable, Rule]:
    """`fn`, run outside the recorder, and the rule that it calls no twoprim.topics.inside_torch_compile function."""
    return no_grader_calls(
        fn,
        {"twoprim.topics.inside_torch_compile": compiler.uses},
        call=_outside,
        rule="your own code: no calls to twoprim.topics.inside_torch_compile (the grader's ground truth)",
        next_step="write it with a backend of your own (Dynamo) or aot_autograd with your own forward and backward "
        "compilers (ATen), and count graph.nodes yourself, as lesson 06 shows",
    )


# ----------------------------------------------------------------------------------------------------------------
# Judges
# ----------------------------------------------------------------------------------------------------------------


def _counts_hint(expected: Counter, got: Counter, gm: torch.fx.GraphModule | None = None) -> str:
    keys = set(got)
    if any("." in k or k.startswith("aten") for k in keys):
        return (
            "name an ATen op by its packet name: node.target.overloadpacket.__name__ is 'addmm' for "
            "aten.addmm.default; a torch function by its __name__"
        )
    if any(k.startswith("<") or " " in k for k in keys):
        return "use the function's __name__ (torch._C._nn.linear.__name__ is 'linear'), not str(node.target)"
    if gm is not None and keys and keys <= {n.name for n in gm.graph.nodes} and not keys <= set(expected):
        return (
            "node.name is the variable the graph keeps a result in (input_1, addmm_1); the op comes from "
            "node.target, and only 'call_function' and 'call_method' nodes run one"
        )
    if keys & {"placeholder", "output", "get_attr", "call_function", "call_method"}:
        return (
            "count op names, not node kinds: node.op says what kind of node it is; only 'call_function' and "
            "'call_method' nodes run an op, and their name comes from node.target"
        )
    if gm is not None:
        placeholders = {str(n.target) for n in gm.graph.nodes if n.op == "placeholder"}
        if keys & placeholders or "output" in keys:
            return "count only 'call_function' and 'call_method' nodes: placeholders are inputs, output is the result"
        methods = Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_method")
        if methods and all(got[m] == 0 for m in methods):
            return (
                f"this graph has call_method nodes ({', '.join(sorted(methods))}): their node.target is the "
                f"method's name as a string; count them too"
            )
    if not got:
        return "loop over graph_module.graph.nodes and count the op of every 'call_function' and 'call_method' node"
    return "print graph_module.code next to your counter and compare them op by op"


def _judge_counts(got, want: Counter, case: Case) -> str:
    counts = as_counter(
        got,
        "count_ops",
        build="build a collections.Counter: counts[name] += 1 for every op node",
        key="key the counter by the op's name as a string (e.g. 'addmm'), not by the node or its "
        "target object; the value is how many nodes run that op",
    )
    if counts != want:
        raise Mismatch(
            f"{dict(counts)!r}\n  differs:  {difference(want, counts)}",
            next_step=_counts_hint(want, counts, case.args[0]),
        )
    return ""


def _ground_truth(model, x, level, train) -> compiler.Capture:
    """The grader's capture; it never grades against nothing: no graph at all means Dynamo ran the model eagerly."""
    cap = compiler.capture_graphs(model, x, level, train)
    if not cap.graphs:
        raise RuntimeError(
            f"the grader captured no graph for {model!r} at level {level!r} on torch "
            f"{torch.__version__}: Dynamo ran it eagerly, so this case cannot be graded here"
        )
    return cap


def _judge_capture(got, want: compiler.Capture, case: Case) -> str:
    model, x, level, train = case.args
    if not isinstance(got, (list, tuple)):
        raise Mismatch(
            f"{type(got).__name__}, but capture returns a list of GraphModules",
            next_step="collect every GraphModule your backend or compilers receive in a list and return it",
        )
    not_graphs = [type(g).__name__ for g in got if not isinstance(g, torch.fx.GraphModule)]
    if not_graphs:
        raise Mismatch(
            f"a list holding {', '.join(sorted(set(not_graphs)))}, not only torch.fx.GraphModules",
            next_step="keep the gm argument your backend (or compiler) receives, not gm.forward or gm.code",
        )
    n_fw, n_bw = len(want.forward), len(want.backward)
    shape = f"{n_fw} forward + {n_bw} backward" if level == "aten" else f"{n_fw} Dynamo"
    counts = [compiler._count(g) for g in got]
    want_counts = want.counts()
    if len(got) != len(want.graphs):
        hint = "print how many graphs your backend received"
        if len(got) == 0:
            hint = (
                "your backend never ran: compile the model with it (torch.compile(model, backend=...)) and call "
                "the compiled model; reset Dynamo first (torch._dynamo.reset()) so it does not reuse old code"
            )
        elif level == "aten" and train and len(got) == n_fw:
            hint = (
                "the backward graphs are missing: AOTAutograd compiles them when backward runs, so with "
                "train=True call .sum().backward() on the compiled model's output"
            )
        elif len(got) > len(want.graphs):
            hint = (
                "more graphs than one compile produces: create the list inside capture (not once, outside it), "
                "and call torch._dynamo.reset() first"
            )
        raise Mismatch(
            f"{len(got)} graph{'s' if len(got) != 1 else ''}, expected {len(want.graphs)} ({shape})", next_step=hint
        )
    for i in range(n_fw):
        if counts[i] != want_counts[i]:
            diff = difference(want_counts[i], counts[i])
            hint = "compare graph.code of your graph with what the lesson shows for this level"
            if set(counts[i] - want_counts[i]) == {"detach"}:
                hint = (
                    "train=False must run the compiled model under torch.no_grad(): with autograd on, AOTAutograd "
                    "builds the training forward graph (it saves tensors for backward)"
                )
            elif level == "aten" and counts[i]["linear"]:
                hint = "level 'aten' needs ATen graphs: use aot_autograd(fw_compiler=..., bw_compiler=...) as backend"
            elif level == "dynamo" and (counts[i]["addmm"] or counts[i]["t"]):
                hint = "level 'dynamo' keeps the graph Dynamo hands the backend, before AOTAutograd lowers it to ATen"
            raise Mismatch(f"graph {i + 1} (forward) has ops {dict(counts[i])!r}\n  differs:  {diff}", next_step=hint)
    rest, wanted = sorted(counts[n_fw:], key=repr), sorted(want_counts[n_fw:], key=repr)
    if rest != wanted:
        raise Mismatch(
            f"backward graphs with ops {[dict(c) for c in counts[n_fw:]]!r}, expected "
            f"{[dict(c) for c in want_counts[n_fw:]]!r} (in any order)",
            next_step="give aot_autograd a bw_compiler that keeps its graph, and put the forward graphs "
            "first in the list you return",
        )
    return ""


def _judge_gemms(got, want: int, case: Case) -> str:
    model, x, level, train = case.args
    if isinstance(got, bool) or not isinstance(got, numbers.Integral):
        raise Mismatch(
            f"{type(got).__name__} {got!r}, but gemm_count returns an int",
            next_step="add up the counts of the GEMM op names over every captured graph: an int",
        )
    got = int(got)
    if got == want:
        return ""
    hint = "list count_ops of every graph capture returns and add the GEMM_OPS[level] entries by hand"
    cap = compiler.capture_graphs(model, x, level, train)
    other = "dynamo" if level == "aten" else "aten"
    names_other = sum(compiler._count(g)[n] for g in cap.graphs for n in GEMM_OPS[other] - GEMM_OPS[level])
    forward_only = sum(compiler._gemms_in(g, level) for g in cap.forward)
    if cap.backward and got == forward_only:
        hint = "train=True: add the GEMMs of the backward graphs too (capture returns them after the forward ones)"
    elif len(cap.graphs) > 1 and got == compiler._gemms_in(cap.graphs[0], level):
        hint = "add the GEMMs of every graph capture returns, not only the first"
    elif got == want + names_other or got == 0:
        hint = (
            f"count only the GEMM names of this level, GEMM_OPS[{level!r}] = {sorted(GEMM_OPS[level])}, "
            f"and capture at the level you were given"
        )
    raise Mismatch(f"{got}", next_step=hint)


# ----------------------------------------------------------------------------------------------------------------
# The function checks
# ----------------------------------------------------------------------------------------------------------------


def _check(task: str, fn: Callable, cases: Sequence[Case], **kwargs) -> CheckResult:
    watched, own = _own(fn)
    return run_check(f"{TASK}-{task}", watched, cases, rules=[own], **kwargs)


VISIBLE_GRAPHS = [
    Spec("mlp", "dynamo"),
    Spec("mlp", "aten"),
    Spec("mlp", "aten", train=True),
    Spec("matmul", "dynamo"),
    Spec("break", "dynamo", dtype=torch.float64),
]
VISIBLE_MODELS = [
    Spec("mlp", "dynamo"),
    Spec("mlp", "aten"),
    Spec("mlp", "aten", train=True),
    Spec("break", "dynamo", dtype=torch.float64),
    Spec("matmul", "aten", train=True, input_grad=True),
]


def check_count_ops(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `count_ops`: op names counted from the nodes of Dynamo and ATen graphs, forward and backward."""
    cases = cases if cases is not None else graph_cases(VISIBLE_GRAPHS)
    return _check(
        "count_ops",
        fn,
        cases,
        expected=compiler._count,
        judge=_judge_counts,
        hidden=hidden,
        proves="op names counted from the nodes of Dynamo and ATen graphs (functions, methods, ATen "
        "packets), forward and backward",
        next_step="count node.op == 'call_function' and 'call_method' nodes by op name",
    )


def check_capture(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `capture`: the graphs torch.compile builds at both levels, with and without backward, past a break."""
    cases = cases if cases is not None else model_cases(VISIBLE_MODELS)
    return _check(
        "capture",
        fn,
        cases,
        expected=_ground_truth,
        judge=_judge_capture,
        hidden=hidden,
        proves="the graphs torch.compile builds, at the Dynamo and ATen levels, with and without backward, "
        "across a graph break",
        next_step="compare your list with what the grader captured, graph by graph",
    )


def check_gemm_count(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `gemm_count`: GEMMs counted over every captured graph at both levels, training and inference."""
    cases = cases if cases is not None else model_cases(VISIBLE_MODELS)
    return _check(
        "gemm_count",
        fn,
        cases,
        expected=lambda *args: _ground_truth(*args).gemms(),
        judge=_judge_gemms,
        hidden=hidden,
        proves="GEMMs counted over every graph at both levels, training and inference",
        next_step="sum the GEMM_OPS[level] entries of count_ops over every graph capture returns",
    )


# ----------------------------------------------------------------------------------------------------------------
# Short answers: the visible check reads the answer's form only (it says "answered", never ✔, and progress does not
# count it as passing); the hidden check measures the fact at grading time
# ----------------------------------------------------------------------------------------------------------------


def _forward_gemms(model_name: str = "mlp", seed: int = 0) -> int:
    model, x = build(Spec(model_name), seed)
    return _ground_truth(model, x, "aten", False).gemms()


def _backward_gemms(model_name: str = "mlp", input_grad: bool = False, seed: int = 0) -> int:
    model, x = build(Spec(model_name, input_grad=input_grad), seed)
    cap = _ground_truth(model, x, "aten", True)
    return sum(compiler._gemms_in(g, "aten") for g in cap.backward)


def _no_bias_gemms(model_name: str = "mlp_no_bias", seed: int = 0) -> dict[str, int]:
    model, x = build(Spec(model_name), seed)
    counts = Counter()
    for gm in _ground_truth(model, x, "aten", False).forward:
        counts.update({k: v for k, v in compiler._count(gm).items() if k in GEMM_OPS["aten"]})
    return dict(counts)


def _graphs(model_name: str = "break", seed: int = 0) -> int:
    model, x = build(Spec(model_name, "dynamo"), seed)
    return len(_ground_truth(model, x, "dynamo", False).graphs)


@dataclass(frozen=True)
class _Answer:
    name: str
    what: str  # what the number is, for messages
    measure: Callable[..., Any]  # the grader's measurement
    form: str  # "int" or "counts"
    how: str  # how to measure it yourself (next step)


ANSWERS = {
    "forward_gemms": _Answer(
        "forward_gemms",
        "GEMM ops in the ATen forward graph of MLP(16→32→8), no_grad",
        _forward_gemms,
        "int",
        "measure it: gemm_count(model, x, 'aten')",
    ),
    "backward_gemms": _Answer(
        "backward_gemms",
        "GEMM ops in the ATen backward graph of MLP(16→32→8), x without requires_grad",
        _backward_gemms,
        "int",
        "measure it: capture(model, x, 'aten', train=True) and count the GEMMs of the graphs after the forward one",
    ),
    "backward_gemms_input_grad": _Answer(
        "backward_gemms_input_grad",
        "GEMM ops in the ATen backward graph of MLP(16→32→8), x.requires_grad_()",
        functools.partial(_backward_gemms, input_grad=True),
        "int",
        "measure it as for backward_gemms, with x.clone().requires_grad_() as input",
    ),
    "no_bias_gemms": _Answer(
        "no_bias_gemms",
        "GEMM ops by name in the ATen forward graph of MLP(16→32→8, bias=False), no_grad",
        _no_bias_gemms,
        "counts",
        "measure it: count_ops of the forward graph of ex06.MLP(16, 32, 8, bias=False), GEMM names only",
    ),
    "graph_break_graphs": _Answer(
        "graph_break_graphs",
        "graphs Dynamo captures for MLPWithBreak(16→32→8)",
        _graphs,
        "int",
        "measure it: len(capture(ex06.MLPWithBreak(16, 32, 8), x, 'dynamo'))",
    ),
}


def _judge_form(answer: _Answer) -> Callable:
    def judge(got, want, case: Case) -> str:
        if answer.form == "int":
            if isinstance(got, bool) or not isinstance(got, numbers.Integral) or got < 0:
                raise Mismatch(
                    f"{type(got).__name__} {got!r}, but {answer.name} is a count: an int, 0 or more",
                    next_step=f"{answer.how}, and set {answer.name} to that int",
                )
            return ""
        if not isinstance(got, Mapping) or not got:
            raise Mismatch(
                f"{type(got).__name__} {got!r}, but {answer.name} is a dict {{op name: count}}, e.g. {{'bmm': 3}}",
                next_step=answer.how,
            )
        for k, v in got.items():
            if k not in GEMM_OPS["aten"] or isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise Mismatch(
                    f"{dict(got)!r}: the entry {k!r}: {v!r} is not (ATen GEMM name: count ≥ 1); the ATen "
                    f"GEMM names are {sorted(GEMM_OPS['aten'])}",
                    next_step=answer.how,
                )
        return ""

    return judge


def _judge_answer(answer: _Answer) -> Callable:
    form = _judge_form(answer)

    def judge(got, want, case: Case) -> str:
        form(got, want, case)
        value = int(got) if answer.form == "int" else {k: int(v) for k, v in got.items()}
        if value != want:
            raise Mismatch(
                f"{value!r}", next_step=f"{answer.how} (the grader measured it on this torch, {torch.__version__})"
            )
        return ""

    return judge


def answer_cases(name: str) -> list[Case]:
    """The hidden case of one short answer: the grader measures it now, on the model the assignment names."""
    return [Case(f"{ANSWERS[name].what}, measured by the grader now (torch {torch.__version__})", ())]


def _check_answer(name: str, value: Any, cases: Sequence[Case] | None, hidden: int) -> CheckResult:
    answer = ANSWERS[name]

    def given():
        return value

    given.__name__ = name
    if cases is None:  # visible: the form only; the value is compared with a measurement when grading
        form = "an int, 0 or more" if answer.form == "int" else "a dict {ATen GEMM op name: count}"
        return _check(
            name,
            given,
            [Case(f"the form of your answer: {answer.what}", ())],
            expected=lambda: f"{form}; grading compares its value with a measurement",
            judge=_judge_form(answer),
            hidden=hidden,
            form_only=True,
            proves=f"{name} = {value!r} is {form}, but whether it is right is not known yet: grading "
            f"compares it with {answer.what}, measured then",
        )
    return _check(
        name,
        given,
        cases,
        expected=lambda: answer.measure(),
        judge=_judge_answer(answer),
        hidden=hidden,
        proves=f"{name} equals {answer.what}",
    )


def check_forward_gemms(value: Any, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check the short answer `forward_gemms` (its form now; its value is measured when graded)."""
    return _check_answer("forward_gemms", value, cases, hidden)


def check_backward_gemms(value: Any, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check the short answer `backward_gemms` (its form now; its value is measured when graded)."""
    return _check_answer("backward_gemms", value, cases, hidden)


def check_backward_gemms_input_grad(value: Any, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check the short answer `backward_gemms_input_grad` (its form now; its value is measured when graded)."""
    return _check_answer("backward_gemms_input_grad", value, cases, hidden)


def check_no_bias_gemms(value: Any, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check the short answer `no_bias_gemms` (its form now; its value is measured when graded)."""
    return _check_answer("no_bias_gemms", value, cases, hidden)


def check_graph_break_graphs(value: Any, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check the short answer `graph_break_graphs` (its form now; its value is measured when graded)."""
    return _check_answer("graph_break_graphs", value, cases, hidden)


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex06_compile-count_ops": (
        "Print `graph_module.code`, then loop over `graph_module.graph.nodes` and look at each node's `op` and "
        "`target`.",
        "Only nodes whose `op` is 'call_function' or 'call_method' count. For 'call_method' the target is already "
        "the name (a string); for 'call_function' it is a function or an ATen op.",
        "An ATen op such as `torch.ops.aten.addmm.default` has an `overloadpacket` whose `__name__` is 'addmm'; a "
        "plain Python function has its own `__name__`. Count names in a `Counter`.",
    ),
    "ex06_compile-capture": (
        "`torch.compile(model, backend=...)` hands every graph it builds to the backend: a function of yours can "
        "keep each graph in a list and return something that runs it.",
        "Level 'dynamo': a backend taking (gm, example_inputs) that keeps gm and returns the graph's own forward "
        "method. Level 'aten': `aot_autograd` with a forward compiler and a backward compiler of that kind, one list "
        "for forward graphs and one for backward graphs, each returning the forward method wrapped by "
        "`make_boxed_func`.",
        "Reset Dynamo first (`torch._dynamo.reset`), or it reuses code compiled earlier. "
        "For train=False run the compiled model under `torch.no_grad()`; for "
        "train=True call `.sum().backward()` on its output, which is when the backward graphs are compiled. "
        "Return the forward graphs, then the backward ones.",
    ),
    "ex06_compile-gemm_count": (
        "You already have both pieces: `capture` gives the graphs and `count_ops` counts the names in each.",
        "`GEMM_OPS[level]` is the set of names that are GEMMs at that level; add up their counts over every graph.",
        "Total = Σ over graphs Σ over names in GEMM_OPS[level] of the graph's count for that name. A `Counter` "
        "gives 0 for a name it never saw, so no special case is needed.",
    ),
    "ex06_compile-forward_gemms": (
        "Measure, do not guess: in a cell of your own, call your `gemm_count` on `model` and `x` from the setup "
        "cell at level 'aten' with train=False.",
        "Print the `.code` of each graph `capture` returns: every `nn.Linear` with a bias becomes one ATen op; "
        "lesson 06 shows this MLP's ATen graph.",
    ),
    "ex06_compile-backward_gemms": (
        "Measure with `capture(model, x, 'aten', train=True)`: the graphs after the forward ones are the backward; "
        "count their GEMM ops with `count_ops`.",
        "The backward of y = x Wᵀ + b needs one GEMM per gradient it computes: each layer's weight gradient, and "
        "the gradient flowing into the layer below it, but none for an input that does not require grad.",
    ),
    "ex06_compile-backward_gemms_input_grad": (
        "The same measurement as `backward_gemms`, with `x.clone().requires_grad_()` as the input.",
        "An input that requires grad adds one gradient to compute, ∂L/∂x of the first layer: how many GEMMs is that?",
    ),
    "ex06_compile-no_bias_gemms": (
        "Capture the ATen forward graph of `ex06.MLP(16, 32, 8, bias=False)` and count its ops; keep only the names "
        "in `GEMM_OPS['aten']`.",
        "The answer is a dict {op name: count}. Without a bias there is nothing for `addmm` to add: which plain "
        "GEMM op does each layer become?",
    ),
    "ex06_compile-graph_break_graphs": (
        "Count the graphs your `capture` returns for `ex06.MLPWithBreak(16, 32, 8)` at level 'dynamo'.",
        "Read its forward (`inspect.getsource(ex06.MLPWithBreak.forward)`): an `if` on a tensor's value needs a "
        "real Python bool, so Dynamo ends the graph there and starts another after it.",
    ),
}
