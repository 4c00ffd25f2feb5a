"""Attention as GEMMs: the slow loop spec, FLOP and memory accounting, peak-memory measurement, and the lesson's plots.

- `attention_spec`: scaled dot-product attention one score at a time, in Python floats (the obviously correct loop).
- `two_gemm_attention`: the textbook form, op by op: a batched GEMM, a scale, a mask, a softmax, a second GEMM.
- `count_flops` / `gemm_and_other`: FLOPs per ATen op of any torch code, GEMMs exactly as `FlopCounterMode` counts
  them, the rest (element-wise math, reductions, masks) one FLOP per element.
- `record_allocations`, `track_memory` / `peak_memory` (from `twoprim.core.record`): every tensor a block of code
  creates, and the peak of live tensor bytes, tracked op by op.
- `heatmap`, `share_bars`: the lesson's figures (same style as `twoprim.topics.plots`).

`attention_spec` and `two_gemm_attention` are ex05_attention's ground truth: they count their calls (`uses`), so a
check can tell when an answer calls them instead of doing the work.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle
from torch.utils.flop_counter import FlopCounterMode

from twoprim.core.checks import counted
from twoprim.core.record import (
    GEMM_ATEN,
    Allocation,
    FlopRule,
    count_other_flops,
    peak_memory,
    record_allocations,
    track_memory,
)

if TYPE_CHECKING:  # the explorer's widget layer is imported when an explorer is made
    from twoprim.topics.explorers import Explorer

__all__ = [
    "attention_spec",
    "two_gemm_attention",
    "count_flops",
    "gemm_and_other",
    "record_allocations",
    "Allocation",
    "track_memory",
    "peak_memory",
    "scores_bytes",
    "heatmap",
    "share_bars",
    "uses",
]

_USES: Counter = Counter()


def uses() -> Counter:
    """How many times `attention_spec` and `two_gemm_attention` have been called (a copy)."""
    return Counter(_USES)


# ----------------------------------------------------------------------------------------------------------------
# The spec and the textbook form
# ----------------------------------------------------------------------------------------------------------------


def _additive(mask: torch.Tensor | None, shape: tuple[int, ...]) -> list | None:
    """The mask as nested lists of additive floats (0 or -inf for a boolean mask), broadcast to `shape`."""
    if mask is None:
        return None
    full = mask.expand(shape)
    if full.dtype == torch.bool:
        full = torch.zeros(shape, dtype=torch.float64).masked_fill(~full, -math.inf)
    return full.double().tolist()


def attention_spec(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False
) -> torch.Tensor:
    """softmax(q·kᵀ/√D + mask)·v, one dot product per score and one Python float at a time.

    q, k, v: (B, H, S, D). `mask` broadcasts to (B, H, S, S): boolean (True = keep) or additive floats. `causal`
    hides key j from query i when j > i. A query whose keys are all hidden gets a row of zeros, which is what
    `F.scaled_dot_product_attention` returns on torch 2.13 (measured by the lesson and by the ex05 checks).
    Slow on purpose: use it on a few dozen scores.
    """
    B, H, S, D = q.shape
    qs, ks, vs = q.double().tolist(), k.double().tolist(), v.double().tolist()
    add = _additive(mask, (B, H, S, S))
    out = [[[[0.0] * D for _ in range(S)] for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            for i in range(S):
                scores = []
                for j in range(S):
                    s = sum(qs[b][h][i][d] * ks[b][h][j][d] for d in range(D)) / math.sqrt(D)  # one dot
                    if causal and j > i:
                        s = -math.inf
                    if add is not None:
                        s += add[b][h][i][j]
                    scores.append(s)
                top = max(scores)
                if top == -math.inf:  # every key hidden: zeros, as SDPA returns
                    continue
                weights = [math.exp(s - top) for s in scores]  # stable: the largest is exp(0) = 1
                total = sum(weights)
                out[b][h][i] = [sum(w * vs[b][h][j][d] for j, w in enumerate(weights)) / total for d in range(D)]
    return torch.tensor(out, dtype=q.dtype)


def two_gemm_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False
) -> torch.Tensor:
    """softmax(q·kᵀ/√D + mask)·v op by op: GEMM, scale, mask, max, subtract, exp, sum, divide, GEMM.

    The textbook form whose FLOPs and memory the lesson counts. It builds the (B, H, S, S) scores. Rows whose keys
    are all masked come out as NaN here (0/0); `F.scaled_dot_product_attention` returns zeros for them.
    """
    D, S = q.shape[-1], q.shape[-2]
    scores = q @ k.transpose(-2, -1)  # (B, H, S, D) @ (B, H, D, S) -> (B, H, S, S)
    scores = scores * (1.0 / math.sqrt(D))  # (B, H, S, S)
    if causal:
        keep = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()  # (S, S): key j <= query i
        scores = scores.masked_fill(~keep, -math.inf)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    top = scores.amax(dim=-1, keepdim=True)  # (B, H, S, 1)
    e = (scores - top).exp()  # (B, H, S, S)
    p = e / e.sum(dim=-1, keepdim=True)  # (B, H, S, S), rows sum to 1
    return p @ v  # (B, H, S, S) @ (B, H, S, D) -> (B, H, S, D)


attention_spec = counted(attention_spec, _USES)
two_gemm_attention = counted(two_gemm_attention, _USES)


# ----------------------------------------------------------------------------------------------------------------
# FLOP accounting
# ----------------------------------------------------------------------------------------------------------------

# The rule lesson 05 and ex05's `attention_flops` count by: one FLOP per output element of element-wise math, one
# per input element of a reduction, softmax as its five parts and layer norm as seven; in-place `add_` as `add`.
FLOP_RULE = FlopRule(
    elementwise=frozenset(
        {
            "add",
            "sub",
            "rsub",
            "mul",
            "div",
            "neg",
            "exp",
            "exp2",
            "expm1",
            "log",
            "log2",
            "log1p",
            "sqrt",
            "rsqrt",
            "reciprocal",
            "pow",
            "square",
            "abs",
            "tanh",
            "sigmoid",
            "relu",
            "gelu",
            "silu",
            "erf",
            "maximum",
            "minimum",
            "fmax",
            "fmin",
            "clamp",
            "clamp_min",
            "clamp_max",
            "where",
            "masked_fill",
            "addcmul",
            "addcdiv",
            "lerp",
            "nan_to_num",
            "sign",
            "floor",
            "ceil",
            "round",
            "trunc",
        }
    ),
    reductions=frozenset(
        {
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "prod",
            "logsumexp",
            "var",
            "std",
            "var_mean",
            "std_mean",
            "norm",
            "linalg_vector_norm",
        }
    ),
    fused={"_softmax": 5, "_log_softmax": 5, "native_layer_norm": 7},
    inplace_as_out_of_place=True,
)


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Counter:
    """FLOPs of `fn(*args, **kwargs)` per ATen op name, measured while it runs.

    GEMM ops (`mm`, `bmm`, ...) as `torch.utils.flop_counter.FlopCounterMode` counts them: 2 per multiply-add.
    Everything else by `FLOP_RULE`: element-wise math (`mul`, `exp`, `masked_fill`, ...) 1 per output element,
    reductions (`sum`, `amax`, ...) 1 per input element; views, copies and tensor creation 0. Works on tensors on
    the `meta` device too, so the count for a large S costs no memory and no time.
    """
    with FlopCounterMode(display=False) as gemm_counter, count_other_flops(FLOP_RULE) as other:
        fn(*args, **kwargs)
    counts = Counter(
        {
            getattr(op, "__name__", str(op)).split(".")[-1]: int(n)
            for op, n in gemm_counter.get_flop_counts().get("Global", {}).items()
        }
    )
    counts.update(other.flops)
    return counts


def gemm_and_other(counts: Mapping[str, int]) -> dict[str, int]:
    """{"gemm": FLOPs in GEMM ops, "other": everything else} from `count_flops`'s per-op counts."""
    gemm = sum(n for op, n in counts.items() if op in GEMM_ATEN)
    return {"gemm": gemm, "other": sum(counts.values()) - gemm}


