"""The explorers of lessons 02, 04, 05 and 08: what each pure function says to draw is right (against F.unfold,
softmax and SDPA, a counted tiled loop, the measured time), and the widget layer redraws, keeps its controls in
range, stops a measurement, and leaves a PNG for viewers without widgets."""

from __future__ import annotations

import base64
import itertools
import math
import threading
import time

import matplotlib
import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from twoprim.topics import attention, explorers, gemm, gemm_shapes, gemm_tiles
from twoprim.topics import convolution as conv

matplotlib.use("Agg")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _shown_png(explorer) -> bytes:
    """The PNG the explorer's Output widget holds now (what JupyterLab draws)."""
    (output,) = explorer.output.outputs
    return base64.b64decode(output["data"]["image/png"])


# ---- GEMM tiling

TILING_CASES = [(20, 24, 16, 8), (7, 5, 11, 3), (13, 1, 17, 4), (8, 8, 8, 8), (1, 1, 1, 1), (9, 10, 3, 32)]


@pytest.mark.parametrize("M, N, K, tile", TILING_CASES)
def test_tiling_feeding_tiles_sum_to_each_c_tile_and_cover_c_once(M, N, K, tile):
    gen = torch.Generator().manual_seed(M * 100 + N)
    A, B = torch.randn(M, K, dtype=torch.float64, generator=gen), torch.randn(K, N, dtype=torch.float64, generator=gen)
    C = A @ B
    covered = torch.zeros(M, N, dtype=torch.int64)
    first = gemm_tiles.tiling_view(M, N, K, tile)
    for row, col in itertools.product(range(len(first.row_blocks)), range(len(first.col_blocks))):
        view = gemm_tiles.tiling_view(M, N, K, tile, row, col)
        (r0, r1), (c0, c1) = view.c_tile
        assert len(view.a_tiles) == len(view.b_tiles) == math.ceil(K / tile)
        total = sum(
            (
                A[a0:a1, k0:k1] @ B[k2:k3, b0:b1]
                for ((a0, a1), (k0, k1)), ((k2, k3), (b0, b1)) in zip(view.a_tiles, view.b_tiles, strict=True)
            ),
            torch.zeros_like(C[r0:r1, c0:c1]),
        )
        assert torch.allclose(total, C[r0:r1, c0:c1]), f"C tile ({row}, {col}) of {M}×{N}×{K}, tile {tile}"
        covered[r0:r1, c0:c1] += 1
    assert bool((covered == 1).all()), "the C tiles must cover every element of C exactly once"


@pytest.mark.parametrize("M, N, K, tile", TILING_CASES)
def test_tiling_loads_match_a_counted_tiled_loop(M, N, K, tile):
    a_loads, b_loads = torch.zeros(M, K, dtype=torch.int64), torch.zeros(K, N, dtype=torch.int64)
    for i0 in range(0, M, tile):  # the tiled loop of matmul_tiled: every C tile, every k-tile
        for j0 in range(0, N, tile):
            for k0 in range(0, K, tile):
                a_loads[i0 : i0 + tile, k0 : k0 + tile] += 1
                b_loads[k0 : k0 + tile, j0 : j0 + tile] += 1
    loads = gemm_tiles.tiling_view(M, N, K, tile).loads
    assert loads["tiled"] == int(a_loads.sum() + b_loads.sum())
    assert loads["A element loaded, tiled"] == int(a_loads.max()) == int(a_loads.min())
    assert loads["B element loaded, tiled"] == int(b_loads.max()) == int(b_loads.min())
    assert loads["untiled"] == 2 * M * N * K and loads["untiled per C element"] == 2 * K  # one dot per element
    assert loads["tiled per C element"] == pytest.approx(loads["tiled"] / (M * N))
    if M % tile == 0 and N % tile == 0:
        assert loads["tiled per C element"] == pytest.approx(2 * K / tile)


def test_tiling_bad_input_says_what_to_change():
    with pytest.raises(ValueError, match="tile must be a positive integer, got 0"):
        gemm_tiles.tiling_view(4, 4, 4, 0)
    with pytest.raises(ValueError, match=r"tile \(3, 0\) is outside C's 3 × 3 tiles of 8×8; pick a row below 3"):
        gemm_tiles.tiling_view(20, 24, 16, 8, row=3)


