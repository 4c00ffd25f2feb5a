"""Triton for the course: where kernels run (compiled on a CUDA GPU, or Triton's interpreter on the CPU), which
kernels a call launched, and what a kernel's source does (a `tl.dot` inside a loop).

`setup()` decides the mode. Triton reads `TRITON_INTERPRET` when a function is decorated with `@triton.jit`: before
it is set, `@triton.jit` makes a `JITFunction` (compiled for a GPU), after it an `InterpretedFunction`. Anything that
imports `triton` first (`import torch._inductor` does, so does a learner's `import triton` at the top of a notebook)
leaves Triton's own library functions (`tl.sum`, `tl.max`, `tl.softmax`, `tl.cdiv`, ...) and any kernel decorated
before `setup()` as `JITFunction`s; the interpreter then stops at the first of them with "Cannot call @triton.jit'd
outside of the scope of a kernel", or a launch asks for a GPU driver ("0 active drivers"). So in the interpreter
`setup()` makes every `JITFunction` run as the `InterpretedFunction` of the same Python function: import order does
not matter.

Triton 3.9's interpreter stores bfloat16 as its raw 16 bits (NumPy has no bfloat16) and does not support arithmetic
on it (https://triton-lang.org/main/programming-guide/chapter-3/debugging.html: "convert the tensor to float32").
`tl.dot` on two bfloat16 blocks multiplies the bit patterns (triton-lang/triton#11584, declined upstream), so the
same GEMM kernel that is right on a GPU gives values near 1e10 on the CPU. `setup()` converts bfloat16 operands of
`tl.dot` to float32 in the interpreter, exactly (every bfloat16 is a float32), which is what the tensor cores do
before they accumulate in float32. Other bfloat16 arithmetic is still unsupported by the interpreter: cast to
float32 after `tl.load`.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import textwrap
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "setup",
    "interpreting",
    "device",
    "launches",
    "Launches",
    "Launch",
    "kernel_tree",
    "dot_in_loop",
    "mode_line",
]

_STATE: dict[str, Any] = {"mode": None, "patched": False}


def setup(*, gpu_if_available: bool = False) -> str:
    """Choose where Triton kernels run and return it: "cuda" (compiled) or "interpreter" (CPU, `TRITON_INTERPRET=1`).

    With `gpu_if_available` a CUDA GPU runs compiled kernels (lesson 09); otherwise, and always for the assignment,
    every kernel runs in Triton's interpreter on CPU tensors, also kernels decorated before this call."""
    gpu = False
    if gpu_if_available and os.environ.get("TRITON_INTERPRET", "") not in ("1", "true", "True"):
        import torch

        gpu = torch.cuda.is_available()
    from triton import knobs

    if not gpu:
        # Triton's own switch, in this process only: TRITON_INTERPRET in os.environ would also reach every process
        # this one starts (Inductor's compile workers, a learner's subprocess), which must not inherit it
        knobs.runtime.interpret = True

    from twoprim.topics import triton_compiled as triton_compile

    triton_compile.remember_pristine()  # triton.language before the interpreter patches it: compiling puts it back
    if not gpu:
        _interpret_every_jit_function()
        _patch_bf16_dot()
        _patch_bounds()
    _STATE["mode"] = "cuda" if gpu else "interpreter"
    return _STATE["mode"]


def interpreting() -> bool:
    """True when kernels decorated now run in Triton's interpreter."""
    from triton import knobs

    return bool(knobs.runtime.interpret)


def device() -> str:
    """The torch device kernels read and write: "cuda" when compiled, "cpu" in the interpreter."""
    return "cpu" if interpreting() else "cuda"


def mode_line() -> str:
    """One line saying how Triton kernels run here: in the interpreter on CPU, or compiled for this GPU."""
    import torch
    import triton

    if interpreting():
        return (
            f"Triton {triton.__version__}, torch {torch.__version__}: every kernel runs in Triton's interpreter "
            f"(TRITON_INTERPRET=1) on CPU tensors, one program at a time in NumPy; right values, not GPU speed."
        )
    return (
        f"Triton {triton.__version__}, torch {torch.__version__}: kernels are compiled for "
        f"{torch.cuda.get_device_name()}."
    )


