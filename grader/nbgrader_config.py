"""nbgrader configuration for Two Primitives: the course root is the repository root.

solutions/<assignment>/  is nbgrader's source (the only place an exercise is written),
exercises/<assignment>/  is the generated student version (committed),
grader/                  holds the gradebook and student work (untracked).

Every nbgrader command finds this file: from grader/ (cwd), from the repository root (../nbgrader_config.py loads
it), and from anywhere else through the copy of this path that `make setup` writes into .venv/etc/jupyter, so a
command run from the wrong folder never creates an empty gradebook somewhere else.
"""
import os

c = get_config()  # noqa: F821 (injected by traitlets)

GRADER = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(GRADER)

c.CourseDirectory.root = ROOT
c.CourseDirectory.course_id = "two-primitives"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = os.path.join("grader", "submitted")
c.CourseDirectory.autograded_directory = os.path.join("grader", "autograded")
c.CourseDirectory.feedback_directory = os.path.join("grader", "feedback")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(GRADER, "gradebook.db")
c.CourseDirectory.assignment_id = ""

# The stub a learner sees in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A cold kernel imports torch (~2 s); the slowest legitimate test cell of any assignment stays well under this.
c.Execute.timeout = 120
