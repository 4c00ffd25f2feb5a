"""GEMM shapes (lesson 08): arithmetic intensity, the H200 figures measured for this course, GEMM speed measured
across shapes (`gemm_sweep`, `device_tflops`), mantissa rounding (TF32, bfloat16), and the explorer that puts a
measured shape on this machine's roofline (`shape_explorer`). `padded` is ex08_shapes' `padded` itself, so it counts
its calls (`uses`): a check can tell when an answer calls it.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from twoprim.core import timing
from twoprim.core.checks import counted
from twoprim.topics import gemm
from twoprim.topics.explorers import DRAW, Explorer, figure_png, int_slider

__all__ = [
    "h200",
    "arithmetic_intensity",
    "device_tflops",
    "gemm_sweep",
    "round_mantissa",
    "relative_error",
    "Measurement",
    "measure_gemm",
    "ShapePoint",
    "shape_point",
    "padded",
    "shape_figure",
    "ShapeExplorer",
    "shape_explorer",
    "uses",
]


# ----------------------------------------------------------------------------------------------------------------
# Figures measured for this course on an NVIDIA H200, and GEMM speed measured here
# ----------------------------------------------------------------------------------------------------------------


def h200() -> dict:
    """The H200 GEMM probe (`gemm.h200_probe`), read for tables: {"label", "gemm": {(dtype, M, N, K): TFLOP/s},
    "tf32_4096": TFLOP/s, "raw": {...}}."""
    raw = gemm.h200_probe()
    rates = {}
    for key, value in raw.items():
        parts = key.split()
        if len(parts) == 6 and parts[0] == "gemm" and parts[-1] == "TFLOPs":  # "gemm bfloat16 M4096 K4096 N4097 TFLOPs"
            dims = {p[0]: int(p[1:]) for p in parts[2:5]}
            rates[(parts[1], dims["M"], dims["N"], dims["K"])] = float(value)
    label = f"measured for this course on an {raw['device']} (torch {raw['torch'].split('+')[0]}, cuBLAS)"
    return {"label": label, "gemm": rates, "tf32_4096": float(raw["gemm tf32 4096^3 TFLOPs"]), "raw": raw}


def arithmetic_intensity(M: int, N: int, K: int, bytes_per_element: int) -> float:
    """FLOPs per byte of a GEMM that reads A (M, K) and B (K, N) and writes C (M, N) once: 2MNK / bytes."""
    return 2 * M * N * K / (bytes_per_element * (M * K + K * N + M * N))


def device_tflops(
    M: int,
    N: int,
    K: int,
    dtype: torch.dtype,
    *,
    device: str = "cuda",
    fp32_precision: str = "highest",
    min_run_time: float = 0.2,
    seed: int = 0,
) -> float:
    """TFLOP/s of A (M, K) @ B (K, N) on `device`. fp32_precision "high" lets float32 GEMMs use TF32 on CUDA
    (torch.set_float32_matmul_precision); the previous setting is restored afterwards."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(fp32_precision)
    try:
        gen = torch.Generator(device=device).manual_seed(seed)
        A = torch.randn(M, K, device=device, dtype=dtype, generator=gen)
        B = torch.randn(K, N, device=device, dtype=dtype, generator=gen)
        secs = timing.seconds(lambda: A @ B, min_run_time=min_run_time)  # synchronises CUDA around each run
    finally:
        torch.set_float32_matmul_precision(previous)
    return 2 * M * N * K / secs / 1e12


def gemm_sweep(
    shapes: Sequence[tuple[int, int, int]],
    *,
    dtype: torch.dtype = torch.float32,
    rounds: int = 3,
    budget: float = 0.01,
    seed: int = 0,
) -> list[float]:
    """GFLOP/s of `A @ B` for each (M, N, K) in `shapes`, from the fastest call over `rounds` interleaved rounds.

    Interleaved: every shape once, then every shape again, ..., so a burst of load from another program slows one
    round of every shape instead of every round of one shape. Shapes that share K share one A (sliced to M rows) and
    shapes that share (K, N) share one B, so a sweep over M allocates B once.
    """
    gen = torch.Generator().manual_seed(seed)
    max_m: dict[int, int] = {}
    for M, _, K in shapes:
        max_m[K] = max(max_m.get(K, 0), M)
    As = {K: torch.randn(M, K, generator=gen).to(dtype) for K, M in max_m.items()}
    Bs = {(K, N): torch.randn(K, N, generator=gen).to(dtype) for M, N, K in shapes}
    best = [math.inf] * len(shapes)
    for _ in range(rounds):
        for i, (M, N, K) in enumerate(shapes):
            A, B = As[K][:M], Bs[(K, N)]
            best[i] = min(best[i], timing.fastest(lambda A=A, B=B: A @ B, budget=budget, min_calls=2).seconds)
    return [timing.gflops(2 * M * N * K, t) for (M, N, K), t in zip(shapes, best, strict=True)]


