"""ex09_triton: every check explains a wrong value, a missing mask, ignored strides and half-precision accumulation;
every stated rule (the wrapper launches the kernel and computes nothing; tl.dot inside a K loop) catches its
forbidden spelling. All kernels run in Triton's interpreter on CPU tensors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from twoprim.assignments import ex09_triton as ex09
from twoprim.topics import triton_gemm as triton_tools

# isort: split
# triton after ex09: ex09 turns the interpreter on before the kernels below
import triton
import triton.language as tl

from .conftest import fails, solution_namespace


@pytest.fixture(scope="module")
def sol():
    return solution_namespace("ex09_triton")


def test_everything_runs_in_the_interpreter():
    assert triton_tools.interpreting() and triton_tools.device() == "cpu"


TRITON_IMPORTED_FIRST = textwrap.dedent("""
    import sys
    import torch._inductor                          # imports triton before the interpreter is on, as torch.compile does
    import triton, triton.language as tl
    from triton.runtime.jit import JITFunction
    assert "triton" in sys.modules and type(tl.sum) is JITFunction, type(tl.sum)   # the library is not interpreted

    @triton.jit
    def row_stats(x_ptr, out_ptr, n, BLOCK: tl.constexpr):   # decorated before setup(): a JITFunction too
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n, other=0.0)
        tl.store(out_ptr + cols, tl.sum(x, axis=0) + x.max(axis=0) + tl.cdiv(n, 2) + 0 * x, mask=cols < n)

    assert type(row_stats) is JITFunction
    from twoprim import ex09, triton_tools
    from tests.conftest import solution_namespace

    x, out = torch.arange(10.0), torch.empty(10)
    with triton_tools.launches() as seen:
        row_stats[(1,)](x, out, 10, BLOCK=16)
    assert torch.equal(out, torch.full((10,), 45.0 + 9.0 + 5.0)), out
    assert seen.names() == ["row_stats"], seen.names()       # one launch, recorded once
    sol = solution_namespace("ex09_triton")
    for check, kernel, wrapper in [(ex09.check_add_kernel, "add_kernel", "add"),
                                   (ex09.check_softmax_kernel, "softmax_kernel", "softmax"),
                                   (ex09.check_matmul_kernel, "matmul_kernel", "matmul")]:
        result = check(sol[kernel], sol[wrapper])
        print(result.task, result.cases, "cases ok")
""")


def test_the_interpreter_works_when_triton_was_imported_first(root, tmp_path):
    """torch._inductor (or a learner's `import triton`) imports Triton before ex09 turns the interpreter on: Triton's
    own `tl.sum`/`tl.max` and kernels decorated earlier are then JITFunctions, which the interpreter cannot call
    ("Cannot call @triton.jit'd outside of the scope of a kernel") or launch ("0 active drivers")."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a fresh process, as a notebook's kernel
    script = tmp_path / "triton_first.py"  # a file: Triton reads a kernel's source
    script.write_text(TRITON_IMPORTED_FIRST)
    env["PYTHONPATH"] = str(root)
    done = subprocess.run([sys.executable, str(script)], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = [line.split()[0] for line in done.stdout.splitlines() if line.endswith("cases ok")]
    assert passed == [f"ex09_triton-{k}" for k in ("add_kernel", "softmax_kernel", "matmul_kernel")], done.stdout


def test_bfloat16_dot_reads_numbers_not_bit_patterns():
    @triton.jit
    def dot16(a_ptr, b_ptr, c_ptr):
        r = tl.arange(0, 16)
        a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
        b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
        tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b))

    a, b = torch.randint(-2, 3, (16, 16)).bfloat16(), torch.randint(-2, 3, (16, 16)).bfloat16()
    c = torch.zeros(16, 16)
    dot16[(1,)](a, b, c)
    assert torch.equal(c, a.float() @ b.float())  # small integers: exact in float32


# ---- add ------------------------------------------------------------------------------------------------------


@triton.jit
def add_no_mask(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, stride_out, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs * stride_out, tl.load(x_ptr + offs * stride_x) + tl.load(y_ptr + offs * stride_y))


@triton.jit
def add_no_stride(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, stride_out, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def add_no_out_stride(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, stride_out, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * stride_x, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs * stride_y, mask=mask), mask=mask)  # out's stride ignored


@triton.jit
def add_one_stride(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, stride_out, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * stride_x, mask=mask)
    y = tl.load(y_ptr + offs * stride_x, mask=mask)  # x's stride for y
    tl.store(out_ptr + offs * stride_out, x + y, mask=mask)