def _interpret_every_jit_function() -> None:
    """While `TRITON_INTERPRET` is on, make a `JITFunction` (one decorated before it was set) run interpreted.

    Called inside a kernel (`tl.sum(x)`, a helper the learner decorated) it runs as a device function in the
    interpreter; as a tensor's method (`x.max(axis=0)`: Triton puts the library's `JITFunction` itself on `tl.tensor`
    when it was imported uninterpreted, a plain function when interpreted) it is bound to the tensor, as a function
    is; launched (`kernel[grid](...)`) it runs on the interpreter's grid, with CPU tensors. With the interpreter off
    (`setup(gpu_if_available=True)` on a GPU) all three do what Triton does."""
    if _STATE.get("every_jit"):
        return
    import functools

    import triton.language as tl
    from triton import knobs
    from triton.runtime import interpreter, jit

    cls = jit.JITFunction
    compiled_call, compiled_run = cls.__call__, cls.run
    compiled_get = cls.__dict__.get("__get__")
    interpreted_run = interpreter.InterpretedFunction.run  # the unrecorded one: `launches()` records this launch once

    def twin(self) -> interpreter.InterpretedFunction:
        found = self.__dict__.get("_twoprim_interpreted")
        if found is None:
            found = self.__dict__["_twoprim_interpreted"] = interpreter.InterpretedFunction(self.fn)
        return found

    def __call__(self, *args, **kwargs):
        if knobs.runtime.interpret:
            return twin(self)(*args, **kwargs)
        return compiled_call(self, *args, **kwargs)

    def run(self, *args, grid, warmup, **kwargs):
        if knobs.runtime.interpret:
            return interpreted_run(twin(self), *args, grid=grid, warmup=warmup, **kwargs)
        return compiled_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    def __get__(self, obj, objtype=None):
        if obj is not None and isinstance(obj, tl.core.tensor) and knobs.runtime.interpret:
            return functools.partial(self, obj)
        return compiled_get(self, obj, objtype) if compiled_get else self

    # Triton's own class, patched: each replacement wraps the method it replaces, with the same call
    cls.__call__, cls.run, cls.__get__ = __call__, run, __get__  # pyright: ignore[reportAttributeAccessIssue]
    _STATE["every_jit"] = True


def _patch_bf16_dot() -> None:
    """Make the interpreter's `tl.dot` read bfloat16 operands as numbers, not as their bit patterns, and tell
    `launches()` the block of K each call took."""
    if _STATE["patched"]:
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder_cls = type(interpreter.interpreter_builder)
    original = builder_cls.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        launch = _STATE.get("launch")
        if launch is not None and launch.dots is not None:  # inside `launches()`: which program took which block
            launch.dots.setdefault(tuple(self.grid_idx), []).append(a.data.shape[-1])
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:

            def as_f32(h):
                if h.dtype.scalar != tl.bfloat16:
                    return h.data.astype(np.float32)
                return (h.data.astype(np.uint32) << 16).view(np.float32)  # bfloat16 is the top half of a float32

            return interpreter.TensorHandle(
                np.matmul(as_f32(a), as_f32(b), dtype=d.data.dtype) + d.data, d.dtype.scalar
            )
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    builder_cls.create_dot = create_dot
    _STATE["patched"] = True


