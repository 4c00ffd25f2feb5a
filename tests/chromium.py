"""Debian's headless Chromium driven by Playwright (which downloads no browser): shared by the browser tests."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
MISSING = (
    f"{CHROMIUM} is missing: the browser tests drive Debian's Chromium. Install it with "
    f"`apt-get install chromium` (CI installs it in .ci/run)."
)


def launch(playwright, extra_args: tuple[str, ...] = ()):
    """A headless Chromium from /usr/bin/chromium; fails (never skips) when it is missing."""
    assert CHROMIUM.is_file(), MISSING
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, *extra_args], headless=True)
