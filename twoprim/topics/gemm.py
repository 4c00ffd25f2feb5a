"""GEMM on the learner's machine: reference loop kernels, loop orders (Python and compiled C), the machine's peak
estimated from what the platform reports, memory bandwidth measured with a large copy, and the roofline.

Lesson 02 imports this module; every number it prints is measured here or estimated from `/proc/cpuinfo`, and an
estimate always says which factor came from where. `matmul_spec` and the Python loop orders are ex02_gemm's
`matmul_loops` itself, so they count their calls (`uses`): a check can tell when an answer calls them.

Why this module is long: lesson 02's measured speed ladder needs its loop kernels, the compiled C loop orders, the
peak estimate and the roofline together; each is one section.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

from twoprim.config import ROOT
from twoprim.core import timing
from twoprim.core.cases import dtype_name, matrix
from twoprim.core.checks import Case, counted
from twoprim.core.timing import warn_if_busy
from twoprim.topics import plots

__all__ = [
    "matmul_cases",
    "matmul_spec",
    "ORDERS",
    "INNER_LOOP_WALKS",
    "inner_walk",
    "loop_source",
    "python_loop_order",
    "compiled_loop_orders",
    "order_bars",
    "cpu_flags",
    "PeakEstimate",
    "peak_estimate",
    "warn_if_busy",
    "bandwidth",
    "gemm_intensity",
    "gemv_intensity",
    "elementwise_intensity",
    "ladder_plot",
    "roofline",
    "H200_PROBE",
    "h200_probe",
    "uses",
]

H200_PROBE = ROOT / "data" / "h200_gemm_probe_2026-11-30.json"


_USES: Counter = Counter()


def uses() -> Counter:
    """How many times `matmul_spec` and the Python loop orders have been called (a copy)."""
    return Counter(_USES)


# ----------------------------------------------------------------------------------------------------------------
# The spec: three plain loops
# ----------------------------------------------------------------------------------------------------------------


def matmul_spec(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """C[i, j] = Σₖ A[i, k]·B[k, j], three Python loops over Python floats; returns A's dtype."""
    (M, K), N = A.shape, B.shape[1]
    a, b = A.tolist(), B.tolist()  # (M, K) and (K, N) as nested lists of Python floats
    c = [[0.0] * N for _ in range(M)]
    for i in range(M):
        for j in range(N):
            total = 0.0
            for k in range(K):
                total += a[i][k] * b[k][j]
            c[i][j] = total
    return torch.tensor(c, dtype=A.dtype).reshape(M, N)


matmul_spec = counted(matmul_spec, _USES)


# ----------------------------------------------------------------------------------------------------------------
# Loop orders: the same multiply-add C[i][j] += A[i][k]·B[k][j], its three loops nested in any of 3! orders
# ----------------------------------------------------------------------------------------------------------------

ORDERS = tuple("".join(p) for p in itertools.permutations("ijk"))  # ('ijk', 'ikj', 'jik', 'jki', 'kij', 'kji')
_BOUND = {"i": "M", "j": "N", "k": "K"}


def _check_order(order: str) -> None:
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)} (outermost loop first), got {order!r}")


def loop_source(order: str, language: str = "python") -> str:
    """The source of the triple loop in `order` (outermost first), in "python" (nested lists) or "c" (row-major)."""
    _check_order(order)
    if language == "python":
        lines = [f"def matmul_{order}(a, b, c, M, N, K):"]
        for depth, v in enumerate(order, start=1):
            lines.append("    " * depth + f"for {v} in range({_BOUND[v]}):")
        lines.append("    " * 4 + "c[i][j] += a[i][k] * b[k][j]")
        return "\n".join(lines) + "\n"
    if language == "c":
        lines = [
            f"void matmul_{order}(int M, int N, int K, const float *restrict A, const float *restrict B, "
            f"float *restrict C) {{"
        ]
        for depth, v in enumerate(order, start=1):
            lines.append("    " * depth + f"for (long {v} = 0; {v} < {_BOUND[v]}; {v}++)")
        lines.append("    " * 4 + "C[i * N + j] += A[i * K + k] * B[k * N + j];  /* row-major */")
        return "\n".join(lines) + "\n}\n"
    raise ValueError(f"language must be 'python' or 'c', got {language!r}")


