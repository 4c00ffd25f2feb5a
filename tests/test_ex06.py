"""ex06_compile: the grader's ground truth (facts about torch 2.13 the course pins, asserted on purpose), the
compiler helpers lesson 06 uses, every check's messages, and the guards on the solution functions."""

from __future__ import annotations

import operator
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn as nn
from torch._logging import _internal as torch_logs

from twoprim.assignments import ex06_compile as ex06
from twoprim.config import ROOT
from twoprim.core import checks
from twoprim.topics import inside_torch_compile as compiler

from .conftest import fails, solution_namespace

S = ex06.Spec


@pytest.fixture(scope="module")
def sol06():
    """The ex06_compile solution functions (count_ops, capture, gemm_count) and answers."""
    return solution_namespace("ex06_compile")


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


# ---- the facts lesson 06 and the issue state, measured by the grader's own capture (torch 2.13)


def test_dynamo_graph_of_the_mlp_is_linear_relu_linear():
    cap = compiler.capture_graphs(mlp(), torch.randn(4, 16), "dynamo")
    assert cap.counts() == [Counter(linear=2, relu=1)]


def test_aten_forward_has_two_addmm_gemms():
    cap = compiler.capture_graphs(mlp(), torch.randn(4, 16), "aten")
    assert len(cap.forward) == 1 and not cap.backward
    assert cap.counts() == [Counter(t=2, addmm=2, relu=1)]
    assert cap.gemms() == 2


def test_backward_has_three_mm_and_four_when_the_input_requires_grad():
    x = torch.randn(4, 16)
    cap = compiler.capture_graphs(mlp(), x, "aten", train=True)
    assert [compiler.gemms_in(g, "aten") for g in cap.forward] == [2]
    assert [compiler.count_ops(g)["mm"] for g in cap.backward] == [3]
    cap = compiler.capture_graphs(mlp(), x.clone().requires_grad_(), "aten", train=True)
    assert [compiler.count_ops(g)["mm"] for g in cap.backward] == [4]


def test_bias_false_gives_mm_and_3d_input_gives_view_and_addmm():
    no_bias = nn.Sequential(nn.Linear(16, 32, bias=False), nn.ReLU(), nn.Linear(32, 8, bias=False))
    counts = compiler.capture_graphs(no_bias, torch.randn(4, 16), "aten").counts()[0]
    assert counts["mm"] == 2 and counts["addmm"] == 0
    counts = compiler.capture_graphs(mlp(), torch.randn(3, 4, 16), "aten").counts()[0]
    assert counts["addmm"] == 2 and counts["view"] >= 2


def test_matmul_einsum_and_graph_breaks():
    model, x = ex06.build(S("matmul"))
    assert compiler.capture_graphs(model, x, "dynamo").counts()[0]["matmul"] == 2
    assert compiler.capture_graphs(model, x, "aten").counts()[0] >= Counter(mm=2, add=2)
    model, x = ex06.build(S("einsum"))
    assert compiler.capture_graphs(model, x, "dynamo").counts()[0]["einsum"] == 2
    assert compiler.capture_graphs(model, x, "aten").counts()[0]["bmm"] == 2
    model, x = ex06.build(S("break", "dynamo"))
    cap = compiler.capture_graphs(model, x, "dynamo")
    assert len(cap.graphs) == 2 and cap.gemms() == 2
    assert torch._dynamo.explain(model)(x).graph_count == 2
    model, x = ex06.build(S("logged"))
    assert len(compiler.capture_graphs(model, x, "dynamo").graphs) == 3
    cap = compiler.capture_graphs(model, x, "aten", train=True)
    assert (len(cap.forward), len(cap.backward)) == (3, 3)


HIDDEN_SPECS = [S(name, level, train) for name in ex06.MODELS for level in compiler.LEVELS for train in (False, True)]


@pytest.mark.parametrize("spec", HIDDEN_SPECS, ids=lambda s: f"{s.model}-{s.level}-{'train' if s.train else 'infer'}")
def test_every_case_model_compiles_into_graphs_with_gemms(spec):
    """A torch release that made Dynamo give up on a model (it then runs it eagerly, with no graph) would make
    its checks vacuous: the grader refuses to grade against nothing, and this test names the model."""
    batch = (2, 5) if spec.model == "attention" else (4,)
    model, x = ex06.build(S(spec.model, spec.level, spec.train, batch=batch))
    cap = ex06._ground_truth(model, x, spec.level, spec.train)
    assert cap.forward and cap.gemms() > 0
    assert bool(cap.backward) == (spec.level == "aten" and spec.train)


