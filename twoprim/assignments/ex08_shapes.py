"""Checks for assignment ex08_shapes: how a model's configuration becomes GEMM shapes, and what those shapes cost.

A LLaMA-style block's forward GEMMs (grouped-query attention, a SwiGLU MLP) from its configuration; the padding
that makes a size a multiple; tile quantization (useful ÷ computed work when a GEMM is computed in whole tiles);
wave quantization (tiles spread over the SMs in whole waves; the H200 has 132 SMs, NVIDIA's H200 product brief and
Hopper architecture whitepaper); the FLOP-weighted tile efficiency of a whole block; and which of two head counts
gives a block the better shapes, by the learner's own functions (the hidden checks ask it of GPT-2 small).

Everything here is exact arithmetic: the oracles below are the reference formulas, computed when the check runs
(in the grader, at grading time), never a timing of this machine. Visible checks run the default cases; the hidden
checks in the solution notebook pass their own cases (built with the same builders) and `hidden=0`. The oracles are
public (`ex08.reference_*`), as is the lesson's `twoprim.topics.gemm_shapes.padded`: an answer that calls them is
refused (`no_grader_calls`).

Why this module is long: each of six graded functions has its reference, case builder, guard, a judge that names
the cause of each likely mistake, its check and its hints; apart, a message would sit away from the judge deciding it.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction
from numbers import Integral, Real

from twoprim.core.checks import Case, CheckResult, Mismatch, counted, describe, no_grader_calls, run_check

__all__ = [
    "H200_SMS",
    "reference_llama_block_gemms",
    "reference_padded",
    "reference_tile_efficiency",
    "reference_wave_efficiency",
    "reference_block_tile_efficiency",
    "reference_better_head_count",
    "guard_config",
    "guard_positive",
    "guard_heads",
    "guard_tile",
    "guard_rows",
    "llama_cases",
    "padded_cases",
    "tile_cases",
    "wave_cases",
    "block_cases",
    "heads_cases",
    "check_llama_block_gemms",
    "check_padded",
    "check_tile_efficiency",
    "check_wave_efficiency",
    "check_block_tile_efficiency",
    "check_better_head_count",
    "uses",
]

TASK = "ex08_shapes"
H200_SMS = 132  # streaming multiprocessors of the H200 (NVIDIA H200 product brief; Hopper whitepaper, GH100 SXM5)
_FIELDS = ("name", "count", "M", "N", "K")


# ----------------------------------------------------------------------------------------------------------------
# Guards: the first line of every ex08 function
# ----------------------------------------------------------------------------------------------------------------


def guard_positive(fn: str, **values) -> None:
    """Each named value is an int (not a bool or float) of at least 1."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__} {value!r}.")
        if value < 1:
            raise ValueError(f"{fn}: {name}={value}; it must be at least 1.")


def guard_config(fn: str, batch, seq, d_model, n_heads, n_kv_heads, d_ff, vocab) -> None:
    """Positive ints; d_model a multiple of n_heads, n_heads of n_kv_heads; vocab None or a positive int."""
    guard_positive(fn, batch=batch, seq=seq, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=d_ff)
    if vocab is not None:
        guard_positive(fn, vocab=vocab)
    if d_model % n_heads:
        raise ValueError(
            f"{fn}: d_model={d_model} is not a multiple of n_heads={n_heads}; each head gets "
            f"d_model / n_heads features, so choose n_heads that divides d_model."
        )
    if n_heads % n_kv_heads:
        raise ValueError(
            f"{fn}: n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}; in grouped-query "
            f"attention each K/V head serves n_heads / n_kv_heads query heads."
        )


def guard_tile(fn: str, tile, length: int) -> None:
    """tile is a tuple of `length` positive ints."""
    if not isinstance(tile, (tuple, list)) or len(tile) != length:
        raise TypeError(
            f"{fn}: tile must be a tuple of {length} ints "
            f"{'(tm, tn, tk)' if length == 3 else '(tm, tn)'}, got {describe(tile)}."
        )
    guard_positive(fn, **{f"tile[{i}]": t for i, t in enumerate(tile)})