# ---- im2col

IM2COL_CASES = [
    dict(kernel_size=k, stride=s, padding=p, dilation=d)
    for k, s, p, d in itertools.product((1, 2, 3), (1, 2), (0, 1, 2), (1, 2))
]


@pytest.mark.parametrize("case", IM2COL_CASES, ids=lambda c: "k{kernel_size}s{stride}p{padding}d{dilation}".format(**c))
def test_im2col_highlighted_patch_is_the_matching_unfold_column(case):
    x = torch.randn(1, 3, 6, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    cols = F.unfold(x, case["kernel_size"], dilation=case["dilation"], padding=case["padding"], stride=case["stride"])
    Hout, Wout = (
        conv.out_size(n, case["kernel_size"], case["stride"], case["padding"], case["dilation"]) for n in (6, 7)
    )
    view = None
    for i, j in itertools.product(range(Hout), range(Wout)):
        view = conv.im2col_view(**case, position=(i, j), x=x, out_channels=5)
        assert view.out_hw == (Hout, Wout) and view.column == i * Wout + j
        assert torch.equal(view.patch, cols[0, :, view.column]), f"output ({i}, {j})"
        # the outlined cells are the numbers of the column
        for (c, r, s), value in zip(view.field, view.patch, strict=True):
            inside = 0 <= r < 6 and 0 <= s < 7
            assert float(value) == (float(x[0, c, r, s]) if inside else 0.0)
    k = case["kernel_size"]
    assert view is not None  # (the output has at least one position)
    assert view.gemm == (5, Hout * Wout, 3 * k * k)  # (O, N·Hout·Wout, C·kh·kw), recorded from the reference conv


def test_im2col_default_input_and_a_kernel_that_does_not_fit():
    view = conv.im2col_view(3, padding=1, position=(0, 0))
    assert tuple(view.x.shape) == (1, 2, 5, 5) and view.out_hw == (5, 5)
    assert view.patch.tolist()[:3] == [0.0, 0.0, 0.0] and view.patch.tolist()[4] == 1.0  # padding row, then x[0,0,0]
    with pytest.raises(ValueError, match="no output position. Use a smaller kernel or dilation, or more padding"):
        conv.im2col_view(4, dilation=3)
    with pytest.raises(ValueError, match=r"output position \(3, 0\) is outside the 3 × 3 output"):
        conv.im2col_view(3, position=(3, 0))


# ---- attention


@pytest.mark.parametrize("head", attention.HEADS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("temperature", [0.1, 1.0, 10.0])
def test_attention_weights_are_the_softmax_of_the_scaled_scores_and_match_sdpa(head, causal, temperature):
    view = attention.attention_view(head, causal, temperature)
    S, D = view.q.shape
    assert len(attention.SENTENCE) == S
    assert torch.allclose(view.weights.sum(-1), torch.ones(S, dtype=torch.float64))
    if causal:
        future = torch.ones(S, S, dtype=torch.bool).triu(1)
        assert bool((view.weights[future] == 0).all()), "the causal mask must give every later key weight 0"
        assert bool(torch.isinf(view.scores[future]).all())
    else:
        assert bool((view.weights > 0).all())
    expected = torch.softmax(
        view.q @ view.k.T / (math.sqrt(D) * temperature)
        + (torch.zeros(S, S).masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), -math.inf) if causal else 0),
        dim=-1,
    )
    assert torch.allclose(view.weights, expected)
    sdpa = F.scaled_dot_product_attention(
        view.q, view.k, view.v, is_causal=causal, scale=1 / (math.sqrt(D) * temperature)
    )
    assert torch.allclose(view.out, sdpa)