def test_ground_truth_refuses_a_model_dynamo_runs_eagerly():
    class GivesUp(nn.Module):
        def forward(self, x):
            for _ in range(2):
                x = x * 2
                torch._dynamo.graph_break()  # a graph break inside a loop: Dynamo skips the whole frame
            return x

    with pytest.raises(RuntimeError, match="captured no graph"):
        ex06._ground_truth(GivesUp(), torch.randn(3), "dynamo", False)


def test_capture_restores_grads_and_leaves_nothing_compiled():
    model, x = mlp(), torch.randn(4, 16)
    before = [p.grad for p in model.parameters()]
    compiler.capture_graphs(model, x, "aten", train=True)
    assert [p.grad for p in model.parameters()] == before
    graphs = []
    with torch.no_grad():  # the cache was reset: a new backend sees the model again
        torch.compile(model, backend=lambda gm, ex: graphs.append(gm) or gm.forward)(x)
    assert len(graphs) == 1


def test_captures_skip_timing_the_guards_but_the_guards_still_guard():
    import torch._dynamo.guards as guards

    compiler.capture_graphs(mlp(), torch.randn(4, 16), "dynamo")
    # torch's guard profiler as the course replaced it (torch does not re-export the name for type checkers)
    assert guards.profile_guard_manager.skipped_by_twoprim  # pyright: ignore[reportPrivateImportUsage, reportFunctionMemberAccess, reportArgumentType]
    assert guards.profile_guard_manager(None, {}, 1) == 0.0  # pyright: ignore[reportPrivateImportUsage, reportFunctionMemberAccess, reportArgumentType]
    compiler.skip_guard_profiling()  # once is enough: the replacement is not wrapped again
    assert guards.profile_guard_manager(None, {}, 1) == 0.0  # pyright: ignore[reportPrivateImportUsage, reportFunctionMemberAccess, reportArgumentType]
    graphs = []
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x * 2, backend=lambda gm, ex: graphs.append(gm) or gm.forward, dynamic=False)
    compiled(torch.ones(3))
    compiled(torch.ones(3))  # the guards hold: nothing compiled again
    compiled(torch.ones(3, dtype=torch.float64))  # a guard fails: compiled again
    torch._dynamo.reset()
    assert len(graphs) == 2


def test_capture_rejects_unknown_levels_and_an_impossible_backward():
    with pytest.raises(ValueError, match="level must be one of"):
        compiler.capture(mlp(), torch.randn(4, 16), "inductor")
    frozen = mlp().requires_grad_(False)
    with pytest.raises(ValueError, match="no output requires grad"):
        compiler.capture(frozen, torch.randn(4, 16), "aten", train=True)


def test_gemm_nodes_lists_operand_shapes():
    cap = compiler.capture_graphs(mlp(), torch.randn(4, 16), "aten", train=True)
    assert compiler.gemm_nodes(cap.forward[0]) == [
        ("addmm", ((32,), (4, 16), (16, 32)), (4, 32)),
        ("addmm", ((8,), (4, 32), (32, 8)), (4, 8)),
    ]
    assert sorted(shapes for _, shapes, _ in compiler.gemm_nodes(cap.backward[0])) == sorted(
        [((4, 8), (8, 32)), ((8, 4), (4, 32)), ((32, 4), (4, 16))]
    )


# ---- counting nodes


def test_count_ops_names_functions_methods_and_aten_packets():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(torch.ops.aten.addmm.default, (x, x, x))
    b = graph.call_function(operator.matmul, (a, x))
    c = graph.call_method("sum", (b,))
    d = graph.call_function(torch.ops.aten.addmm.default, (c, c, c))
    graph.output(d)
    gm = torch.fx.GraphModule(nn.Module(), graph)
    assert compiler.count_ops(gm) == Counter(addmm=2, matmul=1, sum=1)
    assert compiler.gemms_in(gm, "aten") == 2 and compiler.gemms_in(gm, "dynamo") == 3
    assert [compiler.target_name(n) for n in gm.graph.nodes][:3] == [
        "x",
        "torch.ops.aten.addmm.default",
        "_operator.matmul",
    ]
    wrong: Any = [gm]  # a list, not the GraphModule count_ops takes
    with pytest.raises(TypeError, match="expected a torch.fx.GraphModule"):
        compiler.count_ops(wrong)


