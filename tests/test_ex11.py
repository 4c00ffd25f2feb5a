"""ex11_flash_attention: the solution passes and its compiled sm_90 kernel is FlashAttention (two tensor-core groups in
the loop); each wrong kernel a learner writes fails the visible check with a message about its own cause, read from
the wrong output (no rescale, no scale, the causal mask off by one, 0 for −inf, l not rescaled) or from the compiled
kernel (the scores written to a buffer and read back, a broadcast product beside one tl.dot, a float16 accumulator,
one block of keys as wide as S). Every kernel runs in Triton's interpreter on CPU tensors; each wrong kernel is the
solution's cell with one edit, as a learner's would be."""

from __future__ import annotations

import itertools
import linecache
import math
import re
from typing import Any

import pytest
import torch

from twoprim.assignments import ex11_flash_attention as ex11
from twoprim.config import ROOT
from twoprim.core.notebooks import code_of
from twoprim.topics import flash_attention as flash
from twoprim.topics import triton_compiled as triton_compile

# isort: split
# triton after ex11: ex11 turns the interpreter on before the kernels below
import triton
import triton.language as tl

from .conftest import fails, solution_namespace

NOTEBOOK = ROOT / "solutions" / "ex11_flash_attention" / "ex11_flash_attention.ipynb"
SOLUTION = next(source for source in code_of(NOTEBOOK) if "def flash_attention_kernel(" in source)
_numbers = itertools.count()


@pytest.fixture(scope="module")
def sol():
    return solution_namespace("ex11_flash_attention")


def variant(*edits: tuple[str, str]) -> dict:
    """The solution's cell with each (old, new) edit applied, run as a notebook cell: its kernel and wrapper."""
    source = SOLUTION
    for old, new in edits:
        assert old in source, f"{old!r} is not in the solution"
        source = source.replace(old, new)
    name = f"<ex11-variant-{next(_numbers)}>"
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)  # Triton reads the source
    ns = {"ex11": ex11, "torch": torch, "triton": triton, "tl": tl, "math": math}
    exec(compile(source, name, "exec"), ns)  # noqa: S102 - the course's own solution, edited here
    return ns


def check(ns: dict, cases=None):
    return ex11.check_flash_attention_kernel(ns["flash_attention_kernel"], ns["flash_attention"], cases)


def test_the_solution_passes_and_its_tick_names_the_compiled_evidence(sol, capsys):
    """The visible check passes; the line after ✔ is the sm_90 and sm_80 compile of the longest float16 launch."""
    ex11.check_flash_attention_kernel(sol["flash_attention_kernel"], sol["flash_attention"])
    out = capsys.readouterr().out
    assert "✔ ex11_flash_attention-flash_attention_kernel: " in out and "passed 7 cases" in out, out
    assert "as Triton's launcher specialises the launch of case '(B, H, S, D) = (2, 2, 100, 32), float16" in out, out
    assert re.search(
        r"TTIR: 2 tt\.dot inside scf\.for #0: f16·f16 -> f32 \(64×32, sums over 32, line \d+\), "
        r"f16·f16 -> f32 \(64×32, sums over 32, line \d+\)",
        out,
    ), out
    assert "the loop carries tensor<64xf32>, tensor<64xf32> (m, l) and tensor<64x32xf32> (the accumulator)" in out
    assert re.search(r"tt\.store of a 64×32 f16 tile to o_ptr after the loop \(line \d+\)", out), out
    assert (
        "PTX:  one pass through the loop: 4 wgmma.mma_async in 2 wgmma groups, 131,072 multiply-adds on the "
        "tensor cores (its dots need 131,072)"
    ) in out, out
    assert "sm_80: 16 mma.sync" in out and "program(s) resident at once on each SM of an NVIDIA H100/H200" in out


