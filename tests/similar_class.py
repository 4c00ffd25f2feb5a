"""A class of ex02_gemm for `./course similarity`, built the way an instructor's class is: students who wrote their
answers independently, each their own way, and copies disguised as a student hiding a copy would disguise them.

Independent students. Every graded function has several hand-written ways to write it (different loop structures,
vectorisation choices, helper decompositions; `VARIANTS`), the natural ones more common, as in a class; each student
picks one per function and writes it in their own style (`Style`: how they read the shapes, build the result, index,
accumulate and read an element: the small choices two people make differently). Some answers are partly wrong (the
mistakes students make: a K loop one short, C read when beta is 0, the last tile dropped, the wrong dtype), some
functions are left unwritten, and one student hands in the notebook blank. Every right variant is right: `verify`
runs each one against A @ B.

Copies (`DISGUISES`), each of one independent student's answers:

    renamed      every name the copier could change is changed, comments rewritten
    reordered    independent statements reordered, loops swapped, operands of products swapped, comments added
    rewritten    every `for` loop rewritten as a `while` loop with its own counter, dead code added (unused variables,
                 a debug flag never set, counters nobody reads)
    partial      two of the six answers copied (renamed), the other four written by the copier
    wrapped      every answer moved into a helper function of its own, which the graded function calls

A copy group is two or more copies of the same student. Used by tests/test_analytics.py and
scripts/bench_similarity.py.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

AID = "ex02_gemm"
FUNCTIONS = ("matmul_loops", "matmul_dots", "matmul_outer", "gemm", "matmul_tiled", "gemm_flops")
DISGUISES = ("renamed", "reordered", "rewritten", "partial", "wrapped")
PARAMS = {
    "matmul_loops": "A, B",
    "matmul_dots": "A, B",
    "matmul_outer": "A, B",
    "gemm": "alpha, A, B, beta, C",
    "matmul_tiled": "A, B, tile",
    "gemm_flops": "M, N, K",
}


# --- a student's style: the small choices two people make differently ---------------------------------------------


@dataclass
class Style:
    """How one student writes: how they read the sizes, make the result, index it, accumulate, read an element."""

    shapes: int
    zeros: int
    index: int  # C[i, j] or C[i][j]
    accumulate: int  # s += x or s = s + x
    element: int  # A[i, k] * B[k, j], .item(), float(...), A[i][k]
    ranges: int  # range(M) or range(0, M)
    names: dict = field(default_factory=dict)  # their own names for the usual variables
    chooser: random.Random = field(default_factory=random.Random)  # their other small choices

    def pick(self, *options):
        """One of `options`: a small choice this student makes their own way."""
        return self.chooser.choice(options)

    @classmethod
    def draw(cls, rng: random.Random) -> Style:
        pools = {
            "M": ["M", "m", "num_rows", "n_rows", "M"],
            "N": ["N", "n", "num_cols", "n_cols", "N"],
            "K": ["K", "k_dim", "inner", "K", "depth"],
            "C": ["C", "out", "result", "C", "res"],
            "s": ["s", "total", "acc", "acc", "value", "tmp"],
            "i": ["i", "i", "r", "ii"],
            "j": ["j", "j", "c", "jj"],
            "k": ["k", "k", "p", "kk"],
        }
        names = {key: rng.choice(pool) for key, pool in pools.items()}
        if len({names["i"], names["j"], names["k"], names["K"], names["M"], names["N"]}) < 6:
            names.update(i="i", j="j", k="k", M="M", N="N", K="K")
        return cls(
            shapes=rng.choices(range(6), weights=[5, 3, 2, 2, 1, 1])[0],
            zeros=rng.choices(range(6), weights=[6, 2, 3, 1, 1, 1])[0],
            index=rng.choices(range(2), weights=[4, 1])[0],
            accumulate=rng.choices(range(2), weights=[4, 1])[0],
            element=rng.choices(range(4), weights=[3, 2, 2, 1])[0],
            ranges=rng.choices(range(2), weights=[5, 1])[0],
            names=names,
            chooser=random.Random(rng.random()),
        )

    def n(self, key: str) -> str:
        return self.names.get(key, key)

    def sizes(self) -> str:
        M, N, K = self.n("M"), self.n("N"), self.n("K")
        return [
            f"{M}, {K} = A.shape\n{N} = B.shape[1]",
            f"{M} = A.shape[0]\n{K} = A.shape[1]\n{N} = B.shape[1]",
            f"({M}, {K}), {N} = A.shape, B.shape[1]",
            f"{M}, {N}, {K} = A.size(0), B.size(1), A.size(1)",
            f"{K}, {N} = B.shape\n{M} = A.shape[0]",
            f"{M} = len(A)\n{K} = len(B)\n{N} = B.shape[1]",
        ][self.shapes]

    def new(self, empty: bool = False) -> str:
        M, N = self.n("M"), self.n("N")
        if empty:
            return [
                f"torch.empty({M}, {N}, dtype=A.dtype)",
                f"torch.empty(({M}, {N}), dtype=A.dtype)",
                f"A.new_empty({M}, {N})",
                f"A.new_empty(({M}, {N}))",
                f"torch.empty({M}, {N}).to(A.dtype)",
                f"torch.empty([{M}, {N}], dtype=A.dtype)",
            ][self.zeros]
        return [
            f"torch.zeros({M}, {N}, dtype=A.dtype)",
            f"torch.zeros(({M}, {N}), dtype=A.dtype)",
            f"A.new_zeros({M}, {N})",
            f"A.new_zeros(({M}, {N}))",
            f"torch.zeros({M}, {N}).to(A.dtype)",
            f"torch.zeros([{M}, {N}], dtype=A.dtype)",
        ][self.zeros]

    def at(self, name: str, a: str, b: str) -> str:
        return f"{name}[{a}, {b}]" if self.index == 0 else f"{name}[{a}][{b}]"

    def add(self, target: str, value: str) -> str:
        return f"{target} += {value}" if self.accumulate == 0 else f"{target} = {target} + {value}"

    def product(self, i: str, k: str, j: str) -> str:
        a, b = f"A[{i}, {k}]", f"B[{k}, {j}]"
        return [f"{a} * {b}", f"{a}.item() * {b}.item()", f"float({a}) * float({b})", f"A[{i}][{k}] * B[{k}][{j}]"][
            self.element
        ]

    def rng(self, bound: str) -> str:
        return f"range({bound})" if self.ranges == 0 else f"range(0, {bound})"


def _block(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.strip("\n").splitlines())


def _indent(code: str, by: int = 1) -> str:
    return "\n".join(("    " * by + line) if line.strip() else line for line in code.splitlines())


# --- the ways to write each function (`st` the student's style; `wrong`: a mistake students make) ---------------------


def loops_accumulator(st: Style, wrong: str = "") -> str:
    M, N, K, C, s, i, j, k = (st.n(x) for x in "MNKCsijk")
    kk = f"{K} - 1" if wrong == "short" else K
    new = st.new() if wrong != "dtype" else f"torch.zeros({M}, {N})"
    return _block(f"""
{st.sizes()}
{C} = {new}
for {i} in {st.rng(M)}:
    for {j} in {st.rng(N)}:
        {s} = {st.pick("0.0", "0.0", "0", "0.")}
        for {k} in {st.rng(kk)}:
            {st.add(s, st.product(i, k, j))}
        {st.at(C, i, j)} = {s}
