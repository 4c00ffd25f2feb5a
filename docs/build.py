"""Build the course's site: every lesson with its outputs, the guides, the benchmarks and the authors' API reference.

    .venv/bin/python docs/build.py [--out docs/_build]          (what `make docs` runs; opens nothing)

Sphinx never executes a notebook here (MyST-NB's `nb_execution_mode = "off"`): each lesson page is rendered from an
executed copy of the lesson, `$TWOPRIM_ARTIFACTS/executed/NN_name.ipynb` (default `.artifacts/executed/`), which
the test suite writes as it runs each lesson top to bottom in a fresh kernel (tests/test_notebooks.py). A copy is
used while its lesson is unchanged: the SHA-256 of the committed notebook is kept in the copy's metadata. A lesson
without a current copy is executed first, here, with `twoprim.core.notebooks.execute`, and its copy saved.

The sources are staged into `<out>/src` (docs/ as it is, plus `lessons/` holding the executed copies) and built
with `sphinx -W --keep-going -n` (every warning an error, every cross-reference checked) into `<out>/html`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
if str(ROOT) not in sys.path:  # run as a script: the course package is importable from its checkout
    sys.path.insert(0, str(ROOT))

from twoprim.core.notebooks import execute, lessons  # noqa: E402

# The lessons' maths is typeset by MathJax, served from the site itself (the site works offline): its SVG build is one
# self-contained file (no fonts to fetch), installed by `npm ci` from package-lock.json with the classroom's proxy
MATHJAX = ROOT / "node_modules" / "mathjax" / "es5" / "tex-svg.js"
SPHINX_TIMEOUT_S = 600  # the build itself takes under a minute on 2 cores; a hung build ends and says so
KEY = "twoprim"  # the executed copy's metadata: {"lesson_sha256": ...} of the committed lesson it was run from


def executed_dir() -> Path:
    """Where executed copies of the lessons are kept: $TWOPRIM_ARTIFACTS/executed, or .artifacts/executed."""
    return Path(os.environ.get("TWOPRIM_ARTIFACTS") or ROOT / ".artifacts") / "executed"


def digest(lesson: Path) -> str:
    """The SHA-256 of a committed lesson notebook's bytes."""
    return hashlib.sha256(lesson.read_bytes()).hexdigest()


def save_executed(nb, lesson: Path, folder: Path | None = None) -> Path:
    """Write the executed notebook `nb` of `lesson` into `folder` (default: `executed_dir()`), marked with the
    lesson's digest; returns the copy's path."""
    import nbformat

    folder = folder or executed_dir()
    folder.mkdir(parents=True, exist_ok=True)
    nb.metadata[KEY] = {"lesson_sha256": digest(lesson)}
    path = folder / lesson.name
    partial = path.with_suffix(".ipynb.partial")
    nbformat.write(nb, str(partial))
    partial.replace(path)  # a reader never sees half a notebook
    return path


def current_copy(lesson: Path, folder: Path | None = None) -> Path | None:
    """The executed copy of `lesson` in `folder` when it was run from the lesson as it is now, else None."""
    import nbformat

    path = (folder or executed_dir()) / lesson.name
    if not path.is_file():
        return None
    try:
        meta = nbformat.read(str(path), as_version=4).metadata.get(KEY, {})
    except Exception:  # a copy that cannot be read is as good as none  # noqa: BLE001
        return None
    return path if meta.get("lesson_sha256") == digest(lesson) else None


def execute_missing(folder: Path | None = None, *, timeout: int = 300, say=print) -> list[Path]:
    """Execute every lesson that has no current copy in `folder`, saving each copy; returns the lessons executed."""
    ran = []
    for lesson in lessons():
        if current_copy(lesson, folder) is None:
            say(f"executing {lesson.relative_to(ROOT)} (no current executed copy) ...")
            nb, secs = execute(lesson, timeout=timeout)
            save_executed(nb, lesson, folder)
            say(f"  {secs:.1f} s")
            ran.append(lesson)
    return ran


def stage(src: Path, folder: Path | None = None) -> Path:
    """Copy docs/ into `src` (emptied first) with each lesson's executed copy in `src/lessons/`; returns `src`.
    Raises FileNotFoundError naming the lessons that have no current executed copy."""
    import nbformat

    missing = [lesson.name for lesson in lessons() if current_copy(lesson, folder) is None]
    if missing:
        raise FileNotFoundError(
            f"no current executed copy in {folder or executed_dir()} of: {', '.join(missing)} "
            f"(run tests/test_notebooks.py, or docs/build.py, which executes them)"
        )
    if not MATHJAX.is_file():
        raise FileNotFoundError(
            f"{MATHJAX.relative_to(ROOT)} is missing: the site typesets its maths with MathJax "
            f"from node_modules (run `npm ci`, as `make docs` does)"
        )
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build", "build.py", "__pycache__"))
    shutil.copy2(MATHJAX, src / "_static" / "mathjax-tex-svg.js")
    (src / "lessons").mkdir(exist_ok=True)
    for lesson in lessons():
        nb = nbformat.read(str(current_copy(lesson, folder)), as_version=4)
        nb.metadata.pop("widgets", None)  # the explorers' live state: the page shows their first picture instead
        nb.metadata.pop(KEY, None)
        nbformat.write(nb, str(src / "lessons" / lesson.name))
    return src


def sphinx(src: Path, out: Path, doctrees: Path) -> subprocess.CompletedProcess:
    """`sphinx -W --keep-going -n -b html src out`: every warning fails the build; bounded by SPHINX_TIMEOUT_S."""
    command = [
        sys.executable,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-n",
        "-q",
        "-b",
        "html",
        "-d",
        str(doctrees),
        str(src),
        str(out),
    ]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=SPHINX_TIMEOUT_S, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        raise TimeoutError(
            f"sphinx did not finish building {src} within {SPHINX_TIMEOUT_S} s; its last output:\n"
            f"{(err.stderr or b'')[-3000:]!r}"
        ) from None


def build(out: Path, folder: Path | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Stage the sources into `out/src` and build the site into `out/html`; returns sphinx's run and its seconds."""
    src = stage(out / "src", folder)
    html = out / "html"
    if html.exists():
        shutil.rmtree(html)
    started = time.perf_counter()
    run = sphinx(src, html, out / "doctrees")
    return run, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DOCS / "_build", help="the build folder (html/ is the site)")
    parser.add_argument(
        "--executed",
        type=Path,
        default=None,
        help="the executed lessons' folder (default $TWOPRIM_ARTIFACTS/executed or .artifacts/executed)",
    )
    args = parser.parse_args(argv)
    execute_missing(args.executed)
    run, secs = build(args.out.resolve(), args.executed)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode:
        print(f"error: the site did not build (sphinx exited {run.returncode}): the warnings above", file=sys.stderr)
        return run.returncode
    print(f"built in {secs:.1f} s: {args.out / 'html' / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