def scores_bytes(B: int, H: int, S: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the (B, H, S, S) score matrix in `dtype`: B·H·S²·(bytes per element)."""
    return B * H * S * S * torch.empty((), dtype=dtype).element_size()


# ----------------------------------------------------------------------------------------------------------------
# Plots for the lesson
# ----------------------------------------------------------------------------------------------------------------


def heatmap(
    panels: Mapping[str, torch.Tensor],
    *,
    labels: Sequence[str] | None = None,
    title: str = "",
    annotate: bool = True,
    note: str | None = None,
):
    """One heatmap per panel of attention weights (S_q, S_k): row i is query i, column j is key j. Returns the figure.

    `labels` names the tokens (queries and keys are the same tokens in self-attention); `annotate` writes each
    weight of at least 0.05 in its cell (for small S). Weights of exactly 0 (keys a mask hides) are drawn light grey.
    """
    n = len(panels)
    first = next(iter(panels.values()))
    S_q, S_k = first.shape
    size = max(3.0, 0.38 * S_k + 1.0)
    fig, axes = plt.subplots(
        1, n, figsize=(size * n + 1.2, size * S_q / S_k + 1.0), squeeze=False, layout="constrained"
    )
    image = None
    for c, (ax, (name, weights)) in enumerate(zip(axes[0], panels.items(), strict=True)):
        w = weights.detach().double().cpu()
        cmap = plt.get_cmap("viridis").with_extremes(bad="0.88")  # light grey: a weight of exactly 0 (masked)
        image = ax.imshow(w.masked_fill(w == 0, float("nan")).numpy(), cmap=cmap, vmin=0.0, vmax=1.0)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("key j")
        if c == 0:
            ax.set_ylabel("query i")
        if labels is not None:
            ax.set_xticks(range(S_k), labels[:S_k], rotation=90)
            ax.set_yticks(range(S_q), labels[:S_q] if c == 0 else [""] * S_q)
        if annotate and S_q * S_k <= 256:
            for i in range(S_q):
                for j in range(S_k):
                    value = float(w[i, j])
                    if value >= 0.05:
                        ax.text(
                            j,
                            i,
                            f"{value:.2f}",
                            ha="center",
                            va="center",
                            fontsize=7,
                            color="black" if value > 0.6 else "white",
                        )
    assert image is not None  # (one per panel, and there is at least one)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, alpha=0.7)
    return fig


def share_bars(rows: Mapping[str, Mapping[str, float]], *, title: str, note: str | None = None):
    """Horizontal 100 % bars: one bar per row (e.g. "FLOPs", "time"), split into its parts. Returns the figure."""
    parts = list(dict.fromkeys(part for row in rows.values() for part in row))
    fig, ax = plt.subplots(figsize=(8.4, 0.9 + 0.8 * len(rows)))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = list(rows)
    left = [0.0] * len(names)
    for c, part in enumerate(parts):
        widths = []
        for name in names:
            total = sum(rows[name].values())
            widths.append(100.0 * rows[name].get(part, 0.0) / total if total else 0.0)
        ax.barh(names, widths, left=left, color=colors[c % len(colors)], label=part)
        for r, wdt in enumerate(widths):
            if wdt >= 6:
                ax.text(left[r] + wdt / 2, r, f"{wdt:.0f}%", ha="center", va="center", fontsize=8, color="white")
        left = [start + w for start, w in zip(left, widths, strict=True)]
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    ax.set(xlabel="share (%)", title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, alpha=0.7)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------------------------
# The attention explorer
# ----------------------------------------------------------------------------------------------------------------

SENTENCE = tuple(["the", "cat", "sat", "on", "the", "mat", "because", "it", "was", "tired"])
HEADS = ("previous token", "same word", "average", "random (untrained)")


@dataclass(frozen=True)
class AttentionView:
    """One head over SENTENCE: scores = q·kᵀ/(√D·T), −inf where the causal mask hides a key; weights = softmax."""

    tokens: tuple[str, ...]
    head: str
    causal: bool
    temperature: float
    query: int
    q: torch.Tensor  # (S, D)
    k: torch.Tensor  # (S, D)
    v: torch.Tensor  # (S, D)
    scores: torch.Tensor  # (S, S)
    weights: torch.Tensor  # (S, S), rows sum to 1
    out: torch.Tensor  # (S, D) = weights @ v


def _head_qkv(head: str, tokens: Sequence[str], D: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v (S, D) of a hand-built head: orthonormal word and position vectors, so each head's pattern is exact."""
    gen = torch.Generator().manual_seed(5)
    S, words = len(tokens), sorted(set(tokens))
    if not 1 <= S <= D:
        raise ValueError(f"the explorer's heads take 1 to {D} tokens (one orthonormal position vector each), got {S}")
    position = torch.linalg.qr(torch.randn(D, D, dtype=torch.float64, generator=gen))[0][:S]  # (S, D)
    word_basis = torch.linalg.qr(torch.randn(D, D, dtype=torch.float64, generator=gen))[0]  # (D, D)
    word = torch.stack([word_basis[words.index(t)] for t in tokens])  # (S, D)
    sharp = 5 * math.sqrt(D)  # a matching pair scores 5 after the 1/√D scale
    if head == "previous token":  # query of token i = position of token i − 1
        q, k = torch.cat([position[:1], position[:-1]]) * sharp, position
    elif head == "same word":  # query = its own word: every token looks at the copies of its word
        q, k = word * sharp, word
    elif head == "average":  # a zero query scores every key the same: a plain average of the values
        q, k = torch.zeros(S, D, dtype=torch.float64), word + position
    elif head == "random (untrained)":
        q, k = (
            torch.randn(S, D, dtype=torch.float64, generator=gen),
            torch.randn(S, D, dtype=torch.float64, generator=gen),
        )
    else:
        raise ValueError(f"head must be one of {', '.join(map(repr, HEADS))}, got {head!r}")
    return q, k, word  # values: the word vectors, so an output says which words it averaged


def attention_view(
    head: str = "previous token",
    causal: bool = True,
    temperature: float = 1.0,
    query: int = 7,
    tokens: Sequence[str] = SENTENCE,
) -> AttentionView:
    """weights = softmax(q·kᵀ / (√D·T) + mask) for one head over `tokens`; out = weights @ v."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive (it divides the scores), got {temperature}")
    if not 0 <= query < len(tokens):
        raise ValueError(f"query must be a token index from 0 to {len(tokens) - 1}, got {query}")
    q, k, v = _head_qkv(head, tokens)
    S, D = q.shape
    scores = q @ k.T / (math.sqrt(D) * temperature)  # (S, D) @ (D, S) -> (S, S)
    if causal:
        keep = torch.ones(S, S, dtype=torch.bool).tril()  # key j <= query i
        scores = scores.masked_fill(~keep, -math.inf)
    weights = torch.softmax(scores, dim=-1)  # (S, S)
    return AttentionView(
        tuple(tokens), head, causal, float(temperature), query, q, k, v, scores, weights, weights @ v
    )  # (S, S) @ (S, D) -> (S, D)


def attention_figure(view: AttentionView):
    """Scores beside softmax weights, keys the mask hides in grey; the selected query's row outlined in both."""
    S = len(view.tokens)
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.9), layout="constrained")
    finite = view.scores[torch.isfinite(view.scores)]
    bound = max(float(finite.abs().max()) if finite.numel() else 1.0, 1e-9)
    hidden = ~torch.isfinite(view.scores)  # (S, S): masked keys, score -inf and weight 0
    panels = [
        (axes[0], view.scores, "coolwarm", (-bound, bound), "scores q·kᵀ / (√D·T)", "{:.1f}", 0.0),
        (axes[1], view.weights, "viridis", (0.0, 1.0), "weights = softmax(scores)", "{:.2f}", 0.05),
    ]
    for ax, values, cmap, (lo, hi), title, fmt, smallest in panels:
        shown = values.masked_fill(hidden, float("nan"))
        image = ax.imshow(shown.numpy(), cmap=plt.get_cmap(cmap).with_extremes(bad="0.88"), vmin=lo, vmax=hi)
        ax.set_xticks(range(S), view.tokens, rotation=90)
        ax.set_yticks(range(S), [f"{t} ({n})" for n, t in enumerate(view.tokens)])
        ax.set(xlabel="key j", ylabel="query i")
        ax.set_title(title, fontsize=10)
        for i in range(S):
            for j in range(S):
                value = float(values[i, j])
                if not hidden[i, j] and abs(value) >= smallest:
                    dark = cmap == "viridis" and value < 0.6
                    ax.text(
                        j,
                        i,
                        fmt.format(value),
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if dark else "black",
                    )
        ax.add_patch(Rectangle((-0.5, view.query - 0.5), S, 1, fill=False, edgecolor="tab:red", linewidth=2))
        fig.colorbar(image, ax=ax, shrink=0.8)
    mask = "causal mask" if view.causal else "no mask"
    fig.suptitle(
        f"head: {view.head}, {mask}, temperature {view.temperature:.2g}: row i is where token i looks", fontsize=10
    )
    return fig


