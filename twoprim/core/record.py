"""Recording what torch code runs: the one layer that every check, lesson and count in the course builds on.

Each recorder is a context manager around a block of code and fills one plain object:

| recorder | what it records | result |
| --- | --- | --- |
| `record_calls()` | every torch function (by qualified name), every ATen op (by packet name), and the operand shapes of every dot/GEMV/GEMM ATen op | `CallLog` |
| `record_allocations()` | every tensor an ATen op returns: op, shape, dtype, storage size, whether its storage is new | `list[Allocation]` |
| `track_memory(*inputs)` | bytes of tensor storage allocated inside the block and alive at once (the peak) | `MemoryTrace` |
| `count_other_flops(rule)` | FLOPs of the ops `FlopCounterMode` has no formula for, by a stated `FlopRule` | `OtherFlops` |

GEMM FLOPs themselves come from torch's own `FlopCounterMode` (2 per multiply-add); `gemm_flops(op, shapes)` gives
the same count for one recorded op. All recorders work on tensors on the `meta` device (shapes only, no memory).
"""  # noqa: E501 - the table's rows are one line each (Markdown)

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "target_name",
    "GEMM_FUNCTIONS",
    "GEMM_ATEN",
    "gemm_flops",
    "CallLog",
    "record_calls",
    "Allocation",
    "record_allocations",
    "MemoryTrace",
    "track_memory",
    "peak_memory",
    "FlopRule",
    "OtherFlops",
    "count_other_flops",
]

# torch-level functions that compute a dot product or a GEMM (short names, matched on the last dotted part).
GEMM_FUNCTIONS = frozenset(
    {
        "dot",
        "vdot",
        "inner",
        "outer",
        "ger",
        "matmul",
        "mm",
        "mv",
        "bmm",
        "einsum",
        "tensordot",
        "linear",
        "bilinear",
        "addmm",
        "addmv",
        "addbmm",
        "baddbmm",
        "addr",
        "chain_matmul",
        "multi_dot",
        "vecdot",
        "__matmul__",
        "__rmatmul__",
        "addmm_",
        "addmv_",
        "addbmm_",
        "baddbmm_",
        "addr_",
    }
)
# ATen ops that are a dot product or a GEMM, whatever Python spelling reached them (in-place forms included).
GEMM_ATEN = frozenset(
    {
        "dot",
        "vdot",
        "mv",
        "mm",
        "addmm",
        "addmv",
        "bmm",
        "baddbmm",
        "addbmm",
        "addr",
        "_mkl_linear",
        "_addmm_activation",
        "linear",
        "matmul",
        "outer",
        "ger",
        "addmm_",
        "addmv_",
        "addr_",
        "baddbmm_",
        "addbmm_",
    }
)


def gemm_flops(op: str, shapes: tuple[tuple[int, ...], ...]) -> int:
    """FLOPs (2 per multiply-add) of one dot/GEMV/GEMM ATen op, from its operands' shapes."""
    op = op.rstrip("_")  # in-place variants (addmm_) count like their out-of-place op
    if op in ("addmm", "addmv", "baddbmm", "addbmm", "addr", "_addmm_activation"):
        shapes = shapes[1:]  # the first operand is the C that is added
    if len(shapes) < 2:
        return 0
    a, b = shapes[0], shapes[1]
    if op in ("dot", "vdot"):
        return 2 * a[0]
    if op in ("mv", "addmv"):
        return 2 * a[0] * a[1]
    if op in ("mm", "addmm", "_addmm_activation"):
        return 2 * a[0] * a[1] * b[1]
    if op in ("bmm", "baddbmm", "addbmm"):
        return 2 * a[0] * a[1] * a[2] * b[2]
    if op in ("outer", "ger", "addr"):
        return a[0] * b[0]
    return 0


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in an op's arguments or result (nested tuples, lists and dicts), in order: what `tree_leaves`
    finds, at a fraction of its cost, which every recorded op pays."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = tuple(value.values())
    elif not isinstance(value, (tuple, list)):
        return []
    found: list[torch.Tensor] = []
    for item in value:
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (tuple, list, dict)):
            found.extend(_tensors(item))
    return found


