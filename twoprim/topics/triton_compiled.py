"""A learner's Triton kernel compiled for real GPUs on a machine without one, and what the compiled code says.

Triton 3.9 builds a kernel for a GPU it does not have: `triton.compile(ASTSource(fn, signature, constexprs),
target=GPUTarget("cuda", 90, 32))` runs TTIR → TTGIR → LLVM IR → PTX → cubin on the CPU (the wheel carries NVIDIA's
`ptxas` and `cuobjdump`). `compile_kernel` does that for one launch of a kernel and one target, sm_90 (H100/H200) or
sm_80 (A100), with the specialisation Triton's own launcher would give the launch's arguments (`specialize`, run by
Triton's binder: a 16-byte aligned pointer or an int divisible by 16 gets `tt.divisibility = 16`, an int equal to 1
becomes a constexpr; `triton_tools.Launch` keeps it for every launch the interpreter saw). Without it the compiler
cannot prove a load aligned: no vectorised loads, no `cp.async` pipeline, shared memory that does not change with
num_stages. It returns a `Compiled`:
the compiler's own error (with the learner's line), or the IR texts and what they hold: every `tt.dot` with its
operand and accumulator types and the loops around it, the loop-carried values, the floating-point arithmetic and
its element types, PTX tensor-core instruction counts, registers per thread and shared memory per program.

Kernels the course runs in Triton's interpreter are `InterpretedFunction`s, and so are Triton's own library
functions (`tl.sum`, `tl.max`) when Triton was imported with the interpreter on; the interpreter also leaves some of
its replacements of `triton.language` in place after a kernel calls a library function. `compile_kernel` compiles a
`JITFunction` made from the same Python function, with the library's `JITFunction`s and the pristine
`triton.language` put back for the length of the compile only.

Every result (errors too) is kept on disk under `cache_dir()`, keyed by the kernel's source and that of every
function it calls, the signature, the constexprs, the options and the target: a check that compiles the same kernel
again reads a file. In a graded submission's sandbox the folder lies in the submission's own home.

Why this module is long: one compile pipeline and a reader for each of its artefacts (TTIR, TTGIR, PTX, the cubin's
resources), with the GPU limits those numbers are read against; split, a reader would sit apart from the compile
that makes its input and the cache that keys it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import subprocess
import tempfile
import time
import types
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TARGETS",
    "GPU",
    "H200",
    "A100",
    "GPUS",
    "cache_dir",
    "Specialization",
    "specialize",
    "compile_kernel",
    "compile_launch",
    "Compiled",
    "Dot",
    "MemoryOp",
    "Reduction",
    "PtxLoop",
    "Occupancy",
    "occupancy",
]

ENV_CACHE = "TWOPRIM_TRITON_CACHE"
TARGETS = {"sm_90": 90, "sm_80": 80}  # compute capability of each target: H100/H200 (Hopper) and A100 (Ampere)
TENSOR_CORE_PTX = ("wgmma.mma_async", "mma.sync")  # Hopper's warpgroup MMA; the warp-level MMA of sm_80 and later


# ----------------------------------------------------------------------------------------------------------------
# The GPUs the targets stand for
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPU:
    """Per-SM limits of one GPU, for occupancy: how many programs (CUDA blocks) of a kernel one SM holds at once."""

    name: str
    target: str
    sms: int
    registers_per_sm: int  # 32-bit registers
    shared_per_sm: int  # bytes of shared memory an SM can give its resident blocks
    threads_per_sm: int
    blocks_per_sm: int
    reserved_shared_per_block: int = 1024  # "1 KB of shared memory is reserved for system use" per block (8.x, 9.0)
    register_unit: int = 256  # registers are allocated per warp in units of 256
    source: str = ""


_GUIDE = (
    "CUDA C++ Programming Guide, 'Compute Capabilities' (technical specifications per compute capability, "
    "and shared memory for compute capability {cc}): 64K 32-bit registers, 2048 resident threads and 32 resident "
    "blocks per SM; {smem} KB shared memory per SM"
)
H200 = GPU(
    "NVIDIA H100/H200 (SXM)",
    "sm_90",
    sms=132,
    registers_per_sm=65536,
    shared_per_sm=228 * 1024,
    threads_per_sm=2048,
    blocks_per_sm=32,
    source=_GUIDE.format(cc="9.0", smem=228) + "; 132 SMs: NVIDIA H100 Tensor Core GPU Architecture "
    "whitepaper (H100 SXM5), the H200 is the same GH100 chip with more memory",
)
A100 = GPU(
    "NVIDIA A100",
    "sm_80",
    sms=108,
    registers_per_sm=65536,
    shared_per_sm=164 * 1024,
    threads_per_sm=2048,
    blocks_per_sm=32,
    source=_GUIDE.format(cc="8.0", smem=164) + "; 108 SMs: NVIDIA A100 Tensor Core GPU Architecture whitepaper",
)
GPUS = {gpu.target: gpu for gpu in (H200, A100)}


@dataclass(frozen=True)
class Occupancy:
    """How many programs of a kernel fit on one SM of `gpu`, what fraction of its warps, and what limits it."""

    programs_per_sm: int
    warps_per_sm: int
    fraction: float  # resident warps / the SM's maximum (64)
    limit: str  # what stops one more program: "registers", "shared memory", "threads", "blocks"
    # (several joined by "and" when they allow the same number)
    gpu: GPU

    def line(self) -> str:
        return (
            f"up to {self.programs_per_sm} program(s) resident at once on each SM of an {self.gpu.name} (limited "
            f"by {self.limit}): {self.warps_per_sm} of {self.gpu.threads_per_sm // 32} warps, occupancy "
            f"{self.fraction:.0%}; a wave of {self.programs_per_sm * self.gpu.sms} programs on its {self.gpu.sms} "
            f"SMs"
        )


def occupancy(registers: int, shared: int, num_warps: int, gpu: GPU = H200) -> Occupancy:
    """Programs of a kernel resident on one SM at once: the least of what registers, shared memory, threads and the
    block limit allow (the CUDA occupancy calculator's rules, with the limits of `gpu`)."""
    per_warp = -(-max(registers, 1) * 32 // gpu.register_unit) * gpu.register_unit
    limits = {
        "registers": (gpu.registers_per_sm // per_warp) // num_warps,
        "shared memory": gpu.shared_per_sm // (shared + gpu.reserved_shared_per_block),
        "threads": gpu.threads_per_sm // (32 * num_warps),
        "blocks": gpu.blocks_per_sm,
    }
    programs = min(limits.values())
    limit = " and ".join(k for k, v in limits.items() if v == programs)  # every limit that allows no more
    warps = programs * num_warps
    return Occupancy(programs, warps, warps / (gpu.threads_per_sm // 32), limit, gpu)


# ----------------------------------------------------------------------------------------------------------------
# What the compiled IR holds
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Dot:
    """One `tt.dot` of the TTIR: operand and result element types (f16, bf16, f32), tile shapes, the precision of
    fp32 inputs, the regions around it (innermost last: "scf.for", "scf.if", ...) and the learner's line."""

    a: str
    b: str
    acc: str
    shape: str
    precision: str
    regions: list[str]
    line: int | None
    accumulator_from_loop: bool  # its accumulator operand is a value the enclosing loop carries
    loop: int | None = None  # which scf.for of the TTIR holds it, innermost (0 the first in the text); None: none
    k: int | None = None  # the extent it sums over: a's columns (M×K · K×N -> M×N)

    @property
    def macs(self) -> int:
        """Its multiply-adds: M·N·K."""
        m, n = (int(x) for x in self.shape.split("x")[-2:])
        return m * n * (self.k or 0)

    @property
    def in_loop(self) -> bool:
        return "scf.for" in self.regions or "scf.while" in self.regions


@dataclass
class MemoryOp:
    """One `tt.load` or `tt.store` of the TTIR: which of the kernel's pointer arguments its addresses derive from
    (followed back through `tt.addptr`, `tt.splat`, `tt.broadcast` and the values loops carry), the tile it moves
    (shape and element type), the regions around it (innermost last), which scf.for holds it and the learner's
    line."""

    kind: str  # "load" or "store"
    arguments: list[str]  # the kernel's pointer parameters the addresses come from ("o_ptr")
    shape: tuple[int, ...]  # () for one scalar
    element: str  # f16, bf16, f32, ...
    regions: list[str]
    loop: int | None
    line: int | None

    @property
    def in_loop(self) -> bool:
        return self.loop is not None


@dataclass
class Reduction:
    """One `tt.reduce` of the TTIR (`tl.sum`, `tl.max`, ...): the shape it reduces, the axis, its combining op
    (arith.addf, arith.maxnumf), which scf.for holds it and the learner's line."""

    shape: tuple[int, ...]
    axis: int
    combine: str
    loop: int | None
    line: int | None


@dataclass
class PtxLoop:
    """One loop of the PTX (a label and the backward branch to it): its tensor-core instructions, the wgmma groups
    it commits, and the multiply-adds one pass through it performs on the tensor cores (m·n·k of each instruction,
    times the warps issuing an `mma.sync` or the warpgroups issuing a `wgmma.mma_async`)."""

    label: str
    counts: dict[str, int]
    wgmma_groups: int  # `wgmma.commit_group` in the body: one per tl.dot the compiler issued as wgmma
    macs: int  # tensor-core multiply-adds per iteration, the whole program's


@dataclass
class Compiled:
    """One kernel compiled for one target: the error the compiler raised, or its IR and what it holds."""

    kernel: str
    target: str
    signature: dict
    constexprs: dict
    num_warps: int
    num_stages: int
    attrs: dict = field(default_factory=dict)  # {"a_ptr": [["tt.divisibility", 16]], ...}: `specialize`
    ones: list = field(default_factory=list)  # ints the launch passed as 1, compiled as constexprs
    error: str | None = None
    error_line: int | None = None
    ttir: str = ""
    ttgir: str = ""
    ptx: str = ""
    registers: int = 0  # per thread (cuobjdump -res-usage)
    spilled: int = 0  # bytes of stack (local memory) per thread: registers that did not fit
    shared: int = 0  # bytes of shared memory per program (Triton's dynamic + the kernel's static)
    seconds: float = 0.0
    cached: bool | None = False  # kept on disk; None: a failure of this machine, not kept (tried again next time)

    # ---- what the IR holds ----
    def dots(self) -> list[Dot]:
        return _dots(self.ttir)

    def memory_ops(self) -> list[MemoryOp]:
        """Every tt.load and tt.store of the TTIR, with the pointer arguments its addresses come from."""
        return _memory_ops(self.ttir)

    def reductions(self) -> list[Reduction]:
        """Every tt.reduce of the TTIR: what `tl.sum`, `tl.max` and the like compiled to."""
        return _reductions(self.ttir)

    def loops_carry(self) -> list[list[str]]:
        """Per scf.for of the TTIR, in the order of the text: the types of the values it carries."""
        return [
            [t.strip() for t in _split_types(m.group(1))]
            for m in re.finditer(r"scf\.for .*iter_args\(.*\) -> \((.*)\)", self.ttir)
        ]

    def tensor_core_macs(self) -> int:
        """Multiply-adds of every tensor-core instruction of the PTX, each counted once as written (`PtxLoop.macs`'s
        rule): what one program does on the tensor cores when no loop repeats them."""
        return _tensor_core_work(self.ptx.splitlines(), self.num_warps)[1]

    def ptx_loops(self) -> list[PtxLoop]:
        """The loops of the PTX, in the order of their labels, with the tensor-core work of one pass through each."""
        return _ptx_loops(self.ptx, self.num_warps)

    def loop_carried(self) -> list[str]:
        """The types of the values every scf.for of the TTIR carries from one iteration to the next."""
        return [
            t.strip()
            for m in re.finditer(r"scf\.for .*iter_args\(.*\) -> \((.*)\)", self.ttir)
            for t in _split_types(m.group(1))
        ]

    def arithmetic(self) -> list[tuple[str, str, int | None]]:
        """Floating-point arithmetic on tensors in the TTIR: (op, element type, learner's line)."""
        found = []
        locs = _locations(self.ttir)
        for line in self.ttir.splitlines():
            m = re.search(
                r"= (arith\.(?:addf|subf|mulf|divf|maxnumf|minnumf)|math\.\w+) .*: (tensor<[^>]*>|f16|bf16|"
                r"f32|f64)(?=\s|$)",
                line,
            )
            if m:
                found.append((m.group(1), _element(m.group(2)), _line_of(line, locs)))
        return found

    def rounded_midway(self) -> list[tuple[str, int | None]]:
        """Values the TTIR rounds to 16 bits (arith.truncf) and then uses for anything but a store: (type, line)."""
        locs = _locations(self.ttir)
        lines = self.ttir.splitlines()
        found = []
        for i, line in enumerate(lines):
            m = re.search(r"(%[\w#]+) = arith\.truncf .* to (tensor<[^>]*>|bf16|f16)(?=\s|$)", line)
            if not m or _element(m.group(2)) not in ("f16", "bf16"):
                continue
            use = re.compile(re.escape(m.group(1)) + r"(?![\w#])")
            if any(
                use.search(other) and not other.strip().startswith("tt.store")
                for j, other in enumerate(lines)
                if j != i and not other.startswith("#")
            ):
                found.append((_element(m.group(2)), _line_of(line, locs)))
        return found

    def tensor_core(self) -> dict[str, int]:
        """Count of each tensor-core instruction in the PTX (`wgmma.mma_async`, `mma.sync`)."""
        counts = {name: 0 for name in TENSOR_CORE_PTX}
        for line in self.ptx.splitlines():
            instr = line.strip()
            if instr.startswith("@"):
                instr = instr.split(None, 1)[-1]
            for name in TENSOR_CORE_PTX:
                if instr.startswith(name + ".") or instr.startswith(name + " "):
                    counts[name] += 1
        return counts

    def async_copies(self) -> int:
        """Asynchronous copies from global to shared memory in the PTX (`cp.async.cg/ca.shared.global`, and Hopper's
        bulk `cp.async.bulk`): the loads the software pipeline of `num_stages` issues ahead of the tl.dot that uses
        them. 0 when the compiler could not pipeline the loads (unaligned, or one stage)."""
        return len(re.findall(r"^\s*(?:@%\w+\s+)?cp\.async\.(?:c[ag]\.shared|bulk)[\w:.]*", self.ptx, re.MULTILINE))

    def tensor_core_shapes(self) -> list[str]:
        """The distinct tensor-core instructions of the PTX in full (`mma.sync.aligned.m16n8k16.row.col.f32...`)."""
        return sorted({m.group(0) for m in re.finditer(r"\b(?:wgmma\.mma_async|mma\.sync)[\w.]*", self.ptx)})

    def mma_layout(self) -> str | None:
        """Which matrix-unit layout TTGIR gave the dot: 'v3 (wgmma)' on Hopper's warpgroups, 'v2 (mma.sync)'."""
        m = re.search(r"#ttg\.nvidia_mma<\{versionMajor = (\d+)", self.ttgir)
        if not m:
            return None
        return {
            "3": "v3: wgmma, one 4-warp warpgroup per instruction",
            "2": "v2: mma.sync, one warp per instruction",
        }.get(m.group(1), f"v{m.group(1)}")

    def occupancy(self) -> Occupancy:
        return occupancy(self.registers, self.shared, self.num_warps, GPUS[self.target])

    def specialisation(self) -> str:
        """The arguments' specialisation this was compiled with, in words: which pointers are 16-byte aligned,
        which ints divisible by 16, which equal to 1 (`specialize`)."""
        aligned = [k for k, v in self.attrs.items() if any(a[0] == "tt.divisibility" for a in v)]
        pointers = [k for k in aligned if self.signature.get(k, "").startswith("*")]
        ints = [k for k in aligned if k not in pointers]
        parts = [
            f"16-byte aligned {', '.join(pointers)}" if pointers else "no pointer known 16-byte aligned",
            f"divisible by 16: {', '.join(ints)}" if ints else "no int divisible by 16",
        ]
        if self.ones:
            parts.append(f"equal to 1 (compiled in): {', '.join(self.ones)}")
        return "; ".join(parts)

    def summary(self) -> str:
        """One line: the target, the tensor-core instructions, registers, shared memory, occupancy."""
        if self.error:
            return f"{self.target}: does not compile"
        counts = self.tensor_core()
        tc = ", ".join(f"{n} {name}" for name, n in counts.items() if n) or "no tensor-core instruction"
        copies = self.async_copies()
        pipeline = f"{copies} cp.async (global → shared)" if copies else "no cp.async"
        spill = f"{self.spilled} B spilled to local memory" if self.spilled else "no spill"
        return (
            f"{self.target}: {tc}; {pipeline}; {self.registers} registers/thread ({spill}), {self.shared} B shared "
            f"memory per program, {self.num_warps} warps, {self.num_stages} stages; {self.occupancy().line()}"
        )


_LOC_DEF = re.compile(r"^#(loc\d*) = loc\((.*)\)\s*$")


def _locations(ir_text: str) -> dict[str, int | None]:
    """#locN → the line of the learner's source it stands for (a call into Triton's library → the caller's line)."""
    raw = {m.group(1): m.group(2) for m in map(_LOC_DEF.match, ir_text.splitlines()) if m}
    resolved: dict[str, int | None] = {}

    def line_of(body: str, depth: int = 0) -> int | None:
        if depth > 50:
            return None
        m = re.match(r"callsite\(#(loc\d*) at #(loc\d*)\)", body)
        if m:
            return resolve(m.group(2), depth + 1)
        m = re.match(r'"[^"]*"\(#(loc\d*)\)', body)
        if m:
            return resolve(m.group(1), depth + 1)
        m = re.match(r'"([^"]*)":(\d+):\d+', body)
        if m:
            return None if "site-packages" in m.group(1) else int(m.group(2))
        return None

    def resolve(name: str, depth: int = 0) -> int | None:
        if name not in resolved:
            resolved[name] = line_of(raw.get(name, ""), depth)
        return resolved[name]

    return {name: resolve(name) for name in raw}


def _line_of(line: str, locs: dict[str, int | None]) -> int | None:
    m = re.search(r"loc\(#(loc\d*)\)\s*$", line)
    if m:
        return locs.get(m.group(1))
    m = re.search(r'loc\("[^"]*":(\d+):\d+\)\s*$', line)
    return int(m.group(1)) if m else None


def _element(type_text: str) -> str:
    m = re.match(r"tensor<(?:\d+x)*([a-z0-9]+)", type_text.strip())
    return m.group(1) if m else type_text.strip()


def _split_types(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + ([cur] if cur.strip() else [])


def _dots(ttir: str) -> list[Dot]:
    locs = _locations(ttir)
    found, stack, carried, loops, count = [], [], [], [], 0
    for line in ttir.splitlines():
        text = line.strip()
        if text.startswith("}"):
            if stack:
                stack.pop()
                carried.pop()
                loops.pop()
            if text.endswith("{"):  # } else {
                stack.append("scf.if")
                carried.append(carried[-1] if carried else set())
                loops.append(loops[-1] if loops else None)
            continue
        if text.endswith("{"):
            m = re.match(r'(?:%[\w#:]+(?:, %[\w#:]+)* = )?"?([\w.]+)"?', text)
            op = m.group(1) if m else "?"
            names = (
                set(re.findall(r"iter_args\(([^)]*)\)", text)[0].replace(" ", "").split(","))
                if "iter_args(" in text
                else set()
            )
            stack.append(op)
            carried.append({n.split("=")[0] for n in names} | (carried[-1] if carried else set()))
            loops.append(count if op in ("scf.for", "scf.while") else (loops[-1] if loops else None))
            count += op in ("scf.for", "scf.while")
            continue
        m = re.search(
            r"= tt\.dot (%[\w#]+), (%[\w#]+), (%[\w#]+)(?:, inputPrecision = (\w+))?.*: (tensor<[^>]*>) \* "
            r"(tensor<[^>]*>) -> (tensor<[^>]*>)",
            text,
        )
        if m:
            tile = re.match(r"tensor<((?:\d+x)+)", m.group(7))
            assert tile is not None  # (a tt.dot's result is a tile: tensor<MxNx...>)
            shape = tile.group(1).rstrip("x")
            found.append(
                Dot(
                    _element(m.group(5)),
                    _element(m.group(6)),
                    _element(m.group(7)),
                    shape,
                    m.group(4) or "ieee",
                    list(stack),
                    _line_of(line, locs),
                    m.group(3) in (carried[-1] if carried else set()),
                    loops[-1] if loops else None,
                    (_shape_of(m.group(5)) or (None,))[-1],
                )
            )
    return found


_SSA = r"%[\w$.-]+"  # an SSA value's name in the TTIR (`%q_ptr`, `%acc_27`); `#N` picks a result of a multi-result op


def _scopes(ttir: str):
    """Each line of the TTIR with the regions around it (innermost last) and the index of the innermost scf.for or
    scf.while that holds it (None outside every loop; loops numbered in the order of the text)."""
    stack, loops, count = [], [], 0
    for line in ttir.splitlines():
        text = line.strip()
        if text.startswith("}"):  # the end of a region (`}) : (tensor<...>) -> ...` ends a tt.reduce's)
            if stack:
                stack.pop()
                loops.pop()
            yield line, list(stack), loops[-1] if loops else None
            if text.endswith("{"):
                stack.append("scf.if")
                loops.append(loops[-1] if loops else None)
            continue
        yield line, list(stack), loops[-1] if loops else None
        if text.endswith("{"):
            m = re.match(r'(?:%[\w#:$.-]+(?:, %[\w#:$.-]+)* = )?"?([\w.]+)"?', text)
            op = m.group(1) if m else "?"
            stack.append(op)
            loops.append(count if op in ("scf.for", "scf.while") else (loops[-1] if loops else None))
            count += op in ("scf.for", "scf.while")


def _code(line: str) -> str:
    """A TTIR line without its location and its attribute dictionaries."""
    return re.sub(r"\s+loc\(.*$", "", line)


def _definitions(ttir: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(value -> the values it is computed from, kernel argument -> its type): the TTIR's def-use chains, as far as
    following a pointer back to the kernel's arguments needs. A loop's iteration argument stands for its initial
    value, a loop's results for everything the loop line names."""
    uses: dict[str, list[str]] = {}
    args: dict[str, str] = {}
    for line in ttir.splitlines():
        if line.strip().startswith("tt.func"):  # its arguments carry locations of their own: read it whole
            for name, typ in re.findall(r"(" + _SSA + r"): (!tt\.ptr<[^>]*>|[\w<>]+)", line):
                args[name] = typ
            continue
        code = _code(line).strip()
        m = re.match(r"(" + _SSA + r")(?::\d+)?(?:, (?:" + _SSA + r"))* = (.*)$", code)
        if not m:
            continue
        lhs = re.findall(_SSA, code.split(" = ", 1)[0])
        rhs = m.group(2)
        for inner, init in re.findall(r"(" + _SSA + r") = (" + _SSA + r")", rhs):  # scf.for iter_args(%a = %b, ...)
            uses[inner] = [init.split("#")[0]]
        operands = [v.split("#")[0] for v in re.findall(_SSA + r"(?:#\d+)?", rhs)]
        for name in lhs:
            uses[name] = operands
    return uses, args


def _pointer_arguments(value: str, uses: dict, args: dict, memo: dict) -> frozenset:
    """The kernel's pointer arguments `value` is computed from."""
    found: set[str] = set()
    todo, seen = [value.split("#")[0]], set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in memo:
            found |= memo[v]
        elif v in args:
            if args[v].startswith("!tt.ptr"):
                found.add(v)
        else:
            todo.extend(uses.get(v, ()))
    memo[value] = frozenset(found)
    return memo[value]


def _shape_of(type_text: str) -> tuple[int, ...]:
    m = re.match(r"tensor<((?:\d+x)+)", type_text.strip())
    return tuple(int(n) for n in m.group(1).rstrip("x").split("x")) if m else ()


def _memory_ops(ttir: str) -> list[MemoryOp]:
    locs = _locations(ttir)
    uses, args = _definitions(ttir)
    memo: dict = {}
    found = []
    for line, regions, loop in _scopes(ttir):
        code = _code(line)
        m = re.search(
            r"(?:= )?tt\.(load|store) (" + _SSA + r"(?:#\d+)?)(?:, (" + _SSA + r"(?:#\d+)?))?[^:]*: "
            r"(tensor<[^>]*>>|!tt\.ptr<[^>]*>)",
            code,
        )
        if not m or re.match(r"\s*\^", code):
            continue
        pointer_type = m.group(4)
        element = re.search(r"!tt\.ptr<(\w+)>", pointer_type)
        found.append(
            MemoryOp(
                m.group(1),
                sorted(a.lstrip("%") for a in _pointer_arguments(m.group(2), uses, args, memo)),
                _shape_of(pointer_type),
                element.group(1) if element else "?",
                regions,
                loop,
                _line_of(line, locs),
            )
        )
    return found


def _reductions(ttir: str) -> list[Reduction]:
    locs = _locations(ttir)
    found, pending = [], None
    for line, _, loop in _scopes(ttir):
        code = line.strip()
        m = re.search(r'"tt\.reduce"\(' + _SSA + r"\) <\{axis = (\d+)", code)
        if m:
            pending = [int(m.group(1)), "?", loop, _line_of(line, locs)]
            continue
        if pending is not None:
            op = re.search(r"= (arith\.\w+|math\.\w+)", code)
            if op and pending[1] == "?":
                pending[1] = op.group(1)
            shape = re.search(r"\}\) : \((tensor<[^>]*>)", code)
            if shape:
                found.append(
                    Reduction(
                        _shape_of(shape.group(1)),
                        pending[0],
                        pending[1],
                        pending[2],
                        pending[3] or _line_of(line, locs),
                    )
                )  # the location ends the region
                pending = None
    return found


def _tensor_core_work(lines: list[str], num_warps: int) -> tuple[dict[str, int], int]:
    """Tensor-core instructions among PTX `lines` and their multiply-adds: m·n·k of each, times the warps issuing an
    `mma.sync` or the warpgroups (4 warps) issuing a `wgmma.mma_async`."""
    counts = {name: 0 for name in TENSOR_CORE_PTX}
    macs = 0
    for text in lines:
        instr = text.strip().split(None, 1)[-1] if text.strip().startswith("@") else text.strip()
        for name in TENSOR_CORE_PTX:
            if instr.startswith(name + "."):
                counts[name] += 1
                shape = re.search(r"\.m(\d+)n(\d+)k(\d+)\.", instr)
                issuers = max(1, num_warps // 4) if name == "wgmma.mma_async" else num_warps
                if shape:
                    macs += int(shape.group(1)) * int(shape.group(2)) * int(shape.group(3)) * issuers
    return counts, macs


def _ptx_loops(ptx: str, num_warps: int) -> list[PtxLoop]:
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\$L__\w+):", line))}
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            body = lines[labels[m.group(1)] : i + 1]
            counts, macs = _tensor_core_work(body, num_warps)
            groups = sum(1 for text in body if "wgmma.commit_group" in text)
            loops.append(PtxLoop(m.group(1), counts, groups, macs))
    return loops


# ----------------------------------------------------------------------------------------------------------------
# Compiling an interpreted kernel
# ----------------------------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where compiled kernels are kept: `TWOPRIM_TRITON_CACHE`, else ~/.cache/twoprim/triton (in a graded
    submission's sandbox, its own home)."""
    folder = Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "twoprim" / "triton")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass(frozen=True)
class Specialization:
    """What Triton's launcher compiles for one launch `fn[grid](*args, **kwargs)`: the signature ("*fp16" for a
    float16 tensor, "i32" for an int, "constexpr" for a constexpr parameter and for an int equal to 1), the constexprs'
    values (the 1s included), the attributes of the other arguments ({"a_ptr": [["tt.divisibility", 16]]}: a pointer
    16-byte aligned, an int divisible by 16) and num_warps/num_stages when the launch gave them."""

    signature: dict
    constexprs: dict
    attrs: dict
    options: dict


_LAUNCH_OPTIONS = ("num_warps", "num_stages")


def specialize(fn: Any, args: tuple, kwargs: dict, target: str = "sm_90") -> Specialization:
    """The `Specialization` Triton's own launcher (`JITFunction.run`) gives the launch `fn[grid](*args, **kwargs)`
    on a GPU of `target`: its binder (`create_function_from_signature`, which calls the backend's `specialize_impl`
    on every argument: dtype, 16-byte alignment of a tensor's data pointer, an int's divisibility by 16, an int equal
    to 1) and its `_pack_args` (constexprs and `tt.divisibility` attributes), run on these arguments without a GPU.
    The tensors' values do not matter, their dtypes and addresses do."""
    py = getattr(fn, "fn", fn)
    jit_fn, backend, binder = _binder(py, target)
    names = set(jit_fn.arg_names)
    call = {k: v for k, v in kwargs.items() if k in names or k in _LAUNCH_OPTIONS}
    bound, specialization, options = binder(*args, **call)
    # enable_fp_fusion as _build compiles (and so Triton does not warn that its default will change)
    _, signature, constexprs, attrs = jit_fn._pack_args(
        backend, {**call, "enable_fp_fusion": True}, bound, specialization, options
    )
    arg = lambda path: ".".join([jit_fn.arg_names[path[0]], *map(str, path[1:])])  # noqa: E731
    return Specialization(
        dict(signature),
        {arg(path): value for path, value in constexprs.items()},
        {arg(path): [list(a) for a in found] for path, found in attrs.items() if found},
        {k: int(call[k]) for k in _LAUNCH_OPTIONS if isinstance(call.get(k), int)},
    )


_BINDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Python function -> {target: binder}


def _binder(py: Any, target: str):
    """(JITFunction, backend, binder) for `py` on `target`, made once: Triton makes the binder per kernel and device."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    per_fn = _BINDERS.setdefault(py, {})
    if target not in per_fn:
        jit_fn = py if isinstance(py, JITFunction) else JITFunction(py)
        backend = make_backend(GPUTarget("cuda", TARGETS[target], 32))
        per_fn[target] = (jit_fn, backend, create_function_from_signature(jit_fn.signature, jit_fn.params, backend))
    return per_fn[target]


def _is_constexpr(annotation: Any) -> bool:
    import triton.language as tl

    return annotation is tl.constexpr or (isinstance(annotation, str) and annotation.split(".")[-1] == "constexpr")


def compile_launch(
    kernel: Any, *args, target: str = "sm_90", num_warps: int = 4, num_stages: int = 3, **constexprs
) -> Compiled:
    """`kernel` compiled for `target` as the launch `kernel[grid](*args, **constexprs)` would be on that GPU: with
    the specialisation Triton's launcher gives these arguments (`specialize`: dtypes, alignment and divisibility by
    16, ints equal to 1). Nothing runs; the tensors' values do not matter, their dtypes and addresses do."""
    spec = specialize(kernel, args, constexprs, target)
    return compile_kernel(
        kernel, spec.signature, spec.constexprs, target, num_warps=num_warps, num_stages=num_stages, attrs=spec.attrs
    )


_MEMORY: dict[str, Compiled] = {}
_FORMAT = 2  # of the files kept on disk: 2 since a compile carries the launch's specialisation (attrs, ones)


def compile_kernel(
    fn: Any,
    signature: dict,
    constexprs: dict,
    target: str = "sm_90",
    *,
    num_warps: int = 4,
    num_stages: int = 3,
    attrs: dict | None = None,
) -> Compiled:
    """Compile kernel `fn` (a `@triton.jit` kernel, interpreted or not, or its Python function) for `target`
    ("sm_90", "sm_80"), with the arguments' `attrs` ({"a_ptr": [["tt.divisibility", 16]]}, `specialize`; none: no
    argument known to be aligned); never raises for the kernel's own faults: they come back in `Compiled.error`."""
    import triton

    py = getattr(fn, "fn", fn)
    attrs = {k: [list(a) for a in v] for k, v in (attrs or {}).items() if v}
    quick = _quick_key(py, signature, constexprs, target, num_warps, num_stages, attrs)
    if quick is not None and quick in _BY_CODE:
        return _BY_CODE[quick]
    with _compiling() as twins:
        jit_fn = _twin(py, twins)
        key = hashlib.sha256(
            json.dumps(
                [
                    _FORMAT,
                    triton.__version__,
                    target,
                    jit_fn.cache_key,
                    signature,
                    {k: repr(v) for k, v in constexprs.items()},
                    num_warps,
                    num_stages,
                    attrs,
                ],
                sort_keys=True,
            ).encode()
        ).hexdigest()[:32]
        if key in _MEMORY:
            return _MEMORY[key]
        path = cache_dir() / f"{py.__name__[:60]}-{target}-{key}.json"
        found = _read(path)
        if found is None:
            found = _build(jit_fn, py, signature, constexprs, target, num_warps, num_stages, attrs)
            if found.cached is None:  # an error of this machine, not the kernel's: tried again next time
                found.cached = False
                return found
            _write(path, found)
        else:
            found.cached = True
    _MEMORY[key] = found
    if quick is not None:
        _BY_CODE[quick] = found
    return found


_BY_CODE: dict = {}


def _quick_key(
    py, signature: dict, constexprs: dict, target: str, num_warps: int, num_stages: int, attrs: dict | None = None
):
    """An in-process key that needs no compiler: the code objects of the kernel and of the jit functions its globals
    name (a redefined helper is new code), and the rest of the launch. None when it cannot be formed."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    code = getattr(py, "__code__", None)
    if code is None:
        return None
    helpers = []
    for name in code.co_names:
        value = getattr(py, "__globals__", {}).get(name)
        if isinstance(value, (InterpretedFunction, JITFunction)):
            helpers.append((name, value.fn.__code__))
    try:
        return (
            code,
            tuple(helpers),
            tuple(signature.items()),
            tuple((k, repr(v)) for k, v in constexprs.items()),
            target,
            num_warps,
            num_stages,
            json.dumps(attrs or {}, sort_keys=True),
        )
    except TypeError:
        return None


def _paths(jit_fn, by_name: dict) -> dict:
    """{"a_ptr": ...} → {(0,): ...}: the argument paths `ASTSource` keys attributes by."""
    return {
        tuple([jit_fn.arg_names.index(k.split(".")[0]), *map(int, k.split(".")[1:])]): [list(a) for a in v]
        for k, v in by_name.items()
    }


def _read(path: Path) -> Compiled | None:
    try:
        return Compiled(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write(path: Path, found: Compiled) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(asdict(found)))
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)


def _build(jit_fn, py, signature, constexprs, target, num_warps, num_stages, attrs) -> Compiled:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    declared = {name for name, param in inspect.signature(py).parameters.items() if _is_constexpr(param.annotation)}
    ones = [k for k, v in signature.items() if v == "constexpr" and k not in declared and constexprs.get(k) == 1]
    result = Compiled(
        py.__name__, target, dict(signature), dict(constexprs), num_warps, num_stages, attrs=attrs, ones=ones
    )
    start = time.perf_counter()
    said: list[str] = []  # (empty when the block fails before it starts keeping stderr)
    try:
        with knobs.cache.scope(), _stderr_kept() as said:
            knobs.cache.dir = str(cache_dir() / "triton")
            compiled = triton.compile(
                ASTSource(jit_fn, signature, constexprs, _paths(jit_fn, attrs)),
                target=GPUTarget("cuda", TARGETS[target], 32),
                options={"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": True},
            )
    except Exception as err:  # noqa: BLE001 - the compiler's verdict on the learner's kernel, reported to them
        result.error, result.error_line = _error_text(err, py)
        diagnostics = _mlir_diagnostics(said[0] if said else "", py)
        if diagnostics:  # a pass of the compiler failed: MLIR said where, on the C++ side's stderr
            result.error += f" ({diagnostics[0]})"
            result.error_line = result.error_line or diagnostics[1]
        result.seconds = time.perf_counter() - start
        result.cached = None  # not kept on disk unless the compiler itself refused the kernel (`_keep`)
        if _keep(err):
            result.cached = False
        return result
    result.ttir, result.ttgir, result.ptx = compiled.asm["ttir"], compiled.asm["ttgir"], compiled.asm["ptx"]
    result.shared = int(compiled.metadata.shared)
    usage = _resource_usage(compiled.asm["cubin"])
    result.registers = usage.get("REG", 0)
    result.spilled = usage.get("STACK", 0) + usage.get("LOCAL", 0)
    result.shared += usage.get("SHARED", 0)
    result.seconds = time.perf_counter() - start
    return result


@contextlib.contextmanager
def _stderr_kept():
    """What the compiler's C++ side writes to file descriptor 2 while the block runs (MLIR's diagnostics and a
    pass reproducer when a pass fails), kept out of the notebook's terminal: `said[0]` after the block."""
    said: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            saved = os.dup(2)
        except OSError:
            yield said
            return
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said.append(sink.read(200_000).decode(errors="replace"))


def _mlir_diagnostics(text: str, py) -> tuple[str, int | None] | None:
    """The first MLIR error and the learner's line it was called from, out of what the compiler wrote to stderr."""
    error = re.search(r"^[^\n]*?:\d+:\d+: error: (.*)$", text, re.MULTILINE)
    if not error:
        return None
    filename = inspect.getsourcefile(py) or ""
    line = None
    for m in re.finditer(r"^(.*?):(\d+):\d+: (?:error|note)", text, re.MULTILINE):
        if m.group(1) == filename or (filename and m.group(1).endswith(filename)):
            line = int(m.group(2))
            break
    return f"the compiler's pass failed: {error.group(1).strip()}", line


def _keep(err: BaseException) -> bool:
    from triton.compiler.errors import CompilationError

    return isinstance(err, CompilationError) or type(err).__name__ == "PTXASError"


def _error_text(err: BaseException, py) -> tuple[str, int | None]:
    """The compiler's own message, and the line of the learner's file or cell it points at."""
    from triton.compiler.errors import CompilationError

    if isinstance(err, CompilationError):
        message = str(err.error_message or "").strip() or str(err).strip().splitlines()[-1]
        line = None
        node = getattr(err, "node", None)
        if node is not None and getattr(node, "lineno", None):
            try:
                lines, first = inspect.getsourcelines(py)
                at_def = next(i for i, text in enumerate(lines) if text.lstrip().startswith("def "))
                line = first + at_def + node.lineno - 1
            except (OSError, TypeError, StopIteration):
                line = None
        return message, line
    text = f"{type(err).__name__}: {err}".strip()
    return (text if len(text) < 1500 else text[:1500] + " ..."), None


def _resource_usage(cubin: bytes) -> dict[str, int]:
    """REG, STACK, SHARED, LOCAL of the kernel, from `cuobjdump -res-usage` (NVIDIA's tool in the Triton wheel)."""
    from triton import knobs

    try:
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            done = subprocess.run(
                [knobs.nvidia.cuobjdump.path, "-res-usage", f.name], capture_output=True, text=True, timeout=60
            )
    except (OSError, RuntimeError, subprocess.SubprocessError):  # no cuobjdump: the counts stay 0, said as such
        return {}
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", done.stdout)}


# The interpreter's world and the compiler's: which objects of triton.language it patches (`_patch_lang`)
def _patched_objects() -> list:
    import triton.language as tl

    return [tl, tl.core, tl.math, tl.core.tensor, tl.core.condition, tl.core.dtype, tl.core.tensor_descriptor_base]


def _snapshot() -> list[dict]:
    return [dict(vars(obj)) for obj in _patched_objects()]


_PRISTINE: list[dict] | None = None


def remember_pristine() -> None:
    """Record triton.language as Triton made it, before the interpreter runs a kernel (`triton_tools.setup`)."""
    global _PRISTINE
    if _PRISTINE is None:
        _PRISTINE = _snapshot()


def _from_interpreter(value: Any) -> bool:
    return getattr(value, "__module__", None) == "triton.runtime.interpreter"


@contextlib.contextmanager
def _compiling():
    """For the length of a compile: the interpreter off, triton.language as Triton made it, Triton's library
    functions as `JITFunction`s. Everything is put back after."""
    from triton import knobs
    from triton.runtime.interpreter import InterpretedFunction

    remember_pristine()
    import triton.compiler.code_generator
    import triton.experimental.gluon.language  # noqa: F401 - imported as it is, before the interpreter goes off

    twins: dict = dict(_LIBRARY_TWINS)  # Triton's own library functions, made JITFunctions once per process
    changes: list[tuple[Any, str, Any]] = []

    def put(obj, name, value):
        changes.append((obj, name, obj.__dict__.get(name, _MISSING)))
        setattr(obj, name, value)

    interpret = knobs.runtime.interpret
    knobs.runtime.interpret = False
    try:
        for obj, pristine in zip(_patched_objects(), _PRISTINE or [], strict=False):
            for name, value in list(vars(obj).items()):
                original = pristine.get(name, _MISSING)
                if _from_interpreter(value):
                    if original is _MISSING or _from_interpreter(original):
                        original = (
                            (value.__defaults__ or (_MISSING,))[0]
                            if isinstance(value, types.FunctionType)
                            else _MISSING
                        )
                    if original is not _MISSING and not _from_interpreter(original):
                        put(obj, name, original)
            for name, value in list(vars(obj).items()):
                if isinstance(value, InterpretedFunction):
                    put(obj, name, _library_twin(value.fn, twins))
                elif isinstance(value, types.FunctionType) and value.__name__ == "wrapper" and value.__closure__:
                    inner = value.__closure__[0].cell_contents  # a tensor method forwarding to a library function
                    if isinstance(inner, InterpretedFunction):
                        put(obj, name, _library_twin(inner.fn, twins))
        yield twins
    finally:
        knobs.runtime.interpret = interpret
        for obj, name, value in reversed(changes):
            if value is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


_MISSING = object()
_LIBRARY_TWINS: dict = {}


def _library_twin(py, twins: dict):
    """The JITFunction of one of Triton's own library functions, kept for the process (Triton's code does not
    change under it)."""
    if py not in _LIBRARY_TWINS:
        _LIBRARY_TWINS[py] = _twin(py, twins)
        _LIBRARY_TWINS.update({k: v for k, v in twins.items() if getattr(k, "__module__", "").startswith("triton.")})
    return _LIBRARY_TWINS[py]


def _twin(py: Any, twins: dict):
    """A `JITFunction` of Python function `py` whose globals name `JITFunction`s where the original's name
    interpreted ones (the learner's helpers): a copy, so nothing of the learner's namespace changes."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if isinstance(py, JITFunction):
        return py
    if isinstance(py, InterpretedFunction):
        py = py.fn
    if py in twins:
        return twins[py]
    scope = dict(py.__globals__)
    clone = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__)
    clone.__kwdefaults__, clone.__qualname__, clone.__module__ = py.__kwdefaults__, py.__qualname__, py.__module__
    clone.__doc__, clone.__annotations__ = py.__doc__, py.__annotations__
    twins[py] = jit_fn = JITFunction(clone)
    for name, value in list(scope.items()):
        if isinstance(value, InterpretedFunction):
            scope[name] = _twin(value.fn, twins)
    return jit_fn
