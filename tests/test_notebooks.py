"""Committed notebooks are clean; lessons run top to bottom; exercises/ is exactly what nbgrader generates; and the
course's site (docs/) builds from those very executions, at the end of this file.

Each lesson's execution is saved (docs/build.py's `save_executed`, into $TWOPRIM_ARTIFACTS/executed or
.artifacts/executed) for the site's tests below: `make test` runs this file on one process, in order (xdist's
loadfile), so every lesson has run before the site is built, and the build executes nothing. Run alone, the site's
tests execute the lessons that have no current copy first.
"""

from __future__ import annotations

import contextlib
import filecmp
import functools
import html.parser
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import nbformat
import pytest

from twoprim.config import ROOT
from twoprim.core.notebooks import assignments, execute, is_clean, lessons
from twoprim.course import generate

from . import scripts
from .chromium import launch


def _site_builder():
    """docs/build.py, imported by path (docs/ is not a package)."""
    return scripts.load("docs/build.py")


docs = _site_builder()
RAN_HERE: set[str] = set()  # lessons this process began to execute (test_lesson_runs_top_to_bottom), by file name

NOTEBOOKS = sorted(
    p
    for d in ("lessons", "solutions", "exercises")
    for p in (ROOT / d).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in p.parts
)


def test_course_has_its_notebooks():
    names = {p.relative_to(ROOT).as_posix() for p in NOTEBOOKS}
    assert {
        "lessons/00_start_here.ipynb",
        "lessons/01_dot_product.ipynb",
        "solutions/ex01_dot/ex01_dot.ipynb",
        "exercises/ex01_dot/ex01_dot.ipynb",
    } <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_committed_notebook_is_clean(path: Path):
    problems = is_clean(nbformat.read(str(path), as_version=4))
    assert not problems, (
        f"{path.relative_to(ROOT)} is not clean ({'; '.join(problems)}): run `./course clean {path.relative_to(ROOT)}`"
    )


def test_exercises_are_generated_from_solutions(tmp_path: Path):
    written = generate(into=tmp_path)
    assert {p.parent.name for p in written} == set(assignments()), "every assignment must generate a student version"
    for path in written:
        committed = ROOT / "exercises" / path.parent.name / path.name
        assert committed.exists(), f"{committed.relative_to(ROOT)} is missing: run `make exercises` and commit it"
        assert filecmp.cmp(path, committed, shallow=False), (
            f"{committed.relative_to(ROOT)} differs from what nbgrader generates from solutions/: exercises/ is "
            f"generated, never edited by hand. Run `make exercises` and commit the result."
        )
    extra = {p.parent.name for p in (ROOT / "exercises").glob("*/*.ipynb")} - set(assignments())
    assert not extra, f"exercises/ has assignments with no source in solutions/: {sorted(extra)}"


def test_student_version_hides_solutions_and_hidden_tests():
    for aid in assignments():
        student = (ROOT / "exercises" / aid / f"{aid}.ipynb").read_text()
        assert "BEGIN SOLUTION" not in student and "BEGIN HIDDEN TESTS" not in student
        assert "raise NotImplementedError()" in student
        source = nbformat.read(str(ROOT / "solutions" / aid / f"{aid}.ipynb"), as_version=4)
        hidden = [c.source for c in source.cells if "BEGIN HIDDEN TESTS" in c.source]
        assert hidden, f"{aid} has no hidden tests"
        for cell in hidden:
            body = cell.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0].strip()
            assert body and body not in student


