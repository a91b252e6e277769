"""``/swagger-ui/`` in a real headless Chromium: it renders the API description the built-in
plugin ``openapi`` serves, and says so when that plugin is blocked and there is none."""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("playwright") is None and not os.environ.get("CI"):
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from playwright.sync_api import Page, expect

from aviso_host.plugins import BLOCK_ENV
from tests.support.configs import API_EXAMPLE
from tests.support.server import running_server


def test_swagger_ui_renders_the_served_description(page: Page) -> None:
    with running_server(API_EXAMPLE) as server:
        page.goto(f"{server.url}/swagger-ui/")
        expect(page.locator("#swagger-ui")).to_contain_text("Aviso Notification Service API")


def test_without_the_openapi_plugin_swagger_ui_says_there_is_no_description(
    page: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BLOCK_ENV, "openapi")
    with running_server(API_EXAMPLE) as server:
        page.goto(f"{server.url}/swagger-ui/")
        expect(page.locator("#swagger-ui")).to_have_text(
            "Could not load the API description (../api-docs/openapi.json): this server "
            "does not serve it (the plugin 'openapi' is blocked)"
        )