def _add_with(kernel):
    def add(x, y, out=None):
        out = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
        kernel[(triton.cdiv(x.shape[0], 64),)](x, y, out, x.shape[0], x.stride(0), y.stride(0), out.stride(0), BLOCK=64)
        return out

    return add


def test_add_without_mask_is_caught_on_a_ragged_length():
    msg = fails(ex09.check_add_kernel, add_no_mask, _add_with(add_no_mask), ex09.add_cases([100]))
    assert msg.startswith("✘ ex09_triton-add_kernel: ") and "length 100" in msg
    # lanes 100-127 of the last block read past x; how many of them land inside y or out instead depends on where
    # the allocator put those (64-byte aligned: at least 12 never do), so the count is not pinned
    found = re.search(
        r"IndexError\('tl\.load: (\d+) of its 64 unmasked addresses lie outside every tensor argument "
        r"\(the first one \d+ element\(s\) past the end of a tensor argument\); mask the load",
        msg,
    )
    assert found and 12 <= int(found.group(1)) <= 28, msg


def test_add_ignoring_strides_fails_a_visible_check():
    """The visible check itself (its default cases), not a hidden one: x every other element, y every third."""
    msg = fails(ex09.check_add_kernel, add_no_stride, _add_with(add_no_stride))
    assert "wrong result" in msg and "length 1000, float32, x every other element and y every third" in msg, msg
    assert (
        "cause:    out equals the sum with x through stride 1 (as if contiguous) instead of its stride 2 and y "
        "through stride 1 (as if contiguous) instead of its stride 3"
    ) in msg, msg
    assert "with x.stride(0) and y.stride(0) passed in that order" in msg.split("next:")[1]
    ex09.check_add_kernel(add_no_stride, _add_with(add_no_stride), ex09.add_cases([100]))  # contiguous: right


def test_add_reading_y_through_xs_stride_is_told_its_cause():
    msg = fails(ex09.check_add_kernel, add_one_stride, _add_with(add_one_stride))
    assert "cause:    out equals the sum with y through x's stride 2 instead of its stride 3" in msg, msg


def test_add_ignoring_the_output_stride_fails_a_visible_check():
    msg = fails(ex09.check_add_kernel, add_no_out_stride, _add_with(add_no_out_stride))
    assert "length 256, float32" in msg and "out every other element of a wider buffer" in msg, msg
    assert "cause:    out's buffer holds the right values, written as if out were contiguous" in msg, msg
    assert "out_ptr + i * stride_out" in msg.split("next:")[1]


def test_a_wrapper_that_ignores_out_breaks_the_rule(sol):
    def add(x, y, out=None):  # always a new tensor
        return sol["add"](x, y)

    msg = fails(ex09.check_add_kernel, sol["add_kernel"], add)
    assert "given out=, the wrapper writes the result into out" in msg and "left out unwritten" in msg, msg
    assert "return out" in msg.split("next:")[1]


def test_add_in_torch_breaks_the_rule(sol):
    msg = fails(ex09.check_add_kernel, sol["add_kernel"], lambda x, y: x + y)
    assert "breaks a rule" in msg and "launched no Triton kernel" in msg


def test_add_that_launches_another_kernel_breaks_the_rule(sol):
    msg = fails(ex09.check_add_kernel, sol["add_kernel"], _add_with(add_no_stride))
    assert "it launched add_no_stride, but not add_kernel" in msg


# ---- softmax --------------------------------------------------------------------------------------------------


@triton.jit
def softmax_unstable(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, stride_on, BLOCK_N: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x)
    tl.store(out_ptr + row * stride_om + cols * stride_on, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def softmax_no_out_column_stride(
    x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, stride_on, BLOCK_N: tl.constexpr
):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride_om + cols, e / tl.sum(e, axis=0), mask=mask)  # out's column stride ignored


def _softmax_with(kernel):
    def softmax(x, out=None):
        out = torch.empty(x.shape, dtype=x.dtype) if out is None else out
        kernel[(x.shape[0],)](
            x,
            out,
            x.shape[1],
            x.stride(0),
            x.stride(1),
            out.stride(0),
            out.stride(1),
            BLOCK_N=triton.next_power_of_2(x.shape[1]),
        )
        return out

    return softmax


def test_softmax_without_the_max_overflows_on_large_values():
    ex09.check_softmax_kernel(softmax_unstable, _softmax_with(softmax_unstable), ex09.softmax_cases([(3, 20)]))
    msg = fails(
        ex09.check_softmax_kernel,
        softmax_unstable,
        _softmax_with(softmax_unstable),
        ex09.softmax_cases([(2, 64)], scale=200.0),
    )
    assert "exp overflows" in msg and "NaN" in msg


