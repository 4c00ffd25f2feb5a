"""Plots the lessons share: one function per kind of figure, so notebooks only say what to plot."""
from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt

__all__ = ["lines"]


def lines(x: Sequence[float], series: Mapping[str, Sequence[float]], *, xlabel: str, ylabel: str, title: str,
          logx: bool = True, logy: bool = True, note: str | None = None, legend_outside: bool = False):
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
