"""ex07_mlx: every check explains a wrong value, shape and dtype; every stated rule catches its forbidden spelling;
bad input gets a named error; the MLX tools (tracing, pending graphs, drawing, timing) do what the lesson says."""

from __future__ import annotations

import math
from collections import Counter

import matplotlib
import nbformat
import numpy as np
import pytest
import torch

from twoprim.assignments import ex07_mlx as ex07
from twoprim.config import ROOT
from twoprim.topics import mlx as mlx_tools

from .conftest import fails, solution_namespace
from .visible_rules import assert_rule_is_visible, named

matplotlib.use("Agg")
mx = pytest.importorskip("mlx.core", reason="ex07_mlx needs MLX (mlx[cpu] on Linux is in the course environment)")
nn = pytest.importorskip("mlx.nn")


@pytest.fixture(scope="module")
def sol07():
    """The ex07_mlx solution functions (mlx_dot, mlx_gemm, mlx_attention, mlx_op_counts, lazy_answer)."""
    return solution_namespace("ex07_mlx")


CHECKS = {"mlx_dot": ex07.check_mlx_dot, "mlx_gemm": ex07.check_mlx_gemm, "mlx_attention": ex07.check_mlx_attention}


# ---- passing


@pytest.mark.parametrize("name", [*CHECKS, "mlx_op_counts", "lazy_answer"])
def test_solution_passes_and_says_what_it_proved(sol07, name, capsys):
    check = {**CHECKS, "mlx_op_counts": ex07.check_mlx_op_counts, "lazy_answer": ex07.check_lazy_answer}[name]
    check(sol07[name], hidden=3)
    out = capsys.readouterr().out
    assert out.startswith(f"✔ ex07_mlx-{name}: ") and "passed" in out
    assert "Grading runs 3 more hidden checks on this function" in out


def test_tried_line_describes_mlx_arrays(sol07):
    msg = fails(ex07.check_mlx_dot, lambda x, w: mx.inner(x, w) + 1.0)
    assert "tried:    <lambda>(MLX float32 array of shape (3,), MLX float32 array of shape (3,))" in msg


def test_tolerances_hold_for_the_solution_on_many_random_cases(sol07):
    """Guards against flaky tolerances: many shapes, seeds and dtypes, the large-score cases included."""
    for seed in range(3):
        ex07.check_mlx_attention(
            sol07["mlx_attention"],
            ex07.attention_cases(
                [(2, 3, 7, 13), (1, 2, 64, 64), (1, 1, 31, 1), (2, 2, 17, 8)],
                ["float16", "bfloat16", "float32", "float64"],
                seed=seed,
            ),
        )
        ex07.check_mlx_attention(
            sol07["mlx_attention"],
            ex07.attention_cases(
                [(1, 2, 33, 16), (2, 1, 17, 7)], ["float16", "float32", "float64"], score_scale=10.0, seed=10 + seed
            ),
        )
        ex07.check_mlx_gemm(
            sol07["mlx_gemm"],
            ex07.gemm_cases(
                [(1, 1, 1), (7, 13, 5), (64, 32, 300), (3, 4, 2000)],
                ["float16", "bfloat16", "float32", "float64"],
                scalars=[(0.75, -1.5), (2.0, 0.5), (-1.0, 1.0)],
                seed=seed,
            ),
        )
        ex07.check_mlx_dot(
            sol07["mlx_dot"],
            ex07.vector_cases([1, 97, 4099, 100_000], ["float16", "bfloat16", "float32", "float64"], seed=seed),
        )


# ---- a wrong value, a wrong shape, a wrong dtype: every array check explains each


def _wrong(right, how):
    def wrong(*args, **kwargs):
        out = right(*args, **kwargs)
        if how == "value":
            return out * 1.5 + 1.0
        if how == "shape":
            return out[None]
        return out.astype(mx.float16 if out.dtype != mx.float16 else mx.float32)

    wrong.__name__ = right.__name__
    return wrong


@pytest.mark.parametrize("how", ["value", "shape", "dtype"])
@pytest.mark.parametrize("name", list(CHECKS))
def test_each_check_explains_wrong_value_shape_and_dtype(sol07, name, how):
    msg = fails(CHECKS[name], _wrong(sol07[name], how))
    assert msg.startswith(f"✘ ex07_mlx-{name}: wrong result.")
    assert "case:" in msg and "tried:" in msg and "expected:" in msg and "next:" in msg
    assert {"value": "error:", "shape": "expected shape", "dtype": "(the input's dtype)"}[how] in msg
    if how == "value":
        assert "MLX array of shape" in msg and "tolerance abs" in msg