# ---- Inductor's code and the logs

H200_CODE = (ROOT / "data" / "h200_inductor_mlp_output_code.txt").read_text()


def test_data_file_is_the_spec_measurement():
    shared = Path("/work/shared/data/h200_inductor_mlp_output_code.txt")
    if shared.exists():  # the spec's copy is on the course's build machines only
        assert shared.read_text() == H200_CODE
    assert "extern_kernels.mm" in H200_CODE and "triton_poi_fused_addmm_relu_0" in H200_CODE


def test_kernel_calls_of_the_h200_output_are_mm_fused_triton_addmm():
    assert compiler.kernel_calls(H200_CODE) == [
        "extern_kernels.mm",
        "triton_poi_fused_addmm_relu_0",
        "extern_kernels.addmm",
    ]
    lines = compiler.call_lines(H200_CODE)
    assert lines[-1] == "return (buf2, )" and not any(line.startswith(("assert_", "del ")) for line in lines)
    kernel = compiler.kernel_source(H200_CODE, "triton_poi_fused_addmm_relu_0")
    assert "@triton.jit" in kernel and "tmp2 = tmp0 + tmp1" in kernel and "maximum" in kernel


def test_counting_the_word_over_counts_the_ops():
    assert compiler.word_count(H200_CODE, "addmm") > compiler.kernel_calls(H200_CODE).count("extern_kernels.addmm")


def test_inductor_on_cpu_calls_addmm_twice_around_a_fused_relu():
    """The lesson's CPU claim (a C++ compile: seconds when the shared cache is cold)."""
    compiler.inductor_cache()
    out, code = compiler.inductor_output_code(mlp(), torch.randn(4, 16))
    calls = compiler.kernel_calls(code)
    assert calls == ["extern_kernels.addmm", "cpp_fused_relu_0", "extern_kernels.addmm"]
    assert "clamp_min" in compiler.kernel_source(code, "cpp_fused_relu_0")
    assert out.shape == (4, 8)


def test_inductor_cache_order(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/x"))
    monkeypatch.setenv("TWOPRIM_INDUCTOR_CACHE", str(tmp_path / "class"))
    assert compiler.inductor_cache() == (tmp_path / "class").resolve() and (tmp_path / "class").is_dir()
    assert compiler.inductor_cache(tmp_path / "mine") == (tmp_path / "mine").resolve()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "mine").resolve())


def test_verbose_prints_nothing_for_a_clean_mlp_and_logs_are_captured_then_restored():
    import logging

    model, x = mlp(), torch.randn(4, 16)
    torch._dynamo.reset()
    with compiler.captured_output() as quiet, torch._dynamo.config.patch(verbose=True):
        torch.compile(model, backend="eager")(x)
    assert quiet.text == ""
    torch._dynamo.reset()
    with compiler.captured_output(graph_code=True) as loud:
        torch.compile(model, backend="eager")(x)
        print("from print")
    assert loud.artifact("graph_code").count("torch._C._nn.linear(") == 2
    assert loud.stdout == "from print\n"
    torch._dynamo.reset()
    assert not logging.getLogger("torch._dynamo").isEnabledFor(logging.DEBUG)  # default logging is back


def test_captured_output_sets_torch_logs_aside_and_puts_it_back(monkeypatch):
    import logging

    monkeypatch.setenv("TORCH_LOGS", "+dynamo")
    torch._dynamo.reset()
    try:
        with compiler.captured_output(graph_code=True) as printed:
            torch.compile(mlp(), backend="eager")(torch.randn(4, 16))
        assert "ignoring call to set_logs" not in printed.text and printed.artifact("graph_code")
        assert os.environ["TORCH_LOGS"] == "+dynamo"
        assert logging.getLogger("torch._dynamo").isEnabledFor(logging.DEBUG)  # what TORCH_LOGS asked for
    finally:
        monkeypatch.delenv("TORCH_LOGS")
        torch_logs.set_logs()
        torch._dynamo.reset()


