"""What `torch.compile` builds, seen from inside: the grader's own capture and counting code, and lesson 06's tools.

`torch.compile(model)` runs three stages, and each one can be watched:

1. **Dynamo** reads the Python bytecode of `model.forward` and records the torch-level calls into an FX graph
   (`linear`, `relu`, `matmul`, ...). A *backend* is any function `backend(gm, example_inputs)` that receives that
   `GraphModule` and returns something callable; `capture(..., level="dynamo")` uses one that keeps the graph.
2. **AOTAutograd** traces each Dynamo graph down to ATen ops (`t`, `addmm`, `relu`, ...) and derives the backward
   graph (`mm`, `threshold_backward`, `sum`, ...). `aot_autograd(fw_compiler=..., bw_compiler=...)` hands both
   graphs to compilers of our own; `capture(..., level="aten")` keeps them. No Inductor runs, nothing is compiled
   to C++: a capture takes about 0.1 s.
3. **Inductor** turns the ATen graphs into code: calls to GEMM libraries (`extern_kernels.addmm`) and fused kernels
   it generates (C++ on CPU, Triton on GPU). `inductor_output_code` returns that code and `kernel_calls` lists
   the calls it makes; cold, this costs seconds (a C++ compiler runs), so lessons share one cache folder
   (`inductor_cache`).

Op names are counted from the graph's nodes (`count_ops`), never from the words of a log: a log mentions `addmm` in
variable names and comments too (`word_count` shows how much that over-counts).

This module is the ground truth the ex06_compile checks compare a learner's functions with, at grading time, on the
torch that is installed: no count is written down anywhere. Calls made to it from a learner's code are counted
(`uses`), so a check can tell when an answer calls the grader instead of doing the work.

Why this module is long: each of torch.compile's three stages needs its own way to be watched (Dynamo's graphs,
AOTAutograd's forward and backward, Inductor's code and cache), and the grader's capture and counting share that code
with lesson 06.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_leaves

from twoprim.core.record import FlopRule, count_other_flops, target_name

__all__ = [
    "LEVELS",
    "GEMM_OPS",
    "op_name",
    "target_name",
    "count_ops",
    "gemms_in",
    "gemm_nodes",
    "Capture",
    "capture_graphs",
    "capture",
    "gemm_count",
    "skip_guard_profiling",
    "uses",
    "inductor_cache",
    "inductor_output_code",
    "kernel_calls",
    "call_lines",
    "kernel_source",
    "word_count",
    "Printed",
    "captured_output",
    "run_scripts",
    "flop_split",
    "ELEMENTWISE_OPS",
    "REDUCTION_OPS",
]

LEVELS = ("dynamo", "aten")
# GEMM ops by level (the course spec): ATen ops that are a GEMM, and torch-level calls that become one.
GEMM_OPS: dict[str, frozenset[str]] = {
    "aten": frozenset({"mm", "addmm", "bmm", "baddbmm"}),
    "dynamo": frozenset({"linear", "matmul", "mm", "bmm", "addmm", "einsum"}),
}

_USES: Counter = Counter()


def uses() -> Counter:
    """How many times each public capture and counting function of this module has been called (a copy)."""
    return Counter(_USES)


# ----------------------------------------------------------------------------------------------------------------
# Counting op nodes
# ----------------------------------------------------------------------------------------------------------------


def _op_name(node: torch.fx.Node) -> str | None:
    if node.op == "call_method":
        return str(node.target)
    if node.op != "call_function":
        return None
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(target, "__name__", None) or str(target)


def op_name(node: torch.fx.Node) -> str | None:
    """The op a node runs: its method name for `call_method`; for `call_function`, an ATen op's packet name
    (`aten.addmm.default` -> "addmm") or a Python function's `__name__` (`torch._C._nn.linear` -> "linear",
    `operator.matmul` -> "matmul"). None for placeholders, attributes, submodule calls and the output."""
    _USES["op_name"] += 1
    return _op_name(node)


def _count(gm: torch.fx.GraphModule) -> Counter:
    return Counter(name for name in map(_op_name, gm.graph.nodes) if name is not None)


def _gemms_in(gm: torch.fx.GraphModule, level: str) -> int:
    counts = _count(gm)
    return sum(counts[name] for name in GEMM_OPS[_level(level)])


def count_ops(graph_module: torch.fx.GraphModule) -> Counter:
    """Counter of op names over the `call_function` and `call_method` nodes of an FX graph."""
    _USES["count_ops"] += 1
    if not isinstance(graph_module, torch.fx.GraphModule):
        raise TypeError(f"count_ops: expected a torch.fx.GraphModule, got {type(graph_module).__name__}")
    return _count(graph_module)


def gemms_in(graph_module: torch.fx.GraphModule, level: str) -> int:
    """Number of GEMM op nodes (`GEMM_OPS[level]`) in one graph."""
    _USES["gemms_in"] += 1
    return _gemms_in(graph_module, level)


def gemm_nodes(graph_module: torch.fx.GraphModule) -> list[tuple[str, tuple[tuple[int, ...], ...], tuple[int, ...]]]:
    """(op, operand shapes, output shape) of every ATen GEMM node, from the shapes AOTAutograd records on each
    node (`node.meta["val"]`). For addmm/baddbmm the first operand is the added C (the bias)."""
    _USES["gemm_nodes"] += 1
    out = []
    for node in graph_module.graph.nodes:
        name = _op_name(node)
        if name in GEMM_OPS["aten"] and node.op == "call_function":
            shapes = tuple(
                tuple(a.meta["val"].shape) for a in node.args if isinstance(a, torch.fx.Node) and "val" in a.meta
            )
            out.append((name, shapes, tuple(node.meta["val"].shape) if "val" in node.meta else ()))
    return out


def _level(level: Any) -> str:
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    return level


# ----------------------------------------------------------------------------------------------------------------
# Capturing graphs: a Dynamo backend, and AOTAutograd with compilers of our own
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Capture:
    """The FX graphs one run produced: Dynamo's graphs (level "dynamo") or AOTAutograd's forward graphs then the
    backward graphs, in the order they were compiled (level "aten")."""

    level: str
    train: bool
    forward: list = field(default_factory=list)
    backward: list = field(default_factory=list)

    @property
    def graphs(self) -> list[torch.fx.GraphModule]:
        return self.forward + self.backward

    def counts(self) -> list[Counter]:
        return [_count(gm) for gm in self.graphs]

    def gemms(self) -> int:
        return sum(_gemms_in(gm, self.level) for gm in self.graphs)

    def __repr__(self) -> str:
        fw, bw = [dict(_count(g)) for g in self.forward], [dict(_count(g)) for g in self.backward]
        if self.level == "dynamo":
            return f"{len(fw)} Dynamo graph{'s' if len(fw) != 1 else ''} with ops {fw}"
        return f"{len(fw) + len(bw)} ATen graphs: forward {fw}, backward {bw}"


def _keeping(graphs: list) -> Callable:
    """An AOTAutograd compiler that keeps the ATen graph and runs it as it is (boxed: AOTAutograd passes a list)."""
    # torch's documented helper; its module takes it from another without re-exporting it for type checkers
    from torch._functorch.aot_autograd import make_boxed_func  # pyright: ignore[reportPrivateImportUsage]

    def compiler(gm: torch.fx.GraphModule, example_inputs) -> Callable:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    return compiler


def _tensors(out: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]


def skip_guard_profiling() -> None:
    """Skip the timing Dynamo does after compiling each frame: it runs the frame's new guards once, after flushing
    the CPU's caches, for a metric (`guard_latency_us`) nothing in the course reads; about 26 ms a frame on the
    course's 2-core machine, a sixth of a capture. The guards are still built and checked, and what is compiled is
    the same. Called by every capture here and by a grading forkserver, for its kernels; a torch without that
    timing is left as it is."""
    import torch._dynamo.guards as guards

    timing = getattr(guards, "profile_guard_manager", None)
    if timing is None or getattr(timing, "skipped_by_twoprim", False):
        return  # not in this torch, or already skipped

    def profile_guard_manager(guard_manager, f_locals, n_iters) -> float:
        return 0.0

    profile_guard_manager.skipped_by_twoprim = True  # type: ignore[attr-defined]
    # torch._dynamo.guards imports it from its C extension (not re-exported for type checkers); it is patched there
    guards.profile_guard_manager = profile_guard_manager  # pyright: ignore[reportPrivateImportUsage]


def capture_graphs(model: Callable, x: torch.Tensor, level: str, train: bool = False) -> Capture:
    """Run `torch.compile(model)` on `x` with a backend that keeps the graphs at `level`; no Inductor.

    train=False runs under `torch.no_grad()` (one inference graph per Dynamo graph at level "aten"); train=True
    runs a training step (forward, then backward from every output), so AOTAutograd also compiles the backward
    graphs. The model's `.grad`s are left as they were. Dynamo's caches are reset before and after, so the backend
    always sees this model and nothing compiled here lingers.
    """
    _USES["capture_graphs"] += 1
    level = _level(level)
    skip_guard_profiling()
    result = Capture(level, bool(train))
    if level == "dynamo":

        def backend(gm: torch.fx.GraphModule, example_inputs):
            result.forward.append(gm)
            return gm.forward
    else:
        from torch._dynamo.backends.common import aot_autograd

        backend = aot_autograd(fw_compiler=_keeping(result.forward), bw_compiler=_keeping(result.backward))

    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    saved = [(p, p.grad) for p in params] + ([(x, x.grad)] if x.requires_grad else [])
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=backend)
        if train:
            with torch.enable_grad():
                outs = _tensors(compiled(x))
                if not outs:
                    raise ValueError("train=True but no output requires grad: nothing to differentiate")
                torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        else:
            with torch.no_grad():
                compiled(x)
    finally:
        torch._dynamo.reset()
        for tensor, grad in saved:
            tensor.grad = grad
    return result


def capture(model: Callable, x: torch.Tensor, level: str, train: bool = False) -> list[torch.fx.GraphModule]:
    """The FX graphs `torch.compile` builds for `model(x)` at `level` ("dynamo" or "aten"): at "aten" the forward
    graphs first, then (train=True) the backward graphs."""
    _USES["capture"] += 1
    return capture_graphs(model, x, level, train).graphs


def gemm_count(model: Callable, x: torch.Tensor, level: str, train: bool = False) -> int:
    """GEMM op nodes (`GEMM_OPS[level]`) over every graph `capture` returns."""
    _USES["gemm_count"] += 1
    return capture_graphs(model, x, level, train).gemms()


# ----------------------------------------------------------------------------------------------------------------
# Inductor: the code it writes, from a shared cache
# ----------------------------------------------------------------------------------------------------------------


def inductor_cache(path: str | os.PathLike | None = None) -> Path:
    """Point Inductor at one cache folder shared by every run of the lessons, so a model's C++ is compiled once.

    The folder is, in order: `path`; `TWOPRIM_INDUCTOR_CACHE` (an instructor can point a whole class at one
    folder); `TORCHINDUCTOR_CACHE_DIR` when you set it yourself; `~/.cache/twoprim/inductor`. (torch sets
    TORCHINDUCTOR_CACHE_DIR to its default, /tmp/torchinductor_<user>, when Dynamo is imported: that one is
    replaced.) Call it before the first Inductor compile of the process.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    user_set = current and Path(current).resolve() != Path(default_cache_dir()).resolve()
    chosen = (
        path
        or os.environ.get("TWOPRIM_INDUCTOR_CACHE")
        or (current if user_set else None)
        or Path.home() / ".cache" / "twoprim" / "inductor"
    )
    folder = Path(chosen).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    return folder