def _patch_bounds() -> None:
    """Make the interpreter raise when a load or store reaches outside every tensor the kernel was given.

    Triton's interpreter reads and writes raw addresses: an unmasked load past a tensor's end reads whatever lies
    there, and an unmasked store past it corrupts Python's memory and aborts the whole process (the notebook's
    kernel dies). On a GPU the same bug is a silent wrong value or an illegal-address error. Here it becomes an
    `IndexError` that says which access and by how far, so a missing mask is reported like any other mistake.
    Addresses are checked against every tensor argument, since a kernel may legitimately pick lanes from two of them
    (`tl.where`): a lane past one tensor that lands inside another is not counted, so the count in the message
    depends on where the allocator put the tensors."""
    if _STATE.get("bounds"):
        return
    import numpy as np
    from triton.runtime import interpreter

    executor = interpreter.GridExecutor
    original_init = executor._init_args_hst

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = original_init(self, args_dev, kwargs)
        ranges = []
        for arg in list(args_hst) + list(kwargs_hst.values()):
            untyped_storage = getattr(arg, "untyped_storage", None)
            if untyped_storage is not None:
                storage = untyped_storage()
                ranges.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        _STATE["ranges"] = ranges
        return args_hst, kwargs_hst

    def _outside(ptrs, mask, itemsize: int) -> str | None:
        ranges = _STATE.get("ranges")
        if not ranges:
            return None
        p = np.asarray(ptrs.data, dtype=np.int64)[np.asarray(mask.data, dtype=bool)]
        if p.size == 0:
            return None
        inside = np.zeros(p.shape, dtype=bool)
        for start, end in ranges:
            inside |= (p >= start) & (p + itemsize <= end)
        if inside.all():
            return None
        bad = p[~inside]
        nearest = min(ranges, key=lambda r: abs(int(bad[0]) - r[1]))
        past = (int(bad[0]) - nearest[1]) // itemsize + 1
        where = (
            f"{past} element(s) past the end of a tensor argument"
            if past > 0
            else f"{-past} element(s) before the end of a tensor argument, outside it"
        )
        return (
            f"{bad.size} of its {p.size} unmasked addresses lie outside every tensor argument (the first one {where})"
        )

    builder_cls = type(interpreter.interpreter_builder)
    original_load, original_store = builder_cls.create_masked_load, builder_cls.create_masked_store

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        found = _outside(ptrs, mask, np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize)
        if found:
            raise IndexError(
                f"tl.load: {found}; mask the load (mask=offsets < n) so no lane reads outside the tensor, "
                f"and multiply the offsets along each axis by the stride of that axis"
            )
        return original_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_policy):
        found = _outside(ptrs, mask, np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize)
        if found:
            raise IndexError(
                f"tl.store: {found}; mask the store (mask=offsets < n) so no lane writes outside the "
                f"tensor, and multiply the offsets along each axis by the stride of that axis"
            )
        return original_store(self, ptrs, value, mask, cache_policy)

    executor._init_args_hst = _init_args_hst
    builder_cls.create_masked_load, builder_cls.create_masked_store = create_masked_load, create_masked_store
    _STATE["bounds"] = True


# ----------------------------------------------------------------------------------------------------------------
# Which kernels a call launched
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Launch:
    """One `kernel[grid](...)`: the kernel's name, its Python function, the grid, and in the interpreter the blocks
    of K each program's `tl.dot` calls took: {program id (x, y, z): [K extent of each call, in order]}. Compiled
    kernels run on the GPU, where no call can be seen: `dots` is None. `signature`, `constexprs`, `attrs` and
    `options` are the specialisation Triton's launcher gives these arguments (`triton_compile.specialize`: "*fp16",
    "i32", an int equal to 1 as a constexpr, `tt.divisibility` 16 for aligned pointers and ints divisible by 16,
    BLOCK=128, num_warps=4): what `triton_compile.compile_kernel` needs to build the same launch for a GPU."""

    name: str
    fn: Any
    grid: Any
    dots: dict | None = None
    signature: dict = field(default_factory=dict)
    constexprs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)

    def compiled(self, target: str = "sm_90"):
        """This launch compiled for `target` ("sm_90", "sm_80"): a `triton_compile.Compiled` (cached)."""
        from twoprim.topics.triton_compiled import compile_kernel

        return compile_kernel(self.fn, self.signature, self.constexprs, target, attrs=self.attrs, **self.options)


@dataclass
class Launches:
    """Kernels launched inside `with launches() as seen:`, in order."""

    calls: list[Launch] = field(default_factory=list)

    def names(self) -> list[str]:
        return [launch.name for launch in self.calls]

    def functions(self) -> list:
        return [launch.fn for launch in self.calls]

    def of(self, fn: Any) -> list[Launch]:
        """The launches of kernel `fn` (a `@triton.jit` kernel or its Python function)."""
        fn = getattr(fn, "fn", fn)
        return [launch for launch in self.calls if launch.fn is fn]


