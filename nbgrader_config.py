# nbgrader run from the repository root (and the JupyterLab Validate button, whose server starts here) uses the
# course configuration in grader/.
import os

load_subconfig(os.path.join(os.path.dirname(os.path.abspath(__file__)), "grader", "nbgrader_config.py"))  # noqa: F821  # pyright: ignore[reportUndefinedVariable] (traitlets')
