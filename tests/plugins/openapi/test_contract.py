"""The API description against the code: every route described, every error code listed,
every example valid against its own schema."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from starlette.routing import Route

from aviso_builtins.openapi.document import NOT_DESCRIBED_PATHS
from aviso_host.app import create_app
from aviso_host.auth.responses import auth_error
from aviso_host.config import settings_from_document
from aviso_host.errors import UNKNOWN_EVENT_TYPE_CODE, Endpoint
from aviso_host.plugins import discover
from aviso_host.service import Service
from tests.support.configs import API_EXAMPLE
from tests.support.openapi import served_document

ROOT = Path(__file__).resolve().parents[3]
HOST = ROOT / "host"
SOURCES = (HOST, ROOT / "plugins" / "subscriptions")
"""Where the routes the document describes raise their errors: the host, and the built-in
plugin serving the subscription routes."""
DOCUMENT_URI = "urn:aviso:openapi"
# The factories whose second argument is an error code.
CODE_FACTORIES = {"ApiError", "ApiRefusal", "parse_error"}


@pytest.fixture(scope="module")
def service() -> Service:
    registry = discover()
    return Service(settings_from_document(API_EXAMPLE, registry), registry)


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return served_document(API_EXAMPLE)


def test_every_route_is_described(document: dict[str, Any]) -> None:
    registry = discover()
    app = create_app(settings_from_document(API_EXAMPLE, registry), registry)
    # Plugins' own pages (``aviso_extra_routes``, never under /api/v1, the document's own
    # among them) are theirs to document.
    assert registry.manager is not None
    access = app.state.service.plugin_access
    from_plugins = {
        route.path
        for routes in registry.manager.hook.aviso_extra_routes(service=access)
        for route in routes
        if isinstance(route, Route)
    }
    assert "/api-docs/openapi.json" in from_plugins
    served = {
        route.path: {method.lower() for method in route.methods or ()} - {"head"}
        for route in app.routes
        if isinstance(route, Route)
        and route.path not in NOT_DESCRIBED_PATHS
        and route.path not in from_plugins
    }
    described = {path: set(item) for path, item in document["paths"].items()}
    assert described == served
    assert {route.path for route in app.routes if isinstance(route, Route)} >= NOT_DESCRIBED_PATHS


def _raised_codes() -> set[str]:
    """Every code literal passed to an error factory anywhere in the served routes' code."""
    codes = set()
    for source in (path for directory in SOURCES for path in directory.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in CODE_FACTORIES
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                codes.add(node.args[1].value)
    return codes


def test_every_error_code_is_listed(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    listed = {
        code
        for name in ("RequestError", "AuthError", "UnknownEventTypeError")
        for code in schemas[name]["properties"]["code"]["enum"]
    }
    raised = (
        _raised_codes()
        | {endpoint.validation_code for endpoint in Endpoint}
        | {UNKNOWN_EVENT_TYPE_CODE}
        | {auth_error(status, "-").code for status in (401, 403, 500, 503)}
    )
    assert "INVALID_JSON" in raised and "PAYLOAD_TOO_LARGE" in raised, "the scan finds codes"
    assert listed == raised


def _examples(document: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """``(JSON pointer of the schema, media type, example value)`` for every example."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            escaped = path.replace("~", "~0").replace("/", "~1")
            base = f"/paths/{escaped}/{method}"
            body = operation.get("requestBody", {}).get("content", {})
            places = [(f"{base}/requestBody/content", body)]
            for status, response in operation["responses"].items():
                if "$ref" not in response:
                    content = response.get("content", {})
                    places.append((f"{base}/responses/{status}/content", content))
            for pointer, content in places:
                for media_type, entry in content.items():
                    media = media_type.replace("/", "~1")
                    for example in entry.get("examples", {}).values():
                        yield f"{pointer}/{media}/schema", media_type, example["value"]
    for name, response in document["components"]["responses"].items():
        for media_type, entry in response.get("content", {}).items():
            media = media_type.replace("/", "~1")
            for example in entry.get("examples", {}).values():
                pointer = f"/components/responses/{name}/content/{media}/schema"
                yield pointer, media_type, example["value"]


def _sse_events(transcript: str) -> Iterator[dict[str, str]]:
    for block in transcript.strip("\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        yield {"event": fields["event"], "data": fields["data"]}


def _data_schema_pointer(document: dict[str, Any], pointer: str, name: str) -> str:
    """The pointer of the ``contentSchema`` of event ``name``'s data."""
    schema = _resolve(document, pointer)
    if "$ref" in schema:
        pointer = schema["$ref"].removeprefix("#")
        schema = _resolve(document, pointer)
    for index, branch in enumerate(schema["allOf"]):
        if branch["if"]["properties"]["event"]["const"] == name:
            return f"{pointer}/allOf/{index}/then/properties/data/contentSchema"
    raise AssertionError(f"no data schema for event {name!r}")


def _resolve(document: dict[str, Any], pointer: str) -> Any:
    node: Any = document
    for part in pointer.lstrip("/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_every_example_matches_its_schema(document: dict[str, Any]) -> None:
    registry = Registry().with_resource(DOCUMENT_URI, DRAFT202012.create_resource(document))

    def validator(pointer: str) -> Draft202012Validator:
        reference = f"{DOCUMENT_URI}#{quote(pointer, safe='/~')}"
        return Draft202012Validator({"$ref": reference}, registry=registry)

    checked = 0
    for pointer, media_type, value in _examples(document):
        if media_type == "text/event-stream":
            for event in _sse_events(value):
                validator(pointer).validate(event)
                data_pointer = _data_schema_pointer(document, pointer, event["event"])
                validator(data_pointer).validate(json.loads(event["data"]))
                checked += 1
        elif media_type == "application/json":
            validator(pointer).validate(value)
            checked += 1
    assert checked >= 50