def inductor_output_code(model: Callable, x: torch.Tensor, **config: Any) -> tuple[Any, str]:
    """(output, code): run `torch.compile(model)(x)` under no_grad with Inductor (options `config`, e.g.
    freezing=True) and return the Python wrapper code Inductor wrote, kernels included."""
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    try:
        with torch.no_grad(), inductor_config.patch(**config):
            out, codes = run_and_get_code(torch.compile(model), x)
    finally:
        torch._dynamo.reset()
    return out, "\n".join(codes)


_CALL = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|cpp_fused_\w+|triton_\w+)(?:\.run)?\(")


def kernel_calls(code: str) -> list[str]:
    """The calls Inductor's `call` function makes, in order: library calls (`extern_kernels.addmm`,
    `torch.ops.mkl._mkl_linear.default`) and its own generated kernels (`cpp_fused_relu_0`, `triton_poi_...`).
    Comment lines and kernel definitions are skipped."""
    body = code.split("def call(", 1)[-1] if "def call(" in code else code
    calls = []
    for line in body.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if re.match(r"^(def |class |runner = |call = )", line):  # end of the call function
            break
        calls += [m.group(1) for m in _CALL.finditer(stripped) if not m.group(1).startswith("torch.ops.inductor")]
    return calls


def call_lines(code: str) -> list[str]:
    """The body of Inductor's `call` function without bookkeeping (asserts, `del`, `args.clear()`): what runs."""
    body = code.split("def call(", 1)[-1].splitlines()[1:]
    lines = []
    for line in body:
        if re.match(r"^(def |class |runner = |call = )", line):
            break
        stripped = line.strip()
        if stripped and not stripped.startswith(("assert_", "del ", "args.clear()")) and " = args" not in stripped:
            lines.append(stripped)
    return lines


def kernel_source(code: str, name: str) -> str:
    """The source of the kernel Inductor generated as `name` (C++ or Triton), from its output code."""
    match = re.search(rf"^{re.escape(name)} = async_compile\.\w+\(.*?'''(.*?)'''", code, re.S | re.M)
    return match.group(1).strip() if match else ""


def word_count(text: str, word: str) -> int:
    """How many times `word` appears in `text` as a substring (what grepping a log for it counts)."""
    return text.count(word)


# ----------------------------------------------------------------------------------------------------------------
# Logs: everything torch prints, captured as text
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Printed:
    """What was printed inside a `captured_output` block: `logs` (torch's log records and warnings), `stdout`,
    `stderr`; `text` is all of it."""

    logs: str = ""
    stdout: str = ""
    stderr: str = ""

    @property
    def text(self) -> str:
        return self.logs + self.stdout + self.stderr

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def artifact(self, name: str) -> str:
        """The log lines of one artifact (e.g. "graph_code", "aot_graphs", "output_code"), prefixes removed."""
        tag = f"[__{name}]"
        return "\n".join(line.split(tag, 1)[1][1:] for line in self.logs.splitlines() if tag in line)


@contextlib.contextmanager
def captured_output(**logs: Any) -> Iterator[Printed]:
    """Capture everything printed inside the block, with `torch._logging.set_logs(**logs)` in force.

    torch's log handlers and warnings go to `.logs`, print() to `.stdout`, the rest of stderr to `.stderr` (all
    filled when the block ends); afterwards the logging is what it was before: the default, or what TORCH_LOGS asks
    for. (`set_logs` is ignored while TORCH_LOGS is in the environment, so TORCH_LOGS is set aside for the block.)
    """
    from torch._logging import _internal as torch_logs

    printed = Printed()
    log_buf, out_buf, err_buf = io.StringIO(), io.StringIO(), io.StringIO()
    env_logs = os.environ.pop("TORCH_LOGS", None)
    try:
        torch_logs.set_logs(**logs)
        for qname in torch_logs.log_registry.get_log_qnames():
            for handler in logging.getLogger(qname).handlers:
                if torch_logs._is_torch_handler(handler) and type(handler) is logging.StreamHandler:
                    handler.setStream(log_buf)
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(out_buf),
            contextlib.redirect_stderr(err_buf),
        ):
            yield printed
        for w in caught:
            log_buf.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    finally:
        torch_logs.set_logs()
        if env_logs is not None:  # put TORCH_LOGS back, and the logging it asks for, as import torch set it up
            os.environ["TORCH_LOGS"] = env_logs
            torch_logs._init_logs()
        printed.logs, printed.stdout, printed.stderr = log_buf.getvalue(), out_buf.getvalue(), err_buf.getvalue()