def _numel_of_first(value: Any) -> int:
    first = _tensors(value)[:1]
    return first[0].numel() if first else 0


class _OnEachOp(TorchDispatchMode):
    """The one dispatch hook: runs every ATen op, then hands (name, func, args, kwargs, out) to each of `seens`.

    Recorders nested directly inside each other share one hook (`_Recorder` adds its `seen` to the hook on top of
    the stack): every op then pays one trip through Python dispatch instead of one per recorder."""

    def __init__(self, seen: Callable[[str, Any, tuple, dict, Any], None]):
        super().__init__()
        self.seens = [seen]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        for seen in self.seens:
            seen(name, func, args, kwargs, out)
        return out


class _Recorder:
    """Base of the context managers below: `_modes()` are entered in order and left in reverse. An `_OnEachOp`
    entered while another is the innermost dispatch mode joins it rather than stacking a second one."""

    def _modes(self) -> list:
        raise NotImplementedError

    def _result(self) -> Any:
        raise NotImplementedError

    def __enter__(self):
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        self._entered = []
        for mode in self._modes():
            top = _get_current_dispatch_mode() if isinstance(mode, _OnEachOp) else None
            if isinstance(top, _OnEachOp):
                top.seens.extend(mode.seens)
                self._entered.append((top, mode.seens))
            else:
                mode.__enter__()
                self._entered.append((mode, None))
        return self._result()

    def __exit__(self, *exc):
        for mode, joined in reversed(self._entered):
            if joined is None:
                mode.__exit__(*exc)
            else:
                del mode.seens[len(mode.seens) - len(joined) :]
        return False


# ----------------------------------------------------------------------------------------------------------------
# Calls: torch functions, ATen ops, and GEMM operand shapes
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class CallLog:
    """What a block of code ran: torch functions by qualified name, ATen ops by packet name, and for every
    dot/GEMV/GEMM ATen op its operands' shapes (`gemms`, in call order)."""

    functions: Counter = field(default_factory=Counter)
    aten: Counter = field(default_factory=Counter)
    gemms: list = field(default_factory=list)  # [(op, ((shape of operand 0), (shape of operand 1), ...)), ...]

    def gemm_flops(self) -> int:
        """FLOPs run inside dot/GEMV/GEMM ops (2 per multiply-add), from the recorded operand shapes."""
        return sum(gemm_flops(op, shapes) for op, shapes in self.gemms)

    def short_functions(self) -> Counter:
        return Counter({name.rsplit(".", 1)[-1]: n for name, n in self.functions.items()})

    def used(self, function_names: Iterable[str] = (), aten_names: Iterable[str] = ()) -> list[str]:
        """The recorded calls whose names are in either set, as readable strings."""
        fn_names, aten_set = set(function_names), set(aten_names)
        hits = [name for name in self.functions if name.rsplit(".", 1)[-1] in fn_names]
        hits += [f"aten.{name}" for name in self.aten if name in aten_set]
        return hits

    def count_aten(self, names: Iterable[str]) -> int:
        names = set(names)
        return sum(n for op, n in self.aten.items() if op in names)

    @property
    def total(self) -> int:
        return sum(self.aten.values())

    def _aten(self, name: str, func, args: tuple, kwargs: dict, out: Any) -> None:
        self.aten[name] += 1
        if name in GEMM_ATEN:
            self.gemms.append((name, tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))))


class _FunctionRecorder(TorchFunctionMode):
    def __init__(self, log: CallLog):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.log.functions[_function_name(func)] += 1
        return func(*args, **(kwargs or {}))


_NAMES: dict = {}


