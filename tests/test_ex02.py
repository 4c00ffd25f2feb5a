"""ex02_gemm: every check explains a wrong value, shape and dtype; every stated rule catches its forbidden call;
bad input to the solution functions gets a named error; and the lesson-02 helpers in twoprim.topics.gemm do what they
say."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from twoprim.assignments import ex02_gemm as ex02
from twoprim.core import timing
from twoprim.topics import gemm

from .conftest import fails, solution_namespace
from .visible_rules import assert_rule_is_visible, ignores_strides, named


@pytest.fixture(scope="module")
def sol02():
    """The ex02_gemm solution functions."""
    return solution_namespace("ex02_gemm")


# (the solutions pass; a wrong value, shape or dtype is explained: tests/test_check_messages.py)


def test_case_labels_name_the_gemm_sizes():
    msg = fails(ex02.check_matmul_outer, lambda A, B: A @ B * 0)
    assert "case:     M=4, N=5, K=3 (A 4×3, B 3×5), float32" in msg


def test_not_written_yet_says_so():
    def gemm(alpha, A, B, beta, C):
        raise NotImplementedError()

    msg = fails(ex02.check_gemm, gemm)
    assert "`gemm` is not written yet" in msg


# ---- matmul_loops: Python loops only


@pytest.mark.parametrize(
    "spelling",
    [
        lambda A, B: A @ B,
        lambda A, B: torch.mm(A, B),
        lambda A, B: torch.stack([(A[i, :, None] * B).sum(0) for i in range(A.shape[0])]),
        lambda A, B: torch.from_numpy(A.numpy() @ B.numpy()),
        lambda A, B: torch.stack(
            [torch.stack([torch.dot(A[i], B[:, j]) for j in range(B.shape[1])]) for i in range(A.shape[0])]
        ),
    ],
    ids=["@", "mm", "vectorised sum", "numpy", "dot"],
)
def test_matmul_loops_forbids_products_and_reductions(spelling):
    msg = fails(ex02.check_matmul_loops, spelling)
    assert "✘ ex02_gemm-matmul_loops: the answer breaks a rule of this exercise: Python loops" in msg
    assert "found:    it called" in msg and "next:" in msg


# ---- matmul_dots: exactly M·N dots of length K


def test_matmul_dots_rejects_a_matrix_product():
    msg = fails(ex02.check_matmul_dots, lambda A, B: A @ B)
    assert "one dot per element" in msg and "aten.mm on (3, 5) and (5, 4)" in msg


def test_matmul_dots_rejects_a_row_at_a_time():
    msg = fails(ex02.check_matmul_dots, lambda A, B: torch.stack([A[i] @ B for i in range(A.shape[0])]))
    assert "a matrix-vector or matrix-matrix product" in msg


def test_matmul_dots_rejects_element_wise_sums():
    def matmul_dots(A, B):
        return torch.stack(
            [torch.stack([(A[i] * B[:, j]).sum() for j in range(B.shape[1])]) for i in range(A.shape[0])]
        )

    msg = fails(ex02.check_matmul_dots, matmul_dots)
    assert "it ran no dot op" in msg


def test_matmul_dots_counts_the_dots():
    def matmul_dots(A, B):  # each element as two half-length dots: right values, 2·M·N dots
        h = A.shape[1] // 2
        return torch.stack(
            [
                torch.stack([torch.dot(A[i, :h], B[:h, j]) + torch.dot(A[i, h:], B[h:, j]) for j in range(B.shape[1])])
                for i in range(A.shape[0])
            ]
        )

    msg = fails(ex02.check_matmul_dots, matmul_dots)
    assert "two vectors of length K = 5" in msg


def test_matmul_dots_counts_extra_dots(sol02):
    def matmul_dots(A, B):
        torch.dot(A[0], B[:, 0])  # one dot too many
        return sol02["matmul_dots"](A, B)

    msg = fails(ex02.check_matmul_dots, matmul_dots)
    assert "it ran 13 dot ops for a 3×4 result; each C[i, j] is exactly one dot, so M·N = 12 in all" in msg


# ---- matmul_outer: outer products, no dot/GEMM, a loop over k only


@pytest.mark.parametrize(
    "spelling",
    [
        lambda A, B: sum(A[:, k : k + 1] @ B[k : k + 1, :] for k in range(A.shape[1])),
        lambda A, B: torch.einsum("ik,kj->ij", A, B),
        lambda A, B: A @ B,
    ],
    ids=["K=1 GEMMs", "einsum", "@"],
)
def test_matmul_outer_forbids_dot_and_gemm(spelling):
    msg = fails(ex02.check_matmul_outer, spelling)
    assert "breaks a rule of this exercise: no dot, matrix-vector or matrix-matrix product" in msg


def test_matmul_outer_rejects_loops_over_the_elements():
    def matmul_outer(A, B):
        (M, K), N = A.shape, B.shape[1]
        C = torch.zeros(M, N, dtype=A.dtype)
        for i in range(M):
            for j in range(N):
                for k in range(K):
                    C[i, j] += A[i, k] * B[k, j]
        return C

    msg = fails(ex02.check_matmul_outer, matmul_outer)
    assert "a loop over k only" in msg and "ATen ops for M=4, N=5, K=3" in msg


def test_matmul_outer_accepts_one_broadcast(capsys):
    ex02.check_matmul_outer(lambda A, B: (A[:, :, None] * B[None, :, :]).sum(1))
    assert "✔ ex02_gemm-matmul_outer" in capsys.readouterr().out


# ---- gemm: BLAS semantics, C unchanged, a new tensor, no addmm


def test_gemm_beta_zero_with_nan_in_c_is_explained():
    msg = fails(ex02.check_gemm, lambda alpha, A, B, beta, C: alpha * (A @ B) + beta * C)
    assert "C full of nan" in msg and "0·NaN is NaN" in msg and "BLAS (and torch.addmm) do not read C" in msg


def test_gemm_that_writes_into_c_is_caught():
    def gemm(alpha, A, B, beta, C):
        return C.mul_(beta).add_(alpha * (A @ B))

    msg = fails(ex02.check_gemm, gemm)
    assert "C is left unchanged" in msg and "C changed in place: C[0, 0] was" in msg


def test_gemm_returning_c_itself_is_caught():
    cases = ex02.gemm_cases([(2, 3, 2, 0.0, 1.0)], [torch.float64])
    msg = fails(ex02.check_gemm, lambda alpha, A, B, beta, C: C, cases)
    assert "C itself (or a view of C's memory), but gemm returns a new tensor" in msg


@pytest.mark.parametrize(
    "spelling",
    [
        lambda alpha, A, B, beta, C: torch.addmm(C, A, B, beta=beta, alpha=alpha),
        lambda alpha, A, B, beta, C: C.clone().addmm_(A, B, beta=beta, alpha=alpha),
    ],
    ids=["addmm", "addmm_"],
)
def test_gemm_forbids_the_library_gemm(spelling):
    msg = fails(ex02.check_gemm, spelling)
    assert "no torch.addmm" in msg and "the library's own α·A·B + β·C" in msg


def test_gemm_runs_one_product():
    msg = fails(
        ex02.check_gemm, lambda alpha, A, B, beta, C: alpha * (A @ B) + (A @ B) * 0 + (beta * C if beta != 0 else 0)
    )
    assert "where one A @ B is enough" in msg


def test_gemm_cases_keep_c_before_and_fill_it():
    (case,) = ex02.gemm_cases([(2, 3, 4, 1.0, 0.0)], [torch.float32], fill_c="inf", layout="transposed")
    alpha, A, B, beta, C = case.args
    assert A.shape == (2, 4) and B.shape == (4, 3) and C.shape == (2, 3) and not C.is_contiguous()
    assert case.C_before is not None
    assert torch.isinf(C).all() and torch.equal(case.C_before, C) and case.C_before.data_ptr() != C.data_ptr()


# ---- matmul_tiled: GEMMs on tiles only, exactly 2·M·N·K FLOPs


def test_tiled_rejects_a_full_size_product():
    msg = fails(ex02.check_matmul_tiled, lambda A, B, tile: A @ B)
    assert "tiled: every GEMM op multiplies tiles" in msg and "an operand larger than one tile" in msg
    assert "aten.mm on (8, 8) and (8, 8) with tile=4" in msg


def test_tiled_rejects_dots():
    def tiled(A, B, tile):
        return torch.stack(
            [torch.stack([torch.dot(A[i], B[:, j]) for j in range(B.shape[1])]) for i in range(A.shape[0])]
        )

    msg = fails(ex02.check_matmul_tiled, tiled)
    assert "not dot products, matrix-vector or batched products" in msg


def _tiled(stop=lambda n, t: n, repeat=1, inplace=False):
    def matmul_tiled(A, B, tile):
        (M, K), N = A.shape, B.shape[1]
        C = torch.zeros(M, N, dtype=A.dtype)
        for i in range(0, stop(M, tile), tile):
            for j in range(0, stop(N, tile), tile):
                for k in range(0, stop(K, tile), tile):
                    for _ in range(repeat):
                        a, b = A[i : i + tile, k : k + tile], B[k : k + tile, j : j + tile]
                        if inplace:
                            C[i : i + tile, j : j + tile].addmm_(a, b)
                        else:
                            C[i : i + tile, j : j + tile] += a @ b
        return C / repeat

    return matmul_tiled


def test_tiled_catches_missing_edge_tiles():
    msg = fails(ex02.check_matmul_tiled, _tiled(stop=lambda n, t: n - n % t))
    assert "some tiles were never multiplied" in msg and "2·M·N·K = 1,260" in msg


def test_tiled_catches_repeated_work():
    msg = fails(ex02.check_matmul_tiled, _tiled(repeat=2))
    assert "more than the 2·M·N·K = 1,024 needed" in msg


def test_tiled_sees_in_place_tile_gemms(capsys):
    ex02.check_matmul_tiled(_tiled(inplace=True))
    assert "✔ ex02_gemm-matmul_tiled" in capsys.readouterr().out


def test_tiled_hidden_edge_cases_pass_for_the_solution(sol02):
    cases = ex02.tiled_cases([(5, 3, 4, 1), (5, 6, 7, 16), (1, 9, 5, 4)]) + ex02.tiled_cases(
        [(9, 10, 7, 4)], layout="strided"
    )
    assert ex02.check_matmul_tiled(sol02["matmul_tiled"], cases, hidden=0).cases == 8


# ---- gemm_flops: compared with FlopCounterMode


@pytest.mark.parametrize(
    "answer, hint",
    [
        (lambda M, N, K: M * N * K, "that is the number of multiply-adds"),
        (lambda M, N, K: M * N * (2 * K - 1), "that counts K − 1 additions per element"),
        (lambda M, N, K: 2.0 * M * N * K, "the right number as a float"),
    ],
)
def test_gemm_flops_common_mistakes_are_named(answer, hint):
    assert hint in fails(ex02.check_gemm_flops, answer)


def test_flop_counter_is_measured_not_assumed():
    assert ex02.flop_counter(3, 5, 7) == 2 * 3 * 5 * 7
    assert ex02.flop_counter(8192, 8192, 8192) == 2 * 8192**3


# ---- bad input to the solution functions: a named error, never a silent broadcast


@pytest.mark.parametrize("name", ["matmul_loops", "matmul_dots", "matmul_outer"])
def test_mismatched_inner_sizes_name_both_shapes(sol02, name):
    with pytest.raises(ValueError, match=rf"{name}: A has shape \(2, 3\) and B has shape \(4, 5\); .*K = 3"):
        sol02[name](torch.ones(2, 3), torch.ones(4, 5))


def test_vector_instead_of_matrix(sol02):
    with pytest.raises(ValueError, match=r"matmul_dots: B must be a 2-D matrix, got shape \(3,\)"):
        sol02["matmul_dots"](torch.ones(2, 3), torch.ones(3))


def test_list_and_numpy_inputs_say_how_to_convert(sol02):
    with pytest.raises(TypeError, match=r"A must be a torch.Tensor, got list \(wrap it with torch.tensor"):
        sol02["matmul_loops"]([[1.0]], torch.ones(1, 1))
    with pytest.raises(TypeError, match=r"got ndarray \(convert it with torch.from_numpy"):
        sol02["matmul_tiled"](torch.ones(2, 2), np.ones((2, 2)), 1)


def test_mixed_and_integer_dtypes_are_rejected(sol02):
    with pytest.raises(TypeError, match="A is torch.float32 but B is torch.float64"):
        sol02["matmul_outer"](torch.ones(2, 2), torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="must be floating point"):
        sol02["matmul_outer"](torch.ones(2, 2, dtype=torch.int64), torch.ones(2, 2, dtype=torch.int64))


def test_gemm_c_must_match_exactly(sol02):
    A, B = torch.ones(2, 3), torch.ones(3, 4)
    with pytest.raises(ValueError, match=r"gemm: C has shape \(1, 4\) but A @ B has shape \(2, 4\).*no broadcasting"):
        sol02["gemm"](1.0, A, B, 1.0, torch.ones(1, 4))
    with pytest.raises(TypeError, match="C is torch.float64"):
        sol02["gemm"](1.0, A, B, 1.0, torch.ones(2, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="alpha must be a number or a one-element tensor"):
        sol02["gemm"](torch.ones(2), A, B, 1.0, torch.ones(2, 4))


@pytest.mark.parametrize(
    "tile, error, text",
    [
        (0, ValueError, r"tile=0; a tile needs at least one row"),
        (2.0, TypeError, "tile must be an int, got float"),
        (True, TypeError, "tile must be an int, got bool"),
    ],
)
def test_tiled_with_a_bad_tile(sol02, tile, error, text):
    with pytest.raises(error, match=text):
        sol02["matmul_tiled"](torch.ones(2, 2), torch.ones(2, 2), tile)


@pytest.mark.parametrize(
    "args, error, text",
    [
        ((0, 1, 1), ValueError, "M=0; GEMM sizes are at least 1"),
        ((1, 2.0, 1), TypeError, "N must be an int, got float 2.0"),
    ],
)
def test_gemm_flops_with_bad_sizes(sol02, args, error, text):
    with pytest.raises(error, match=text):
        sol02["gemm_flops"](*args)


# ---- twoprim.topics.gemm: reference kernels, loop orders, peak, bandwidth, plots


def test_matmul_spec_is_the_product():
    A, B = torch.randn(3, 5, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    got = gemm.matmul_spec(A, B)
    assert got.dtype == torch.float64 and torch.allclose(got, A @ B)
    assert gemm.matmul_spec(A.float(), B.float()).dtype == torch.float32


def test_every_python_loop_order_computes_the_product():
    a, b = np.random.default_rng(0).random((4, 3)), np.random.default_rng(1).random((3, 5))
    for order in gemm.ORDERS:
        src = gemm.loop_source(order)
        assert src.splitlines()[1].strip() == f"for {order[0]} in range({dict(i='M', j='N', k='K')[order[0]]}):"
        np.testing.assert_allclose(gemm.python_loop_order(order)(a.tolist(), b.tolist()), a @ b)
    with pytest.raises(ValueError, match="order must be one of"):
        gemm.loop_source("iij")


def test_compiled_loop_orders_compute_the_product_or_say_why_not(monkeypatch):
    compiled = gemm.compiled_loop_orders(("-O1",))
    if compiled.functions is None:  # no compiler here: the message must say so
        assert "compiler" in compiled.message
    else:
        A, B = np.random.rand(7, 5).astype(np.float32), np.random.rand(5, 6).astype(np.float32)
        assert set(compiled.functions) == set(gemm.ORDERS) and "-O1" in compiled.message
        for f in compiled.functions.values():
            np.testing.assert_allclose(f(A, B), A @ B, rtol=1e-5)
    monkeypatch.setenv("CC", "no-such-compiler-anywhere")
    missing = gemm.compiled_loop_orders(("-O0", "-DNEVER_CACHED"))
    assert missing.functions is None and "no C compiler found" in missing.message
    assert "void matmul_kji" in missing.source


_INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
cpu MHz\t\t: 2000.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse2 avx avx2 fma avx512f

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
cpu MHz\t\t: 2000.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse2 avx avx2 fma avx512f

processor\t: 2
vendor_id\t: GenuineIntel
cpu family\t: 6
cpu MHz\t\t: 2000.000
physical id\t: 0
core id\t\t: 1
flags\t\t: fpu sse2 avx avx2 fma avx512f
"""