return {C}""")


def loops_direct(st: Style, wrong: str = "") -> str:
    M, N, K, C, i, j, k = (st.n(x) for x in "MNKCijk")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {i} in {st.rng(M)}:
    for {j} in {st.rng(N)}:
        for {k} in {st.rng(K)}:
            {st.add(st.at(C, i, j), st.product(i, k, j))}
return {C}""")


def loops_lists(st: Style, wrong: str = "") -> str:
    M, N, K, s, i, j, k = (st.n(x) for x in "MNKsijk")
    a, b = st.pick(("a", "b"), ("a_list", "b_list"), ("x", "y"))
    tail = st.pick(
        "return torch.tensor(rows, dtype=A.dtype)",
        "out = torch.tensor(rows, dtype=A.dtype)\nreturn out",
        "return torch.tensor(rows).to(A.dtype)",
    )
    return _block(f"""
{a} = A.tolist()  # plain Python floats
{b} = B.tolist()
{st.sizes()}
rows = []
for {i} in {st.rng(M)}:
    row = {st.pick("[]", "list()")}
    for {j} in {st.rng(N)}:
        {s} = 0.0
        for {k} in {st.rng(K)}:
            {st.add(s, f"{a}[{i}][{k}] * {b}[{k}][{j}]")}
        row.append({s})
    rows.append(row)
{tail}""")


def loops_ikj(st: Style, wrong: str = "") -> str:
    M, N, K, C, i, j, k = (st.n(x) for x in "MNKCijk")
    read = st.pick(f"A[{i}, {k}].item()", f"float(A[{i}, {k}])", f"A[{i}][{k}]")
    b = st.pick(f"B[{k}, {j}].item()", f"float(B[{k}, {j}])", f"B[{k}][{j}]")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {i} in {st.rng(M)}:
    for {k} in {st.rng(K)}:
        a_ik = {read}
        for {j} in {st.rng(N)}:
            {st.add(st.at(C, i, j), f"a_ik * {b}")}
return {C}""")


def loops_comprehension(st: Style, wrong: str = "") -> str:
    M, N, K, i, j, k = (st.n(x) for x in "MNKijk")
    lists = st.pick("a, b = A.tolist(), B.tolist()", "a = A.tolist()\nb = B.tolist()")
    return _block(f"""
{lists}
{st.sizes()}
return torch.tensor([[sum(a[{i}][{k}] * b[{k}][{j}] for {k} in {st.rng(K)}) for {j} in {st.rng(N)}]
                     for {i} in {st.rng(M)}], dtype=A.dtype)""")


def loops_zip(st: Style, wrong: str = "") -> str:
    cols = st.pick("B.T.tolist()", "B.t().tolist()", "B.transpose(0, 1).tolist()")
    inner = st.pick("sum(x * y for x, y in zip(row, col))", "sum([x * y for x, y in zip(row, col)])")
    return _block(f"""
rows_of_a = A.tolist()
cols_of_b = {cols}   # column j of B is row j of its transpose
out = []
for row in rows_of_a:
    out.append([{inner} for col in cols_of_b])
return torch.tensor(out, dtype=A.dtype)""")


def loops_enumerate(st: Style, wrong: str = "") -> str:
    C, N, s, j = st.n("C"), st.n("N"), st.n("s"), st.n("j")
    return _block(f"""
{N} = B.shape[1]
b = B.tolist()
{C} = {_rename(st.new(), {st.n("M"): st.pick("A.shape[0]", "len(A)")})}
for i, row in enumerate(A.tolist()):
    for {j} in {st.rng(N)}:
        {s} = {st.pick("0", "0.0")}
        for k, a_val in enumerate(row):
            {st.add(s, f"a_val * b[k][{j}]")}
        {st.at(C, "i", j)} = {s}
return {C}""")


def loops_while(st: Style, wrong: str = "") -> str:
    M, N, K, C, s = (st.n(x) for x in "MNKCs")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
i = 0
while i < {M}:
    j = 0
    while j < {N}:
        {s} = 0.0
        k = 0
        while k < {K}:
            {st.add(s, st.product("i", "k", "j"))}
            k += 1
        {st.at(C, "i", "j")} = {s}
        j += 1
    i += 1
return {C}""")


def loops_reset_outside(st: Style, wrong: str = "") -> str:  # wrong: the running sum is not reset for each j
    M, N, K, C, s, i, j, k = (st.n(x) for x in "MNKCsijk")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {i} in {st.rng(M)}:
    {s} = 0.0
    for {j} in {st.rng(N)}:
        for {k} in {st.rng(K)}:
            {st.add(s, st.product(i, k, j))}
        {st.at(C, i, j)} = {s}
return {C}""")


def dots_basic(st: Style, wrong: str = "") -> str:
    M, N, C, i, j = (st.n(x) for x in "MNCij")
    row = st.pick(f"A[{i}, :]", f"A[{i}]", f"A[{i}, :]")
    col = st.pick(f"B[:, {j}]", f"B[:, {j}]", f"B.T[{j}]")
    return _block(f"""
{st.sizes()}
{C} = {st.new(empty=st.element % 2 == 0)}
for {i} in {st.rng(M)}:
    for {j} in {st.rng(N)}:
        {st.at(C, i, j)} = torch.dot({row}, {col})