def test_torch_logs_set_after_import_does_nothing_and_disables_set_logs():
    script = (
        "import os, torch\n"
        "m = torch.nn.Linear(4, 4)\n"
        "os.environ['TORCH_LOGS'] = 'graph_code'\n"
        "torch.compile(m, backend='eager')(torch.randn(2, 4))\n"
        "torch._logging.set_logs(graph_code=True)\n"
        "torch._dynamo.reset()\n"
        "torch.compile(m, backend='eager')(torch.randn(2, 4))\n"
    )
    out = compiler.run_scripts(
        {
            "late": (script, {}),
            "early": (script.replace("os.environ['TORCH_LOGS'] = 'graph_code'\n", ""), {"TORCH_LOGS": "graph_code"}),
        }
    )
    assert "torch._C._nn.linear" not in out["late"] and "ignoring call to set_logs" in out["late"]
    assert "torch._C._nn.linear" in out["early"]


def test_flop_split_counts_gemms_with_flopcounter_and_the_rest_per_element():
    model, (M, K, H, N) = mlp(), (4, 16, 32, 8)
    split = compiler.flop_split(model, torch.randn(M, K))
    assert split["forward"]["gemm"] == 2 * M * (K * H + H * N)
    assert split["backward"]["gemm"] == 2 * (N * M * H + M * N * H + H * M * K)  # grad W2, grad h, grad W1
    assert split["forward"]["other_by_op"] == {"addmm (bias add)": M * H + M * N, "relu": M * H}
    assert split["backward"]["other_by_op"] == {"sum": M * H + M * N, "threshold_backward": M * H}
    assert not split["forward"]["uncounted"] and not split["backward"]["uncounted"]
    assert all(p.grad is None for p in model.parameters())


# ---- the checks: what a learner reads


def counting(fn):
    """count_ops written with a mistake `fn(node)` returning the name to count, or None."""

    def count_ops(graph_module):
        return Counter(n for n in map(fn, graph_module.graph.nodes) if n is not None)

    return count_ops


def test_count_ops_passes_and_announces_hidden(sol06, capsys):
    ex06.check_count_ops(sol06["count_ops"], hidden=16)
    out = capsys.readouterr().out
    assert out.startswith("✔ ex06_compile-count_ops:") and "Grading runs 16 more hidden checks" in out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (lambda n: str(n.target) if n.op == "call_function" else None, "__name__"),
        (lambda n: getattr(n.target, "__name__", None) if n.op == "call_function" else None, "overloadpacket"),
        (lambda n: compiler._op_name(n) if n.op == "call_function" else None, "call_method"),
        (lambda n: compiler._op_name(n) or n.op, "node kinds"),
        (lambda n: n.name, "node.name is the variable"),
    ],
    ids=["str-target", "overload-name", "no-methods", "counts-placeholders", "node-names"],
)
def test_count_ops_wrong_value_says_which_ops_differ_and_what_to_fix(mistake, hint):
    msg = fails(ex06.check_count_ops, counting(mistake))
    assert msg.startswith("✘ ex06_compile-count_ops: wrong result.")
    assert "case:" in msg and "tried:    count_ops(GraphModule GraphModule(" in msg and "expected: Counter(" in msg
    assert "differs:" in msg and hint in msg


def test_count_ops_wrong_type_and_wrong_entries():
    msg = fails(ex06.check_count_ops, lambda gm: [compiler._op_name(n) for n in gm.graph.nodes])
    assert "but count_ops returns a Counter of op names" in msg
    msg = fails(ex06.check_count_ops, lambda gm: Counter({n: 1 for n in gm.graph.nodes if n.op == "call_function"}))
    assert "is not (str name: int count)" in msg
    msg = fails(ex06.check_count_ops, lambda gm: {k: float(v) for k, v in compiler._count(gm).items()})
    assert "is not (str name: int count)" in msg


