"""The checks a learner meets: each failure names the case, what was expected and got, and what to do next."""

from __future__ import annotations

import pytest
import torch

from twoprim.assignments import ex01_dot as ex01
from twoprim.core import checks

from .conftest import check_of, fails
from .visible_rules import assert_rule_is_visible, ignores_strides, named

# ---- wrong answers


def test_wrong_value_names_case_expected_got_error_and_next_step():
    msg = fails(ex01.check_dot, lambda x, w: (x[:-1] * w[:-1]).sum())
    assert "✘ ex01_dot-dot: wrong result" in msg
    assert "case:     length 3, float32" in msg
    assert "tried:    <lambda>(float32 tensor of shape (3,), float32 tensor of shape (3,))" in msg
    assert "expected: float32 tensor of shape ()" in msg
    assert "error:" in msg and "tolerance abs" in msg
    assert "next:" in msg


def test_wrong_shape_is_reported_with_both_shapes():
    msg = fails(ex01.check_dot, lambda x, w: (x * w).sum(dim=0, keepdim=True))
    assert "shape (1,), expected shape ()" in msg


def test_wrong_dtype_is_reported():
    msg = fails(ex01.check_dot, lambda x, w: (x.double() * w.double()).sum())
    assert "dtype float64, expected float32 (the input's dtype)" in msg


def test_python_number_instead_of_tensor_is_reported():
    msg = fails(ex01.check_dot, lambda x, w: float((x * w).sum()))
    assert "float" in msg and "should be a float32 tensor of shape ()" in msg


def test_dot_loop_must_return_a_python_float():
    msg = fails(ex01.check_dot_loop, lambda x, w: sum(a * b for a, b in zip(x, w, strict=True)))
    assert "but dot_loop returns a Python float" in msg


def test_not_written_yet_says_so():
    def dot(x, w):
        raise NotImplementedError()

    msg = fails(ex01.check_dot, dot)
    assert "`dot` is not written yet" in msg and "raise NotImplementedError()" in msg


def test_crash_reports_the_case_and_the_error():
    msg = fails(ex01.check_dot, lambda x, w: x.view(2, -1).sum())
    assert "raised RuntimeError" in msg and "case:" in msg and "tried:" in msg


def test_passing_the_result_instead_of_the_function():
    msg = fails(ex01.check_dot, torch.tensor(1.0))
    assert "expected a function" in msg


# ---- forbidden calls, caught whatever the spelling


@pytest.mark.parametrize(
    "spelling",
    [
        lambda x, w: torch.dot(x, w),
        lambda x, w: x @ w,
        lambda x, w: torch.matmul(x, w),
        lambda x, w: torch.einsum("i,i->", x, w),
        lambda x, w: torch.inner(x, w),
        lambda x, w: torch.nn.functional.linear(x[None], w[None])[0, 0],
        lambda x, w: torch.ops.aten.dot(x, w),
        lambda x, w: torch.tensor(x.numpy().dot(w.numpy())),
        lambda x, w: torch.zeros(1, 1, dtype=x.dtype).addmm_(x[None], w[:, None])[0, 0],
    ],
    ids=["torch.dot", "@", "matmul", "einsum", "inner", "F.linear", "aten.dot", "numpy", "in-place addmm_"],
)
def test_forbidden_dot_is_detected(spelling):
    msg = fails(ex01.check_dot, spelling)
    assert "breaks a rule of this exercise: no torch.dot, @, matmul, einsum" in msg
    assert "found:    it called" in msg


def test_python_loop_in_vectorised_dot_is_detected():
    def dot(x, w):
        total = torch.zeros((), dtype=x.dtype)
        for i in range(x.shape[0]):
            total = total + x[i] * w[i]
        return total

    msg = fails(ex01.check_dot, dot)
    assert "vectorised" in msg and "ATen ops for vectors of length 64" in msg


def test_vectorised_sum_in_dot_loop_is_detected():
    msg = fails(ex01.check_dot_loop, lambda x, w: float((x * w).sum()))
    assert "a Python loop over the elements" in msg and "torch.Tensor.sum" in msg


