"""twoprim.topics.triton_compiled: an interpreted kernel compiled for sm_90 and sm_80 on this CPU, kept on disk by its
source, with the interpreter untouched around it; occupancy from the named per-SM limits; a launch compiled with the
specialisation Triton's own launcher gives its arguments (checked against JITFunction.run), which is what pipelines
lesson 09's large GEMM."""

from __future__ import annotations

import pytest
import torch

from twoprim.assignments import ex09_triton as ex09  # noqa: F401 - first: it turns the interpreter on
from twoprim.topics import triton_compiled as triton_compile

# isort: split
# triton after ex09, which turns the interpreter on
import triton
import triton.language as tl

from .conftest import solution_namespace


@triton.jit
def _row_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n + cols, mask=cols < n, other=0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, axis=0) + tl.max(x, axis=0))


SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def test_a_compile_is_kept_on_disk_by_source_and_the_interpreter_still_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(triton_compile.ENV_CACHE, str(tmp_path))
    x, out = torch.arange(12.0).reshape(3, 4), torch.empty(3)
    # (Triton's launcher takes a constexpr as a plain int; its types say tl.constexpr)
    _row_sum[(3,)](x, out, 4, BLOCK=4)  # pyright: ignore[reportArgumentType] - the interpreter first: it leaves some of its patches in triton.language
    first = triton_compile.compile_kernel(_row_sum, SIG, {"BLOCK": 128}, "sm_80")
    assert first.error is None and not first.cached and first.ptx and first.registers > 0
    assert list(tmp_path.glob("_row_sum-sm_80-*.json"))
    triton_compile._MEMORY.clear()
    triton_compile._BY_CODE.clear()
    again = triton_compile.compile_kernel(_row_sum, SIG, {"BLOCK": 128}, "sm_80")
    assert again.cached and again.ptx == first.ptx
    _row_sum[(3,)](x, out, 4, BLOCK=4)  # pyright: ignore[reportArgumentType] - and the interpreter again, after the compile put triton.language back
    assert torch.equal(out, x.sum(1) + x.amax(1))


def test_a_refused_kernel_comes_back_with_the_compilers_message(tmp_path, monkeypatch):
    monkeypatch.setenv(triton_compile.ENV_CACHE, str(tmp_path))
    found = triton_compile.compile_launch(
        _row_sum, torch.empty(4, dtype=torch.float64), torch.empty(1), 4, BLOCK=3, target="sm_90"
    )  # tl.arange needs a power of two
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


# ---- a launch's specialisation: what Triton's own launcher would compile for these arguments --------------------


def _lesson_kernel(name: str):
    """Kernel `name` as lesson 09 defines it: its decorated function, read from the notebook's code cell and
    registered with linecache (Triton reads a kernel's source), so a test compiles the lesson's own code."""
    import ast
    import linecache

    import nbformat

    from twoprim.config import ROOT

    nb = nbformat.read(str(ROOT / "lessons" / "09_triton_gemm.ipynb"), as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source)
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = source.splitlines(keepends=True)[node.decorator_list[0].lineno - 1 : node.end_lineno]
    filename = f"<lesson 09: {name}>"
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    scope = {"triton": triton, "tl": tl}
    exec(compile("".join(lines), filename, "exec"), scope)  # noqa: S102 - the course's own committed lesson
    return scope[name]