return {C}""")


def dots_row_first(st: Style, wrong: str = "") -> str:
    M, N, C, i, j = (st.n(x) for x in "MNCij")
    return _block(f"""
{st.sizes()}
{C} = {st.new(empty=st.pick(True, False))}
for {i} in {st.rng(M)}:
    a_row = {st.pick(f"A[{i}]", f"A[{i}, :]")}          # (K,)
    for {j} in {st.rng(N)}:
        b_col = B[:, {j}]   # (K,)
        {st.at(C, i, j)} = torch.dot(a_row, b_col)
return {C}""")


def dots_stack(st: Style, wrong: str = "") -> str:
    i, j = st.n("i"), st.n("j")
    rows, cols = st.pick(
        ("range(A.shape[0])", "range(B.shape[1])"),
        ("range(len(A))", "range(B.size(1))"),
        ("range(A.size(0))", "range(B.size(1))"),
    )
    return _block(f"""
return torch.stack([torch.stack([torch.dot(A[{i}], B[:, {j}]) for {j} in {cols}])
                    for {i} in {rows}])""")


def dots_transpose(st: Style, wrong: str = "") -> str:
    M, N, C = st.n("M"), st.n("N"), st.n("C")
    return _block(f"""
{st.sizes()}
Bt = {st.pick("B.t()", "B.T", "B.transpose(0, 1)")}  # column j of B is Bt[j]
{C} = {st.new()}
for r in {st.rng(M)}:
    for c in {st.rng(N)}:
        {st.at(C, "r", "c")} = torch.dot(A[r], Bt[c])
return {C}""")


def dots_rows_list(st: Style, wrong: str = "") -> str:
    M, N, i, j = st.n("M"), st.n("N"), st.n("i"), st.n("j")
    return _block(f"""
{st.sizes()}
rows = []
for {i} in {st.rng(M)}:
    rows.append(torch.stack([torch.dot(A[{i}, :], B[:, {j}]) for {j} in {st.rng(N)}]))
return torch.stack(rows{st.pick("", ", dim=0", ", 0")})""")


def dots_columns(st: Style, wrong: str = "") -> str:
    get = st.pick("torch.dot(row, col).item()", "float(torch.dot(row, col))")
    return _block(f"""
columns = [B[:, j] for j in {st.pick("range(B.shape[1])", "range(B.size(1))")}]
values = [[{get} for col in columns] for row in A]
return torch.tensor(values, dtype=A.dtype)""")


def dots_flat(st: Style, wrong: str = "") -> str:
    M, N = st.n("M"), st.n("N")
    return _block(f"""
{st.sizes()}
flat = {st.pick(f"torch.empty({M} * {N}, dtype=A.dtype)", f"A.new_empty({M} * {N})")}
for idx in range({M} * {N}):
    i, j = {st.pick(f"divmod(idx, {N})", f"idx // {N}, idx % {N}")}
    flat[idx] = torch.dot(A[i], B[:, j])
return flat.{st.pick("reshape", "view")}({M}, {N})""")


def dots_wrong_row(st: Style, wrong: str = "") -> str:  # wrong: B's row j where its column j is meant
    M, N, C, i, j = (st.n(x) for x in "MNCij")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {i} in {st.rng(M)}:
    for {j} in {st.rng(N)}:
        {st.at(C, i, j)} = torch.dot(A[{i}], B[{j}])
return {C}""")


def outer_basic(st: Style, wrong: str = "") -> str:
    K, C, k = st.n("K"), st.n("C"), st.n("k")
    kk = f"{K} - 1" if wrong == "short" else K
    b = st.pick(f"B[{k}, :]", f"B[{k}]")
    a = st.pick(f"A[:, {k}]", f"A[:, {k}]", f"A.T[{k}]")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {k} in {st.rng(kk)}:
    {st.add(C, f"torch.outer({a}, {b})")}
return {C}""")


def outer_broadcast(st: Style, wrong: str = "") -> str:
    K, C, k = st.n("K"), st.n("C"), st.n("k")
    col = st.pick(f"A[:, {k}].unsqueeze(1)", f"A[:, {k}].reshape(-1, 1)", f"A[:, {k}:{k} + 1]")
    row = st.pick(f"B[{k}, :].unsqueeze(0)", f"B[{k}].reshape(1, -1)", f"B[{k}:{k} + 1, :]")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {k} in {st.rng(K)}:
    col = {col}   # (M, 1)
    row = {row}   # (1, N)
    {st.add(C, "col * row")}          # broadcast to (M, N)
return {C}""")


def outer_none(st: Style, wrong: str = "") -> str:
    K, C, k = st.n("K"), st.n("C"), st.n("k")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {k} in {st.rng(K)}:
    {st.add(C, st.pick(f"A[:, {k}, None] * B[None, {k}, :]", f"A[:, {k}][:, None] * B[{k}][None, :]"))}
return {C}""")


def outer_sum(st: Style, wrong: str = "") -> str:
    start = st.pick("torch.zeros(A.shape[0], B.shape[1], dtype=A.dtype)", "A.new_zeros(A.shape[0], B.shape[1])")
    return _block(f"""
return sum((torch.outer(A[:, k], B[k]) for k in {st.pick("range(A.shape[1])", "range(B.shape[0])")}), {start})""")


def outer_stack(st: Style, wrong: str = "") -> str:
    K, k = st.n("K"), st.n("k")
    return _block(f"""
{K} = A.shape[1]
products = torch.stack([torch.outer(A[:, {k}], B[{k}, :]) for {k} in {st.rng(K)}])  # (K, M, N)
return products.sum({st.pick("dim=0", "0", "axis=0")})""")


def outer_zip(st: Style, wrong: str = "") -> str:
    C = st.n("C")
    return _block(f"""
{C} = {_rename(st.new(), {st.n("M"): "A.shape[0]", st.n("N"): "B.shape[1]"})}
for a_col, b_row in zip({st.pick("A.T", "A.t()", "A.transpose(0, 1)")}, B):   # column k of A with row k of B
    {st.add(C, "torch.outer(a_col, b_row)")}
return {C}""")


def outer_list(st: Style, wrong: str = "") -> str:
    K, k = st.n("K"), st.n("k")
    return _block(f"""
{K} = A.shape[1]
terms = [torch.outer(A[:, {k}], B[{k}, :]) for {k} in {st.rng(K)}]
total = terms[0]
for term in terms[1:]:
    {st.add("total", "term")}