def capture_with(sol06, **changes):
    """The solution's capture with one step changed: no_grad=False, backward=False, reset=False, keep=list."""
    from torch._dynamo.backends.common import aot_autograd

    # torch's helper, not re-exported by its module for type checkers (as in twoprim.topics.inside_torch_compile)
    from torch._functorch.aot_autograd import make_boxed_func  # pyright: ignore[reportPrivateImportUsage]

    kept = changes.get("keep")

    def capture(model, x, level, train=False):
        forward, backward = ([], []) if kept is None else (kept, [])

        def keeping(graphs):
            return lambda gm, ex: graphs.append(gm) or make_boxed_func(gm.forward)

        backend = (
            (lambda gm, ex: forward.append(gm) or gm.forward)
            if level == "dynamo"
            else aot_autograd(fw_compiler=keeping(forward), bw_compiler=keeping(backward))
        )
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=backend)
        if train and changes.get("backward", True):
            compiled(x).sum().backward()
        elif changes.get("no_grad", True):
            with torch.no_grad():
                compiled(x)
        else:
            compiled(x)
        return list(forward + backward)

    return capture


def test_capture_passes(sol06, capsys):
    ex06.check_capture(sol06["capture"], hidden=8)
    assert "✔ ex06_compile-capture" in capsys.readouterr().out


@pytest.mark.parametrize(
    "change, text",
    [
        ({"backward": False}, "the backward graphs are missing"),
        ({"no_grad": False}, "torch.no_grad()"),
        ({"keep": []}, "create the list inside capture"),
    ],
    ids=["no-backward", "no-no_grad", "list-outlives-call"],
)
def test_capture_mistakes_are_explained(sol06, change, text):
    msg = fails(ex06.check_capture, capture_with(sol06, **change))
    assert msg.startswith("✘ ex06_compile-capture: wrong result.") and "expected:" in msg and text in msg


def test_capture_wrong_types(sol06):
    right = sol06["capture"]
    msg = fails(ex06.check_capture, lambda *args: tuple(g.code for g in right(*args)))
    assert "not only torch.fx.GraphModules" in msg
    msg = fails(ex06.check_capture, lambda *args: {i: g for i, g in enumerate(right(*args))})
    assert "but capture returns a list of GraphModules" in msg
    msg = fails(ex06.check_capture, lambda *args: [])
    assert "your backend never ran" in msg


def test_capture_at_the_wrong_level_is_explained(sol06):
    right = sol06["capture"]
    msg = fails(ex06.check_capture, lambda model, x, level, train=False: right(model, x, "aten", train))
    assert "level 'dynamo' keeps the graph Dynamo hands the backend" in msg


def test_gemm_count_passes(sol06, capsys):
    ex06.check_gemm_count(sol06["gemm_count"], hidden=8)
    assert "✔ ex06_compile-gemm_count" in capsys.readouterr().out


def test_a_broken_count_ops_is_named_first_in_gemm_counts_message():
    """gemm_count is right but calls a count_ops that fails its own check: the message says so before anything
    else, and only while that count_ops is the one gemm_count calls."""
    ns = solution_namespace("ex06_compile")
    exec("def count_ops(graph_module):\n    return Counter(graph_module.graph.nodes and {'addmm': 1})\n", ns)  # noqa: S102
    fails(ex06.check_count_ops, ns["count_ops"])
    msg = fails(ex06.check_gemm_count, ns["gemm_count"])
    first, why, *rest = msg.splitlines()
    assert first == (
        "✘ ex06_compile-gemm_count: `count_ops` fails its check (ex06_compile-count_ops); fix it first."
    ), first
    assert why.startswith("  why:      `gemm_count` calls `count_ops`"), why
    assert rest[0] == "  ✘ ex06_compile-gemm_count: wrong result.", rest  # what gemm_count's own check saw
    exec("def count_ops(graph_module):\n    return Counter()\n", ns)  # noqa: S102 - redefined, its check not run again
    msg = fails(ex06.check_gemm_count, ns["gemm_count"])
    assert msg.startswith("✘ ex06_compile-gemm_count: wrong result."), "this count_ops has failed no check yet"


