"""What the service tells the API description (``ServiceAccess.openapi_sources``): the
configured event types with their handlers and public schemas, the limits as configured,
every endpoint's refusal words, and the plugins' parts."""

from __future__ import annotations

import pytest

from aviso_host.errors import Endpoint
from aviso_host.plugins import BLOCK_ENV, PluginError
from aviso_host.service import server_version
from aviso_plugins import hookimpl
from aviso_plugins.openapi import OpenApiContext, OpenApiContribution
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.openapi import openapi_sources


def test_the_sources_state_the_configuration() -> None:
    config = with_changes(API_EXAMPLE, limits={"max_body_bytes": 4096})
    sources = openapi_sources(config)
    assert sources.version == server_version()
    assert list(sources.event_schemas) == sorted(API_EXAMPLE["notification_schema"])
    gauge = sources.event_schemas["river_gauge"]
    assert list(gauge.fields) == ["basin", "date", "level"]
    assert gauge.fields["level"].type_name == "IntHandler"
    assert gauge.public["identifier"]["basin"]["type"] == "StringHandler"
    assert sources.limits["max_body_bytes"] == 4096
    assert [(e.name, e.label, e.validation_code) for e in sources.endpoints] == [
        (endpoint.name.lower(), endpoint.label, endpoint.validation_code) for endpoint in Endpoint
    ]


def test_without_schemas_there_is_no_event_type() -> None:
    config = {key: value for key, value in API_EXAMPLE.items() if key != "notification_schema"}
    assert openapi_sources(config).event_schemas == {}


class Named:
    @hookimpl
    def aviso_openapi(self, context: OpenApiContext) -> OpenApiContribution:
        return OpenApiContribution(tags=[{"name": context.event_type}])


class Raising:
    @hookimpl
    def aviso_openapi(self) -> OpenApiContribution:
        raise LookupError("no description today")


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """No document built with the app, and no built-in plugin describing routes: the test's
    plugin is the only one asked."""
    monkeypatch.setenv(BLOCK_ENV, "openapi,subscriptions,aggregate")


def _context() -> OpenApiContext:
    return OpenApiContext(
        examples={}, event_type="gauge", schemas={}, stream_description="", stream_event_data={}
    )


@pytest.mark.usefixtures("alone")
def test_the_contributions_are_each_plugins_answer_with_its_name() -> None:
    found = openapi_sources(API_EXAMPLE, [Named()]).contributions(_context())
    assert [part for _, part in found] == [OpenApiContribution(tags=[{"name": "gauge"}])]


@pytest.mark.usefixtures("alone")
def test_a_failing_contribution_names_its_plugin() -> None:
    sources = openapi_sources(API_EXAMPLE, [Raising()])
    with pytest.raises(PluginError, match=r"aviso_openapi\(\) raised LookupError"):
        sources.contributions(_context())