def test_peak_estimate_multiplies_the_reported_factors():
    est = gemm.peak_estimate(cpuinfo=_INTEL, max_khz=None, usable_cpus=3)
    # 2 physical cores (3 logical CPUs) × 16 float32 lanes × 2 FLOPs × 2 FMA units × 2.0 GHz (cpu MHz; no cpufreq)
    assert est.sources["clock"].startswith("`cpu MHz`")
    assert (est.cores, est.lanes, est.fma_units, est.ghz) == (2, 16, 2, 2.0)
    assert est.gflops == pytest.approx(2 * 16 * 2 * 2 * 2.0)
    assert "ESTIMATE" in est.explain() and "ASSUMED" in est.explain()


def test_peak_estimate_prefers_cpufreq_and_respects_affinity_and_dtype():
    est = gemm.peak_estimate(torch.float64, cpuinfo=_INTEL.replace("avx512f", ""), max_khz=3_500_000, usable_cpus=1)
    assert (est.cores, est.simd_bits, est.lanes, est.ghz) == (1, 256, 4, 3.5)
    assert est.gflops == pytest.approx(1 * 4 * 2 * 2 * 3.5)
    assert "1 CPUs this process may use" in est.sources["cores"]


def test_peak_estimate_knows_zen4_halves_and_arm_neon():
    zen4 = _INTEL.replace("GenuineIntel", "AuthenticAMD").replace("family\t: 6", "family\t: 25")
    assert gemm.peak_estimate(cpuinfo=zen4, max_khz=1e6, usable_cpus=8).simd_bits == 256
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm\n\nprocessor\t: 1\nFeatures\t: fp asimd evtstrm\n"
    est = gemm.peak_estimate(cpuinfo=arm, max_khz=2e6, usable_cpus=2)
    assert (est.cores, est.simd_bits, est.gflops) == (2, 128, pytest.approx(2 * 4 * 2 * 2 * 2.0))