@pytest.mark.parametrize("name", list(CHECKS))
def test_returning_torch_or_numpy_is_reported(sol07, name):
    right = sol07[name]

    def as_numpy(*args, **kwargs):
        return np.array(right(*args, **kwargs))

    msg = fails(CHECKS[name], as_numpy)
    assert "a NumPy float" in msg and "should be a float32 MLX array" in msg


@pytest.mark.parametrize("name", [*CHECKS, "mlx_op_counts", "lazy_answer"])
def test_not_written_yet_says_so(name):
    check = {**CHECKS, "mlx_op_counts": ex07.check_mlx_op_counts, "lazy_answer": ex07.check_lazy_answer}[name]

    def stub(*args, **kwargs):
        raise NotImplementedError()

    stub.__name__ = name
    msg = fails(check, stub)
    assert f"`{name}` is not written yet" in msg


@pytest.mark.parametrize("name", [*CHECKS, "mlx_op_counts", "lazy_answer"])
def test_a_function_returning_nothing_fails_with_a_clear_message(name):
    check = {**CHECKS, "mlx_op_counts": ex07.check_mlx_op_counts, "lazy_answer": ex07.check_lazy_answer}[name]
    msg = fails(check, lambda *args, **kwargs: None)
    assert "wrong result" in msg and "NoneType None" in msg


# ---- the rules each exercise states, caught on what the function built


