"""Judging a learner's count of names: an assignment whose answer is a `Counter` of op names (ex06's graph nodes,
ex10's HLO operations) reads it with `as_counter`, which says what is wrong with a value that is not one, and
compares it with the expected count, naming each name whose count differs (`difference`).
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Mapping
from typing import Any

from twoprim.core.failures import Mismatch

__all__ = ["as_counter", "difference"]


def as_counter(got: Any, what: str, *, build: str, key: str) -> Counter:
    """`got` as a Counter of op names (zero counts dropped), or `Mismatch` when it is not a mapping of str names to
    int counts. `what` names the learner's function (`count_ops`); `build` is the next step for a value that is not
    a mapping, `key` the next step for an entry that is not (str name: int count)."""
    if not isinstance(got, Mapping):
        raise Mismatch(
            f"{type(got).__name__} {got!r}"[:300] + f", but {what} returns a Counter of op names", next_step=build
        )
    bad = [
        (k, v)
        for k, v in got.items()
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, numbers.Integral)
    ]
    if bad:
        k, v = bad[0]
        raise Mismatch(f"{dict(got)!r}"[:300] + f": the entry {k!r}: {v!r} is not (str name: int count)", next_step=key)
    return Counter({k: int(v) for k, v in got.items() if v})


def difference(want: Counter, got: Counter, *, most: int = 8) -> str:
    """'addmm: expected 2, got 1; relu: expected 1, got 0': each name whose count differs, by name, the first
    `most` of them."""
    rows = [
        f"{name}: expected {want[name]}, got {got[name]}"
        for name in sorted(set(want) | set(got))
        if want[name] != got[name]
    ]
    return "; ".join(rows[:most]) + ("; ..." if len(rows) > most else "")