def test_peak_estimate_says_when_it_cannot_tell():
    mac = gemm.peak_estimate(system="Darwin")
    assert mac.gflops is None and "Darwin does not report" in mac.explain()
    no_clock = gemm.peak_estimate(cpuinfo="processor\t: 0\nflags\t\t: sse2 avx2\n", max_khz=None, usable_cpus=1)
    assert no_clock.gflops is None and "clock is not reported" in no_clock.reason


def test_intensities():
    assert gemm.gemm_intensity(1024, 1024, 1024) == pytest.approx(1024 / 6)
    assert gemm.gemv_intensity(4096, 4096) == pytest.approx(0.5, rel=1e-3)
    assert gemm.elementwise_intensity() == pytest.approx(1 / 12)
    assert gemm.gemm_intensity(4096, 4096, 4096, itemsize=2) == pytest.approx(4096 / 3)


def test_bandwidth_is_measured_two_ways():
    measured = gemm.bandwidth(4 * 2**20, min_run_time=0.01)
    assert set(measured) == {"copy", "read"} and all(0.1 < gbs < 1e5 for gbs in measured.values())


def test_fastest_and_a_sweep_of_fastest_calls_time_what_they_are_given():
    import time

    assert 0.002 <= timing.fastest(lambda: time.sleep(0.002), budget=0.02).seconds < 0.05
    variants = {"sleep": lambda n: time.sleep(0.001 * n), "noop": lambda n: n}
    times = timing.sweep([1, 2, 3], lambda n: (n,), variants, limits={"sleep": 2}, min_run_time=0.01, best=True)
    assert len(times["sleep"]) == 2 and len(times["noop"]) == 3
    assert times["sleep"][1] > times["sleep"][0] > times["noop"][0]


