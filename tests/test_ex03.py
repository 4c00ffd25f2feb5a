"""ex03_layers: every check explains a wrong value, shape and dtype; every stated rule catches what it rules out, by
recording what ran; bad input to the solution functions gets a named error; the layers helpers are right."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from twoprim.assignments import ex03_layers as ex03
from twoprim.core import checks, timing
from twoprim.topics import layers_as_gemms as layers

from .conftest import check_of, fails, solution_namespace
from .visible_rules import assert_rule_is_visible, ignores_strides, named

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def sol():
    """The ex03_layers solution functions."""
    return solution_namespace("ex03_layers")


# (the solutions pass; a wrong value, shape or dtype is explained: tests/test_check_messages.py)


def test_qkv_must_return_three_tensors(sol):
    msg = fails(ex03.check_qkv_projection, lambda x, Wq, Wk, Wv: torch.cat(sol["qkv_projection"](x, Wq, Wk, Wv), -1))
    assert "but qkv_projection returns three tensors (q, k, v)" in msg


def test_not_written_yet_says_so():
    def linear(x, W, b):
        raise NotImplementedError()

    assert "`linear` is not written yet" in fails(ex03.check_linear, linear)


# ---- every stated rule, caught on what ran


def _rows(x):
    return x.reshape(-1, x.shape[-1])


FORBIDDEN = {
    "linear": (lambda x, W, b: F.linear(x, W, b), "no torch.nn.functional.linear"),
    "qkv_projection": (
        lambda x, Wq, Wk, Wv: F.linear(x, torch.cat([Wq, Wk, Wv])).split([Wq.shape[0], Wk.shape[0], Wv.shape[0]], -1),
        "no torch.nn.functional.linear",
    ),
    "mlp": (
        lambda x, W1, b1, W2, b2: F.linear(torch.relu(F.linear(x, W1, b1)), W2, b2),
        "no torch.nn.functional.linear",
    ),
    "embedding_as_gemm": (lambda ids, table: table[ids], "no table[ids]"),
    "rnn_cell": (lambda x, h, W_ih, W_hh, b: torch.rnn_tanh_cell(x, h, W_ih, W_hh, b, None), "no nn.RNNCell"),
    "gnn_layer": (lambda adj, X, W: torch.linalg.multi_dot([adj, X, W]), "no torch.linalg.multi_dot"),
}


@pytest.mark.parametrize("name", list(FORBIDDEN))
def test_each_forbidden_shortcut_is_caught(name):
    fn, rule = FORBIDDEN[name]
    msg = fails(check_of("ex03_layers", name), fn)
    assert f"✘ ex03_layers-{name}: the answer breaks a rule of this exercise" in msg and rule in msg
    assert "found:    it called" in msg and "next:" in msg


def test_nn_linear_module_is_caught():
    def linear(x, W, b):
        layer = torch.nn.Linear(W.shape[1], W.shape[0], dtype=W.dtype)
        with torch.no_grad():
            layer.weight.copy_(W)
            layer.bias.copy_(b)
            return layer(x)

    assert "it called torch.nn.functional.linear" in fails(ex03.check_linear, linear)


def test_embedding_variants_of_a_gather_are_caught():
    for fn, op in [
        (lambda ids, t: F.embedding(ids, t), "torch.nn.functional.embedding"),
        (lambda ids, t: t.index_select(0, ids.reshape(-1)).reshape(*ids.shape, -1), "index_select"),
        (lambda ids, t: torch.stack([t[int(i)] for i in ids.reshape(-1)]).reshape(*ids.shape, -1), "aten.select"),
    ]:
        assert op in fails(ex03.check_embedding_as_gemm, fn)


def test_gather_hidden_behind_a_real_gemm_is_still_caught():
    def embedding_as_gemm(ids, table):
        one_hot = F.one_hot(ids.reshape(-1).long(), table.shape[0]).to(table.dtype)
        (one_hot @ table)  # the GEMM runs, but the answer comes from a gather
        return table[ids]

    assert "it called aten.index" in fails(ex03.check_embedding_as_gemm, embedding_as_gemm)


def test_f_one_hot_is_allowed_with_int64_ids(capsys):
    def embedding_as_gemm(ids, table):
        one_hot = F.one_hot(ids.reshape(-1).long(), table.shape[0]).to(table.dtype)  # (n, V)
        return (one_hot @ table).reshape(*ids.shape, table.shape[1])

    ex03.check_embedding_as_gemm(embedding_as_gemm)
    assert capsys.readouterr().out.startswith("✔")


def test_embedding_gemm_must_contract_over_the_vocabulary():
    def embedding_as_gemm(ids, table):  # the right rows, but from a gather and an identity GEMM over D
        rows = (ids.reshape(-1, 1) == torch.arange(table.shape[0])).to(table.dtype)
        picked = (rows[:, :, None] * table[None]).sum(1)  # no GEMM op: element-wise and a sum
        return (picked @ torch.eye(table.shape[1], dtype=table.dtype)).reshape(*ids.shape, table.shape[1])

    msg = fails(ex03.check_embedding_as_gemm, embedding_as_gemm)
    assert "one GEMM: the one-hot matrix (n, V) times the table (V, D)" in msg
    assert "this function needs one GEMM: (5, 10) @ (10, 4)" in msg


def test_linear_with_a_loop_over_rows_is_caught():
    msg = fails(
        ex03.check_linear, lambda x, W, b: torch.stack([r @ W.T + b for r in _rows(x)]).reshape(*x.shape[:-1], -1)
    )
    assert "it ran 6 GEMM ops" in msg and "this function needs one GEMM: (6, 5) @ (5, 4)" in msg


def test_matmul_on_a_non_contiguous_batch_is_caught_as_a_batched_gemm():
    msg = fails(ex03.check_linear, lambda x, W, b: x @ W.T + b)
    assert "x (2, 3, 5) first two dims swapped, non-contiguous" in msg
    assert "it ran bmm 2 × (3, 5) @ (5, 4): one call, but 2 separate GEMMs" in msg
    assert "torch.matmul runs a batched GEMM" in msg and "x.reshape(-1, in)" in msg


def test_einsum_linear_counts_as_one_gemm(capsys):
    ex03.check_linear(lambda x, W, b: torch.einsum("...i,oi->...o", x, W) + b)
    assert capsys.readouterr().out.startswith("✔")


def test_qkv_three_gemms_and_stacked_bmm_are_caught():
    msg = fails(ex03.check_qkv_projection, lambda x, Wq, Wk, Wv: (x @ Wq.T, x @ Wk.T, x @ Wv.T))
    assert "it ran 3 GEMM ops" in msg and "(5, 8) @ (8, 24)" in msg
    msg = fails(
        ex03.check_qkv_projection, lambda x, Wq, Wk, Wv: tuple(_rows(x) @ torch.stack([Wq, Wk, Wv]).transpose(1, 2))
    )
    assert "bmm 3 × (5, 8) @ (8, 8)" in msg and "torch.cat them into one 2-D" in msg


def test_mlp_needs_two_gemms(sol):
    linear = sol["linear"]

    def mlp(x, W1, b1, W2, b2):  # the first layer computed twice
        linear(x, W1, b1)
        return linear(torch.relu(linear(x, W1, b1)), W2, b2)

    assert "it ran 3 GEMM ops" in fails(ex03.check_mlp, mlp)


def test_rnn_accepts_two_gemms_or_one_fused(sol, capsys):
    ex03.check_rnn_cell(
        lambda x, h, W_ih, W_hh, b: torch.tanh(
            x.reshape(-1, x.shape[-1]) @ W_ih.T + h.reshape(-1, h.shape[-1]) @ W_hh.T + b
        ).reshape(h.shape)
    )
    ex03.check_rnn_cell(sol["rnn_cell"])
    assert capsys.readouterr().out.count("✔") == 2
    msg = fails(
        ex03.check_rnn_cell,
        lambda x, h, W_ih, W_hh, b: torch.tanh(
            torch.stack([r @ W_ih.T for r in _rows(x)]).reshape(*x.shape[:-1], -1) + h @ W_hh.T + b
        ),
    )
    assert "GEMM ops" in msg and "one GEMM per weight" in msg


@pytest.mark.parametrize(
    "order, wrong_case",
    [(lambda a, X, W: (a @ X) @ W, "cheaper: adj @ (X @ W)"), (lambda a, X, W: a @ (X @ W), "cheaper: (adj @ X) @ W")],
)
def test_gnn_in_the_costlier_order_is_caught_with_both_flop_counts(order, wrong_case):
    msg = fails(ex03.check_gnn_layer, order)
    assert "two GEMMs, in the cheaper order" in msg and wrong_case in msg
    assert msg.count("FLOPs") >= 2


def test_gnn_flops_of_both_orders():
    f = ex03.gnn_flops(10, 4, 2)
    assert f == {"(adj @ X) @ W": 2 * 100 * 4 + 2 * 10 * 4 * 2, "adj @ (X @ W)": 2 * 10 * 4 * 2 + 2 * 100 * 2}


def test_numpy_escape_is_caught():
    msg = fails(
        ex03.check_rnn_cell,
        lambda x, h, W_ih, W_hh, b: torch.tanh(
            torch.from_numpy(x.numpy() @ W_ih.numpy().T + h.numpy() @ W_hh.numpy().T + b.numpy())
        ),
    )
    assert "torch.Tensor.numpy" in msg


# ---- case builders make what their labels say


def test_case_builders_make_the_layouts_they_name():
    (case,) = ex03.linear_cases([((2, 3, 5), 4, "lead", "T")])
    x, W, b = case.args
    assert x.shape == (2, 3, 5) and not x.is_contiguous() and W.shape == (4, 5) and not W.is_contiguous()
    assert "first two dims swapped" in case.label and "transposed view" in case.label
    (case,) = ex03.rnn_cases([((4, 3), 6, "stride")])
    assert not case.args[0].is_contiguous() and not case.args[1].is_contiguous()
    (case,) = ex03.gnn_cases([(9, 6, 3, "T", "T")])
    adj, X, W = case.args
    assert adj.stride() == (1, 9) and torch.allclose(adj, adj.T) and not X.is_contiguous()


def test_embedding_cases_repeat_ids_and_reach_the_last_row():
    cases = ex03.embedding_cases([((), 5, 3), ((2, 3), 7, 3), ((8,), 9, 6, torch.int32, "T")])
    assert cases[0].args[0].dim() == 0
    ids = cases[1].args[0].reshape(-1)
    assert ids[-1] == ids[0] and ids[1] == 6 and "repeated ids" in cases[1].label
    assert cases[2].args[0].dtype == torch.int32 and not cases[2].args[1].is_contiguous()


def test_gnn_adjacency_is_gcn_normalised():
    (case,) = ex03.gnn_cases([(12, 3, 2)], [torch.float64])
    adj = case.args[0]
    assert torch.allclose(adj, adj.T) and (adj.diagonal() > 0).all()
    eigs = torch.linalg.eigvalsh(adj)
    assert eigs.max() <= 1 + 1e-12  # D^-1/2 (A + I) D^-1/2 has spectrum in (-1, 1]


# ---- bad input gets a named error, never a broadcast


@pytest.mark.parametrize(
    "name, args, error, text",
    [
        (
            "linear",
            (torch.ones(2, 3, 5), torch.ones(4, 6), torch.ones(4)),
            ValueError,
            r"linear: x has shape \(2, 3, 5\), W has shape \(4, 6\); W must be \(out, 5\)",
        ),
        (
            "linear",
            (torch.ones(2, 5), torch.ones(4, 5), torch.ones(5)),
            ValueError,
            r"linear: b has shape \(5,\), W has shape \(4, 5\); b must be \(4,\)",
        ),
        ("linear", (torch.ones(2, 5), torch.ones(4, 5), torch.ones(1)), ValueError, r"b must be \(4,\)"),
        ("linear", (torch.ones(()), torch.ones(4, 1), torch.ones(4)), ValueError, "at least 1-D; got a 0-d tensor"),
        (
            "linear",
            (torch.ones(2, 5), torch.ones(4, 5, dtype=torch.float64), torch.ones(4)),
            TypeError,
            r"x is torch.float32 but W is torch.float64",
        ),
        (
            "linear",
            (torch.ones(2, 5, dtype=torch.int64), torch.ones(4, 5), torch.ones(4)),
            TypeError,
            "must be floating point",
        ),
        ("linear", ([[1.0] * 5], torch.ones(4, 5), torch.ones(4)), TypeError, r"x must be a torch.Tensor, got list"),
        (
            "qkv_projection",
            (torch.ones(3, 8), torch.ones(8, 8), torch.ones(8, 7), torch.ones(8, 8)),
            ValueError,
            r"x has shape \(3, 8\), Wk has shape \(8, 7\); Wk must be \(d, 8\)",
        ),
        (
            "mlp",
            (torch.ones(3, 4), torch.ones(6, 4), torch.ones(6), torch.ones(2, 5), torch.ones(2)),
            ValueError,
            r"W1 has shape \(6, 4\), W2 has shape \(2, 5\); W2 must be \(out, 6\)",
        ),
        (
            "mlp",
            (torch.ones(3, 4), torch.ones(6, 4), torch.ones(4), torch.ones(2, 6), torch.ones(2)),
            ValueError,
            r"b1 must be \(6,\)",
        ),
        (
            "embedding_as_gemm",
            (torch.tensor([0, 5]), torch.ones(5, 3)),
            IndexError,
            r"ids run from 0 to 5, but table has shape \(5, 3\): 5 rows, so every id must lie in \[0, 4\]",
        ),
        ("embedding_as_gemm", (torch.tensor([-1, 2]), torch.ones(5, 3)), IndexError, r"ids run from -1 to 2"),
        (
            "embedding_as_gemm",
            (torch.tensor([0.0, 1.0]), torch.ones(5, 3)),
            TypeError,
            r"ids must be an integer tensor .* got torch.float32; convert it with ids.long\(\)",
        ),
        ("embedding_as_gemm", (torch.tensor([True]), torch.ones(5, 3)), TypeError, "ids must be an integer tensor"),
        ("embedding_as_gemm", (torch.tensor([0]), torch.ones(5)), ValueError, r"table must be a 2-D matrix"),
        (
            "rnn_cell",
            (torch.ones(4, 3), torch.ones(5, 6), torch.ones(6, 3), torch.ones(6, 6), torch.ones(6)),
            ValueError,
            r"x has shape \(4, 3\), h has shape \(5, 6\); x and h need the same leading dimensions",
        ),
        (
            "rnn_cell",
            (torch.ones(4, 3), torch.ones(4, 6), torch.ones(5, 3), torch.ones(6, 6), torch.ones(6)),
            ValueError,
            r"W_ih must have 6 rows",
        ),
        (
            "gnn_layer",
            (torch.ones(4, 5), torch.ones(4, 3), torch.ones(3, 2)),
            ValueError,
            r"adj has shape \(4, 5\); an adjacency matrix is square",
        ),
        (
            "gnn_layer",
            (torch.ones(4, 4), torch.ones(5, 3), torch.ones(3, 2)),
            ValueError,
            r"X must have one row per node: \(4, F_in\)",
        ),
        (
            "gnn_layer",
            (torch.ones(4, 4), torch.ones(4, 3), torch.ones(2, 3)),
            ValueError,
            r"W must be \(3, F_out\): \(in, out\)",
        ),
    ],
)
def test_bad_input_names_the_problem(sol, name, args, error, text):
    with pytest.raises(error, match=text):
        sol[name](*args)


# ---- the layers helpers


@pytest.mark.parametrize(
    "op, shapes, expected",
    [
        ("mm", ((6, 5), (5, 4)), (1, 6, 4, 5)),
        ("addmm", ((4,), (6, 5), (5, 4)), (1, 6, 4, 5)),
        ("bmm", ((3, 2, 5), (3, 5, 4)), (3, 2, 4, 5)),
        ("baddbmm", ((3, 2, 4), (3, 2, 5), (3, 5, 4)), (3, 2, 4, 5)),
        ("addbmm", ((2, 4), (3, 2, 5), (3, 5, 4)), (1, 2, 4, 15)),
        ("mv", ((4, 5), (5,)), (1, 4, 1, 5)),
        ("addmv", ((4,), (4, 5), (5,)), (1, 4, 1, 5)),
        ("dot", ((7,), (7,)), (1, 1, 1, 7)),
        ("outer", ((3,), (4,)), (1, 3, 4, 1)),
        ("linear", ((2, 3, 5), (4, 5)), (1, 6, 4, 5)),
    ],
)
def test_gemm_mnk_reads_every_gemm_op(op, shapes, expected):
    g = layers.gemm_mnk(op, shapes)
    assert (g.batch, g.M, g.N, g.K) == expected
    assert g.flops == 2 * math.prod(expected)


def test_gemm_mnk_agrees_with_the_recorder_flops():
    A, B, C = torch.randn(3, 5), torch.randn(5, 7), torch.randn(3, 7)
    with checks.record_calls() as log:
        A @ B
        torch.addmm(C, A, B)
        torch.randn(2, 3, 5) @ torch.randn(2, 5, 4)
        A @ torch.randn(5)
    assert sum(g.flops for g in layers.gemms_of(log)) == log.gemm_flops()
    assert str(layers.gemms_of(log)[2]) == "bmm 2 × (3, 5) @ (5, 4)"


@pytest.mark.parametrize("B, S, E, H, d_ff", [(2, 16, 64, 4, 256), (1, 7, 48, 3, 100), (3, 5, 32, 8, 32)])
def test_transformer_gemm_table_matches_what_the_block_runs(B, S, E, H, d_ff):
    torch.manual_seed(0)
    block, x = layers.TransformerBlock(E, H, d_ff), torch.randn(B, S, E)
    ran = layers.record_gemms(block, x)
    table = layers.transformer_gemms(B, S, E, H, d_ff)
    assert [(g.batch, g.M, g.N, g.K) for g in ran] == [(r.count, r.M, r.N, r.K) for r in table]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        block(x)
    assert sum(r.flops for r in table) == counter.get_total_flops()
    lm = layers.transformer_gemms(B, S, E, H, d_ff, vocab=1000)
    assert lm[-1].name == "LM head" and lm[-1].flops == 2 * B * S * 1000 * E


def test_transformer_block_rejects_heads_that_do_not_divide_d_model():
    with pytest.raises(ValueError, match="d_model=10 is not a multiple of n_heads=3"):
        layers.TransformerBlock(10, 3, 16)
    with pytest.raises(ValueError, match="not a multiple"):
        layers.transformer_gemms(1, 4, 10, 3, 16)


def test_flop_share_counts_gemms_like_flop_counter_and_estimates_the_rest():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(10, 32)
    share = layers.flop_share(mlp, x)
    assert share.gemm == {"addmm": 2 * 10 * 32 * 64 + 2 * 10 * 64 * 8}
    assert share.other == {"relu": 10 * 64}  # one FLOP per element of the ReLU's output
    assert share.share == pytest.approx(share.gemm_total / (share.gemm_total + 640))
    assert "t" in share.moved  # the weight transposes move data and cost no FLOPs
    assert "GEMM  addmm" in share.table() and "other relu" in share.table()


def test_flop_share_of_softmax_and_layer_norm_uses_the_stated_rule():
    x = torch.randn(4, 6)
    share = layers.flop_share(lambda t: (torch.softmax(t, -1), F.layer_norm(t, (6,)), t.clone()), x)
    assert share.other == {"_softmax": 5 * 24, "native_layer_norm": 8 * 24} and share.gemm == {}
    assert share.moved.get("clone") == 1 and share.share == 0.0


def test_time_share_splits_gemm_time_from_the_rest():
    torch.manual_seed(0)
    block, x = layers.TransformerBlock(64, 4, 256), torch.randn(2, 32, 64)
    t = layers.time_share(block, x, repeats=2)
    assert 0.0 < t["share"] < 1.0 and t["gemm_s"] > 0 and t["other_s"] > 0
    assert "addmm" in t["by_op"] and "native_layer_norm" in t["by_op"]


def test_format_table_aligns_columns():
    text = layers.format_table([("a", 1, "10%"), ("longer", 1234, "5%")], ("name", "n", "share"))
    lines = text.splitlines()
    assert lines[0] == "name       n  share" and set(lines[1]) == {"-", " "}
    assert lines[3] == "longer  1234     5%" and len({len(line) for line in lines}) == 1


def test_h200_figures_are_read_from_the_data_file():
    h = layers.h200()
    assert h["gemm"][("bfloat16", 4096, 4096, 4096)] == pytest.approx(784.75)
    assert h["gemm"][("bfloat16", 4095, 4095, 4095)] == pytest.approx(149.6)
    assert h["gemm"][("bfloat16", 4096, 4097, 4096)] == pytest.approx(124.38)  # N = 4097
    assert h["tf32_4096"] == pytest.approx(395.64)
    assert "NVIDIA H200" in h["label"] and "torch 2.11" in h["label"]


def test_round_mantissa_is_bfloat16_at_7_bits_and_tf32_at_10():
    x = torch.randn(10_000)
    assert torch.equal(layers.round_mantissa(x, 7), x.bfloat16().float())
    tf32 = layers.round_mantissa(x, 10)
    assert ((tf32 - x).abs() <= x.abs() * 2.0**-11).all()
    assert (tf32.view(torch.int32) & ((1 << 13) - 1) == 0).all()  # the 13 dropped bits are zero
    assert torch.equal(layers.round_mantissa(x, 23), x)
    with pytest.raises(TypeError):
        layers.round_mantissa(x.double(), 10)


def test_relative_error():
    assert layers.relative_error(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0])) == pytest.approx(1.0)


def test_gemm_sweep_and_plots():
    rates = layers.gemm_sweep([(8, 8, 8), (16, 4, 9), (3, 4, 9)], rounds=1, budget=0.001)
    assert len(rates) == 3 and all(r > 0 for r in rates)
    fig = layers.sweep_plot(
        [8, 9, 16],
        [1.0, 0.5, 2.0],
        marks={"multiple of 8": lambda n: n % 8 == 0},
        xlabel="N",
        ylabel="GFLOP/s",
        title="t",
    )
    assert len(fig.axes[0].collections) == 1  # the marked points
    fig = layers.bars(["a", "b"], {"x": [1.0, 2.0], "y": [3.0, 4.0]}, ylabel="TFLOP/s", title="t")
    assert len(fig.axes[0].patches) == 4


def test_fastest_is_the_fastest_single_call_after_the_warm_up(monkeypatch):
    clock = iter(
        [
            0.0,
            0.5,  # warm-up call: 0.5 s, the fastest of all, and not counted
            10.0,
            13.0,
            20.0,
            21.0,
            30.0,
            32.0,
        ]
    )  # calls of 3, 1 and 2 s
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    assert timing.fastest(lambda: None, budget=0.1, min_calls=3) == timing.Fastest(1.0, 3, 3, False)


def test_arithmetic_intensity_of_gemv_and_square_gemm():
    assert layers.arithmetic_intensity(1, 4096, 4096, 4) == pytest.approx(0.5, rel=1e-3)
    assert layers.arithmetic_intensity(4096, 4096, 4096, 2) == pytest.approx(4096 / 3)


def test_device_tflops_runs_on_the_cpu_and_restores_the_precision_setting():
    before = torch.get_float32_matmul_precision()
    assert layers.device_tflops(32, 16, 8, torch.float32, device="cpu", fp32_precision="high", min_run_time=0.01) > 0
    assert torch.get_float32_matmul_precision() == before


def test_op_tree_shows_what_addmm_does_inside():
    tree = layers.op_tree(F.linear, torch.randn(6, 5), torch.randn(4, 5), torch.randn(4))
    lines = tree.splitlines()
    assert lines[0] == "aten::linear  [[6, 5], [4, 5], [4]]"
    assert "    aten::addmm  [[4], [6, 5], [5, 4]]" in lines and "        aten::copy_  [[6, 4], [6, 4]]" in lines


# ---- every rule ex03 states has a visible case (issue #43): a wrong answer breaking only that rule passed the visible
# check before its case was added, and fails it now with a message about its own mistake


def _rows_of(x):
    return x.flatten(0, -2)  # wrong for x of rank 1: there is no leading dimension to fold


def _rows_view(x):
    return x.view(-1, x.shape[-1])  # wrong for a non-contiguous x: view cannot fold dims that are not laid out in order


def _linear_rank(x, W, b):
    return torch.addmm(b, _rows_of(x), W.T).reshape(*x.shape[:-1], -1)


def _qkv(rows_of):
    def qkv_projection(x, Wq, Wk, Wv):
        fused = rows_of(x) @ torch.cat([Wq, Wk, Wv]).T
        q, k, v = fused.split([Wq.shape[0], Wk.shape[0], Wv.shape[0]], dim=1)
        return tuple(t.reshape(*x.shape[:-1], -1) for t in (q, k, v))

    return qkv_projection


def _mlp(rows_of):
    def mlp(x, W1, b1, W2, b2):
        h = torch.relu(torch.addmm(b1, rows_of(x), W1.T))
        return torch.addmm(b2, h, W2.T).reshape(*x.shape[:-1], -1)

    return mlp


def _rnn(rows_of):
    def rnn_cell(x, h, W_ih, W_hh, b):
        return torch.tanh(rows_of(x) @ W_ih.T + rows_of(h) @ W_hh.T + b).reshape(h.shape)

    return rnn_cell


def _embedding_unflatten(ids, table):
    one_hot = (ids.reshape(-1, 1) == torch.arange(table.shape[0])).to(table.dtype)
    return (one_hot @ table).unflatten(0, ids.shape)  # wrong for a 0-d id: unflatten wants at least one size


_RANK1 = lambda c: c.label.startswith(("x (7,)", "x (3,)"))  # noqa: E731
_LEAD = lambda c: "first two dims swapped" in c.label  # noqa: E731


@pytest.mark.parametrize(
    "check, wrong, rule, says",
    [
        (ex03.check_linear, lambda sol: named("linear", _linear_rank), _RANK1, ("Dimension out of range",)),
        (
            ex03.check_linear,
            lambda sol: ignores_strides(sol["linear"], 1),
            lambda c: "W (3, 8) transposed" in c.label,
            ("`W` read as if it were contiguous",),
        ),
        (
            ex03.check_qkv_projection,
            lambda sol: named("qkv_projection", _qkv(_rows_of)),
            _RANK1,
            ("Dimension out of range",),
        ),
        (
            ex03.check_qkv_projection,
            lambda sol: named("qkv_projection", _qkv(_rows_view)),
            _LEAD,
            ("view size is not compatible with input tensor's size and stride",),
        ),
        (ex03.check_mlp, lambda sol: named("mlp", _mlp(_rows_of)), _RANK1, ("Dimension out of range",)),
        (
            ex03.check_mlp,
            lambda sol: named("mlp", _mlp(_rows_view)),
            _LEAD,
            ("view size is not compatible with input tensor's size and stride",),
        ),
        (
            ex03.check_embedding_as_gemm,
            lambda sol: named("embedding_as_gemm", _embedding_unflatten),
            lambda c: c.label.startswith("ids ()"),
            ("unflatten: sizes must be non-empty",),
        ),
        (
            ex03.check_embedding_as_gemm,
            lambda sol: ignores_strides(sol["embedding_as_gemm"], 1),
            lambda c: "transposed" in c.label,
            ("`table` read as if it were contiguous",),
        ),
        (ex03.check_rnn_cell, lambda sol: named("rnn_cell", _rnn(_rows_of)), _RANK1, ("Dimension out of range",)),
        (
            ex03.check_rnn_cell,
            lambda sol: named("rnn_cell", _rnn(_rows_view)),
            _LEAD,
            ("view size is not compatible with input tensor's size and stride",),
        ),
        (
            ex03.check_gnn_layer,
            lambda sol: ignores_strides(sol["gnn_layer"]),
            lambda c: "transposed" in c.label,
            ("read as if", "contiguous"),
        ),
    ],
    ids=[
        "linear-rank1",
        "linear-W-strides",
        "qkv-rank1",
        "qkv-strides",
        "mlp-rank1",
        "mlp-strides",
        "embedding-0d",
        "embedding-table-strides",
        "rnn-rank1",
        "rnn-strides",
        "gnn-strides",
    ],
)
def test_each_stated_rule_of_ex03_has_a_visible_case(sol, check, wrong, rule, says):
    assert_rule_is_visible(check, wrong(sol), rule, *says)