def run_scripts(scripts: Mapping[str, tuple[str, Mapping[str, str]]], *, timeout: float = 300) -> dict[str, str]:
    """Run Python scripts in fresh interpreters, in parallel: {name: (source, extra environment)} ->
    {name: everything the script printed, stdout then stderr}. TORCH_LOGS is removed from the inherited
    environment unless a script sets it."""

    def run(item):
        name, (source, extra) = item
        env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"} | dict(extra)
        proc = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=timeout)
        text = proc.stdout + proc.stderr
        if proc.returncode != 0:
            text += f"\n[exit code {proc.returncode}]"
        return name, text

    with ThreadPoolExecutor(max_workers=max(1, len(scripts))) as pool:
        return dict(pool.map(run, scripts.items()))


# ----------------------------------------------------------------------------------------------------------------
# FLOPs: GEMM FLOPs from FlopCounterMode, the element-wise rest counted per element
# ----------------------------------------------------------------------------------------------------------------

# ATen ops counted as one FLOP per output element, and reductions as one FLOP per input element.
ELEMENTWISE_OPS = frozenset(
    {
        "add",
        "add_",
        "sub",
        "sub_",
        "mul",
        "mul_",
        "div",
        "div_",
        "neg",
        "relu",
        "relu_",
        "threshold_backward",
        "maximum",
        "minimum",
        "clamp",
        "clamp_min",
        "where",
        "exp",
        "log",
        "tanh",
        "sigmoid",
        "gelu",
        "gelu_backward",
        "sqrt",
        "rsqrt",
        "pow",
        "tanh_backward",
        "sigmoid_backward",
        "_softmax",
        "_softmax_backward_data",
    }
)
REDUCTION_OPS = frozenset({"sum", "mean", "amax", "amin"})
_FREE_OPS = frozenset(
    {
        "t",
        "view",
        "_unsafe_view",
        "reshape",
        "permute",
        "transpose",
        "expand",
        "unsqueeze",
        "squeeze",
        "detach",
        "alias",
        "clone",
        "copy_",
        "_to_copy",
        "empty",
        "empty_like",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "fill_",
        "new_empty_strided",
        "new_zeros",
        "new_ones",
        "new_empty",
        "lift_fresh",
        "as_strided",
        "slice",
        "select",
        "contiguous",
        "empty_strided",
        "full",
        "full_like",
        "_reshape_alias",
        "split",
        "unbind",
    }
)


