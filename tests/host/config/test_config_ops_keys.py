"""The aviso-server 0.13 operations keys as settings: homepage defaults, the per-schema replay
cap reaching the watch settings (``logging.otlp``: tests/plugins/otlp)."""

from __future__ import annotations

from typing import Any

import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.settings import DEFAULT_HOMEPAGE_URLS
from aviso_host.plugins import discover

REGISTRY = discover()


def document(**sections: Any) -> dict[str, Any]:
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "in_memory"},
        **sections,
    }


def test_homepage_defaults_and_partial_override() -> None:
    homepage = {"client_repository_url": "https://example.org/client"}
    settings = settings_from_document(
        document(application={"host": "127.0.0.1", "port": 8000, "homepage": homepage}), REGISTRY
    )
    links = settings.application.homepage
    assert links.client_repository_url == "https://example.org/client"
    assert links.server_repository_url == DEFAULT_HOMEPAGE_URLS["server_repository_url"]


@pytest.mark.parametrize(
    "url", ["https://host:99999/", "https:///path", " https://host/", "mailto:x@host"]
)
def test_homepage_urls_that_are_not_usable_links_fail(url: str) -> None:
    application = {"host": "h", "port": 1, "homepage": {"client_documentation_url": url}}
    with pytest.raises(ConfigError, match=r"^application\.homepage\.client_documentation_url: "):
        settings_from_document(document(application=application), REGISTRY)


def test_the_schema_cap_reaches_only_its_event_type() -> None:
    schema = {
        "max_historical_notifications": 7,
        "topic": {"base": "capped", "key_order": ["k"]},
        "identifier": {"k": {"type": "StringHandler", "required": True}},
    }
    other = {**schema, "topic": {"base": "other", "key_order": ["k"]}}
    del other["max_historical_notifications"]
    settings = settings_from_document(
        document(
            watch_endpoint={"max_historical_notifications": 50},
            notification_schema={"capped": schema, "other": other},
        ),
        REGISTRY,
    )
    assert settings.watch_for("capped").max_historical_notifications == 7
    assert settings.watch_for("other") is settings.watch
    assert settings.watch_for("undeclared") is settings.watch
