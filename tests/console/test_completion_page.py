"""``/completion`` in a real headless Chromium: an open group filling up member by member,
then leaving the list when it is complete."""

from __future__ import annotations

import importlib.util
import os

import httpx
import pytest

if importlib.util.find_spec("playwright") is None and not os.environ.get("CI"):
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from playwright.sync_api import Page, expect

from tests.console.browser_support import screenshot
from tests.plugins.completion.support import config
from tests.support.server import running_server


def notify(url: str, member: int) -> None:
    body = {"event_type": "ens", "identifier": {"run": "r1", "step": "24", "member": str(member)}}
    assert httpx.post(f"{url}/api/v1/notification", json=body, timeout=10).status_code == 200


def test_a_group_fills_up_then_leaves_the_list(page: Page) -> None:
    with running_server(config()) as server:
        page.goto(f"{server.url}/completion")
        expect(page.locator("#status")).to_contain_text("0 open group(s)")
        notify(server.url, 0)
        row = page.locator("tr", has_text="run=r1 step=24")
        expect(row.locator(".count")).to_have_text("1 / 5")
        for member in (1, 2):
            notify(server.url, member)
        expect(row.locator(".count")).to_have_text("3 / 5")
        screenshot(page, "completion-filling")
        for member in (3, 4):
            notify(server.url, member)
        expect(row).to_have_count(0)
        expect(page.locator("#status")).to_contain_text("0 open group(s)")