def test_cosine_with_a_loop_over_keys_is_detected():
    def cosine_similarity(query, keys):
        return torch.stack([torch.dot(k, query) / (k.norm() * query.norm()) for k in keys])

    msg = fails(ex01.check_cosine_similarity, cosine_similarity)
    assert "one matrix-vector product for all keys" in msg and "one per key for 5 keys, a Python loop" in msg


def test_cosine_without_any_gemv_is_detected():
    def cosine_similarity(query, keys):
        return (keys * query).sum(1) / (keys.norm(dim=1) * query.norm())

    msg = fails(ex01.check_cosine_similarity, cosine_similarity)
    assert "it ran no matrix-vector product" in msg


def test_builtin_cosine_is_forbidden():
    msg = fails(
        ex01.check_cosine_similarity, lambda q, keys: torch.nn.functional.cosine_similarity(q[None], keys, dim=-1)
    )
    assert "no torch.nn.functional.cosine_similarity" in msg


def test_top_k_tie_order_is_checked(sol01):
    cosine = sol01["cosine_similarity"]

    def top_k(query, keys, k):  # ties to the HIGHER index: flip, stable sort, flip back
        sims = cosine(query, keys).flip(0)
        order = torch.sort(sims, descending=True, stable=True).indices
        return (keys.shape[0] - 1 - order)[:k]

    msg = fails(ex01.check_top_k, top_k)
    assert "tie" in msg and "lower key index" in msg


def test_top_k_wrong_order_is_reported_with_similarities(sol01):
    cosine = sol01["cosine_similarity"]
    msg = fails(ex01.check_top_k, lambda q, keys, k: torch.sort(cosine(q, keys), stable=True).indices[:k])
    assert "at rank 0: key" in msg and "similarity" in msg


def test_top_k_returning_values_is_reported(sol01):
    cosine = sol01["cosine_similarity"]
    msg = fails(ex01.check_top_k, lambda q, keys, k: torch.sort(cosine(q, keys), descending=True).values[:k])
    assert "returns a 1-D integer tensor" in msg


# ---- a passing check says what it proved and what remains


def test_pass_message_says_what_was_proved_and_hidden_count(sol01, capsys):
    ex01.check_dot(sol01["dot"], hidden=10)
    out = capsys.readouterr().out
    assert out.startswith("✔ ex01_dot-dot: a vectorised x·w")
    assert "passed 8 cases" in out and "Grading runs 10 more hidden checks" in out


def test_recorder_sees_functions_and_aten_ops():
    x = torch.ones(4)
    with checks.record_calls() as log:
        (x * x).sum()
        x @ x
    assert log.aten["mul"] == 1 and log.aten["dot"] == 1
    assert "torch.Tensor.matmul" in log.functions


def test_nested_recorders_share_one_hook_and_each_sees_only_its_own_block():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    from twoprim.core.record import record_allocations

    x = torch.ones(4, 4)
    with record_allocations() as allocs:
        hook = _get_current_dispatch_mode()
        x + x  # outer only
        with checks.record_calls() as log:
            assert _get_current_dispatch_mode() is hook  # joined the outer hook, not stacked on it
            x @ x  # both
        x * x  # outer only, after the inner one left
    assert _get_current_dispatch_mode() is None
    assert [a.op for a in allocs] == ["add", "mm", "mul"]
    assert dict(log.aten) == {"mm": 1} and [op for op, _ in log.gemms] == ["mm"]
    assert len(getattr(hook, "seens", ())) == 1  # the inner recorder's callback went with it