def _function_name(func) -> str:
    """A torch function's qualified name (`torch.matmul`, `torch.Tensor.add`), looked up once per function:
    `resolve_name` costs more than most of the ops it names."""
    try:
        return _NAMES[func]
    except (KeyError, TypeError):
        pass
    try:
        name = resolve_name(func) or getattr(func, "__qualname__", None) or repr(func)
    except Exception:  # noqa: BLE001 - naming must never break the learner's code
        name = repr(func)
    with contextlib.suppress(TypeError):  # unhashable: named again next time
        _NAMES[func] = name
    return name


class record_calls(_Recorder):
    """`with record_calls() as log: ...` fills a `CallLog`: torch functions, ATen ops and GEMM operand shapes."""

    def _modes(self) -> list:
        self.log = CallLog()
        return [_FunctionRecorder(self.log), _OnEachOp(self.log._aten)]

    def _result(self) -> CallLog:
        return self.log


# ----------------------------------------------------------------------------------------------------------------
# Memory: the tensors a block creates, and the peak of what is alive
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """One tensor an ATen op returned: the op, the tensor's shape and dtype, how many elements and bytes its
    storage holds (a view shares its base's storage, so a view of a big tensor is big; an expanded tensor is
    small), and whether that storage is `new` (not one of the op's inputs': views and in-place results are not)."""

    op: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    storage_elements: int
    storage_bytes: int = 0
    new: bool = True


class record_allocations(_Recorder):
    """`with record_allocations() as allocs: ...` lists an `Allocation` for every tensor the ATen ops return."""

    def _modes(self) -> list:
        self.allocations: list[Allocation] = []
        return [_OnEachOp(self._seen)]

    def _result(self) -> list[Allocation]:
        return self.allocations

    def _seen(self, name: str, func, args: tuple, kwargs: dict, out: Any) -> None:
        outs = _tensors(out)
        if not outs:
            return
        inputs = {_storage_key(t) for t in _tensors((args, kwargs))}
        for t in outs:
            try:
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
                elements = nbytes // max(t.element_size(), 1)
            except (RuntimeError, NotImplementedError):  # tensors without storage (e.g. some subclasses)
                key, nbytes, elements = id(t), t.numel() * t.element_size(), t.numel()
            self.allocations.append(Allocation(name, tuple(t.shape), t.dtype, elements, nbytes, key not in inputs))
            inputs.add(key)  # a second output on the same storage is not new either


def _storage_key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return id(t)


@dataclass
class MemoryTrace:
    """Bytes of tensor storage allocated inside a `track_memory` block: live now, and the peak."""

    current: int = 0
    peak: int = 0
    _live: dict = field(default_factory=dict)  # storage data_ptr -> [bytes, live tensors that use it]

    def _release(self, key: int) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self._live[key]

    def _seen(self, outside: set[int], name: str, func, args: tuple, kwargs: dict, out: Any) -> None:
        for t in _tensors(out):
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in outside:
                continue  # nothing allocated, or memory that existed before the block (an input, a view of one)
            entry = self._live.get(key)
            if entry is None:
                entry = self._live[key] = [nbytes, 0]
                self.current += nbytes
                self.peak = max(self.peak, self.current)
            entry[1] += 1
            weakref.finalize(t, self._release, key)


class track_memory(_Recorder):
    """`with track_memory(*inputs) as trace: ...` then `trace.peak`: the most bytes of tensor storage that were
    allocated inside the block and alive at the same time.

    How it measures: every tensor an ATen op returns is seen; a new storage adds its bytes, and when the last
    tensor using it is freed (a weakref finalizer) they are subtracted. Storage of the tensors passed in (and of
    their views) does not count. `tracemalloc` cannot do this: torch allocates outside Python's allocator. On a GPU,
    `torch.cuda.max_memory_allocated` measures the same thing from the allocator itself.
    """

    def __init__(self, *inputs: torch.Tensor):
        self.outside = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}

    def _modes(self) -> list:
        self.trace = MemoryTrace()
        return [_OnEachOp(lambda *seen: self.trace._seen(self.outside, *seen))]

    def _result(self) -> MemoryTrace:
        return self.trace


