"""The explorers work where learners use them: JupyterLab from the course environment, in a real browser.

The test starts JupyterLab on a loopback port with a token, serving a temporary copy of the course (a running lab
autosaves, and the repository's notebooks must stay clean), and drives Debian's Chromium with Playwright: JupyterLab
loads once and each notebook opens in it, on one kernel (`_open`). For each lesson with an explorer it runs the
lesson's setup cell and the explorer cell, moves a slider with the keyboard and checks that the picture and the
readout changed; then it opens an exercise, presses nbgrader's Validate button and reads the verdict. A screenshot
of each explorer (and of the verdict) goes to $TWOPRIM_ARTIFACTS, by default .artifacts/browser/. It never skips:
without Chromium it fails and says how to install it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from twoprim.classroom.hub_checks import free_port
from twoprim.config import ROOT

from .chromium import CHROMIUM, MISSING, launch

# left out of `make test-fast`; a limit of its own: JupyterLab and Chromium start in the first test's setup
pytestmark = [pytest.mark.servers, pytest.mark.timeout(300)]

ARTIFACTS = Path(os.environ.get("TWOPRIM_ARTIFACTS") or ROOT / ".artifacts" / "browser")
TOKEN = "two-primitives-browser-test"

# lesson: (the label of the slider to move, the key that moves it)
LESSONS = {
    "02_gemm": ("tile size", "ArrowLeft"),
    "04_convolution": ("padding", "ArrowRight"),
    "05_attention": ("query token", "ArrowLeft"),
    "08_gemm_shapes": ("M", "ArrowLeft"),
}
LAB_SETTINGS = {  # nothing reaches the network, and every cell stays in the page (no virtual scrolling)
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _digest() -> dict[str, bytes]:
    """The committed notebooks the test opens copies of, byte for byte."""
    paths = [ROOT / "lessons" / f"{name}.ipynb" for name in LESSONS] + [ROOT / "exercises/ex01_dot/ex01_dot.ipynb"]
    return {str(p): p.read_bytes() for p in paths}


def _api(base: str, path: str, method: str = "GET", body: dict | None = None) -> Any:
    headers = {"Authorization": f"token {TOKEN}", "Content-Type": "application/json"}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", method=method, headers=headers, data=data)
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 serving a temporary copy of lessons/ and exercises/ex01_dot; stopped afterwards."""
    assert CHROMIUM.is_file(), MISSING
    work = tmp_path_factory.mktemp("lab")
    committed = _digest()
    course = work / "course"
    shutil.copytree(ROOT / "lessons", course / "lessons", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(
        ROOT / "exercises" / "ex01_dot",
        course / "exercises" / "ex01_dot",
        ignore=shutil.ignore_patterns(".ipynb_checkpoints"),
    )
    for name, values in LAB_SETTINGS.items():
        (work / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (work / "settings" / name).write_text(json.dumps(values))
    port = free_port()
    args = [
        str(Path(sys.executable).parent / "jupyter-lab"),
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={TOKEN}",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={course}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--LabApp.user_settings_dir={work / 'settings'}",
        f"--LabApp.workspaces_dir={work / 'workspaces'}",
        "--LabApp.expose_app_in_browser=True",
    ]  # window.jupyterapp: each notebook opens in the one loaded app
    if os.geteuid() == 0:
        args.append("--allow-root")  # CI runs as root, which JupyterLab otherwise refuses
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(work / "runtime"))
    log = (work / "lab.log").open("w")
    proc = subprocess.Popen(args, cwd=course, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _api(base, "/api/status")
                break
            except OSError:
                assert proc.poll() is None, f"JupyterLab exited early:\n{(work / 'lab.log').read_text()}"
                assert time.monotonic() < deadline, (
                    f"JupyterLab did not answer within 60 s:\n{(work / 'lab.log').read_text()}"
                )
                time.sleep(0.3)
        yield {"base": base, "course": course, "log": work / "lab.log"}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
    assert _digest() == committed, "the browser test changed the repository's notebooks: it must serve a copy"


@pytest.fixture(scope="module")
def page(lab):
    """A headless Chromium page (Debian's /usr/bin/chromium; Playwright downloads no browser)."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in ARTIFACTS.glob("*-failure.png"):  # from an earlier run
        stale.unlink()
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.on("dialog", lambda dialog: dialog.accept())  # "leave the page?" when a notebook has unsaved runs
            # JupyterLab loads once (a reset workspace); each test opens its notebook in it, as a learner does from
            # the file browser, instead of loading the whole application again
            page.goto(f"{lab['base']}/lab?reset&token={TOKEN}")
            page.wait_for_function("() => window.jupyterapp !== undefined")
            page.evaluate("async () => { await window.jupyterapp.restored; }")
            yield page
        finally:
            browser.close()


def _open(page, lab, path: str) -> None:
    """Open `path` alone in JupyterLab (the notebook opened before closed) and wait for its kernel to be idle.

    One kernel serves the notebooks the module opens, one after another: the running session moves to `path` (the
    server's sessions API) and JupyterLab, finding a session there, connects to it instead of starting a kernel.
    Each lesson's own setup and explorer cells still run, in its own notebook; a kernel each (torch imported in
    each) cost about 5 s of CPU a lesson, and test_notebooks runs every lesson in a fresh kernel."""
    # a notebook whose cells ran is unsaved: disposed, it closes without JupyterLab's "save your changes?" dialog
    page.evaluate("() => { for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) w.dispose(); }")
    sessions = _api(lab["base"], "/api/sessions")
    for session in sessions[1:]:
        _api(lab["base"], f"/api/sessions/{session['id']}", method="DELETE")
    if sessions:
        _api(lab["base"], f"/api/sessions/{sessions[0]['id']}", method="PATCH", body={"path": path, "name": path})
    page.evaluate("async path => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }", path)
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for()
    # the status bar's kernel status (looked for there only: not in every cell's text at each poll)
    page.locator("#jp-main-statusbar").get_by_text(re.compile(r"^[^|]+ \| Idle$")).wait_for()


@contextlib.contextmanager
def _explained(page, lab, name: str):
    """On failure: a screenshot `<name>-failure.png`, the text of any dialog JupyterLab shows and the end of the
    server's log, in the message."""
    try:
        yield
    except Exception as err:
        page.screenshot(path=str(ARTIFACTS / f"{name}-failure.png"))
        dialogs = page.locator(".jp-Dialog")
        shown = "\n".join(dialogs.nth(i).inner_text() for i in range(dialogs.count())) or "none"
        log = "\n".join(lab["log"].read_text().splitlines()[-20:])
        raise AssertionError(
            f"{name}: {err}\nJupyterLab dialogs: {shown}\n"
            f"screenshot: {ARTIFACTS / f'{name}-failure.png'}\nend of the server log:\n{log}"
        ) from err


def _run_cell(page, cell, timeout_s: float = 60) -> None:
    """Select `cell` in command mode, run it (Ctrl+Enter) as a learner would, and wait until it has run."""
    from playwright.sync_api import expect

    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Control+Enter")
    expect(cell.locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]:"), timeout=timeout_s * 1000)


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_explorer_redraws_when_a_slider_moves(page, lab, lesson):
    from playwright.sync_api import expect

    label, key = LESSONS[lesson]
    with _explained(page, lab, lesson):
        _open(page, lab, f"lessons/{lesson}.ipynb")
        cells = page.locator(".jp-Notebook .jp-Cell")
        setup = page.locator(".jp-Notebook .jp-CodeCell").first
        explorer = cells.filter(has=page.locator(".jp-InputArea", has_text="explorers.")).last
        _run_cell(page, setup)
        _run_cell(page, explorer)
        picture = explorer.locator(".widget-output img")
        readout = explorer.locator("pre.twoprim-readout")
        picture.wait_for()
        before = (picture.get_attribute("src"), readout.inner_text())

        name = page.locator(".widget-label", has_text=re.compile(f"^{label}$"))
        slider = explorer.locator(".widget-slider", has=name)
        handle = slider.locator(".noUi-handle")
        value_before = slider.locator(".widget-readout").inner_text()
        handle.focus()
        page.keyboard.press(key)
        expect(picture).not_to_have_attribute("src", before[0], timeout=60_000)  # a new picture replaces the old
        after = (picture.get_attribute("src"), readout.inner_text())
        explorer.scroll_into_view_if_needed()
        explorer.screenshot(path=str(ARTIFACTS / f"{lesson}.png"))
        assert slider.locator(".widget-readout").inner_text() != value_before, f"the {label!r} slider did not move"
        assert after[0] != before[0], f"{lesson}: the explorer's picture did not change when {label!r} moved"
        assert after[1] != before[1], f"{lesson}: the readout did not change when {label!r} moved:\n{after[1]}"


def test_validate_button_reports_the_verdict(page, lab):
    with _explained(page, lab, "ex01_dot_validate"):
        _open(page, lab, "exercises/ex01_dot/ex01_dot.ipynb")
        page.get_by_role("button", name="Validate").click()
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=120_000)
        page.screenshot(path=str(ARTIFACTS / "ex01_dot_validate.png"))
        title, body = dialog.locator(".jp-Dialog-header").inner_text(), dialog.locator(".jp-Dialog-body").inner_text()
        assert title.strip() == "Validation Results", f"{title}\n{body}"
        assert "The following cell failed:" in body and "NotImplementedError" in body, body  # the blank exercise