def _attention(q, k, v, causal=False, *, softmax=None, scale=None):
    S, D = q.shape[-2], q.shape[-1]
    s = (q @ k.swapaxes(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(D))
    if causal:
        s = mx.where(mx.arange(S)[:, None] >= mx.arange(S)[None, :], s, -mx.inf)
    if softmax is not None:
        return softmax(s) @ v
    e = mx.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def test_dot_as_multiply_and_sum_breaks_the_one_matmul_rule():
    msg = fails(ex07.check_mlx_dot, lambda x, w: (x * w).sum())
    assert "breaks a rule of this exercise: one MLX dot product: a single Matmul primitive" in msg
    assert "found:    it built no GEMM primitive (Matmul or AddMM); its graph: Multiply ×1, Reduce ×1" in msg


def test_dot_that_evaluates_inside_cannot_be_traced():
    msg = fails(ex07.check_mlx_dot, lambda x, w: mx.array(mx.inner(x, w).item(), dtype=x.dtype))
    assert "it evaluates an array while building its result" in msg and "return the lazy MLX array" in msg


def test_dot_computed_in_torch_is_caught():
    def via_torch(x, w):
        return mx.array(torch.dot(torch.from_numpy(np.array(x)), torch.from_numpy(np.array(w))).numpy())

    msg = fails(ex07.check_mlx_dot, via_torch)
    assert "computed with MLX operations" in msg and "it computed with torch" in msg


def test_gemm_ignoring_beta_zero_semantics_gets_the_blas_hint():
    msg = fails(ex07.check_mlx_gemm, lambda alpha, A, B, beta, C: alpha * (A @ B) + beta * C)
    assert "C all NaN and beta = 0" in msg and "NaN where a number was expected" in msg
    assert "BLAS does not read C at all" in msg


def test_gemm_modifying_c_in_place_is_caught():
    def in_place(alpha, A, B, beta, C):
        C *= beta
        C += alpha * (A @ B)
        return C

    msg = fails(ex07.check_mlx_gemm, in_place)
    assert "returns a new array and leaves C unchanged" in msg and "modified in place" in msg


def test_gemm_with_two_gemm_primitives_is_caught():
    def two(alpha, A, B, beta, C):
        return alpha * (A @ B) + beta * (C @ mx.eye(C.shape[1], dtype=C.dtype)) if beta else alpha * (A @ B)

    msg = fails(ex07.check_mlx_gemm, two)
    assert "one GEMM primitive (AddMM or Matmul)" in msg and "it built 2 GEMM primitives where 1 is enough" in msg


@pytest.mark.parametrize(
    "softmax", [lambda s: mx.softmax(s, axis=-1), lambda s: nn.softmax(s, axis=-1)], ids=["mx.softmax", "nn.softmax"]
)
def test_attention_with_a_builtin_softmax_is_caught(softmax):
    msg = fails(ex07.check_mlx_attention, lambda q, k, v, causal=False: _attention(q, k, v, causal, softmax=softmax))
    assert "attention written with matmuls and your own stable softmax" in msg and "it built Softmax" in msg


def test_attention_with_mlx_fast_sdpa_is_caught():
    def fast(q, k, v, causal=False):
        return mx.fast.scaled_dot_product_attention(
            q, k, v, scale=1 / math.sqrt(q.shape[-1]), mask="causal" if causal else None
        )

    msg = fails(ex07.check_mlx_attention, fast)
    assert "breaks a rule of this exercise" in msg
    assert "Softmax" in msg or "ScaledDotProductAttention" in msg


def test_attention_looping_over_heads_is_caught():
    def loop(q, k, v, causal=False):
        B, H = q.shape[:2]
        return mx.stack(
            [
                mx.stack(
                    [
                        _attention(q[b, h][None, None], k[b, h][None, None], v[b, h][None, None], causal)[0, 0]
                        for h in range(H)
                    ]
                )
                for b in range(B)
            ]
        )

    msg = fails(ex07.check_mlx_attention, loop)
    assert "two batched GEMMs" in msg and "it built 4 GEMM primitives where 2 are enough" in msg


def test_attention_with_an_unstable_softmax_overflows_on_large_scores():
    def unstable(q, k, v, causal=False):
        return _attention(q, k, v, causal, softmax=lambda s: mx.exp(s) / mx.exp(s).sum(axis=-1, keepdims=True))

    msg = fails(ex07.check_mlx_attention, unstable)
    assert "(large scores)" in msg and "NaN where a number was expected" in msg


@pytest.mark.parametrize("scale", [1.0, 0.01], ids=["no scaling", "a wrong scale"])
def test_attention_scaling_bugs_are_caught(scale):
    msg = fails(ex07.check_mlx_attention, lambda q, k, v, causal=False: _attention(q, k, v, causal, scale=scale))
    assert "wrong result" in msg and "first wrong element" in msg


def test_attention_without_the_causal_mask_is_caught():
    msg = fails(ex07.check_mlx_attention, lambda q, k, v, causal=False: _attention(q, k, v, False))
    assert "wrong result" in msg and "causal=True" in msg


def test_op_counts_using_the_course_counter_is_caught():
    msg = fails(ex07.check_mlx_op_counts, lambda fun, *args: mlx_tools.primitive_counts(fun, *args))
    assert "count with mx.export_function yourself" in msg
    assert "it called twoprim.topics.mlx.primitive_counts" in msg


def test_op_counts_counting_every_entry_gets_the_primitive_hint():
    def every_entry(fun, *args):
        counts = Counter()
        mx.export_function(lambda e: counts.update([e.get("name", e["type"])]), fun, *args)
        return counts

    msg = fails(ex07.check_mlx_op_counts, every_entry)
    assert "extra:    constants ×1, inputs ×1, keyword_inputs ×1, outputs ×1" in msg
    assert "count only those whose entry['type'] == 'primitive'" in msg


def test_op_counts_from_a_pending_graph_gets_the_export_hint():
    def from_dot(fun, *args):
        out = fun(*args)
        return mlx_tools.parse_dot(_dot(*(out if isinstance(out, (list, tuple)) else [out]))).counts()

    msg = fails(ex07.check_mlx_op_counts, from_dot)
    assert "missing:" in msg and "names of a pending graph" in msg


def _dot(*arrays):
    import io

    out = io.StringIO()
    mx.export_to_dot(out, *arrays)
    return out.getvalue()


def test_op_counts_returning_a_list_is_reported():
    def as_list(fun, *args):
        names = []
        mx.export_function(lambda e: e["type"] == "primitive" and names.append(e["name"]), fun, *args)
        return names

    msg = fails(ex07.check_mlx_op_counts, as_list)
    assert "but mlx_op_counts returns a Counter of primitive names" in msg


def test_op_counts_expected_value_is_measured_at_check_time(sol07, monkeypatch):
    """Never hard-coded: if MLX traced differently, the expected counts would follow."""
    real = mlx_tools.primitive_counts
    monkeypatch.setattr(mlx_tools, "primitive_counts", lambda fun, *a: real(fun, *a) + Counter({"Imagined": 1}))
    msg = fails(ex07.check_mlx_op_counts, sol07["mlx_op_counts"])
    assert "missing:  Imagined ×1" in msg


def test_every_hidden_op_count_subject_traces():
    for case in ex07.op_count_cases(list(ex07.OP_COUNT_SUBJECTS)):
        fun, args = case.args[0].build()
        counts = mlx_tools.primitive_counts(fun, *args)
        assert counts and sum(counts.values()) > 0, case.label
    lazy = ex07.op_count_cases(["lazy_linear"])[0].args[0].build()
    assert mlx_tools.primitive_counts(*[lazy[0], *lazy[1]])["RandomBits"] > 0


# ---- the short answer


def test_lazy_answer_wrong_value_form_and_key_are_reported(sol07):
    right = sol07["lazy_answer"]()
    msg = fails(ex07.check_lazy_answer, lambda: {**right, "pending_after_eval": 3})
    assert "expected: 0" in msg and "got:      pending_after_eval = 3" in msg
    msg = fails(ex07.check_lazy_answer, lambda: (0, 84))
    assert "it returns a dict with the keys" in msg
    msg = fails(ex07.check_lazy_answer, lambda: {k: v for k, v in right.items() if k != "pending_before_eval"})
    assert "without the key 'pending_before_eval'" in msg
    msg = fails(ex07.check_lazy_answer, lambda: {**right, "pending_with_parameters_evaluated": 25.0})
    assert "a whole number" in msg
    hidden = ex07.lazy_cases(["pending_before_eval", "pending_with_parameters_evaluated"])
    msg = fails(ex07.check_lazy_answer, lambda: {**right, "pending_before_eval": 3}, hidden)
    assert "pending_before_eval = 3" in msg


def test_lazy_measurements_follow_mlx_semantics():
    m = ex07.lazy_measurements()
    assert m["pending_after_eval"] == 0
    assert m["pending_before_eval"] > m["pending_with_parameters_evaluated"] > 0  # the initialisation was pending


def test_the_notebook_shows_exactly_the_scenario_grading_measures():
    nb = nbformat.read(str(ROOT / "solutions" / "ex07_mlx" / "ex07_mlx.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex07_mlx-lazy_scenario")
    assert cell.source.strip() == ex07.LAZY_SCENARIO.strip()


# ---- bad input to the solution functions


def test_dot_mismatched_lengths_name_both_shapes(sol07):
    with pytest.raises(ValueError, match=r"mlx_dot: x has shape \(3,\), w has shape \(4,\); .*same length"):
        sol07["mlx_dot"](mx.ones(3), mx.ones(4))


def test_dot_broadcastable_shapes_are_rejected(sol07):
    with pytest.raises(ValueError, match="same length"):
        sol07["mlx_dot"](mx.ones(1), mx.ones(5))


@pytest.mark.parametrize(
    "value, hint",
    [
        (torch.ones(3), r"got Tensor \(convert it with mx.array\(t.numpy\(\)\)"),
        (np.ones(3), r"got ndarray \(convert it with mx.array"),
        ([1.0, 2.0, 3.0], r"got list \(wrap it with mx.array"),
    ],
)
def test_non_mlx_input_says_how_to_convert(sol07, value, hint):
    with pytest.raises(TypeError, match=rf"mlx_dot: x must be an MLX array \(mlx.core.array\), {hint}"):
        sol07["mlx_dot"](value, mx.ones(3))


def test_integer_and_mixed_dtypes_are_rejected(sol07):
    with pytest.raises(TypeError, match=r"must be floating point .* got int32; convert it with x.astype"):
        sol07["mlx_dot"](mx.arange(3), mx.ones(3))
    with pytest.raises(TypeError, match="x is float32 but w is float16"):
        sol07["mlx_dot"](mx.ones(3), mx.ones(3, dtype=mx.float16))


def test_gemm_bad_shapes_and_scalars(sol07):
    gemm = sol07["mlx_gemm"]
    with pytest.raises(ValueError, match=r"A has shape \(2, 3\) and B has shape \(4, 5\); A's columns \(K = 3\)"):
        gemm(1.0, mx.ones((2, 3)), mx.ones((4, 5)), 0.0, mx.ones((2, 5)))
    with pytest.raises(ValueError, match=r"A @ B has shape \(2, 5\) but C has shape \(5,\)|C must be a 2-D matrix"):
        gemm(1.0, mx.ones((2, 3)), mx.ones((3, 5)), 1.0, mx.ones((5,)))
    with pytest.raises(ValueError, match=r"A @ B has shape \(2, 5\) but C has shape \(1, 5\); .*no broadcasting"):
        gemm(1.0, mx.ones((2, 3)), mx.ones((3, 5)), 1.0, mx.ones((1, 5)))
    with pytest.raises(TypeError, match=r"alpha must be a Python number .* got array of shape \(1,\)"):
        gemm(mx.ones(1), mx.ones((2, 3)), mx.ones((3, 5)), 1.0, mx.ones((2, 5)))


def test_attention_bad_shapes_and_causal(sol07):
    att = sol07["mlx_attention"]
    q = mx.ones((1, 2, 5, 8))
    with pytest.raises(ValueError, match=r"q must be 4-D, got shape \(5, 8\)"):
        att(mx.ones((5, 8)), q, q)
    with pytest.raises(ValueError, match=r"q has shape \(1, 2, 5, 8\), k \(1, 2, 6, 8\), v \(1, 2, 5, 8\)"):
        att(q, mx.ones((1, 2, 6, 8)), q)
    with pytest.raises(TypeError, match="causal must be True or False, got int"):
        att(q, q, q, causal=1)


def test_op_counts_bad_input(sol07):
    with pytest.raises(TypeError, match="fun must be a function, got array"):
        sol07["mlx_op_counts"](mx.ones(3), mx.ones(3))
    with pytest.raises(TypeError, match="argument 1 after fun is float; mx.export_function traces with MLX arrays"):
        sol07["mlx_op_counts"](lambda x: x * 2, 2.0)


# ---- twoprim.topics.mlx


def test_primitive_counts_and_gemm_count():
    A, B, C = mx.ones((3, 4)), mx.ones((4, 5)), mx.ones((3, 5))
    counts = mlx_tools.primitive_counts(lambda C, A, B: mx.addmm(C, A, B, alpha=2.0, beta=0.5) + A @ B, C, A, B)
    assert counts["AddMM"] == 1 and counts["Matmul"] == 1 and mlx_tools.gemm_count(counts) == 2


def test_trace_graph_has_inputs_constants_outputs_and_primitives():
    layer = nn.Linear(4, 3)
    mx.eval(layer.parameters())
    g = mlx_tools.trace(layer, mx.ones((2, 4)))
    kinds = Counter(n.kind for n in g.nodes.values())
    assert kinds["input"] == 1 and kinds["constant"] == 2 and kinds["output"] == 1
    assert g.counts() == Counter({"AddMM": 1, "Transpose": 1, "Broadcast": 1})
    addmm = next(n.id for n in g.primitives() if n.label == "AddMM")
    assert sum(1 for a, b in g.edges if b == addmm) == 3  # x, Wᵀ and the broadcast bias


def test_pending_counts_before_and_after_eval():
    A, B = mx.ones((4, 4)), mx.ones((4, 4))
    mx.eval(A, B)
    C = mx.maximum(A @ B, 0.0)
    assert mlx_tools.pending_counts(C) == Counter({"Matmul": 1, "Broadcast": 1, "Maximum": 1})
    mx.eval(C)
    assert mlx_tools.pending_counts(C) == Counter()


def test_parse_dot_reads_named_arrays_sources_and_multi_output_primitives():
    x = mx.ones((2, 4))
    mx.eval(x)
    a, b = mx.split(x * 2.0, 2, axis=1)
    g = mlx_tools.parse_dot(mlx_tools.dot_source(a + 1.0, b, x=x))
    assert g.nodes["x"].kind == "source"
    split = next(n.id for n in g.primitives() if n.label == "Split")
    assert sum(1 for s, _ in g.edges if s == split) == 2
    assert g.counts()["Split"] == 1 and g.counts()["Multiply"] == 1


def test_compiled_primitive_name_splits_into_its_ops():
    f = mx.compile(lambda x: mx.maximum(x * 2.0 + 1.0, 0.0))
    x = mx.ones((8,))
    mx.eval(x)
    (label,) = mlx_tools.pending_counts(f(x))
    assert label.startswith("Compiled")
    assert [op for op in mlx_tools.fused_ops(label) if op != "Broadcast"] == ["Multiply", "Add", "Maximum"]
    assert mlx_tools.fused_ops("CompiledAsTypeErfInvAddMM") == ["AsType", "ErfInv", "AddMM"]


def test_draw_and_render_dot_make_a_picture_of_every_primitive():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    mx.eval(model.parameters())
    x = mx.ones((3, 8))
    fig = mlx_tools.draw(mlx_tools.trace(model, x), title="t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("AddMM") == 2 and "Maximum" in texts and "input (3, 8)" in texts
    fig, renderer = mlx_tools.render_dot(mlx_tools.dot_source(model(x)))
    assert ("Graphviz" in renderer) or any(t.get_text().startswith("Compiled: 3 ops") for t in fig.axes[0].texts)


def test_watching_records_only_inside_the_block():
    f, x = (lambda x: x * 2), mx.ones(2)
    with mlx_tools.watching() as used:
        mlx_tools.primitive_counts(f, x)
    mlx_tools.primitive_counts(f, x)
    assert used == ["twoprim.topics.mlx.primitive_counts"]


def test_build_is_cheap_and_eval_does_the_work():
    A = mx.ones((256, 256))
    mx.eval(A)
    t = mlx_tools.build_and_eval_seconds(lambda: A @ A @ A, repeats=3)
    assert 0 < t["build"] < t["eval"]


def test_blas_libraries_finds_the_reference_blas_on_linux():
    import platform

    found = mlx_tools.blas_libraries()
    if platform.system() == "Linux":
        assert any("libblas" in f for f in found), found


def test_format_counts_orders_by_count_then_gemm_first():
    assert (
        mlx_tools.format_counts(Counter({"Transpose": 2, "AddMM": 2, "Maximum": 1}))
        == "AddMM ×2, Transpose ×2, Maximum ×1"
    )
    assert mlx_tools.format_counts(Counter()) == "(none)"


# ---- lesson 07 on a machine without MLX: every MLX cell says what it skips, nothing fails


@pytest.mark.notebook
def test_lesson_07_runs_without_mlx_and_says_what_it_skips(tmp_path, monkeypatch):
    from twoprim.core.notebooks import execute

    fake = tmp_path / "mlx"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise ImportError("hidden by test_ex07")\n')
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the kernel imports this `mlx` first, and it fails
    nb, _ = execute(ROOT / "lessons" / "07_mlx.ipynb", timeout=300)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "mlx  not installed" in text
    mlx_cells = [c for c in nb.cells if c.cell_type == "code" and "backends.mlx(" in c.source]
    for cell in mlx_cells:
        said = "".join(o.get("text", "") for o in cell.outputs)
        assert "MLX is not available on this machine" in said and "Skipping" in said, cell.source[:80]


# ---- every rule ex07 states has a visible case (issue #43): a wrong answer breaking only that rule passed the visible
# check before its case was added, and fails it now with a message about its own mistake


def _gemm_array_scalars(alpha, A, B, beta, C):
    """Wrong: alpha and beta as MLX arrays (float32), which promote a float16 result to float32."""
    if beta == 0:
        return mx.array(alpha) * (A @ B)
    return mx.array(alpha) * (A @ B) + mx.array(beta) * C


def _attention_array_scale(q, k, v, causal=False):
    """Wrong: the scale 1/√D as an MLX array (float32), which promotes float16 scores to float32."""
    S, D = q.shape[-2], q.shape[-1]
    scores = (q @ k.swapaxes(-1, -2)) * mx.array(1.0 / math.sqrt(D))
    if causal:
        scores = mx.where(mx.arange(S)[:, None] >= mx.arange(S)[None, :], scores, -mx.inf)
    weights = mx.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize(
    "check, wrong",
    [
        (ex07.check_mlx_gemm, named("mlx_gemm", _gemm_array_scalars)),
        (ex07.check_mlx_attention, named("mlx_attention", _attention_array_scale)),
    ],
    ids=["gemm", "attention"],
)
def test_float16_keeps_its_dtype_in_the_visible_checks(check, wrong):
    assert_rule_is_visible(
        check, wrong, lambda c: "float16" in c.label, "dtype float32, expected float16 (the input's dtype)"
    )
