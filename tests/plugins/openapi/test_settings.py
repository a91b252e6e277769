"""The API description states this server's settings: the limits it names carry the
configured values, the aggregate request's bounds are the configured ones, and the handler
types of the configured schemas are described identifier types."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import warnings
from typing import ClassVar

from starlette.exceptions import StarletteDeprecationWarning

from aviso_host.app import create_app
from aviso_host.config import settings_from_document
from aviso_host.config.settings import LimitSettings
from aviso_host.plugins import discover
from aviso_plugins.types import FieldHandler
from tests.support.configs import API_EXAMPLE
from tests.support.openapi import served_document

with warnings.catch_warnings():
    # As in the ops route tests: Starlette warns when its test client falls back to httpx.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

MENTION = re.compile(r"`(limits\.\w+)` \(([^)]*)\)")


def _stated(document: object) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name, value in MENTION.findall(json.dumps(document)):
        found.setdefault(name, set()).add(value)
    return found


def test_every_named_limit_is_stated_with_its_default() -> None:
    stated = _stated(served_document(API_EXAMPLE))
    limits = LimitSettings()
    assert stated["limits.max_body_bytes"] == {str(limits.max_body_bytes)}
    for name, values in stated.items():
        value = getattr(limits, name.split(".")[1])
        assert values == {str(int(value))}, name


def test_the_served_document_states_the_configured_limits() -> None:
    config = copy.deepcopy(API_EXAMPLE)
    config["limits"] = {"max_body_bytes": 4096, "min_aggregate_debounce_ms": 2500}
    registry = discover()
    app = create_app(settings_from_document(config, registry), registry)
    with TestClient(app) as client:
        document = client.get("/api-docs/openapi.json").json()
    stated = _stated(document)
    assert stated["limits.max_body_bytes"] == {"4096"}
    assert stated["limits.min_aggregate_debounce_ms"] == {"2500"}
    debounce = document["components"]["schemas"]["AggregateRequest"]["properties"]["debounce_ms"]
    # Below the configured minimum the server refuses the window, and the default follows it.
    assert (debounce["minimum"], debounce["default"]) == (2500, 2500)


def test_a_plugin_handler_type_a_schema_uses_is_a_described_identifier_type() -> None:
    registry = discover()
    registry = dataclasses.replace(
        registry, field_handlers={**registry.field_handlers, "PaintHandler": PaintHandler}
    )
    config = {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "in_memory"},
        "notification_schema": {
            "paint": {"identifier": {"colour": {"type": "PaintHandler", "required": True}}}
        },
    }
    app = create_app(settings_from_document(config, registry), registry)
    with TestClient(app) as client:
        document = client.get("/api-docs/openapi.json").json()
    rule = document["components"]["schemas"]["IdentifierRule"]
    assert rule["properties"]["type"]["enum"][-1] == "PaintHandler"
    assert "StringHandler" in rule["properties"]["type"]["enum"]


class PaintHandler(FieldHandler):
    type_name: ClassVar[str] = "PaintHandler"

    def canonicalise(self, text: str) -> str:
        return text.lower()


def test_examples_quoting_the_configuration_are_left_as_written() -> None:
    config = copy.deepcopy(API_EXAMPLE)
    text = "Named after `limits.no_such_key` (5) in the runbook."
    for definition in next(iter(config["notification_schema"].values()))["identifier"].values():
        definition["description"] = text
    registry = discover()
    app = create_app(settings_from_document(config, registry), registry)
    with TestClient(app) as client:
        document = client.get("/api-docs/openapi.json").json()
    assert text in json.dumps(document)
