"""A synthetic class of ex01_dot for `./course similarity`: six students who wrote their answers independently,
each in their own way (as a class does: `dot` the natural way by most of them, two of them `cosine_similarity` to the
letter), and five who copied one of them,
each copy disguised: every name changed, statements reordered, comments rewritten, all three at once, and one who
copied only two answers and wrote the rest. Used by tests/test_analytics.py and scripts/similarity_eval.py."""
from __future__ import annotations

from pathlib import Path

from .classroom import answered, student_version, write

AID = "ex01_dot"
FUNCTIONS = ("dot_loop", "dot", "neuron", "cosine_similarity", "top_k")

INDEPENDENT_COSINE = ("dots = keys @ query\nnorms = torch.linalg.vector_norm(keys, dim=1) * "
                      "torch.linalg.vector_norm(query)\nreturn dots / norms.clamp_min(1e-8)")
INDEPENDENT = {
    "indep_1": {
        "dot_loop": "total = 0.0\nfor i in range(x.shape[0]):\n    total += float(x[i]) * float(w[i])\nreturn total",
        "dot": "return (x * w).sum()",
        "neuron": "return dot(x, w) + b",
        "cosine_similarity": INDEPENDENT_COSINE,
        "top_k": "sims = cosine_similarity(query, keys)\nreturn torch.sort(sims, descending=True, stable=True)"
                 ".indices[:k]",
    },
    "indep_2": {
        "dot_loop": "s = 0.0\nfor a, c in zip(x.tolist(), w.tolist()):\n    s += a * c\nreturn s",
        "dot": "return (x * w).sum()",
        "neuron": "return dot(x, w) + b",
        "cosine_similarity": "num = keys @ query\nden = keys.norm(dim=1) * query.norm()\nden = torch.clamp(den, "
                             "min=1e-8)\nreturn num / den",
        "top_k": "scores = cosine_similarity(query, keys)\norder = torch.argsort(scores, descending=True, "
                 "stable=True)\nreturn order[:k]",
    },
    "indep_3": {
        "dot_loop": "acc = 0.0\ni = 0\nwhile i < len(x):\n    acc = acc + x[i].item() * w[i].item()\n    i += 1\n"
                    "return float(acc)",
        "dot": "return torch.sum(x * w)",
        "neuron": "z = dot(x, w)\nreturn z + b",
        "cosine_similarity": "kn = torch.sqrt((keys * keys).sum(dim=1))\nqn = torch.sqrt((query * query).sum())\n"
                             "return torch.mv(keys, query) / torch.maximum(kn * qn, torch.tensor(1e-8, "
                             "dtype=keys.dtype))",
        "top_k": "s = cosine_similarity(query, keys)\nranked = sorted(range(len(s)), key=lambda i: (-float(s[i]), "
                 "i))\nreturn torch.tensor(ranked[:k], dtype=torch.long)",
    },
    "indep_4": {
        "dot_loop": "return float(sum(float(xi) * float(wi) for xi, wi in zip(x, w)))",
        "dot": "return (x * w).sum()",
        "neuron": "return b + (x * w).sum()",
        "cosine_similarity": "unit_keys = keys / keys.norm(dim=-1, keepdim=True).clamp_min(1e-8)\nunit_query = "
                             "query / query.norm().clamp_min(1e-8)\nreturn unit_keys @ unit_query",
        "top_k": "values, idx = torch.sort(-cosine_similarity(query, keys), stable=True)\nreturn idx[:k]",
    },
    "indep_5": {
        "dot_loop": "result = 0.0\nfor idx in range(len(x)):\n    prod = x[idx].item() * w[idx].item()\n"
                    "    result += prod\nreturn result",
        "dot": "prod = x * w\nreturn prod.sum()",
        "neuron": "return dot(x, w) + b",
        "cosine_similarity": "q_norm = torch.linalg.norm(query)\nk_norm = torch.linalg.norm(keys, dim=1)\nscores = "
                             "torch.matmul(keys, query)\nreturn scores / (q_norm * k_norm).clamp(min=1e-8)",
        "top_k": "sims = cosine_similarity(query, keys)\nranking = sorted(range(sims.shape[0]), key=lambda j: "
                 "(-sims[j].item(), j))\nreturn torch.as_tensor(ranking[:k])",
    },
    "indep_6": {
        "dot_loop": "out = 0.0\nws = w.tolist()\nfor n, xv in enumerate(x.tolist()):\n    out += xv * ws[n]\n"
                    "return out",
        "dot": "return (x * w).sum()",
        "neuron": "return torch.add(dot(x, w), b)",
        # the same three lines as indep_1, each written independently from the formula the lesson spells out: an
        # honest match of one answer, which must not rank a pair as high as a copy
        "cosine_similarity": INDEPENDENT_COSINE,
        "top_k": "c = cosine_similarity(query, keys).tolist()\nchosen = []\nfor _ in range(k):\n    best = max((i for "
                 "i in range(len(c)) if i not in chosen), key=lambda i: (c[i], -i))\n    chosen.append(best)\n"
                 "return torch.tensor(chosen)",
    },
}


