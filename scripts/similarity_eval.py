"""Precision and recall of `./course similarity` on the synthetic class of tests/similar_class.py (six students
who wrote ex01_dot independently, five planted copies: renamed, reordered, recommented, all three, and a partial
copy of two answers), at several thresholds (the benchmark data and docs render what it measures).

    .venv/bin/python scripts/similarity_eval.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import similar_class  # noqa: E402
from tests.classroom import student_version  # noqa: E402
from twoprim.analytics import similarity  # noqa: E402
from twoprim.core.notebooks import answers  # noqa: E402


def main() -> None:
    nb = student_version(similar_class.AID)
    boilerplate = {**answers(nb), "": "\n\n".join(c.source for c in nb.cells if c.cell_type == "code")}
    started = time.perf_counter()
    result = similarity.compare_answers(similar_class.students(), boilerplate, aid=similar_class.AID)
    seconds = time.perf_counter() - started
    planted = {frozenset(p) for p in similar_class.PLANTED}
    print(f"{len(result.students)} students, {len(result.pairs)} pairs ({len(planted)} planted), compared in "
          f"{seconds:.2f} s")
    print(f"{'threshold':>9}  {'flagged':>7}  {'precision':>9}  {'recall':>6}")
    for threshold in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        flagged = {frozenset((p.a, p.b)) for p in result.pairs if p.overall >= threshold}
        hits = len(flagged & planted)
        precision = hits / len(flagged) if flagged else float("nan")
        print(f"{threshold:9.1f}  {len(flagged):7d}  {precision:9.2f}  {hits / len(planted):6.2f}")
    lowest_planted = min(p.overall for p in result.pairs if frozenset((p.a, p.b)) in planted)
    highest_other = max(p.overall for p in result.pairs if frozenset((p.a, p.b)) not in planted)
    print(f"lowest planted pair {lowest_planted:.2f}; highest independent pair {highest_other:.2f}")
    for p in result.pairs[:len(planted)]:
        print(f"  {p.overall:.2f}  {p.a} ~ {p.b}: " + ", ".join(
            f"{g.split('-')[1]} {s:.2f}" for g, s in p.answers.items()))


if __name__ == "__main__":
    main()