# What the innermost loop walks in row-major storage (row r of an M×K matrix starts at r·K), by its index.
INNER_LOOP_WALKS = {
    "j": "along rows of B and C (stride 1)",
    "k": "along a row of A (stride 1) and down a column of B (stride N)",
    "i": "down columns of A and C (strides K and N)",
}


def inner_walk(order: str) -> str:
    """What the innermost loop of `order` reads and writes, in memory order."""
    _check_order(order)
    return INNER_LOOP_WALKS[order[-1]]


_PYTHON_ORDERS: dict[str, Callable] = {}


def python_loop_order(order: str) -> Callable[[list, list], list]:
    """f(a, b) -> c: the triple loop of `loop_source(order)` on nested lists (a: M×K, b: K×N), c = a·b."""
    if order not in _PYTHON_ORDERS:
        namespace: dict = {}
        exec(compile(loop_source(order), f"<matmul_{order}>", "exec"), namespace)  # noqa: S102 - our template
        kernel = namespace[f"matmul_{order}"]

        def run(a: list, b: list, kernel=kernel) -> list:
            M, K, N = len(a), len(b), len(b[0])
            c = [[0.0] * N for _ in range(M)]
            kernel(a, b, c, M, N, K)
            return c

        run.__name__ = f"matmul_{order}"
        _PYTHON_ORDERS[order] = counted(run, _USES)
    return _PYTHON_ORDERS[order]


@dataclass
class CompiledOrders:
    """The six loop orders compiled from C, or None with the reason (`message`) when no compiler worked."""

    functions: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] | None
    message: str
    source: str = ""


_COMPILED: dict[tuple, CompiledOrders] = {}


def compiled_loop_orders(flags: Sequence[str] = ("-O2",)) -> CompiledOrders:
    """Compile `loop_source(order, "c")` for every order with the system's C compiler (`$CC` or `cc`).

    Each function takes float32 NumPy arrays A (M, K) and B (K, N) and returns C = A·B (M, N), computed by the
    compiled loops in that order, single-threaded. Without a working compiler, `functions` is None and `message`
    says why. The result is cached per set of flags.
    """
    key = tuple(flags)
    if key in _COMPILED:
        return _COMPILED[key]
    source = "\n".join(loop_source(o, "c") for o in ORDERS)
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        result = CompiledOrders(
            None,
            "no C compiler found (`cc` is not on PATH); install one (Xcode command line "
            "tools on macOS, build-essential on Debian/Ubuntu) to run this measurement.",
            source,
        )
        _COMPILED[key] = result
        return result
    build = Path(tempfile.mkdtemp(prefix="twoprim-loops-"))
    (build / "loops.c").write_text(source)
    lib_path = build / "loops.so"
    cmd = [compiler, *flags, "-std=c99", "-shared", "-fPIC", "-o", str(lib_path), str(build / "loops.c")]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no message")
        lib = ctypes.CDLL(str(lib_path))
    except Exception as err:  # noqa: BLE001 - any failure means: no compiled loops on this machine
        result = CompiledOrders(None, f"the C compiler `{compiler}` did not produce a library ({err}).", source)
        _COMPILED[key] = result
        return result
    finally:
        shutil.rmtree(build, ignore_errors=True)  # the loaded library stays mapped; nothing is left in /tmp

    functions = {}
    for order in ORDERS:
        kernel = getattr(lib, f"matmul_{order}")
        kernel.restype = None
        kernel.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3

        def run(A: np.ndarray, B: np.ndarray, kernel=kernel) -> np.ndarray:
            A = np.ascontiguousarray(A, dtype=np.float32)
            B = np.ascontiguousarray(B, dtype=np.float32)
            (M, K), N = A.shape, B.shape[1]
            if B.shape[0] != K:
                raise ValueError(f"A has shape {A.shape} and B has shape {B.shape}: A's columns must equal B's rows")
            C = np.zeros((M, N), dtype=np.float32)
            kernel(M, N, K, A.ctypes.data, B.ctypes.data, C.ctypes.data)
            return C

        run.__name__ = f"matmul_{order}"
        functions[order] = run
    result = CompiledOrders(functions, f"compiled with `{Path(compiler).name} {' '.join(flags)}`", source)
    _COMPILED[key] = result
    return result


