"""The course's one configuration: its nbgrader course id, where its folders are, and the form of an assignment's id.
Imports nothing of the package, so every layer (a learner's kernel, the grader, the classroom) reads the same values."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["COURSE_ID", "PACKAGE", "ROOT", "DATA", "GRADER", "ASSIGNMENT_ID"]

COURSE_ID = "two-primitives"  # nbgrader's course id: the gradebook, the exchange, the hub (grader/nbgrader_config.py)
PACKAGE = Path(__file__).resolve().parent  # twoprim/
ROOT = PACKAGE.parent  # the repository: lessons/, exercises/, solutions/, grader/, data/
DATA = ROOT / "data"  # measured facts the lessons quote (H200 GEMM speeds, ...)
GRADER = ROOT / "grader"  # nbgrader's course folder: its configuration and gradebook

# An assignment's id (docs/guides/authors.md, "The id"): `exNN_topic`, NN the number of the lesson it follows; a
# lesson's second assignment `exNNb_topic` (a third `exNNc_...`). Group 1 is its short name, unique in the course:
# notebooks import its checks as `twoprim.exNN` (`twoprim.exNNb`).
ASSIGNMENT_ID = re.compile(r"(ex\d\d[a-z]?)_\w+")