def test_step_seconds_times_two_steps_apart_and_hands_the_first_ones_result_on():
    import time

    seen = []
    first, then = timing.step_seconds(
        lambda: time.sleep(0.001) or "built", lambda out: (seen.append(out), time.sleep(0.02)), repeats=3
    )
    assert 0.001 <= first < then and 0.02 <= then < 0.5 and seen == ["built"] * 4  # one warm-up, three timed
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        timing.step_seconds(lambda: 0, print, repeats=0)


def test_plots_draw_peak_roof_and_points():
    import matplotlib.pyplot as plt

    fig = gemm.ladder_plot([16, 32, 64], {"BLAS": [1.0, 5.0, 20.0], "loops": [0.01, 0.01]}, peak=300.0)
    assert any(np.asarray(line.get_ydata())[0] == 300.0 for line in fig.axes[0].lines)
    fig2 = gemm.roofline(300.0, 20.0, {"GEMM": (170.0, 150.0), "GEMV": (0.5, 8.0)}, title="t")
    labels = fig2.axes[0].get_legend_handles_labels()[1]
    assert labels == ["GEMM: 150 GFLOP/s", "GEMV: 8 GFLOP/s"]
    fig3 = gemm.roofline(None, 20.0, {"GEMM": (170.0, 150.0)}, title="no peak")
    assert any("fastest measured" in t.get_text() for t in fig3.axes[0].texts)
    plt.close("all")