def test_softmax_ignoring_outs_column_stride_fails_a_visible_check():
    msg = fails(ex09.check_softmax_kernel, softmax_no_out_column_stride, _softmax_with(softmax_no_out_column_stride))
    assert "x (5, 64), float32, every other column" in msg and "out every other column" in msg, msg
    assert (
        "cause:    out's buffer holds the right values, written each row as if contiguous: the store ignores "
        "out's column stride (2)"
    ) in msg, msg


def test_softmax_in_torch_breaks_the_rule(sol):
    msg = fails(ex09.check_softmax_kernel, sol["softmax_kernel"], lambda x: torch.softmax(x, -1))
    assert "breaks a rule" in msg and "launched no Triton kernel" in msg

    def both(x, out=None):
        sol["softmax"](x, out)  # launches the kernel, then returns torch's softmax
        return torch.softmax(x, -1)

    msg = fails(ex09.check_softmax_kernel, sol["softmax_kernel"], both)
    assert "the kernel computes the softmax" in msg and "torch.softmax" in msg


# ---- matmul ---------------------------------------------------------------------------------------------------


@triton.jit
def matmul_one_dot(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(
        a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0
    )
    b = tl.load(
        b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0
    )
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        tl.dot(a, b).to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@triton.jit
def _k_blocks(a_ptr, b_ptr, rm, rn, ks, M, N, K, stride_am, stride_ak, stride_bk, stride_bn):
    """The (rows rm, columns ks) block of A and the (rows ks, columns rn) block of B, masked to 0 outside."""
    a = tl.load(
        a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak, mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0
    )
    b = tl.load(
        b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn, mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0
    )
    return a, b


@triton.jit
def matmul_half_acc(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty)  # the input's dtype: float16 or bfloat16
    for k0 in range(0, K, BLOCK_K):
        a, b = _k_blocks(a_ptr, b_ptr, rm, rn, k0 + rk, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)
        acc = (acc.to(tl.float32) + tl.dot(a, b)).to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_no_k_mask(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak, mask=rm[:, None] < M, other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * stride_bk + rn[None, :] * stride_bn, mask=rn[None, :] < N, other=0.0)
        acc += tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def _matmul_with(kernel, block_k: int | None = 32):
    def matmul(A, B, out=None):
        (M, K), N = A.shape, B.shape[1]
        C = torch.empty(M, N, dtype=A.dtype) if out is None else out
        bk = block_k or triton.next_power_of_2(K)
        kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](
            A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride(), BLOCK_M=32, BLOCK_N=32, BLOCK_K=bk
        )
        return C

    return matmul


def test_one_dot_without_a_k_loop_breaks_the_rule_even_when_right():
    matmul = _matmul_with(matmul_one_dot, block_k=None)  # one block as long as K: right values, no K loop
    A, B = ex09.matmul_cases([(5, 6, 70)])[0].args
    assert torch.allclose(matmul(A, B), (A.double() @ B.double()).to(A.dtype), atol=1e-4)
    msg = fails(ex09.check_matmul_kernel, matmul_one_dot, matmul)
    assert "compiles for a GPU" in msg and "its TTIR has tt.dot outside any scf.for" in msg, msg
    assert "one block of K, not a loop over K's blocks" in msg


def test_a_k_loop_that_runs_once_breaks_the_rule_even_when_right(sol):
    """The solution's kernel, launched with BLOCK_K ≥ K: tl.dot sits in a loop in the source, but the loop takes all
    of K in one step, so the source check alone would pass it."""
    matmul = _matmul_with(sol["matmul_kernel"], block_k=None)
    case = ex09.matmul_cases([(5, 6, 70)])
    A, B = case[0].args
    assert torch.allclose(matmul(A, B), (A.double() @ B.double()).to(A.dtype), atol=1e-4)
    msg = fails(ex09.check_matmul_kernel, sol["matmul_kernel"], matmul)
    assert "M=37, N=45, K=70" in msg and "for K = 70 each program called tl.dot once, on a block 128 wide" in msg
    assert "keep BLOCK_K fixed (32)" in msg
    ex09.check_matmul_kernel(sol["matmul_kernel"], matmul, ex09.matmul_cases([(37, 45, 64)]))  # K ≤ LOOP_K: one block
    ex09.check_matmul_kernel(
        sol["matmul_kernel"], _matmul_with(sol["matmul_kernel"], block_k=64), ex09.matmul_cases([(37, 45, 70)])
    )  # two steps of 64: a loop over K


