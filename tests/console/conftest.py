"""A real headless Chromium (Debian's ``chromium``) driven by Playwright, for the console.

Only the system browser is used (``playwright install`` is never needed). Without it the
tests skip, except under CI (``CI`` set), where a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.console.browser_support import TIMEOUT_MS


def _chromium() -> str | None:
    """``AVISO_CHROMIUM`` when set (an executable path), else chromium on ``PATH``."""
    configured = os.environ.get("AVISO_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests (.ci/run installs chromium)")
    pytest.skip(reason)


# Module scope, not session: Playwright's synchronous API keeps an event loop running in the
# main thread while it is started, which would break ``asyncio.run`` in every later test.
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = _chromium()
    if executable is None:
        _unavailable("no chromium on PATH (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        # CI containers run as root, where Chromium's sandbox cannot start, and often have a
        # tiny /dev/shm.
        launched = playwright.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = browser.new_context(viewport={"width": 1280, "height": 860})  # type: ignore[attr-defined]
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()