def test_h200_probe_has_the_figures_the_lesson_quotes():
    probe = gemm.h200_probe()
    assert probe["device"] == "NVIDIA H200" and probe["torch"].startswith("2.11")
    for key in (
        "gemm bfloat16 M4096 K4096 N4096 TFLOPs",
        "gemm float32 M4096 K4096 N4096 TFLOPs",
        "gemm tf32 4096^3 TFLOPs",
        "gemm bfloat16 M1 K4096 N4096 TFLOPs",
        "copy GB/s (read+write)",
    ):
        assert probe[key] > 0


def test_busy_warning_reads_the_load_average(monkeypatch, capsys):
    import os

    assert gemm.warn_if_busy is timing.warn_if_busy  # one warning, in the timing module, for every lesson
    monkeypatch.setattr(os, "getloadavg", lambda: (9.5, 9.0, 9.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    gemm.warn_if_busy()
    out = capsys.readouterr().out
    assert "load average 9.5 over the last minute, on 2 cores" in out and "Rerun when it is idle" in out
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    gemm.warn_if_busy()
    assert capsys.readouterr().out == ""


# ---- every rule ex02 states has a visible case (issue #43): a wrong answer breaking only that rule passed the visible
# check before its case was added, and fails it now with a message about its own mistake


def _gemm_nan_only(alpha, A, B, beta, C):
    """Wrong: guards against NaN in C when beta = 0, not against inf (0·inf is NaN too)."""
    return alpha * (A @ B) + beta * torch.where(torch.isnan(C), torch.zeros_like(C), C)


_NONCONTIGUOUS = lambda c: "non-contiguous" in c.label  # noqa: E731


@pytest.mark.parametrize(
    "fn, positions",
    [
        ("matmul_loops", ()),
        ("matmul_dots", ()),
        ("matmul_outer", ()),
        ("gemm", (1, 2)),
        ("gemm", (4,)),
        ("matmul_tiled", ()),
    ],
)
def test_every_function_of_ex02_meets_non_contiguous_inputs_in_its_visible_check(sol02, fn, positions):
    """Reading A, B (or C) as if contiguous passed every visible check before; now each says which strides it
    ignored."""
    check = getattr(ex02, f"check_{fn}")
    names = {(): "`A` and `B`", (1, 2): "`A` and `B`", (4,): "`C`"}[positions]
    assert_rule_is_visible(
        check,
        ignores_strides(sol02[fn], *positions),
        _NONCONTIGUOUS,
        f"{names} read as if they were contiguous" if names != "`C`" else "`C` read as if it were contiguous",
    )


def test_gemm_meets_a_c_full_of_inf_with_beta_zero_in_its_visible_check():
    msg = assert_rule_is_visible(
        ex02.check_gemm,
        named("gemm", _gemm_nan_only),
        lambda c: "full of inf" in c.label,
        "0·NaN is NaN in floating point, so beta * C spreads it",
        "do not read C at all",
    )
    assert "C full of inf" in msg


# ---- the rule "your own code": lesson 02's loops are matmul_loops, flop_counter is gemm_flops's oracle


@pytest.mark.parametrize(
    "check, cheat, called",
    [
        (ex02.check_matmul_loops, lambda A, B: gemm.matmul_spec(A, B), "twoprim.gemm.matmul_spec"),
        (
            ex02.check_matmul_loops,
            lambda A, B: torch.tensor(gemm.python_loop_order("ikj")(A.tolist(), B.tolist()), dtype=A.dtype).reshape(
                A.shape[0], B.shape[1]
            ),
            "twoprim.gemm.matmul_ikj",
        ),
        (ex02.check_gemm_flops, lambda M, N, K: ex02.flop_counter(M, N, K), "twoprim.ex02.flop_counter"),
    ],
    ids=["matmul_spec", "python_loop_order", "flop_counter"],
)
def test_calling_the_lessons_loops_or_the_oracle_is_refused(check, cheat, called):
    msg = fails(check, named(check.__name__.removeprefix("check_"), cheat))
    assert "breaks a rule of this exercise: your own code: no calls to lesson 02's loops" in msg, msg
    assert f"found:    it called {called} ×1" in msg and "next:" in msg, msg