def test_attention_heads_show_their_pattern_and_temperature_sharpens():
    tokens = attention.SENTENCE
    prev = attention.attention_view("previous token").weights
    assert [int(prev[i].argmax()) for i in range(1, len(tokens))] == list(range(len(tokens) - 1))
    same = attention.attention_view("same word", causal=False).weights
    assert set(same[4].topk(2).indices.tolist()) == {0, 4}  # the second "the" looks at both "the"
    avg = attention.attention_view("average").weights
    assert all(
        torch.allclose(avg[i, : i + 1], torch.full((i + 1,), 1 / (i + 1), dtype=torch.float64))
        for i in range(len(tokens))
    )
    peaks = [
        float(attention.attention_view("random (untrained)", False, t).weights.max(-1).values.mean())
        for t in (10.0, 1.0, 0.1)
    ]
    assert peaks[0] < peaks[1] < peaks[2], f"a lower temperature must sharpen the softmax, got {peaks}"


def test_attention_bad_input_says_what_to_change():
    with pytest.raises(ValueError, match="temperature must be positive"):
        attention.attention_view(temperature=0)
    with pytest.raises(ValueError, match="head must be one of 'previous token'"):
        attention.attention_view("induction")
    with pytest.raises(ValueError, match="query must be a token index from 0 to 9, got 10"):
        attention.attention_view(query=10)


# ---- GEMM shapes


def test_shape_point_counts_the_asked_flops_over_the_measured_time():
    point = gemm_shapes.shape_point(255, 255, 255, 0.002, multiple=64)
    assert point.run == (256, 256, 256)
    assert point.gflops == pytest.approx(2 * 255**3 / 0.002 / 1e9)
    assert point.intensity == pytest.approx(gemm.gemm_intensity(256, 256, 256))
    assert point.extra_flops == pytest.approx(256**3 / 255**3 - 1)
    assert (
        gemm_shapes.padded(4095, 8) == 4096
        and gemm_shapes.padded(4096, 8) == 4096
        and gemm_shapes.padded(1, 128) == 128
    )
    with pytest.raises(ValueError, match="seconds must be positive"):
        gemm_shapes.shape_point(1, 1, 1, 0.0)


def test_measure_gemm_reports_progress_and_stops_between_calls():
    seen = []
    result = gemm_shapes.measure_gemm(32, 16, 8, budget=0.0, min_calls=4, progress=lambda d, p: seen.append((d, p)))
    assert result is not None  # (no stop: a measurement)
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)] and result.calls == 4 and not result.stopped
    assert 0 < result.seconds < 1

    stop = threading.Event()
    result = gemm_shapes.measure_gemm(32, 16, 8, budget=10.0, progress=lambda d, p: d == 2 and stop.set(), stop=stop)
    assert result is not None and result.calls == 2 and result.stopped and result.planned > 2
    stop.set()  # set before the first timed call: nothing measured
    assert gemm_shapes.measure_gemm(8, 8, 8, stop=stop) is None


def test_shape_figure_places_each_point_at_its_intensity_and_measured_gflops():
    points = [gemm_shapes.shape_point(64, 64, 64, 1e-4), gemm_shapes.shape_point(1, 512, 512, 2e-4)]
    fig = gemm_shapes.shape_figure(points, peak=100.0, bandwidth_gbs=10.0, peak_label="peak")
    marks = {
        line.get_label(): (np.asarray(line.get_xdata())[0], np.asarray(line.get_ydata())[0])
        for line in fig.axes[0].lines
        if line.get_marker() not in ("None", None, "")
    }
    assert marks == {
        f"{n}. {p.label}: {p.gflops:,.3g} GFLOP/s": (p.intensity, p.gflops) for n, p in enumerate(points, start=1)
    }


# ---- the widget layer


def test_explorer_redraws_keeps_dependent_controls_in_range_and_shows_errors():
    tiling = gemm_tiles.tiling_explorer(M=20, N=24, K=16, tile=8)
    first = _shown_png(tiling)
    assert first.startswith(PNG_MAGIC) and first == tiling.first_png
    assert tiling.controls["row"].max == 2 and tiling.controls["col"].max == 2
    tiling.controls["col"].value = 2
    assert "C tile (0, 2) = C[0:8, 16:24]" in tiling.text and _shown_png(tiling) != first
    tiling.controls["N"].value = 9  # two tile columns left: the selected column is clamped to the last one
    assert tiling.controls["col"].max == 1 and tiling.controls["col"].value == 1
    assert "C[0:8, 8:9]" in tiling.text

    im2col = conv.im2col_explorer()
    im2col.controls["kernel_size"].value = 4
    im2col.controls["dilation"].value = 3
    assert "no output position" in im2col.text and "#b00020" in im2col.readout.value
    assert im2col.output.outputs == ()
    im2col.controls["dilation"].value = 1
    assert im2col.text.startswith("output (0, 0) of 2 × 2 -> column 0") and _shown_png(im2col).startswith(PNG_MAGIC)