@triton.jit
def matmul_dead_dot(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a, b = _k_blocks(a_ptr, b_ptr, rm, rn, k0 + rk, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)
        a, b = a.to(tl.float32), b.to(tl.float32)
        acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)  # broadcast and sum: no matrix units
        if K < 0:
            acc += tl.dot(a, b)  # never runs
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def test_a_tl_dot_that_never_runs_breaks_the_rule_even_when_right():
    cases = ex09.matmul_cases([(37, 45, 70)])
    msg = fails(ex09.check_matmul_kernel, matmul_dead_dot, _matmul_with(matmul_dead_dot), cases)
    assert "matmul_dead_dot ran without calling tl.dot" in msg and "computed another way" in msg, msg
    assert "tl.dot inside a loop over K" in msg


def test_launches_record_each_programs_dot_blocks(sol):
    A, B = ex09.matmul_cases([(40, 20, 70)])[0].args
    with triton_tools.launches() as seen:
        sol["matmul"](A, B)
    (launch,) = seen.of(sol["matmul_kernel"])
    assert launch.name == "matmul_kernel" and launch.grid == (2, 1)
    assert launch.dots == {(0, 0, 0): [32, 32, 32], (1, 0, 0): [32, 32, 32]}


def test_torch_matmul_in_the_wrapper_breaks_the_rule(sol):
    def matmul(A, B, out=None):
        sol["matmul"](A, B, out)  # launches the kernel, then returns torch's product
        return A @ B

    msg = fails(ex09.check_matmul_kernel, sol["matmul_kernel"], matmul)
    assert "no torch matmul in the wrapper" in msg and "aten.mm" in msg


def test_half_precision_accumulation_is_caught():
    """Rounded to float16 after every block: it compiles, and the compiled loop carries a float16 tile."""
    cases = ex09.accumulation_cases([torch.float16])
    msg = fails(ex09.check_matmul_kernel, matmul_half_acc, _matmul_with(matmul_half_acc), cases)
    assert (
        "float32 accumulation needed" in msg and "the loop over K carries its accumulator as tensor<32x32xf16>" in msg
    )
    assert "carry the sum from one block of K to the next in float32" in msg


def test_missing_k_mask_is_caught_when_k_is_ragged():
    ex09.check_matmul_kernel(matmul_no_k_mask, _matmul_with(matmul_no_k_mask), ex09.matmul_cases([(37, 45, 64)]))
    msg = fails(
        ex09.check_matmul_kernel, matmul_no_k_mask, _matmul_with(matmul_no_k_mask), ex09.matmul_cases([(37, 45, 70)])
    )
    assert "M=37, N=45, K=70" in msg and "IndexError('tl.load: " in msg and "outside every tensor argument" in msg


def test_the_solution_passes_every_dtype_and_layout(sol):
    cases = (
        ex09.matmul_cases([(33, 17, 40)], [torch.float32, torch.float16, torch.bfloat16], layout="strided")
        + ex09.matmul_cases([(9, 40, 33)], [torch.bfloat16], layout="transposed")
        + ex09.accumulation_cases()
    )
    ex09.check_matmul_kernel(sol["matmul_kernel"], sol["matmul"], cases)


def test_guards_name_what_is_wrong(sol):
    with pytest.raises(ValueError, match=r"matmul: A has shape \(3, 4\) and B has shape \(5, 2\)"):
        sol["matmul"](torch.zeros(3, 4), torch.zeros(5, 2))
    with pytest.raises(TypeError, match="x is torch.float32 but y is torch.float16"):
        sol["add"](torch.zeros(3), torch.zeros(3, dtype=torch.float16))
    with pytest.raises(ValueError, match="softmax: x must be a 2-D matrix"):
        sol["softmax"](torch.zeros(3))


# ---- compiled for a GPU (sm_90, sm_80) on this CPU -------------------------------------------------------------