def _attention_text(view: AttentionView) -> str:
    row = view.weights[view.query]
    order = sorted(range(len(row)), key=lambda j: -float(row[j]))
    top = ", ".join(f"'{view.tokens[j]}' ({j}) {float(row[j]):.2f}" for j in order[:3] if float(row[j]) > 0)
    hidden = int((row == 0).sum()) if view.causal else 0
    return (
        f"query {view.query} '{view.tokens[view.query]}' looks at: {top}\n"
        f"its weights sum to {float(row.sum()):.4f}; {hidden} later keys hidden by the mask get weight 0\n"
        f"temperature T divides the scores: T < 1 sharpens the softmax towards one key, T > 1 flattens it"
    )


def attention_explorer(
    head: str = "previous token", causal: bool = True, temperature: float = 1.0, query: int = 7
) -> Explorer:
    """Head, causal mask, temperature and a query: the score heatmap and the softmax weights."""
    import ipywidgets as widgets

    from twoprim.topics.explorers import Explorer, int_slider

    style = {"description_width": "110px"}
    controls = {
        "head": widgets.Dropdown(options=HEADS, value=head, description="head", style=style),
        "causal": widgets.Checkbox(value=causal, description="causal mask", style=style),
        "temperature": widgets.FloatLogSlider(
            value=temperature,
            base=10,
            min=-1,
            max=1,
            step=0.1,
            description="temperature",
            style=style,
            continuous_update=False,
        ),
        "query": int_slider("query token", query, 0, len(SENTENCE) - 1),
    }

    def render(**v):
        view = attention_view(**v)
        return attention_figure(view), _attention_text(view)

    return Explorer("Attention: scores, mask, temperature, softmax", controls, render)
