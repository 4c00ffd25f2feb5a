"""Every visible check of every assignment, from its files: the solution passes and announces the hidden checks;
a wrong value, a wrong shape and a wrong dtype are each explained (case, call, expected, got, next step).

The assignments, their graded functions (the solution notebooks' check cells, `<aid>-<function>`) and their checks
(`check_<function>` in the assignment's module) are found from the course's files, so a new assignment is covered
without editing this file; only what its messages say beyond the defaults goes in SAYS.
"""

from __future__ import annotations

import contextlib
import functools
import io

import pytest
import torch

from twoprim.core import catalog

from .conftest import check_of, fails, solution_namespace
from .test_autograde import graded_functions

# Assignments whose checks take something other than one function returning tensors or numbers; their own test
# files drive those checks with wrong answers of their kind
OWN_DRIVERS = {
    "ex06_compile": "a model compiled with torch.compile, judged by its captured graphs",
    "ex07_mlx": "functions returning MLX arrays",
    "ex09_triton": "a Triton kernel and the wrapper that launches it",
    "ex11_flash_attention": "a Triton kernel and the wrapper that launches it (tests/test_ex11.py)",
}
AIDS = [aid for aid in catalog.assignment_ids() if aid not in OWN_DRIVERS]
FUNCTIONS = [(aid, fn) for aid in AIDS for fn in graded_functions(aid)]
solutions = functools.cache(solution_namespace)


def spoil(out, how: str):
    """`out` made wrong in its value, its shape or its dtype, whatever the function returns."""
    if isinstance(out, torch.Tensor):
        if how == "value":
            if out.is_floating_point():
                return out * 1.5 + 1.0
            return out.flip(0) if out.numel() > 1 else out + 1
        if how == "shape":
            return out[None]
        return out.to(torch.float32 if out.dtype == torch.float16 or not out.is_floating_point() else torch.float16)
    if isinstance(out, (int, float)):
        return {"value": out + 1, "shape": (out,), "dtype": torch.tensor(out)}[how]
    if isinstance(out, tuple) and all(isinstance(v, torch.Tensor) for v in out):
        return (spoil(out[0], how), *out[1:])
    if isinstance(out, list):  # rows of a table
        return {"value": out[::-1], "shape": out[:-1], "dtype": [list(r) for r in out]}[how]
    if isinstance(out, tuple):  # sizes
        return {"value": (out[0] + 1, *out[1:]), "shape": out[:-1], "dtype": tuple(float(v) for v in out)}[how]
    if isinstance(out, dict):  # counts by name
        first = next(iter(out))
        return {
            "value": {**out, first: out[first] + 2},
            "shape": {first: out[first]},
            "dtype": {**out, first: float(out[first])},
        }[how]
    raise TypeError(f"no way to spoil a {type(out).__name__}: teach spoil() this return type")


def _spoiled(aid: str, fn: str, how: str):
    right = solutions(aid)[fn]

    def wrong(*args, **kwargs):
        return spoil(right(*args, **kwargs), how)

    wrong.__name__ = fn
    return wrong