def test_the_lessons_big_gemm_is_pipelined_as_a_launch_compiles_it():
    """Lesson 09's gemm_kernel, 128×256×64 tiles, 8 warps, compiled for sm_90 as a 4096³ float16 launch specialises
    it (16-byte aligned pointers, sizes divisible by 16): with 4 stages it copies A and B into shared memory with
    cp.async, spills nothing, and holds more shared memory than with 1 stage (one set of blocks per stage)."""
    gemm_kernel = _lesson_kernel("gemm_kernel")
    A = torch.empty(4096, 4096, dtype=torch.float16)
    by_stages = {
        s: triton_compile.compile_launch(
            gemm_kernel,
            A,
            A,
            A,
            4096,
            4096,
            BLOCK_M=128,
            BLOCK_N=256,
            BLOCK_K=64,
            target="sm_90",
            num_warps=8,
            num_stages=s,
        )
        for s in (1, 4)
    }
    four = by_stages[4]
    assert four.error is None and four.attrs["a_ptr"] == [["tt.divisibility", 16]], four.error
    assert four.async_copies() > 0 and four.spilled == 0 and four.tensor_core()["wgmma.mma_async"] > 0
    assert "cp.async" in four.summary() and "no spill" in four.summary()
    assert by_stages[1].async_copies() == 0 and four.shared > by_stages[1].shared


class _FakeDriver:
    """Just enough of a GPU driver for `JITFunction.run` to specialise a launch for sm_90 on this CPU."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


def _triton_launcher_sees(py, grid, args, kwargs, monkeypatch) -> dict:
    """What Triton's own launcher (`JITFunction.run`, uninterpreted) hands its compiler for this launch, caught by
    its `jit_cache_hook` before anything is compiled or launched."""
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    seen: dict = {}

    def hook(*, compile, **_):  # noqa: A002 - Triton's jit_cache_hook is called with compile=
        seen.update(
            signature=dict(compile["signature"]),
            constants=dict(compile["constants"]),
            attrs=dict(compile["configs"][0]),
        )
        return True  # handled: Triton compiles and launches nothing

    monkeypatch.setattr(driver, "_active", _FakeDriver())
    monkeypatch.setattr(knobs.runtime, "interpret", False)
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", hook)
    JITFunction(py)[grid](*args, **kwargs, enable_fp_fusion=True)  # as the course compiles (and no warning)
    return seen


@pytest.mark.parametrize("layout", ["aligned", "ragged"])
def test_the_course_specialises_a_launch_as_tritons_own_launcher_does(monkeypatch, layout):
    """For real CPU tensors: the signature (ints equal to 1 as constexprs), the constexprs and the tt.divisibility
    attributes `specialize` gives are those Triton's JITFunction.run computes for the same launch; and the
    interpreter's launch records keep them, so ex09's checks compile what a launch would."""
    from twoprim.topics import triton_gemm as triton_tools

    kernel = solution_namespace("ex09_triton")["matmul_kernel"]
    if layout == "aligned":
        A, B = torch.zeros(64, 32, dtype=torch.float16), torch.zeros(32, 48, dtype=torch.float16)
    else:  # sizes and strides not divisible by 16, B a view one element into its buffer, A transposed
        A, B = (
            torch.zeros(37, 70, dtype=torch.float16).T,
            torch.zeros(37 * 45 + 1, dtype=torch.float16)[1:].view(37, 45),
        )
    (M, K), N = A.shape, B.shape[1]
    C = torch.zeros(M, N, dtype=torch.float16)
    args = (A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride())
    kwargs = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    ours = triton_compile.specialize(kernel, args, kwargs)
    theirs = _triton_launcher_sees(kernel.fn, (1, 1), args, kwargs, monkeypatch)
    names = list(ours.signature)
    assert ours.signature == theirs["signature"]
    assert ours.constexprs == {names[path[0]]: value for path, value in theirs["constants"].items()}
    assert ours.attrs == {names[path[0]]: [list(a) for a in v] for path, v in theirs["attrs"].items() if v}
    if layout == "aligned":
        assert ours.attrs["M"] == [["tt.divisibility", 16]] and ours.constexprs["stride_ak"] == 1
    else:
        assert "b_ptr" not in ours.attrs and "K" not in ours.attrs and ours.signature["stride_am"] == "constexpr"
    monkeypatch.undo()
    with triton_tools.launches() as seen:  # the interpreter's record of the same launch
        kernel[(1, 1)](*args, **kwargs)
    (launch,) = seen.of(kernel)
    assert (launch.signature, launch.constexprs, launch.attrs) == (ours.signature, ours.constexprs, ours.attrs)