@triton.jit
def matmul_fp16_accumulator(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    for k0 in range(0, K, BLOCK_K):
        a, b = _k_blocks(a_ptr, b_ptr, rm, rn, k0 + rk, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _line_of(kernel, text: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_fp16_accumulator_runs_in_the_interpreter_but_does_not_compile():
    """The interpreter promotes acc to float32 and gets every value right; Triton's compiler refuses the kernel."""
    cases = ex09.matmul_cases([(37, 45, 70)], [torch.float16], seed=3)
    A, B = cases[0].args
    assert torch.allclose(_matmul_with(matmul_fp16_accumulator)(A, B).double(), A.double() @ B.double(), rtol=1e-2)
    msg = fails(ex09.check_matmul_kernel, matmul_fp16_accumulator, _matmul_with(matmul_fp16_accumulator), cases)
    assert "it does not compile for sm_90" in msg and "Loop-carried variable acc has initial type" in msg, msg
    assert (
        f"at line {_line_of(matmul_fp16_accumulator, 'for k0 in range')} of the cell that defines it: "
        f"`for k0 in range(0, K, BLOCK_K):`" in msg
    ), msg


@triton.jit
def softmax_no_cast(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, stride_on, BLOCK_N: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=mask, other=-float("inf"))  # no .to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * stride_om + cols * stride_on, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def softmax_divides_in_16_bits(
    x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, stride_on, BLOCK_N: tl.constexpr
):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    half = out_ptr.dtype.element_ty
    tl.store(out_ptr + row * stride_om + cols * stride_on, e.to(half) / tl.sum(e, axis=0).to(half), mask=mask)


def test_softmax_without_the_cast_computes_in_float32_once_compiled(capsys):
    """Without `.to(tl.float32)` the compiled bfloat16 softmax still computes in float32 (tl.max returns float32
    for 16-bit floats, so x − max is float32): read from the TTIR, the check passes and says so."""
    from twoprim.topics.triton_compiled import compile_kernel

    ex09.check_softmax_kernel(
        softmax_no_cast, _softmax_with(softmax_no_cast), ex09.softmax_cases([(4, 33)], [torch.bfloat16], seed=22)
    )
    out = capsys.readouterr().out
    assert "✔ ex09_triton-softmax_kernel" in out and "runs in float32 (read from the TTIR" in out, out
    sig = {
        "x_ptr": "*bf16",
        "out_ptr": "*bf16",
        "n_cols": "i32",
        "stride_xm": "i32",
        "stride_xn": "i32",
        "stride_om": "i32",
        "stride_on": "i32",
        "BLOCK_N": "constexpr",
    }
    c = compile_kernel(softmax_no_cast, sig, {"BLOCK_N": 64}, "sm_90")
    ops = {op for op, t, _ in c.arithmetic()}
    assert {"arith.subf", "math.exp", "arith.divf"} <= ops and all(t == "f32" for _, t, _ in c.arithmetic())
    assert "arith.extf" in c.ttir and "tensor<64xbf16> to tensor<64xf32>" in c.ttir


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_rounded_to_16_bits_midway_is_caught_from_the_compiled_kernel(dtype):
    """Its division runs in float32 (Triton promotes it), on operands rounded to 16 bits: float16's numbers pass the
    tolerance, the compiled TTIR does not."""
    msg = fails(
        ex09.check_softmax_kernel,
        softmax_divides_in_16_bits,
        _softmax_with(softmax_divides_in_16_bits),
        ex09.softmax_cases([(4, 33)], [dtype], seed=22),
    )
    t = "bf16" if dtype == torch.bfloat16 else "f16"
    assert (
        f"the kernel rounds a value to {t} (arith.truncf, line "
        f"{_line_of(softmax_divides_in_16_bits, 'e.to(half) /')} of the cell" in msg
    ), msg
    assert "keep every intermediate in float32; only the store converts" in msg


def _matmul_swapped_grid(kernel):
    def matmul(A, B):
        (M, K), N = A.shape, B.shape[1]
        C = torch.full((M, N), float("nan"), dtype=A.dtype)  # what no program writes stays NaN, as garbage would
        kernel[(triton.cdiv(N, 32), triton.cdiv(M, 32))](
            A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride(), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32
        )
        return C

    return matmul


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_swapped_grid_is_told_its_cause(sol, dtype):
    msg = fails(
        ex09.check_matmul_kernel,
        sol["matmul_kernel"],
        _matmul_swapped_grid(sol["matmul_kernel"]),
        ex09.matmul_cases([(70, 33, 40)], [dtype], seed=5),
    )
    assert "cause:    with 32×32 tiles, C has 3×2 tiles but the right ones form a 2×2 block" in msg, msg
    assert "the grid's axes are exchanged" in msg and "float32" not in msg.split("cause:")[1]


@triton.jit
def matmul_last_block_only(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a, b = _k_blocks(a_ptr, b_ptr, rm, rn, k0 + rk, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)
        acc = tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def test_only_the_last_block_of_k_is_told_its_cause():
    msg = fails(
        ex09.check_matmul_kernel,
        matmul_last_block_only,
        _matmul_with(matmul_last_block_only),
        ex09.matmul_cases([(37, 45, 70)], [torch.float32], seed=3),
    )
    assert "cause:    C equals the product of the last block of K only (columns 64..69 of A)" in msg, msg
    assert "add each block's tl.dot to the accumulator" in msg


def test_strides_ignored_are_told_their_cause(sol):
    def matmul(A, B):  # the solution's kernel, told B is contiguous
        (M, K), N = A.shape, B.shape[1]
        C = torch.empty(M, N, dtype=A.dtype)
        sol["matmul_kernel"][(triton.cdiv(M, 32), triton.cdiv(N, 32))](
            A, B, C, M, N, K, *A.stride(), N, 1, *C.stride(), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32
        )
        return C

    msg = fails(
        ex09.check_matmul_kernel,
        sol["matmul_kernel"],
        matmul,
        ex09.matmul_cases([(20, 33, 40)], [torch.float32], layout="transposed", seed=4),
    )
    assert "cause:    C equals the product with B read as if it were contiguous" in msg, msg


@triton.jit
def matmul_broadcast(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a, b = _k_blocks(a_ptr, b_ptr, rm, rn, k0 + rk, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)
        acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)  # no tl.dot
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def test_a_broadcast_multiply_and_sum_has_no_tensor_core_instruction():
    msg = fails(
        ex09.check_matmul_kernel,
        matmul_broadcast,
        _matmul_with(matmul_broadcast),
        ex09.matmul_cases([(37, 45, 70)], [torch.float32], seed=3),
    )
    assert "compiled for sm_90, its PTX has no tensor-core instruction (0 wgmma.mma_async, 0 mma.sync)" in msg, msg
    assert f"line {_line_of(matmul_broadcast, 'tl.sum(a.to')} of the cell" in msg and "FP32 multiply-adds" in msg


def _macs(c) -> int:
    """Multiply-adds per program that the PTX's tensor-core instructions do: each instruction's m·n·k, times the
    warps that issue it (every warp its own mma.sync; one wgmma per group of 4 warps)."""
    total = 0
    for m in re.finditer(r"\b(wgmma\.mma_async|mma\.sync)[\w.]*?\.m(\d+)n(\d+)k(\d+)", c.ptx):
        issuers = c.num_warps if m.group(1) == "mma.sync" else c.num_warps // 4
        total += int(m.group(2)) * int(m.group(3)) * int(m.group(4)) * issuers
    return total


@pytest.mark.parametrize("blocks", [(32, 32, 32), (128, 128, 64)])
def test_the_solutions_gemm_compiles_to_tensor_core_instructions(sol, blocks):
    """Counted in the PTX, not pinned: both targets have tensor-core instructions, sm_80 only mma.sync, and on both
    the instructions' m·n·k add up to one BLOCK_M × BLOCK_N × BLOCK_K step of the K loop. From 64 rows on, sm_90
    uses Hopper's wgmma."""
    from twoprim.topics.triton_compiled import compile_kernel

    names = [
        "a_ptr",
        "b_ptr",
        "c_ptr",
        "M",
        "N",
        "K",
        "stride_am",
        "stride_ak",
        "stride_bk",
        "stride_bn",
        "stride_cm",
        "stride_cn",
        "BLOCK_M",
        "BLOCK_N",
        "BLOCK_K",
    ]
    sig = dict(zip(names, ["*fp16"] * 3 + ["i32"] * 9 + ["constexpr"] * 3, strict=True))
    cx = dict(zip(names[-3:], blocks, strict=True))
    h, a = (compile_kernel(sol["matmul_kernel"], sig, cx, t) for t in ("sm_90", "sm_80"))
    assert h.error is None and a.error is None
    assert a.tensor_core()["mma.sync"] > 0 and a.tensor_core()["wgmma.mma_async"] == 0
    assert sum(h.tensor_core().values()) > 0
    assert (h.tensor_core()["wgmma.mma_async"] > 0) == (blocks[0] >= 64)
    assert _macs(h) == _macs(a) == blocks[0] * blocks[1] * blocks[2]
    assert h.registers > 0 and a.registers > 0 and h.shared > 0 and 0 < h.occupancy().fraction <= 1


def test_the_solution_passes_and_its_tick_names_the_compiled_evidence(sol, capsys):
    """The ✔ line is the compile of the case's own launch, specialised as Triton's launcher specialises it (aligned
    pointers, sizes and strides divisible by 16, strides of 1 compiled in): the same numbers as compile_launch."""
    from twoprim.topics.triton_compiled import compile_launch

    cases = ex09.matmul_cases([(64, 64, 64)], [torch.float16])
    ex09.check_matmul_kernel(sol["matmul_kernel"], sol["matmul"], cases)
    out = capsys.readouterr().out
    assert (
        "✔ ex09_triton-matmul_kernel" in out
        and "compiled for sm_90 and sm_80, its PTX multiplies on the tensor cores" in out
    )
    assert (
        "as Triton's launcher specialises the launch of case 'M=64, N=64, K=64 (A 64×64, B 64×64), float16': "
        "16-byte aligned a_ptr, b_ptr, c_ptr; divisible by 16: M, N, K, stride_am, stride_bk, stride_cm; equal to "
        "1 (compiled in): stride_ak, stride_bn, stride_cn"
    ) in out, out
    A, B = cases[0].args
    C = torch.empty(64, 64, dtype=torch.float16)
    c = compile_launch(
        sol["matmul_kernel"],
        A,
        B,
        C,
        64,
        64,
        64,
        *A.stride(),
        *B.stride(),
        *C.stride(),
        BLOCK_M=32,
        BLOCK_N=32,
        BLOCK_K=32,
        target="sm_90",
    )
    assert c.async_copies() > 0 and not c.spilled
    assert (
        f"sm_90: {c.tensor_core()['mma.sync']} mma.sync; {c.async_copies()} cp.async (global → shared); "
        f"{c.registers} registers/thread (no spill), {c.shared} B shared memory per program"
    ) in out, out
    assert "TTIR: tt.dot f16·f16 -> f32 inside scf.for over K" in out
    assert "program(s) resident at once on each SM of an NVIDIA H100/H200" in out


@triton.jit
def matmul_total_rounded_each_block(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a, b = _k_blocks(a_ptr, b_ptr, rm, rn, k0 + rk, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)
        acc = (acc + tl.dot(a, b)).to(c_ptr.dtype.element_ty).to(tl.float32)  # carried as float32, rounded to 16 bits
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def test_a_total_rounded_to_float16_every_block_is_told_its_cause():
    """The loop carries float32, so the compiled loop passes; C itself shows the float16 rounding after every block."""
    msg = fails(
        ex09.check_matmul_kernel,
        matmul_total_rounded_each_block,
        _matmul_with(matmul_total_rounded_each_block),
        ex09.accumulation_cases([torch.float16]),
    )
    assert "wrong result" in msg and "cause:    C matches a sum rounded to float16 after every block of 32" in msg, msg
    assert "it grows with K (32 roundings here)" in msg


def test_tiles_left_out_on_the_ragged_edge_are_told_their_cause(sol):
    def matmul(A, B):  # the grid rounds down: the partial blocks of rows and columns get no program
        (M, K), N = A.shape, B.shape[1]
        C = torch.full((M, N), float("nan"), dtype=A.dtype)  # what no program writes stays NaN, as garbage would
        sol["matmul_kernel"][(M // 32, N // 32)](
            A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride(), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32
        )
        return C

    msg = fails(
        ex09.check_matmul_kernel,
        sol["matmul_kernel"],
        matmul,
        ex09.matmul_cases([(37, 45, 40)], [torch.float32], seed=6),
    )
    assert "cause:    with 32×32 tiles, only tiles on the ragged edge are wrong (rows 0-31 × columns 32-44" in msg, msg


@triton.jit
def softmax_pads_with_zero(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, stride_on, BLOCK_N: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=mask, other=0.0).to(tl.float32)  # not -inf
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride_om + cols * stride_on, e / tl.sum(e, axis=0), mask=mask)


def test_softmax_padding_that_adds_to_the_sum_is_told_its_cause():
    msg = fails(
        ex09.check_softmax_kernel,
        softmax_pads_with_zero,
        _softmax_with(softmax_pads_with_zero),
        ex09.softmax_cases([(3, 33)], seed=7),
    )
    assert re.search(
        r"cause:    rows 0, 1, 2 sum to 0\.\d+ instead of 1; the row has 33 values in a block of 64: 31 "
        r"padding lanes that must add nothing",
        msg,
    ), msg


def test_softmax_rows_no_program_wrote_are_told_their_cause(sol):
    def softmax(x):  # one program too few
        out = torch.full(x.shape, float("nan"), dtype=x.dtype)
        sol["softmax_kernel"][(x.shape[0] - 1,)](
            x,
            out,
            x.shape[1],
            x.stride(0),
            x.stride(1),
            out.stride(0),
            out.stride(1),
            BLOCK_N=triton.next_power_of_2(x.shape[1]),
        )
        return out

    msg = fails(ex09.check_softmax_kernel, sol["softmax_kernel"], softmax, ex09.softmax_cases([(4, 20)], seed=8))
    assert "cause:    rows 3 (of 4) are wrong, the others right" in msg and "the grid is (M,)" in msg, msg


# ---- feedback by cause: the mistakes that were misdiagnosed, each told its own cause ------------------------------


@triton.jit
def matmul_k_stays(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):  # the offsets along K never advance: every step the first block
        a = tl.load(
            a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak,
            mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc += tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@triton.jit
def matmul_pointers_stay(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _k0 in range(0, K, BLOCK_K):  # the tutorial's pointer blocks, never moved along K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@pytest.mark.parametrize("kernel", [matmul_k_stays, matmul_pointers_stay], ids=lambda k: k.fn.__name__)
def test_a_k_offset_that_never_advances_is_told_its_cause(kernel):
    """Once told "look at the program ids" and "4 of 4 tiles are wrong ... the others right"."""
    msg = fails(ex09.check_matmul_kernel, kernel, _matmul_with(kernel))
    assert "M=37, N=45, K=70" in msg, msg
    assert (
        "cause:    C equals the product of the first block of K (columns 0–31 of A, rows 0–31 of B) added 3 times, "
        "once per step of the loop over K (K = 70): every step loads the same first block; the offsets along K "
        "never advance with the loop"
    ) in msg, msg
    assert "(k0 + tl.arange(0, BLOCK_K))" in msg.split("next:")[1] and "tiles are wrong" not in msg


def _matmul_grid_over_m(kernel):
    def matmul(A, B, out=None):  # a 1-D grid: one program per block of rows, none for the blocks of columns
        (M, K), N = A.shape, B.shape[1]
        C = torch.empty(M, N, dtype=A.dtype) if out is None else out
        kernel[(triton.cdiv(M, 32),)](
            A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride(), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32
        )
        return C

    return matmul


def test_a_grid_over_m_only_is_told_a_whole_axis_is_missing(sol):
    """Once told "the ragged edge: mask the last blocks" (columns 32-44 of 45 are also the ragged edge)."""
    msg = fails(ex09.check_matmul_kernel, sol["matmul_kernel"], _matmul_grid_over_m(sol["matmul_kernel"]))
    assert "M=37, N=45, K=70" in msg, msg
    assert (
        "cause:    columns 0–31 are right in every row and every one of columns 32–44 is wrong: only the programs "
        "with program_id(1) = 0 ran, so a whole axis of the grid is missing"
    ) in msg, msg
    assert "launch a 2-D grid" in msg.split("next:")[1] and "ragged" not in msg.split("cause:")[1]


@triton.jit
def matmul_a_strides_swapped(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(
            a_ptr + rm[:, None] * stride_ak + (k0 + rk)[None, :] * stride_am,  # A's strides exchanged
            mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + (k0 + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc += tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def test_swapped_a_strides_are_told_their_cause():
    """Once given a generic list of three causes."""
    msg = fails(ex09.check_matmul_kernel, matmul_a_strides_swapped, _matmul_with(matmul_a_strides_swapped))
    assert "M=16, N=16, K=16" in msg, msg
    assert (
        "cause:    C equals the product with A read through its two strides exchanged: A's rows stepped by "
        "stride_ak and its columns by stride_am (A.stride() is (16, 1))"
    ) in msg, msg
    assert "a_ptr + i * stride_am + j * stride_ak" in msg.split("next:")[1]


@triton.jit
def matmul_c_contiguous(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a, b = _k_blocks(a_ptr, b_ptr, rm, rn, k0 + rk, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)
        acc += tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * N + rn[None, :],
        acc.to(c_ptr.dtype.element_ty),  # C assumed contiguous
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def test_c_strides_ignored_fail_a_visible_check():
    msg = fails(ex09.check_matmul_kernel, matmul_c_contiguous, _matmul_with(matmul_c_contiguous))
    assert "M=64, N=64, K=64, float32; A column-major (transposed), B every other column (stride 2)" in msg, msg
    assert "cause:    out's buffer holds the right values, written as if out were contiguous" in msg, msg


@triton.jit
def matmul_plus_one(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + 1.0  # starts at 1: a mistake no pattern names
    for k0 in range(0, K, BLOCK_K):
        a, b = _k_blocks(a_ptr, b_ptr, rm, rn, k0 + rk, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)
        acc += tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def test_a_mistake_no_pattern_fits_gets_the_generic_list_and_says_so():
    msg = fails(ex09.check_matmul_kernel, matmul_plus_one, _matmul_with(matmul_plus_one))
    assert "cause:    none of the causes this check recognises fits the wrong values (the blocks of K summed" in msg
    assert "check the masks of the last blocks" in msg.split("next:")[1], msg