def peak_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Peak bytes of tensor storage allocated and alive at once while `fn(*args, **kwargs)` runs (its result
    included), measured with `track_memory`; the inputs' own memory is not counted."""
    with track_memory(*args, *kwargs.values()) as trace:
        result = fn(*args, **kwargs)
        del result
    return trace.peak


# ----------------------------------------------------------------------------------------------------------------
# FLOPs outside GEMMs
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlopRule:
    """How the ops `FlopCounterMode` has no formula for are counted, stated so a lesson can print it.

    - `elementwise`: ops costing 1 FLOP per output element; None means every op torch tags `pointwise`;
    - `reductions`: 1 FLOP per element of the first input;
    - `fused`: ops counted as their parts, k FLOPs per output element (softmax = max, subtract, exp, sum, divide);
    - `free`: data movement (views, copies, creation): 0 FLOPs, never reported as uncounted;
    - `bias_add`: also count the bias add inside addmm/baddbmm (FlopCounterMode counts only the products);
    - `inplace_as_out_of_place`: `add_` counts as `add`.
    """

    elementwise: frozenset[str] | None
    reductions: frozenset[str]
    fused: Mapping[str, int] = field(default_factory=dict)
    free: frozenset[str] = frozenset()
    bias_add: bool = False
    inplace_as_out_of_place: bool = False


@dataclass
class OtherFlops:
    """Filled by `count_other_flops`: FLOPs per op name, and how often each op counted as 0 FLOPs ran
    (`zero`); `uncounted` are those of them that the rule does not call data movement either."""

    rule: FlopRule
    flops: Counter = field(default_factory=Counter)
    zero: Counter = field(default_factory=Counter)

    @property
    def uncounted(self) -> list[str]:
        return sorted(n for n in self.zero if n not in self.rule.free)

    def _seen(self, name: str, func, args: tuple, kwargs: dict, out: Any) -> None:
        rule = self.rule
        if rule.inplace_as_out_of_place:
            name = name.rstrip("_")
        if rule.bias_add and name in ("addmm", "baddbmm") and isinstance(out, torch.Tensor):
            self.flops[f"{name} (bias add)"] += out.numel()
            return
        from torch.utils.flop_counter import flop_registry  # imports triton: paid only where FLOPs are counted

        if func.overloadpacket in flop_registry or name in GEMM_ATEN:
            return  # a GEMM: FlopCounterMode's to count
        if name in rule.fused:
            self.flops[name] += rule.fused[name] * _numel_of_first(out)
        elif name in rule.reductions:
            self.flops[name] += _numel_of_first(args)
        elif name not in rule.free and (
            name in rule.elementwise if rule.elementwise is not None else torch.Tag.pointwise in func.tags
        ):
            self.flops[name] += _numel_of_first(out)
        else:
            self.zero[name] += 1


class count_other_flops(_Recorder):
    """`with FlopCounterMode(display=False) as gemm, count_other_flops(rule) as other: ...`: the GEMM FLOPs in
    `gemm`, everything else by `rule` in `other.flops`."""

    def __init__(self, rule: FlopRule):
        self.rule = rule

    def _modes(self) -> list:
        self.counts = OtherFlops(self.rule)
        return [_OnEachOp(self.counts._seen)]

    def _result(self) -> OtherFlops:
        return self.counts


def target_name(node: torch.fx.Node) -> str:
    """What a node runs, spelled out in full: "torch._C._nn.linear", "torch.ops.aten.addmm.default", a method's
    name, or for an input its placeholder name."""
    if node.op == "call_function":
        try:
            from torch.fx.node import _get_qualified_name

            return _get_qualified_name(cast(Callable[..., Any], node.target))  # a call_function's target is one
        except Exception:  # noqa: BLE001 - a name is only for reading
            return str(node.target)
    return str(node.target)
