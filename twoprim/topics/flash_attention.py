"""FlashAttention in Triton (lesson 11): each dtype's tolerance against `scaled_dot_product_attention`, what a fused
kernel and the unfused path move through memory, which key blocks a causal query block visits, and what a compiled
attention kernel holds in its loop over key blocks (read from `triton_compile`'s TTIR and PTX readers).

- `reference`, `tolerance`: SDPA in float64 as the oracle, and how far a kernel in float32, float16 or bfloat16 may
  be from it (one rounding of the probabilities before the second product, one of the output);
- `traffic`, `flops`: bytes and FLOPs of attention, unfused (the scores written and read back) and fused, for the
  roofline of lesson 02;
- `max_growths`: how often each query's running max grows from one block of keys to the next;
- `causal_tiles`: the tiles of the S×S scores a causal kernel computes whole, masks (the diagonal) and skips;
- `loop_evidence`: the loop over key blocks of a compiled kernel: its `tt.dot`s, the values it carries from one
  block to the next, the tensor-core work of one pass through it in the PTX, and every global load and store with
  the kernel argument it addresses.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

__all__ = ["reference", "tolerance", "traffic", "flops", "max_growths", "causal_tiles", "LoopEvidence", "loop_evidence"]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q·kᵀ/√D + mask)·v by `F.scaled_dot_product_attention` in float64, returned in q's dtype."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal).to(q.dtype)


def tolerance(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[float, float]:
    """(atol, rtol) of an attention kernel's output in q's dtype against SDPA in float64: |out − ref| ≤ atol +
    rtol·|ref|.

    Each output is a weighted mean of rows of v, so errors are measured in units of max|v|. In float16 or bfloat16
    the weights are rounded once to the input type for the second `tl.dot` (relative error ≤ eps each) and the output
    once more: 2·eps (the interpreter truncates to bfloat16 instead of rounding: up to eps each). In float32 a few
    ulps: 16·eps. And every score is a float32 sum of D products: an error of a few float32 ulps of
    Σ|q_d·k_d|/√D, which exp turns into the same relative error of a weight (8·eps32 times the largest such sum:
    nothing for ordinary scores, 1e-4 for scores of ±300)."""
    eps = torch.finfo(q.dtype).eps
    scale = float(v.detach().abs().max()) if v.numel() else 1.0
    bound = 0.0
    if q.numel() and k.numel():
        bound = float((q.detach().double().abs() @ k.detach().double().abs().transpose(-1, -2)).max())
        bound /= math.sqrt(q.shape[-1])
    factor = 16 if q.dtype == torch.float32 else 2
    relative = factor * eps + 8 * torch.finfo(torch.float32).eps * bound
    return relative * max(scale, 1.0), relative


# ----------------------------------------------------------------------------------------------------------------
# What it saves, counted
# ----------------------------------------------------------------------------------------------------------------


def flops(B: int, H: int, S: int, D: int, causal: bool = False) -> int:
    """FLOPs of attention's two GEMMs, q·kᵀ and p·v: 2·D per score each. Causal: only the S(S+1)/2 visible scores."""
    scores = S * (S + 1) // 2 if causal else S * S
    return 4 * B * H * scores * D