def test_gemm_count_mistakes_are_explained(sol06):
    capture, count_ops = sol06["capture"], sol06["count_ops"]

    def forward_only(model, x, level, train=False):
        graphs = capture(model, x, level, train)
        n_fw = len(capture(model, x, level, False)) if level == "aten" else len(graphs)
        return sum(count_ops(g)[n] for g in graphs[:n_fw] for n in ex06.GEMM_OPS[level])

    msg = fails(ex06.check_gemm_count, forward_only)
    assert "add the GEMMs of the backward graphs too" in msg and "expected: 5" in msg and "got:      2" in msg

    def first_graph(model, x, level, train=False):
        return sum(count_ops(capture(model, x, level, train)[0])[n] for n in ex06.GEMM_OPS[level])

    assert "not only the first" in fails(ex06.check_gemm_count, first_graph, ex06.model_cases([S("break", "dynamo")]))

    def aten_names(model, x, level, train=False):
        return sum(count_ops(g)[n] for g in capture(model, x, level, train) for n in ex06.GEMM_OPS["aten"])

    assert "count only the GEMM names of this level" in fails(ex06.check_gemm_count, aten_names)
    assert "but gemm_count returns an int" in fails(ex06.check_gemm_count, lambda *a: 2.0)


# ---- the rule: the grader's code is not the learner's


@pytest.mark.parametrize(
    "check, cheat",
    [
        (ex06.check_count_ops, lambda gm: compiler.count_ops(gm)),
        (ex06.check_count_ops, lambda gm: Counter(filter(None, map(compiler.op_name, gm.graph.nodes)))),
        (ex06.check_capture, lambda model, x, level, train=False: compiler.capture(model, x, level, train)),
        (ex06.check_gemm_count, lambda model, x, level, train=False: compiler.gemm_count(model, x, level, train)),
    ],
    ids=["count_ops", "op_name", "capture", "gemm_count"],
)
def test_calling_the_grader_is_caught(check, cheat):
    msg = fails(check, cheat)
    assert "breaks a rule of this exercise: your own code: no calls to twoprim.topics.inside_torch_compile" in msg
    assert "found:    it called twoprim.topics.inside_torch_compile." in msg and "next:" in msg


def test_learner_code_runs_outside_the_recorder(sol06):
    """run_check records calls with torch modes, under which Dynamo never calls a backend: the checks step out."""
    model, x = mlp(), torch.randn(4, 16)
    with checks.record_calls():
        assert sol06["capture"](model, x, "dynamo") == []  # what a learner's code would see without the fix
    watched, own = ex06._own(sol06["capture"])
    with checks.record_calls():
        assert len(watched(model, x, "dynamo")) == 1
    nothing: Any = None  # the rule reads neither the call log nor the case
    assert own.test(nothing, nothing) is None  # and it called none of the grader's functions


# ---- the short answers

ANSWERS = {
    "forward_gemms": 2,
    "backward_gemms": 3,
    "backward_gemms_input_grad": 4,
    "no_bias_gemms": {"mm": 2},
    "graph_break_graphs": 2,
}


@pytest.mark.parametrize("name", list(ANSWERS))
def test_answers_visible_form_and_hidden_value(sol06, name, capsys):
    check = getattr(ex06, f"check_{name}")
    result = check(sol06[name], hidden=1)
    out = capsys.readouterr().out
    assert out.startswith(f"○ ex06_compile-{name}: {checks.ANSWERED} (`./course selfgrade ex06_compile`)"), out
    assert "✔" not in out and "only its form was checked here" in out and "1 more hidden check" in out
    assert result.answered and "answered" in repr(result)
    check(sol06[name], ex06.answer_cases(name))
    assert ANSWERS[name] == ex06.ANSWERS[name].measure()  # torch 2.13's facts, as the solution states them
    msg = fails(check, ..., ex06.answer_cases(name))
    assert msg.startswith(f"✘ ex06_compile-{name}: wrong result.")


@pytest.mark.parametrize(
    "name, wrong, text",
    [
        ("forward_gemms", ..., "is a count: an int"),
        ("forward_gemms", 2.0, "is a count: an int"),
        ("backward_gemms", True, "is a count: an int"),
        ("graph_break_graphs", -1, "is a count: an int"),
        ("no_bias_gemms", 2, "is a dict {op name: count}"),
        ("no_bias_gemms", {"matmul": 2}, "ATen GEMM name"),
        ("no_bias_gemms", {"mm": 2.0}, "ATen GEMM name"),
    ],
)
def test_answers_of_the_wrong_form_fail_the_visible_check(name, wrong, text):
    msg = fails(getattr(ex06, f"check_{name}"), wrong, hidden=1)
    assert f"✘ ex06_compile-{name}: wrong result." in msg and text in msg


