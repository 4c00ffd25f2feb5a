"""The widget machinery every lesson's explorer shares: `Explorer` (controls, a readout, a figure redrawn as a PNG),
`figure_png`, `int_slider`. The explorers themselves live in their lessons' topic modules: tiling in
`topics.gemm_tiles` (lesson 02), im2col in `topics.convolution` (04), attention in `topics.attention` (05), GEMM
shapes in `topics.gemm_shapes` (08).

Each explorer is three layers:

- a pure function of the control values that says what to draw (`tiling_view`, `im2col_view`, `attention_view`,
  `shape_point`); the tests check these without a browser;
- a figure function that draws that view with matplotlib;
- a thin ipywidgets 8 layer (`tiling_explorer`, `im2col_explorer`, `attention_explorer`, `shape_explorer`): the
  controls, a text readout, and the figure redrawn as a PNG into an Output widget whenever a control moves.

Displayed, an explorer carries the live widget and a PNG of its first state, so a viewer without widgets (nbviewer,
GitHub, an HTML export) shows a picture instead of a widget placeholder. Nothing needs a network or ipympl.
"""

from __future__ import annotations

import base64
import html
import importlib
import io
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt

DPI = 80  # PNGs small enough to redraw at every slider step
DRAW = threading.Lock()  # pyplot is not thread-safe; the shape explorer draws from a measuring thread

# Released notebooks of lessons 02, 04, 05 and 08 call `explorers.tiling_explorer()` and the like: those names moved
# to their lessons' topic modules and still resolve here, imported on first use (so that this shared module imports
# no lesson's module, and a lesson's module may import it).
MOVED = {
    **dict.fromkeys(["TilingView", "tiling_view", "tiling_figure", "tiling_explorer"], "twoprim.topics.gemm_tiles"),
    **dict.fromkeys(["IM2COL_X", "Im2colView", "im2col_view", "im2col_explorer"], "twoprim.topics.convolution"),
    **dict.fromkeys(
        ["SENTENCE", "HEADS", "AttentionView", "attention_view", "attention_figure", "attention_explorer"],
        "twoprim.topics.attention",
    ),
    **dict.fromkeys(
        [
            "Measurement",
            "measure_gemm",
            "ShapePoint",
            "shape_point",
            "padded",
            "shape_figure",
            "ShapeExplorer",
            "shape_explorer",
        ],
        "twoprim.topics.gemm_shapes",
    ),
}

__all__ = ["Explorer", "figure_png", "int_slider", "DPI", "DRAW", *MOVED]


def __getattr__(name: str):
    """A name that moved to its lesson's topic module (MOVED), from there."""
    if name in MOVED:
        return getattr(importlib.import_module(MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------------------------------------------
# The widget layer shared by every explorer
# ----------------------------------------------------------------------------------------------------------------


def figure_png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed, so the inline backend never shows it a second time."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buffer.getvalue()


def _display_data(png: bytes, text: str) -> dict:
    """One nbformat display_data output holding a PNG, with `text` for viewers that show no images."""
    return {
        "output_type": "display_data",
        "metadata": {},
        "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": text},
    }


class Explorer:
    """Controls over a render function `render(**values) -> (figure, readout text)`.

    The readout shows the text; the Output widget shows the figure as a PNG, replaced whole at every change.
    `limits(**values) -> {control name: new max}` keeps dependent controls in range (a tile index below the
    number of tiles). A ValueError from `render` is shown in the readout instead of a figure: it names what to
    change. Displayed, the explorer is its widget plus the PNG of its first state for viewers without widgets.
    A subclass that computes differently (the shape explorer measures) overrides `refresh` and passes no render.
    """

    def __init__(
        self,
        title: str,
        controls: Mapping[str, Any],  # ipywidgets' controls (their traits are untyped)
        render: Callable[..., tuple] | None,
        *,
        limits: Callable[..., Mapping[str, int]] | None = None,
        extra: Sequence[object] = (),
    ):
        import ipywidgets as widgets

        self.title, self.controls, self._render, self._limits = title, dict(controls), render, limits
        self.readout = widgets.HTML()
        self.output = widgets.Output()
        grid = widgets.GridBox(
            list(self.controls.values()), layout=widgets.Layout(grid_template_columns="repeat(3, minmax(240px, 1fr))")
        )
        self.widget = widgets.VBox(
            [widgets.HTML(f"<b>{html.escape(title)}</b>"), grid, *extra, self.readout, self.output]
        )
        self.text, self.png = "", b""
        self._adjusting = False
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.refresh()
        self.first_png, self.first_text = self.png, self.text

    @property
    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def _changed(self, change) -> None:
        if not self._adjusting:
            self.refresh()

    def refresh(self) -> None:
        """Bring dependent controls into range, render the current values and show the result."""
        if self._limits is not None:
            self._adjusting = True  # a max that clamps a value fires another change: one redraw is enough
            try:
                for name, top in self._limits(**self.values).items():
                    self.controls[name].max = top
            finally:
                self._adjusting = False
        try:
            with DRAW:
                assert self._render is not None  # (an explorer without one draws in a refresh of its own)
                fig, text = self._render(**self.values)
                png = figure_png(fig)
        except ValueError as err:
            self.show(None, str(err), error=True)
        else:
            self.show(png, text)

    def say(self, text: str, *, error: bool = False) -> None:
        """Put `text` in the readout (red for an error)."""
        colour = "#b00020" if error else "inherit"
        self.readout.value = (
            f'<pre class="twoprim-readout" style="margin: 4px 0; color: {colour}; '
            f'white-space: pre-wrap">{html.escape(text)}</pre>'
        )

    def show(self, png: bytes | None, text: str, *, error: bool = False) -> None:
        """Put `text` in the readout and `png` (None: nothing) in the output."""
        self.text = text
        self.say(text, error=error)
        if png is not None:
            self.png = png
        self.output.outputs = () if png is None else (_display_data(png, text),)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        bundle = self.widget._repr_mimebundle_()  # the widget view (and its repr as text/plain)
        assert bundle is not None  # (None only for a widget without a view; a VBox has one)
        if self.first_png:
            bundle["image/png"] = base64.b64encode(self.first_png).decode("ascii")
        bundle["text/plain"] = f"{self.title} (interactive in JupyterLab)\n{self.first_text}"
        return bundle


def int_slider(description: str, value: int, low: int, high: int, **kwargs):
    """An integer slider that updates when released, its label 110 px wide (every explorer's style)."""
    import ipywidgets as widgets

    return widgets.IntSlider(
        value=value,
        min=low,
        max=high,
        description=description,
        style={"description_width": "110px"},
        continuous_update=False,
        **kwargs,
    )
