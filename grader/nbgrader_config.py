"""nbgrader configuration for Two Primitives: the course root is the repository root.

solutions/<assignment>/  is nbgrader's source (the only place an exercise is written),
exercises/<assignment>/  is the generated student version (committed),
grader/                  holds the gradebook and student work (untracked).

Every nbgrader command finds this file: from grader/ (cwd), from the repository root (../nbgrader_config.py loads
it), and from anywhere else through the copy of this path that `make setup` writes into .venv/etc/jupyter, so a
command run from the wrong folder never creates an empty gradebook somewhere else.
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821  # pyright: ignore[reportUndefinedVariable] (injected by traitlets)

GRADER = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(GRADER)

c.CourseDirectory.root = ROOT
from twoprim.config import COURSE_ID  # noqa: E402


def _classroom_course_id():
    """A hub of several courses (./course hub --courses) names each course folder's id in grader/classroom.json."""
    import json

    try:
        with open(os.path.join(GRADER, "classroom.json")) as f:
            return json.load(f).get("course_id")
    except (OSError, ValueError, AttributeError):
        return None


c.CourseDirectory.course_id = _classroom_course_id() or COURSE_ID
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = os.path.join("grader", "submitted")
c.CourseDirectory.autograded_directory = os.path.join("grader", "autograded")
c.CourseDirectory.feedback_directory = os.path.join("grader", "feedback")
# The gradebook: grader/gradebook.db, or the database TWOPRIM_DB names (e.g. postgresql://user@host:5432/db, the
# password from PGPASSWORD or ~/.pgpass), so nbgrader's commands and the formgrader use what autograde writes.
from twoprim.grading.gradebook import database_url  # noqa: E402

c.CourseDirectory.db_url = database_url(Path(ROOT))
c.CourseDirectory.assignment_id = ""

# The stub a learner sees in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Grading (see twoprim/grading/preprocessors.py): one time limit per cell (the grader passes --cell-timeout's value
# in its place); a warning printed while a correct answer is checked keeps its points (nbgrader alone scores any
# stderr 0); no single output is kept beyond 20,000 characters.
from twoprim.grading import preprocessors  # noqa: E402

c.Execute.timeout = preprocessors.DEFAULT_CELL_TIMEOUT
# and as long, not nbclient's 4 s, for a cell's output to arrive after its reply: on a loaded machine a kernel that
# imports torch answers late, and Validate would say it "did not run" (Timeout waiting for IOPub output)
c.Execute.iopub_timeout = preprocessors.DEFAULT_CELL_TIMEOUT
c.Execute.on_cell_start = preprocessors.record_cell_start
c.Execute.on_notebook_start = preprocessors.record_kernel_ready  # for the grading profile
# nbgrader makes autograded notebooks read-only (0444); the course's grader then writes its verdicts into them
# (twoprim/core/verdicts.py), which an instructor who is not root (the classroom's, ./course hub) may only do in files
# they can write. grader/ itself stays private.
c.Autograde.permissions = 644
c.Autograde.autograde_preprocessors = [
    "nbgrader.preprocessors.Execute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "twoprim.grading.preprocessors.TruncateOutputs",
    "twoprim.grading.preprocessors.StderrIsNotFailure",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Feedback shows each test's output but never the source of the hidden checks.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "twoprim.grading.preprocessors.HideHiddenTestSource",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]


# The exchange that release/fetch/submit/collect and feedback go through: TWOPRIM_EXCHANGE, else the one the
# classroom (`./course hub --exchange ...`) recorded in grader/classroom.json, else nbgrader's default.
def _classroom_exchange():
    import json

    try:
        with open(os.path.join(GRADER, "classroom.json")) as f:
            return json.load(f).get("exchange")
    except (OSError, ValueError, AttributeError):
        return None


c.Exchange.root = os.environ.get("TWOPRIM_EXCHANGE") or _classroom_exchange() or "/srv/nbgrader/exchange"
# In a classroom whose grader/classroom.json says so (./course hub's default), release, collect and feedback, here
# and in the formgrader, go through the classroom's exchange service instead (twoprim/exchange/client.py).
from twoprim.exchange.client import configure_from_classroom  # noqa: E402

configure_from_classroom(c, GRADER)