@pytest.mark.parametrize("blocks", [(64, 64, 64), (128, 64, 64)], ids=lambda b: "×".join(map(str, b)))
def test_the_solution_compiles_to_two_tensor_core_groups_in_the_loop(sol, blocks):
    """sm_90, as a float16 launch at S = 1024 specialises it: the loop over key blocks holds two wgmma groups whose
    multiply-adds are both products, BLOCK_M·BLOCK_N·D each (128 rows: two warpgroups, 8 warps); sm_80 the same
    multiply-adds in mma.sync. Nothing is stored but O, after the loop; m, l and the accumulator are float32."""
    bm, bn, d = blocks
    warps = 8 if bm == 128 else 4
    q = torch.empty(1, 2, 1024, d, dtype=torch.float16)
    args = (q, q, q, torch.empty_like(q), 2, 1024, 0.125, *q.stride(), *q.stride(), *q.stride(), *q.stride())
    for target in ("sm_90", "sm_80"):
        c = triton_compile.compile_launch(
            sol["flash_attention_kernel"],
            *args,
            D=d,
            CAUSAL=True,
            BLOCK_M=bm,
            BLOCK_N=bn,
            target=target,
            num_warps=warps,
        )
        assert c.error is None, c.error
        ev = flash.loop_evidence(c)
        assert len(ev.dots) == 2 and not ev.other_dots and not ev.unrolled
        assert ev.macs == ev.needed == 2 * bm * bn * d
        if target == "sm_90":
            assert ev.wgmma_groups == 2 and ev.counts["wgmma.mma_async"] > 0 and ev.counts["mma.sync"] == 0
        else:
            assert ev.counts["mma.sync"] > 0 and ev.counts["wgmma.mma_async"] == 0
        assert [s.arguments for s in ev.stores] == [["o_ptr"]] and not ev.stores[0].in_loop
        assert ev.state() == {"rows": [f"tensor<{bm}xf32>"] * 2, "tiles": [f"tensor<{bm}x{d}xf32>"]}
        assert ex11._flash_problem(sol["flash_attention_kernel"], c) is None
        assert c.registers > 0 and c.shared > 0 and 0 < c.occupancy().fraction <= 1


def test_a_launch_whose_loop_the_compiler_removed_is_not_judged_on_its_loop(sol):
    """S = 1 is compiled in as a constant and the loop that runs once is folded away: no scf.for is left, so that
    compile cannot show the loop (its tt.dots stand outside any loop); the rule leaves it to the check's other launches
    and a check of S = 1 cases alone passes."""
    q = torch.empty(1, 1, 1, 32, dtype=torch.float16)
    c = triton_compile.compile_launch(
        sol["flash_attention_kernel"],
        q,
        q,
        q,
        torch.empty_like(q),
        1,
        1,
        0.2,
        *q.stride(),
        *q.stride(),
        *q.stride(),
        *q.stride(),
        D=32,
        CAUSAL=False,
        BLOCK_M=64,
        BLOCK_N=32,
        target="sm_90",
    )
    assert c.error is None and "S" in c.ones and ex11._loop_compiled_away(c)
    assert flash.loop_evidence(c).loop is None and c.tensor_core_macs() == 2 * 64 * 32 * 32
    ex11.check_flash_attention_kernel(
        sol["flash_attention_kernel"],
        sol["flash_attention"],
        ex11.attention_cases([(1, 1, 1, 32)], [torch.float16], seed=3),
    )


# ---- wrong values, each told its own cause --------------------------------------------------------------------

ACC = "acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v)"


def test_an_accumulator_not_rescaled_is_told_its_cause_and_the_rows_it_spoils():
    msg = fails(check, variant((ACC, "acc = acc + tl.dot(p.to(v.dtype), v)")))
    assert "(B, H, S, D) = (1, 2, 64, 32), float32, not causal" in msg, msg
    assert (
        "cause:    O matches the loop over blocks of 32 keys (2 blocks for S = 64) in which the accumulator is not "
        "rescaled by exp(m_old − m_new) when the running max grows"
    ) in msg, msg
    rows = re.search(
        r"whose max never grew after the first block are right \(largest error ([\d.e+-]+)\), those whose "
        r"max grew are wrong \(largest error by how often it grew, 1 time: ([\d.e+-]+)\)",
        msg,
    )
    assert rows and float(rows.group(1)) < 1e-5 < 0.05 < float(rows.group(2)), msg
    assert "multiply both l and the accumulator by alpha = exp(m − m_new)" in msg.split("next:")[1]


def test_a_running_sum_not_rescaled_is_told_its_cause():
    msg = fails(check, variant(("l_i = l_i * correction + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)")))
    assert "in which the running sum l is not rescaled by exp(m_old − m_new)" in msg, msg