def traffic(
    B: int, H: int, S: int, D: int, itemsize: int = 2, *, block_m: int = 128, causal: bool = False
) -> dict[str, int]:
    """Bytes attention moves between the GPU's memory and its chip, three ways:

    - "unfused": three kernels at their best: q·kᵀ writes the (B, H, S, S) scores, one softmax reads them and writes
      the probabilities, p·v reads those; plus q, k, v read and the output written once each: 4·B·H·S·D + 4·B·H·S²
      numbers (a causal mask changes nothing: the masked scores are written too);
    - "fused, K and V once per query block": a FlashAttention kernel whose programs share nothing: each reads its
      block of q, streams all of K and V (causal: up to its diagonal) and writes its block of O;
    - "fused, each tensor once": the same kernel when the blocks of K and V a program streams are still in the L2
      cache for the next program (the compulsory traffic: q, k, v read once, O written once).
    """
    n = -(-S // block_m)  # query blocks
    once = 4 * B * H * S * D
    # causal: query block i streams the keys up to its own last row
    streamed = sum(min((i + 1) * block_m, S) for i in range(n)) if causal else n * S
    return {
        "unfused": itemsize * (once + 4 * B * H * S * S),
        "fused, K and V once per query block": itemsize * (2 * B * H * S * D + 2 * B * H * streamed * D),
        "fused, each tensor once": itemsize * once,
    }


def max_growths(q: torch.Tensor, k: torch.Tensor, block_n: int, causal: bool = False) -> torch.Tensor:
    """(..., S): for each query, how many blocks of `block_n` keys after the first raised its running max of the
    scores q·kᵀ/√D (the moments an online softmax must rescale what it summed so far)."""
    S, D = k.shape[-2], q.shape[-1]
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(D)
    if causal:
        s = s.masked_fill(torch.ones(q.shape[-2], S, dtype=torch.bool).triu(1), -math.inf)
    m = torch.full(s.shape[:-1], -math.inf, dtype=torch.float64)
    grew = torch.zeros(s.shape[:-1], dtype=torch.int64)
    for j0 in range(0, S, block_n):
        block = s[..., j0 : j0 + block_n].amax(-1)
        grew += ((block > m) & (m > -math.inf)).long()
        m = torch.maximum(m, block)
    return grew


def causal_tiles(S: int, block_m: int, block_n: int) -> dict[str, int]:
    """The (block_m, block_n) tiles of the S×S scores, as a causal kernel treats them: "whole" (every key visible to
    every query of the tile: no mask needed), "diagonal" (crossed by the diagonal: masked), "skipped" (every key
    after every query: never computed)."""
    whole = diagonal = skipped = 0
    for i0 in range(0, S, block_m):
        last_row = min(i0 + block_m, S) - 1
        for j0 in range(0, S, block_n):
            last_key = min(j0 + block_n, S) - 1
            if j0 > last_row:
                skipped += 1
            elif last_key <= i0:
                whole += 1
            else:
                diagonal += 1
    return {"whole": whole, "diagonal": diagonal, "skipped": skipped}


# ----------------------------------------------------------------------------------------------------------------
# The compiled kernel's loop over key blocks
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class LoopEvidence:
    """What one compiled attention kernel (`triton_compile.Compiled`) does in its loop over key blocks: the scf.for
    of its TTIR that holds the most `tt.dot`s, those dots, the types that loop carries from one block to the next,
    the tensor-core multiply-adds of one pass through its PTX loop against what its dots need, and every global
    store and load (with the kernel argument each addresses)."""

    target: str
    loop: int | None  # which scf.for (None: no tt.dot inside a loop)
    dots: list = field(default_factory=list)  # triton_compile.Dot, in the loop
    other_dots: list = field(default_factory=list)  # tt.dots outside that loop
    carried: list[str] = field(default_factory=list)  # its loop-carried types
    reductions: list = field(default_factory=list)  # triton_compile.Reduction, in the loop
    stores: list = field(default_factory=list)  # triton_compile.MemoryOp
    loads: list = field(default_factory=list)
    macs: int = 0  # tensor-core multiply-adds in one pass through the busiest PTX loop
    wgmma_groups: int = 0  # and the wgmma groups it commits (sm_90 with 64-row tiles)
    counts: dict = field(default_factory=dict)  # its tensor-core instructions
    unrolled: bool = False  # no PTX loop does tensor-core work: the counts are the whole kernel's

    @property
    def needed(self) -> int:
        """Multiply-adds the loop's two largest dots need per pass: q·kᵀ and p·v, BLOCK_M·BLOCK_N·D each."""
        return sum(sorted((d.macs for d in self.dots), reverse=True)[:2])

    def state(self) -> dict[str, list[str]]:
        """The loop's floating-point state: {"rows": (BLOCK_M,) values (m, l), "tiles": 2-D values (the
        accumulator)}, as tensor types."""
        tensors = [
            t
            for t in self.carried
            if t.startswith("tensor<")
            and "ptr" not in t
            and not t.endswith("i32>")
            and not t.endswith("i1>")
            and not t.endswith("i64>")
        ]
        rows = [t for t in tensors if re.fullmatch(r"tensor<\d+x[a-z]+\d*>", t)]
        return {"rows": rows, "tiles": [t for t in tensors if t not in rows]}

    def round_trips(self) -> list[tuple]:
        """(store, load) pairs on the same kernel argument: data the kernel writes to global memory and reads back."""
        return [
            (store, load) for store in self.stores for load in self.loads if set(store.arguments) & set(load.arguments)
        ]

    def lines(self) -> list[str]:
        """The evidence in words, one line each: dots, state, stores, tensor-core work."""
        out = []
        if self.loop is None:
            out.append(f"TTIR: no tt.dot inside a loop ({len(self.other_dots)} outside any)")
        else:
            dots = ", ".join(
                f"{d.a}·{d.b} -> {d.acc} ({d.shape.replace('x', '×')}, sums over {d.k}"
                + (f", line {d.line}" if d.line else "")
                + ")"
                for d in self.dots
            )
            out.append(f"TTIR: {len(self.dots)} tt.dot inside scf.for #{self.loop}: {dots}")
            state = self.state()
            out.append(
                f"      the loop carries {', '.join(state['rows']) or 'no (BLOCK_M,) value'} (m, l) and "
                f"{', '.join(state['tiles']) or 'no tile'} (the accumulator) from one key block to the next"
            )
        for s in self.stores:
            where = "inside the loop" if s.in_loop else "after the loop"
            out.append(
                f"      tt.store of a {'×'.join(map(str, s.shape)) or 'scalar'} {s.element} tile to "
                f"{', '.join(s.arguments) or 'a computed address'} {where}" + (f" (line {s.line})" if s.line else "")
            )
        tc = ", ".join(f"{n} {name}" for name, n in self.counts.items() if n) or "no tensor-core instruction"
        groups = f" in {self.wgmma_groups} wgmma groups" if self.wgmma_groups else ""
        where = (
            "the whole kernel (this launch's loop runs once: the compiler left no loop)"
            if self.unrolled
            else "one pass through the loop"
        )
        out.append(
            f"PTX:  {where}: {tc}{groups}, {self.macs:,} multiply-adds on the tensor cores (its dots need "
            f"{self.needed:,})"
        )
        return out


def loop_evidence(compiled) -> LoopEvidence:
    """The loop over key blocks of `compiled` (a `triton_compile.Compiled` without error): see `LoopEvidence`."""
    dots = compiled.dots()
    looped = [d.loop for d in dots if d.loop is not None]
    loop = max(set(looped), key=looped.count) if looped else None
    carried = compiled.loops_carry()
    ops = compiled.memory_ops()
    busiest = max(compiled.ptx_loops(), key=lambda p: p.macs, default=None)
    evidence = LoopEvidence(
        target=compiled.target,
        loop=loop,
        dots=[d for d in dots if loop is not None and d.loop == loop],
        other_dots=[d for d in dots if loop is None or d.loop != loop],
        carried=carried[loop] if loop is not None and loop < len(carried) else [],
        reductions=[r for r in compiled.reductions() if loop is not None and r.loop == loop],
        stores=[o for o in ops if o.kind == "store"],
        loads=[o for o in ops if o.kind == "load"],
    )
    if busiest is not None and busiest.macs:
        evidence.macs, evidence.wgmma_groups, evidence.counts = busiest.macs, busiest.wgmma_groups, dict(busiest.counts)
    else:  # a launch whose loop runs once (S compiled in as 1): no PTX loop is left, the whole kernel is one pass
        evidence.unrolled = True
        evidence.macs, evidence.counts = compiled.tensor_core_macs(), compiled.tensor_core()
        evidence.wgmma_groups = compiled.ptx.count("wgmma.commit_group")
    return evidence
