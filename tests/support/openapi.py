"""The OpenAPI document an app serves: the host's parts and what its plugins describe
(hook ``aviso_openapi``)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from starlette.exceptions import StarletteDeprecationWarning

from aviso_plugins.openapi import OpenApiSources
from aviso_plugins.testing import build_app

with warnings.catch_warnings():
    # Starlette warns when its test client falls back to httpx.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def served_document_bytes(config: Mapping[str, Any], plugins: Iterable[object] = ()) -> bytes:
    """``/api-docs/openapi.json`` as the app of ``config`` (the built-in plugins plus
    ``plugins``) serves it."""
    with TestClient(build_app(config, plugins)) as client:
        response = client.get("/api-docs/openapi.json")
    assert response.status_code == 200
    return response.content


def served_document(config: Mapping[str, Any], plugins: Iterable[object] = ()) -> dict[str, Any]:
    """:func:`served_document_bytes`, parsed."""
    document: dict[str, Any] = json.loads(served_document_bytes(config, plugins))
    return document


def openapi_sources(config: Mapping[str, Any], plugins: Iterable[object] = ()) -> OpenApiSources:
    """What the app of ``config`` gives the built-in plugin ``openapi`` to describe."""
    sources: OpenApiSources = build_app(
        config, plugins
    ).state.service.plugin_access.openapi_sources()
    return sources
