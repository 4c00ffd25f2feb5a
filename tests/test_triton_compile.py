"""twoprim.topics.triton_compiled: an interpreted kernel compiled for sm_90 and sm_80 on this CPU, kept on disk by its source,
with the interpreter untouched around it; occupancy from the named per-SM limits."""
from __future__ import annotations

import pytest
import torch

from twoprim.assignments import ex09_triton as ex09
from twoprim.topics import triton_compiled as triton_compile  # ex09 first: it turns the interpreter on before the kernels below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _row_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n + cols, mask=cols < n, other=0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, axis=0) + tl.max(x, axis=0))


SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def test_a_compile_is_kept_on_disk_by_source_and_the_interpreter_still_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(triton_compile.ENV_CACHE, str(tmp_path))
    x, out = torch.arange(12.0).reshape(3, 4), torch.empty(3)
    _row_sum[(3,)](x, out, 4, BLOCK=4)  # the interpreter first: it leaves some of its patches in triton.language
    first = triton_compile.compile_kernel(_row_sum, SIG, {"BLOCK": 128}, "sm_80")
    assert first.error is None and not first.cached and first.ptx and first.registers > 0
    assert list(tmp_path.glob("_row_sum-sm_80-*.json"))
    triton_compile._MEMORY.clear()
    triton_compile._BY_CODE.clear()
    again = triton_compile.compile_kernel(_row_sum, SIG, {"BLOCK": 128}, "sm_80")
    assert again.cached and again.ptx == first.ptx
    _row_sum[(3,)](x, out, 4, BLOCK=4)  # and the interpreter again, after the compile put triton.language back
    assert torch.equal(out, x.sum(1) + x.amax(1))


def test_a_refused_kernel_comes_back_with_the_compilers_message(tmp_path, monkeypatch):
    monkeypatch.setenv(triton_compile.ENV_CACHE, str(tmp_path))
    found = triton_compile.compile_launch(_row_sum, torch.empty(4, dtype=torch.float64), torch.empty(1), 4, BLOCK=3,
                                          target="sm_90")  # tl.arange needs a power of two
    assert found.error and "power of 2" in found.error and found.error_line is not None


@pytest.mark.parametrize("gpu", list(triton_compile.GPUS.values()), ids=lambda g: g.target)
def test_occupancy_follows_the_named_limits(gpu):
    """Each limit, alone, is the one named: registers (many per thread), shared memory (much per program), threads
    (few registers, many warps); the counts come from the GPU's constants, not from numbers written here."""
    warps = 4
    by_registers = triton_compile.occupancy(128, 0, warps, gpu)
    assert by_registers.limit == "registers"
    assert by_registers.programs_per_sm == gpu.registers_per_sm // (128 * 32 * warps)
    big = gpu.shared_per_sm // 2 - gpu.reserved_shared_per_block  # two programs' worth
    assert triton_compile.occupancy(16, big, warps, gpu).limit == "shared memory"
    assert triton_compile.occupancy(16, big, warps, gpu).programs_per_sm == 2
    by_threads = triton_compile.occupancy(16, 0, 16, gpu)
    assert by_threads.limit == "threads" and by_threads.programs_per_sm == gpu.threads_per_sm // (32 * 16)
    assert by_threads.fraction == 1.0 and gpu.source