return total""")


def outer_wrong_column(st: Style, wrong: str = "") -> str:  # wrong: column k of B instead of its row
    K, C, k = st.n("K"), st.n("C"), st.n("k")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {k} in {st.rng(K)}:
    {st.add(C, f"torch.outer(A[:, {k}], B[:, {k}])")}
return {C}""")


def _product(st: Style) -> str:
    return st.pick("A @ B", "A @ B", "torch.matmul(A, B)", "torch.mm(A, B)", "A.matmul(B)")


def gemm_plain(st: Style, wrong: str = "") -> str:  # wrong for beta = 0 with NaN in C: the most common answer
    return st.pick(f"return alpha * ({_product(st)}) + beta * C", f"return ({_product(st)}) * alpha + C * beta")


def gemm_branch(st: Style, wrong: str = "") -> str:
    name = st.pick("product", "AB", "prod", "P")
    zero = st.pick("beta == 0", "beta == 0.0", "not beta")
    return _block(f"""
{name} = {_product(st)}
if {zero}:
    return alpha * {name}  # C is not read when beta is 0
return alpha * {name} + beta * C""")


def gemm_matmul(st: Style, wrong: str = "") -> str:
    C = st.n("C") if st.n("C") != "C" else "out"
    return _block(f"""
{C} = alpha * {_product(st)}
if beta != 0:
    {st.add(C, "beta * C")}
return {C}""")


def gemm_mm(st: Style, wrong: str = "") -> str:
    return _block(f"""
result = {_product(st)} * alpha
if beta:
    result = result + C * beta
return result""")


def gemm_inplace_add(st: Style, wrong: str = "") -> str:
    return _block(f"""
out = ({_product(st)}).mul(alpha)
if beta != 0.0:
    out.add_(C, alpha=beta)  # out += beta * C, in place on the new tensor
return out""")


def gemm_ternary(st: Style, wrong: str = "") -> str:
    return _block(f"""
ab = {_product(st)}
return alpha * ab if {st.pick("beta == 0", "not beta")} else alpha * ab + beta * C""")


def gemm_scaled_first(st: Style, wrong: str = "") -> str:
    return _block(f"""
scaled = {st.pick("torch.matmul(alpha * A, B)", "(alpha * A) @ B")}
if beta == 0:
    return scaled
return scaled + beta * C""")


def gemm_addmm(st: Style, wrong: str = "") -> str:  # wrong: the library's own GEMM, which the exercise rules out
    return "return torch.addmm(C, A, B, beta=beta, alpha=alpha)"


def gemm_in_place(st: Style, wrong: str = "") -> str:  # wrong: C modified in place
    return _block(f"""
C *= beta
C += alpha * ({_product(st)})
return C""")


def tiled_slices(st: Style, wrong: str = "") -> str:
    M, N, K, C = (st.n(x) for x in "MNKC")
    i0, j0, k0 = st.pick(("i0", "j0", "k0"), ("i", "j", "k"), ("ii", "jj", "kk"), ("r", "c", "p"))
    edge = f"{M} - tile + 1" if wrong == "edge" else M
    op = st.pick("@", "@", "mm")
    a, b = f"A[{i0}:{i0} + tile, {k0}:{k0} + tile]", f"B[{k0}:{k0} + tile, {j0}:{j0} + tile]"
    prod = f"{a} @ {b}" if op == "@" else f"torch.mm({a}, {b})"
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for {i0} in range(0, {edge}, tile):
    for {j0} in range(0, {N}, tile):
        for {k0} in range(0, {K}, tile):
            {st.add(f"{C}[{i0}:{i0} + tile, {j0}:{j0} + tile]", prod)}
return {C}""")


def tiled_bounds(st: Style, wrong: str = "") -> str:
    M, N, K, C = (st.n(x) for x in "MNKC")
    end = st.pick(lambda v, n: f"min({v} + tile, {n})", lambda v, n: f"min({n}, {v} + tile)")
    names = st.pick(("a_tile", "b_tile"), ("a_blk", "b_blk"))
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for i in range(0, {M}, tile):
    i_end = {end("i", M)}
    for j in range(0, {N}, tile):
        j_end = {end("j", N)}
        for k in range(0, {K}, tile):
            k_end = {end("k", K)}
            {names[0]} = A[i:i_end, k:k_end]
            {names[1]} = B[k:k_end, j:j_end]
            {st.add(f"{C}[i:i_end, j:j_end]", f"{names[0]} @ {names[1]}")}
return {C}""")


def tiled_accumulator(st: Style, wrong: str = "") -> str:
    M, N, K, C = (st.n(x) for x in "MNKC")
    block = st.pick(
        f"torch.zeros(min(tile, {M} - r), min(tile, {N} - c), dtype=A.dtype)",
        f"A.new_zeros(min(tile, {M} - r), min(tile, {N} - c))",
    )
    return _block(f"""
{st.sizes()}
{C} = {st.new(empty=True)}
for r in range(0, {M}, tile):
    for c in range(0, {N}, tile):
        block = {block}
        for p in range(0, {K}, tile):
            {
        st.add(
            "block",
            st.pick(
                "torch.mm(A[r:r + tile, p:p + tile], B[p:p + tile, c:c + tile])",
                "A[r:r + tile, p:p + tile] @ B[p:p + tile, c:c + tile]",
            ),
        )
    }
        {C}[r:r + tile, c:c + tile] = block
return {C}""")


def tiled_starts(st: Style, wrong: str = "") -> str:
    M, N, K, C = (st.n(x) for x in "MNKC")
    return _block(f"""
{st.sizes()}
row_starts = list(range(0, {M}, tile))
col_starts = list(range(0, {N}, tile))
inner_starts = list(range(0, {K}, tile))
{C} = {st.new()}
for i in row_starts:
    for j in col_starts:
        for k in inner_starts:
            {C}[i:i + tile, j:j + tile] = torch.addmm({C}[i:i + tile, j:j + tile], A[i:i + tile, k:k + tile],
                                                   B[k:k + tile, j:j + tile])
return {C}""")