def guard_heads(fn: str, batch, seq, d_model, d_ff, vocab, heads) -> None:
    """The block's sizes as in guard_config; heads a pair of head counts, each dividing d_model."""
    if not isinstance(heads, (tuple, list)) or len(heads) != 2:
        raise TypeError(f"{fn}: heads must be a pair of head counts such as (12, 16), got {describe(heads)}.")
    for h in heads:
        guard_config(fn, batch, seq, d_model, h, h, d_ff, vocab)


def guard_rows(fn: str, rows) -> None:
    """rows is a non-empty list of (name, count, M, N, K) with positive int sizes."""
    if not isinstance(rows, (list, tuple)) or not rows:
        raise TypeError(f"{fn}: rows must be a non-empty list of (name, count, M, N, K) tuples, got {describe(rows)}.")
    for i, row in enumerate(rows):
        if not isinstance(row, (list, tuple)) or len(row) != 5:
            raise TypeError(f"{fn}: rows[{i}] is {describe(row)}, not a (name, count, M, N, K) tuple.")
        guard_positive(fn, **{f"rows[{i}].{f}": v for f, v in zip(_FIELDS[1:], row[1:], strict=True)})


# ----------------------------------------------------------------------------------------------------------------
# Reference formulas (the oracles)
# ----------------------------------------------------------------------------------------------------------------


def reference_llama_block_gemms(batch, seq, d_model, n_heads, n_kv_heads, d_ff, vocab=None) -> list[tuple]:
    """Every forward GEMM of a LLaMA-style block as (name, count, M, N, K), in order; the LM head when `vocab` is
    given."""
    rows, D = batch * seq, d_model // n_heads
    out = [
        ("q", 1, rows, d_model, d_model),
        ("kv", 1, rows, 2 * n_kv_heads * D, d_model),
        ("scores", batch * n_heads, seq, seq, D),
        ("weights_v", batch * n_heads, seq, D, seq),
        ("out", 1, rows, d_model, d_model),
        ("gate_up", 1, rows, 2 * d_ff, d_model),
        ("down", 1, rows, d_model, d_ff),
    ]
    return out + ([("lm_head", 1, rows, vocab, d_model)] if vocab is not None else [])


