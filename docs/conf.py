"""Sphinx configuration of the course's site (built by docs/build.py: `make docs`).

The lessons are executed copies staged beside these pages (docs/build.py); MyST-NB renders their outputs and never
runs them. Every warning fails the build (`-W`), and `nitpicky` makes every unresolved cross-reference one.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "Two Primitives"
author = "The Two Primitives course"
copyright = "the Two Primitives course"  # noqa: A001 - Sphinx's name

extensions = ["myst_nb", "sphinx.ext.autodoc", "twoprim_docs"]

root_doc = "index"
exclude_patterns = ["_build", "src", "**.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}

# Notebooks: rendered from their executed copies, never executed by the build
nb_execution_mode = "off"
# An explorer's output holds a widget view and a PNG of its first picture: the page shows the picture (a live widget
# needs a kernel), and no widget script is loaded from a CDN (the site works offline)
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js: dict = {}
nb_merge_streams = True

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "amsmath"]
myst_heading_anchors = 3

# Every cross-reference must resolve; types from other projects are not documented here
nitpicky = True
nitpick_ignore_regex = [
    ("py:class", r"(torch|collections)\..+"),  # other projects' types in the signatures (no intersphinx: offline)
    ("py:class", r"twoprim\..*\._\w+"),  # a private base class of the package, documented nowhere
]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}

html_theme = "sphinx_book_theme"
html_title = "Two Primitives"
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
}
html_static_path = ["_static"]
# MathJax from the site itself, not a CDN: docs/build.py copies node_modules' tex-svg.js beside the site's CSS
mathjax_path = "mathjax-tex-svg.js"
html_css_files = ["twoprim.css"]