def test_the_recorders_tensor_finder_matches_pytree():
    from torch.utils._pytree import tree_leaves

    from twoprim.core.record import _tensors

    a, b, c = torch.ones(1), torch.zeros(2), torch.arange(3)
    for value in [
        a,
        None,
        3,
        (a, 2, [b, (c,)], {"k": a}),
        ((a, b), {"out": c, "n": 1}),
        torch.return_types.max((a, c)),
        [],
        {},
    ]:
        assert _tensors(value) == [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def test_function_names_are_resolved_once_and_stay_right():
    from torch.overrides import resolve_name

    from twoprim.core.record import _NAMES, _function_name

    assert _function_name(torch.Tensor.add) == resolve_name(torch.Tensor.add) == "torch.Tensor.add"
    assert _NAMES[torch.Tensor.add] == "torch.Tensor.add"
    assert _function_name(torch.matmul) == "torch.matmul"


# ---- every ex01 rule catches its forbidden call (a wrong value, shape or dtype: tests/test_check_messages.py)

FORBIDDEN = {
    "dot_loop": lambda x, w: float(torch.dot(x, w)),
    "dot": lambda x, w: torch.dot(x, w),
    "cosine_similarity": lambda q, keys: torch.nn.functional.cosine_similarity(q[None], keys, dim=-1),
    "top_k": lambda q, keys, k: torch.sort(
        torch.nn.functional.cosine_similarity(q[None], keys, dim=-1), descending=True, stable=True
    ).indices[:k],
}


@pytest.mark.parametrize("name", list(FORBIDDEN))
def test_each_stated_rule_catches_its_forbidden_call(name):
    msg = fails(check_of("ex01_dot", name), FORBIDDEN[name])
    assert f"✘ ex01_dot-{name}: the answer breaks a rule of this exercise" in msg
    assert "found:    it called" in msg and "next:" in msg


def test_recorder_keeps_gemm_shapes_and_counts_their_flops():
    A, B, C = torch.randn(3, 5), torch.randn(5, 7), torch.randn(3, 7)
    with checks.record_calls() as log:
        A @ B  # mm: 2·3·7·5
        torch.addmm(C, A, B)  # addmm: the same GEMM plus C
        torch.randn(2, 3, 5) @ torch.randn(2, 5, 4)  # bmm: 2·2·3·4·5
        A @ torch.randn(5)  # mv: 2·3·5
    assert [op for op, _ in log.gemms] == ["mm", "addmm", "bmm", "mv"]
    assert log.gemms[1][1] == ((3, 7), (3, 5), (5, 7))
    assert log.gemm_flops() == 2 * 3 * 7 * 5 * 2 + 2 * 2 * 3 * 4 * 5 + 2 * 3 * 5


# ---- a failure caused by another graded function is blamed on that one first (in the kernel and in the grader)


def _learner(code: str) -> dict:
    """Functions defined as a notebook defines them: one module namespace, like a kernel's __main__."""
    ns = {"__name__": "learner_notebook", "torch": torch}
    exec(code, ns)  # noqa: S102 - the test's own code
    return ns


WRONG_DOT_NEURON = """
def dot(x, w):
    return (x[:-1] * w[:-1]).sum()          # forgets the last element

def neuron(x, w, b):
    return dot(x, w) + b                    # right, on top of the wrong dot
"""


def test_a_function_built_on_a_failing_one_names_it_first():
    ns = _learner(WRONG_DOT_NEURON)
    fails(ex01.check_dot, ns["dot"])
    msg = fails(ex01.check_neuron, ns["neuron"])
    assert msg.splitlines()[0] == "✘ ex01_dot-neuron: `dot` fails its check (ex01_dot-dot); fix it first.", msg
    assert "`neuron` calls `dot`" in msg.splitlines()[1]
    assert "  ✘ ex01_dot-neuron: wrong result." in msg and "case:" in msg  # neuron's own check, below


def test_no_blame_once_the_dependency_passes_or_when_it_is_not_called(sol01):
    ns = _learner(WRONG_DOT_NEURON)
    fails(ex01.check_dot, ns["dot"])
    exec("def dot(x, w):\n    return (x * w).sum()\n", ns)  # noqa: S102 - fixed, and its check run again
    ex01.check_dot(ns["dot"])
    exec("def neuron(x, w, b):\n    return dot(x, w) - b\n", ns)  # noqa: S102 - neuron now wrong on its own
    msg = fails(ex01.check_neuron, ns["neuron"])
    assert msg.startswith("✘ ex01_dot-neuron: wrong result."), msg
    other = _learner("def dot(x, w):\n    return x.sum()\n\ndef neuron(x, w, b):\n    return (x * w).sum() + 1\n")
    fails(ex01.check_dot, other["dot"])
    assert fails(ex01.check_neuron, other["neuron"]).startswith("✘ ex01_dot-neuron: wrong result.")


def test_a_stub_called_inside_is_reported_as_the_stubs_not_the_callers():
    ns = _learner("def dot(x, w):\n    raise NotImplementedError()\n\ndef neuron(x, w, b):\n    return dot(x, w) + b\n")
    fails(ex01.check_dot, ns["dot"])
    msg = fails(ex01.check_neuron, ns["neuron"])
    assert "`dot` fails its check" in msg.splitlines()[0]
    assert "`neuron` raised NotImplementedError in `dot`, which is not written yet" in msg
    assert "`neuron` is not written yet" not in msg


def test_a_stub_blames_nothing_else():
    ns = _learner(
        "def dot(x, w):\n    raise NotImplementedError()\n\n"
        "def neuron(x, w, b):\n    raise NotImplementedError()\n    return dot(x, w) + b\n"
    )
    fails(ex01.check_dot, ns["dot"])
    msg = fails(ex01.check_neuron, ns["neuron"])
    assert msg.startswith("✘ ex01_dot-neuron: `neuron` is not written yet"), msg


def test_the_grader_names_the_failing_dependency_from_the_recorded_results(tmp_path, monkeypatch, capsys):
    """The kernel only records (TWOPRIM_CAPTURE_DIR), judging nothing; the grader replays the test cells' source
    and judges."""
    from twoprim.core import verdicts

    ns = _learner(WRONG_DOT_NEURON)
    monkeypatch.setenv(verdicts.CAPTURE_ENV, str(tmp_path))
    for check, fn in ((ex01.check_dot, ns["dot"]), (ex01.check_neuron, ns["neuron"])):
        assert check(fn).answered  # recorded, not judged: no verdict exists in the kernel
    printed = capsys.readouterr().out
    assert "○ ex01_dot-dot: 8 cases recorded for the grader to judge." in printed and "✔" not in printed
    monkeypatch.delenv(verdicts.CAPTURE_ENV)
    replay = verdicts.Replay(tmp_path)
    learner = {"dot", "neuron"}
    dot = verdicts.judge_cell("ex01_dot-dot", "ex01.check_dot(dot)", replay, learner)
    neuron = verdicts.judge_cell("ex01_dot-neuron", "ex01.check_neuron(neuron)", replay, learner)
    assert not dot.passed and dot.text.startswith("✘ ex01_dot-dot: wrong result.")
    assert not neuron.passed
    assert neuron.text.startswith("✘ ex01_dot-neuron: `dot` fails its check (ex01_dot-dot); fix it first."), neuron.text
    again = verdicts.judge_cell("ex01_dot-neuron", "ex01.check_neuron(neuron)", verdicts.Replay(tmp_path), learner)
    assert again.text.startswith("✘ ex01_dot-neuron: wrong result."), "another submission starts with no failures"


# ---- readable differences


def test_a_wrong_element_is_named_by_coordinates_with_the_rows_around_it():
    want = torch.arange(60, dtype=torch.float64).reshape(3, 4, 5)
    got = want.clone()
    got[1, 2, 3] = -1.0
    with pytest.raises(checks.Mismatch) as info:
        checks.judge_tensor(got, want, atol=0.0, rtol=0.0)
    detail = info.value.detail
    assert "1 of 60 elements wrong" in detail
    assert "first wrong element: [1, 2, 3]: got -1, expected 33" in detail
    assert "around it, at dim 0 index 1 (* marks a wrong value):" in detail
    rows = [line for line in detail.splitlines() if line.strip().startswith(("row", "got", "expected"))]
    assert any(line.strip().startswith("row 2") for line in rows) and any("-1*" in line for line in rows)
    assert info.value.expected == "float64 tensor of shape (3, 4, 5)"


def test_a_transposed_result_is_recognised():
    want = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(checks.Mismatch) as info:
        checks.judge_tensor(want.T.contiguous(), want, atol=1e-12, rtol=0.0)
    assert "the same values as expected, in another order: row and column look swapped" in info.value.detail
    with pytest.raises(checks.Mismatch) as info:
        checks.judge_tensor(want.flip(0), want, atol=1e-12, rtol=0.0)
    assert "not any reordering of its axes" in info.value.detail  # the same values, but no axis order explains it


def test_relative_error_where_zero_was_expected_says_so():
    want = torch.tensor([0.0, 1.0, 2.0, 3.0, 0.0, 5.0, 6.0, 7.0, 8.0, 9.0], dtype=torch.float64)
    got = want.clone()
    got[4] = 0.5
    with pytest.raises(checks.Mismatch) as info:
        checks.judge_tensor(got, want, atol=1e-9, rtol=1e-9)
    detail = info.value.detail
    assert "e+30" not in detail, detail  # not 0.5 / tiny
    assert (
        "max rel error 0.00e+00" in detail and "1 wrong where the expected value is exactly 0 (got up to 0.5" in detail
    )
    with pytest.raises(checks.Mismatch) as info:
        checks.judge_tensor(torch.ones(10), torch.zeros(10), atol=1e-5, rtol=1e-5)
    assert "e+30" not in info.value.detail and "10 wrong where the expected value is exactly 0" in info.value.detail


def test_a_pass_reports_the_case_closest_to_failing_from_the_judges_numbers():
    """The worst case is chosen from each judge's measured error against its tolerance (not from its words): a case
    at half its tolerance beats one with a larger absolute error at a looser tolerance; a judge that measured
    nothing adds nothing."""
    cases = [
        checks.Case("loose", (torch.tensor([1.0], dtype=torch.float64),)),
        checks.Case("tight", (torch.tensor([2.0], dtype=torch.float64),)),
        checks.Case("unmeasured", (torch.tensor([3.0], dtype=torch.float64),)),
    ]
    tolerance = {1.0: 1e-1, 2.0: 1e-4}
    error = {1.0: 1e-2, 2.0: 5e-5}

    def judge(got, want, case):
        x = float(case.args[0])
        if x not in tolerance:
            return "exact"
        return checks.judge_tensor(got + error[x], want, atol=tolerance[x], rtol=0.0)

    result = checks.run_check(
        "ex00-worst", lambda x: x, cases, expected=lambda x: x, judge=judge, proves="x", quiet=True
    )
    assert result.summary.startswith("worst case: max abs error 5.00e-05") and "tolerance abs 1.0e-04" in result.summary
    only_words = checks.run_check(
        "ex00-words", lambda x: x, cases[2:], expected=lambda x: x, judge=judge, proves="x", quiet=True
    )
    assert only_words.summary == ""


# ---- every rule ex01 states has a visible case (issue #43): a wrong answer breaking only that rule passed the visible
# check before its case was added, and fails it now with a message about its own mistake


def _ex01_zero_key_divides_by_zero(query, keys):
    return (keys @ query) / (torch.linalg.vector_norm(keys, dim=1) * torch.linalg.vector_norm(query))  # no floor


@pytest.mark.parametrize(
    "check, wrong, rule, says",
    [
        # an accumulator started as a float32 0-d tensor promotes float16 (float32 and float64 keep their dtype)
        (
            ex01.check_dot,
            lambda sol: named("dot", lambda x, w: torch.zeros(()) + (x * w).sum()),
            lambda c: "float16" in c.label,
            ("dtype float32, expected float16 (the input's dtype)",),
        ),
        (
            ex01.check_dot,
            lambda sol: ignores_strides(sol["dot"]),
            lambda c: "non-contiguous" in c.label,
            ("read as if they were contiguous",),
        ),
        # torch.as_tensor(b) of a Python float is float32: it promotes a float16 result
        (
            ex01.check_neuron,
            lambda sol: named("neuron", lambda x, w, b: (x * w).sum() + torch.as_tensor(b)),
            lambda c: "float16" in c.label,
            ("dtype float32, expected float16 (the input's dtype)",),
        ),
        (
            ex01.check_cosine_similarity,
            lambda sol: named("cosine_similarity", _ex01_zero_key_divides_by_zero),
            lambda c: "all zeros" in c.label,
            ("NaN where a number was expected", "division by zero"),
        ),
        (
            ex01.check_cosine_similarity,
            lambda sol: ignores_strides(sol["cosine_similarity"]),
            lambda c: "non-contiguous" in c.label,
            ("`keys` read as if it were contiguous",),
        ),
    ],
    ids=["dot-float16", "dot-strides", "neuron-float16", "cosine-zero-key", "cosine-strides"],
)
def test_each_stated_rule_of_ex01_has_a_visible_case(sol01, check, wrong, rule, says):
    assert_rule_is_visible(check, wrong(sol01), rule, *says)
