"""Running nbgrader the course's way: from grader/, where its configuration lives, with this environment's bin/
first on PATH (nbgrader shells out to `alembic`), failing early with the command to run when a tool is missing.
Shared by the course commands (`course`) and grading (`grading`), neither of which imports the other for it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from twoprim.config import COURSE_ID, ROOT
from twoprim.core.errors import CourseError

__all__ = [
    "COURSE_ID",
    "environment",
    "preflight",
    "nbgrader",
    "in_process_alembic",
    "checked_schema_once",
    "generate_assignment",
    "generate_feedback",
]


def environment() -> dict[str, str]:
    """os.environ with this interpreter's bin/ first on PATH (nbgrader shells out to `alembic`)."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def preflight(env: dict[str, str]) -> None:
    """Fail early, with the command to run, when nbgrader or alembic is missing from the environment."""
    bin_dir = Path(sys.executable).parent
    for tool in ("nbgrader", "alembic"):
        if shutil.which(tool, path=env["PATH"]) is None:
            raise CourseError(
                f"`{tool}` is not installed in {bin_dir} (nbgrader needs it to create and migrate the gradebook). "
                f"Run `make setup` in {ROOT} to build the course environment, then rerun this command."
            )


def nbgrader(
    args: list[str], *, root: Path = ROOT, check: bool = True, capture: bool = False, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Run `nbgrader ARGS` from `root`/grader, where its configuration lives; `timeout` None only for `./course
    nbgrader ARGS`, the instructor's own command, which runs as long as they let it (Ctrl-C)."""
    grader = root / "grader"
    if not (grader / "nbgrader_config.py").is_file():
        raise CourseError(f"{grader / 'nbgrader_config.py'} is missing: this is not a Two Primitives checkout.")
    env = environment()
    preflight(env)
    exe = shutil.which("nbgrader", path=env["PATH"])
    if exe is None:
        raise CourseError(f"`nbgrader` is not on the course environment's PATH ({env['PATH']}): run `make setup`")
    proc = subprocess.run([exe, *args], cwd=grader, env=env, text=True, capture_output=capture, timeout=timeout)
    if check and proc.returncode != 0:
        detail = f"\n{proc.stdout}\n{proc.stderr}" if capture else ""
        raise CourseError(f"`nbgrader {' '.join(args)}` failed with exit code {proc.returncode}.{detail}")
    return proc


@functools.cache
def _alembic_head() -> str | None:
    from alembic.script import ScriptDirectory
    from nbgrader import dbutil

    return ScriptDirectory(dbutil.ALEMBIC_DIR).get_current_head()


def in_process_alembic() -> None:
    """nbgrader asks a new `alembic heads` process (3-4 s, most of it imports) for its schema revision each time it
    creates a gradebook; in this process it reads the same revision from nbgrader's migration scripts, once."""
    import nbgrader.api

    nbgrader.api.get_alembic_version = _alembic_head


def checked_schema_once() -> None:
    """nbgrader checks each graded cell's metadata against its JSON schema with `jsonschema.validate`, which first
    checks the schema itself against JSON Schema's metaschema, every cell of every notebook (about 1 s of CPU per
    ex06 submission, a fifth of what the grader spends on it); in this process each schema is checked once and its
    validator kept. The cells are validated exactly as before, with the same error (`best_match`) raised.
    Left as it is when nbgrader's method is not the one this replaces (another nbgrader)."""
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.protocols
    import jsonschema.validators
    from nbgrader.nbgraderformat import common

    method = common.BaseMetadataValidator.validate_cell
    if getattr(method, "schema_checked_once", False):
        return
    if method.__module__ != common.__name__ or not {"jsonschema", "validate"} <= set(method.__code__.co_names):
        return  # not nbgrader 0.9's own method, which calls jsonschema.validate
    validators: dict[int, jsonschema.protocols.Validator] = {}

    def validate_cell(self, cell) -> None:
        if "nbgrader" not in cell.metadata:
            return
        version = cell.metadata["nbgrader"].get("schema_version", 0)
        if version != self.schema_version:
            return method(self, cell)  # too old or too new: nbgrader's own error
        validator = validators.get(version)
        if validator is None or validator.schema != self.schema:  # each validator reads the same file
            cls = jsonschema.validators.validator_for(self.schema)
            cls.check_schema(self.schema)
            validator = validators[version] = cls(self.schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(cell.metadata["nbgrader"]))
        if error is not None:
            raise error

    validate_cell.schema_checked_once = True  # type: ignore[attr-defined]
    common.BaseMetadataValidator.validate_cell = validate_cell


def _call_api(root: Path, doing: str, call, *, db_url: str | None = None, release: Path | None = None) -> None:
    """`call(api)` on nbgrader's Python API with the course's configuration (read from `root`/grader), run from
    grader/ as the nbgrader command would be; a failure raises CourseError saying what nbgrader could not do."""
    from nbgrader.apps.api import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    env = environment()
    preflight(env)
    os.environ["PATH"] = env["PATH"]
    in_process_alembic()
    checked_schema_once()
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root / "grader")).load_config()
    config.CourseDirectory.root = str(root)
    if db_url:
        config.CourseDirectory.db_url = db_url
    if release:
        config.CourseDirectory.release_directory = str(release)
    config.CourseDirectory.log_level = "WARN"
    cwd = os.getcwd()
    os.chdir(root / "grader")
    try:
        result = call(NbGraderAPI(config=config))
    finally:
        os.chdir(cwd)
    if not result.get("success"):
        raise CourseError(
            f"nbgrader could not {doing}: {(result.get('error') or result.get('log') or '').strip()[-600:]}"
        )


def generate_assignment(aid: str, *, root: Path = ROOT, release: Path | None = None, db_url: str | None = None) -> None:
    """nbgrader generate_assignment `aid` in this process (nbgrader imported once, not a process per assignment):
    the student version into `release` (default: the course's exercises/), registered in the gradebook at `db_url`
    (default: the course's)."""
    _call_api(
        root,
        f"generate {aid} from solutions/{aid}",
        lambda api: api.generate_assignment(aid, force=True, create=True),
        db_url=db_url,
        release=release,
    )


def generate_feedback(aid: str, student: str, *, root: Path = ROOT, db_url: str | None = None) -> None:
    """nbgrader generate_feedback for one student of `aid`, in this process: grader/feedback/<student>/<aid>/."""
    _call_api(
        root,
        f"write the feedback of {student} for {aid}",
        lambda api: api.generate_feedback(aid, student, force=True),
        db_url=db_url,
    )