def test_displayed_explorer_carries_the_widget_and_a_png_of_its_first_state_for_viewers_without_widgets():
    from IPython.core.formatters import DisplayFormatter
    from nbconvert import HTMLExporter

    explorer = attention.attention_explorer()
    data, _ = DisplayFormatter().format(explorer)  # what the kernel sends for the cell's last expression
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == explorer.widget.model_id
    assert base64.b64decode(data["image/png"]) == explorer.first_png
    explorer.controls["causal"].value = False
    assert _shown_png(explorer) != explorer.first_png and base64.b64decode(data["image/png"]) == explorer.first_png

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "explorers.attention_explorer()", outputs=[nbformat.v4.new_output("display_data", data=data)]
            )
        ]
    )
    page, _ = HTMLExporter().from_notebook_node(nb)  # a viewer without the widget state, like nbviewer
    assert data["image/png"] in page and "application/vnd.jupyter.widget-view+json" not in page


def test_shape_explorer_measures_each_change_in_a_thread_and_stops_on_request():
    explorer = gemm_shapes.shape_explorer(M=60, N=60, K=60, budget=0.01, bandwidth_gbs=10.0, peak=50.0)
    (point,) = explorer.points
    assert (point.M, point.N, point.K) == (60, 60, 60) and point.calls >= 3
    assert f"{point.gflops:.1f} GFLOP/s" in explorer.text and _shown_png(explorer) == explorer.first_png

    explorer.controls["multiple"].value = 16  # measured as asked and padded to 64: two new points
    explorer.wait(30)
    asked, padded = explorer.points[1:]
    assert asked.run == (60, 60, 60) and padded.run == (64, 64, 64) and "padding adds 21.36% FLOPs" in explorer.text
    assert _shown_png(explorer) != explorer.first_png and explorer.stop_button.disabled

    explorer.budget = 60.0  # a measurement far longer than the test: only Stop ends it
    explorer.controls["M"].value = 512
    deadline = time.monotonic() + 30
    while explorer.progress.value < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not explorer.stop_button.disabled, "the Stop button must be enabled while a measurement runs"
    started = time.monotonic()
    explorer.stop_button.click()
    explorer.wait(30)
    assert time.monotonic() - started < 5, "Stop must end the measurement after the call that is running"
    assert explorer.points[-1].stopped and "STOPPED after" in explorer.text


# ---- released notebooks: the names they read from the old modules


def test_every_name_a_released_notebook_reads_from_explorers_or_layers_still_resolves_to_its_new_home():
    """Lessons as released say `explorers.tiling_explorer(...)` and `layers.format_table(...)`: each such name (found
    in every notebook of lessons/, exercises/ and solutions/) resolves, to the very object of its new home."""
    import importlib
    import re

    from twoprim.config import ROOT
    from twoprim.topics import layers_as_gemms as layers

    read = {"explorers": set(), "layers": set()}
    for path in [
        p for folder in ("lessons", "exercises", "solutions") for p in sorted((ROOT / folder).rglob("*.ipynb"))
    ]:
        for cell in nbformat.read(str(path), as_version=4).cells:
            if cell.cell_type == "code":
                for module, name in re.findall(r"\b(explorers|layers)\.([A-Za-z_]\w*)", cell.source):
                    read[module].add(name)
    assert {"tiling_explorer", "im2col_explorer", "attention_explorer", "shape_explorer"} <= read["explorers"]
    assert {"format_table", "device_tflops", "round_mantissa"} <= read["layers"]
    for short, module in (("explorers", explorers), ("layers", layers)):
        for name in read[short]:
            assert hasattr(module, name), f"{short}.{name}, read by a released notebook, is gone"
        for name, home in module.MOVED.items():
            assert getattr(module, name) is getattr(importlib.import_module(home), name)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = explorers.nope