def test_the_scale_missing_is_told_its_cause():
    msg = fails(check, variant(("qk = tl.dot(q, tl.trans(k)) * scale", "qk = tl.dot(q, tl.trans(k))")))
    assert "cause:    O equals attention whose softmax takes no scale at all: the scores are q·k, not q·k/√D" in msg
    assert "multiply the scores by scale = 1/√D" in msg.split("next:")[1]


def test_exp2_without_log2e_is_told_its_cause():
    msg = fails(
        check,
        variant(
            ("correction = tl.exp(m_i - m_new)", "correction = tl.exp2(m_i - m_new)"),
            ("p = tl.exp(qk - m_new[:, None])", "p = tl.exp2(qk - m_new[:, None])"),
        ),
    )
    assert "q·k/√D·ln 2: tl.exp2 of the scores without the factor log2(e)" in msg, msg


def test_a_causal_mask_off_by_one_is_told_its_cause():
    """The first causal case (S = 20) fails: query i sees keys up to i − 1, and row 0 sees nothing (NaN)."""
    msg = fails(check, variant(("cols[None, :] <= offs_m[:, None]", "cols[None, :] < offs_m[:, None]")))
    assert "(B, H, S, D) = (1, 2, 20, 16), float32, causal" in msg, msg
    assert (
        "cause:    O equals causal attention in which query i sees keys 0..i−1 only: the mask hides the diagonal "
        "(key i itself); row 0 sees no key at all, so it comes out NaN (0/0)"
    ) in msg, msg
    assert "the diagonal included" in msg.split("next:")[1]


def test_masked_scores_filled_with_zero_are_told_their_cause():
    msg = fails(check, variant(('qk = tl.where(visible, qk, float("-inf"))', "qk = tl.where(visible, qk, 0.0)")))
    assert "(B, H, S, D) = (2, 2, 100, 32), float16, not causal" in msg, msg
    assert (
        "O matches the loop over blocks of 32 keys with the scores of the 28 padding keys past S = 100 in the last "
        "block of 32 set to 0 instead of −inf"
    ) in msg, msg


def test_a_grid_that_rounds_down_is_told_its_ragged_block_is_missing(sol):
    """Told by the first case with a ragged block, right after the solution ran every case of the check as well: the
    rows no program wrote read NaN inside the check (the next test), never the values an earlier correct run left in
    a buffer the allocator hands back, which once let this variant pass that case (the whole suite in one process)."""
    ex11.check_flash_attention_kernel(sol["flash_attention_kernel"], sol["flash_attention"])
    msg = fails(check, variant(("grid = (triton.cdiv(S, BLOCK_M), B * H)", "grid = (S // BLOCK_M, B * H)")))
    assert "(B, H, S, D) = (2, 2, 100, 32), float16" in msg, msg
    assert "cause:    queries 0–63 are right and the ragged last block (queries 64–99) is wrong" in msg, msg
    assert "not S // BLOCK_M" in msg.split("next:")[1]