def tiled_blocks(st: Style, wrong: str = "") -> str:
    M, N, K, C = (st.n(x) for x in "MNKC")
    return _block(f"""
{st.sizes()}
a_blocks = {{(i, k): A[i:i + tile, k:k + tile] for i in range(0, {M}, tile) for k in range(0, {K}, tile)}}
b_blocks = {{(k, j): B[k:k + tile, j:j + tile] for k in range(0, {K}, tile) for j in range(0, {N}, tile)}}
{C} = {st.new()}
for (i, k), a in a_blocks.items():
    for j in range(0, {N}, tile):
        {st.add(f"{C}[i:i + tile, j:j + tile]", "a @ b_blocks[(k, j)]" if st.pick(0, 1) else "a @ b_blocks[k, j]")}
return {C}""")


def tiled_rows_cat(st: Style, wrong: str = "") -> str:
    M, N, K = (st.n(x) for x in "MNK")
    return _block(f"""
{st.sizes()}
band_rows = []
for i in range(0, {M}, tile):
    tiles = []
    for j in range(0, {N}, tile):
        t = A[i:i + tile, 0:tile] @ B[0:tile, j:j + tile]
        for k in range(tile, {K}, tile):
            {st.add("t", "A[i:i + tile, k:k + tile] @ B[k:k + tile, j:j + tile]")}
        tiles.append(t)
    band_rows.append(torch.cat(tiles, {st.pick("dim=1", "1")}))
return torch.cat(band_rows, {st.pick("dim=0", "0")})""")


def tiled_ceil(st: Style, wrong: str = "") -> str:
    M, N, K, C = (st.n(x) for x in "MNKC")
    count = st.pick(
        lambda n: f"({n} + tile - 1) // tile", lambda n: f"math.ceil({n} / tile)", lambda n: f"-(-{n} // tile)"
    )
    return _block(f"""
{"import math" if "math" in count("x") else ""}
{st.sizes()}
n_i = {count(M)}   # tiles along each side, the last one smaller
n_j = {count(N)}
n_k = {count(K)}
{C} = {st.new()}
for bi in range(n_i):
    for bj in range(n_j):
        rows = slice(bi * tile, (bi + 1) * tile)
        cols = slice(bj * tile, (bj + 1) * tile)
        for bk in range(n_k):
            inner = slice(bk * tile, (bk + 1) * tile)
            {st.add(f"{C}[rows, cols]", "A[rows, inner] @ B[inner, cols]")}
return {C}""")


def tiled_whole_rows(st: Style, wrong: str = "") -> str:  # wrong: A's whole row band at once, not tiles
    M, N, C = (st.n(x) for x in "MNC")
    return _block(f"""
{st.sizes()}
{C} = {st.new()}
for i in range(0, {M}, tile):
    for j in range(0, {N}, tile):
        {C}[i:i + tile, j:j + tile] = A[i:i + tile, :] @ B[:, j:j + tile]
return {C}""")


FLOPS = [
    "return 2 * M * N * K",
    "return M * N * K * 2",
    "return 2 * M * N * K  # a multiply and an add per term",
    "flops = 2 * M * N * K\nreturn flops",
    "multiply_adds = M * N * K\nreturn 2 * multiply_adds",
    "return int(2 * M * N * K)",
    "return M * N * (2 * K)",
]
FLOPS_WRONG = ["return M * N * K", "return M * N * (2 * K - 1)"]


def flops(st: Style, wrong: str = "") -> str:
    return FLOPS_WRONG[st.shapes % 2] if wrong else FLOPS[(st.shapes + st.zeros) % len(FLOPS)]


# function -> [(way, weight, mistake)]: the natural ways are the common ones; a mistake ("" for none) is what a
# variant gets wrong when the student makes one
VARIANTS = {
    "matmul_loops": [
        (loops_accumulator, 8, "short"),
        (loops_direct, 4, ""),
        (loops_lists, 3, ""),
        (loops_ikj, 2, ""),
        (loops_comprehension, 2, ""),
        (loops_zip, 1, ""),
        (loops_enumerate, 1, ""),
        (loops_while, 1, ""),
    ],
    "matmul_dots": [
        (dots_basic, 8, ""),
        (dots_row_first, 3, ""),
        (dots_stack, 2, ""),
        (dots_transpose, 2, ""),
        (dots_rows_list, 2, ""),
        (dots_columns, 1, ""),
        (dots_flat, 1, ""),
    ],
    "matmul_outer": [
        (outer_basic, 8, "short"),
        (outer_broadcast, 3, ""),
        (outer_none, 3, ""),
        (outer_sum, 1, ""),
        (outer_stack, 2, ""),
        (outer_zip, 1, ""),
        (outer_list, 1, ""),
    ],
    "gemm": [
        (gemm_plain, 6, ""),
        (gemm_branch, 5, ""),
        (gemm_matmul, 3, ""),
        (gemm_mm, 2, ""),
        (gemm_inplace_add, 1, ""),
        (gemm_ternary, 2, ""),
        (gemm_scaled_first, 1, ""),
    ],
    "matmul_tiled": [
        (tiled_slices, 7, "edge"),
        (tiled_bounds, 4, ""),
        (tiled_accumulator, 2, ""),
        (tiled_starts, 1, ""),
        (tiled_blocks, 1, ""),
        (tiled_rows_cat, 1, ""),
        (tiled_ceil, 2, ""),
    ],
    "gemm_flops": [(flops, 1, "wrong")],
}
# a wrong way to write a function, beside the mistakes above
WRONG_WAYS = {
    "matmul_loops": [loops_reset_outside],
    "matmul_dots": [dots_wrong_row],
    "matmul_outer": [outer_wrong_column],
    "gemm": [gemm_addmm, gemm_in_place],
    "matmul_tiled": [tiled_whole_rows],
    "gemm_flops": [],
}
WRONG = {way.__name__ for ways in WRONG_WAYS.values() for way in ways}
RULE_BROKEN = {"gemm_addmm", "tiled_whole_rows"}  # the right values, by a way the exercise rules out


@dataclass
class Student:
    """One student: their answer to each function (the code inside the def, after the released lines), how it was
    made (`made`: function -> the way and mistake, or 'copied from X'), and whom they copied."""

    name: str
    bodies: dict[str, str]
    made: dict[str, str] = field(default_factory=dict)
    copied: str | None = None  # the student whose answers they copied
    disguise: str | None = None
    helpers: dict[str, str] = field(default_factory=dict)  # function -> module-level code before its def


