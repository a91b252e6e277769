"""Plugins describe their routes in the OpenAPI document (hook ``aviso_openapi``): the host
merges each contribution after its own parts, states the limits its text names, and refuses
a contribution that describes what is described already, or a hook that fails."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from openapi_spec_validator import validate
from starlette.exceptions import StarletteDeprecationWarning

from aviso_host.plugins import PluginError
from aviso_plugins import hookimpl
from aviso_plugins.openapi import (
    OpenApiContext,
    OpenApiContribution,
    json_response,
    object_schema,
    schema_ref,
)
from aviso_plugins.service import ServiceAccess
from aviso_plugins.testing import build_app
from tests.support.configs import API_EXAMPLE

with warnings.catch_warnings():
    # As in the ops route tests: Starlette warns when its test client falls back to httpx.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def _operation(description: str = "The newest sequence.") -> dict[str, Any]:
    return {
        "tags": ["latest"],
        "operationId": "latest",
        "summary": "The last sequence stored",
        "description": description,
        "responses": {
            "200": json_response("The sequence.", schema_ref("Latest"), one={"sequence": 62}),
        },
    }


class Latest:
    """Describes one route, and keeps the context it was given."""

    def __init__(self, path: str = "/api/v1/latest", schema: str = "Latest") -> None:
        self.path, self.schema = path, schema
        self.context: OpenApiContext | None = None

    @hookimpl
    def aviso_openapi(self, service: ServiceAccess, context: OpenApiContext) -> OpenApiContribution:
        self.context = context
        return OpenApiContribution(
            paths={self.path: {"get": _operation("Bodies over `limits.max_body_bytes` fail.")}},
            schemas={self.schema: object_schema({"sequence": {"type": "integer"}})},
            tags=[{"name": "latest", "description": "The newest notification."}],
            error_codes=["NOTHING_STORED", "SSE_STREAM_INITIALIZATION_FAILED"],
        )


def _document(*plugins: object, config: dict[str, Any] | None = None) -> dict[str, Any]:
    with TestClient(build_app(config or API_EXAMPLE, plugins)) as client:
        document: dict[str, Any] = client.get("/api-docs/openapi.json").json()
    return document


def test_a_contribution_is_merged_after_the_hosts_parts() -> None:
    plugin = Latest()
    document = _document(plugin, config={**API_EXAMPLE, "limits": {"max_body_bytes": 4096}})
    validate(document)
    paths = list(document["paths"])
    # After the API's own paths, before the operational ones.
    assert paths.index("/api/v1/latest") < paths.index("/health")
    assert paths.index("/api/v1/latest") > paths.index("/api/v1/watch")
    operation = document["paths"]["/api/v1/latest"]["get"]
    assert operation["description"] == "Bodies over `limits.max_body_bytes` (4096) fail."
    assert list(document["components"]["schemas"])[-1] == "Latest"
    assert document["tags"][-1] == {"name": "latest", "description": "The newest notification."}
    codes = document["components"]["schemas"]["RequestError"]["properties"]["code"]["enum"]
    # A code the host lists already is listed once; the HTTP edge's codes stay last.
    assert codes.count("SSE_STREAM_INITIALIZATION_FAILED") == 1
    assert codes.index("NOTHING_STORED") < codes.index("PAYLOAD_TOO_LARGE")


def test_the_context_holds_the_hosts_examples_and_schemas() -> None:
    plugin = Latest()
    _document(plugin)
    context = plugin.context
    assert context is not None
    watch = next(iter(context.examples["watch"].values()))
    assert watch["event_type"] in API_EXAMPLE["notification_schema"]
    assert context.event_type in API_EXAMPLE["notification_schema"]
    assert {"event_type", "identifier"} <= set(context.schemas["StreamRequest"]["properties"])
    assert "live-notification" in context.stream_event_data
    assert "Server-Sent Events" in context.stream_description


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        ([Latest(path="/api/v1/watch")], "describes the path '/api/v1/watch'"),
        ([Latest(path="/health")], "the host describes the path '/health'"),
        ([Latest(schema="RequestError")], "describes the component schema 'RequestError'"),
        ([Latest(), Latest(path="/api/v1/other", schema="Other")], "describes the tag 'latest'"),
    ],
)
def test_what_is_described_already_fails_startup(plugins: list[object], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        build_app(API_EXAMPLE, plugins)


class Raising:
    @hookimpl
    def aviso_openapi(self) -> OpenApiContribution:
        raise LookupError("no description today")


class Wrong:
    @hookimpl
    def aviso_openapi(self) -> dict[str, Any]:
        return {"paths": {}}


class Silent:
    @hookimpl
    def aviso_openapi(self) -> None:
        return None


def test_a_failing_hook_fails_startup_naming_its_plugin() -> None:
    with pytest.raises(PluginError, match=r"aviso_openapi\(\) raised LookupError: no desc"):
        build_app(API_EXAMPLE, [Raising()])
    with pytest.raises(PluginError, match=r"returned \{'paths': \{\}\}, not an OpenApiContrib"):
        build_app(API_EXAMPLE, [Wrong()])


def test_a_plugin_that_describes_nothing_changes_nothing() -> None:
    assert _document(Silent()) == _document()


class Scribbler:
    """Edits every part of the context it is given, as a careless plugin might."""

    @hookimpl
    def aviso_openapi(self, service: ServiceAccess, context: OpenApiContext) -> None:
        for bodies in context.examples.values():
            for body in bodies.values():
                body["event_type"] = "scribbled"  # type: ignore[index]
        context.schemas["StreamRequest"]["description"] = "scribbled"  # type: ignore[index]
        context.stream_event_data.clear()  # type: ignore[attr-defined]


def test_a_plugin_editing_its_context_changes_nothing_in_the_hosts_document() -> None:
    assert _document(Scribbler()) == _document()