@pytest.mark.parametrize("name, wrong", [("backward_gemms", 4), ("graph_break_graphs", 1)])
def test_a_wrong_answer_of_the_right_form_is_answered_never_passed(name, wrong, capsys):
    """The learner's case from the issue: backward_gemms = 4 (right: 3) and graph_break_graphs = 1 (right: 2)."""
    assert wrong != ex06.ANSWERS[name].measure()
    result = getattr(ex06, f"check_{name}")(wrong, hidden=1)
    out = capsys.readouterr().out
    assert out.startswith(f"○ ex06_compile-{name}: {checks.ANSWERED}") and "✔" not in out, out
    assert f"{name} = {wrong!r} is an int, 0 or more, but whether it is right is not known yet" in out
    assert result.answered


@pytest.mark.parametrize(
    "name, wrong",
    [
        ("forward_gemms", 3),
        ("backward_gemms", 4),
        ("backward_gemms_input_grad", 3),
        ("no_bias_gemms", {"addmm": 2}),
        ("graph_break_graphs", 1),
    ],
)
def test_wrong_answers_fail_the_hidden_check_with_how_to_measure(name, wrong):
    msg = fails(getattr(ex06, f"check_{name}"), wrong, ex06.answer_cases(name))
    assert "measure it" in msg and f"got:      {wrong!r}" in msg and "expected:" in msg


# ---- the guards on the solution functions: errors that name what was wrong


def test_count_ops_rejects_what_is_not_a_graph(sol06):
    with pytest.raises(
        TypeError,
        match=r"count_ops: graph_module must be a torch.fx.GraphModule.*got list.*"
        r"capture returns a list, pass one of its graphs",
    ):
        sol06["count_ops"]([])
    with pytest.raises(TypeError, match=r"got Sequential \(a model: capture it first"):
        sol06["count_ops"](mlp())


@pytest.mark.parametrize("fn", ["capture", "gemm_count"])
def test_capture_and_gemm_count_guard_their_arguments(sol06, fn):
    f, model, x = sol06[fn], mlp(), torch.randn(4, 16)
    with pytest.raises(ValueError, match=rf"{fn}: level must be 'dynamo' or 'aten', got 'inductor'"):
        f(model, x, "inductor")
    with pytest.raises(TypeError, match=rf"{fn}: x must be a torch.Tensor, got list"):
        f(model, [[1.0] * 16], "aten")
    with pytest.raises(TypeError, match=rf"{fn}: x must be floating point"):
        f(model, torch.ones(4, 16, dtype=torch.int64), "aten")
    with pytest.raises(TypeError, match=rf"{fn}: the model's parameters are torch.float32 but x is torch.float64"):
        f(model, x.double(), "aten")
    with pytest.raises(
        ValueError,
        match=rf"{fn}: model\(x\) fails before any compiling, for x of shape \(4, 7\): "
        r"RuntimeError: mat1 and mat2 shapes cannot be multiplied",
    ):
        f(model, torch.randn(4, 7), "dynamo")
    with pytest.raises(TypeError, match=rf"{fn}: train must be True or False, got str 'yes'"):
        f(model, x, "aten", "yes")
    with pytest.raises(TypeError, match=rf"{fn}: model must be an nn.Module or a function, got int"):
        f(3, x, "aten")
    with pytest.raises(ValueError, match=rf"{fn}: train=True, but neither x nor any parameter requires grad"):
        f(mlp().requires_grad_(False), x, "aten", True)


def test_solution_accepts_float64_and_functions(sol06):
    model, x = ex06.build(S("mlp3", dtype=torch.float64))
    assert sol06["gemm_count"](model, x, "aten", True) == compiler.gemm_count(model, x, "aten", True)
    W = torch.randn(8, 16, requires_grad=True)
    assert sol06["gemm_count"](lambda x: torch.relu(x @ W.T), torch.randn(4, 16), "aten", True) == 2