# ----------------------------------------------------------------------------------------------------------------
# Number formats
# ----------------------------------------------------------------------------------------------------------------


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Round float32 `x` to `bits` explicit mantissa bits (round to nearest, ties to even), kept in float32.

    bits=10 is TF32 (what Tensor Cores read from float32 inputs when TF32 is allowed), bits=7 is bfloat16's
    precision (with float32's range).
    """
    if x.dtype != torch.float32:
        raise TypeError(f"round_mantissa: expected a float32 tensor, got {x.dtype}")
    if not 0 <= bits <= 23:
        raise ValueError(f"round_mantissa: bits must be between 0 and 23, got {bits}")
    drop = 23 - bits
    if drop == 0:
        return x.clone()
    i = x.contiguous().view(torch.int32)
    half = (1 << (drop - 1)) - 1
    rounded = (i + half + ((i >> drop) & 1)) & ~((1 << drop) - 1)
    return rounded.view(torch.float32).reshape(x.shape)


def relative_error(got: torch.Tensor, exact: torch.Tensor) -> float:
    """‖got − exact‖ / ‖exact‖ (Frobenius norms, in float64)."""
    exact = exact.double()
    return float(torch.linalg.norm(got.double() - exact) / torch.linalg.norm(exact))


# ----------------------------------------------------------------------------------------------------------------
# GEMM shapes on the roofline: the explorer
# ----------------------------------------------------------------------------------------------------------------

Measurement = timing.Fastest  # what measure_gemm returns


def measure_gemm(
    M: int,
    N: int,
    K: int,
    *,
    budget: float = 0.2,
    min_calls: int = 3,
    max_calls: int = 200,
    stop: threading.Event | None = None,
    progress: Callable[[int, int], object] | None = None,
    dtype: torch.dtype = torch.float32,
) -> Measurement | None:
    """Fastest single call of A (M×K) @ B (K×N), one call per step: `progress(done, planned)` after each, and no
    new call once `stop` is set. Returns None when stopped before any timed call."""
    gen = torch.Generator().manual_seed(0)
    A, B = torch.randn(M, K, generator=gen).to(dtype), torch.randn(K, N, generator=gen).to(dtype)  # (M, K), (K, N)
    return timing.fastest(
        lambda: A @ B, budget=budget, min_calls=min_calls, max_calls=max_calls, stop=stop, progress=progress
    )  # (M, K) @ (K, N) -> (M, N)


def padded(size: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is at least `size`: ⌈size / multiple⌉ · multiple."""
    return -(-size // multiple) * multiple


_USES: Counter = Counter()
padded = counted(padded, _USES)


def uses() -> Counter:
    """How many times `padded` has been called (a copy)."""
    return Counter(_USES)


@dataclass(frozen=True)
class ShapePoint:
    """One measured GEMM on the roofline: the shape asked for, the shape run (padded), and the time of one call.

    `gflops` counts the FLOPs of the shape asked for (2·M·N·K, the useful work) over the time of the shape run;
    `intensity` is the FLOPs per byte of the shape run, reading A and B and writing C once in float32.
    """

    M: int
    N: int
    K: int
    multiple: int
    run: tuple[int, int, int]
    seconds: float
    calls: int = 0
    stopped: bool = False

    @property
    def gflops(self) -> float:
        return timing.gflops(2 * self.M * self.N * self.K, self.seconds)

    @property
    def intensity(self) -> float:
        return gemm.gemm_intensity(*self.run)

    @property
    def extra_flops(self) -> float:
        """Fraction of FLOPs the padding adds: (Mp·Np·Kp − M·N·K) / (M·N·K)."""
        Mp, Np, Kp = self.run
        return Mp * Np * Kp / (self.M * self.N * self.K) - 1

    @property
    def label(self) -> str:
        shape = f"{self.M}×{self.N}×{self.K}"
        return shape if self.multiple == 1 else f"{shape}, padded to a multiple of {self.multiple}"


def shape_point(
    M: int, N: int, K: int, seconds: float, *, multiple: int = 1, calls: int = 0, stopped: bool = False
) -> ShapePoint:
    """The roofline point of an M×N×K GEMM run as (M, N, K) padded up to `multiple` and timed at `seconds` a call."""
    for name, value in (("M", M), ("N", N), ("K", K), ("multiple", multiple)):
        if int(value) < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if not seconds > 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    run = (padded(M, multiple), padded(N, multiple), padded(K, multiple))
    return ShapePoint(M, N, K, multiple, run, seconds, calls, stopped)


def shape_figure(
    points: Sequence[ShapePoint], *, peak: float | None, bandwidth_gbs: float, peak_label: str, note: str | None = None
):
    """Lesson 02's roofline of this machine (gemm.roofline) with every measured point, numbered oldest first."""
    marks = {f"{n}. {p.label}": (p.intensity, p.gflops) for n, p in enumerate(points, start=1)}
    with warnings.catch_warnings():  # its first layout can clip the memory slope's label; redone below
        warnings.filterwarnings("ignore", message="Tight layout not applied")
        fig = gemm.roofline(
            peak,
            bandwidth_gbs,
            marks,
            title="GEMM shapes on this machine's roofline (float32)",
            peak_label=peak_label,
            note=note,
        )
    ax = fig.axes[0]
    # gemm.roofline starts the y axis just below the slowest point; with only fast GEMMs that hides the memory
    # slope and its label, so start it where the slope enters the plot.
    bottom = min(ax.get_ylim()[0], bandwidth_gbs * ax.get_xlim()[0])
    ax.set_ylim(bottom=bottom)
    for text in ax.texts:
        if text.get_text().startswith("ridge point"):
            text.set_y(bottom * 1.5)  # where gemm.roofline puts it: just above the bottom
    fig.set_size_inches(9.8, 4.4)  # room for the legend of six points
    fig.tight_layout()
    return fig


class ShapeExplorer(Explorer):
    """The GEMM shape explorer: each change of M, N, K or padding is measured in a background thread, with a
    progress bar and a Stop button, and its point joins the roofline (the last `keep` points stay).

    The first state is measured before the constructor returns, so the static picture shows a measured point.
    """

    def __init__(
        self,
        M: int,
        N: int,
        K: int,
        multiple: int,
        *,
        peak: float | None,
        peak_label: str,
        bandwidth_gbs: float,
        budget: float,
        keep: int = 6,
        note: str | None = None,
    ):
        import ipywidgets as widgets

        self.peak, self.peak_label, self.bandwidth_gbs = peak, peak_label, bandwidth_gbs
        self.budget, self.keep, self.note = budget, keep, note
        self.points: list[ShapePoint] = []
        self._stop, self._thread = threading.Event(), None
        self.progress = widgets.IntProgress(
            value=0, min=0, max=1, description="calls timed", style={"description_width": "110px"}
        )
        self.stop_button = widgets.Button(
            description="Stop",
            disabled=True,
            button_style="warning",
            tooltip="stop after the GEMM call that is running",
        )
        self.stop_button.on_click(lambda _: self._stop.set())
        style = {"description_width": "110px"}
        controls = {
            "M": int_slider("M", M, 1, 4096),
            "N": int_slider("N", N, 1, 4096),
            "K": int_slider("K", K, 1, 4096),
            "multiple": widgets.Dropdown(
                options=[
                    ("none", 1),
                    ("to a multiple of 8", 8),
                    ("to a multiple of 16", 16),
                    ("to a multiple of 64", 64),
                    ("to a multiple of 128", 128),
                ],
                value=multiple,
                description="padding",
                style=style,
            ),
        }
        super().__init__(
            "GEMM shapes: GFLOP/s measured live, on the roofline",
            controls,
            render=None,
            extra=[widgets.HBox([self.progress, self.stop_button])],
        )

    def _changed(self, change) -> None:
        self.stop()
        self._stop.clear()
        self._thread = threading.Thread(target=self.refresh, daemon=True, name="twoprim-gemm-shapes")
        self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop a running measurement after its current GEMM call, and wait for it."""
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the running measurement, if any, to finish."""
        if self._thread is not None:
            self._thread.join(timeout)

    def refresh(self) -> None:
        """Measure the current shape (and its padded version), then redraw the roofline with the new points."""
        M, N, K, multiple = (self.values[name] for name in ("M", "N", "K", "multiple"))
        new = self._measure(M, N, K, multiple)
        self.points = (self.points + new)[-self.keep :]
        if not self.points:
            self.show(
                None,
                "stopped before the first timed call: no point to show. Move a slider to measure again.",
                error=True,
            )
            return
        with DRAW:
            png = figure_png(
                shape_figure(
                    self.points,
                    peak=self.peak,
                    bandwidth_gbs=self.bandwidth_gbs,
                    peak_label=self.peak_label,
                    note=self.note,
                )
            )
        self.show(png, self._text(new, M, N, K))

    def _measure(self, M: int, N: int, K: int, multiple: int) -> list[ShapePoint]:
        """The shape as asked and, with padding, padded: one point each, in small steps that Stop can end."""
        runs = [1] + ([multiple] if multiple > 1 else [])
        self.say(f"measuring {M}×{N}×{K} ..." + (f" and padded to a multiple of {multiple}" if multiple > 1 else ""))
        self.progress.value = 0
        self.stop_button.disabled = False
        new: list[ShapePoint] = []
        try:
            for n, mult in enumerate(runs):

                def progress(done: int, planned: int, n: int = n) -> None:
                    self.progress.max = planned * len(runs)
                    self.progress.value = planned * n + done

                result = measure_gemm(
                    padded(M, mult),
                    padded(N, mult),
                    padded(K, mult),
                    budget=self.budget,
                    stop=self._stop,
                    progress=progress,
                )
                if result is None:
                    break
                new.append(
                    shape_point(M, N, K, result.seconds, multiple=mult, calls=result.calls, stopped=result.stopped)
                )
                if result.stopped:
                    break
        finally:
            self.stop_button.disabled = True
        return new

    def _text(self, new: Sequence[ShapePoint], M: int, N: int, K: int) -> str:
        if not new:
            return f"stopped before the first timed call of {M}×{N}×{K}: no new point"
        lines = []
        for p in new:
            roof = min(self.peak or math.inf, self.bandwidth_gbs * p.intensity)
            status = f"STOPPED after {p.calls} of the planned calls" if p.stopped else f"fastest of {p.calls} calls"
            lines.append(
                f"{p.label}: {p.seconds * 1e3:.3f} ms a call ({status}), {p.gflops:.1f} GFLOP/s of "
                f"2·M·N·K; intensity {p.intensity:.1f} FLOP/byte, roof there {roof:,.0f} GFLOP/s"
            )
            if self.peak and p.gflops > self.peak:
                lines.append(
                    "  faster than the estimated peak: one of its factors (most likely the clock) is too "
                    "low for this machine"
                )
        if len(new) == 2:
            lines.append(
                f"padding adds {new[1].extra_flops:.2%} FLOPs and runs the asked-for product "
                f"{new[1].gflops / new[0].gflops:.2f}× as fast (not counting the copy into padded buffers)"
            )
        return "\n".join(lines)


def _peak_for_threads(threads: int) -> tuple[float | None, str]:
    """gemm.peak_estimate scaled to the cores `threads` torch threads can use, with a label saying so."""
    estimate = gemm.peak_estimate(torch.float32)
    if estimate.gflops is None or not estimate.cores:
        return None, "estimated peak"
    cores = min(threads, estimate.cores)
    return estimate.gflops * cores / estimate.cores, f"estimated peak of {cores} core{'s' if cores > 1 else ''}"


def shape_explorer(
    M: int = 256,
    N: int = 256,
    K: int = 256,
    multiple: int = 1,
    *,
    budget: float = 0.2,
    bandwidth_gbs: float | None = None,
    peak: float | None = None,
) -> ShapeExplorer:
    """Pick M, N, K and padding; GFLOP/s measured live (torch's current threads) on lesson 02's roofline.

    Without `bandwidth_gbs` it is measured here (gemm.bandwidth, about half a second); without `peak` it is
    gemm.peak_estimate scaled to the cores torch's threads can use. Each measurement runs for about `budget`
    seconds per shape, in a background thread, and can be stopped.
    """
    threads = torch.get_num_threads()
    label = "estimated peak"
    if peak is None:
        peak, label = _peak_for_threads(threads)
    if bandwidth_gbs is None:
        bandwidth_gbs = max(gemm.bandwidth(64 * 2**20, min_run_time=0.05).values())
    note = f"torch {torch.__version__}, {threads} thread{'s' if threads > 1 else ''}; peak estimated, rest measured"
    return ShapeExplorer(
        M, N, K, multiple, peak=peak, peak_label=label, bandwidth_gbs=bandwidth_gbs, budget=budget, note=note
    )
