"""The subscriptions' part of the OpenAPI document, described by the plugin (hook
``aviso_openapi``): with the plugin the served document is the one the host served when it
described the subscriptions itself, their settings are stated with the configured values,
and without it (blocked, or turned off) the document lacks their parts and the server still
serves."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.openapi import served_document, served_document_bytes

SNAPSHOT = Path(__file__).resolve().parents[2] / "fixtures" / "openapi" / "api_example.json"
"""The document served for ``API_EXAMPLE``, byte for byte. After an intended change to the
description, rewrite it with ``AVISO_WRITE_OPENAPI_SNAPSHOT=1`` and review its diff."""

PATHS = {
    "/api/v1/subscriptions",
    "/api/v1/subscriptions/{name}",
    "/api/v1/subscriptions/{name}/events",
    "/api/v1/subscriptions/{name}/ack",
    "/api/v1/subscriptions/{name}/dead-letters",
    "/api/v1/subscriptions/{name}/dead-letters/redrive",
}
SCHEMAS = {
    "SubscriptionRequest",
    "AcknowledgeRequest",
    "SubscriptionDefinition",
    "Subscription",
    "SubscriptionList",
    "SubscriptionStreamEvent",
    "DeadLetters",
    "Redrive",
}
CODES = {"SUBSCRIPTION_NOT_FOUND", "TOO_MANY_SUBSCRIPTIONS", "INVALID_ACKNOWLEDGEMENT"}


def _codes(document: dict[str, Any]) -> set[str]:
    return set(document["components"]["schemas"]["RequestError"]["properties"]["code"]["enum"])


def test_the_served_document_is_the_snapshot_byte_for_byte() -> None:
    served = served_document_bytes(API_EXAMPLE)
    if os.environ.get("AVISO_WRITE_OPENAPI_SNAPSHOT"):
        SNAPSHOT.write_bytes(served)
    assert served == SNAPSHOT.read_bytes()


def test_the_settings_the_text_names_are_the_configured_ones() -> None:
    config = with_changes(API_EXAMPLE, subscriptions={"max_per_user": 7, "max_total": 70})
    text = json.dumps(served_document(config))
    stated = set(re.findall(r"`(subscriptions\.\w+)` \(([^)]*)\)", text))
    assert stated == {
        ("subscriptions.max_per_user", "7"),
        ("subscriptions.max_total", "70"),
        ("subscriptions.max_definition_bytes", "16384"),
    }


@pytest.mark.parametrize("how", ["blocked", "disabled"])
def test_without_the_subscriptions_the_document_lacks_their_parts(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = served_document(API_EXAMPLE)
    config = API_EXAMPLE
    if how == "blocked":
        monkeypatch.setenv("AVISO_BLOCK_PLUGINS", "subscriptions")
    else:
        config = with_changes(API_EXAMPLE, subscriptions={"enabled": False})
    document = served_document(config)
    validate(document)
    assert not PATHS & set(document["paths"])
    assert not SCHEMAS & set(document["components"]["schemas"])
    assert "subscriptions" not in {tag["name"] for tag in document["tags"]}
    assert not CODES & _codes(document)
    # The rest is the document with the plugin, less those parts.
    assert set(full["paths"]) - set(document["paths"]) == PATHS
    assert set(full["components"]["schemas"]) - set(document["components"]["schemas"]) == SCHEMAS