def _rename(code: str, names: dict[str, str]) -> str:
    import re

    for old, new in names.items():
        code = re.sub(rf"\b{re.escape(old)}\b", new, code)
    return code


_RENAMED = {"total": "running_sum", "i": "position", "dots": "numerators", "norms": "denominators",
            "sims": "similarity_scores"}
_ALL = {"unit_keys": "normalised_rows", "unit_query": "normalised_q", "values": "_", "idx": "perm",
        "xi": "left", "wi": "right"}

COPIES = {
    # every name changed
    "renamed": ("indep_1", {f: _rename(c, _RENAMED) for f, c in INDEPENDENT["indep_1"].items()}),
    # statements reordered where the order does not matter
    "reordered": ("indep_2", {**INDEPENDENT["indep_2"],
                              "cosine_similarity": "den = keys.norm(dim=1) * query.norm()\nden = torch.clamp(den, "
                                                   "min=1e-8)\nnum = keys @ query\nreturn num / den",
                              "dot_loop": "s = 0.0\nfor c, a in zip(w.tolist(), x.tolist()):\n    s += a * c\n"
                                          "return s"}),
    # comments rewritten and added everywhere
    "recommented": ("indep_3", {f: "\n".join(f"{line}  # step {n}: as the lesson showed" if line.strip() else line
                                             for n, line in enumerate(c.splitlines()))
                                + "\n# checked against the lesson's example"
                                for f, c in INDEPENDENT["indep_3"].items()}),
    # all three at once
    "disguised": ("indep_4", {**{f: "# my own approach\n" + _rename(c, _ALL) for f, c in INDEPENDENT["indep_4"].items()},
                              "cosine_similarity": "# normalise the query first, then every key\nnormalised_q = "
                                                   "query / query.norm().clamp_min(1e-8)\nnormalised_rows = keys / "
                                                   "keys.norm(dim=-1, keepdim=True).clamp_min(1e-8)  # rows\nreturn "
                                                   "normalised_rows @ normalised_q"}),
    # two answers copied, three written
    "partial": ("indep_5", {"dot_loop": "r = 0.0\nfor xe, we in zip(x, w):\n    r += float(xe * we)\nreturn r",
                            "dot": "return (x * w).sum()",
                            "neuron": "return (x * w).sum() + b",
                            "cosine_similarity": INDEPENDENT["indep_5"]["cosine_similarity"],
                            "top_k": _rename(INDEPENDENT["indep_5"]["top_k"], {"ranking": "order", "j": "t"})}),
}
PLANTED = {(copy, source) for copy, (source, _) in COPIES.items()}
PARTIAL_FUNCTIONS = {"cosine_similarity", "top_k"}


def _cell(stub: str, body: str) -> str:
    """The student's answer cell: the released stub's lines (signature, docstring, guards) with `body` in place of
    `# YOUR CODE HERE` and `raise NotImplementedError()`."""
    kept = [l for l in stub.splitlines() if l.strip() not in ("# YOUR CODE HERE", "raise NotImplementedError()")]
    return "\n".join(kept + ["    " + l if l else l for l in body.splitlines()])


def answers_of(bodies: dict[str, str]) -> dict[str, str]:
    """grade_id -> the whole answer cell, for each function's body."""
    stubs = {c.metadata["nbgrader"]["grade_id"]: c.source for c in student_version(AID).cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    return {f"{AID}-{f}-solution": _cell(stubs[f"{AID}-{f}-solution"], body) for f, body in bodies.items()}


def students() -> dict[str, dict[str, str]]:
    """student -> grade_id -> answer cell, for the whole synthetic class."""
    out = {name: answers_of(bodies) for name, bodies in INDEPENDENT.items()}
    out.update({name: answers_of(bodies) for name, (_, bodies) in COPIES.items()})
    return out


def write_class(submitted: Path) -> None:
    """Every student's notebook at grader/submitted/<student>/ex01_dot/, as collect leaves it."""
    for name, cells in students().items():
        write(submitted, name, AID, answered(AID, cells))