FLOP_RULE = FlopRule(elementwise=ELEMENTWISE_OPS, reductions=REDUCTION_OPS, free=_FREE_OPS, bias_add=True)


def flop_split(model: Callable, x: torch.Tensor) -> dict[str, dict[str, Any]]:
    """FLOPs of one training step of `model(x)`, forward and backward separately:
    {"forward": {"gemm": ..., "other": ..., "gemm_by_op": {...}, "other_by_op": {...}, "uncounted": [...]},
    "backward": {...}}. GEMM FLOPs come from torch's FlopCounterMode (2·M·N·K per GEMM); "other" counts one FLOP
    per element of every element-wise op and per input element of every reduction. The backward starts from a
    gradient of ones on the output (no loss function), and leaves the model's `.grad`s as they were."""
    from torch.utils.flop_counter import FlopCounterMode

    def measured(run: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
        with FlopCounterMode(display=False) as gemm, count_other_flops(FLOP_RULE) as other:
            result = run()
        by_op = {str(op).split(".")[-1]: n for op, n in gemm.get_flop_counts().get("Global", {}).items()}
        return result, {
            "gemm": gemm.get_total_flops(),
            "other": sum(other.flops.values()),
            "gemm_by_op": by_op,
            "other_by_op": dict(other.flops),
            "uncounted": other.uncounted,
        }

    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    saved = [(p, p.grad) for p in params] + ([(x, x.grad)] if x.requires_grad else [])
    for tensor, _ in saved:
        tensor.grad = None  # a fresh step: no gradient accumulation into old .grad
    try:
        out, forward = measured(lambda: model(x))
        _, backward = measured(lambda: out.backward(torch.ones_like(out)))
    finally:
        for tensor, grad in saved:
            tensor.grad = grad
    return {"forward": forward, "backward": backward}
