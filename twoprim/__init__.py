"""Two Primitives: the course package every notebook imports (checks, guards, reference kernels, timing, plots)."""
from . import backends, checks, ex01, guards, plots, reference, selfcheck, timing

__all__ = ["backends", "checks", "ex01", "guards", "plots", "reference", "selfcheck", "timing"]
__version__ = "0.1.0"
