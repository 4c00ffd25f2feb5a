"""The course's one configuration: its nbgrader course id and where its folders are. Imports nothing of the package,
so every layer (a learner's kernel, the grader, the classroom) reads the same values."""
from __future__ import annotations

from pathlib import Path

__all__ = ["COURSE_ID", "PACKAGE", "ROOT", "DATA", "GRADER"]

COURSE_ID = "two-primitives"   # nbgrader's course id: the gradebook, the exchange, the hub (grader/nbgrader_config.py)
PACKAGE = Path(__file__).resolve().parent   # twoprim/
ROOT = PACKAGE.parent                       # the repository: lessons/, exercises/, solutions/, grader/, data/
DATA = ROOT / "data"                        # measured facts the lessons quote (H200 GEMM speeds, ...)
GRADER = ROOT / "grader"                    # nbgrader's course folder: its configuration and gradebook