def test_memory_a_wrapper_leaves_uninitialised_reads_nan_and_torch_is_left_as_it_was():
    """What the checks' wrappers run inside (`triton_gemm.uninitialized_reads_nan`, entered by `launches()`)."""
    from twoprim.topics import triton_gemm

    numbers = torch.full((4096,), 1.5)
    del numbers  # a freed buffer that holds numbers
    with triton_gemm.uninitialized_reads_nan():
        assert torch.empty(4096).isnan().all() and torch.empty(16, 16, dtype=torch.float16).isnan().all()
        assert (torch.empty(8, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # a learner's own setting is kept too
    try:
        with triton_gemm.uninitialized_reads_nan():
            pass
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_a_causal_flag_that_masks_nothing_is_told_its_cause():
    msg = fails(check, variant(("visible = visible & (cols[None, :] <= offs_m[:, None])", "visible = visible")))
    assert "cause:    O equals attention without the causal mask: every query saw every key" in msg, msg


def test_a_mistake_no_pattern_fits_gets_the_generic_list_and_says_so():
    msg = fails(check, variant(("out = acc / l_i[:, None]", "out = acc / (l_i[:, None] + 1.0)")))
    assert "cause:    none of the causes this check recognises fits the wrong values (the softmax scale" in msg, msg
    assert "compare your kernel with lesson 11 step by step" in msg.split("next:")[1]


def test_strides_ignored_are_told_their_cause():
    """q, k, v addressed as if contiguous: the first head-interleaved case fails with that cause."""
    msg = fails(
        check,
        variant(
            ("*q.stride(), *k.stride(), *v.stride(), *o.stride()", "*o.stride(), *o.stride(), *o.stride(), *o.stride()")
        ),
    )  # O's: contiguous
    assert "q, k, v views of a (B, S, H, D) tensor" in msg, msg
    assert "cause:    O equals attention of q, k, v read as if contiguous: the loads ignore their strides" in msg, msg


# ---- right values, not FlashAttention: read from the compiled kernel -------------------------------------------

SCRATCH: str = """
@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, H, S, scale,
                           stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
                           stride_vb, stride_vh, stride_vs, stride_vd, stride_ob, stride_oh, stride_os, stride_od,
                           D: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    d = tl.arange(0, D)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + d[None, :] * stride_qd,
                mask=rows[:, None] < S, other=0.0)
    scores = s_ptr + bh * S * S + rows[:, None] * S                  # this program's rows of a (B·H, S, S) buffer
    for start in range(0, S, BLOCK_N):                                # pass 1: every score to global memory
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + b * stride_kb + h * stride_kh + keys[:, None] * stride_ks + d[None, :] * stride_kd,
                    mask=keys[:, None] < S, other=0.0)
        tl.store(scores + keys[None, :], tl.dot(q, tl.trans(k)) * scale, mask=(rows[:, None] < S) & (keys[None, :] < S))
    m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    for start in range(0, S, BLOCK_N):                                # pass 2: read back, softmax, times V
        keys = start + tl.arange(0, BLOCK_N)
        keep = (keys[None, :] < S) & (rows[:, None] < S)
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        s = tl.load(scores + keys[None, :], mask=keep, other=float("-inf"))
        v = tl.load(v_ptr + b * stride_vb + h * stride_vh + keys[:, None] * stride_vs + d[None, :] * stride_vd,
                    mask=keys[:, None] < S, other=0.0)
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        l = l * tl.exp(m - m_new) + tl.sum(p, axis=1)
        acc = acc * tl.exp(m - m_new)[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + d[None, :] * stride_od,
             (acc / l[:, None]).to(o_ptr.dtype.element_ty), mask=rows[:, None] < S)


def flash_attention(q, k, v, causal=False):
    B, H, S, D = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    scratch = torch.empty(B * H * S * S, dtype=torch.float32)
    flash_attention_kernel[(triton.cdiv(S, 64), B * H)](q, k, v, o, scratch, H, S, 1.0 / math.sqrt(D), *q.stride(),
                                                       *k.stride(), *v.stride(), *o.stride(), D=D, CAUSAL=causal,
                                                       BLOCK_M=64, BLOCK_N=32)
    return o
"""


def test_scores_written_to_a_buffer_and_read_back_are_not_flash_attention():
    """Right values (the first case alone passes the judge), yet the rule read from the compiled kernel fails."""
    name = "<ex11-scratch>"
    linecache.cache[name] = (len(SCRATCH), None, SCRATCH.splitlines(keepends=True), name)
    ns: dict[str, Any] = {"torch": torch, "triton": triton, "tl": tl, "math": math}
    exec(compile(SCRATCH, name, "exec"), ns)  # noqa: S102
    q, k, v = ex11.attention_cases([(1, 2, 64, 32)], seed=1)[0].args
    assert torch.allclose(ns["flash_attention"](q, k, v), flash.reference(q, k, v), atol=1e-5)
    msg = fails(check, ns)
    assert "breaks a rule of this exercise: flash_attention_kernel compiles for a GPU (sm_90) to FlashAttention" in msg
    assert re.search(
        r"found:    compiled for sm_90, the kernel stores a 64×32 f32 tile to s_ptr \(line \d+: "
        r"`tl\.store\(scores \+ keys\[None, :\].*`\) inside a loop and loads it back \(line \d+: "
        r"`s = tl\.load\(scores \+ keys\[None, :\].*`\): the scores make a round trip through global "
        r"memory",
        msg,
    ), msg
    assert "right values, not FlashAttention" in msg and "the kernel's only store is O's tile" in msg.split("next:")[1]


def test_one_tl_dot_and_a_broadcast_product_is_not_on_the_tensor_cores():
    """Triton makes the broadcast multiply and tl.sum a dot of float32 blocks at full precision: one pass through the
    PTX loop does half the tensor-core multiply-adds the two products need."""
    ns = variant(
        (ACC, "acc = acc * correction[:, None] + tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)")
    )
    msg = fails(check, ns)
    assert re.search(
        r"found:    compiled for sm_90, one pass through the loop does [\d,]+ multiply-adds on the tensor "
        r"cores where its two products need [\d,]+: the product at line \d+: `acc = acc \* correction"
        r"\[:, None\] \+ tl\.sum\(p\[:, :, None\] \* v.*` is a tt\.dot of f32·f32 at full float32 "
        r"precision \(inputPrecision = ieee",
        msg,
    ), msg
    done, need = (int(n.replace(",", "")) for n in re.findall(r"does ([\d,]+) .* need ([\d,]+):", msg)[0])
    assert 2 * done == need
    assert "tl.dot(p.to(v.dtype), v)" in msg.split("next:")[1]


def test_a_float16_accumulator_is_read_from_the_loop_it_carries():
    ns = variant(
        ("acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)", "acc = tl.zeros((BLOCK_M, D), dtype=q.dtype)"),
        (ACC, "acc = (acc * correction[:, None] + tl.dot(p.to(v.dtype), v)).to(q.dtype)"),
    )
    msg = fails(check, ns)
    assert "(B, H, S, D) = (2, 2, 100, 32), float16" in msg, msg
    assert (
        "compiled for sm_90, the loop over key blocks carries tensor<64x32xf16> from one block to the next: m, l "
        "and the accumulator are rounded to f16 at every block"
    ) in msg, msg


def test_a_block_of_keys_as_wide_as_s_breaks_the_streaming_rule():
    msg = fails(check, variant(("BLOCK_M, BLOCK_N = 64, 32", "BLOCK_M, BLOCK_N = 64, triton.next_power_of_2(S)")))
    assert "(B, H, S, D) = (2, 2, 100, 32), float16" in msg, msg
    assert (
        "found:    for S = 100 no program called tl.dot more than 2 time(s) (sums over [32, 128]): one block of "
        "keys covers all 100 keys, so the loop over key blocks runs once"
    ) in msg, msg


def test_attention_in_torch_breaks_the_rule(sol):
    def flash_attention(q, k, v, causal=False):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    msg = fails(ex11.check_flash_attention_kernel, sol["flash_attention_kernel"], flash_attention)
    assert "breaks a rule" in msg and "launched no Triton kernel" in msg, msg


def test_the_guard_names_what_is_wrong(sol):
    q = torch.randn(1, 2, 8, 32)
    for args, error, said in [
        ((q.double(), q.double(), q.double()), TypeError, "tl.dot multiplies float32, float16"),
        ((q[..., :24], q[..., :24], q[..., :24]), ValueError, "head size D = 24"),
        ((q, q[:, :1], q), ValueError, "differ"),
        ((q[0], q[0], q[0]), ValueError, "4-D"),
    ]:
        with pytest.raises(error, match=re.escape(said)):
            sol["flash_attention"](*args)


def test_the_diagnosis_simulation_is_sdpa_when_nothing_is_wrong():
    """The loop the causes are simulated with, run with every step right, is SDPA itself (any block sizes)."""
    for case in ex11.attention_cases([(1, 2, 37, 16)], causal=True, seed=9) + ex11.attention_cases([(2, 1, 50, 32)]):
        q, k, v = case.args
        want = flash.reference(q.double(), k.double(), v.double(), case.kwargs["causal"])
        for bn, bm in [(16, None), (32, 16), (64, 64)]:
            got = ex11._blocked(q, k, v, case.kwargs["causal"], bn, bm=bm)
            assert torch.allclose(got, want, atol=1e-12), (case.label, bn, bm)