# ----------------------------------------------------------------------------------------------------------------
# Peak: cores × SIMD lanes × 2 FLOPs per FMA × FMA units × clock, from what the platform reports
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeakEstimate:
    """An estimate of the machine's peak FLOP/s for one dtype, with every factor and where it came from.

    `gflops` is None when the platform does not report the factors (then `reason` says why).
    """

    dtype: str
    gflops: float | None
    cores: int | None = None
    simd_bits: int | None = None
    fma_units: int | None = None
    ghz: float | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def lanes(self) -> int | None:
        """Numbers of this dtype in one SIMD register."""
        if self.simd_bits is None:
            return None
        return self.simd_bits // (64 if self.dtype == "float64" else 32)

    def explain(self) -> str:
        """The product written out, one factor per line with its source; or why there is no estimate."""
        if self.gflops is None:
            return f"peak ({self.dtype}): cannot tell on this machine: {self.reason}"
        rows = [
            ("cores", f"{self.cores}", self.sources.get("cores", "")),
            (
                "SIMD lanes",
                f"{self.lanes} ({self.simd_bits}-bit registers / {self.dtype})",
                self.sources.get("simd", ""),
            ),
            ("FLOPs per FMA", "2 (one multiply + one add)", "definition"),
            ("FMA units per core", f"{self.fma_units}", self.sources.get("fma", "")),
            ("clock", f"{self.ghz:.2f} GHz", self.sources.get("clock", "")),
        ]
        lines = [f"estimated peak ({self.dtype}) = {self.gflops:,.0f} GFLOP/s — an ESTIMATE, the product of:"]
        lines += [f"  {name:>18}: {value:<32} ({source})" for name, value, source in rows]
        return "\n".join(lines)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _physical_cores(cpuinfo: str) -> int | None:
    pairs, processors = set(), 0
    phys = None
    for block in cpuinfo.strip().split("\n\n"):
        fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in block.splitlines()))
        if "processor" in fields:
            processors += 1
        if "core id" in fields:
            phys = fields.get("physical id", "0")
            pairs.add((phys, fields["core id"]))
    return len(pairs) or processors or None


def _field(cpuinfo: str, name: str) -> str | None:
    match = re.search(rf"^{re.escape(name)}\s*:\s*(.*)$", cpuinfo, flags=re.MULTILINE)
    return match.group(1).strip() if match else None


_FROM_THIS_MACHINE: Any = object()  # a default that means "read it from this machine"


def _simd_width(cpuinfo: str, flags: set[str]) -> tuple[int, str] | None:
    """The SIMD width in bits and the flag it was read from, or None when /proc/cpuinfo lists no flag the course
    knows."""
    vendor, family = _field(cpuinfo, "vendor_id"), _field(cpuinfo, "cpu family")
    if "avx512f" in flags:
        if vendor == "AuthenticAMD" and family == "25":  # Zen 4 runs 512-bit FMAs as two 256-bit halves
            return 256, "flag avx512f, but AMD Zen 4 (family 25) executes it as 2 × 256 bits"
        return 512, "flag avx512f"
    if "avx2" in flags or "avx" in flags:
        return 256, "flag avx2" if "avx2" in flags else "flag avx"
    if "asimd" in flags:
        return 128, "flag asimd (Arm NEON)"
    if "sse2" in flags:
        return 128, "flag sse2"
    return None


def _usable_cores(cpuinfo: str, usable_cpus: int | None) -> tuple[int | None, str]:
    """The cores this process may use (its CPUs when fewer than the physical cores), and where that was read."""
    cores = _physical_cores(cpuinfo)
    if usable_cpus is _FROM_THIS_MACHINE:
        usable_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if cores and usable_cpus and usable_cpus < cores:
        return usable_cpus, f"{usable_cpus} CPUs this process may use, of {cores} physical cores"
    return cores, "physical cores (distinct core ids) in /proc/cpuinfo"