@contextlib.contextmanager
def uninitialized_reads_nan():
    """While the block runs, memory torch allocates without initialising (`torch.empty`, the usual output of a Triton
    wrapper) is filled with NaN (floats) or the type's largest value (integers), as in torch's deterministic mode: an
    element no program wrote reads as NaN, never as what a freed tensor of the same size held. Without it, a grid
    that leaves a block of the output to no program could pass a case whenever the allocator hands back the buffer
    of an earlier correct run of that case (seen: a rounded-down grid passed, after the solution had run)."""
    import warnings

    import torch
    import torch.utils.deterministic as deterministic

    # `fill_uninitialized_memory` is a property of that module's class, which type checkers do not see: read and
    # set by name
    flag = "fill_uninitialized_memory"
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        getattr(deterministic, flag),
    )
    # warn_only: an op without a deterministic implementation (CUDA's, mostly) runs as it would, never raises
    torch.use_deterministic_algorithms(True, warn_only=True)
    setattr(deterministic, flag, True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have a deterministic implementation.*")
            yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        setattr(deterministic, flag, before[2])


@contextlib.contextmanager
def launches():
    """Record every `kernel[grid](...)` launch (interpreter or compiled) while the block runs, and in the
    interpreter each program's `tl.dot` calls; memory left uninitialised reads NaN (`uninitialized_reads_nan`)."""
    from triton.runtime import interpreter, jit

    seen = Launches()
    originals = {}
    for cls in (interpreter.InterpretedFunction, jit.JITFunction):
        original = cls.run
        originals[cls] = original

        def run(self, *args, _original=original, **kwargs):
            launch = Launch(self.fn.__name__, self.fn, kwargs.get("grid"), {} if interpreting() else None)
            try:
                from twoprim.topics.triton_compiled import specialize

                spec = specialize(self.fn, args, kwargs)  # as Triton's launcher would, from these very tensors
                launch.signature, launch.constexprs, launch.attrs, launch.options = (
                    spec.signature,
                    spec.constexprs,
                    spec.attrs,
                    spec.options,
                )
            except Exception:  # noqa: BLE001 - arguments Triton itself will refuse: the launch reports it
                pass
            seen.calls.append(launch)
            outer, _STATE["launch"] = _STATE.get("launch"), launch
            try:
                return _original(self, *args, **kwargs)
            finally:
                _STATE["launch"] = outer

        cls.run = run  # pyright: ignore[reportAttributeAccessIssue] (Triton's class, patched: `run` wraps its own)
    try:
        with uninitialized_reads_nan():
            yield seen
    finally:
        for cls, original in originals.items():
            cls.run = original


def launched_rule(kernel: Any, seen: list, *, computes: str, next_step: str):
    """The rule "the wrapper launches `kernel`, which computes `computes`", read from the launches recorded into
    `seen[0]` (a `Launches`, set by the check's wrapper of the learner's function for each call)."""
    from twoprim.core.checks import Rule

    want = getattr(kernel, "fn", kernel)
    name = getattr(want, "__name__", "the kernel")

    def test(log, case) -> str | None:
        launched = seen[0] if seen else Launches()
        if want in launched.functions():
            return None
        if not launched.calls:
            return f"it launched no Triton kernel: the result came from torch or Python, not from {name}"
        return f"it launched {', '.join(sorted(set(launched.names())))}, but not {name}"

    return Rule(f"the wrapper launches {name}, which computes {computes}", test, next_step.format(name=name))


# ----------------------------------------------------------------------------------------------------------------
# What a kernel's source does
# ----------------------------------------------------------------------------------------------------------------


def kernel_tree(kernel: Any) -> ast.FunctionDef | None:
    """The parsed source of a `@triton.jit` kernel (or a plain function), or None when Python cannot find it."""
    fn = getattr(kernel, "fn", kernel)
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)


def _calls_dot(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Attribute) and n.func.attr == "dot")
            or (isinstance(n.func, ast.Name) and n.func.id == "dot")
        )
        for n in ast.walk(node)
    )


def dot_in_loop(kernel: Any) -> str | None:
    """None when the kernel calls `tl.dot` inside a `for` or `while` loop (a K loop); else what it does instead."""
    tree = kernel_tree(kernel)
    name = getattr(getattr(kernel, "fn", kernel), "__name__", "the kernel")
    if tree is None:
        return f"the source of {name} could not be read, so its K loop cannot be checked"
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While))]
    if any(_calls_dot(loop) for loop in loops):
        return None
    if _calls_dot(tree):
        return f"{name} calls tl.dot once, outside any loop: one block of K, not a loop over K's blocks"
    if loops:
        return f"{name} loops but never calls tl.dot: the products are not done on the matrix units"
    return f"{name} has no loop over K and no tl.dot"