# What the message says where a function returns something other than a tensor of its input's dtype
DEFAULT = {"value": ("error:", "tolerance abs"), "shape": ("expected shape",), "dtype": ("(the input's dtype)",)}
SAYS = {
    ("ex01_dot", "dot_loop", "shape"): ("but dot_loop returns a Python float",),
    ("ex01_dot", "dot_loop", "dtype"): ("but dot_loop returns a Python float",),
    ("ex01_dot", "top_k", "value"): ("at rank 0",),
    ("ex01_dot", "top_k", "shape"): ("expected (3,): one index per requested key",),
    ("ex01_dot", "top_k", "dtype"): ("returns a 1-D integer tensor",),
    ("ex02_gemm", "gemm_flops", "value"): ("FlopCounterMode counted 120",),
    ("ex02_gemm", "gemm_flops", "shape"): ("but gemm_flops returns a Python int",),
    ("ex02_gemm", "gemm_flops", "dtype"): ("but gemm_flops returns a Python int",),
    ("ex03_layers", "qkv_projection", "value"): ("error:", "got:      q: ", "expected: (q, k, v): float32 tensor"),
    ("ex04_conv", "conv_gemm_shape", "value"): ("M wrong",),
    ("ex04_conv", "conv_gemm_shape", "shape"): ("returns a tuple of three ints (M, N, K)",),
    ("ex04_conv", "conv_gemm_shape", "dtype"): ("M, N and K must be ints",),
    ("ex05_attention", "attention_flops", "value"): ("but FlopCounterMode counted",),
    ("ex05_attention", "attention_flops", "shape"): ("expected exactly the keys ['gemm', 'other']",),
    ("ex05_attention", "attention_flops", "dtype"): ("but a FLOP count is a Python int",),
    ("ex08_shapes", "llama_block_gemms", "value"): ("rows named ['down'",),
    ("ex08_shapes", "llama_block_gemms", "shape"): ("expected ['q', 'kv'",),
    ("ex08_shapes", "llama_block_gemms", "dtype"): ("not (name, count, M, N, K)",),
    ("ex08_shapes", "padded", "value"): ("is not a multiple of 64",),
    ("ex08_shapes", "padded", "shape"): ("but padded returns a Python int",),
    ("ex08_shapes", "padded", "dtype"): ("but padded returns a Python int",),
    ("ex08_shapes", "tile_efficiency", "value"): ("float 2; expected 1",),
    ("ex08_shapes", "tile_efficiency", "shape"): ("returns a Python float in (0, 1]",),
    ("ex08_shapes", "tile_efficiency", "dtype"): ("returns a Python float in (0, 1]",),
    ("ex08_shapes", "wave_efficiency", "value"): ("1024 tiles on 132 SMs: 8 waves",),
    ("ex08_shapes", "wave_efficiency", "shape"): ("returns a Python float in (0, 1]",),
    ("ex08_shapes", "wave_efficiency", "dtype"): ("returns a Python float in (0, 1]",),
    ("ex08_shapes", "block_tile_efficiency", "value"): ("expected 0.",),
    ("ex08_shapes", "block_tile_efficiency", "shape"): ("returns a Python float in (0, 1]",),
    ("ex08_shapes", "block_tile_efficiency", "dtype"): ("returns a Python float in (0, 1]",),
    ("ex08_shapes", "better_head_count", "value"): ("is not one of the two head counts (8, 16)",),
    ("ex08_shapes", "better_head_count", "shape"): ("returns a tuple (heads, ratio)",),
    ("ex08_shapes", "better_head_count", "dtype"): ("is not one of the two head counts (8, 16) (an int)",),
    ("ex10_xla", "count_hlo_ops", "value"): (
        "differs:  stablehlo.dot_general: expected 2, got 4",
        "a name or metadata",
    ),
    ("ex10_xla", "count_hlo_ops", "shape"): ("differs:  stablehlo.add: expected 2, got 0",),
    ("ex10_xla", "count_hlo_ops", "dtype"): ("is not (str name: int count)",),
    ("ex10_xla", "dot_general_gemm", "value"): ("got:      (2, 64, 4096, 1024)", "each the product of its sizes"),
    ("ex10_xla", "dot_general_gemm", "shape"): ("but dot_general_gemm returns a tuple (batch, M, N, K)",),
    ("ex10_xla", "dot_general_gemm", "dtype"): ("each a Python int",),
    ("ex10_xla", "dot_general_flops", "value"): ("FLOPs = 2·batch·M·N·K",),
    ("ex10_xla", "dot_general_flops", "shape"): ("but dot_general_flops returns an int",),
    ("ex10_xla", "dot_general_flops", "dtype"): ("but dot_general_flops returns an int",),
    ("ex10_xla", "gemm_counts", "value"): ("got:      (3, 5)", "in the jaxpr of the gradient"),
    ("ex10_xla", "gemm_counts", "shape"): ("returns a tuple (forward, gradient) of GEMM counts",),
    ("ex10_xla", "gemm_counts", "dtype"): ("each a Python int",),
}


def test_every_graded_function_of_these_assignments_is_here():
    assert set(OWN_DRIVERS) <= set(catalog.assignment_ids()), "OWN_DRIVERS names an assignment that is gone"
    assert {aid for aid, _ in FUNCTIONS} == set(AIDS) and len(AIDS) >= 5
    assert {(aid, fn) for aid, fn, _ in SAYS} <= set(FUNCTIONS), "SAYS names a function no assignment grades"


@pytest.mark.parametrize("aid, fn", FUNCTIONS)
def test_solution_passes_and_announces_hidden_checks(aid, fn):
    solution = solutions(aid)[fn]  # (what the solution notebook's own cells print is not captured below)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        check_of(aid, fn)(solution, hidden=7)
    out = printed.getvalue()
    assert out.startswith(f"✔ {aid}-{fn}: ") and "Grading runs 7 more hidden checks" in out


@pytest.mark.parametrize("how", ["value", "shape", "dtype"])
@pytest.mark.parametrize("aid, fn", FUNCTIONS)
def test_each_check_explains_wrong_value_shape_and_dtype(aid, fn, how):
    msg = fails(check_of(aid, fn), _spoiled(aid, fn, how))
    assert msg.startswith(f"✘ {aid}-{fn}: wrong result."), msg
    for part in ("case:", "tried:", "expected:", "got:", "next:"):
        assert f"\n  {part}" in msg, f"no `{part}` line in:\n{msg}"
    for said in SAYS.get((aid, fn, how), DEFAULT[how]):
        assert said in msg, f"expected {said!r} in:\n{msg}"