def peak_estimate(
    dtype: torch.dtype = torch.float32,
    *,
    system: str | None = None,
    cpuinfo: str | None = None,
    max_khz: float | None = _FROM_THIS_MACHINE,
    usable_cpus: int | None = _FROM_THIS_MACHINE,
) -> PeakEstimate:
    """Estimate peak GFLOP/s = cores × SIMD lanes × 2 × FMA units × GHz from what the platform reports.

    Linux x86: SIMD width from the `avx512f` / `avx2` / `avx` flags, FMA from the `fma` flag, the clock from
    cpufreq's maximum when the kernel exposes it, else the `cpu MHz` line (the clock when read), physical cores from
    `core id`. Linux Arm: 128-bit NEON (`asimd`). FMA units per core are not reported anywhere: the estimate assumes
    2, which most current server and desktop cores have (some have 1, Apple's and Neoverse V-series cores 4).
    Elsewhere (macOS, Windows) it returns an estimate with `gflops=None` and the reason. The keyword arguments
    replace what would be read from this machine (for tests; None means "not reported").
    """
    name = {torch.float32: "float32", torch.float64: "float64"}.get(dtype)
    if name is None:
        raise ValueError(f"peak_estimate covers float32 and float64, got {dtype}")
    system = system or platform.system()
    if system != "Linux":
        return PeakEstimate(
            name,
            None,
            reason=f"{system} does not report SIMD width, FMA units and clock in "
            f"/proc/cpuinfo; this lesson shows measured speeds only",
        )
    cpuinfo = cpuinfo if cpuinfo is not None else (_read("/proc/cpuinfo") or "")
    flags = set((_field(cpuinfo, "flags") or _field(cpuinfo, "Features") or "").split())
    sources: dict[str, str] = {}

    cores, sources["cores"] = _usable_cores(cpuinfo, usable_cpus)

    found = _simd_width(cpuinfo, flags)
    if found is None:
        return PeakEstimate(
            name,
            None,
            cores=cores,
            sources=sources,
            reason="/proc/cpuinfo lists no SIMD flag this course knows (avx512f, avx2, avx, asimd, sse2)",
        )
    simd, sources["simd"] = found
    has_fma = "fma" in flags or "asimd" in flags  # NEON always has fused multiply-add
    fma_units = 2
    sources["fma"] = "ASSUMED: no platform reports it; 2 on most current cores" + (
        "" if has_fma else "; no `fma` flag, so counting a multiply port and an add port instead"
    )

    if max_khz is _FROM_THIS_MACHINE:
        freqs = [_read(str(p)) for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/cpuinfo_max_freq")]
        freqs = [float(f) for f in freqs if f and f.strip().isdigit()]
        max_khz = max(freqs) if freqs else None
    if max_khz:
        ghz = max_khz / 1e6
        sources["clock"] = "cpufreq maximum; with every core busy the clock is usually lower"
    else:
        mhz = _field(cpuinfo, "cpu MHz")
        if mhz is None:
            return PeakEstimate(
                name,
                None,
                cores=cores,
                simd_bits=simd,
                fma_units=fma_units,
                sources=sources,
                reason="the clock is not reported (no cpufreq and no `cpu MHz` in /proc/cpuinfo)",
            )
        ghz = float(mhz) / 1e3
        sources["clock"] = "`cpu MHz` in /proc/cpuinfo: the clock when read (a VM reports its host's base clock)"
    estimate = PeakEstimate(name, None, cores, simd, fma_units, ghz, sources)
    if cores is None or estimate.lanes is None:  # (a /proc/cpuinfo without a `processor` line)
        return replace(estimate, reason="/proc/cpuinfo lists no processor")
    gflops = cores * estimate.lanes * 2 * fma_units * ghz
    return PeakEstimate(name, gflops, cores, simd, fma_units, ghz, sources)


# ----------------------------------------------------------------------------------------------------------------
# Bandwidth and arithmetic intensity
# ----------------------------------------------------------------------------------------------------------------


def bandwidth(nbytes: int = 64 * 2**20, *, min_run_time: float = 0.1) -> dict[str, float]:
    """Memory bandwidth in GB/s, measured on `nbytes` of float32 (larger than most caches), two ways.

    "copy": copying reads and writes nbytes each (counted as 2·nbytes, as the STREAM benchmark does); "read": a sum
    only reads. Each is the faster of torch (all its threads) and NumPy (one thread): on a busy machine the threads
    of a parallel copy wait for each other, while one thread alone can still stream memory.
    """
    src = torch.rand(nbytes // 4)
    dst = torch.empty_like(src)
    src_np, dst_np = src.numpy(), dst.numpy()  # the same memory, for NumPy's single-threaded loops
    copy = min(
        timing.fastest(lambda: dst.copy_(src), budget=min_run_time).seconds,
        timing.fastest(lambda: np.copyto(dst_np, src_np), budget=min_run_time).seconds,
    )
    read = min(
        timing.fastest(lambda: src.sum(), budget=min_run_time).seconds,
        timing.fastest(lambda: src_np.sum(), budget=min_run_time).seconds,
    )
    return {"copy": 2 * nbytes / copy / 1e9, "read": nbytes / read / 1e9}


def gemm_intensity(M: int, N: int, K: int, itemsize: int = 4) -> float:
    """FLOPs per byte of a GEMM that reads A and B once and writes C once: 2MNK / (itemsize·(MK + KN + MN))."""
    return 2 * M * N * K / (itemsize * (M * K + K * N + M * N))


def gemv_intensity(M: int, K: int, itemsize: int = 4) -> float:
    """FLOPs per byte of y = A·x with A (M, K): 2MK / (itemsize·(MK + K + M)); about 2 / itemsize."""
    return 2 * M * K / (itemsize * (M * K + K + M))


def elementwise_intensity(flops_per_element: int = 1, operands: int = 3, itemsize: int = 4) -> float:
    """FLOPs per byte of an element-wise op, e.g. c = a + b: 1 FLOP per 3 numbers moved."""
    return flops_per_element / (operands * itemsize)


# ----------------------------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------------------------


def ladder_plot(
    sizes: Sequence[int],
    gflops: Mapping[str, Sequence[float]],
    *,
    peak: float | None = None,
    note: str | None = None,
    title: str = "GEMM speed ladder (float32, N×N×N)",
):
    """GFLOP/s of every rung against N on log axes, with the estimated peak as a dashed line when there is one."""
    fig = plots.lines(
        sizes,
        gflops,
        xlabel="N (A, B and C are N×N)",
        ylabel="GFLOP/s (log scale)",
        title=title,
        note=note,
        legend_outside=True,
    )
    if peak:
        ax = fig.axes[0]
        ax.axhline(peak, color="black", linestyle="--", linewidth=1)
        ax.text(sizes[0], peak * 1.15, f"estimated peak {peak:,.0f} GFLOP/s", fontsize=8, va="bottom")
        ax.set_ylim(top=peak * 3)
    return fig


def roofline(
    peak: float | None,
    bandwidth_gbs: float,
    points: Mapping[str, tuple[float, float]],
    *,
    title: str,
    peak_label: str = "estimated peak",
    note: str | None = None,
    unit: str = "GFLOP/s",
):
    """Attainable FLOP/s = min(peak, bandwidth × intensity) on log axes, with measured (intensity, FLOP/s) points.

    `peak` is in `unit` ("GFLOP/s" or "TFLOP/s") and `bandwidth_gbs` in the matching GB/s or TB/s. Without a peak,
    the roof is drawn at the fastest measured point and labelled as measured.
    """
    bw_unit = {"GFLOP/s": "GB/s", "TFLOP/s": "TB/s"}[unit]
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    xs = [x for x, _ in points.values()]
    lo, hi = min(xs + [0.05]) / 3, max(xs + [100.0]) * 4
    grid = np.logspace(np.log10(lo), np.log10(hi), 200)
    roof = peak if peak else max(y for _, y in points.values())
    label = peak_label if peak else "fastest measured (no peak estimate)"
    ax.plot(grid, np.minimum(roof, bandwidth_gbs * grid), color="black", linewidth=1.5)
    ax.plot(grid, bandwidth_gbs * grid, color="black", linewidth=0.8, linestyle=":")
    ridge = roof / bandwidth_gbs
    bottom = min(y for _, y in points.values()) / 5
    ax.axvline(ridge, color="gray", linestyle="--", linewidth=0.8)
    ax.text(
        ridge * 1.1,
        bottom * 1.5,
        f"ridge point: {ridge:.3g} FLOP/byte",
        fontsize=8,
        color="gray",
        rotation=90,
        va="bottom",
    )
    ax.text(lo * 1.3, roof * 1.15, f"{label}: {roof:,.4g} {unit}", fontsize=8)
    x_text = max(lo * 1.5, ridge / 300)
    ax.text(x_text, bandwidth_gbs * x_text * 2.5, f"memory: {bandwidth_gbs:,.4g} {bw_unit} × intensity", fontsize=8)
    for (name, (x, y)), marker in zip(points.items(), itertools.cycle("osD^vP*X")):
        ax.plot([x], [y], marker=marker, linestyle="none", markersize=8, label=f"{name}: {y:,.3g} {unit}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(bottom, roof * 4)
    ax.set(xlabel="arithmetic intensity (FLOP per byte moved, log scale)", ylabel=f"{unit} (log scale)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, alpha=0.7)
    fig.tight_layout()
    return fig


def order_bars(gflops: Mapping[str, Mapping[str, float]], *, title: str, note: str | None = None):
    """Grouped bars: GFLOP/s of each loop order (x) for each implementation (one colour each), log scale."""
    series = list(gflops)
    orders = [o for o in ORDERS if any(o in gflops[s] for s in series)]
    fig, ax = plt.subplots(figsize=(7.4, 3.8))
    width = 0.8 / max(len(series), 1)
    for n, name in enumerate(series):
        xs = [i + (n - (len(series) - 1) / 2) * width for i, o in enumerate(orders) if o in gflops[name]]
        ys = [gflops[name][o] for o in orders if o in gflops[name]]
        ax.bar(xs, ys, width=width, label=name)
    ax.set_xticks(range(len(orders)), [f"{o}\n(inner {o[-1]})" for o in orders])
    ax.set_yscale("log")
    ax.set(xlabel="loop order, outermost first", ylabel="GFLOP/s (log scale)", title=title)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, alpha=0.7)
    fig.tight_layout()
    return fig


def cpu_flags() -> set[str]:
    """The feature flags Linux reports for this CPU (empty elsewhere)."""
    text = _read("/proc/cpuinfo") or ""
    return set((_field(text, "flags") or _field(text, "Features") or "").split())


# ----------------------------------------------------------------------------------------------------------------
# Figures measured for this course on an NVIDIA H200
# ----------------------------------------------------------------------------------------------------------------


def h200_probe() -> dict:
    """The GEMM figures measured for this course on an NVIDIA H200 (torch 2.11, cuBLAS), from data/."""
    return json.loads(H200_PROBE.read_text())


# ---- (A, B) cases: seeded shapes, dtypes and memory layouts (ex02_gemm's and ex09_triton's checks)

LAYOUT_NOTES = {  # what a case's label adds for each memory layout of A and B
    "contiguous": "",
    "transposed": ", A and B transposed views (non-contiguous)",
    "strided": ", A and B every-other-column views (non-contiguous)",
}


def shape_label(M: int, N: int, K: int) -> str:
    """How a case names a GEMM's sizes: "M=2, N=3, K=4 (A 2×4, B 4×3)"."""
    return f"M={M}, N={N}, K={K} (A {M}×{K}, B {K}×{N})"


def matmul_cases(
    shapes: Sequence[tuple[int, int, int]],
    dtypes: Sequence[torch.dtype] = (torch.float32, torch.float64),
    *,
    layout: str = "contiguous",
    seed: int = 0,
) -> list[Case]:
    """(A, B) with A (M, K) and B (K, N) for every (M, N, K) × dtype."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for dtype in dtypes:
        for M, N, K in shapes:
            A, B = matrix(M, K, dtype, gen, layout), matrix(K, N, dtype, gen, layout)
            cases.append(Case(f"{shape_label(M, N, K)}, {dtype_name(dtype)}{LAYOUT_NOTES[layout]}", (A, B)))
    return cases
