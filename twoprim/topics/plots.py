"""Plots and tables the lessons share: one function per kind of figure, so notebooks only say what to plot."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import matplotlib.pyplot as plt

__all__ = ["lines", "sweep_plot", "bars", "format_table"]


def lines(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = True,
    logy: bool = True,
    note: str | None = None,
    legend_outside: bool = False,
):
    """One line (with markers) per series against a shared x; log axes by default. Returns the figure.

    A series shorter than x is drawn against the first len(series) values of x. `legend_outside` puts the legend
    to the right of the axes, for plots whose lines fill every corner.
    """
    fig, ax = plt.subplots(figsize=(8.4 if legend_outside else 6.4, 4.0))
    for label, ys in series.items():
        ax.plot(x[: len(ys)], ys, marker="o", label=label)
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
    if legend_outside:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    else:
        ax.legend()
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, alpha=0.7)
    fig.tight_layout()
    return fig


def sweep_plot(
    x: Sequence[int],
    y: Sequence[float],
    *,
    marks: Mapping[str, Callable[[int], bool]] | None = None,
    xlabel: str,
    ylabel: str,
    title: str,
    note: str | None = None,
):
    """One line against x; points where a predicate in `marks` holds are drawn again with that label (e.g.
    "multiple of 16": lambda n: n % 16 == 0). Returns the figure."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(x, y, marker="o", color="0.55", label="every size", zorder=1)
    for (label, holds), marker in zip((marks or {}).items(), ("s", "D", "^", "v"), strict=False):
        pts = [(a, b) for a, b in zip(x, y, strict=True) if holds(a)]
        if pts:
            ax.scatter(*zip(*pts, strict=True), marker=marker, s=70, label=label, zorder=2)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_ylim(0, max(y) * 1.12 if len(y) else 1.0)  # room above the highest marker
    ax.grid(True, alpha=0.3)
    ax.legend()
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, alpha=0.7)
    fig.tight_layout()
    return fig


def bars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    ylabel: str,
    title: str,
    note: str | None = None,
    logy: bool = False,
    value_format: str = "{:.0f}",
):
    """Grouped bars: one group per label, one bar per series, each bar with its value written on top."""
    fig, ax = plt.subplots(figsize=(max(6.4, 1.1 * len(labels) + 2.0), 4.0))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        drawn = ax.bar(xs, values, width, label=name)
        ax.bar_label(drawn, labels=[value_format.format(v) for v in values], fontsize=7, padding=1)
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
    ax.set_yscale("log" if logy else "linear")
    ax.set(ylabel=ylabel, title=title)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    if len(series) > 1:
        ax.legend()
    if note:
        fig.text(0.01, 0.01, note, fontsize=8, alpha=0.7)
    fig.tight_layout()
    return fig


def format_table(rows: Iterable[Sequence], columns: Sequence[str]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned (numbers)."""
    cells = [[str(c) for c in columns]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])