@pytest.mark.notebook
@pytest.mark.parametrize("path", lessons(), ids=lambda p: p.name)
def test_lesson_runs_top_to_bottom(path: Path, record_property):
    RAN_HERE.add(path.name)
    nb, secs = execute(path, timeout=300)
    docs.save_executed(nb, path)  # the site's page of this lesson (the tests at the end of this file, `make docs`)
    record_property("lesson_seconds", (path.name, secs))
    print(f"{path.name}: {secs:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert any(c.cell_type == "code" and c.outputs for c in nb.cells), "a lesson that prints nothing taught nothing"


# --- The course's site (docs/), built from the executions above ---------------------------------------------------

# MyST-NB's choice among an output's formats in HTML (its base priority, the widget view taken out as docs/conf.py
# does): the first one an output has is what its page shows
HTML_PRIORITY = (
    "application/javascript",
    "text/html",
    "image/svg+xml",
    "image/png",
    "image/gif",
    "image/jpeg",
    "text/markdown",
    "text/latex",
    "text/plain",
)
WIDGET = "application/vnd.jupyter.widget-view+json"
# The first site test to run builds the site in its setup (~6 s in `make test`); run alone, it executes the lessons
# first (100-300 s on 2 cores). Each step has its own bound too: a cell 300 s, sphinx 600 s, a page 30 s.
SITE_TIMEOUT = pytest.mark.timeout(900)


def _shown(output) -> str | None:
    """The format of a display or result output that the lesson's page shows (None: a stream or an error)."""
    data = output.get("data", {})
    return next((mime for mime in HTML_PRIORITY if mime in data), None)


def _expected_images(nb) -> tuple[int, int]:
    """(every image the page of executed notebook `nb` shows, those of them that are PNG outputs)."""
    shown = [(o, _shown(o)) for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    png = sum(mime == "image/png" for _, mime in shown)
    in_html = sum(o["data"]["text/html"].count("<img") for o, mime in shown if mime == "text/html")
    return png + sum(mime in ("image/svg+xml", "image/gif", "image/jpeg") for _, mime in shown) + in_html, png


class _Page(html.parser.HTMLParser):
    """A built page's ids and its links (href and src), and the images inside its <article>."""

    def __init__(self, text: str):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.images: list[str] = []
        self.scripts: list[str] = []
        self._article = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.update(v for k, v in attrs.items() if k in ("id", "name") and v)
        self.links += [v for k, v in attrs.items() if k in ("href", "src") and v]
        src = attrs.get("src")
        if tag == "script" and src:
            self.scripts.append(src)
        if tag == "article":
            self._article += 1
        elif tag == "img" and self._article:
            self.images.append(src or "")

    def handle_endtag(self, tag):
        if tag == "article" and self._article:
            self._article -= 1


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built as `make docs` builds it, from the lessons' executions saved above (into a folder of its own);
    its html/ folder. Run without them (this file's site tests alone), it executes the lessons first."""
    lost = [p.name for p in lessons() if p.name in RAN_HERE and docs.current_copy(p) is None]
    assert not lost, (
        f"lessons executed in this run left no current executed copy in {docs.executed_dir()}: "
        f"{', '.join(lost)} (did their test fail before docs.save_executed?)"
    )
    docs.execute_missing(say=lambda line: None)  # only lessons this run did not execute (the site's tests alone)
    out = tmp_path_factory.mktemp("site")
    run, secs = docs.build(out)
    print(f"the site: sphinx built it in {secs:.1f} s")
    assert run.returncode == 0, f"the site does not build without warnings (sphinx -W -n):\n{run.stderr[-6000:]}"
    return out / "html"


@SITE_TIMEOUT
def test_the_site_builds_without_warnings_with_a_page_per_lesson(site: Path):
    for page in ("index.html", "api.html", "benchmarks.html", *(f"lessons/{p.stem}.html" for p in lessons())):
        assert (site / page).is_file(), f"the site has no {page}"
    documented = _Page((site / "api.html").read_text(encoding="utf-8")).ids
    kit = [
        f"twoprim.core.checks.{name}"
        for name in (
            "run_check",
            "Case",
            "Rule",
            "forbid",
            "judge_tensor",
            "judge_values",
            "elementwise_tolerance",
            "reduction_tolerance",
        )
    ]
    missing = [
        name for name in [*kit, "module-twoprim.core.guards", "module-twoprim.core.cases"] if name not in documented
    ]
    assert not missing, f"the API reference does not document {missing}"


@SITE_TIMEOUT
@pytest.mark.parametrize("lesson", lessons(), ids=lambda p: p.stem)
def test_every_lesson_page_of_the_site_shows_each_figure_of_its_notebook(site: Path, lesson: Path):
    nb = nbformat.read(str(docs.current_copy(lesson)), as_version=4)
    images, pngs = _expected_images(nb)
    page = _Page((site / "lessons" / f"{lesson.stem}.html").read_text(encoding="utf-8"))
    assert len(page.images) == images, (
        f"lessons/{lesson.stem}.html shows {len(page.images)} images; its executed notebook has {images} image outputs"
    )
    files = [src for src in page.images if src.endswith(".png") and not src.startswith("data:")]
    assert len(files) == pngs, f"{len(files)} PNG files on the page for {pngs} image/png outputs"


@SITE_TIMEOUT
def test_the_explorers_show_their_first_picture_on_the_site(site: Path):
    """An explorer's output is its widget and a PNG of its first picture: the page shows the picture."""
    explorers = {}
    for lesson in lessons():
        nb = nbformat.read(str(docs.current_copy(lesson)), as_version=4)
        bundles = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if WIDGET in o.get("data", {})]
        if bundles:
            explorers[lesson.stem] = bundles
    assert explorers, "no lesson's executed notebook holds an explorer"
    for stem, bundles in explorers.items():
        assert all(_shown(o) == "image/png" for o in bundles), f"{stem}: an explorer without its first picture"
        assert "jupyter-widgets" not in (site / "lessons" / f"{stem}.html").read_text(encoding="utf-8"), (
            f"lessons/{stem}.html loads a widget script (the site shows pictures; it loads nothing from a CDN)"
        )


@SITE_TIMEOUT
def test_every_local_link_and_image_of_the_site_resolves(site: Path):
    """Every href and src of every built page that stays on the site names a file of it, and every #anchor an id on
    that page. Links to other sites (http, https) are not followed: the build runs offline."""
    pages = {
        p: _Page(p.read_text(encoding="utf-8"))
        for p in site.rglob("*.html")
        if p.relative_to(site).parts[0] != "_static"
    }  # the themes' own templates there are no pages
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urllib.parse.urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # http(s), mailto, data: not a file of the site
            target = (path.parent / urllib.parse.unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{path.relative_to(site)}: {link} (no such file)")
            elif parts.fragment and target.suffix == ".html" and parts.fragment not in pages[target].ids:
                broken.append(f"{path.relative_to(site)}: {link} (no id {parts.fragment!r} on that page)")
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken[:40])
    lesson_pages = [p for p in pages if p.relative_to(site).parts[0] == "lessons"]
    remote = [f"{p.relative_to(site)}: {src}" for p in pages for src in pages[p].scripts if "://" in src]
    assert not remote, f"pages load scripts from other sites (the site works offline): {remote}"
    with_maths = [p for p in lesson_pages if 'class="math' in p.read_text(encoding="utf-8")]
    without = [
        str(p.relative_to(site))
        for p in with_maths
        if not any(src.split("?")[0].endswith("_static/mathjax-tex-svg.js") for src in pages[p].scripts)
    ]
    assert with_maths and not without, f"lesson pages with maths but not the site's own MathJax: {without}"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any, **kwargs: Any) -> None:  # the test reads what Chromium saw, not the server's log
        pass


@contextlib.contextmanager
def _serve(folder: Path):
    """`folder` over HTTP on a free loopback port, in a thread of this process; stopped (within a second) after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the site's web server did not stop within 10 s"


@pytest.mark.servers
@SITE_TIMEOUT
def test_chromium_shows_the_home_page_a_lesson_and_the_api_reference(site: Path):
    """Debian's Chromium (through Playwright) loads three pages from a loopback web server: each gets every file it
    asks for, and every image on it has rendered (a natural width)."""
    from playwright.sync_api import sync_playwright

    lesson = next(
        p
        for p in lessons()
        if _expected_images(nbformat.read(str(docs.current_copy(p)), 4))[1]
        and "$" in "".join(c.source for c in nbformat.read(str(p), 4).cells if c.cell_type == "markdown")
    )
    title = nbformat.read(str(lesson), as_version=4).cells[0].source.splitlines()[0].lstrip("# ")
    wanted = {"index.html": "Where to start", f"lessons/{lesson.stem}.html": title, "api.html": "run_check"}
    with _serve(site) as base, sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page()
            failed: list[str] = []
            page.on("requestfailed", lambda request: failed.append(f"{request.url}: {request.failure}"))

            def note_failure(response) -> None:
                if response.status >= 400:
                    failed.append(f"{response.url}: HTTP {response.status}")

            page.on("response", note_failure)
            for path, text in wanted.items():
                response = page.goto(f"{base}/{path}", wait_until="load", timeout=30_000)
                assert response and response.ok, f"{path}: {response and response.status}"
                assert text in page.inner_text("article"), f"{path} shows no {text!r}"
                images = page.evaluate(
                    "Array.from(document.querySelectorAll('article img'))"
                    ".map(i => [i.getAttribute('src').slice(0, 60), i.complete, i.naturalWidth])"
                )
                blank = [src for src, complete, width in images if not (complete and width > 0)]
                assert not blank, f"{path}: images that did not render: {blank}"
                if path.startswith("lessons/"):
                    assert len(images) == _expected_images(nbformat.read(str(docs.current_copy(lesson)), 4))[0]
                    # the maths typeset by the site's own MathJax (no CDN): every math element became SVG
                    page.wait_for_function(
                        "window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000
                    )
                    page.evaluate("MathJax.startup.promise")
                    maths = page.evaluate("document.querySelectorAll('article .math').length")
                    typeset = page.evaluate("document.querySelectorAll('article .math mjx-container svg').length")
                    assert maths and typeset == maths, f"{path}: {typeset} of {maths} formulas typeset"
            assert not [f for f in failed if f.startswith(base)], f"requests that failed: {failed}"
        finally:
            browser.close()
