"""ex08_shapes: each check names the cause of a wrong answer (at least three wrong versions per function), the
guards reject bad input by name, and the reference agrees with lesson 08's GPT-2 block where the two coincide."""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest

from twoprim.assignments import ex08_shapes as ex08
from twoprim.topics import layers_as_gemms as layers

from .conftest import fails, solution_namespace
from .visible_rules import assert_rule_is_visible, named

sol = functools.cache(lambda: solution_namespace("ex08_shapes"))


def _rows_with(change):
    """llama_block_gemms of the solution with `change(row, args)` applied to every row."""

    def fn(batch, seq, d_model, n_heads, n_kv_heads, d_ff, vocab=None):
        args = dict(batch=batch, seq=seq, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=d_ff)
        return [
            change(r, args) for r in sol()["llama_block_gemms"](batch, seq, d_model, n_heads, n_kv_heads, d_ff, vocab)
        ]

    fn.__name__ = "llama_block_gemms"
    return fn


def _set(name, **fields):
    def change(row, a):
        if row[0] != name:
            return row
        values: dict[str, Any] = dict(zip(("name", "count", "M", "N", "K"), row, strict=True))
        values.update({k: v(a) for k, v in fields.items()})
        return tuple(values.values())

    return change


WRONG_ROWS = {
    "K/V width from n_heads": (_set("kv", N=lambda a: 2 * a["d_model"]), "not n_heads·D = d_model"),
    "only K in the fused kv": (
        _set("kv", N=lambda a: a["n_kv_heads"] * a["d_model"] // a["n_heads"]),
        "K and V fused: N = 2·n_kv_heads·D",
    ),
    "scores' K is d_model": (_set("scores", K=lambda a: a["d_model"]), "its size is D = d_model / n_heads"),
    "gate_up of d_ff": (_set("gate_up", N=lambda a: a["d_ff"]), "N = 2·d_ff, both halves"),
    "down reads 2·d_ff": (_set("down", K=lambda a: 2 * a["d_ff"]), "K = d_ff"),
    "M is seq": (_set("q", M=lambda a: a["seq"]), "batch·seq rows, not seq"),
    "count is batch": (_set("scores", count=lambda a: a["batch"]), "count = batch·n_heads, not batch"),
    "count is batch·n_kv_heads": (
        _set("weights_v", count=lambda a: a["batch"] * a["n_kv_heads"]),
        "not batch·n_kv_heads",
    ),
    "N and K of down swapped": (_set("down", N=lambda a: a["d_ff"], K=lambda a: a["d_model"]), "N and K swapped"),
}


@pytest.mark.parametrize("wrong", WRONG_ROWS)
def test_llama_block_gemms_names_the_cause(wrong):
    change, cause = WRONG_ROWS[wrong]
    msg = fails(ex08.check_llama_block_gemms, _rows_with(change))
    assert cause in msg, msg


def test_llama_block_gemms_names_missing_or_extra_lm_head_and_float_sizes():
    def no_head(*args):
        return sol()["llama_block_gemms"](*args[:6])

    no_head.__name__ = "llama_block_gemms"
    assert "the last row is lm_head" in fails(ex08.check_llama_block_gemms, no_head)

    def floats(*args):
        return [(r[0], r[1], r[2], r[3] / 1, r[4]) for r in sol()["llama_block_gemms"](*args)]

    floats.__name__ = "llama_block_gemms"
    assert "avoid `/`" in fails(ex08.check_llama_block_gemms, floats)


def test_llama_block_gemms_with_as_many_kv_heads_as_heads_is_lesson_08s_block_in_another_order():
    """With n_kv_heads = n_heads and gate/up one GEMM of 2·d_ff, the projections carry GPT-2's (M, N, K)."""
    mine = ex08.reference_llama_block_gemms(2, 16, 64, 4, 4, 128, 1000)
    lesson = layers.transformer_gemms(2, 16, 64, 4, 128, 1000)
    qkv = next(r for r in lesson if r.name.startswith("Q/K/V"))
    q, kv = mine[0], mine[1]
    assert (q[2], q[3] + kv[3], q[4]) == (qkv.M, qkv.N, qkv.K)
    for name, row in (("scores", "scores Q·Kᵀ"), ("weights_v", "weights·V"), ("lm_head", "LM head")):
        want = next(r for r in lesson if r.name == row)
        got = next(r for r in mine if r[0] == name)
        assert got[1:] == (want.count, want.M, want.N, want.K)


def _fn(name, body):
    body.__name__ = name
    return body


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (lambda n, m: (n // m + 1) * m, "is already a multiple of"),
        (lambda n, m: n // m * m, "is rounded down"),
        (lambda n, m: float(-(-n // m) * m), "the right number as a float"),
        (lambda n, m: n + m - 1, "is not a multiple of"),
        (lambda n, m: (-(-n // m) + 1) * m, "but not the smallest one"),
    ],
)
def test_padded_names_the_cause(wrong, cause):
    cases = ex08.padded_cases([(50257, 64), (4096, 8)])
    assert cause in fails(ex08.check_padded, _fn("padded", wrong), cases)


def test_padded_names_float_rounding_beyond_two_to_the_53():
    wrong = _fn("padded", lambda n, m: math.ceil(n / m) * m)
    cases = ex08.padded_cases([(50257, 64), (2**60 + 1, 2)])
    assert "a float cannot hold every integer" in fails(ex08.check_padded, wrong, cases)


def _ceil_to(n, m):
    return -(-n // m) * m


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (
            lambda M, N, K, t=(128, 128, 64): _ceil_to(M, t[0]) * _ceil_to(N, t[1]) * _ceil_to(K, t[2]) / (M * N * K),
            "the inverse",
        ),
        (lambda M, N, K, t=(128, 128, 64): M * N / (_ceil_to(M, t[0]) * _ceil_to(N, t[1])), "pads only M and N"),
        (
            lambda M, N, K, t=(128, 128, 64): M * N * K / (_ceil_to(M, t[1]) * _ceil_to(N, t[0]) * _ceil_to(K, t[2])),
            "pads M to tn and N to tm",
        ),
        (
            lambda M, N, K, t=(128, 128, 64): (
                M * N * K / (max(M // t[0], 1) * t[0] * max(N // t[1], 1) * t[1] * max(K // t[2], 1) * t[2])
            ),
            "rounds the tile counts down",
        ),
        (
            lambda M, N, K, t=(128, 128, 64): (
                (M / _ceil_to(M, t[0]) + N / _ceil_to(N, t[1]) + K / _ceil_to(K, t[2])) / 3
            ),
            "averages the three dimensions",
        ),
    ],
)
def test_tile_efficiency_names_the_cause(wrong, cause):
    cases = ex08.tile_cases([(1000, 300, 100, (128, 64, 32))])
    assert cause in fails(ex08.check_tile_efficiency, _fn("tile_efficiency", wrong), cases)


def _tiles(M, N, t):
    return -(-M // t[0]) * -(-N // t[1])


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (lambda M, N, t=(128, 128), s=132: _tiles(M, N, t) / s, "divide by the SM slots of the whole waves"),
        (
            lambda M, N, t=(128, 128), s=132: _tiles(M, N, t) / (max(_tiles(M, N, t) // s, 1) * s),
            "rounds the waves down",
        ),
        (lambda M, N, t=(128, 128), s=132: float(-(-_tiles(M, N, t) // s)), "that is the number of waves"),
        (
            lambda M, N, t=(128, 128), s=132: (M / t[0] * N / t[1]) / (-(-_tiles(M, N, t) // s) * s),
            "an edge tile is a whole tile",
        ),
    ],
)
def test_wave_efficiency_names_the_cause(wrong, cause):
    cases = ex08.wave_cases([(4000, 4000, (128, 128), 132)])
    assert cause in fails(ex08.check_wave_efficiency, _fn("wave_efficiency", wrong), cases)


def _effs(rows, t):
    """Each row's tile efficiency, by the solution's function (a wrong answer built on a right one, as a learner's
    would be; calling the reference formulas is refused by a rule of its own)."""
    return [sol()["tile_efficiency"](M, N, K, tuple(t)) for _, _, M, N, K in rows]


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (lambda rows, t=(128, 128, 64): sum(_effs(rows, t)) / len(rows), "the plain mean of the rows' efficiencies"),
        (
            lambda rows, t=(128, 128, 64): (
                sum(M * N * K for _, _, M, N, K in rows)
                / sum(_ceil_to(M, t[0]) * _ceil_to(N, t[1]) * _ceil_to(K, t[2]) for _, _, M, N, K in rows)
            ),
            "leaves out count",
        ),
        (
            lambda rows, t=(128, 128, 64): (
                sum(c * M * N * K * e for (_, c, M, N, K), e in zip(rows, _effs(rows, t), strict=True))
                / sum(c * M * N * K for _, c, M, N, K in rows)
            ),
            "weights the efficiencies by useful FLOPs",
        ),
        (lambda rows, t=(128, 128, 64): 1 / sol()["block_tile_efficiency"](rows, t), "the inverse"),
    ],
)
def test_block_tile_efficiency_names_the_cause(wrong, cause):
    cases = ex08.block_cases([((8, 1024, 768, 16, 16, 3072, 50257), (128, 128, 64))])
    assert cause in fails(ex08.check_block_tile_efficiency, _fn("block_tile_efficiency", wrong), cases)


def _heads_from(pick):
    """A better_head_count that measures both blocks with the solution's functions and answers through
    `pick(heads, effs)`."""

    def fn(batch, seq, d_model, d_ff, vocab, heads, tile=(128, 128, 64)):
        effs = [
            sol()["block_tile_efficiency"](sol()["llama_block_gemms"](batch, seq, d_model, h, h, d_ff, vocab), tile)
            for h in heads
        ]
        return pick(heads, effs)

    fn.__name__ = "better_head_count"
    return fn


GPT2 = ex08.heads_cases([(8, 1024, 768, 3072, 50257, (12, 16), (128, 128, 64))])
TIE = ex08.heads_cases([(2, 256, 1024, 4096, None, (16, 8), (64, 64, 64))])


@pytest.mark.parametrize(
    "pick, cases, cause",
    [
        (lambda h, e: (h[0], e[1] / e[0]) if e[0] >= e[1] else (h[1], e[0] / e[1]), GPT2, "worse ÷ better"),
        (lambda h, e: (h[1], e[0] / e[1]) if e[0] >= e[1] else (h[0], e[1] / e[0]), GPT2, "the lower efficiency"),
        (lambda h, e: (h[0], e[0] - e[1]) if e[0] >= e[1] else (h[1], e[1] - e[0]), GPT2, "that is a difference"),
        (lambda h, e: (h[1], 1.0), TIE, "on a tie return the first head count"),
        (lambda h, e: (str(h[0]), 1.0), GPT2, "is not one of the two head counts"),
    ],
)
def test_better_head_count_names_the_cause(pick, cases, cause):
    assert cause in fails(ex08.check_better_head_count, _heads_from(pick), cases)


def test_better_head_count_on_gpt2_small_is_twelve_heads_of_64():
    """The question the hidden checks ask, answered by the reference: 12 heads of 64 beat 16 of 48 on 128×128×64."""
    heads, ratio = ex08.reference_better_head_count(8, 1024, 768, 3072, 50257, (16, 12))
    assert heads == 12 and ratio > 1


@pytest.mark.parametrize(
    "call, error, says",
    [
        (lambda: ex08.guard_heads("f", 1, 8, 768, 96, None, (12,)), TypeError, "heads must be a pair"),
        (lambda: ex08.guard_heads("f", 1, 8, 768, 96, None, (12, 10)), ValueError, "not a multiple of n_heads=10"),
        (lambda: ex08.guard_config("f", 1, 8, 64, 5, 5, 96, None), ValueError, "not a multiple of n_heads=5"),
        (lambda: ex08.guard_config("f", 1, 8, 64, 4, 3, 96, None), ValueError, "not a multiple of n_kv_heads=3"),
        (lambda: ex08.guard_config("f", 1, 8.0, 64, 4, 2, 96, None), TypeError, "seq must be an int, got float"),
        (lambda: ex08.guard_config("f", 1, 8, 64, 4, 2, 96, 0), ValueError, "vocab=0"),
        (lambda: ex08.guard_positive("padded", n=True), TypeError, "n must be an int, got bool"),
        (lambda: ex08.guard_tile("f", (128, 128), 3), TypeError, "tile must be a tuple of 3 ints (tm, tn, tk)"),
        (lambda: ex08.guard_tile("f", (128, 0), 2), ValueError, "tile[1]=0"),
        (lambda: ex08.guard_rows("f", [("q", 1, 2, 3)]), TypeError, "rows[0]"),
        (lambda: ex08.guard_rows("f", []), TypeError, "non-empty list"),
    ],
)
def test_guards_name_what_is_wrong(call, error, says):
    with pytest.raises(error, match=None) as info:
        call()
    assert says in str(info.value), str(info.value)


def test_quantization_numbers_the_lesson_and_the_assignment_state():
    """4096 vs 4095 on 128×128×64 tiles and the H200's 132 SMs; GPT-2 small's 12 heads of 64 beat 16 heads of 48."""
    assert ex08.reference_tile_efficiency(4096, 4096, 4096) == 1.0
    assert ex08.reference_tile_efficiency(4095, 4095, 4095) == pytest.approx((4095 / 4096) ** 3, rel=1e-15)
    assert ex08.reference_wave_efficiency(4096, 4096) == 1024 / (8 * 132)
    assert ex08.reference_padded(50257, 64) == 50304 and ex08.reference_padded(10**30 + 1, 1) == 10**30 + 1
    twelve, sixteen = (
        ex08.reference_block_tile_efficiency(ex08.reference_llama_block_gemms(8, 1024, 768, h, h, 3072, 50257))
        for h in (12, 16)
    )
    assert twelve > sixteen


# ---- every rule ex08 states has a visible case (issue #43): a wrong answer breaking only that rule passed the visible
# check before its case was added, and fails it now with a message about its own mistake


@pytest.mark.parametrize(
    "wrong, rule, says",
    [
        # off by one at exact multiples: its own check says so (the functions that call it used to be blamed instead)
        (
            lambda n, m: (n // m + 1) * m,
            lambda c: "already a multiple" in c.label,
            ("4,096 is already a multiple of 8: it stays as it is",),
        ),
        (
            lambda n, m: math.ceil(n / m) * m,
            lambda c: "beyond the integers a float holds" in c.label,
            ("a float cannot hold every integer", "use integer arithmetic only"),
        ),
    ],
    ids=["off-by-one-at-exact-multiples", "float-division"],
)
def test_padded_rules_are_in_its_visible_check(wrong, rule, says):
    assert_rule_is_visible(ex08.check_padded, named("padded", wrong), rule, *says)


def test_an_off_by_one_padded_fails_its_own_check_not_only_its_callers():
    """Before: padded's visible check passed, and tile_efficiency, which calls it, was blamed for its mistake."""
    off_by_one = named("padded", lambda n, m: (n // m + 1) * m)
    msg = fails(ex08.check_padded, off_by_one)
    assert msg.startswith("✘ ex08_shapes-padded: wrong result.") and "already a multiple" in msg, msg


def test_better_head_count_tie_rule_is_in_its_visible_check():
    later_on_a_tie = _heads_from(lambda h, e: (h[0], e[0] / e[1]) if e[0] > e[1] else (h[1], e[1] / e[0]))
    assert_rule_is_visible(
        ex08.check_better_head_count,
        later_on_a_tie,
        lambda c: "a tie" in c.label,
        "on a tie return the first head count",
    )


# ---- the rule "your own code": the reference formulas are public, and the lesson's explorer has a padded

_REFERENCES = [
    "llama_block_gemms",
    "padded",
    "tile_efficiency",
    "wave_efficiency",
    "block_tile_efficiency",
    "better_head_count",
]


@pytest.mark.parametrize("name", _REFERENCES)
def test_calling_a_reference_formula_is_refused(name):
    reference = getattr(ex08, f"reference_{name}")
    msg = fails(getattr(ex08, f"check_{name}"), named(name, lambda *args, **kwargs: reference(*args, **kwargs)))
    assert "breaks a rule of this exercise: your own code: no calls to the reference formulas" in msg, msg
    assert "found:    it called twoprim.ex08." in msg and f"twoprim.ex08.reference_{name} ×" in msg, msg


def test_calling_the_lessons_padded_is_refused_and_the_solution_passes():
    from twoprim.topics.gemm_shapes import padded as lessons_padded

    msg = fails(ex08.check_padded, named("padded", lambda n, multiple: lessons_padded(n, multiple)))
    assert "found:    it called twoprim.topics.gemm_shapes.padded ×1" in msg, msg
    for name in _REFERENCES:
        getattr(ex08, f"check_{name}")(sol()[name])