def honest(name: str, rng: random.Random, *, mistakes: int = 0, unwritten: int = 0) -> Student:
    """A student who wrote every answer themselves, `mistakes` of them wrong and `unwritten` left as released."""
    st = Style.draw(rng)
    student = Student(name, {})
    wrong = set(rng.sample(FUNCTIONS, mistakes))
    skipped = set(rng.sample([f for f in FUNCTIONS if f not in wrong], unwritten))
    for fn in FUNCTIONS:
        if fn in skipped:
            continue
        ways = VARIANTS[fn]
        way, _, mistake = rng.choices(ways, weights=[w for _, w, _ in ways])[0]
        if fn in wrong:
            choices = [(w, m) for w, _, m in ways if m] + [(w, "wrong") for w in WRONG_WAYS[fn]]
            if fn == "matmul_loops":
                choices.append((loops_accumulator, "dtype"))
            way, mistake = rng.choice(choices)
        else:
            mistake = ""
        student.bodies[fn] = way(st, mistake)
        student.made[fn] = way.__name__ + (f" ({mistake})" if mistake else "")
    return student


# --- disguises ----------------------------------------------------------------------------------------------------


def _local_names(code: str, params: str) -> list[str]:
    """Names the answer assigns or loops over (what a copier renames; never the parameters), in order."""
    found: list[str] = [p.strip() for p in params.split(",")]
    for node in ast.walk(ast.parse(_as_function(code))):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in found:
            found.append(node.id)
        elif isinstance(node, ast.comprehension):
            for n in ast.walk(node.target):
                if isinstance(n, ast.Name) and n.id not in found:
                    found.append(n.id)
    return found[len(params.split(",")) :]


def _as_function(body: str) -> str:
    return "def f(alpha, A, B, beta, C, tile, M, N, K):\n" + _indent(body)


def _body_of(function_code: str) -> str:
    """The body of the single function in `function_code`, as code."""
    fn = ast.parse(function_code).body[0]
    assert isinstance(fn, ast.FunctionDef), function_code
    return "\n".join(ast.unparse(s) for s in fn.body)


def _rename(code: str, names: dict[str, str]) -> str:
    """Every name of `names` replaced at once (never an attribute after a dot)."""
    if not names:
        return code
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], code)


class _Renamer(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, node: ast.Name):
        return ast.copy_location(ast.Name(self.names.get(node.id, node.id), node.ctx), node)


def _renamed(body: str, names: dict[str, str]) -> str:
    """The body with its names (never attributes or keywords) renamed, as the copier retyped it."""
    fn = _Renamer(names).visit(ast.parse(_as_function(body)))
    return _body_of(ast.unparse(fn))


_NEW_NAMES = [
    "acc_val",
    "total_sum",
    "res_mat",
    "nrows",
    "ncols",
    "inner_dim",
    "i1",
    "j1",
    "k1",
    "buf",
    "tmp_row",
    "part",
    "ab_prod",
    "tile_out",
    "lhs",
    "rhs",
    "chunk",
    "dim_a",
    "dim_b",
    "step",
    "cursor",
    "blk",
    "scratch",
    "entry",
    "vals",
    "grid",
    "prod_ab",
    "outm",
    "s_val",
    "xr",
    "yr",
    "zr",
    "q1",
    "q2",
    "q3",
]
_COMMENTS = [
    "# compute the product",
    "# loop over everything",
    "# my approach",
    "# result matrix",
    "# accumulate here",
    "# this was tricky",
    "# done",
    "# fill in the output",
]


def renamed(source: Student, rng: random.Random) -> dict[str, str]:
    """Every local name changed (and the comments rewritten): what copydetect's tokenizer sees through."""
    out = {}
    for fn, body in source.bodies.items():
        pool = iter(rng.sample(_NEW_NAMES, len(_NEW_NAMES)))
        names = {n: next(pool) for n in _local_names(body, PARAMS[fn])}
        lines = _renamed(body, names).splitlines()
        out[fn] = "\n".join(
            line + (f"  {rng.choice(_COMMENTS)}" if line.strip() and rng.random() < 0.3 else "") for line in lines
        )
    return out


class _Reorder(ast.NodeTransformer):
    """Independent neighbouring statements swapped, directly nested loops exchanged, operands of * and + swapped."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        body = [self.visit(s) for s in body]
        out = list(body)
        for n in range(len(out) - 1):
            a, b = out[n], out[n + 1]
            if _independent(a, b) and self.rng.random() < 0.8:
                out[n], out[n + 1] = b, a
        return out

    def generic_visit(self, node):
        for name in ("body", "orelse"):
            if (
                isinstance(getattr(node, name, None), list)
                and getattr(node, name)
                and isinstance(getattr(node, name)[0], ast.stmt)
            ):
                setattr(node, name, self._body(getattr(node, name)))
        for name, value in ast.iter_fields(node):
            if name in ("body", "orelse"):
                continue
            if isinstance(value, ast.AST):
                setattr(node, name, self.visit(value))
            elif isinstance(value, list):
                setattr(node, name, [self.visit(v) if isinstance(v, ast.AST) else v for v in value])
        return node

    def visit_For(self, node: ast.For):
        self.generic_visit(node)  # in place: it returns `node` itself
        inner = node.body[0] if len(node.body) == 1 else None
        if isinstance(inner, ast.For) and not inner.orelse and _independent_loops(node, inner):
            node.target, inner.target = inner.target, node.target
            node.iter, inner.iter = inner.iter, node.iter
        return node

    def visit_BinOp(self, node: ast.BinOp):
        self.generic_visit(node)  # in place: it returns `node` itself
        if (
            isinstance(node.op, (ast.Mult, ast.Add))
            and not isinstance(node.op, ast.MatMult)
            and self.rng.random() < 0.7
        ):
            node.left, node.right = node.right, node.left
        return node


def _names(node: ast.AST, ctx) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def _writes(s: ast.stmt) -> set[str]:
    if isinstance(s, ast.Assign):
        targets = s.targets
    elif isinstance(s, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        targets = [s.target]
    else:
        raise TypeError(f"not an assignment: {ast.unparse(s)}")
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    """Two simple assignments to names, neither reading what the other writes."""
    simple = (ast.Assign, ast.AugAssign, ast.AnnAssign)
    if not (isinstance(a, simple) and isinstance(b, simple)):
        return False
    targets = [t for s in (a, b) for t in (s.targets if isinstance(s, ast.Assign) else [s.target])]
    if any(isinstance(t, ast.Subscript) for t in targets):
        return False
    wa, wb = _writes(a), _writes(b)
    return not (wa & _names(b, ast.Load) or wb & _names(a, ast.Load) or wa & wb)


def _independent_loops(outer: ast.For, inner: ast.For) -> bool:
    bound = _names(outer.target, ast.Store)
    return not (bound & _names(inner.iter, ast.Load))


def reordered(source: Student, rng: random.Random) -> dict[str, str]:
    """Statements reordered where the order does not matter, loops exchanged, products' operands swapped; a comment
    on most lines."""
    out = {}
    for fn, body in source.bodies.items():
        tree = ast.parse(_as_function(body))
        tree = _Reorder(rng).visit(tree)
        code = _body_of(ast.unparse(tree))
        out[fn] = "\n".join(
            line + (f"  {rng.choice(_COMMENTS)}" if rng.random() < 0.6 else "") for line in code.splitlines()
        )
    return out


class _WhileLoops(ast.NodeTransformer):
    """`for v in range(...)` as `v = start; while v < stop: ...; v += step`; other loops kept."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def visit_For(self, node: ast.For):
        self.generic_visit(node)  # in place: it returns `node` itself
        if not (
            isinstance(node.target, ast.Name)
            and isinstance(node.iter, ast.Call)
            and isinstance(node.iter.func, ast.Name)
            and node.iter.func.id == "range"
            and not node.orelse
        ):
            return node
        args = node.iter.args
        start, stop, step = (
            (ast.Constant(0), args[0], ast.Constant(1))
            if len(args) == 1
            else (args[0], args[1], args[2] if len(args) > 2 else ast.Constant(1))
        )
        v = node.target.id
        counter = cast(ast.AugAssign, ast.parse(f"{v} += 0").body[0])
        counter.value = step
        dead = (
            [
                ast.parse(
                    self.rng.choice(["steps_done = steps_done + 1", "debug_count += 1"]).replace(
                        "debug_count", "debug_count"
                    )
                ).body[0]
            ]
            if self.rng.random() < 0.5
            else []
        )
        init = cast(ast.Assign, ast.parse(f"{v} = 0").body[0])
        init.value = start
        loop = ast.While(
            test=ast.Compare(ast.Name(v, ast.Load()), [ast.Lt()], [stop]), body=[*node.body, *dead, counter], orelse=[]
        )
        return [init, loop]