def reference_padded(n, multiple) -> int:
    """The smallest multiple of `multiple` that is ≥ n: ⌈n / multiple⌉ · multiple."""
    return -(-n // multiple) * multiple


def _padded_work(M, N, K, tile) -> Fraction:
    tm, tn, tk = tile
    return Fraction(M * N * K, reference_padded(M, tm) * reference_padded(N, tn) * reference_padded(K, tk))


def reference_tile_efficiency(M, N, K, tile=(128, 128, 64)) -> float:
    """Useful ÷ computed work of an (M, N, K) GEMM done in whole `tile`s: M·N·K ÷ (padded M·N·K)."""
    return float(_padded_work(M, N, K, tile))


def reference_wave_efficiency(M, N, tile=(128, 128), sms=H200_SMS) -> float:
    """Tiles ÷ (waves · sms) for an M×N output in `tile`s run in whole waves of `sms` tiles."""
    tiles = -(-M // tile[0]) * -(-N // tile[1])
    return float(Fraction(tiles, -(-tiles // sms) * sms))


def reference_block_tile_efficiency(rows, tile=(128, 128, 64)) -> float:
    """Σ useful ÷ Σ computed work over (name, count, M, N, K) rows in whole `tile`s."""
    useful = sum(c * M * N * K for _, c, M, N, K in rows)
    done = sum(
        c * reference_padded(M, tile[0]) * reference_padded(N, tile[1]) * reference_padded(K, tile[2])
        for _, c, M, N, K in rows
    )
    return float(Fraction(useful, done))


def reference_better_head_count(batch, seq, d_model, d_ff, vocab, heads, tile=(128, 128, 64)) -> tuple[int, float]:
    """Which of two head counts gives the block the better tile efficiency, and by what ratio."""
    effs = [
        Fraction(
            reference_block_tile_efficiency(reference_llama_block_gemms(batch, seq, d_model, h, h, d_ff, vocab), tile)
        )
        for h in heads
    ]
    best = 0 if effs[0] >= effs[1] else 1
    return heads[best], float(effs[best] / effs[1 - best])


_USES: Counter = Counter()
reference_llama_block_gemms = counted(reference_llama_block_gemms, _USES)
reference_padded = counted(reference_padded, _USES)
reference_tile_efficiency = counted(reference_tile_efficiency, _USES)
reference_wave_efficiency = counted(reference_wave_efficiency, _USES)
reference_block_tile_efficiency = counted(reference_block_tile_efficiency, _USES)
reference_better_head_count = counted(reference_better_head_count, _USES)


def uses() -> Counter:
    """How many times each reference formula has been called (a copy)."""
    return Counter(_USES)


def _lesson_padded_uses() -> Counter:
    """Calls of lesson 08's `padded` (twoprim.topics.gemm_shapes), loaded only if something imported it."""
    module = sys.modules.get("twoprim.topics.gemm_shapes")
    return module.uses() if module is not None else Counter()


def _run(task: str, fn: Callable, cases: Sequence[Case], **kwargs) -> CheckResult:
    """run_check with the rule "your own code": no calls to the reference formulas."""
    fn, own = no_grader_calls(
        fn,
        {"twoprim.ex08": uses, "twoprim.topics.gemm_shapes": _lesson_padded_uses},
        why="the reference formulas this check compares with (ex08.reference_*, padded)",
        next_step="write the arithmetic yourself, from the formula in the task",
    )
    return run_check(task, fn, cases, rules=[own], **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# Case builders
# ----------------------------------------------------------------------------------------------------------------


def llama_cases(configs: Sequence[tuple]) -> list[Case]:
    """(batch, seq, d_model, n_heads, n_kv_heads, d_ff[, vocab][, note]) each."""
    cases = []
    for cfg in configs:
        note = cfg[-1] if isinstance(cfg[-1], str) else ""
        nums = cfg[:-1] if note else cfg
        args = tuple(nums) + ((None,) if len(nums) == 6 else ())
        names = ("batch", "seq", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab")
        label = ", ".join(f"{n}={v}" for n, v in zip(names, args, strict=True) if v is not None) + (
            f" ({note})" if note else ""
        )
        cases.append(Case(label, args))
    return cases


def padded_cases(pairs: Sequence[tuple]) -> list[Case]:
    """One case per (n, multiple[, why]) of `pairs`."""
    return [
        Case(f"n={n:,}, multiple={m}" + (f" ({p[2]})" if len(p) > 2 else ""), (n, m)) for p in pairs for n, m in [p[:2]]
    ]


def tile_cases(specs: Sequence[tuple]) -> list[Case]:
    """(M, N, K, tile[, note]) each."""
    return [
        Case(f"M={s[0]}, N={s[1]}, K={s[2]}, tile={s[3]}" + (f" ({s[4]})" if len(s) > 4 else ""), tuple(s[:4]))
        for s in specs
    ]


def wave_cases(specs: Sequence[tuple]) -> list[Case]:
    """(M, N, tile, sms[, note]) each."""
    return [
        Case(f"M={s[0]}, N={s[1]}, tile={s[2]}, sms={s[3]}" + (f" ({s[4]})" if len(s) > 4 else ""), tuple(s[:4]))
        for s in specs
    ]


def block_cases(specs: Sequence[tuple]) -> list[Case]:
    """(config for reference_llama_block_gemms, tile[, note]) each: the rows are the reference's."""
    out = []
    for s in specs:
        cfg, tile = s[0], s[1]
        rows = reference_llama_block_gemms(*cfg)
        label = f"the rows of a LLaMA-style block {cfg}, tile={tile}" + (f" ({s[2]})" if len(s) > 2 else "")
        out.append(Case(label, (rows, tile)))
    return out


def heads_cases(specs: Sequence[tuple]) -> list[Case]:
    """(batch, seq, d_model, d_ff, vocab, heads, tile[, note]) each."""
    names = ("batch", "seq", "d_model", "d_ff", "vocab", "heads", "tile")
    return [
        Case(
            ", ".join(f"{n}={v}" for n, v in zip(names, s[:7], strict=True)) + (f" ({s[7]})" if len(s) > 7 else ""),
            tuple(s[:7]),
        )
        for s in specs
    ]


# ----------------------------------------------------------------------------------------------------------------
# Judges
# ----------------------------------------------------------------------------------------------------------------


def _row_cause(field: str, got, want: tuple, case: Case) -> str:
    """The likeliest cause of `got` in `field` of the expected row `want`."""
    batch, seq, d_model, n_heads, n_kv, d_ff, vocab = case.args
    D = d_model // n_heads
    name = want[0]
    if field == "M" and got == seq and name in ("q", "kv", "out", "gate_up", "down", "lm_head"):
        return "M of a projection is every token of every sequence: batch·seq rows, not seq"
    if field == "M" and got == batch * seq and name in ("scores", "weights_v"):
        return "each attention GEMM is one (sequence, head) pair: M is seq; the batch and the heads go into count"
    if field == "count" and name in ("scores", "weights_v"):
        if got == batch:
            return "one GEMM per sequence and per head: count = batch·n_heads, not batch"
        if got == n_heads:
            return "one GEMM per sequence and per head: count = batch·n_heads, not n_heads"
        if got == batch * n_kv:
            return (
                "every query head has its own scores, even when K/V heads are shared: count = batch·n_heads, "
                "not batch·n_kv_heads"
            )
        return "count the attention GEMMs as batch·n_heads: one per sequence and per query head"
    if field == "count":
        return "a projection is one GEMM over all batch·seq tokens at once: count = 1"
    if name == "kv" and field == "N":
        if got == 2 * d_model and n_kv != n_heads:
            return (
                "K and V have n_kv_heads·D outputs each (grouped-query attention), not n_heads·D = d_model: "
                f"N = 2·n_kv_heads·D = 2·{n_kv}·{D}"
            )
        if got == n_kv * D:
            return "the kv row is K and V fused: N = 2·n_kv_heads·D, both halves"
        return f"N of the fused K and V projection is 2·n_kv_heads·D = 2·{n_kv}·{D}"
    if name in ("scores", "weights_v") and got == d_model and field in ("K", "N"):
        return f"the attention GEMMs work on one head: its size is D = d_model / n_heads = {D}, not d_model"
    if name == "scores" and field == "K":
        return f"the scores' K is what Q and K share: the head size D = d_model / n_heads = {D}"
    if name == "weights_v" and field == "K":
        return f"weights·V sums over the keys: K = seq = {seq}"
    if name == "gate_up" and field == "N" and got == d_ff:
        return "gate_up fuses the gate and up projections: N = 2·d_ff, both halves"
    if name == "down" and field == "K" and got == 2 * d_ff:
        return "down reads the product gate·up, which is d_ff wide (not 2·d_ff): K = d_ff"
    if field in ("N", "K") and got == (want[4] if field == "N" else want[3]):
        return f"N and K swapped: N is what {name} outputs per row, K what it sums over (the width it reads)"
    return f"derive {field} of {name} from the configuration"


def _judge_rows(got, want, case: Case) -> str:
    if not isinstance(got, (list, tuple)) or (got and not all(isinstance(r, (list, tuple)) for r in got)):
        raise Mismatch(
            f"{describe(got)}, but llama_block_gemms returns a list of (name, count, M, N, K) tuples",
            next_step="build a list and append one tuple per GEMM, in the order the block runs them",
        )
    for i, row in enumerate(got):
        if (
            not isinstance(row, tuple)
            or len(row) != 5
            or not isinstance(row[0], str)
            or any(isinstance(v, bool) or not isinstance(v, Integral) for v in row[1:])
        ):
            raise Mismatch(
                f"row {i} is {type(row).__name__} {row!r}, not (name, count, M, N, K): a tuple of a str "
                f"name and four Python ints",
                next_step="every row is a tuple (str, int, int, int, int); avoid `/`, which makes floats",
            )
    names = [r[0] for r in got]
    want_names = [r[0] for r in want]
    if names != want_names:
        extra = ""
        if case.args[-1] is None and "lm_head" in names:
            extra = " (vocab is None: no lm_head row)"
        elif case.args[-1] is not None and "lm_head" not in names:
            extra = f" (vocab={case.args[-1]}: the last row is lm_head)"
        raise Mismatch(
            f"rows named {names}, expected {want_names}{extra}",
            next_step="name the rows exactly as the docstring does, in the order the block runs them",
        )
    for g, w in zip(got, want, strict=True):
        for f, gv, wv in zip(_FIELDS[1:], g[1:], w[1:], strict=True):
            if gv != wv:
                raise Mismatch(
                    f"row {w[0]!r} is {tuple(g)!r}: {f} = {gv:,} where {wv:,} was expected",
                    next_step=_row_cause(f, gv, w, case),
                )
    return ""


def _int_result(fn: str, got, want) -> None:
    if isinstance(got, bool) or not isinstance(got, Integral):
        if isinstance(got, float) and got == want:
            raise Mismatch(
                f"{describe(got)}: the right number as a float, but {fn} returns an exact int",
                next_step="use integer arithmetic (//, %, *), not `/` or math.ceil of a float",
            )
        raise Mismatch(f"{describe(got)}, but {fn} returns a Python int", next_step="return a plain int")


def _judge_padded(got, want, case: Case) -> str:
    n, m = case.args
    _int_result("padded", got, want)
    if got == want:
        return ""
    if max(n, m) > 2**53:
        cause = (
            f"n = {n:,} is beyond 2⁵³, where a float cannot hold every integer: n / multiple (and math.ceil of "
            f"it) rounds; use integer arithmetic only (// and %)"
        )
    elif got == n + m and n % m == 0:
        cause = f"{n:,} is already a multiple of {m}: it stays as it is (the smallest multiple ≥ n may be n itself)"
    elif got == n // m * m:
        cause = f"{got:,} is rounded down, below n; round up: the smallest multiple of {m} that is ≥ {n:,}"
    elif got % m:
        cause = f"{got:,} is not a multiple of {m}"
    elif got < n:
        cause = f"{got:,} is smaller than n = {n:,}: padding only adds"
    else:
        cause = f"{got:,} is a multiple of {m} ≥ n but not the smallest one"
    raise Mismatch(f"int {got:,}; expected {want:,}", next_step=cause)


def _float_result(fn: str, got) -> float:
    if isinstance(got, bool) or not isinstance(got, Real):
        raise Mismatch(
            f"{describe(got)}, but {fn} returns a Python float in (0, 1]",
            next_step="return useful ÷ computed work as a float (a plain number, not a tensor or tuple)",
        )
    return float(got)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def _judge_tile(got, want, case: Case) -> str:
    M, N, K, (tm, tn, tk) = case.args
    value = _float_result("tile_efficiency", got)
    if _close(value, want):
        return ""
    pad = reference_padded
    causes = [
        (1 / want, "that is computed ÷ useful work, the inverse: the efficiency is useful ÷ computed, at most 1"),
        (M * N / (pad(M, tm) * pad(N, tn)), "that pads only M and N; K is computed in whole tiles of tk too"),
        (
            M * N * K / (pad(M, tn) * pad(N, tm) * pad(K, tk)),
            "that pads M to tn and N to tm: the tile is (tm, tn, tk) for (M, N, K), in that order",
        ),
        (
            M * N * K / (max(M // tm, 1) * tm * max(N // tn, 1) * tn * max(K // tk, 1) * tk),
            "that rounds the tile counts down; a partial tile is still a whole tile of work: round up (⌈M/tm⌉)",
        ),
        (
            (M / pad(M, tm) + N / pad(N, tn) + K / pad(K, tk)) / 3,
            "that averages the three dimensions' efficiencies; the work is a product, so multiply them",
        ),
    ]
    cause = next(
        (c for v, c in causes if _close(value, v)),
        "useful work M·N·K over computed work ⌈M/tm⌉·tm · ⌈N/tn⌉·tn · ⌈K/tk⌉·tk",
    )
    raise Mismatch(f"float {value:.12g}; expected {want:.12g}", next_step=cause)


def _judge_wave(got, want, case: Case) -> str:
    M, N, (tm, tn), sms = case.args
    value = _float_result("wave_efficiency", got)
    if _close(value, want):
        return ""
    tiles = -(-M // tm) * -(-N // tn)
    waves = -(-tiles // sms)
    causes = [
        (
            min(tiles / sms, 1.0) if tiles < sms else 1.0,
            "that leaves out the last, partly filled wave: waves = ⌈tiles / sms⌉, and each wave costs a whole wave",
        ),
        (tiles / sms, "that is tiles ÷ sms; divide by the SM slots of the whole waves, waves·sms"),
        (tiles / (max(tiles // sms, 1) * sms), "that rounds the waves down; a partial wave takes a whole wave's time"),
        (
            (M * N / (tm * tn)) / (math.ceil(M * N / (tm * tn) / sms) * sms),
            "that counts fractional tiles; an edge tile is a whole tile: tiles = ⌈M/tm⌉·⌈N/tn⌉",
        ),
        (M / tm * N / tn / (waves * sms), "that counts fractional tiles; an edge tile is a whole tile"),
        (float(waves), "that is the number of waves; the efficiency is tiles ÷ (waves·sms)"),
    ]
    cause = next(
        (c for v, c in causes if _close(value, v)),
        "tiles = ⌈M/tm⌉·⌈N/tn⌉, waves = ⌈tiles/sms⌉, efficiency = tiles / (waves·sms)",
    )
    raise Mismatch(
        f"float {value:.12g}; expected {want:.12g} ({tiles} tiles on {sms} SMs: {waves} wave"
        f"{'s' if waves != 1 else ''})",
        next_step=cause,
    )


def _judge_block(got, want, case: Case) -> str:
    rows, tile = case.args
    value = _float_result("block_tile_efficiency", got)
    if _close(value, want):
        return ""
    effs = [reference_tile_efficiency(M, N, K, tuple(tile)) for _, _, M, N, K in rows]
    flops = [c * M * N * K for _, c, M, N, K in rows]
    no_count = sum(M * N * K for _, _, M, N, K in rows) / sum(
        M * N * K / e for (_, _, M, N, K), e in zip(rows, effs, strict=True)
    )
    causes = [
        (
            sum(effs) / len(effs),
            "that is the plain mean of the rows' efficiencies; weight each row by its FLOPs "
            "(a big GEMM's waste costs more than a small one's)",
        ),
        (no_count, "that leaves out count: a row with count c is c GEMMs, c times the work"),
        (
            sum(f * e for f, e in zip(flops, effs, strict=True)) / sum(flops),
            "that weights the efficiencies by useful FLOPs; the ratio of sums is Σ useful ÷ Σ computed",
        ),
        (1 / want, "that is computed ÷ useful, the inverse"),
    ]
    cause = next(
        (c for v, c in causes if _close(value, v)),
        "Σ over rows of count·M·N·K, divided by Σ over rows of count · (the tile-padded M·N·K)",
    )
    raise Mismatch(f"float {value:.12g}; expected {want:.12g}", next_step=cause)


def _judge_heads(got, want, case: Case) -> str:
    heads = case.args[5]
    if not isinstance(got, tuple) or len(got) != 2:
        raise Mismatch(
            f"{describe(got)}, but better_head_count returns a tuple (heads, ratio)",
            next_step="return the better of the two head counts and the ratio of the efficiencies",
        )
    h, ratio = got
    if isinstance(h, bool) or not isinstance(h, Integral) or h not in heads:
        raise Mismatch(
            f"{got!r}: {h!r} is not one of the two head counts {heads} (an int)",
            next_step="return one of the head counts you were given, as it was given",
        )
    value = _float_result("better_head_count's ratio", ratio)
    if h == want[0] and _close(value, want[1]):
        return ""
    batch, seq, d_model, d_ff, vocab, _, tile = case.args
    effs = [
        reference_block_tile_efficiency(reference_llama_block_gemms(batch, seq, d_model, n, n, d_ff, vocab), tile)
        for n in heads
    ]
    if h != want[0] and want[1] == 1.0:
        cause = "the two blocks tie; on a tie return the first head count"
    elif _close(value, 1 / want[1]) and want[1] != 1.0:
        cause = "the ratio is worse ÷ better; divide the better block's efficiency by the worse one's (≥ 1)"
    elif h != want[0] and _close(value, want[1]):
        cause = "that is the head count with the lower efficiency; the better one has the higher block efficiency"
    elif _close(abs(value), abs(effs[0] - effs[1])) or _close(value, want[1] - 1):
        cause = "that is a difference; the ratio is one efficiency divided by the other"
    else:
        cause = (
            "build each block with llama_block_gemms (n_kv_heads = n_heads, the vocab given) and compare their "
            "block_tile_efficiency on this tile"
        )
    raise Mismatch(f"{got!r}; expected ({want[0]}, {want[1]:.12g})", next_step=cause)


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def check_llama_block_gemms(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `llama_block_gemms`: every forward GEMM of a LLaMA-style block (GQA, SwiGLU, LM head) as (name, count, M,
    N, K), in order."""
    cases = (
        cases
        if cases is not None
        else llama_cases(
            [
                (1, 8, 64, 4, 2, 96, "small GQA: 2 K/V heads for 4 query heads"),
                (2, 2048, 4096, 32, 8, 14336, 128256, "LLaMA-3-8B's shapes, batch 2, with the LM head"),
            ]
        )
    )
    return _run(
        f"{TASK}-llama_block_gemms",
        fn,
        cases,
        expected=reference_llama_block_gemms,
        judge=_judge_rows,
        proves="every forward GEMM of a LLaMA-style block (GQA, SwiGLU, LM head) as (name, count, M, N, K), in order",
        hidden=hidden,
        next_step="derive each row from the configuration",
    )


def check_padded(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `padded`: the smallest multiple of `multiple` that is ≥ n, as an exact int."""
    cases = (
        cases
        if cases is not None
        else padded_cases(
            [
                (50257, 64, "GPT-2's vocabulary"),
                (4095, 8),
                (4096, 8, "already a multiple: it stays as it is"),
                (2**60 + 3, 8, "2⁶⁰ + 3: beyond the integers a float holds exactly"),
            ]
        )
    )
    return _run(
        f"{TASK}-padded",
        fn,
        cases,
        expected=reference_padded,
        judge=_judge_padded,
        proves="the smallest multiple of `multiple` that is ≥ n, as an exact int",
        hidden=hidden,
        next_step="round n up to a multiple",
    )


def check_tile_efficiency(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `tile_efficiency`: useful ÷ computed work when a GEMM is computed in whole (tm, tn, tk) tiles."""
    cases = (
        cases
        if cases is not None
        else tile_cases(
            [
                (4096, 4096, 4096, (128, 128, 64), "every size a multiple of its tile"),
                (4095, 4095, 4095, (128, 128, 64)),
                (1000, 200, 100, (128, 64, 32)),
            ]
        )
    )
    return _run(
        f"{TASK}-tile_efficiency",
        fn,
        cases,
        expected=reference_tile_efficiency,
        judge=_judge_tile,
        proves="useful ÷ computed work when a GEMM is computed in whole (tm, tn, tk) tiles",
        hidden=hidden,
        next_step="useful M·N·K over the work of whole tiles",
    )


def check_wave_efficiency(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `wave_efficiency`: tiles ÷ (waves·sms): how full the SMs are when the tiles run in whole waves."""
    cases = (
        cases
        if cases is not None
        else wave_cases(
            [
                (4096, 4096, (128, 128), H200_SMS, "1024 tiles on the H200's 132 SMs"),
                (1536, 1408, (128, 128), H200_SMS, "132 tiles: exactly one wave"),
                (300, 300, (64, 64), 8),
            ]
        )
    )
    return _run(
        f"{TASK}-wave_efficiency",
        fn,
        cases,
        expected=reference_wave_efficiency,
        judge=_judge_wave,
        proves="tiles ÷ (waves·sms): how full the SMs are when the tiles run in whole waves",
        hidden=hidden,
        next_step="count tiles, then whole waves",
    )


def check_block_tile_efficiency(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `block_tile_efficiency`: the FLOP-weighted tile efficiency of a list of GEMMs: Σ useful ÷ Σ computed
    work."""
    cases = (
        cases
        if cases is not None
        else block_cases(
            [((1, 8, 64, 4, 2, 96, None), (16, 16, 16)), ((8, 1024, 768, 12, 12, 2048, 50257), (128, 128, 64))]
        )
    )
    return _run(
        f"{TASK}-block_tile_efficiency",
        fn,
        cases,
        expected=reference_block_tile_efficiency,
        judge=_judge_block,
        proves="the FLOP-weighted tile efficiency of a list of GEMMs: Σ useful ÷ Σ computed work",
        hidden=hidden,
        next_step="sum useful and computed work over all rows, each count times",
    )


def check_better_head_count(fn: Callable, cases: Sequence[Case] | None = None, *, hidden: int = 0) -> CheckResult:
    """Check `better_head_count`: which of two head counts gives the block the better tile efficiency, and by what
    ratio."""
    cases = (
        cases
        if cases is not None
        else heads_cases(
            [
                (4, 512, 512, 2048, None, (8, 16), (128, 128, 64), "head sizes 64 and 32"),
                (1, 128, 512, 1024, 1000, (8, 4), (64, 64, 64), "a tie: head sizes 64 and 128 both fill 64-wide tiles"),
            ]
        )
    )
    return _run(
        f"{TASK}-better_head_count",
        fn,
        cases,
        expected=reference_better_head_count,
        judge=_judge_heads,
        proves="which of two head counts gives the block the better tile efficiency, and by what ratio",
        hidden=hidden,
        next_step="compare the two blocks' FLOP-weighted tile efficiencies",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hints: two or three per graded function, least detailed first; none is solution code (`twoprim.learner.hints`)
# ----------------------------------------------------------------------------------------------------------------

HINTS: dict[str, tuple[str, ...]] = {
    "ex08_shapes-llama_block_gemms": (
        "Start from lesson 08's `layers.transformer_gemms` for GPT-2 and ask what changes: which projections get "
        "narrower with grouped-query attention, and which get wider with SwiGLU.",
        "A projection multiplies every token at once, so its M is batch·seq and its count 1; an attention GEMM is "
        "one per sequence and per query head, each on a single head of size D = d_model / n_heads.",
        "K and V each have n_kv_heads heads of size D, and the kv row holds both; gate and up are each d_ff wide and "
        "gate_up holds both; down reads gate·up, which is d_ff wide.",
    ),
    "ex08_shapes-padded": (
        "Think of the number of whole blocks of size `multiple` needed to hold n items, then of their total size.",
        "Integer ceiling division needs no floats: a negative number floor-divided rounds toward minus infinity, "
        "and (n + multiple − 1) floor-divided by multiple is another way.",
        "When n is already a multiple, the answer is n itself: check 4096 with 8 and 1 with 1.",
    ),
    "ex08_shapes-tile_efficiency": (
        "A GPU computes a GEMM tile by tile; a tile at the edge that is only partly inside the matrix costs as much "
        "as a full one.",
        "Pad each of M, N and K up to a multiple of its own tile size (your `padded` does this), then compare the "
        "padded product of the three with the real one.",
        "Useful over computed: the real M·N·K divided by the padded M·N·K, with tm for M, tn for N, tk for K.",
    ),
    "ex08_shapes-wave_efficiency": (
        "Each output tile of (tm, tn) is one unit of work for one SM; with more tiles than SMs they run in waves, "
        "and the last wave may be only partly full.",
        "Count the tiles with ceilings in both directions, then the waves as a ceiling of tiles over SMs; a wave "
        "that is partly full takes as long as a full one.",
        "Efficiency is the tiles there are over the SM slots the waves offer: every wave offers sms slots.",
    ),
    "ex08_shapes-block_tile_efficiency": (
        "A block's efficiency is not the mean of its rows': a row that does most of the work should count most.",
        "Add up useful work over all rows and computed work over all rows separately, then divide the two totals; "
        "a row with count c contributes c times its own work to each total.",
        "Computed work of one GEMM is its M·N·K with each size padded to its tile, the denominator of tile_efficiency.",
    ),
    "ex08_shapes-better_head_count": (
        "Your other functions already do the work: build each block's rows, then measure each block as a whole.",
        "The block is plain multi-head attention here, so each head count is both n_heads and n_kv_heads; keep the "
        "vocab you were given (None means no LM head row).",
        "The ratio is the better efficiency over the worse one, so it is at least 1; when the two are equal, the "
        "first head count wins and the ratio is exactly 1.",
    ),
}