def rewritten(source: Student, rng: random.Random) -> dict[str, str]:
    """Every range loop a while loop with its own counter; dead code: a debug flag never set, unused temporaries,
    counters nobody reads."""
    out = {}
    for fn, body in source.bodies.items():
        tree = ast.parse(_as_function(body))
        tree = ast.fix_missing_locations(_WhileLoops(rng).visit(tree))
        code = _body_of(ast.unparse(tree))
        lines = code.splitlines()
        prologue = ["debug = False", "steps_done = 0", "debug_count = 0"]
        if rng.random() < 0.7:
            prologue.append(rng.choice(["unused_list = []", "checked = True", "scale = 1.0"]))
        epilogue = ["if debug:", "    print('done', steps_done)"]
        ret = next((n for n in range(len(lines) - 1, -1, -1) if lines[n].startswith("return")), len(lines))
        out[fn] = "\n".join(prologue + lines[:ret] + epilogue + lines[ret:])
    return out


def wrapped(source: Student, rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    """Every answer moved into a helper of its own, defined before the graded function in its cell, with its own
    parameter names; the graded function calls it."""
    bodies, helpers = {}, {}
    style = rng.randrange(3)  # one copier wraps every function the same way, another copier differently
    for fn, body in source.bodies.items():
        params = [p.strip() for p in PARAMS[fn].split(",")]
        mine = {
            p: rng.choice([p.lower() + "_", "mat_" + p.lower(), p.lower() + "_in", "x_" + p.lower()]) for p in params
        }
        if len(set(mine.values())) < len(mine):
            mine = {p: f"arg{n}" for n, p in enumerate(params)}
        helper = [f"_{fn}_impl", f"_compute_{fn.split('_')[-1]}", f"_{fn.split('_')[-1]}_helper"][style]
        helpers[fn] = f"def {helper}({', '.join(mine.values())}):\n" + _indent(_renamed(body, mine))
        call = f"{helper}({PARAMS[fn]})"
        bodies[fn] = [
            f"return {call}",
            f"result = {call}\nreturn result",
            f"out = {call}  # see the helper\nreturn out",
        ][style]
    return bodies, helpers


def partial(source: Student, rng: random.Random, own: Student) -> tuple[dict[str, str], list[str]]:
    """Two of `source`'s loop-and-tile answers copied (renamed; gemm and gemm_flops are one line each, which nobody
    needs to copy), the other four the copier's own (`own`)."""
    written = [f for f in FUNCTIONS if f in source.bodies and f not in ("gemm", "gemm_flops")]
    taken = sorted(rng.sample(written, 2), key=FUNCTIONS.index)
    copies = renamed(Student(source.name, {f: source.bodies[f] for f in taken}), rng)
    return {**own.bodies, **copies}, taken


# --- the class ----------------------------------------------------------------------------------------------------


@dataclass
class Class:
    """A built class: every student, the copy groups (source first) and, for each copy, what it copied."""

    students: dict[str, Student]
    groups: list[list[str]]

    def pairs(self) -> set[frozenset]:
        """Every pair within a copy group: the pairs a report should link."""
        return {frozenset((a, b)) for g in self.groups for n, a in enumerate(g) for b in g[n + 1 :]}

    def copied_pairs(self) -> dict[frozenset, str | None]:
        """Each copy with the student it copied -> its disguise (the pairs recall is measured on)."""
        return {frozenset((s.name, s.copied)): s.disguise for s in self.students.values() if s.copied}

    def partial_copies(self) -> dict[frozenset, set[str]]:
        """Each partial copy's pair -> the functions it copied."""
        return {
            frozenset((s.name, s.copied)): {f for f, how in s.made.items() if how.startswith("copied")}
            for s in self.students.values()
            if s.disguise == "partial"
        }


def build(size: int, *, seed: int = 0, copies_per_disguise: int | None = None, group_size: int = 3) -> Class:
    """A class of `size`: about a third copies (each disguise in turn, `copies_per_disguise` each), the rest
    independent, one of whom hands in a blank notebook and some of whom make mistakes or leave an answer unwritten.
    The first two copies of the class copy the same student (a group of `group_size`)."""
    rng = random.Random(f"{AID}-{size}-{seed}")
    per = copies_per_disguise if copies_per_disguise is not None else max(1, round(size / 14))
    n_copies = per * len(DISGUISES)
    n_honest = size - n_copies
    if n_honest < 4:
        raise ValueError(f"a class of {size} with {n_copies} copies leaves fewer than 4 independent students")
    students: dict[str, Student] = {}
    for n in range(n_honest):
        name = f"student{n + 1:02d}"
        if n == n_honest - 1:
            students[name] = Student(name, {})  # the blank notebook
            continue
        mistakes = rng.choices([0, 1, 2], weights=[6, 3, 1])[0]
        students[name] = honest(name, rng, mistakes=mistakes, unwritten=rng.choices([0, 1], weights=[5, 1])[0])
    sources = [s for s in students.values() if len(s.bodies) == len(FUNCTIONS)]
    rng.shuffle(sources)
    groups: dict[str, list[str]] = {}
    kinds = [d for _ in range(per) for d in DISGUISES]
    shared = min(group_size - 1, len(kinds))  # the first copies copy one student: a group
    for n, kind in enumerate(kinds):
        source = sources[0] if n < shared else sources[(n - shared + 1) % len(sources)]
        name = f"student{n_honest + n + 1:02d}"
        copy = Student(name, {}, copied=source.name, disguise=kind)
        if kind == "renamed":
            copy.bodies = renamed(source, rng)
        elif kind == "reordered":
            copy.bodies = reordered(source, rng)
        elif kind == "rewritten":
            copy.bodies = rewritten(source, rng)
        elif kind == "wrapped":
            copy.bodies, copy.helpers = wrapped(source, rng)
        else:
            own = honest(name, rng)
            copy.bodies, taken = partial(source, rng, own)
            copy.made = {**own.made, **{f: f"copied from {source.name}" for f in taken}}
        if kind != "partial":
            copy.made = {f: f"copied from {source.name} ({kind})" for f in copy.bodies}
        students[name] = copy
        groups.setdefault(source.name, [source.name]).append(name)
    # student names in a random order, so that nothing about a name says who copied
    order = list(students)
    rng.shuffle(order)
    rename = {old: f"s{n + 1:02d}" for n, old in enumerate(order)}
    final = {}
    for old, s in students.items():
        s.name, s.copied = rename[old], rename.get(s.copied) if s.copied else None
        s.made = {f: re.sub(r"student\d+", lambda m: rename[m.group(0)], how) for f, how in s.made.items()}
        final[s.name] = s
    return Class(dict(sorted(final.items())), [[rename[m] for m in g] for g in groups.values()])


# --- the notebook cells -------------------------------------------------------------------------------------------


def _stubs() -> dict[str, str]:
    from .classroom import student_version

    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in student_version(AID).cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }


def cell(stub: str, body: str, helper: str = "") -> str:
    """An answer cell: `helper` (module-level code) first, then the released stub's lines (signature, docstring,
    guards) with `body` in place of `# YOUR CODE HERE` and `raise NotImplementedError()`."""
    kept = [
        line for line in stub.splitlines() if line.strip() not in ("# YOUR CODE HERE", "raise NotImplementedError()")
    ]
    return (helper + "\n\n\n" if helper else "") + "\n".join(kept + [_indent(body)])


def answers_of(student: Student) -> dict[str, str]:
    """grade_id -> the student's answer cell (the released stub where they wrote nothing)."""
    stubs = _stubs()
    out = {}
    for fn in FUNCTIONS:
        gid = f"{AID}-{fn}-solution"
        out[gid] = (
            cell(stubs[gid], student.bodies[fn], student.helpers.get(fn, "")) if fn in student.bodies else stubs[gid]
        )
    return out


def answers(klass: Class) -> dict[str, dict[str, str]]:
    """student -> grade_id -> answer cell, for the whole class."""
    return {name: answers_of(s) for name, s in klass.students.items()}


def write_class(klass: Class, submitted: Path) -> None:
    """Every student's notebook at grader/submitted/<student>/ex02_gemm/, as collect leaves it."""
    from .classroom import answered, write

    for name, s in klass.students.items():
        write(submitted, name, AID, answered(AID, answers_of(s)))


def verify(klass: Class) -> list[str]:
    """Each answer run on one product (K not a multiple of the tile): the answers meant to be right that are not,
    the wrong ones that are right, and the copies that do not behave as what they copied (all should be none)."""
    import torch

    from twoprim.assignments import ex02_gemm as ex02

    gen = torch.Generator().manual_seed(0)
    A, B, C = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((5, 7), (7, 3), (5, 3)))
    right: dict[tuple[str, str], bool] = {}
    for name, s in klass.students.items():
        ns: dict = {"torch": torch, "ex02": ex02}
        for gid, code in answers_of(s).items():
            exec(compile(code, f"<{name}-{gid}>", "exec"), ns)  # noqa: S102 - the class's own answers
        for fn in s.bodies:
            args = {"gemm": (1.5, A, B, 0.5, C.clone()), "matmul_tiled": (A, B, 2), "gemm_flops": (5, 3, 7)}.get(
                fn, (A, B)
            )
            want = {"gemm": 1.5 * A @ B + 0.5 * C, "gemm_flops": 2 * 5 * 3 * 7}.get(fn, A @ B)
            try:
                got = ns[fn](*args)
                right[name, fn] = (
                    bool(got == want)
                    if fn == "gemm_flops"
                    else bool(isinstance(got, torch.Tensor) and got.dtype == A.dtype and torch.allclose(got, want))
                )
            except Exception:  # noqa: BLE001 - a wrong answer may raise
                right[name, fn] = False
    problems = []
    for (name, fn), ok in right.items():
        s = klass.students[name]
        how = s.made.get(fn, "")
        if how.startswith("copied"):
            assert s.copied is not None, name
            meant = right[s.copied, fn]
        else:
            meant = how.split(" (")[0] in RULE_BROKEN or "(" not in how
        if ok != meant and not (fn == "gemm" and "gemm_in_place" in how):
            # (gemm_in_place is right once: it is wrong in that it changes C)
            problems.append(f"{name} {fn} ({how}): {'right' if ok else 'wrong'}")
    return problems
